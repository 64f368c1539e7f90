"""Issue 26's figures in one table, from the JSON the benchmarks wrote: item | figure | value | threshold |
ratio | met/short (or `reported` for a figure without a target).

Not a benchmark: it reads DIR/<part>.json, the parts of bench/run_issue26.sh (each `{"meta": ..., "rows":
[...]}` as bench/_common.Table writes it), and recomputes every figure from the rows, with each benchmark's
own `targets(rows)` where issue 15 already defined the figure (renumbered to issue 26's items), so a part
stopped at its limit still gives the figures of the rows it finished, and an absent figure reads `missing`.
Items: 1 decode at the bound (rollout), 2 continuous batching (ragged), 3 KV kept in place (step: the
coding-tools step's time and peak), 4 sampler = trainer (logprob: fp32
check rows; rollout: bf16 check rows), 5 the default update (update), 6 the real models (rollout_<m>,
update_<m>, step_<m> for m in coder05, coder15). Writes DIR/summary.txt and DIR/summary.json.

    PYTHONPATH=src python bench/issue26_summary.py DIR
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import target  # noqa: E402 - bench/ is on the path only from here
from issue15_summary import summary_main  # noqa: E402

# part -> (benchmark module, issue-15 target id -> issue-26 item; ids not listed are left out). The run is bf16
# but for the logprob part, so the fp32 figures the update and step benchmarks also name are left out.
PARTS: dict[str, tuple[str, dict[str, str]]] = {
    "rollout": ("bench_rollout", {"1": "1", "4": "4"}),
    "rollout_eager": ("bench_rollout", {"1": "1"}),  # the layers' own modules, eager (the default before 2026-12-04)
    "rollout_unfused": ("bench_rollout", {"1": "1"}),  # compiled regions, projections not fused
    "rollout_flex": ("bench_rollout", {"1": "1"}),  # decode_attention flex (compiled layer, FlexAttention)
    "logprob": ("bench_rollout", {"4": "4"}),
    "ragged": ("bench_ragged", {"4": "2"}),
    "step": ("bench_step", {"7": "3"}),
    "step_tok": ("bench_step", {"7": "3"}),  # the same step with RLConfig's default update (16k-token microbatches)
    "update": ("bench_update", {"5": "5"}),
}
BF16_ONLY = ("step", "step_tok", "update")
HF_VARIANTS = ("rollout_eager",)  # variant parts that also run plain generate (their end-to-end figure counts)
REAL_MODELS = {"coder05": "Qwen2.5-Coder-0.5B", "coder15": "Qwen2.5-Coder-1.5B"}
STEP_LIMIT_S = {"coder05": None, "coder15": 10.0}  # issue 26 item 6: the 1.5B's coding-tools step <= 10 s


def load_part(path: Path) -> tuple[dict, list[dict], str]:
    """(meta, rows, '') from a Table JSON file, or ({}, [], why) when it is absent or unreadable."""
    if not path.is_file():
        return {}, [], f"{path.name} absent (part not run or stopped before its first row; see log.txt)"
    try:
        data = json.loads(path.read_text())
        return dict(data.get("meta") or {}), list(data["rows"]), ""
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {}, [], f"{path.name} unreadable: {type(e).__name__}: {e}"


def _mean(vals: list[float]) -> float | None:
    return sum(vals) / len(vals) if vals else None


def real_model_figures(key: str, parts: dict[str, list[dict]]) -> list[dict[str, Any]]:
    """Item 6 for one real model (`key` in REAL_MODELS): decode fraction of the bound at 64 / 256 (item 1's
    thresholds), update tokens/s (bf16, packed, the default microbatching: reported), the coding-tools step's
    seconds (the 1.5B: <= 10 s; else reported) and peak GB (reported), from rollout_/update_/step_<key>."""
    name = REAL_MODELS[key]
    out = []
    roll = [r for r in parts.get(f"rollout_{key}", []) if not r.get("check")]
    for att in dict.fromkeys(r.get("attn", "matmul") for r in roll) or ["matmul"]:
        by = {r["batch"]: r for r in roll if r.get("attn", "matmul") == att}
        for b, thr in ((64, 0.5), (256, 0.7)):
            out.append(target("6", f"{name}: decode-only fraction of the bandwidth bound at batch {b} "
                                   f"(decode_attention={att})", by.get(b, {}).get("frac_bound"), ">=", thr))
    upd = [r for r in parts.get(f"update_{key}", []) if r.get("dtype") == "bf16" and r.get("grad_ckpt") == "off"
           and "extra" not in r]
    out.append(target("6", f"{name}: update tokens/s, bf16, packed, 4-row microbatches, no checkpointing",
                      upd[0].get("packed_all_tok_s") if upd else None, "info", 0))
    steps = [r for r in parts.get(f"step_{key}", []) if r.get("env") == "coding-tools" and r.get("dtype") == "bf16"
             and isinstance(r.get("step_s"), float)]
    later = [r for r in steps if r["step"] >= 1] or steps
    where = f"steps {','.join(str(r['step']) for r in later)}" if later else "no step"
    limit = STEP_LIMIT_S[key]
    out.append(target("6", f"{name}: seconds per coding-tools step (8 x 8, bf16), {where}",
                      _mean([r["step_s"] for r in later]), "<=" if limit else "info", limit or 0))
    peak = _mean([r["peak_gib"] * 2**30 / 1e9 for r in later])
    phases = "/".join(sorted({r.get("peak_phase", "?") for r in later}))
    out.append(target("6", f"{name}: peak GB of the coding-tools step, {where}, peak in {phases or '-'}",
                      peak, "info", 0))
    return out


def collect(folder: Path) -> tuple[list[dict], list[str]]:
    """Every issue-26 figure (in item order, then part order) and the problems met."""
    figures, problems, parts = [], [], {}
    names = list(PARTS) + [f"{p}_{k}" for k in REAL_MODELS for p in ("rollout", "update", "step")]
    for part in names:
        meta, rows, why = load_part(folder / f"{part}.json")
        if why:
            problems.append(why)
        parts[part] = rows
        if part not in PARTS:
            continue
        module, renumber = PARTS[part]
        try:
            mod = importlib.import_module(module)
            found = (mod.targets(rows, meta.get("dtype", "bf16"), meta.get("default_attention", "matmul"))
                     if module == "bench_rollout" else mod.targets(rows))
        except Exception as e:  # noqa: BLE001 - one part's bad rows must not lose the other parts' figures
            problems.append(f"{part}: targets() failed: {type(e).__name__}: {e}")
            continue
        for t in found:
            if part in BF16_ONLY and "fp32" in t["figure"]:
                continue
            if part.startswith("rollout_") and "plain generate" in t["figure"] and part not in HF_VARIANTS:
                continue  # the variants run without plain generate (--skip-hf): only their decode fractions
            if t["target"] in renumber:
                tag = f" [{part}]" if part.startswith(("rollout_", "step_tok")) else ""  # the variant measured
                figures.append({"part": part, **t, "figure": t["figure"] + tag, "target": renumber[t["target"]]})
    for key in REAL_MODELS:
        figures += [{"part": f"*_{key}", **t} for t in real_model_figures(key, parts)]
    figures.sort(key=lambda t: int(t["target"]))
    return figures, problems


def main() -> int:
    return summary_main(__doc__.splitlines()[0], "run_issue26.sh", collect)


if __name__ == "__main__":
    sys.exit(main())
