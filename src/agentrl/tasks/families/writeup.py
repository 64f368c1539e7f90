"""The write-up's five bug families: minmax, range, compare, zero, init. Generators only, no execution."""

from __future__ import annotations

import random

from agentrl.tasks.families.base import (
    NUM_NAMES,
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


def _gen_clamp(rng: random.Random) -> Spec:
    """Clamping each value into [lo, hi] with `max(lo, min(v, hi))`, one of max/min swapped."""
    seq, lo, hi = pick(rng, SEQ_NAMES), pick(rng, ("lo", "low", "floor")), pick(rng, ("hi", "high", "ceiling"))
    v = pick(rng, ("v", "x", "item"))
    fn = pick(rng, ("clamped", "bounded", "limited", "capped")) + "_" + pick(rng, ("readings", "levels", "entries"))
    fixed = f"max({lo}, min({v}, {hi}))"
    buggy = pick(rng, (f"min({lo}, min({v}, {hi}))", f"max({lo}, max({v}, {hi}))"))
    ref = source(f"def {fn}({seq}, {lo}, {hi}):", "    out = []", f"    for {v} in {seq}:", f"        out.append({fixed})",
                 "    return out")
    bug = Mutation("fix_minmax", fixed, buggy)
    wrong = (
        Mutation("fix_init", "    out = []\n", f"    out = [{lo}]\n"),
        Mutation("fix_range_start", f"in {seq}:", f"in {seq}[1:]:"),
    )
    def args() -> tuple:
        a = rng.randint(-5, 10)
        b = a + rng.randint(4, 12)
        xs = ints(rng, rng.randint(3, 6), a - 6, b + 6)
        xs[rng.randrange(len(xs))] = rng.randint(a + 1, b - 1)  # a value strictly inside reveals either swap
        return xs, a, b
    pub = [call(fn, *args()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, *args()) for _ in range(5)] + [call(fn, [], 0, 3), call(fn, [-4, 9], 0, 3), call(fn, [2], 2, 2)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"shape": "clamp", "buggy": buggy})


def gen_minmax(rng: random.Random) -> Spec:
    """Running max/min over a sequence, or a clamp, where `max` and `min` are swapped."""
    if rng.random() < 0.35:
        return _gen_clamp(rng)
    want = pick(rng, ("max", "min"))
    other = "min" if want == "max" else "max"
    seq, v = pick(rng, SEQ_NAMES), pick(rng, ("v", "x", "item", "cur"))
    key = pick(rng, ("{}", "abs({})", "{} * {k}", "{} - {k}"))
    k = rng.randint(2, 5)
    expr = key.format(v, k=k)
    first = key.format(f"{seq}[0]", k=k)
    fn = pick(rng, ("peak", "extreme", "top", "bound_of", "edge_of")) + "_" + pick(rng, ("reading", "entry", "level", "sample"))
    ref = source(
        f"def {fn}({seq}):",
        f"    best = {first}",
        f"    for {v} in {seq}[1:]:",
        f"        best = {want}(best, {expr})",
        "    return best",
    )
    bug = Mutation("fix_minmax", f"{want}(best, ", f"{other}(best, ")
    wrong = (
        Mutation("fix_init", f"    best = {first}\n", "    best = 0\n"),
        Mutation("fix_range_end", f"in {seq}[1:]:", f"in {seq}[1:-1]:"),
    )
    pub = [call(fn, distinct_ints(rng, rng.randint(3, 6))) for _ in range(rng.randint(2, 3))]
    hidden = [
        call(fn, [rng.randint(-9, 9)]),
        call(fn, [4, 4, 4]),
        call(fn, sorted(distinct_ints(rng, 5))),
        call(fn, sorted(distinct_ints(rng, 5), reverse=True)),
        call(fn, distinct_ints(rng, 4, -30, -1)),
        call(fn, distinct_ints(rng, 7, -20, 20)),
        call(fn, distinct_ints(rng, 6, -50, 50)),
        call(fn, ints(rng, 8, -5, 5)),
    ]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"want": want, "key": key, "k": k})


