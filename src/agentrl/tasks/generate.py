"""Build Tasks from family Specs: make_tasks, heldout_tasks, splits. Not a test runner (see check.py).

Expected values of the tests come from running the family's *reference* source in this process.
That source is our own authored template output, never model-written code, so this does not break
the rule that model code runs only in agentrl.sandbox; the buggy file and the edit ops are never run here.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
from collections.abc import Iterator, Sequence

from agentrl.preflight import did_you_mean
from agentrl.tasks.families import FAMILIES, WRITEUP_FAMILY_NAMES, Family, Spec
from agentrl.tasks.task import EditOp, Task

SPLITS = ("train", "heldout")
HELDOUT_PERCENT = 20  # share of each family's instance space that is held out
MAX_CONSECUTIVE_MISSES = 2000  # draws without a new instance of the split before a family counts as exhausted


def instance_key(family: str, spec: Spec) -> str:
    """sha256 hex of the instance's content (family, reference text, bug); the split and id derive from it.

    Hashing the generated texts (not the RNG path) keeps splits and ids stable across code versions
    that do not change what a family generates, and across seeds that happen to draw the same instance.
    """
    blob = json.dumps({"family": family, "reference": spec.reference, "bug": [spec.bug.old, spec.bug.new]},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def split_of(key: str) -> str:
    """"heldout" for HELDOUT_PERCENT% of instance keys, else "train" (a pure function of the key)."""
    return "heldout" if int(key[:8], 16) % 100 < HELDOUT_PERCENT else "train"


def expected_values(reference: str, exprs: Sequence[str], label: str) -> list[object]:
    """Evaluate each call expression against a fresh import of our reference source.

    Returns one Python literal per expression. Raises ValueError (naming `label` and the expression)
    if the reference raises or returns a value whose repr is not a Python literal that round-trips.
    """
    code = compile(reference, f"<reference {label}>", "exec")
    out = []
    for expr in exprs:
        namespace: dict = {}
        try:
            exec(code, namespace)  # our generated reference only, see the module docstring
            value = eval(expr, namespace)
        except Exception as e:
            raise ValueError(f"{label}: reference raised {type(e).__name__}: {e} on {expr}") from e
        try:
            same = ast.literal_eval(repr(value)) == value
        except (ValueError, SyntaxError):
            same = False
        if not same:
            raise ValueError(f"{label}: expected value of {expr} is not a round-tripping literal: {value!r}")
        out.append(value)
    return out


def render_test_file(module: str, public_tests: Sequence[str]) -> str:
    """The agent-visible pytest file: `from <module> import *`, then one test function per snippet."""
    parts = [f"from {module} import *\n"]
    for i, snippet in enumerate(public_tests, 1):
        body = "\n".join("    " + line for line in snippet.splitlines())
        parts.append(f"\ndef test_{i}():\n{body}\n")
    return "\n".join(parts)


def _replace_once(text: str, old: str, new: str, what: str) -> str:
    if not old or text.count(old) != 1:
        raise ValueError(f"{what}: {old!r} must occur exactly once, found {text.count(old) if old else 0}")
    return text.replace(old, new)


def _test_calls(spec: Spec) -> tuple[list[str], list[str]]:
    """The distinct public calls, and the distinct hidden calls (public first), of `spec`, in order."""
    public = list(dict.fromkeys(spec.public))
    return public, list(dict.fromkeys(public + list(spec.hidden)))


def _enough_tests(public: list[str], calls: list[str]) -> bool:
    """Whether a spec's distinct calls (`_test_calls`) are 2-4 public and >= 8 hidden.

    A family draws its test arguments at random, so now and then two calls coincide and a draw falls
    short; `family_stream` redraws those, and `build_task` refuses them.
    """
    return 2 <= len(public) <= 4 and len(calls) >= 8


def build_task(family: Family, spec: Spec) -> Task:
    """Turn a Spec into a Task; raises ValueError if the Spec breaks a structural invariant.

    Structural invariants checked here (behavioural ones are checked by `agentrl tasks check`):
    the bug text occurs once in the reference; every op's `old` occurs once in the buggy file and
    differs from `new`; the correct op restores the reference; op names are distinct and from OP_NAMES;
    2-4 public tests and >= 8 hidden tests.
    """
    from agentrl.tasks.families import OP_NAMES

    key = instance_key(family.name, spec)
    label = f"{family.name}:{key[:10]}"
    buggy = _replace_once(spec.reference, spec.bug.old, spec.bug.new, f"{label} bug")
    ops = [EditOp(spec.bug.name, spec.bug.new, spec.bug.old, correct=True)]
    ops += [EditOp(m.name, m.old, m.new) for m in spec.wrong]
    for op in ops:
        fixed = _replace_once(buggy, op.old, op.new, f"{label} op {op.name}")
        if op.old == op.new or op.name not in OP_NAMES:
            raise ValueError(f"{label}: op {op.name} is a no-op or not in the op vocabulary")
        if op.correct and fixed != spec.reference:
            raise ValueError(f"{label}: the correct op does not restore the reference")
    if len({op.name for op in ops}) != len(ops):
        raise ValueError(f"{label}: op names must be distinct")
    public, calls = _test_calls(spec)
    if not _enough_tests(public, calls):
        raise ValueError(f"{label}: need 2-4 public and >= 8 hidden tests, got {len(public)} and {len(calls)}")
    values = expected_values(spec.reference, calls, label)
    snippets = {c: f"assert {c} == {v!r}" for c, v in zip(calls, values, strict=True)}
    public_tests = tuple(snippets[c] for c in public)
    fn = spec.fn
    split = split_of(key)
    return Task(
        id=f"{family.name}-{split}-{key[:10]}",
        family=family.name,
        split=split,
        files={f"{fn}.py": buggy, f"test_{fn}.py": render_test_file(fn, public_tests)},
        entry=fn,
        source_file=f"{fn}.py",
        public_tests=public_tests,
        hidden_tests=tuple(snippets[c] for c in calls),
        reference=spec.reference,
        edit_ops=tuple(sorted(ops, key=lambda op: op.name)),  # sorted: menu position never hints
        meta=json.loads(json.dumps({"original_entry": fn, "instance_key": key, "bug_kind": spec.bug.name,
                                    "params": spec.params})),
    )


def family_stream(family: Family, seed: int, split: str) -> Iterator[Task]:
    """Distinct tasks of one family and split, in a fixed order for (seed, family, split).

    A draw whose random test calls coincide, leaving too few distinct tests (`_enough_tests`), is
    redrawn like a repeat, so it never ends the stream. Raises ValueError when MAX_CONSECUTIVE_MISSES
    draws in a row give no new instance of the split.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    rng = random.Random(f"agentrl.tasks:{seed}:{family.name}")  # str seeds are stable across processes
    seen: set[str] = set()
    misses = 0
    while True:
        spec = family.generate(rng)
        key = instance_key(family.name, spec)
        if key in seen or split_of(key) != split or not _enough_tests(*_test_calls(spec)):
            misses += 1
            if misses > MAX_CONSECUTIVE_MISSES:
                raise ValueError(f"family {family.name!r} ran out of distinct {split} instances after {len(seen)}: "
                                 f"ask for fewer tasks per family (--train-size / --eval-size / --n)")
            continue
        misses = 0
        seen.add(key)
        yield build_task(family, spec)


