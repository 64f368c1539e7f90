"""Size and shape figures of src/agentrl at git revisions (issue 23's before/after), printed as tables.

    python scripts/run_layer_metrics.py [--depth N] [REV ...]     (default REVs: e8a4a0d^1 d426026 WORKTREE)

Method (all static, read with `ast` from `git archive REV`, or from the files on disk for WORKTREE):
- lines per package: physical lines of the .py files under src/agentrl/<pkg>/; top-level modules (cli.py,
  paths.py, ...) count as "(top-level)". Old package names are shown under their new ones (io -> report,
  dist -> scale, agents -> harness). README: lines of README.md.
- largest files: by lines; largest functions: top-level functions and methods, end_lineno - lineno + 1.
- the train walk: a breadth-first walk of a static call graph from `agentrl train`'s handler (at the
  revision: cli/train.py:main, or before the reshape dist/commands.py:train_main with the single-process
  handler rl/commands.py:train_main it wraps) to depth N. An edge goes from a function to every agentrl
  function, class or method its body names (called or passed as a callable), resolved through module-level
  and function-local imports and re-exports; `self.m` goes to the method's class; `p.m` with `p` a
  parameter annotated with an agentrl class goes to that class's m; any other `x.m` goes to the one class
  defined or imported in the caller's module that has a method m (no edge when none or several); a class
  goes to its __init__ / __post_init__. Registries: a module-level variable holding "agentrl.x:attr"
  strings gives every function that names it an edge to those entries (imported when a run uses them),
  and so does a module-level `register_x("name", fn)` call (registration on import) for the variables
  register_x names. The torchrun and worker strategies (scale/, dist/) are left out (--exclude): one
  single-process run never enters them.
  Figures: files visited; visits per file: how often the reading order (a depth-first preorder from the
  start, callees in the order a body names them, each function read once) enters the file; climbs back
  up: distinct module -> module edges from a package to one above it in the revision's own
  tests/test_layers.py order (base < layers bottom to top < front ends < cli).
  An approximation: a call through an untyped object with a common method name is missed; a name used
  only in isinstance counts as a call; the figures grow with the depth (--depth 3 and 4 show the core).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import tarfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RENAMED = {"io": "report", "dist": "scale", "agents": "harness"}
ENTRY_REF = re.compile(r"^(agentrl(?:\.\w+)+):(\w+)$")
STARTS = (["agentrl.cli.train:main"], ["agentrl.dist.commands:train_main", "agentrl.rl.commands:train_main"])


def read_tree(rev: str) -> dict[str, str]:
    """{path: text} of src/agentrl's .py files, tests/test_layers.py and README.md at `rev`."""
    names = ("src/agentrl", "tests/test_layers.py", "README.md")
    if rev == "WORKTREE":
        files = [p for n in names for p in ([ROOT / n] if n.endswith((".py", ".md")) else (ROOT / n).rglob("*.py"))]
        return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in files}
    data = subprocess.run(["git", "archive", rev, *names], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()
                if m.isfile() and m.name.endswith((".py", ".md"))}


def module_name(path: str) -> str:
    return ".".join(Path(path).with_suffix("").parts[1:]).removesuffix(".__init__")


def package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


