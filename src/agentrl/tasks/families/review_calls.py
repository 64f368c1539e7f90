"""Code-review bug families, part 2: sort, division, mutable_default, case, strip, index, swap_args, logic."""

from __future__ import annotations

import random

from agentrl.tasks.families.base import (
    SEQ_NAMES,
    Family,
    Mutation,
    Spec,
    call,
    distinct_ints,
    ints,
    pick,
    source,
)

_WORDS = ("ant", "bee", "cat", "dove", "eagle", "ferret", "gecko", "heron", "iguana", "jackal", "kingfisher",
          "lynx", "moose", "newt", "otter", "python", "quail", "raven", "salamander", "toad")


def gen_sort(rng: random.Random) -> Spec:
    """A sort missing its `reverse=True` or its `key=len`."""
    by_len = rng.random() < 0.5
    seq = pick(rng, ("words", "names", "labels")) if by_len else pick(rng, SEQ_NAMES)
    fn = pick(rng, ("shortest", "briefest", "tersest") if by_len else ("highest", "best", "leading")) + "_" + pick(rng, ("few", "group", "picks"))
    k, ranked = pick(rng, ("k", "n", "count", "top")), pick(rng, ("ranked", "ordered", "arranged", "by_rank"))
    fixed = f"sorted({seq}, key=len)" if by_len else f"sorted({seq}, reverse=True)"
    ref = source(f"def {fn}({seq}, {k}):", f"    {ranked} = {fixed}", f"    return {ranked}[:{k}]")
    bug = Mutation("fix_sort", fixed, f"sorted({seq})")
    wrong = (
        Mutation("fix_slice", f"{ranked}[:{k}]", f"{ranked}[:{k} + 1]"),
        Mutation("fix_index", f"{ranked}[:{k}]", f"{ranked}[1:{k} + 1]"),
    )
    def args() -> tuple:
        if by_len:
            while True:  # distinct lengths whose alphabetical order differs from length order
                words = rng.sample(_WORDS, rng.randint(3, 6))
                if len({len(w) for w in words}) == len(words) and sorted(words)[0] != min(words, key=len):
                    return words, rng.randint(1, len(words) - 1)
        xs = distinct_ints(rng, rng.randint(3, 7), -10, 40)
        return xs, rng.randint(1, len(xs) - 1)
    pub = [call(fn, *args()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, *args()) for _ in range(6)] + [call(fn, [], 2), call(fn, ["ab"] if by_len else [3], 1)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"by_len": by_len})


def gen_division(rng: random.Random) -> Spec:
    """Floor division `//` where the result must be a true quotient `/`."""
    total, parts = pick(rng, (("total", "people"), ("distance", "hours"), ("budget", "months"), ("weight", "boxes")))
    fn = pick(rng, ("share", "rate", "portion")) + "_" + pick(rng, ("each", "per_unit", "average"))
    digits = rng.randint(1, 3)
    m = rng.randint(1, 6)
    scale = f" * {m}" if m > 1 else ""
    ref = source(f"def {fn}({total}, {parts}):", f"    each = {total} / {parts}{scale}", f"    return round(each, {digits})")
    bug = Mutation("fix_division", f"{total} / {parts}", f"{total} // {parts}")
    wrong = (
        Mutation("fix_constant", f"round(each, {digits})", "round(each)"),
        Mutation("add_zero_guard", f"    each = {total} // {parts}{scale}\n",
                 f"    if {parts} == 0:\n        return 0\n    each = {total} // {parts}{scale}\n"),
    )
    def args() -> tuple[int, int]:
        d = rng.randint(2, 9)
        return d * rng.randint(1, 30) + rng.randint(1, d - 1), d  # never divisible
    pub = [call(fn, *args()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, *args()) for _ in range(5)] + [call(fn, 12, 4), call(fn, 0, 5), call(fn, -7, 2)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"digits": digits, "m": m})


