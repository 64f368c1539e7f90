"""Benchmark: runs/s of a typical hidden-test grading, fresh interpreter per job vs the warm pool.

A typical grading: one ~20-line module under test and 8 assert snippets (the bug-fix gym's shape).
Prints both rates and the pool/fresh ratio (issue 3 target: >= 5x on the 2-core CPU machine).

--pytest: instead, `python -m pytest -q` over a public test file of that module (what coding-tools' expert runs
each episode, and most of a coding-tools step's tools phase), through the warm pool with pytest preloaded in its
workers (Sandbox(preload_pytest=True), the default) vs imported by each job: runs/s of each and the ratio.

    python bench/bench_sandbox.py [--jobs 60] [--backend auto] [--workers 2] [--pytest]
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


TEST_FILE = "from fn import clamp, minmax\n\n\n" + "".join(
    f"def test_{i}():\n    {t}\n\n\n" for i, t in enumerate(TESTS))


def pytest_rate(sb: Sandbox, n: int, workers: int) -> float:
    """`python -m pytest -q test_fn.py` runs per second (after one warm-up run); asserts each passed."""
    from concurrent.futures import ThreadPoolExecutor

    files = {"fn.py": SRC, "test_fn.py": TEST_FILE}

    def one(_):
        r = sb.run(files, ["python", "-m", "pytest", "-q", "test_fn.py"])
        assert r.exit_code == 0 and "8 passed" in r.stdout, (r.exit_code, r.stdout[-300:], r.stderr[-300:])

    one(0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(one, range(n)))
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--backend", default="auto", choices=["auto", "bwrap", "rlimit"])
    ap.add_argument("--workers", type=int, default=2, help="concurrent jobs (both modes)")
    ap.add_argument("--pytest", action="store_true", help="pytest runs, pytest preloaded vs not (module doc)")
    args = ap.parse_args()
    if args.pytest:
        rates = {}
        for preload in (False, True):
            with Sandbox(backend=args.backend, max_workers=args.workers, preload_pytest=preload) as sb:
                sb.warm()
                rates[preload] = pytest_rate(sb, args.jobs, args.workers)
                backend = sb.backend
        print(f"backend={backend} jobs={args.jobs} workers={args.workers} (python -m pytest -q, 8 tests)")
        print(f"pytest imported per job: {rates[False]:8.1f} runs/s")
        print(f"pytest preloaded:        {rates[True]:8.1f} runs/s")
        print(f"ratio preloaded/not:     {rates[True] / rates[False]:8.2f}x")
        return
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
