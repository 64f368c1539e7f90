"""Code-review bug families, part 1: slice, operator, sign, early_return, negation, accumulate. Generators only."""

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


def gen_slice(rng: random.Random) -> Spec:
    """An off-by-one slice bound (`[:k - 1]` for `[:k]`, `[len - k + 1:]` for `[len - k:]`)."""
    seq = pick(rng, SEQ_NAMES)
    head = rng.random() < 0.5
    fn = pick(rng, ("first", "leading", "front") if head else ("last", "trailing", "tail")) + "_" + pick(rng, ("batch", "window", "chunk"))
    if head:
        fixed, buggy = "ordered[:k]", pick(rng, ("ordered[:k - 1]", "ordered[:k + 1]"))
    else:
        fixed, buggy = "ordered[len(ordered) - k:]", pick(rng, ("ordered[len(ordered) - k + 1:]", "ordered[len(ordered) - k - 1:]"))
    agg = pick(rng, ("list", "sum"))
    ret = "picked" if agg == "list" else "sum(picked)"
    ref = source(f"def {fn}({seq}, k):", f"    ordered = sorted({seq})", f"    picked = {fixed}", f"    return {ret}")
    bug = Mutation("fix_slice", fixed, buggy)
    wrong = (
        Mutation("fix_sort", f"sorted({seq})", f"sorted({seq}, reverse=True)"),
        Mutation("fix_index", f"    return {ret}\n", f"    return {ret.replace('picked', 'picked[1:]')}\n"),
    )
    lists = [distinct_ints(rng, rng.randint(4, 7), 1, 40) for _ in range(7)]
    pub = [call(fn, lst, rng.randint(1, len(lst) - 2)) for lst in lists[: rng.randint(2, 3)]]
    hidden = [call(fn, lst, rng.randint(1, len(lst) - 2)) for lst in lists[3:]]
    hidden += [call(fn, [5, 3, 9], 3), call(fn, [8], 1), call(fn, [4, 2, 6, 1], 2)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"head": head, "agg": agg})


def gen_operator(rng: random.Random) -> Spec:
    """A wrong arithmetic operator (`+` for `*`, `*` for `+`) in a small formula."""
    a, b = pick(rng, (("width", "height"), ("rows", "cols"), ("count", "unit_cost"), ("hours", "rate")))
    extra = pick(rng, ("fee", "margin", "bonus", "padding"))
    fn = pick(rng, ("gross", "full", "final")) + "_" + pick(rng, ("amount", "figure", "quote"))
    op, bad = pick(rng, (("*", "+"), ("+", "*"), ("*", "-")))
    sign = pick(rng, ("+", "-"))
    ref = source(f"def {fn}({a}, {b}, {extra}):", f"    base = {a} {op} {b}", f"    return base {sign} {extra}")
    bug = Mutation("fix_operator", f"{a} {op} {b}", f"{a} {bad} {b}")
    wrong = (
        Mutation("fix_sign", f"base {sign} {extra}", f"base {'-' if sign == '+' else '+'} {extra}"),
        Mutation("swap_args", f"({a}, {b}, {extra})", f"({b}, {a}, {extra})"),
    )
    def triple() -> tuple[int, int, int]:
        x = rng.randint(3, 20)
        return x, x + rng.randint(1, 9), rng.randint(0, 15)  # distinct factors >= 3: x*y != x+y, x-y
    pub = [call(fn, *triple()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, *triple()) for _ in range(5)] + [call(fn, 2, 2, 0), call(fn, 0, 7, 1), call(fn, 9, 4, 3)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"op": op, "bad": bad, "sign": sign})


