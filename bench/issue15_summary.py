"""Issue 15's targets in one table, from the JSON the benchmarks wrote: target | figure | value | threshold |
ratio | met/short.

Not a benchmark: it reads DIR/<part>.json (rollout, ragged, update, reuse, step: the parts of
bench/run_issue15.sh, each `{"meta": ..., "rows": [...]}` as bench/_common.Table writes it) and recomputes
every target figure with the benchmark's own `targets(rows)`, so a part stopped at its time limit still
gives the figures of the rows it finished, and a figure whose rows are absent reads `missing`. ratio =
value / threshold (a `>=` target is met at ratio >= 1, a `<=` target at ratio <= 1). Writes
DIR/summary.txt and DIR/summary.json and prints the table.

    PYTHONPATH=src python bench/issue15_summary.py DIR
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fmt_num  # noqa: E402 - bench/ is on the path only from here

PARTS = (("rollout", "bench_rollout"), ("ragged", "bench_ragged"), ("update", "bench_update"),
         ("reuse", "bench_reuse"), ("step", "bench_step"))


def load_rows(path: Path) -> tuple[list[dict], str]:
    """(rows, '') from a Table JSON file, or ([], why) when it is absent or unreadable."""
    if not path.is_file():
        return [], f"{path.name} absent (part not run or stopped before its first row; see log.txt)"
    try:
        data = json.loads(path.read_text())
        return list(data["rows"]), ""
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [], f"{path.name} unreadable: {type(e).__name__}: {e}"


def collect(folder: Path) -> tuple[list[dict], list[str]]:
    """Every target figure of every part (in target order, then part order) and the problems met."""
    figures, problems = [], []
    for part, module in PARTS:
        rows, why = load_rows(folder / f"{part}.json")
        if why:
            problems.append(why)
        try:
            found = importlib.import_module(module).targets(rows)
        except Exception as e:  # noqa: BLE001 - one part's bad rows must not lose the other parts' figures
            problems.append(f"{part}: targets() failed: {type(e).__name__}: {e}")
            continue
        figures += [{"part": part, **t} for t in found]
    figures.sort(key=lambda t: int(t["target"]))
    return figures, problems


def render(figures: list[dict], problems: list[str]) -> str:
    head = ("target", "figure", "value", "threshold", "ratio", "status")
    body = [(t["target"], t["figure"], fmt_num(t["value"]),
             "-" if t["op"] == "info" else f"{t['op']} {t['threshold']:.6g}", fmt_num(t["ratio"]), t["status"])
            for t in figures]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *body]]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    counts = {s: sum(t["status"] == s for t in figures) for s in ("met", "short", "missing", "reported")}
    lines.append(f"{len(figures)} figures: {counts['met']} met, {counts['short']} short, {counts['missing']} missing"
                 + (f", {counts['reported']} reported (no target)" if counts["reported"] else ""))
    lines += [f"note: {p}" for p in problems]
    return "\n".join(lines) + "\n"


def summary_main(description: str, runner: str, collect_fn: Any, argv: list[str] | None = None) -> int:
    """The summary command of a bench run folder: `collect_fn(dir) -> (figures, problems)`, rendered into
    <dir>/summary.txt and summary.json and printed (run_issue15.sh's and run_issue26.sh's summaries)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("dir", type=Path, help=f"the folder bench/{runner} wrote")
    args = p.parse_args(argv)
    if not args.dir.is_dir():
        p.error(f"{args.dir} is not a folder")
    figures, problems = collect_fn(args.dir)
    text = render(figures, problems)
    (args.dir / "summary.txt").write_text(text)
    (args.dir / "summary.json").write_text(json.dumps({"figures": figures, "problems": problems}, indent=1))
    print(text, end="")
    return 0


def main() -> int:
    return summary_main(__doc__.splitlines()[0], "run_issue15.sh", collect)


if __name__ == "__main__":
    sys.exit(main())
