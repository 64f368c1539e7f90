"""`agentrl report RESULTS.json`: validate a results file, draw its plots, print a summary. Not training."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `report` sub-command."""
    p = subparsers.add_parser("report", help="Plots and a summary table of a results file.",
                              description="Validate RESULTS.json, write PNG plots, print a summary table.")
    p.add_argument("results", type=Path, help="results.json written by `agentrl train` or `agentrl eval`")
    p.add_argument("--out_dir", "--out-dir", type=Path, default=None,
                   help="where to write the PNGs (default: <results dir>/plots)")
    p.add_argument("--no_plots", "--no-plots", action="store_true", help="only print the summary")
    p.set_defaults(func=report_main)


def _fmt_iv(iv: dict[str, float], signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(iv['mean'])} [{f.format(iv['lo'])}, {f.format(iv['hi'])}]"


def summary_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) rows of the summary table."""
    cfg = data.get("config", {})
    rows = [("status", data["status"]), ("model", str(cfg.get("model", "?"))), ("env", str(cfg.get("env", "?"))),
            ("seed", str(data["seed"])), ("steps done", str(len(data["steps"]))),
            ("wall clock", "-" if data.get("wall_clock_s") is None else f"{data['wall_clock_s']:.1f} s")]
    for e in data["evaluations"]:
        counts = " ".join(str(t["successes"]) for t in e["tasks"])
        rows.append((f"pass@1 {e['label']} (step {e['step']})", f"{_fmt_iv(e['pass_at_1'])}  counts {counts}"))
    for p in data["paired"]:
        rows.append((f"paired {p['after']} - {p['before']}", _fmt_iv(p["diff"], signed=True)))
    if data["steps"]:
        last = data["steps"][-1]
        for k in ("reward_mean", "entropy", "clip_frac", "grad_norm", "frac_zero_std", "peak_memory_bytes"):
            if last.get(k) is not None:
                rows.append((f"last {k}", f"{last[k]:.4g}"))
    noise = data.get("noise") or {}
    for key in ("train", "eval"):
        rep = noise.get(key) or {}
        if "step_noise" in rep:
            rows.append((f"noise {key}", f"step noise {rep['step_noise']:.3f}, rise {rep['rise']:+.3f} "
                                          f"+- {rep['rise_stderr']:.3f}, t {rep['t']:.2f} (n={rep['n']})"))
    return rows


def report_main(args: argparse.Namespace) -> int:
    """Validate, plot, print. Returns 0; bad input raises FileNotFoundError/ValueError (exit 2 via cli)."""
    from rich.console import Console
    from rich.table import Table

    from agentrl.io.plots import plot_results
    from agentrl.io.results import validate_results

    data = validate_results(args.results)
    table = Table(title=f"agentrl report: {args.results}")
    table.add_column("item")
    table.add_column("value")
    for name, value in summary_rows(data):
        table.add_row(name, value)
    console = Console()
    console.print(table)
    if not args.no_plots:
        out_dir = args.out_dir or args.results.parent / "plots"
        for p in plot_results(data, out_dir):
            console.print(f"wrote {p}")
    return 0