def gen_mutable_default(rng: random.Random) -> Spec:
    """A mutable default argument (`bucket=[]`) shared between calls."""
    acc = pick(rng, ("bucket", "seen", "log", "history"))
    fn = pick(rng, ("record", "remember", "stash")) + "_" + pick(rng, ("event", "entry", "value"))
    k = rng.randint(1, 4)
    item = pick(rng, ("item", "value", "event"))
    expr = pick(rng, (item, f"{item} * {k}", f"{item} + {k}"))
    ref = source(f"def {fn}({item}, {acc}=None):", f"    if {acc} is None:", f"        {acc} = []",
                 f"    {acc}.append({expr})", f"    return {acc}")
    bug = Mutation("fix_default_arg", f"{acc}=None):\n    if {acc} is None:\n        {acc} = []\n", f"{acc}=[]):\n")
    wrong = (
        Mutation("fix_return", f"    return {acc}\n", f"    return list({acc})\n"),
        Mutation("fix_accumulate", f"    {acc}.append({expr})\n", f"    {acc} = [{expr}]\n"),
    )
    a, b, c = rng.sample(range(1, 50), 3)
    pub = [f"({call(fn, a)}, {call(fn, b)})", call(fn, c, [a])]
    if rng.random() < 0.5:
        pub.append(call(fn, b, []))
    hidden = [f"({call(fn, x)}, {call(fn, y)}, {call(fn, z)})" for x, y, z in [rng.sample(range(1, 50), 3) for _ in range(3)]]
    hidden += [call(fn, a), call(fn, 0, [1, 2]), call(fn, c, []), f"[{fn}(i) for i in range(4)]"]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"expr": expr})


def _gen_normalize(rng: random.Random, kind: str) -> Spec:
    """Shared template of `case` and `strip`: normalising strings misses `.lower()` or `.strip()`."""
    seq = pick(rng, ("names", "tags", "entries", "labels"))
    fn = pick(rng, ("canonical", "normalized", "tidy", "uniform")) + "_" + pick(rng, ("keys", "forms", "spellings"))
    shape = pick(rng, ("list", "set_count", "joined"))
    w = pick(rng, ("w", "raw", "entry", "s"))
    norm = f"{w}.strip().lower()"
    buggy = f"{w}.lower()" if kind == "strip" else f"{w}.strip()"
    ret = {"list": "out", "set_count": "len(out)", "joined": f'{pick(rng, (",", ";", "|"))!r}.join(out)'}[shape]
    if shape == "set_count":
        body = ["    out = set()", f"    for {w} in {seq}:", f"        out.add({norm})", f"    return {ret}"]
    else:
        body = ["    out = []", f"    for {w} in {seq}:", f"        out.append({norm})", f"    return {ret}"]
    ref = source(f"def {fn}({seq}):", *body)
    bug = Mutation(f"fix_{kind}", norm, buggy)
    wrong = (
        Mutation("fix_init", "    out = set()\n" if shape == "set_count" else "    out = []\n",
                 "    out = {\"\"}\n" if shape == "set_count" else "    out = [\"\"]\n"),
        Mutation("fix_range_start", f"in {seq}:", f"in {seq}[1:]:"),
    )
    def messy(w: str) -> str:
        if kind == "case":
            return w.upper() if rng.random() < 0.5 else w.capitalize()
        return " " * rng.randint(1, 2) + w + " " * rng.randint(0, 2)
    def args() -> list[str]:
        words = rng.sample(_WORDS, rng.randint(2, 4))
        out = [messy(w) for w in words] + [w for w in rng.sample(words, 1)]
        rng.shuffle(out)
        return out
    pub = [call(fn, args()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, args()) for _ in range(5)] + [call(fn, []), call(fn, ["ok"]), call(fn, ["  Mixed Case  ", "mixed case"])]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"shape": shape})


