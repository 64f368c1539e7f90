"""Grade a python-session episode so that state left in the live session cannot forge a pass.

What it does (the method, with its limits, is documented in docs/envs.md):
1. The graded module is rebuilt from the agent's code, never taken from the live session: the
   top-level imports, function and class definitions, and assignments to plain names of every cell
   that parsed, in the order they ran, and `try` / `if` blocks made only of those (a fallback when an
   import fails). Expression statements, asserts, loops, attribute/subscript assignments
   (`builtins.len = ...`, `math.pi = ...`) are dropped.
2. It is graded by an isolated TestJob (agentrl.sandbox.api.TestJob.isolate): the module is imported in an
   agent process, and the tests run in a checker process that never runs agent code. The test sees the
   agent's functions as stand-ins that call them in the agent process and return their results as exact
   builtin data (int, str, list, dict, ...), sent over a socket as JSON; objects that lie about equality,
   truthiness or hashing never reach the test's comparison, and code in the module (patched builtins,
   modules or harness, a frame walk, gc) reaches only its own process.
3. Each test is rewritten with `ast` so that every read of a name the agent defined goes through
   the sandbox's AGENT_VALUE, which fetches the name's current value from the agent process as plain data.
"""

from __future__ import annotations

import ast
import secrets

from agentrl.sandbox.api import AGENT_VALUE, TestJob
from agentrl.tasks.mbpp import parse_source

_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def definitions(cells: list[str], *, whole_file: bool = False) -> tuple[str, set[str], list[str]]:
    """The kept top-level statements of `cells` (see module docstring; `whole_file`: every statement, as a file
    the agent wrote runs when imported), the names they define (functions, classes, assigned names; not
    imported names), and the `from __future__` imports among them, which the caller must put first in the
    graded file (Python refuses them after other code).

    Cells that do not parse are skipped (they defined nothing in the session either), and so are cells with a
    `from __future__` import after other code, which Python refuses to compile (moved first, it would grade).
    """
    kept: list[str] = []
    future: list[str] = []
    names: set[str] = set()
    for cell in cells:
        try:
            tree = parse_quietly(cell)
        except SyntaxError:
            continue
        if _misplaced_future(tree):
            continue
        for node in tree.body:
            text = ast.get_source_segment(cell, node) or ast.unparse(node)
            if _is_future(node):
                future.append(text)
            elif whole_file or _keep(node):
                kept.append(text)
                names |= _bound_names(node)
    return "\n".join(kept) + "\n", names, future


def _is_future(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__" and not node.level


def _misplaced_future(tree: ast.Module) -> bool:
    """True if a `from __future__` import follows anything but a docstring and other future imports (Python's
    compiler refuses that; `ast.parse` does not)."""
    leading = True
    for i, node in enumerate(tree.body):
        if _is_future(node):
            if not leading:
                return True
        elif not (i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str)):
            leading = False
    return False