def gen_range(rng: random.Random) -> Spec:
    """A loop over `range(...)` whose end is one short (`len(xs) - 1` or `n` for `n + 1`)."""
    seq, w = pick(rng, SEQ_NAMES), pick(rng, ("weight", "scale", "factor", "offset"))
    fn = pick(rng, ("weighted", "scaled", "adjusted", "shifted")) + "_" + pick(rng, ("total", "sum", "tally"))
    wv = rng.randint(2, 6)
    if rng.random() < 0.6:
        body = pick(rng, ("{s}[i] * {w}", "abs({s}[i] - {w})", "{s}[i] + {w}", "({s}[i] if {s}[i] > {w} else 0)"))
        body = body.format(s=seq, w=w)
        fixed, buggy = f"range(len({seq}))", f"range(len({seq}) - 1)"
        sig, loop = f"{seq}, {w}", f"    for i in {fixed}:"
        lists = [ints(rng, rng.randint(2, 5), -5, 15) for _ in range(6)]
        for lst in lists:
            lst[-1] = wv + rng.randint(3, 9)  # the last element always contributes
        pub = [call(fn, lst, wv) for lst in lists[: rng.randint(2, 3)]]
        hidden = [call(fn, lst, wv) for lst in lists[3:]] + [call(fn, [], wv), call(fn, [wv + 5], wv)]
        hidden += [call(fn, [0, 0, wv + 4], wv), call(fn, ints(rng, 8, -5, 15), wv), call(fn, [wv, wv], wv)]
    else:
        body = pick(rng, ("i * {w}", "i * i + {w}", "(i + {w}) * i")).format(w=w)
        fixed, buggy = "range(1, n + 1)", "range(1, n)"
        sig, loop = f"n, {w}", f"    for i in {fixed}:"
        pub = [call(fn, n, wv) for n in rng.sample(range(3, 10), rng.randint(2, 3))]
        hidden = [call(fn, n, wv) for n in (0, 1, 2, 10, rng.randint(11, 30), rng.randint(31, 60))]
    ref = source(f"def {fn}({sig}):", "    total = 0", loop, f"        total += {body}", "    return total")
    bug = Mutation("fix_range_end", fixed, buggy)
    wrong = (
        Mutation("fix_init", "    total = 0\n", "    total = 1\n"),
        Mutation("fix_accumulate", "        total += ", "        total = "),
    )
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"body": body, "w": wv})


_COMPARE = {">=": ">", ">": ">=", "<=": "<", "<": "<="}


def gen_compare(rng: random.Random) -> Spec:
    """A threshold comparison with the wrong strictness (`>` for `>=` and the like)."""
    seq, t, v = pick(rng, SEQ_NAMES), pick(rng, NUM_NAMES), pick(rng, ("score", "value", "entry", "reading"))
    op = pick(rng, tuple(_COMPARE))
    shape = pick(rng, ("count", "filter", "sum"))
    fn = pick(rng, ("passing", "qualified", "accepted", "selected")) + "_" + {"count": "count", "filter": "entries", "sum": "mass"}[shape]
    acc_init, acc_step = {"count": ("0", "acc += 1"), "filter": ("[]", f"acc.append({v})"), "sum": ("0", f"acc += {v}")}[shape]
    ref = source(
        f"def {fn}({seq}, {t}):",
        f"    acc = {acc_init}",
        f"    for {v} in {seq}:",
        f"        if {v} {op} {t}:",
        f"            {acc_step}",
        "    return acc",
    )
    bug = Mutation("fix_compare", f"if {v} {op} {t}:", f"if {v} {_COMPARE[op]} {t}:")
    wrong = (
        Mutation("fix_range_start", f"in {seq}:", f"in {seq}[1:]:"),
        Mutation("fix_init", f"    acc = {acc_init}\n", "    acc = 1\n" if acc_init == "0" else "    acc = [0]\n"),
    )
    tv = rng.randint(1, 12)
    def with_tie(n: int) -> list[int]:
        lst = ints(rng, n, tv - 6, tv + 6)
        lst[rng.randrange(n)] = tv  # an element equal to the threshold reveals the strictness
        return lst
    pub = [call(fn, with_tie(rng.randint(3, 6)), tv)] + [call(fn, ints(rng, 4, tv - 6, tv + 6), tv)]
    rng.shuffle(pub)
    hidden = [call(fn, [], tv), call(fn, [tv], tv), call(fn, [tv, tv, tv + 1], tv), call(fn, [tv - 1, tv, tv + 1], tv)]
    hidden += [call(fn, with_tie(rng.randint(4, 8)), tv) for _ in range(4)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"op": op, "shape": shape, "t": tv})


