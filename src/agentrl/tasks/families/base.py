"""The family contract: a Spec (one generated instance) and the helpers generators share. Not a runner.

A family generator draws one instance from a `random.Random` and returns a `Spec`: the reference
source text, the one authored bug (a substring of the reference and its buggy replacement), the
wrong edit ops (substring replacements elsewhere in the buggy file), and the test calls as Python
expressions. `agentrl.tasks.generate` turns a Spec into a `Task`, computing expected values from
the reference.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

# The shared vocabulary of edit-op names. A family's correct op uses the name of its bug kind; its
# wrong ops use names of *other* kinds, so a wrong op is a fix for a bug this task does not have.
OP_NAMES: frozenset[str] = frozenset({
    "fix_minmax", "fix_range_end", "fix_range_start", "fix_compare", "add_zero_guard", "fix_init",
    "fix_slice", "fix_operator", "fix_sign", "fix_return", "fix_negation", "fix_accumulate",
    "fix_sort", "fix_division", "fix_default_arg", "fix_case", "fix_strip", "fix_index",
    "swap_args", "fix_logic", "fix_constant",
})


@dataclass(frozen=True)
class Mutation:
    """One substring replacement: in the file it applies to, `old` (occurring exactly once) -> `new`.

    For a Spec's `bug`, `old` is the correct text in the *reference* and `new` the buggy text.
    For a wrong op, `old` is text in the *buggy* file and `new` the plausible-but-wrong edit.
    """

    name: str
    old: str
    new: str


@dataclass(frozen=True)
class Spec:
    """One generated instance of a family, before expected values are computed.

    Attributes:
        fn: name of the function under test (also the module name: `<fn>.py`).
        reference: full text of the correct source file.
        bug: the authored bug: `reference` with `bug.old` -> `bug.new` is the buggy file.
        wrong: plausible wrong ops on the buggy file (each named from OP_NAMES, != bug.name).
        public: 2-4 call expressions shown to the agent; at least one reveals the bug.
        hidden: further call expressions (edge cases); hidden tests are public + hidden (>= 8).
        params: the drawn parameters (documentation and debugging; the split hashes the texts).
    """

    fn: str
    reference: str
    bug: Mutation
    wrong: tuple[Mutation, ...]
    public: tuple[str, ...]
    hidden: tuple[str, ...]
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """A task family: a named generator of Specs with one bug kind (the correct op's name)."""

    name: str
    bug_kind: str
    description: str
    generate: Callable[[random.Random], Spec]


# Neutral pools for the drawn parts of a function. Function names are multi-word so that no
# function name is a substring of an argument or local name (renaming relies on this).
SEQ_NAMES = ("values", "nums", "items", "readings", "samples", "data", "xs", "series", "points")
NUM_NAMES = ("limit", "cutoff", "bound", "threshold", "level", "mark")


def pick(rng: random.Random, pool: tuple[str, ...] | list[str]) -> str:
    """One element of `pool`, drawn with `rng`."""
    return pool[rng.randrange(len(pool))]


def ints(rng: random.Random, n: int, lo: int = -9, hi: int = 20) -> list[int]:
    """`n` integers drawn uniformly from [lo, hi]."""
    return [rng.randint(lo, hi) for _ in range(n)]


def distinct_ints(rng: random.Random, n: int, lo: int = -9, hi: int = 30) -> list[int]:
    """`n` distinct integers from [lo, hi] in random order (needs hi - lo + 1 >= n)."""
    return rng.sample(range(lo, hi + 1), n)


def call(fn: str, *args: object) -> str:
    """A call expression `fn(arg0, arg1, ...)` with each argument written as its repr."""
    return f"{fn}({', '.join(repr(a) for a in args)})"


def source(*lines: str) -> str:
    """Join source lines into a file text that ends in one newline."""
    return "\n".join(lines).rstrip("\n") + "\n"