class Tree:
    """One revision's modules: definitions, import bindings and registry entries, and the call edges."""

    def __init__(self, files: dict[str, str]):
        self.paths = {module_name(p): p for p in files if p.startswith("src/agentrl/")}
        self.ast = {m: ast.parse(files[p]) for m, p in self.paths.items()}
        self.defs = {m: {n.name: n for n in t.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
                     for m, t in self.ast.items()}
        self.imports = {m: self.bindings(m, t.body, top=True) for m, t in self.ast.items()}
        self.registries = {m: self.registry_entries(m) for m in self.ast}
        for m, t in self.ast.items():  # import-time registration: `register_x("name", fn)` at module level
            for n in (n.value for n in t.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)):
                reg = self.resolve(m, self.imports[m], n.func)
                if reg and isinstance(self.node(reg), ast.FunctionDef):
                    fns = [k for a in [*n.args, *(kw.value for kw in n.keywords)]
                           if (k := self.resolve(m, self.imports[m], a))]
                    for var in {x.id for x in ast.walk(self.node(reg)) if isinstance(x, ast.Name)}:
                        self.registries[reg.split(":")[0]].get(var, []).extend(fns)
        layers = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(files["tests/test_layers.py"]).body
                  if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") in ("BASE", "LAYERS")}
        self.rank = {p: -1 for p in layers["BASE"]} | {p: i for i, p in enumerate(layers["LAYERS"])}
        self.top = len(layers["LAYERS"])  # front ends; cli and __main__ one above

    def registry_entries(self, mod: str) -> dict[str, list[str]]:
        """{module-level variable: the nodes its "agentrl.x:attr" strings name} (every variable, maybe [])."""
        out = {}
        for n in (n for n in self.ast[mod].body if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value):
            refs = [ENTRY_REF.match(c.value).groups() for c in ast.walk(n.value)
                    if isinstance(c, ast.Constant) and ENTRY_REF.match(str(c.value))]
            for tgt in (t for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)):
                out[tgt.id] = [k for m, a in refs if (k := self.lookup(m, [a]))]
        return out

    def rank_of(self, mod: str) -> int:
        pkg = package(mod)
        return self.rank.get(pkg, self.top + (pkg in ("cli", "__main__")))

    def bindings(self, mod: str, body: list[ast.stmt], top: bool = False) -> dict[str, tuple[str, ...]]:
        """name -> ("mod", module) or ("attr", module, name) for the agentrl imports in `body` (a function's:
        nested too; a module's, `top`: not those inside its functions and classes)."""
        out: dict[str, tuple[str, ...]] = {}
        here = mod.split(".") if self.paths.get(mod, "").endswith("__init__.py") else mod.split(".")[:-1]
        def nodes(n: ast.AST):  # a module's own imports (`top`): not those inside its functions and classes
            if top and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                return
            yield n
            for c in ast.iter_child_nodes(n):
                yield from nodes(c)

        for node in (n for stmt in body for n in nodes(stmt)):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("agentrl.") and a.asname:
                        out[a.asname] = ("mod", a.name)
            elif isinstance(node, ast.ImportFrom):
                base = (node.module or "") if not node.level else ".".join(
                    here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                if base.startswith("agentrl"):
                    for a in node.names:
                        sub = f"{base}.{a.name}"
                        out[a.asname or a.name] = ("mod", sub) if sub in self.paths else ("attr", base, a.name)
        return out

    def lookup(self, mod: str, path: list[str], hops: int = 0) -> str | None:
        """The node "module:Name[.method]" that `mod.path` names, following re-exports."""
        if mod not in self.defs or not path or hops > 6:
            return None
        head, rest = path[0], path[1:]
        if head in self.defs[mod]:
            node = self.defs[mod][head]
            if rest and isinstance(node, ast.ClassDef) and rest[0] in self.methods(node):
                return f"{mod}:{head}.{rest[0]}"
            return f"{mod}:{head}"
        if f"{mod}.{head}" in self.paths:
            return self.lookup(f"{mod}.{head}", rest, hops + 1)
        b = self.imports[mod].get(head)
        if b is None:
            return None
        return self.lookup(b[1], rest, hops + 1) if b[0] == "mod" else self.lookup(b[1], [b[2], *rest], hops + 1)

    @staticmethod
    def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
        return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}

    def node(self, key: str) -> ast.AST:
        mod, _, qual = key.partition(":")
        name, _, meth = qual.partition(".")
        cls = self.defs[mod][name]
        return self.methods(cls)[meth] if meth else cls

    def edges(self, key: str) -> list[str]:
        """The agentrl nodes that node `key`'s body names (module docstring)."""
        mod, qual = key.split(":")
        fn = self.node(key)
        if isinstance(fn, ast.ClassDef):
            return [f"{key}.{m}" for m in ("__init__", "__post_init__") if m in self.methods(fn)]
        local = {**self.imports[mod], **self.bindings(mod, fn.body)}
        own = f"{mod}:{qual.split('.')[0]}" if "." in qual else None  # a method's class
        types = {a.arg: t for a in fn.args.args + fn.args.kwonlyargs
                 if a.annotation is not None and (t := self.resolve(mod, local, a.annotation))}
        types |= {"self": own, "cls": own} if own else {}
        classes = {f"{mod}:{n}" for n, d in self.defs[mod].items() if isinstance(d, ast.ClassDef)}
        classes |= {k for name in local if (k := self.resolve(mod, local, ast.Name(id=name)))}
        classes = {c for c in classes if c != own and isinstance(self.node(c), ast.ClassDef)}
        out: dict[str, None] = {}  # an ordered set: the order names first appear in the body

        def visit(n: ast.AST) -> None:
            if isinstance(n, ast.Name):
                out.update(dict.fromkeys([t] if (t := self.resolve(mod, local, n)) else []))
                out.update(dict.fromkeys(self.registries[mod].get(n.id, [])))
                return
            if isinstance(n, ast.Attribute):
                if isinstance(n.value, ast.Name) and n.value.id in types:  # self.m, sess.m (sess: RunSession)
                    tmod, tname = types[n.value.id].split(":")
                    target = self.lookup(tmod, [*tname.split("."), n.attr])
                    if target and target.endswith(f".{n.attr}"):
                        out[target] = None
                        return
                elif target := self.resolve(mod, local, n):
                    out[target] = None
                    return
                else:  # x.m, x untyped: the one class defined or imported here with a method m
                    hits = [f"{c}.{n.attr}" for c in classes if n.attr in self.methods(self.node(c))]
                    out.update(dict.fromkeys(hits if len(hits) == 1 else []))
            if isinstance(n, ast.AnnAssign):
                n = n.value  # an annotation names a type, not a call
            for child in ast.iter_child_nodes(n) if n is not None else ():
                visit(child)

        for stmt in fn.body:
            visit(stmt)
        return [t for t in out if t != key]

    def resolve(self, mod: str, local: dict, expr: ast.AST) -> str | None:
        """The node a Name / dotted Attribute names in module `mod` with import bindings `local`."""
        chain = []
        while isinstance(expr, ast.Attribute):
            chain.insert(0, expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        if expr.id in self.defs[mod]:
            return self.lookup(mod, [expr.id, *chain])
        b = local.get(expr.id)
        if b is None:
            return None
        return self.lookup(b[1], chain) if b[0] == "mod" else self.lookup(b[1], [b[2], *chain])

    def walk(self, starts: list[str], depth: int, exclude: tuple[str, ...]) -> tuple[list[str], set[tuple[str, str]]]:
        """(the reading order: a depth-first preorder, callees in the order the body names them, each node
        read once; the call edges). A node is read on only when its shortest distance from the start < depth."""
        def callees(k: str) -> list[str]:
            return [t for t in self.edges(k) if package(t.split(":")[0]) not in exclude]

        out, seen, frontier = {}, set(starts), list(starts)
        for _ in range(depth):  # breadth first: every node within `depth` calls of the start is read on
            nxt = []
            for k in frontier:
                out[k] = callees(k)
                nxt += [t for t in out[k] if t not in seen and not seen.add(t)]
            frontier = nxt
        order: list[str] = []

        def read(k: str) -> None:
            order.append(k)
            for t in out.get(k, []):
                if t not in order:
                    read(t)

        for k in starts:
            read(k)
        return order, {(a, t) for a, ts in out.items() for t in ts}


def report(rev: str, depth: int, exclude: tuple[str, ...], top: int) -> dict:
    files = read_tree(rev)
    tree = Tree(files)
    per_pkg: Counter[str] = Counter()
    sizes, funcs = {}, []
    for mod, path in tree.paths.items():
        n = files[path].count("\n")
        pkg = package(mod)
        per_pkg[RENAMED.get(pkg, pkg) if len(Path(path).parts) > 3 else "(top-level)"] += n
        sizes[path.removeprefix("src/agentrl/")] = n
        for node in ast.walk(tree.ast[mod]):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node.end_lineno - node.lineno + 1, f"{path.removeprefix('src/agentrl/')}:{node.name}"))
    starts = next(s for s in STARTS if all(k.split(":")[0] in tree.paths for k in s))
    order, edges = tree.walk(starts, depth, exclude)
    files_read = [tree.paths[k.split(":")[0]] for k in order]
    visits = Counter(f for i, f in enumerate(files_read) if i == 0 or files_read[i - 1] != f)
    climbs = sorted({f"{a.split(':')[0]} -> {b.split(':')[0]}" for a, b in edges  # distinct module pairs
                     if tree.rank_of(b.split(":")[0]) > tree.rank_of(a.split(":")[0])})
    return {"rev": rev, "packages": per_pkg, "total": sum(per_pkg.values()), "readme": files["README.md"].count("\n"),
            "files": sorted(sizes.items(), key=lambda kv: -kv[1])[:top], "funcs": sorted(funcs, reverse=True)[:top],
            "walk_files": len(set(files_read)), "visits": visits, "climbs": climbs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("revs", nargs="*", default=["e8a4a0d^1", "d426026", "WORKTREE"])
    ap.add_argument("--depth", type=int, default=6, help="call-graph depth of the train walk")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--exclude", default="scale,dist", help="packages the walk does not enter")
    args = ap.parse_args()
    reps = [report(r, args.depth, tuple(args.exclude.split(",")), args.top) for r in args.revs]
    print("lines per package".ljust(22) + "".join(r["rev"][:12].rjust(13) for r in reps))
    for pkg in sorted({p for r in reps for p in r["packages"]}):
        print(pkg.ljust(22) + "".join(str(r["packages"].get(pkg, "-")).rjust(13) for r in reps))
    for label, key in (("total", "total"), ("README.md lines", "readme"), ("walk: files", "walk_files")):
        print(label.ljust(22) + "".join(str(r[key]).rjust(13) for r in reps))
    for label, fn in (("walk: max visits/file", lambda r: max(r["visits"].values())),
                      ("walk: files > 3 visits", lambda r: sum(v > 3 for v in r["visits"].values())),
                      ("walk: climbs", lambda r: len(r["climbs"]))):
        print(label.ljust(22) + "".join(str(fn(r)).rjust(13) for r in reps))
    for r in reps:
        print(f"\n== {r['rev']}\nlargest files: " + ", ".join(f"{p} {n}" for p, n in r["files"]))
        print("largest functions: " + ", ".join(f"{name} {n}" for n, name in r["funcs"]))
        print("walk visits: " + ", ".join(f"{p.removeprefix('src/agentrl/')} {n}" for p, n in r["visits"].most_common()))
        print("climbs:" + "".join(f"\n  {c}" for c in r["climbs"]) if r["climbs"] else "climbs: none")


if __name__ == "__main__":
    main()