def gen_case(rng: random.Random) -> Spec:
    """String normalisation missing `.lower()`."""
    return _gen_normalize(rng, "case")


def gen_strip(rng: random.Random) -> Spec:
    """String normalisation missing `.strip()`."""
    return _gen_normalize(rng, "strip")


def gen_index(rng: random.Random) -> Spec:
    """A wrong index boundary (`ordered[k]` for the 1-based k-th item `ordered[k - 1]`, `[-2]` for `[-1]`)."""
    seq = pick(rng, SEQ_NAMES)
    kth = rng.random() < 0.6
    fn = pick(rng, ("kth", "nth", "rank")) + "_" + pick(rng, ("smallest", "lowest")) if kth else pick(rng, ("greatest", "topmost", "maximal")) + "_entry"
    o, k = pick(rng, ("ordered", "ranked", "arranged")), pick(rng, ("k", "n", "pos", "place"))
    sig, fixed, buggy = (f"{seq}, {k}", f"{o}[{k} - 1]", f"{o}[{k}]") if kth else (seq, f"{o}[-1]", f"{o}[-2]")
    ref = source(f"def {fn}({sig}):", f"    {o} = sorted({seq})", f"    return {fixed}")
    bug = Mutation("fix_index", fixed, buggy)
    wrong = (
        Mutation("fix_sort", f"sorted({seq})", f"sorted({seq}, reverse=True)"),
        Mutation("fix_slice", f"sorted({seq})\n", f"sorted({seq})[1:]\n"),
    )
    def args() -> tuple:
        xs = distinct_ints(rng, rng.randint(3, 7), -20, 60)
        return (xs, rng.randint(1, len(xs))) if kth else (xs,)
    pub = [call(fn, *args()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, *args()) for _ in range(5)]
    hidden += [call(fn, [4], 1), call(fn, [9, 2], 2), call(fn, [3, 1, 2], 1)] if kth else [call(fn, [4, 9]), call(fn, [-3, -8, -1]), call(fn, [5, 1])]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"kth": kth})


def gen_swap_args(rng: random.Random) -> Spec:
    """Two arguments of a call passed in the wrong order (`pow(exp, base)`, `prefix.startswith(w)`)."""
    if rng.random() < 0.5:
        pre, ws, hits = pick(rng, ("prefix", "stem", "head")), pick(rng, ("words", "names", "terms")), pick(rng, ("hits", "found", "matched"))
        fn = pick(rng, ("count", "tally", "number")) + "_" + pick(rng, ("led", "opened", "started")) + "_by"
        w = pick(rng, ("w", "word", "term"))
        ref = source(f"def {fn}({ws}, {pre}):", f"    {hits} = 0", f"    for {w} in {ws}:", f"        if {w}.startswith({pre}):",
                     f"            {hits} += 1", f"    return {hits}")
        fixed, buggy = f"{w}.startswith({pre})", f"{pre}.startswith({w})"
        wrong = (Mutation("fix_init", f"    {hits} = 0\n", f"    {hits} = 1\n"),
                 Mutation("fix_negation", f"if {buggy}:", f"if not {buggy}:"))
        stems = ("ca", "ra", "mo", "ot", "sal")
        pool = ("cat", "camel", "raven", "rat", "moose", "mole", "otter", "salamander", "salmon", "ant")
        def args() -> tuple:
            stem = pick(rng, stems)
            words = rng.sample(pool, rng.randint(2, 5)) + [pick(rng, [w for w in pool if w.startswith(stem)])]
            rng.shuffle(words)  # at least one word starts with the stem, which reveals the swap
            return words, stem
        edges = [([], "ca"), (["ca"], "ca"), (["c", "cat"], "c")]
    else:
        mod = pick(rng, ("modulus", "mod", "wrap"))
        fn = pick(rng, ("power", "raised", "exponent")) + "_" + pick(rng, ("residues", "remainders"))
        b, e = pick(rng, (("base", "exp"), ("b", "e"), ("x", "n"), ("root", "power")))
        pairs = pick(rng, ("pairs", "terms", "specs"))
        ref = source(f"def {fn}({pairs}, {mod}):", "    out = []", f"    for {b}, {e} in {pairs}:",
                     f"        out.append(pow({b}, {e}) % {mod})", "    return out")
        fixed, buggy = f"pow({b}, {e})", f"pow({e}, {b})"
        wrong = (Mutation("fix_init", "    out = []\n", "    out = [0]\n"),
                 Mutation("fix_operator", f"% {mod})", f"// {mod})"))
        def args() -> tuple:
            pairs = [tuple(rng.sample(range(2, 9), 2)) for _ in range(rng.randint(2, 4))]
            return [list(p) for p in pairs if p not in ((2, 4), (4, 2))] or [[2, 3]], rng.randint(1000, 5000)
        edges = [([], 7), ([[3, 3]], 100), ([[2, 4]], 1000)]
    bug = Mutation("swap_args", fixed, buggy)
    pub = []
    while len(pub) < 2 or (len(pub) < 3 and rng.random() < 0.5):
        pub.append(call(fn, *args()))
    hidden = [call(fn, *args()) for _ in range(5)] + [call(fn, *e) for e in edges]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"variant": "pow" if "pow" in ref else "startswith"})


