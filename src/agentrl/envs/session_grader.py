"""Grade a python-session episode so that state left in the live session cannot forge a pass.

What it does (the method, with its limits, is documented in docs/envs.md):
1. The graded module is rebuilt from the agent's code, never taken from the live session: the
   top-level imports, function and class definitions, and assignments to plain names of every cell
   that parsed, in the order they ran, and `try` / `if` blocks made only of those (a fallback when an
   import fails). Expression statements, asserts, loops, attribute/subscript assignments
   (`builtins.len = ...`, `math.pi = ...`) are dropped.
2. It runs in a fresh sandbox process (agentrl.sandbox.run_tests), behind a prelude that snapshots
   builtins and every loaded module before any agent code runs, and an epilogue that restores them.
3. Each test is rewritten with `ast` so that every read of a name the agent defined goes through a
   trusted guard: values, and the results of calling agent functions, become exact builtin data
   (int, str, list, dict, ...) built through the base types' own methods; objects that lie about
   equality, truthiness or hashing, and builtin subclasses with patched methods, never reach the
   test's comparison. Each test first restores the snapshot again (undoing call-time patches).
Not a security boundary against code that sabotages the grader at call time (frame walking, gc);
the sandbox's process isolation is what bounds that.
"""

from __future__ import annotations

import ast
import secrets
import warnings

from agentrl.sandbox.api import TestJob

_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

# The trusted converter and the builtins/module snapshot. `{g}` is a fresh random suffix per grading.
_PRELUDE = '''\
import builtins as _b{g}, sys as _s{g}, re as _re{g}
{preimports}
def _mk{g}():
    _type, _iter, _len, _hasattr, _isinst, _glist, _callable = type, iter, len, hasattr, isinstance, list, callable
    _isub = issubclass
    _int, _float, _str, _bytes, _list, _tuple, _dict, _set, _fset = int, float, str, bytes, list, tuple, dict, set, frozenset
    _plain_atoms = (_type(None), bool, complex, range)
    _TE = TypeError
    class Opaque:
        """A stand-in for a stdlib object without plain data (re.Match): truthy, equal only to itself."""
        __slots__ = ("kind",)
        def __init__(self, kind):
            self.kind = kind
        def __repr__(self):
            return "<%s>" % self.kind
    _opaque_types = (_type(_re{g}.match("", "")), _type(_re{g}.compile("")))
    _snap_b = _dict(_b{g}.__dict__)
    # Not snapshotted: this module, the grading harness (__main__), and the std streams it may swap.
    _skip_mods = (__name__, "__main__", "__mp_main__")
    _volatile = {{"stdin", "stdout", "stderr", "last_type", "last_value", "last_traceback", "last_exc"}}
    _snap_m = {{n: (m, _dict(m.__dict__)) for n, m in _list(_s{g}.modules.items())
               if n not in _skip_mods and hasattr(m, "__dict__")}}
    def plain(x, depth=0):
        if depth > 100:
            raise _TE("result nests deeper than 100 levels")
        t = _type(x)
        if t in _plain_atoms:
            return x
        if _isub(t, _int): return _int.__index__(x)
        if _isub(t, _float): return _float.__float__(x)
        if _isub(t, _str): return _str.__str__(x)
        if _isub(t, _bytes): return _bytes.__bytes__(x)
        if _isub(t, _list): return [plain(v, depth + 1) for v in _list.__iter__(x)]
        if _isub(t, _tuple): return _tuple([plain(v, depth + 1) for v in _tuple.__iter__(x)])
        if _isub(t, _dict): return {{plain(k, depth + 1): plain(v, depth + 1) for k, v in _dict.items(x)}}
        if _isub(t, _fset): return _fset([plain(v, depth + 1) for v in _fset.__iter__(x)])
        if _isub(t, _set): return _set([plain(v, depth + 1) for v in _set.__iter__(x)])
        if t in _opaque_types:
            return Opaque(t.__name__)
        if _hasattr(t, "__next__"):
            items = []
            for v in x:
                if _len(items) >= 1000000:
                    raise _TE("iterator result yields more than 10**6 items")
                items.append(plain(v, depth + 1))
            return _iter(items)
        raise _TE("result of type %s is not plain data (expected int, float, str, bytes, list, tuple, dict, set, None, bool)" % t.__name__)
    def restore():
        cur = _b{g}.__dict__
        for k in _list(cur):
            if k not in _snap_b: del cur[k]
        for k, v in _snap_b.items():
            if cur.get(k, _TE) is not v: cur[k] = v
        for n, (m, d) in _snap_m.items():
            if _s{g}.modules.get(n) is not m: _s{g}.modules[n] = m
            cur = m.__dict__
            for k in _list(cur):
                if k not in d and k not in _volatile:
                    try: del cur[k]
                    except Exception: pass
            for k, v in d.items():
                if k not in _volatile and cur.get(k, _TE) is not v:
                    try: cur[k] = v
                    except Exception: pass
    def guard(obj):
        if not _callable(obj):
            return plain(obj)
        def guarded(*args, **kwargs):
            return plain(obj(*args, **kwargs))
        return guarded
    def exports(ns):
        names = ns.get("__all__")
        if not _isinst(names, (_glist, _tuple)):  # like exec-ing code and tests in one namespace
            names = [k for k in _glist(ns) if not k.startswith("__") and not k.endswith("{g}")]
        return [n for n in names if _isinst(n, _str)] + [
            n for n in ("_guard{g}", "_restore{g}", "_same{g}", "_order_free{g}") if n in ns]
    return guard, restore, exports
_guard{g}, _restore{g}, _exports{g} = _mk{g}()
del _mk{g}
# ---- agent code ----
'''

