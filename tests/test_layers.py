"""The package graph of src/agentrl, read statically with ast: acyclic, and every import points down the layers.

Every `import agentrl.x` / `from agentrl.x import ...` / relative import anywhere in a module (also inside
functions: a lazy import is still a dependency) is an edge from the importing module's package to the
imported one. The layer order is docs/design.md's ("Layers and the import rule"):

    base (paths, preflight, registry) < sandbox < tasks < envs < chat < models < rollout < eval < report < rl < front ends

A package may import only packages below it; no library package imports a front end.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "agentrl"

BASE = ("__init__", "paths", "preflight", "registry")  # leaf modules anyone may import; they import only each other
LAYERS = ("sandbox", "tasks", "envs", "chat", "models", "rollout", "eval", "report", "rl")  # bottom to top
FRONT_ENDS = ("sft", "serve", "harness", "integrations", "scale", "cli", "__main__")  # over the layers


def _package(rel: Path) -> str:
    """agentrl/<pkg>/... -> pkg; a top-level module agentrl/<name>.py -> name."""
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported(node: ast.AST, rel: Path) -> list[str]:
    """Dotted agentrl modules named by one import node (relative imports resolved against `rel`)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        return [node.module or ""]
    here = ["agentrl", *rel.with_suffix("").parts]
    if rel.name != "__init__.py":
        here = here[:-1]  # a module's package
    base = here[: len(here) - (node.level - 1)]
    return [".".join(base + ([node.module] if node.module else []))]


def package_graph(root: Path) -> dict[str, dict[str, list[str]]]:
    """{package: {imported package: ["file:line", ...]}} for the agentrl source tree at `root`."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        src = _package(rel)
        graph[src]  # every package is a node, even one that imports nothing
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for mod in _imported(node, rel):
                parts = mod.split(".")
                if parts[0] != "agentrl" or len(parts) < 2:
                    continue
                dst = parts[1]
                if dst != src:
                    graph[src][dst].append(f"{rel}:{node.lineno}")
    return {k: dict(v) for k, v in graph.items()}


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """One cycle [a, b, ..., a] of the graph, or None (depth-first search with colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        colour[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, {})):
            if colour.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if colour.get(m) is None and (c := visit(m)) is not None:
                return c
        stack.pop()
        colour[n] = 2
        return None

    for n in sorted(graph):
        if colour.get(n) is None and (c := visit(n)) is not None:
            return c
    return None


