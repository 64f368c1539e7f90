"""`agentrl tasks list|show|export|check`: the CLI front end of the bug-fix task gym. No task logic here."""

from __future__ import annotations

import argparse
import random
import sys
import time

from agentrl.cli.args import non_negative_int, positive_int


def _families(text: str | None) -> list[str] | None:
    return [f.strip() for f in text.split(",") if f.strip()] if text else None


def _common(p: argparse.ArgumentParser, n_default: int | None) -> None:
    """Flags every sub-command shares: which tasks to generate."""
    if n_default is not None:
        p.add_argument("--n", type=positive_int, default=n_default, help=f"number of tasks (default {n_default})")
    p.add_argument("--split", choices=("train", "heldout"), default="train", help="which split (default train)")
    p.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    p.add_argument("--families", default=None, help="comma-separated family names (default: all)")


def register(subparsers) -> None:
    """Add `agentrl tasks ...` to the top-level CLI."""
    tasks = subparsers.add_parser("tasks", help="generate, inspect, export and check bug-fix tasks")
    sub = tasks.add_subparsers(dest="tasks_command", metavar="ACTION", help="what to do")
    tasks.set_defaults(func=lambda args: (tasks.print_help(), 2)[1])

    p = sub.add_parser("list", help="list families, or with --n the generated tasks")
    _common(p, None)
    p.add_argument("--n", type=int, default=None, help="list this many generated tasks instead of the families")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="print one task: files, public tests, edit ops (hidden parts with --hidden)")
    p.add_argument("task_id", nargs="?", help="a task id as printed by `tasks list --n N`")
    _common(p, None)
    p.add_argument("--index", type=int, default=0, help="with --families F: the index-th task of F (default 0)")
    p.add_argument("--rename", action="store_true", help="apply randomize_names first (rng seeded by --seed)")
    p.add_argument("--hidden", action="store_true", help="also print hidden tests and the reference fix")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("export", help="write tasks to a JSONL file (schema: docs/task-schema.md)")
    _common(p, 100)
    p.add_argument("--out", required=True, help="output .jsonl path")
    p.add_argument("--heldout-set", action="store_true",
                   help="export the write-up's held-out set (2 heldout tasks each of minmax, range, compare, zero, init)")
    p.add_argument("--rename", action="store_true", help="apply randomize_names to every task (rng seeded by --seed)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("check", help="run references, buggy originals and wrong ops in the sandbox; table per family")
    _common(p, 500)
    p.add_argument("--file", default=None, help="check the tasks of this JSONL file instead of generating them")
    p.add_argument("--rename", action="store_true", help="apply randomize_names first (rng seeded by --seed)")
    p.add_argument("--show-problems", type=non_negative_int, default=10, help="print at most this many problems (default 10)")
    p.set_defaults(func=cmd_check)


def _generate(args) -> list:
    from agentrl.tasks.generate import make_tasks

    return make_tasks(args.n, families=_families(args.families), seed=args.seed, split=args.split)


def cmd_list(args) -> int:
    """Print the family registry, or the ids of `--n` generated tasks."""
    from rich.console import Console
    from rich.table import Table

    from agentrl.tasks.families import FAMILIES
    from agentrl.tasks.generate import resolve_families

    if args.n is None:
        wanted = {f.name for f in resolve_families(_families(args.families))}  # ValueError on an unknown name
        table = Table(title=f"{len(FAMILIES)} bug-fix task families")
        for col in ("family", "correct op", "bug"):
            table.add_column(col)
        for f in FAMILIES.values():
            if f.name in wanted:
                table.add_row(f.name, f.bug_kind, f.description)
    else:
        table = Table(title=f"{args.n} {args.split} tasks (seed {args.seed})")
        table.add_column("id", no_wrap=True)
        for col in ("family", "entry", "public", "hidden", "edit ops"):
            table.add_column(col)
        for t in _generate(args):
            table.add_row(t.id, t.family, t.entry, str(len(t.public_tests)), str(len(t.hidden_tests)),
                          ", ".join(op.name for op in t.edit_ops))
    Console().print(table)
    return 0


MAX_SHOW_INDEX = 5000  # `tasks show --index` walks a family's stream; past this it is minutes, not a lookup


def _find(args):
    """The task named by `args.task_id`, or the `--index`-th of the one family in `--families`."""
    from agentrl.tasks.generate import SPLITS, family_stream, resolve_families

    if args.task_id:
        family, _, rest = args.task_id.partition("-")
        split = rest.partition("-")[0]
        if split not in SPLITS:
            raise ValueError(f"task id {args.task_id!r}: expected <family>-<split>-<hash>")
        stream = family_stream(resolve_families([family])[0], args.seed, split)
        for _ in range(5000):
            task = next(stream)
            if task.id == args.task_id:
                return task
        raise ValueError(f"task {args.task_id!r} not among the first 5000 {split} tasks of {family} (seed {args.seed})")
    fams = _families(args.families)
    if not fams or len(fams) != 1 or args.index < 0:
        raise ValueError("give a task id, or --families F (one family) with --index I >= 0")
    if args.index >= MAX_SHOW_INDEX:  # the stream is walked one task at a time (~3.5 ms each)
        raise ValueError(f"--index {args.index}: expected < {MAX_SHOW_INDEX} (tasks are generated in order; "
                         "export a larger set with `agentrl tasks export` instead)")
    stream = family_stream(resolve_families(fams)[0], args.seed, args.split)
    for _ in range(args.index):
        next(stream)
    return next(stream)


def cmd_show(args) -> int:
    """Print what the agent sees of one task (and, with --hidden, what it does not)."""
    from agentrl.tasks.rename import randomize_names

    task = _find(args)
    if args.rename:
        task = randomize_names(task, random.Random(args.seed))
    print(f"# {task.id}  family={task.family}  split={task.split}  entry={task.entry}")
    for path, text in task.files.items():
        print(f"\n--- {path}\n{text}", end="" if text.endswith("\n") else "\n")
    print("\n--- edit ops")
    for op in task.edit_ops:
        mark = "  (correct)" if args.hidden and op.correct else ""
        print(f"{op.name}{mark}: {op.old!r} -> {op.new!r}")
    if args.hidden:
        print(f"\n--- hidden tests ({len(task.hidden_tests)})")
        print("\n".join(task.hidden_tests))
        print(f"\n--- reference {task.source_file}\n{task.reference}", end="")
    return 0


def cmd_export(args) -> int:
    """Write tasks as JSONL; prints the count and path."""
    from agentrl.preflight import check_output_file
    from agentrl.tasks.generate import heldout_tasks
    from agentrl.tasks.jsonl import save_tasks
    from agentrl.tasks.rename import randomize_names

    check_output_file(args.out, "--out")  # before generating: a bad path fails fast, names the flag
    if args.heldout_set:
        tasks = heldout_tasks(seed=args.seed) if args.families is None else \
            heldout_tasks(families=_families(args.families), seed=args.seed)
    else:
        tasks = _generate(args)
    if args.rename:
        rng = random.Random(args.seed)
        tasks = [randomize_names(t, rng) for t in tasks]
    n = save_tasks(tasks, args.out)
    print(f"wrote {n} tasks to {args.out}")
    return 0


def cmd_check(args) -> int:
    """Grade tasks in the sandbox and print a table per family; exit 1 if any invariant breaks."""
    from rich.console import Console

    from agentrl.tasks.check import check_tasks, render_table
    from agentrl.tasks.jsonl import load_tasks

    start = time.perf_counter()
    tasks = load_tasks(args.file) if args.file else _generate(args)
    if not tasks:
        raise ValueError(f"{args.file}: no tasks to check (expected one Task object per line; docs/task-schema.md)")
    if args.rename:
        from agentrl.tasks.rename import randomize_names

        rng = random.Random(args.seed)
        tasks = [randomize_names(t, rng) for t in tasks]
    gen_s = time.perf_counter() - start
    stats = check_tasks(tasks)
    total_s = time.perf_counter() - start
    console = Console()
    source = args.file or f"{len(tasks)} {args.split} tasks, seed {args.seed}"
    console.print(render_table(stats, title=f"bug-fix task check: {source}"))
    problems = [p for s in stats.values() for p in s.problems]
    for p in problems[: args.show_problems]:
        console.print(f"[red]problem[/] {p}", highlight=False)
    if len(problems) > args.show_problems:
        console.print(f"... and {len(problems) - args.show_problems} more problems")
    ok = all(s.ok for s in stats.values()) and bool(stats)
    console.print(f"{'OK' if ok else 'FAILED'}: {len(tasks)} tasks in {total_s:.1f} s "
                  f"(generation {gen_s:.1f} s)", highlight=False)
    sys.stdout.flush()
    return 0 if ok else 1
