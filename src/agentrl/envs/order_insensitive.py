"""Order-insensitive grading where a test's expected order came from set or dict iteration (issue 14.4b).

Not the hardened grader itself (session_grader.py), which calls this. The order of `list(set(...))` over
strings changes with the interpreter's hash seed, so a test whose expected list was printed from such a
value passes in some processes and fails in others, for the reference solution too. Rule, per test:
the candidate is graded as written; if that fails, the *reference solution* is run on the same test in
the same grading process (same hash seed). If the reference fails the test as written but passes it
with every `a == b` compared as multisets (`same_items`), the test's order is not the reference's to
keep: it came from hash iteration, and the candidate is graded order-insensitively too. If the
reference passes as written, its order may still be an accident of this process's hash seed: the
reference's calls in the test are run again with their string arguments replaced by equal strings that
hash differently (`_Salted`, up to SALTS salts, as other hash seeds would); if that changes the order of
a result but not its items, the order is hash-derived and the candidate is graded order-insensitively.
A meaningful order (a sorting task) never depends on hashes, so it keeps counting. A reference that
passes once passes in every process, whatever its hash seed. Limit: strings the function builds itself
(not from its arguments) are not re-hashed, so such orders are only caught the first way.
"""

from __future__ import annotations

import ast
import textwrap


class _RelaxEq(ast.NodeTransformer):
    """`a == b` -> `same(a, b)`; `a != b` -> `not same(a, b)` (single comparisons only)."""

    def __init__(self, same: str):
        self.same = same

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return node
        call = ast.Call(func=ast.Name(self.same, ast.Load()), args=[node.left, node.comparators[0]], keywords=[])
        return ast.UnaryOp(op=ast.Not(), operand=call) if isinstance(node.ops[0], ast.NotEq) else call


def relaxed(test: str, same: str) -> str | None:
    """`test` with its equalities compared by `same(a, b)`; None if it has none (or does not parse)."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    if not any(isinstance(n, ast.Compare) and isinstance(n.ops[0], (ast.Eq, ast.NotEq)) for n in ast.walk(tree)):
        return None
    return ast.unparse(ast.fix_missing_locations(_RelaxEq(same).visit(tree)))


SALTS = 16


class _SaltCalls(ast.NodeTransformer):
    """`f(a, k=b)` -> `f(salt(a), k=salt(b))` for calls of the reference's functions `names`."""

    def __init__(self, names: set[str], salt: str):
        self.names, self.salt = names, salt

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in self.names:
            wrap = lambda e: ast.Call(func=ast.Name(self.salt, ast.Load()), args=[e], keywords=[])  # noqa: E731
            node.args = [a if isinstance(a, ast.Starred) else wrap(a) for a in node.args]
            node.keywords = [ast.keyword(k.arg, wrap(k.value)) for k in node.keywords]
        return node


def probes(test: str, names: set[str], salt: str) -> tuple[str, str] | None:
    """(list of the test's calls of `names`, the same with salted arguments) as expressions; None if none."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id in names]
    if not calls:
        return None
    plain = "[" + ", ".join(ast.unparse(c) for c in calls) + "]"
    salted = ast.unparse(ast.fix_missing_locations(_SaltCalls(names, salt).visit(ast.parse(plain, mode="eval"))))
    return plain, salted


def order_free_test(strict: str, relaxed_test: str, index: int, check: str) -> str:
    """The graded snippet: `strict` as written; on AssertionError, `relaxed_test` if `check(index)` says the
    reference's order for this test is not reproducible here (see module doc)."""
    return (f"try:\n{textwrap.indent(strict, '    ')}\nexcept AssertionError:\n"
            f"    if not {check}({index}):\n        raise\n{textwrap.indent(relaxed_test, '    ')}")


# Put before the hardened grader's test setup: it runs in the checker process, never beside agent code (the agent
# process is a fork of it, so both hash strings alike). {g}: the per-grading suffix.
PRELUDE = '''
def _mk_unordered{g}():
    _exec, _dict, _len, _list, _range, _isinst, _Exc = exec, dict, len, list, range, isinstance, Exception
    _seq = (list, tuple)
    _eval, _str, _hash, _tuple, _range, _isub, _type = eval, str, hash, tuple, range, issubclass, type
    ref, setup, strict, loose, probes = {ref!r}, {setup!r}, {strict!r}, {loose!r}, {probes!r}
    seen, salt_box = {{}}, [0]
    class _Salted(_str):
        """An equal string that hashes as under another hash seed (set/dict order changes, equality does not)."""
        __slots__ = ()
        def __hash__(self):
            return _hash((salt_box[0], _str.__str__(self)))
    def salt(x):
        t = _type(x)
        if _isub(t, _str):
            return _Salted(x)
        if _isub(t, list):
            return [salt(v) for v in x]
        if _isub(t, _tuple):
            return _tuple(salt(v) for v in x)
        if _isub(t, set) or _isub(t, frozenset):
            return t(salt(v) for v in x)
        if _isub(t, _dict):
            return {{salt(k): salt(v) for k, v in x.items()}}
        return x
    def same(a, b):
        """a == b, or both lists/tuples (or both dicts) holding the same items in any order (recursively)."""
        if a == b:
            return True
        if _isinst(a, _dict) and _isinst(b, _dict):
            return _len(a) == _len(b) and all(k in b and same(v, b[k]) for k, v in a.items())
        if not (_isinst(a, _seq) and _isinst(b, _seq)) or _len(a) != _len(b):
            return False
        rest = _list(b)
        for x in a:
            for j in _range(_len(rest)):
                if same(x, rest[j]):
                    del rest[j]
                    break
            else:
                return False
        return True
    def reference_ns():
        ns = {{"_same{g}": same, "_salt{g}": salt}}
        _exec(setup, ns)
        _exec(ref, ns)
        return ns
    def passes(src):
        try:
            _exec(src, reference_ns())
            return True
        except _Exc:
            return False
    def hash_ordered(i):
        """Re-hashing the string arguments changes the order, not the items, of a reference result."""
        if probes[i] is None:
            return False
        try:
            ns = reference_ns()
            base = _eval(probes[i][0], ns)
            for k in _range(1, {salts} + 1):
                salt_box[0] = k
                other = _eval(probes[i][1], ns)
                if other != base:
                    return same(other, base)
        except _Exc:
            return False
        return False
    def order_free(i):
        """Test i's expected order came from hash iteration (see the module doc), judged in this process."""
        if i not in seen:
            seen[i] = loose[i] is not None and passes(loose[i]) and (not passes(strict[i]) or hash_ordered(i))
        return seen[i]
    return same, order_free
_same{g}, _order_free{g} = _mk_unordered{g}()
del _mk_unordered{g}
'''


def prelude(g: str, reference: str, setup: str, tests: tuple[str, ...]) -> tuple[str, list[str | None]]:
    """(prelude code defining `_same{g}` and `_order_free{g}`, the relaxed source of each raw test or None)."""
    try:
        names = {n.name for n in ast.parse(reference).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    except SyntaxError:
        names = set()
    loose = [relaxed(t, f"_same{g}") for t in tests]
    probe = [probes(t, names, f"_salt{g}") for t in tests]
    return PRELUDE.format(g=g, ref=reference, setup=setup, strict=list(tests), loose=loose, probes=probe,
                          salts=SALTS), loose