def gen_sign(rng: random.Random) -> Spec:
    """A difference taken the wrong way round (`start - end` for `end - start`)."""
    a, b = pick(rng, (("start", "end"), ("before", "after"), ("opening", "closing"), ("low", "high")))
    s = pick(rng, ("scale", "rate", "factor"))
    fn = pick(rng, ("scaled", "weighted", "rated")) + "_" + pick(rng, ("change", "movement", "shift"))
    c = rng.randint(0, 9)
    tail = f" + {c}" if c else ""
    ref = source(f"def {fn}({a}, {b}, {s}):", f"    delta = {b} - {a}", f"    return delta * {s}{tail}")
    bug = Mutation("fix_sign", f"delta = {b} - {a}", f"delta = {a} - {b}")
    wrong = (
        Mutation("fix_operator", f"delta * {s}", f"delta + {s}"),
        Mutation("fix_division", f"delta * {s}", f"delta // {s}"),
    )
    def args(up: bool) -> tuple[int, int, int]:
        x, y = rng.sample(range(-20, 60), 2)
        lo, hi = min(x, y), max(x, y)
        return (lo, hi, rng.randint(1, 9)) if up else (hi, lo, rng.randint(1, 9))
    pub = [call(fn, *args(True)), call(fn, *args(False))][: rng.randint(1, 2)] + [call(fn, *args(rng.random() < 0.5))]
    hidden = [call(fn, *args(i % 2 == 0)) for i in range(6)] + [call(fn, 5, 5, 3), call(fn, 0, 10, 0), call(fn, 3, 4, -2)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"names": [a, b, s], "c": c})


def gen_early_return(rng: random.Random) -> Spec:
    """A `return` indented into the loop body, so the loop stops after the first element."""
    seq, t = pick(rng, SEQ_NAMES), pick(rng, ("cutoff", "floor", "minimum"))
    fn = pick(rng, ("collect", "gather", "harvest")) + "_" + pick(rng, ("big", "heavy", "high")) + "_ones"
    step, init = pick(rng, (("out.append(v * 2)", "[]"), ("out.append(v)", "[]"), ("out += v", "0"), ("out += 1", "0")))
    ref = source(f"def {fn}({seq}, {t}):", f"    out = {init}", f"    for v in {seq}:", f"        if v > {t}:",
                 f"            {step}", "    return out")
    bug = Mutation("fix_return", f"            {step}\n    return out\n", f"            {step}\n        return out\n")
    wrong = (
        Mutation("fix_compare", f"if v > {t}:", f"if v >= {t}:"),
        Mutation("fix_init", f"    out = {init}\n", "    out = [0]\n" if init == "[]" else "    out = 1\n"),
    )
    tv = rng.randint(0, 10)
    def lst(n: int) -> list[int]:
        xs = ints(rng, n, tv - 8, tv + 12)
        xs[-1] = tv + rng.randint(1, 9)  # a match after the first element reveals the early return
        return xs
    pub = [call(fn, lst(rng.randint(3, 6)), tv) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, lst(rng.randint(2, 7)), tv) for _ in range(5)]
    hidden += [call(fn, [], tv), call(fn, [tv + 1], tv), call(fn, [tv - 1, tv, tv + 3, tv + 4], tv)]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"step": step, "t": tv})


_WORDS = ("apple", "birch", "cloud", "delta", "ember", "frost", "grain", "honey", "ivory", "jolly", "koala",
          "lemon", "mango", "north", "olive", "pearl", "quilt", "river", "stone", "tulip")