def layer_violations(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """Edges that point up the layers or from a library package into a front end, with where they are."""
    rank = {p: i for i, p in enumerate(LAYERS)}
    bad = []
    for src, deps in graph.items():
        for dst, where in deps.items():
            if src in BASE and dst not in BASE:
                bad.append(f"base module {src} imports {dst} ({where[0]})")
            elif src in rank and dst in rank and rank[dst] > rank[src]:
                bad.append(f"{src} imports {dst}, a layer above it ({where[0]})")
            elif src not in FRONT_ENDS and dst in FRONT_ENDS:
                bad.append(f"{src} imports the front end {dst} ({where[0]})")
    return sorted(bad)


def test_the_package_graph_is_acyclic():
    graph = package_graph(SRC)
    assert set(LAYERS) <= set(graph), "a layer package is missing: update LAYERS and docs/design.md"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle " + " -> ".join(
        f"{a} ({graph[a][b][0]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


def test_imports_point_down_the_layers():
    assert layer_violations(package_graph(SRC)) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = tmp_path / "agentrl" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path / "agentrl"


def test_checker_sees_lazy_relative_and_cyclic_imports(tmp_path):
    root = _tree(tmp_path, {
        "report/results.py": "def f():\n    from agentrl.eval.bootstrap import ci\n",  # lazy import
        "eval/run.py": "from ..tasks import task\n",  # relative import
        "tasks/__init__.py": "from . import task\nimport agentrl.report.checks\n",
        "tasks/task.py": "import os\n",
    })
    graph = package_graph(root)
    assert graph["report"] == {"eval": ["report/results.py:2"]}
    assert graph["eval"] == {"tasks": ["eval/run.py:1"]}
    assert graph["tasks"] == {"report": ["tasks/__init__.py:2"]}
    assert find_cycle(graph) == ["eval", "tasks", "report", "eval"]
    assert layer_violations(graph) == ["tasks imports report, a layer above it (tasks/__init__.py:2)"]


@pytest.mark.parametrize(("files", "expected"), [
    ({"paths.py": "import agentrl.tasks\n", "tasks/a.py": ""}, "base module paths imports tasks (paths.py:1)"),
    ({"rollout/a.py": "from agentrl.sft import x\n", "sft/b.py": ""},
     "rollout imports the front end sft (rollout/a.py:1)"),
])
def test_checker_flags_base_and_front_end_edges(tmp_path, files, expected):
    assert layer_violations(package_graph(_tree(tmp_path, files))) == [expected]


def module_graph(root: Path) -> dict[str, dict[str, str]]:
    """{module: {imported agentrl module: "file:line"}} (dotted names without the `agentrl.` prefix; an
    imported name that is a package's attribute, `from agentrl.x import y` with y not a module, is an edge
    to agentrl.x)."""
    modules = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
               for p in root.rglob("*.py")}
    graph: dict[str, dict[str, str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        src = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        graph[src] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for mod in _imported(node, rel):
                parts = mod.split(".")
                if parts[0] != "agentrl" or len(parts) < 2:
                    continue
                name = ".".join(parts[1:])
                targets = [name]
                if isinstance(node, ast.ImportFrom):  # `from pkg import mod` names the module mod
                    targets = [f"{name}.{a.name}" if f"{name}.{a.name}" in modules else name for a in node.names]
                for dst in targets:
                    if dst != src and dst in modules:
                        graph[src].setdefault(dst, f"{rel}:{node.lineno}")
    return graph


def test_the_module_graph_is_acyclic():
    """No two modules import each other, directly or around a loop (lazy imports inside functions count)."""
    graph = module_graph(SRC)
    cycle = find_cycle({k: {d: [w] for d, w in v.items()} for k, v in graph.items()})
    assert cycle is None, "module cycle " + " -> ".join(
        f"{a} ({graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


def test_commands_live_in_cli_and_the_library_never_imports_it():
    """Every `agentrl ...` command is a module of cli/ (no `commands.py` elsewhere); cli/ is imported only
    by itself and `python -m agentrl`."""
    assert [str(p.relative_to(SRC)) for p in SRC.rglob("commands.py")] == []
    users = sorted(f"{src} ({where})" for src, deps in module_graph(SRC).items()
                   if not (src == "cli" or src.startswith("cli.") or src == "__main__")
                   for dst, where in deps.items() if dst == "cli" or dst.startswith("cli."))
    assert users == []


SNAPSHOT = r"""
import importlib, json, pkgutil, sys
import agentrl
from agentrl.envs import env_specs
from agentrl.rl.agent_backends import _AGENTS
from agentrl.rl.estimators import ADV_ESTIMATORS
from agentrl.rl.warm_start import _WARM_STARTS
from agentrl.rollout.samplers import SAMPLERS

def snapshot():
    return {"envs": list(env_specs()), "agents": list(_AGENTS), "warm_starts": list(_WARM_STARTS),
            "estimators": list(ADV_ESTIMATORS), "samplers": list(SAMPLERS)}

before = snapshot()
skipped = []
for info in pkgutil.walk_packages(agentrl.__path__, "agentrl."):
    if info.name == "agentrl.__main__":
        continue
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as e:  # an optional extra (ray, openenv, trl) that is not installed
        if (e.name or "").startswith("agentrl"):
            raise
        skipped.append(info.name)
from agentrl.registry import Registry
listed = {id(r) for r in (_AGENTS, ADV_ESTIMATORS, _WARM_STARTS, SAMPLERS)}
unlisted = sorted(f"{m.__name__}.{k}" for m in list(sys.modules.values()) if m.__name__.startswith("agentrl")
                  for k, v in vars(m).items() if isinstance(v, Registry) and id(v) not in listed)
print(json.dumps({"before": before, "after": snapshot(), "skipped": skipped, "unlisted": unlisted}))
"""


def test_importing_every_module_registers_nothing():
    """A fresh interpreter's registries hold the same names before and after importing every module of
    the package (the CLI included): nothing registers itself as a side effect of being imported."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(SRC.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["after"] == out["before"]
    assert out["before"]["warm_starts"] == ["sft"] and out["before"]["agents"] == ["opencode"]
    assert out["unlisted"] == [], "a Registry the snapshot does not check: add it to SNAPSHOT"


def test_strategies_compose_the_session_instead_of_subclassing_it():
    """agentrl.scale's strategies are Backends composed over a LocalBackend: no class subclasses RunSession
    and no run-layer class (rl/, scale/) is assembled at run time with type(name, bases, namespace)."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", "")) == "RunSession"
                                                      for b in node.bases):
                bad.append(f"{path.relative_to(SRC)}:{node.lineno} class {node.name}(RunSession)")
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "type" and len(node.args) == 3
                    and path.relative_to(SRC).parts[0] in ("rl", "scale")):  # (TRL's env classes are built so)
                bad.append(f"{path.relative_to(SRC)}:{node.lineno} type(name, bases, namespace)")
    assert bad == []


def test_every_backend_implements_the_protocol():
    """LocalBackend and agentrl.scale's backends have every method of agentrl.rl.backend.Backend, with its
    parameters (names and kinds), so the trainer can call any of them through RunSession."""
    import inspect

    pytest.importorskip("torch")
    from agentrl.rl.backend import Backend, LocalBackend
    from agentrl.scale.data_parallel import DataParallelBackend
    from agentrl.scale.workers import RolloutWorkersBackend

    methods = ("rollout", "update", "checkpoint", "rollout_copy", "sync_weights", "decide")

    def params(fn):
        return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]

    for cls in (LocalBackend, DataParallelBackend, RolloutWorkersBackend):
        for name in methods:
            assert params(getattr(cls, name)) == params(getattr(Backend, name)), f"{cls.__name__}.{name}"
