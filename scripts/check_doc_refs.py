"""Check that the repository paths and agentrl names a Markdown file mentions exist.

    python scripts/check_doc_refs.py README.md docs/*.md bench/README.md results/README.md

Finds, in each file: repository paths (`docs/x.md`, `src/agentrl/...`, `bench/x.py`, `results/...`,
`scripts/x.sh`, `tests/...`, `examples/...`; globs allowed), package files (`rl/session.py`, under
src/agentrl), dotted names `agentrl.a.b.Name[.attr]`
(the longest importable module prefix, then attributes), paths that point outside the repository
(`../shared`, `shared/...`, `/work/...`, the write-ups' file names) and `#`-free Markdown links to local files. Prints one line
per stale reference (`FILE:LINE: reference: why`) and exits 1 if there is any.
Run it with the repository's src on PYTHONPATH (it imports agentrl modules to check dotted names).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("docs", "bench", "results", "scripts", "tests", "examples", "src")
PATH_RE = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./*{},<>-]*[\w*}])")
NAME_RE = re.compile(r"(?<![\w./-])(agentrl(?:\.\w+)+)")
OUTSIDE_RE = re.compile(r"(\.\./shared\S*|(?<![\w./-])shared/(?:assets|data|DESIGN|STYLE)[\w./-]*|/work/\S+|lab-writeup-[\w.-]+)")
PKGS = ("tasks", "sandbox", "envs", "chat", "models", "rollout", "rl", "sft", "eval", "report", "serve", "harness",
        "integrations", "scale", "cli")
PKG_RE = re.compile(r"(?<![\w./-])((?:" + "|".join(PKGS) + r")/[\w./*{},-]*\.py)")  # rl/session.py: under src/agentrl
LINK_RE = re.compile(r"\]\(([^)#:\s]+)\)")


def _expand(ref: str) -> list[str]:
    """`a/{b,c}.py` -> [a/b.py, a/c.py]; no braces -> [ref]."""
    m = re.search(r"\{([^}]*)\}", ref)
    if not m:
        return [ref]
    return [x for alt in m.group(1).split(",") for x in _expand(ref[: m.start()] + alt + ref[m.end():])]


def path_exists(ref: str, base: Path) -> bool:
    """A repository path (relative to the root, or for links to the Markdown file's folder) that exists;
    `*` globs must match something; `<placeholder>` parts are not checked past them."""
    ref = ref.rstrip(".,;:")
    if "<" in ref:
        ref = ref[: ref.index("<")].rsplit("/", 1)[0]
    for one in _expand(ref):
        if not any(p for b in (ROOT, base) for p in (b.glob(one) if "*" in one else [b / one]) if p.exists()):
            return False
    return True


def name_exists(name: str) -> str | None:
    """None when `agentrl.a.b.attr` resolves (module prefix imported, then getattr), else why not."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        mod = ".".join(parts[:i])
        try:
            obj = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and not mod.startswith(e.name) and not e.name.startswith("agentrl"):
                return f"importing {mod} needs {e.name}"
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                # a dataclass field or an instance attribute set in __init__ is documented by the class
                fields = getattr(obj, "__dataclass_fields__", {})
                if attr in fields or attr in getattr(getattr(obj, "__init__", None), "__code__", type("", (), {
                        "co_names": ()})).co_names:
                    return None
                return f"{'.'.join(parts[:parts.index(attr)])} has no {attr!r}"
            obj = getattr(obj, attr)
        return None
    return "no such module"


def check(md: Path) -> list[str]:
    """The stale references of one Markdown file, as `FILE:LINE: ref: why` lines."""
    bad = []
    rel = md.resolve().relative_to(ROOT)
    for n, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
        for m in OUTSIDE_RE.finditer(line):
            bad.append(f"{rel}:{n}: {m.group(1)}: points outside the repository")
        for m in PATH_RE.finditer(line):
            if not path_exists(m.group(1), md.parent):
                bad.append(f"{rel}:{n}: {m.group(1)}: no such path")
        for m in PKG_RE.finditer(line):
            if not path_exists("src/agentrl/" + m.group(1), md.parent):
                bad.append(f"{rel}:{n}: {m.group(1)}: no such module file under src/agentrl")
        for m in LINK_RE.finditer(line):
            if not path_exists(m.group(1), md.parent):
                bad.append(f"{rel}:{n}: {m.group(1)}: broken link")
        for m in NAME_RE.finditer(line):
            name = m.group(1).rstrip(".")
            if name.startswith("agentrl.") and name.endswith(("json", "md", "log")):
                continue  # a file name such as agentrl_model.json never matches; agentrl.log would
            why = name_exists(name)
            if why:
                bad.append(f"{rel}:{n}: {name}: {why}")
    return bad


def main(argv: list[str]) -> int:
    """Check every file in `argv`; print the stale references; 1 if any."""
    bad = [b for f in argv for b in check(Path(f))]
    print("\n".join(bad) if bad else f"{len(argv)} files: every reference resolves")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
