"""Order-insensitive grading where a test's expected order came from set or dict iteration (issue 14.4b).

Not the hardened grader itself (session_grader.py), which calls this. The order of `list(set(...))` over
strings changes with the interpreter's hash seed, so a test whose expected list was printed from such a
value passes in some processes and fails in others, for the reference solution too. Rule, per test:
the candidate is graded as written; if that fails, the *reference solution* is run on the same test in
the same grading process (same hash seed). If the reference fails the test as written but passes it
with every `a == b` compared as multisets (`same_items`), the test's order is not the reference's to
keep: it came from hash iteration, and the candidate is graded order-insensitively too. If the
reference passes as written, the order is meaningful (a sorting task) and the candidate's failure
stands. So a reference that passes once passes in every process, whatever its hash seed.
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


def order_free_test(strict: str, relaxed_test: str, index: int, check: str) -> str:
    """The graded snippet: `strict` as written; on AssertionError, `relaxed_test` if `check(index)` says the
    reference's order for this test is not reproducible here (see module doc)."""
    return (f"try:\n{textwrap.indent(strict, '    ')}\nexcept AssertionError:\n"
            f"    if not {check}({index}):\n        raise\n{textwrap.indent(relaxed_test, '    ')}")


# Appended to the hardened grader's prelude (runs before any agent code). {g}: the per-grading suffix.
PRELUDE = '''
def _mk_unordered{g}():
    _exec, _dict, _len, _list, _range, _isinst, _Exc = exec, dict, len, list, range, isinstance, Exception
    _seq = (list, tuple)
    ref, setup, strict, loose = {ref!r}, {setup!r}, {strict!r}, {loose!r}
    seen = {{}}
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
    def passes(src):
        ns = {{"_same{g}": same}}
        try:
            _exec(setup, ns)
            _exec(ref, ns)
            _exec(src, ns)
            return True
        except _Exc:
            return False
    def order_free(i):
        """The reference fails test i as written but passes it order-insensitively, in this process."""
        if i not in seen:
            seen[i] = loose[i] is not None and not passes(strict[i]) and passes(loose[i])
        return seen[i]
    return same, order_free
_same{g}, _order_free{g} = _mk_unordered{g}()
del _mk_unordered{g}
'''


def prelude(g: str, reference: str, setup: str, tests: tuple[str, ...]) -> tuple[str, list[str | None]]:
    """(prelude code defining `_same{g}` and `_order_free{g}`, the relaxed source of each raw test or None)."""
    loose = [relaxed(t, f"_same{g}") for t in tests]
    return PRELUDE.format(g=g, ref=reference, setup=setup, strict=list(tests), loose=loose), loose
