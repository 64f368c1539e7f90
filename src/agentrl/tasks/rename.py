"""randomize_names: give a task's function an unrelated name so the name carries no hint about the bug.

Not a general refactoring tool: it renames the whole-word function name (and its `<fn>.py` /
`test_<fn>.py` files) and then verifies that no trace of the old name is left anywhere the agent sees.
"""

from __future__ import annotations

import dataclasses
import random
import re

from agentrl.tasks.task import EditOp, Task

# Neutral words: no arithmetic, ordering or container meaning, so a name made of them hints at nothing.
_ADJECTIVES = ("amber", "brisk", "coral", "dusky", "elder", "fabled", "gentle", "hollow", "ivory", "jade",
               "keen", "lunar", "misty", "noble", "opal", "placid", "quiet", "russet", "silver", "tawny",
               "umber", "velvet", "woven", "young", "zesty")
_NOUNS = ("badger", "cedar", "delta", "falcon", "garnet", "harbor", "island", "juniper", "kestrel", "lagoon",
          "meadow", "nebula", "orchid", "pebble", "quarry", "raven", "spruce", "thistle", "valley", "willow",
          "yarrow", "zephyr", "aspen", "bramble", "cobble")


def neutral_name(rng: random.Random, avoid: str = "") -> str:
    """A fresh `adjective_noun` identifier that does not occur as a substring of `avoid`."""
    for _ in range(1000):
        name = f"{rng.choice(_ADJECTIVES)}_{rng.choice(_NOUNS)}"
        if name not in avoid:
            return name
    raise ValueError("could not find a neutral name absent from the task's text")


def visible_texts(task: Task) -> list[str]:
    """Everything the agent can see of a task: file names, file texts, the entry name, the public
    tests, the edit ops' names and texts. (Hidden tests and the reference are renamed as well.)"""
    out = [task.entry, task.source_file, *task.public_tests]
    for path, text in task.files.items():
        out += [path, text]
    for op in task.edit_ops:
        out += [op.name, op.old, op.new]
    return out


def randomize_names(task: Task, rng: random.Random) -> Task:
    """A copy of `task` whose function, source file and test file are renamed to a neutral name.

    Every whole-word occurrence of `task.entry` is replaced in file names and texts, public and
    hidden tests, the reference, the test setup and the edit ops. `meta["original_entry"]` keeps
    the old name (meta is never shown to the agent). Raises ValueError if the old name would still
    appear as a substring of anything the agent sees (e.g. inside a longer identifier).
    """
    old = task.entry
    everything = "\n".join(visible_texts(task) + [task.reference, task.test_setup, *task.hidden_tests])
    new = neutral_name(rng, avoid=everything)
    word = re.compile(rf"\b{re.escape(old)}\b")

    def sub(text: str) -> str:
        return word.sub(new, text)

    def sub_path(path: str) -> str:
        if path == f"{old}.py":
            return f"{new}.py"
        if path == f"test_{old}.py":
            return f"test_{new}.py"
        return sub(path)

    renamed = dataclasses.replace(
        task,
        files={sub_path(p): sub(t) for p, t in task.files.items()},
        entry=new,
        source_file=sub_path(task.source_file),
        public_tests=tuple(sub(t) for t in task.public_tests),
        hidden_tests=tuple(sub(t) for t in task.hidden_tests),
        reference=sub(task.reference),
        test_setup=sub(task.test_setup),
        edit_ops=tuple(EditOp(op.name, sub(op.old), sub(op.new), op.correct) for op in task.edit_ops),
        meta={**task.meta, "original_entry": task.meta.get("original_entry", old)},
    )
    leaks = [t for t in visible_texts(renamed) if old in t]
    if leaks:
        raise ValueError(f"task {task.id}: old name {old!r} still visible after renaming, e.g. in {leaks[0][:80]!r}")
    return renamed
