"""`agentrl report [--html] RUN_DIR|RESULTS.json`: validate a results file, draw its plots, print a summary,
write the HTML report. Not training."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `report` sub-command."""
    p = subparsers.add_parser("report", help="Plots, a summary table and an HTML report of a run.",
                              description="Validate a run's results.json, write PNG plots, print a summary table; "
                              "with --html also write one self-contained HTML page (report.html beside it).")
    p.add_argument("results", type=Path, help="a run folder (runs/x) or the results.json in it, written by "
                   "`agentrl train` or `agentrl eval`")
    p.add_argument("--html", action="store_true", help="also write <run dir>/report.html (no network needed to "
                   "view it: plots, styles and script are inline)")
    p.add_argument("--out_dir", "--out-dir", type=Path, default=None,
                   help="where to write the PNGs (default: <results dir>/plots, where `agentrl train` writes them)")
    p.add_argument("--no_plots", "--no-plots", action="store_true", help="write no PNGs (the summary is printed; --html still writes the page)")
    p.set_defaults(func=report_main)


MISSING = "n/a"


def _fmt_num(value: Any, spec: str = ".3f") -> str:
    """One number formatted with `spec`; None, NaN, +-inf and non-numbers (bool included) give MISSING."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return MISSING
    return format(value, spec)


def _fmt_iv(iv: Any, signed: bool = False) -> str:
    """`mean [lo, hi]` of a bootstrap interval dict, `mean [n/a: reason]` for an undefined one; missing or
    non-finite parts print as MISSING (agentrl.eval.bootstrap.format_interval)."""
    from agentrl.eval.bootstrap import format_interval

    return format_interval(iv if isinstance(iv, dict) else None, signed=signed)


# last-step rows: (label, candidate keys in the step dict, first present wins)
_LAST_STEP_KEYS = (("reward_mean", ("reward_mean",)), ("entropy", ("entropy",)), ("clip_frac", ("clip_frac",)),
                   ("grad_norm", ("grad_norm",)), ("frac_zero_std", ("adv/frac_zero_std", "frac_zero_std")),
                   ("peak_memory_bytes", ("peak_memory_bytes",)))


def summary_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) rows of the summary table of a validated results dict.

    Any statistic that is None (stored for NaN/inf, or not computable, e.g. a regression stderr over a
    constant reward) or absent prints as MISSING ("n/a"); this never raises on a schema-valid file,
    including partial (running / interrupted / failed) ones.
    """
    cfg = data.get("config") or {}
    steps = data.get("steps") or []
    rows = [("status", str(data.get("status", "?"))), ("model", str(cfg.get("model", "?"))),
            ("env", str(cfg.get("env", "?"))), ("seed", str(data.get("seed", "?"))),
            ("steps done", str(len(steps))), ("wall clock", _fmt_num(data.get("wall_clock_s"), ".1f") + " s")]
    if data.get("error"):
        rows.append(("error", str(data["error"])))
    for e in data.get("evaluations") or []:
        counts = " ".join(str(t.get("successes", MISSING)) for t in e.get("tasks") or [])
        rows.append((f"pass@1 {e.get('label')} (step {e.get('step')})",
                     f"{_fmt_iv(e.get('pass_at_1'))}  counts {counts}"))
    for p in data.get("paired") or []:
        rows.append((f"paired {p.get('after')} - {p.get('before')}", _fmt_iv(p.get("diff"), signed=True)))
    rows += _partial_credit_rows(data)
    if steps:
        last = steps[-1]
        for label, keys in _LAST_STEP_KEYS:
            key = next((k for k in keys if k in last), None)
            if key is not None:
                rows.append((f"last {label}", _fmt_num(last[key], ".4g")))
    noise = data.get("noise") or {}
    for key in ("train", "eval"):
        rep = noise.get(key) or {}
        if "step_noise" in rep:
            rows.append((f"noise {key}", f"step noise {_fmt_num(rep.get('step_noise'))}, "
                                          f"rise {_fmt_num(rep.get('rise'), '+.3f')} "
                                          f"+- {_fmt_num(rep.get('rise_stderr'))}, t {_fmt_num(rep.get('t'), '.2f')} "
                                          f"(n={rep.get('n', MISSING)})"))
    return rows


def _partial_credit_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    """hidden_pass_fraction per evaluation, with what it means next to pass@1 (once)."""
    from agentrl.report.schema import TOOL_STATS

    rows = []
    for e in data.get("evaluations") or []:
        value = (e.get("tool_stats") or {}).get("hidden_pass_fraction")
        if value is not None:
            rows.append((f"hidden_pass_fraction {e.get('label')}", _fmt_num(value)))
    if rows:
        rows.append(("  what it is", TOOL_STATS["hidden_pass_fraction"][0] + "; mean over episodes"))
    return rows


def report_main(args: argparse.Namespace) -> int:
    """Validate, plot, print. Returns 0; bad input raises FileNotFoundError/ValueError (exit 2 via cli)."""
    from rich.console import Console
    from rich.table import Table

    from agentrl.cli_checks import check_output_dir, check_output_file
    from agentrl.report.plots import plot_results, plots_dir
    from agentrl.report.results import validate_results

    path = args.results / "results.json" if args.results.is_dir() else args.results
    data = validate_results(path)
    # Every output place is checked before anything is drawn: a plots/ that is a file, or a report.html
    # that is a directory, is one error line instead of an OSError from inside matplotlib or os.replace.
    plot_dir = args.out_dir or plots_dir(path.parent)
    if not args.no_plots:
        check_output_dir(plot_dir, "--out-dir" if args.out_dir else "plots folder")
    if args.html:
        check_output_file(path.parent / "report.html", "report")
    table = Table(title=f"agentrl report: {path}")
    table.add_column("item")
    table.add_column("value")
    for name, value in summary_rows(data):
        table.add_row(name, value)
    console = Console()
    console.print(table)
    drawn = None
    if not args.no_plots:
        drawn = plot_results(data, plot_dir)
        for p in drawn:
            console.print(f"wrote {p}")
    if args.html:
        from agentrl.report.html import write_html_report

        console.print(f"wrote {write_html_report(data, path.parent / 'report.html', plots=drawn)}")
    return 0