# compound statements a session cell keeps when every statement in them is kept (or `pass`): `try: import x
# except ImportError: x = None`, `if sys.version_info >= (3, 9): from math import lcm else: def lcm(...)`
_BLOCKS: tuple[type, ...] = (ast.Try, ast.If) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _block_bodies(node: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists of a _BLOCKS node: body, else, finally and every handler's body."""
    bodies = [node.body, node.orelse]
    if not isinstance(node, ast.If):
        bodies += [node.finalbody, *(h.body for h in node.handlers)]
    return bodies


def _keep(node: ast.stmt) -> bool:
    if isinstance(node, _KEPT):
        return True
    if isinstance(node, ast.Assign):
        return all(_plain_target(t) for t in node.targets)
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return isinstance(node.target, ast.Name)
    if isinstance(node, _BLOCKS):  # a definition made conditionally, e.g. a fallback when an import fails
        return all(isinstance(s, ast.Pass) or (not _is_future(s) and _keep(s))
                   for body in _block_bodies(node) for s in body)
    return False


def _plain_target(t: ast.expr) -> bool:
    if isinstance(t, ast.Name):
        return True
    return isinstance(t, (ast.Tuple, ast.List)) and all(_plain_target(e) for e in t.elts)


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return set()  # not the agent's values: a test reads an imported module as the checker's own copy
    if isinstance(node, _BLOCKS):  # statement by statement: a def's own locals are not module names
        return set().union(*(_bound_names(s) for body in _block_bodies(node) for s in body))
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


class _GuardNames(ast.NodeTransformer):
    def __init__(self, names: set[str], wrapper: str):
        self.names, self.wrapper = names, wrapper

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.names:
            return ast.Call(func=ast.Name(self.wrapper, ast.Load()), args=[node], keywords=[])
        return node


def harden_test(test: str, names: set[str], wrapper: str, restore: str | None = None) -> str:
    """Rewrite `test` so every read of a name in `names` goes through `wrapper(name)`.

    The wrapper returns plain data for a value and, for a callable, a function that returns its
    result as plain data (so `f(x)`, `map(f, xs)` and `sorted(xs, key=f)` are all guarded).
    With `restore`, the test first calls `restore()` (undoing builtins/module patches that an
    earlier test's call left behind).

    A test that does not parse is returned unchanged (it fails in the sandbox as written).
    """
    try:
        tree = parse_quietly(test)
    except SyntaxError:
        return test
    tree = ast.fix_missing_locations(_GuardNames(names, wrapper).visit(tree))
    return (f"{restore}()\n" if restore else "") + ast.unparse(tree)


def hardened_job(cells: list[str], module: str, tests: tuple[str, ...], setup: str = "",
                 extra_names: tuple[str, ...] = (), timeout_s: float | None = None,
                 reference: str | None = None, whole_file: bool = False) -> TestJob:
    """An isolated TestJob that grades `tests` against the definitions in `cells`, hardened as described above.

    Args:
        cells: code the agent ran, in order.
        whole_file: `cells` is one file the agent wrote (coding-tools): every top-level statement is kept, as
            importing the file runs them (module-level loops, `try: import ...`), not only definitions.
        module: import name of the graded file (written as `<module>.py`).
        tests: the hidden test snippets (each usually one `assert`).
        setup: code run before each test (e.g. MBPP's test_imports), in the checker process.
        extra_names: more names whose reads are routed through AGENT_VALUE (e.g. the task's entry point); also
            the job's entry_names, the only module names that may shadow a builtin in the tests.
        reference: the task's reference solution; with it, a test the candidate fails is graded
            order-insensitively when its expected order came from set/dict iteration (agentrl.envs.order_insensitive;
            its helpers run in the checker process, from the setup).
    """
    from agentrl.envs import order_insensitive

    g = secrets.token_hex(8)
    code, names, future = definitions(cells, whole_file=whole_file)
    loose: list[str | None] = [None] * len(tests)
    if reference:
        extra, loose = order_insensitive.prelude(g, reference, setup, tests)
        setup = extra + setup
    source = "".join(f + "\n" for f in future) + code
    guard = lambda t: harden_test(t, names | set(extra_names), AGENT_VALUE)  # noqa: E731
    wrapped = tuple(
        guard(t) if lo is None else order_insensitive.order_free_test(guard(t), guard(lo), i, f"_order_free{g}")
        for i, (t, lo) in enumerate(zip(tests, loose, strict=True)))
    return TestJob(files={f"{module}.py": source}, module=module, tests=wrapped, setup=setup, timeout_s=timeout_s,
                   isolate=True, entry_names=tuple(extra_names))


# ast.parse without SyntaxWarnings, and code nested too deeply for the parser a SyntaxError (a 100 kB run_python
# cell or graded file had ended the episode as env_error, unscorable): the task loaders' parser, one function
parse_quietly = parse_source
