"""Benchmark: runs/s of a typical hidden-test grading, fresh interpreter per job vs the warm pool.

A typical grading: one ~20-line module under test and 8 assert snippets (the bug-fix gym's shape).
Prints both rates and the pool/fresh ratio (issue 3 target: >= 5x on the 2-core CPU machine).

    python bench/bench_sandbox.py [--jobs 60] [--backend auto] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

from agentrl.sandbox import Sandbox, TestJob

SRC = '''def clamp(x, lo, hi):
    """Clamp x into [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def minmax(xs):
    lo = hi = xs[0]
    for x in xs[1:]:
        lo = min(lo, x)
        hi = max(hi, x)
    return lo, hi
'''
TESTS = ("assert clamp(5, 0, 3) == 3", "assert clamp(-1, 0, 3) == 0", "assert clamp(2, 0, 3) == 2",
         "assert minmax([3, 1, 2]) == (1, 3)", "assert minmax([5]) == (5, 5)",
         "assert minmax([-1, -5, 0]) == (-5, 0)", "assert clamp(0, 0, 0) == 0", "assert minmax([2, 2]) == (2, 2)")


def rate(sb: Sandbox, jobs: list[TestJob], workers: int) -> float:
    """Graded jobs per second (after one warm-up job); asserts every report is correct."""
    sb.run_tests(jobs[0])
    t0 = time.perf_counter()
    reports = sb.run_tests_batch(jobs, max_workers=workers)
    dt = time.perf_counter() - t0
    assert all(r.all_passed for r in reports), [r.error for r in reports if not r.all_passed][:1]
    return len(jobs) / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--backend", default="auto", choices=["auto", "bwrap", "rlimit"])
    ap.add_argument("--workers", type=int, default=2, help="concurrent jobs (both modes)")
    args = ap.parse_args()
    jobs = [TestJob(files={"fn.py": SRC}, module="fn", tests=TESTS) for _ in range(args.jobs)]
    with Sandbox(backend=args.backend, max_workers=args.workers, warm_pool=False) as sb:
        fresh = rate(sb, jobs, args.workers)
        backend = sb.backend
    with Sandbox(backend=args.backend, max_workers=args.workers, warm_pool=True) as sb:
        sb.warm()
        pooled = rate(sb, jobs, args.workers)
    print(f"backend={backend} jobs={args.jobs} workers={args.workers}")
    print(f"fresh subprocess: {fresh:8.1f} gradings/s")
    print(f"warm pool:        {pooled:8.1f} gradings/s")
    print(f"ratio pool/fresh: {pooled / fresh:8.2f}x")


if __name__ == "__main__":
    main()
