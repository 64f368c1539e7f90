"""Weight-sync seconds on CPU: the learner's weights into rollout workers (agentrl.scale.workers) over gloo,
against the in-process copy of the asynchronous trainer (RunSession.sync_weights) as the baseline.

    .venv/bin/python bench/dist_weight_sync.py [--workers 1 2] [--repeats 5] [--out results/bench/dist_weight_sync_cpu.json]

Model: tiny-qwen3 (fp32; its 151k-token embedding is most of the bytes). Each row: mean/min seconds of
`WorkerPool.push_weights` (flatten per dtype, broadcast, workers copy in place and acknowledge) to N
spawned workers, bytes sent, MB/s, and the ratio to the in-process copy. Not a test; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="")
    args = p.parse_args()

    import torch

    from agentrl.rl.config import RLConfig
    from agentrl.scale.data_parallel import open_rank_session
    from agentrl.scale.workers import WorkerPool

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = RLConfig.from_flat(env="edit-menu", device="cpu", async_rollouts=True, rollout_workers=1, out=f"{tmp}/run")
        with open_rank_session(cfg, name="bench") as sess:
            copy = sess.rollout_copy()
            local = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                sess.sync_weights(copy)
                local.append(time.perf_counter() - t0)
            base = statistics.mean(local)
            nbytes = sum(t.numel() * t.element_size() for t in sess.model.parameters())
            rows.append({"target": "in-process copy", "workers": 0, "mean_s": base, "min_s": min(local),
                         "bytes": nbytes, "mb_per_s": nbytes / base / 1e6, "ratio_to_copy": 1.0})
            for n in args.workers:
                pool = WorkerPool.start(cfg, n, "cpu")
                try:
                    times = []
                    for v in range(args.repeats):
                        with torch.no_grad():
                            next(sess.model.parameters()).add_(1e-6)  # new weights every push
                        times.append(pool.push_weights(sess.model, version=v))
                    ok = pool.checksums() == [float(sum(t.detach().double().sum() for t in sess.model.parameters()))] * n
                finally:
                    pool.close()
                mean = statistics.mean(times)
                rows.append({"target": f"{n} worker process(es), gloo", "workers": n, "mean_s": mean, "min_s": min(times),
                             "bytes": pool.last_sync_bytes, "mb_per_s": pool.last_sync_bytes / mean / 1e6,
                             "ratio_to_copy": mean / base, "weights_arrived": ok})
    for r in rows:
        print(f"{r['target']:<32} mean {r['mean_s']:.3f} s  min {r['min_s']:.3f} s  {r['bytes'] / 1e6:.1f} MB  "
              f"{r['mb_per_s']:.0f} MB/s  x{r['ratio_to_copy']:.1f} the in-process copy")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"rows": rows, "repeats": args.repeats}, indent=1))


if __name__ == "__main__":
    main()
