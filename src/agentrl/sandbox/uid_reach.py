"""What a dedicated unprivileged uid can reach on the host (rlimit backend, run as root).

As root the rlimit-backend child switches to an unprivileged uid and sees the host file system with
that uid's permissions, so everything it needs must be reachable by "others": the sandbox root and
its work dirs, and pytest. CI typically clones (and may create its venv or TMPDIR) under
`mktemp -d`, a 0700 root-owned dir. This module finds a reachable temp base and stages a read-only
copy of pytest and its dependencies when their install dir is private. Not the bwrap backend (its
bind mounts make the parents traversable) and not the interpreter choice (process._pick_python).
"""

from __future__ import annotations

import os
import shutil
import tempfile

_TMP_FALLBACKS = ("/tmp", "/var/tmp", "/dev/shm")


def others_can_traverse(path: str) -> bool:
    """True if a uid unrelated to the owners can search `path` and every ancestor (o+x on each)."""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(1, len(parts) + 1):
        try:
            st = os.stat(os.sep.join(parts[:i]) or os.sep)
        except OSError:
            return False
        if not st.st_mode & 0o001:
            return False
    return True


def others_can_reach(path: str) -> bool:
    """True if an unrelated uid can traverse every ancestor of `path` and read `path` itself."""
    path = os.path.realpath(path)
    if not others_can_traverse(os.path.dirname(path)):
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    need = 0o005 if os.path.isdir(path) else 0o004
    return st.st_mode & need == need


def sandbox_tmp_base(drop_uid: bool) -> str:
    """Where to make a Sandbox root: the temp dir, or (as root, if that is private) a public one.

    Raises RuntimeError naming the dirs tried when none is traversable by an unprivileged uid.
    """
    base = tempfile.gettempdir()
    if not drop_uid or others_can_traverse(base):
        return base
    for alt in _TMP_FALLBACKS:
        if os.path.isdir(alt) and os.access(alt, os.W_OK) and others_can_traverse(alt):
            return alt
    raise RuntimeError(f"no temp dir an unprivileged uid can traverse: {base} (TMPDIR) is private and "
                       f"{', '.join(_TMP_FALLBACKS)} are missing or private; set TMPDIR to a 0755/1777 dir")


def _requirement_closure(root_dist: str) -> list:
    """Distributions `root_dist` needs on this interpreter (markers evaluated, extras off), itself first.

    Raises importlib.metadata.PackageNotFoundError if one is not installed.
    """
    from importlib import metadata

    from packaging.requirements import Requirement  # a dependency of pytest itself

    seen: dict[str, object] = {}
    todo = [root_dist]
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        dist = metadata.distribution(name)
        seen[key] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _place(src: str, dst: str) -> None:
    """Hard-link `src` to `dst` when others may read it and it is on the same device, else copy (0644)."""
    os.makedirs(os.path.dirname(dst), mode=0o755, exist_ok=True)
    if os.stat(src).st_mode & 0o004:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)


def stage_pytest(dest: str) -> tuple[str, int]:
    """Copy pytest and the distributions it requires into `dest` (0755 dirs, 0644 files).

    Returns (dest, number of distributions). Only files inside the install dir are staged (no
    console scripts); third-party pytest plugins are not. Raises OSError or
    importlib.metadata.PackageNotFoundError if pytest's files cannot be listed or copied.
    """
    dists = _requirement_closure("pytest")
    os.makedirs(dest, mode=0o755, exist_ok=True)
    for dist in dists:
        files = dist.files
        if files is None:
            raise OSError(f"{dist.metadata['Name']}: no RECORD, cannot list its files")
        for rel in files:
            if rel.parts and rel.parts[0] == "..":
                continue
            src = str(dist.locate_file(rel))
            if os.path.isfile(src):
                _place(src, os.path.join(dest, *rel.parts))
    for dirpath, _dirs, _names in os.walk(dest):
        os.chmod(dirpath, 0o755)
    return dest, len(dists)