def resolve_families(families: Sequence[str] | None) -> list[Family]:
    """The Family objects for `families` (all, in registry order, when None); ValueError on an unknown name."""
    names = list(FAMILIES) if families is None else list(families)
    unknown = [n for n in names if n not in FAMILIES]
    if not names:
        raise ValueError(f"no task family named (an empty family list); known: {', '.join(FAMILIES)}")
    if unknown:
        guesses = "".join(did_you_mean(n, FAMILIES) for n in unknown)
        raise ValueError(f"unknown task families {unknown}{guesses}; known: {', '.join(FAMILIES)}")
    return [FAMILIES[n] for n in names]


def make_tasks(n: int, families: Sequence[str] | None = None, seed: int = 0, split: str = "train") -> list[Task]:
    """`n` distinct bug-fix tasks, round-robin over `families` (all when None); deterministic in the arguments.

    Each family has its own RNG stream, so `make_tasks(n)` is a prefix of `make_tasks(m)` for m > n,
    and adding a family elsewhere never changes another family's instances. Train and heldout tasks
    are disjoint by instance (see `split_of`). Raises ValueError for n < 0, an unknown family or split.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    fams = resolve_families(families)
    streams = [family_stream(f, seed, split) for f in fams]
    return [next(streams[i % len(fams)]) for i in range(n)]


def heldout_tasks(n_per_family: int = 2, families: Sequence[str] = WRITEUP_FAMILY_NAMES, seed: int = 0) -> list[Task]:
    """The write-up's held-out set: `n_per_family` heldout tasks of each family, family by family.

    Defaults give 10 tasks: two each of minmax, range, compare, zero, init, in that order.
    """
    out: list[Task] = []
    for fam in resolve_families(families):
        stream = family_stream(fam, seed, "heldout")
        out += [next(stream) for _ in range(n_per_family)]
    return out