def gen_zero(rng: random.Random) -> Spec:
    """A division with no guard for an empty input or a zero denominator."""
    default = pick(rng, ("0.0", "0", "None"))
    if rng.random() < 0.5:
        seq = pick(rng, SEQ_NAMES)
        fn = pick(rng, ("mean", "average", "typical")) + "_" + pick(rng, ("reading", "entry", "load"))
        sig, guard, denom = seq, f"if not {seq}:", f"len({seq})"
        body = [f"    for v in {seq}:", "        total += v"]
        args = [[ints(rng, rng.randint(1, 6), -10, 40)] for _ in range(8)] + [[[]], [[rng.randint(1, 9)]]]
        reveal = [[]]
    else:
        seq, w = pick(rng, SEQ_NAMES), pick(rng, ("whole", "budget", "capacity", "base"))
        fn = pick(rng, ("share", "fraction", "portion")) + "_" + pick(rng, ("used", "taken", "spent"))
        sig, guard, denom = f"{seq}, {w}", f"if {w} == 0:", w
        body = [f"    for v in {seq}:", "        total += v"]
        args = [[ints(rng, rng.randint(1, 5), 0, 30), rng.randint(1, 200)] for _ in range(8)]
        args += [[[], 0], [[5, 5], 0]]
        reveal = [ints(rng, 3, 0, 30), 0]
    ref = source(f"def {fn}({sig}):", f"    {guard}", f"        return {default}", "    total = 0", *body,
                 f"    return total / {denom}")
    bug = Mutation("add_zero_guard", f"    {guard}\n        return {default}\n    total = 0\n", "    total = 0\n")
    wrong = (
        Mutation("fix_division", f"total / {denom}", f"total // {denom}"),
        Mutation("fix_init", "    total = 0\n", "    total = 1\n"),
    )
    pub = [call(fn, *reveal), call(fn, *args[0])] + ([call(fn, *args[1])] if rng.random() < 0.5 else [])
    rng.shuffle(pub)
    hidden = [call(fn, *a) for a in args[1:]]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"default": default, "guard": guard})


def gen_init(rng: random.Random) -> Spec:
    """An accumulator started from the wrong value (0 for a product, 0 for a max, 1 for a count)."""
    seq, v = pick(rng, SEQ_NAMES), pick(rng, ("v", "x", "item"))
    kind = pick(rng, ("product", "max", "count"))
    if kind == "product":
        fn = pick(rng, ("compound", "chained", "joint")) + "_" + pick(rng, ("factor", "gain", "growth"))
        init, bad, step = "1", "0", f"acc *= {v}"
        lists = [ints(rng, rng.randint(1, 4), 1, 6) for _ in range(6)] + [[], [-2, 3], [7]]
        extra = Mutation("fix_accumulate", f"acc *= {v}", f"acc = {v}")
    elif kind == "max":
        fn = pick(rng, ("highest", "largest", "upper")) + "_" + pick(rng, ("level", "mark", "entry"))
        init, bad, step = f"{seq}[0]", "0", f"acc = max(acc, {v})"
        lists = [distinct_ints(rng, rng.randint(2, 5), -40, -1) for _ in range(3)]
        lists += [ints(rng, rng.randint(1, 5), -20, 30) for _ in range(3)] + [[-3], [-5, -5], [0, -1]]
        extra = Mutation("fix_minmax", f"max(acc, {v})", f"min(acc, {v})")
    else:
        t = rng.randint(0, 9)
        fn = pick(rng, ("positive", "high", "strong")) + "_" + pick(rng, ("hits", "events", "matches"))
        init, bad, step = "0", "1", f"acc += {v} > {t}"
        lists = [ints(rng, rng.randint(1, 6), -5, 20) for _ in range(6)] + [[], [t], [t + 1, t + 2]]
        extra = Mutation("fix_compare", f"{v} > {t}", f"{v} >= {t}")
    ref = source(f"def {fn}({seq}):", f"    acc = {init}", f"    for {v} in {seq}:", f"        {step}", "    return acc")
    bug = Mutation("fix_init", f"    acc = {init}\n", f"    acc = {bad}\n")
    wrong = (Mutation("fix_range_end", f"in {seq}:", f"in {seq}[:-1]:"), extra)
    n_pub = rng.randint(2, 3)
    pub = [call(fn, lst) for lst in lists[:n_pub]]
    hidden = [call(fn, lst) for lst in lists[n_pub:]] + [call(fn, lst[::-1] + lst) for lst in lists[:2]]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"kind": kind})


WRITEUP_FAMILIES: dict[str, Family] = {
    "minmax": Family("minmax", "fix_minmax", "running max/min with max and min swapped", gen_minmax),
    "range": Family("range", "fix_range_end", "loop range that stops one short", gen_range),
    "compare": Family("compare", "fix_compare", "threshold comparison with the wrong strictness", gen_compare),
    "zero": Family("zero", "add_zero_guard", "division without a guard for empty/zero", gen_zero),
    "init": Family("init", "fix_init", "accumulator started from the wrong value", gen_init),
}