def gen_logic(rng: random.Random) -> Spec:
    """`or` for `and` (or the reverse) in a range test."""
    seq, lo, hi = pick(rng, SEQ_NAMES), pick(rng, ("lo", "low", "floor")), pick(rng, ("hi", "high", "ceiling"))
    inside = rng.random() < 0.5
    fn = pick(rng, ("within", "inside", "in_band") if inside else ("outside", "beyond", "out_of_band")) + "_" + pick(rng, ("only", "values", "subset"))
    fixed = f"v >= {lo} and v <= {hi}" if inside else f"v < {lo} or v > {hi}"
    buggy = fixed.replace(" and ", " or ") if inside else fixed.replace(" or ", " and ")
    ref = source(f"def {fn}({seq}, {lo}, {hi}):", "    kept = []", f"    for v in {seq}:", f"        if {fixed}:",
                 "            kept.append(v)", "    return kept")
    bug = Mutation("fix_logic", fixed, buggy)
    wrong = (
        Mutation("fix_compare", f"v {'>=' if inside else '<'} {lo}", f"v {'>' if inside else '<='} {lo}"),
        Mutation("fix_init", "    kept = []\n", "    kept = [0]\n"),
    )
    def args() -> tuple:
        a = rng.randint(0, 10)
        b = a + rng.randint(3, 10)
        xs = ints(rng, rng.randint(3, 7), a - 8, b + 8)
        xs[rng.randrange(len(xs))] = b + rng.randint(1, 5)  # one value outside the band reveals and/or
        return xs, a, b
    pub = [call(fn, *args()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, *args()) for _ in range(5)] + [call(fn, [], 0, 5), call(fn, [0, 5, 6, -1], 0, 5), call(fn, [3], 3, 3)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"inside": inside})


REVIEW2_FAMILIES: dict[str, Family] = {
    "sort": Family("sort", "fix_sort", "sort missing reverse= or key=", gen_sort),
    "division": Family("division", "fix_division", "floor division for a true quotient", gen_division),
    "mutable_default": Family("mutable_default", "fix_default_arg", "mutable default argument", gen_mutable_default),
    "case": Family("case", "fix_case", "string normalisation missing lower()", gen_case),
    "strip": Family("strip", "fix_strip", "string normalisation missing strip()", gen_strip),
    "index": Family("index", "fix_index", "wrong index boundary", gen_index),
    "swap_args": Family("swap_args", "swap_args", "call arguments in the wrong order", gen_swap_args),
    "logic": Family("logic", "fix_logic", "and/or confused in a range test", gen_logic),
}
