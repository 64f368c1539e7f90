"""Training and held-out task sets for a run, by task source. Not the generators or loaders themselves.

Sources: "bugfix" (generated families; held-out = 2 per write-up family unless told otherwise), "mbpp"
(170 train / 257 test problems), "humaneval" (evaluation only: 164 problems, no training split),
"wordle" (the word list's train / held-out words), or a path to a task JSONL file (split by `Task.split`:
"train" trains, anything else is held out).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from agentrl.tasks.task import Task

DEFAULT_EVAL_SIZE = {"bugfix": 10, "mbpp": 64, "humaneval": 164, "wordle": 20}


@dataclass(frozen=True)
class TaskSets:
    """The run's tasks: `train` (sampled each step) and `heldout` (fixed, evaluated before/after)."""

    train: tuple[Task, ...]
    heldout: tuple[Task, ...]
    source: str


def _rename_all(tasks: list[Task], seed: int) -> list[Task]:
    """Rename each bug-fix task with its own seeded RNG (new name depends on (seed, id) only); dataset
    tasks (MBPP, HumanEval, Wordle) keep their names: the problem statement names the function."""
    from agentrl.tasks import FAMILIES
    from agentrl.tasks.rename import randomize_names

    return [randomize_names(t, random.Random(f"{seed}:{t.id}")) if t.family in FAMILIES else t for t in tasks]


def _bugfix(train_size: int, eval_size: int, families: list[str] | None, seed: int,
           eval_families: list[str] | None = None) -> tuple[list, list]:
    from agentrl.tasks import WRITEUP_FAMILY_NAMES, heldout_tasks, make_tasks

    train = make_tasks(train_size or 256, families=families, seed=seed, split="train")
    eval_fams = list(eval_families or families or WRITEUP_FAMILY_NAMES)
    k = eval_size or (2 * len(eval_fams) if (families or eval_families) else DEFAULT_EVAL_SIZE["bugfix"])
    held = heldout_tasks(n_per_family=math.ceil(k / len(eval_fams)), families=eval_fams, seed=seed)
    return train, held[:k]


def _cap(tasks: list[Task], n: int) -> list[Task]:
    return tasks[:n] if n else tasks


def is_task_file(source: str) -> bool:
    """Whether a task source names a task file (agentrl.tasks.jsonl), not one of the built-in sources."""
    return source not in ("bugfix", "mbpp", "humaneval", "wordle") and (
        Path(source).suffix in (".jsonl", ".json") or Path(source).exists())


def task_sets(source: str, *, train_size: int = 0, eval_size: int = 0, families: str = "", eval_families: str = "",
              randomize: bool = True, seed: int = 0, reward_includes_shown_test: bool = False) -> TaskSets:
    """Build the train and held-out sets for `source`.

    Args:
        source: "bugfix" | "mbpp" | "humaneval" | "wordle" | path to a task JSONL file.
        train_size: bugfix: instances to generate (0: 256); datasets: cap on the train split (0: all).
        eval_size: held-out tasks (0: DEFAULT_EVAL_SIZE[source]; a JSONL file: all its held-out tasks).
        families: comma-separated bug-fix families ("" = all); only for "bugfix".
        eval_families: comma-separated bug-fix families of the held-out set ("" = `families`, else the
            write-up's five); only for "bugfix". Families outside `families` measure transfer to unseen bugs.
        randomize: rename functions (bug-fix tasks only; dataset tasks keep their names, which the
            tests call).
        seed: generation and renaming seed.
        reward_includes_shown_test: mbpp / humaneval: also score the test shown in the prompt (default: the
            reward counts only the tests the model was not shown).

    Raises:
        ValueError: unknown source or family, families given for a dataset, an empty set, a negative size
            (a slice would have kept all but the last tasks).
        FileNotFoundError: a dataset or task file that cannot be found.
    """
    for flag, size in (("--train-size", train_size), ("--eval-size", eval_size)):
        if size < 0:
            raise ValueError(f"{flag}: expected an integer >= 0 (0: the source's default), got {size}")
    fams = [f.strip() for f in families.split(",") if f.strip()] or None
    eval_fams = [f.strip() for f in eval_families.split(",") if f.strip()] or None
    for flag, given in (("--families", fams), ("--eval-families", eval_fams)):
        if given and source != "bugfix":
            raise ValueError(f"{flag} applies to --tasks bugfix only, got --tasks {source!r}")
    if source == "bugfix":
        train, held = _bugfix(train_size, eval_size, fams, seed, eval_fams)
    elif source == "mbpp":
        from agentrl.tasks.mbpp import load_mbpp

        shown = reward_includes_shown_test
        train = _cap(load_mbpp(split="train", reward_includes_shown=shown), train_size)
        held = _cap(load_mbpp(split="test", reward_includes_shown=shown), eval_size or DEFAULT_EVAL_SIZE["mbpp"])
    elif source == "humaneval":
        from agentrl.tasks.humaneval import load_humaneval

        held = load_humaneval(reward_includes_shown=reward_includes_shown_test)
        train, held = [], _cap(held, eval_size or DEFAULT_EVAL_SIZE["humaneval"])
    elif source == "wordle":
        from agentrl.tasks.words import wordle_tasks

        rng = random.Random(seed)
        train = wordle_tasks(split="train")
        held = wordle_tasks(split="heldout")
        rng.shuffle(train)
        held = sorted(random.Random(seed + 1).sample(held, min(len(held), eval_size or DEFAULT_EVAL_SIZE["wordle"])),
                      key=lambda t: t.id)
        train = _cap(train, train_size)
    elif is_task_file(source):
        from agentrl.tasks.jsonl import load_tasks

        tasks = load_tasks(source)
        train = _cap([t for t in tasks if t.split == "train"], train_size)
        held = _cap([t for t in tasks if t.split != "train"], eval_size)
    else:
        raise ValueError(f"unknown task source {source!r}; expected bugfix | mbpp | humaneval | wordle | a .jsonl path")
    if randomize:
        train, held = _rename_all(train, seed), _rename_all(held, seed)
    if not held:
        raise ValueError(f"task source {source!r} has no held-out tasks; a task file needs tasks whose split is "
                         "not 'train' (e.g. 'heldout'; see docs/task-schema.md)")
    return TaskSets(tuple(train), tuple(held), source)
