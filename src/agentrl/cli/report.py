"""`agentrl report [--html] RUN_DIR|RESULTS.json`: validate a results file, draw its plots, print a summary,
write the HTML report. Not training; the rows are agentrl.report.summary's."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentrl.report.summary import summary_rows


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


def report_main(args: argparse.Namespace) -> int:
    """Validate, plot, print. Returns 0; bad input raises FileNotFoundError/ValueError (exit 2 via cli)."""
    from rich.console import Console
    from rich.table import Table

    from agentrl.preflight import check_output_dir, check_output_file
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