_EPILOGUE = '''
# ---- epilogue ----
_restore{g}()
__all__ = _exports{g}(globals())
'''


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
        return set()  # imported stdlib names are not the agent's values; the snapshot restores modules
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


def _setup_modules(setup: str, tests: tuple[str, ...]) -> list[str]:
    """Top-level module names the test setup and tests import (pre-imported so the snapshot covers them)."""
    mods: set[str] = set()
    for src in (setup, *tests):
        try:
            tree = parse_quietly(src)
        except SyntaxError:
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                mods |= {a.name.split(".")[0] for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                mods.add(n.module.split(".")[0])
    return sorted(mods)


def hardened_job(cells: list[str], module: str, tests: tuple[str, ...], setup: str = "",
                 extra_names: tuple[str, ...] = (), timeout_s: float | None = None,
                 reference: str | None = None, whole_file: bool = False) -> TestJob:
    """A TestJob that grades `tests` against the definitions in `cells`, hardened as described above.

    Args:
        cells: code the agent ran, in order.
        whole_file: `cells` is one file the agent wrote (coding-tools): every top-level statement is kept, as
            importing the file runs them (module-level loops, `try: import ...`), not only definitions.
        module: import name of the graded file (written as `<module>.py`).
        tests: the hidden test snippets (each usually one `assert`).
        setup: code run before each test (e.g. MBPP's test_imports).
        extra_names: more names whose calls are wrapped (e.g. the task's entry point).
        reference: the task's reference solution; with it, a test the candidate fails is graded
            order-insensitively when its expected order came from set/dict iteration (agentrl.envs.order_insensitive).
    """
    from agentrl.envs import order_insensitive

    g = secrets.token_hex(8)
    code, names, future = definitions(cells, whole_file=whole_file)
    pre = "\n".join(f"import {m}" for m in _setup_modules(setup, tests) if m.isidentifier())
    prelude = _PRELUDE.format(g=g, preimports=pre)
    loose: list[str | None] = [None] * len(tests)
    if reference:
        extra, loose = order_insensitive.prelude(g, reference, setup, tests)
        prelude = prelude.replace("# ---- agent code ----\n", extra + "# ---- agent code ----\n")
    source = "".join(f + "\n" for f in future) + prelude + code + _EPILOGUE.format(g=g)
    guard = lambda t: harden_test(t, names | set(extra_names), f"_guard{g}")  # noqa: E731
    wrapped = tuple(
        f"_restore{g}()\n" + (guard(t) if lo is None else order_insensitive.order_free_test(guard(t), guard(lo), i,
                                                                                  f"_order_free{g}"))
        for i, (t, lo) in enumerate(zip(tests, loose, strict=True)))
    return TestJob(files={f"{module}.py": source}, module=module, tests=wrapped, setup=setup, timeout_s=timeout_s)


def parse_quietly(source: str) -> ast.Module:
    """ast.parse without SyntaxWarnings for invalid escapes in (dataset or agent) code."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(source)