def gen_negation(rng: random.Random) -> Spec:
    """An inverted membership test (`in` for `not in`) in a dedupe or exclusion loop."""
    w = pick(rng, ("w", "tok", "item", "name"))
    emit = pick(rng, ("{}", "{}.upper()", "{}.title()", "{}[:3]")).format(w)
    if rng.random() < 0.5:
        fn = pick(rng, ("unique", "distinct", "first_seen")) + "_" + pick(rng, ("labels", "tokens", "codes"))
        seq = pick(rng, ("labels", "tokens", "codes")) + "_in"
        ref = source(f"def {fn}({seq}):", "    seen = set()", "    kept = []", f"    for {w} in {seq}:",
                     f"        if {w} not in seen:", f"            seen.add({w})", f"            kept.append({emit})",
                     "    return kept")
        fixed, buggy = f"if {w} not in seen:", f"if {w} in seen:"
        def args() -> tuple:
            base = rng.sample(_WORDS, rng.randint(2, 4))
            return (base + rng.sample(base, rng.randint(1, len(base))),)
        edges = [([],), (["stone"],), (["koala", "koala", "koala"],)]
    else:
        fn = pick(rng, ("allowed", "permitted", "clean")) + "_" + pick(rng, ("labels", "tokens", "codes"))
        seq, blocked = pick(rng, ("names", "entries", "words")), pick(rng, ("blocked", "banned", "denied"))
        ref = source(f"def {fn}({seq}, {blocked}):", "    kept = []", f"    for {w} in {seq}:",
                     f"        if {w} not in {blocked}:", f"            kept.append({emit})", "    return kept")
        fixed, buggy = f"if {w} not in {blocked}:", f"if {w} in {blocked}:"
        def args() -> tuple:
            words = rng.sample(_WORDS, rng.randint(3, 6))
            return words, rng.sample(words, rng.randint(1, len(words) - 1))
        edges = [([], ["apple"]), (["stone"], []), (["koala", "lemon"], ["koala", "lemon"])]
    bug = Mutation("fix_negation", fixed, buggy)
    wrong = (
        Mutation("fix_init", "    kept = []\n", "    kept = [None]\n"),
        Mutation("fix_slice", "    return kept\n", "    return kept[:-1]\n"),
    )
    pub = [call(fn, *args()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, *args()) for _ in range(5)] + [call(fn, *e) for e in edges]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"variant": "dedupe" if "seen" in ref else "exclude", "emit": emit})


def gen_accumulate(rng: random.Random) -> Spec:
    """An assignment where the loop must accumulate (`total = ...` for `total += ...`)."""
    if rng.random() < 0.5:
        seq, k = pick(rng, SEQ_NAMES), rng.randint(2, 5)
        fn = pick(rng, ("boosted", "tripled", "amplified")) + "_" + pick(rng, ("total", "energy", "volume"))
        term = pick(rng, (f"v * {k}", f"v + {k}", f"abs(v) * {k}"))
        init, arg_of = "0", lambda: [ints(rng, rng.randint(2, 6), 1, 20)]
        edges = [([],), ([7],), ([0, 0, 3],)]
    else:
        seq = pick(rng, ("words", "names", "parts"))
        fn = pick(rng, ("initials", "acronym", "monogram")) + "_" + pick(rng, ("of", "from", "for"))
        term = pick(rng, ("w[0]", "w[0].upper()", "w[-1]"))
        init, arg_of = '""', lambda: [rng.sample(_WORDS, rng.randint(2, 5))]
        edges = [([],), (["ember"],), (["apple", "apple"],)]
    ref = source(f"def {fn}({seq}):", f"    total = {init}", f"    for {'v' if init == '0' else 'w'} in {seq}:",
                 f"        total += {term}", "    return total")
    bug = Mutation("fix_accumulate", f"total += {term}", f"total = {term}")
    wrong = (
        Mutation("fix_init", f"    total = {init}\n", "    total = 1\n" if init == "0" else '    total = " "\n'),
        Mutation("fix_range_end", f" in {seq}:", f" in {seq}[:-1]:"),
    )
    pub = [call(fn, *arg_of()) for _ in range(rng.randint(2, 3))]
    hidden = [call(fn, *arg_of()) for _ in range(5)] + [call(fn, *e) for e in edges]
    return Spec(fn, ref, bug, wrong, tuple(pub), tuple(hidden), {"term": term})


REVIEW_FAMILIES: dict[str, Family] = {
    "slice": Family("slice", "fix_slice", "off-by-one slice bound", gen_slice),
    "operator": Family("operator", "fix_operator", "wrong arithmetic operator", gen_operator),
    "sign": Family("sign", "fix_sign", "difference taken the wrong way round", gen_sign),
    "early_return": Family("early_return", "fix_return", "return inside the loop body", gen_early_return),
    "negation": Family("negation", "fix_negation", "inverted membership test", gen_negation),
    "accumulate": Family("accumulate", "fix_accumulate", "assignment instead of accumulation", gen_accumulate),
}
