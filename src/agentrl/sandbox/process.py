"""Parent side of one sandboxed process: backend choice, command lines, work dirs, capped capture.

Not the child side (agentrl.sandbox._child runs inside the sandbox) and not the warm pool
(agentrl.sandbox.pool); this module starts fresh processes and collects what they write.
"""

from __future__ import annotations

import itertools
import os
import queue
import secrets
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from agentrl.sandbox.uid_reach import others_can_reach, stage_pytest

_LAUNCHER_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
RESULT_CAP_BYTES = 4 << 20
# Dedicated unprivileged uids: a per-process block so that two trainers on one host differ. Within the
# block, uids [0, _POOL_UIDS) are leased one per pool slot (so that two pools in one process never share
# a uid: a zygote's kill(-1) after each job would SIGKILL the other pool's worker) and the rest cycle
# for fresh runs and sessions.
_UID_BLOCK = 1024
_POOL_UIDS = 768
_UID_BASE = 200_000_000 + (os.getpid() % 1_000_000) * _UID_BLOCK
_uid_counter = itertools.count()
_uid_lock = threading.Lock()
_free_pool_uids = set(range(_POOL_UIDS))


def next_uid() -> int:
    """A dedicated unprivileged uid for one fresh run or session (cycles over the block's last 256)."""
    with _uid_lock:
        return _UID_BASE + _POOL_UIDS + next(_uid_counter) % (_UID_BLOCK - _POOL_UIDS)


def lease_pool_uid() -> int:
    """A dedicated uid that no other live pool slot of this process holds; give it back with
    release_pool_uid. Raises RuntimeError when all 768 are leased (Sandboxes left unclosed)."""
    with _uid_lock:
        if not _free_pool_uids:
            raise RuntimeError(f"all {_POOL_UIDS} pool-worker uids of this process are in use: "
                               "close() Sandboxes that are no longer needed")
        offset = min(_free_pool_uids)
        _free_pool_uids.discard(offset)
    return _UID_BASE + offset


def release_pool_uid(uid: int) -> None:
    """Return a uid from lease_pool_uid (its processes must be gone); unknown uids are ignored."""
    offset = uid - _UID_BASE
    if 0 <= offset < _POOL_UIDS:
        with _uid_lock:
            _free_pool_uids.add(offset)


class _Spawner:
    """One long-lived thread that starts every long-lived sandboxed process (pool workers, sessions).

    bwrap's `--die-with-parent` is PR_SET_PDEATHSIG, and Linux ties it to the *thread* that forked
    the child (prctl(2): "the 'parent' in this case is considered to be the thread that created
    this process"), not to the process. A worker started from a short-lived thread (a batch's
    ThreadPoolExecutor) is SIGKILLed when that thread exits, while the pool still counts it idle.
    Starting them all from this daemon thread, which lives as long as the process, keeps the
    guarantee (the worker dies with the trainer) without the early death. Fork-safe: a forked
    trainer starts its own thread on first use.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()

    def _serve(self, jobs: queue.SimpleQueue) -> None:
        while True:
            fut, argv, kwargs = jobs.get()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(subprocess.Popen(argv, **kwargs))
                except BaseException as e:  # handed to the caller, never kills this thread
                    fut.set_exception(e)

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """subprocess.Popen(argv, **kwargs), run on the spawner thread; its errors are re-raised here."""
        with self._lock:
            if self._pid != os.getpid():  # first use, or we are a forked copy without the thread
                self._pid, self._jobs = os.getpid(), queue.SimpleQueue()
                threading.Thread(target=self._serve, args=(self._jobs,), name="agentrl-sandbox-spawner",
                                 daemon=True).start()
            jobs = self._jobs
        fut: Future = Future()
        jobs.put((fut, argv, kwargs))
        return fut.result()


_SPAWNER = _Spawner()


def spawn_long_lived(argv: list[str], **kwargs) -> subprocess.Popen:
    """Start a process that outlives the calling thread (see _Spawner); same arguments as Popen."""
    return _SPAWNER.popen(argv, **kwargs)


def _pytest_site_dir() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("pytest")
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(os.path.dirname(os.path.realpath(spec.origin)))


@dataclass
class Backend:
    """How children start: the isolation backend, interpreter, sandbox root and uid policy.

    Attributes:
        name: "bwrap" or "rlimit".
        python: interpreter the child runs (`python -I -S -B`).
        base_prefix: that interpreter's prefix (bound read-only under bwrap).
        sys_path: extra read-only import dirs (pytest's site dir) appended in the child.
        root: this Sandbox's private temp root (0711); work dirs are made under it.
        launcher: path of the copied child launcher inside `root`.
        drop_uid: True when we are root and children switch to a dedicated unprivileged uid.
        notes: why a fallback happened or what does not hold (reported by describe()).
        preload_pytest: warm-pool workers import pytest from `sys_path` before their first job, so each pytest
            job's fork starts with it imported (agentrl.sandbox._child.preload_pytest).
    """

    name: str
    python: str
    base_prefix: str
    sys_path: tuple[str, ...]
    root: str
    launcher: str
    drop_uid: bool
    notes: list[str] = field(default_factory=list)
    preload_pytest: bool = True

    def env(self, workdir: str) -> dict[str, str]:
        """The child's whole environment: PATH, HOME (the work dir) and LANG."""
        return {"PATH": SAFE_PATH, "HOME": workdir, "LANG": "C.UTF-8"}

    def command(self, bind_dir: str, mode: list[str]) -> list[str]:
        """argv that starts the launcher in `mode`, with `bind_dir` the only writable path."""
        py = [self.python, "-I", "-S", "-B", self.launcher, *mode]
        if self.name != "bwrap":
            return py
        return bwrap_args(self, bind_dir) + py


def bwrap_args(b: Backend, bind_dir: str) -> list[str]:
    """bubblewrap: no network, own PID/IPC/UTS namespaces, read-only system, one writable dir."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if os.geteuid() == 0:  # root: no user namespace; the launcher switches to the job uid itself
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user"]
    args += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--proc", "/proc", "--dev", "/dev"]
    ro = [p for p in (b.base_prefix, *b.sys_path) if not p.startswith("/usr/")]
    # bwrap would create the parents of bind points 0700 (root): make them traversable by the job uid.
    parents = sorted({a for p in (*ro, b.launcher, bind_dir) for a in _ancestors(p)} - {"/", "/usr"})
    for d in parents:
        args += ["--perms", "0755", "--dir", d]
    for path in ro:
        args += ["--ro-bind", path, path]
    args += ["--ro-bind", b.launcher, b.launcher, "--bind", bind_dir, bind_dir, "--chdir", "/"]
    # No --chdir into the work dir: it is 0700 and owned by the job uid, which the launcher becomes first.
    return args


def _ancestors(path: str) -> list[str]:
    """Proper ancestors of an absolute path, outermost first ("/a/b/c" -> ["/", "/a", "/a/b"])."""
    parts = path.rstrip("/").split("/")
    return ["/" + "/".join(parts[1:i]) for i in range(1, len(parts))]


def _pick_python(drop_uid: bool, notes: list[str]) -> tuple[str, str]:
    """The running interpreter, or a same-version system one that an unprivileged uid can read."""
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if not drop_uid or others_can_reach(os.path.join(prefix, "lib")):
        return exe, prefix
    alt = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if os.path.exists(alt) and others_can_reach(alt):
        notes.append(f"{exe} is not readable by unprivileged uids; the rlimit backend runs {alt}")
        return alt, "/usr"
    raise RuntimeError(f"no Python {sys.version_info.major}.{sys.version_info.minor} readable by an "
                       f"unprivileged uid ({exe} is under a private dir); install one or use bwrap")


def _child_sys_path(kind: str, site: str | None, drop_uid: bool, root: str, notes: list[str]) -> tuple[str, ...]:
    """Where the child imports pytest from: its site dir, or (rlimit as root, site dir private) a
    staged copy of pytest and its dependencies under `root`; () with a note if neither works."""
    if site and (kind == "bwrap" or not drop_uid or others_can_reach(site)):
        return (site,)
    if site:
        try:
            staged, n = stage_pytest(os.path.join(root, "site"))
        except Exception as e:  # noqa: BLE001 - any failure means: no pytest inside, said in notes
            notes.append(f"pytest is not available inside the sandbox: {site} is private and staging "
                         f"a copy failed ({e})")
            return ()
        notes.append(f"{site} is not readable by unprivileged uids; the rlimit backend imports a "
                     f"read-only copy of pytest and its {n - 1} dependencies (no third-party plugins)")
        return (staged,)
    notes.append("pytest is not available inside the sandbox")
    return ()


def make_backend(kind: str, root: str) -> Backend:
    """Build the backend `kind` ("bwrap" | "rlimit") rooted at `root`; raises RuntimeError if unusable."""
    notes: list[str] = []
    drop_uid = os.geteuid() == 0
    launcher = os.path.join(root, "launcher.py")
    shutil.copyfile(_LAUNCHER_SRC, launcher)
    os.chmod(launcher, 0o644)
    site = _pytest_site_dir()
    if kind == "bwrap":
        exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
        prefix = os.path.realpath(sys.base_prefix)
    else:
        exe, prefix = _pick_python(drop_uid, notes)
    sys_path = _child_sys_path(kind, site, drop_uid, root, notes)
    if not drop_uid:
        notes.append("not root: children keep the caller's uid (RLIMIT_NPROC binds for non-root)")
    b = Backend(kind, exe, prefix, sys_path, root, launcher, drop_uid, notes)
    if kind == "bwrap":
        _probe_bwrap(b)
    return b


def _probe_bwrap(b: Backend) -> None:
    """Start one trivial sandboxed interpreter; RuntimeError with bwrap's message if it fails."""
    if shutil.which("bwrap") is None:
        raise RuntimeError("bwrap is not installed (Debian package `bubblewrap`)")
    probe = tempfile.mkdtemp(dir=b.root, prefix="probe-")
    try:
        cmd = bwrap_args(b, probe) + [b.python, "-I", "-S", "-B", "-c", "import json"]
        p = subprocess.run(cmd, env=b.env(probe), cwd=b.root, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise RuntimeError(f"bwrap is unusable here: {p.stderr.decode(errors='replace').strip()[:500]}")
    finally:
        shutil.rmtree(probe, ignore_errors=True)


# Limits on the paths of the files a job gets (model-written in coding-tools): within what every Linux file
# system holds (NAME_MAX 255 bytes, PATH_MAX 4096 with the work dir in front), and shallow enough that
# creating the folders never nears Python's recursion limit.
MAX_FILE_PATH_BYTES = 1024
MAX_FILE_PATH_PARTS = 64
MAX_NAME_BYTES = 255


def file_path_problem(rel: object) -> str | None:
    """Why `rel` cannot be a file of a job's work dir (None: it can): not a str, empty, absolute,
    leaving the dir (".."), a NUL or other control character, not encodable as UTF-8, longer than
    MAX_FILE_PATH_BYTES, deeper than MAX_FILE_PATH_PARTS, or a part longer than MAX_NAME_BYTES."""
    if not isinstance(rel, str) or not rel:
        return "expected a non-empty str"
    norm = os.path.normpath(rel)
    if os.path.isabs(rel) or norm == ".." or norm.startswith("../") or norm == ".":
        return "expected a relative path inside the work dir"
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        return "contains a control character"
    try:
        size = len(norm.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not encodable as UTF-8"
    parts = norm.split("/")
    if size > MAX_FILE_PATH_BYTES or len(parts) > MAX_FILE_PATH_PARTS:
        return f"is longer than {MAX_FILE_PATH_BYTES} bytes or deeper than {MAX_FILE_PATH_PARTS} folders"
    if any(len(p.encode("utf-8")) > MAX_NAME_BYTES for p in parts):
        return f"has a name longer than {MAX_NAME_BYTES} bytes"
    return None


def make_workdir(parent: str, files: dict[str, str], uid: int | None) -> str:
    """A fresh 0700 dir under `parent` holding `files`, owned by `uid` (if dropping privileges).

    Raises ValueError, and leaves nothing behind, for files the job cannot be given: a path
    `file_path_problem` refuses, text that is not a str or not encodable as UTF-8, or paths that
    collide (a file where another needs a folder). These come from the caller's input (in coding-tools
    the model writes the paths), so they are a refusal, never a sandbox failure.
    """
    workdir = os.path.join(parent, "job-" + secrets.token_hex(8))
    os.mkdir(workdir, 0o700)
    try:
        for rel, text in files.items():
            why = file_path_problem(rel) or (None if isinstance(text, str) else "expected str text")
            if why:
                raise ValueError(f"sandbox file {str(rel)[:300]!r}: {why}")
            path = os.path.join(workdir, os.path.normpath(rel))
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            except UnicodeEncodeError as e:
                raise ValueError(f"sandbox file {rel[:300]!r}: text is not encodable as UTF-8 ({e.reason} at "
                                 f"position {e.start})") from None
            except (FileExistsError, NotADirectoryError, IsADirectoryError) as e:
                raise ValueError(f"sandbox file {rel[:300]!r}: its path collides with another file "
                                 f"({e.strerror})") from None
        if uid is not None:
            for dirpath, _dirs, names in os.walk(workdir):
                os.chown(dirpath, uid, uid)
                for n in names:
                    os.chown(os.path.join(dirpath, n), uid, uid)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return workdir


_CACHE_DIRS = ("__pycache__", ".pytest_cache")  # read_back returns none of their files


MAX_READ_BACK_FILES = 2000  # files one read_back returns at most
MAX_READ_BACK_BYTES = 32 << 20  # and bytes of their text: a run that wrote 20,000 files took a minute to take back,
# and 1 MiB files (RLIMIT_FSIZE) at ~300 a second put gigabytes of one run's output into the trainer's memory


def read_back(workdir: str, uid: int | None, max_file_bytes: int = 1 << 20,
              present: set[str] | None = None, max_files: int = MAX_READ_BACK_FILES,
              max_total_bytes: int = MAX_READ_BACK_BYTES, left_out: list[str] | None = None) -> dict[str, str]:
    """The work dir's UTF-8 text files after a run (path -> text), never following links.

    `present`, when given, receives the relative path of every entry that is not a folder the walk entered:
    files (skipped ones too, and those in the cache folders it does not read), links (to folders too), devices,
    ...; and, with a trailing "/", every folder it could not enter (a link to one, or one it could not list,
    the work dir itself as "./"), under which nothing is known to be gone. A given path that is in neither was
    deleted (see `gone`); one only skipped is still there.

    Skips symlinks, hard-linked files, files not owned by the job uid, binaries and large files,
    so a hostile child cannot make the (root) parent read a file outside the work dir; and files whose
    path `file_path_problem` refuses (a name of non-UTF-8 bytes, read as lone surrogates that no tokenizer
    or strict JSON writer takes; a control character; too long or too deep), which no later job could be
    given back and no observation could show. At most `max_files` files and `max_total_bytes` bytes of text
    come back, in walk order (folders top-down, names sorted); the others are skipped (still `present`, and
    appended to `left_out` when given, so the caller can say so).
    """
    out: dict[str, str] = {}
    total = 0

    def unlisted(e: OSError) -> None:  # a folder that is gone (the work dir itself, say) holds nothing
        if present is not None and e.filename is not None and not isinstance(e, FileNotFoundError):
            present.add(os.path.relpath(e.filename, workdir) + "/")

    for dirpath, dirs, names in os.walk(workdir, onerror=unlisted, followlinks=False):
        dirs.sort()  # a deterministic order, so the files kept under the caps do not depend on the file system
        names.sort()
        cache = any(part in _CACHE_DIRS for part in os.path.relpath(dirpath, workdir).split(os.sep))
        if present is None:  # nothing to learn in the caches: skip them
            dirs[:] = [d for d in dirs if d not in _CACHE_DIRS]
        else:
            for d in dirs:
                path = os.path.join(dirpath, d)
                if os.path.islink(path):  # os.walk lists it as a folder and does not enter it
                    rel = os.path.relpath(path, workdir)
                    present.update((rel, rel + "/"))
        for n in names:
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, workdir)
            if present is not None:
                present.add(rel)
            if cache or file_path_problem(rel):
                continue
            budget = max_total_bytes - total
            full = len(out) >= max_files or budget <= 0
            text = None if full else _read_text(path, uid, min(max_file_bytes, budget))
            if text is None and left_out is not None and (size := _regular_size(path)) is not None \
                    and size <= max_file_bytes and (full or size > budget):
                left_out.append(rel)  # a regular file the caps left out (not a link, nor a file too large alone)
            if text is not None:
                out[rel] = text
                total += len(text.encode("utf-8"))
    return out


def _regular_size(path: str) -> int | None:
    """The size in bytes of the regular file at `path` (links not followed), or None for anything else."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size if st.st_mode & 0o170000 == 0o100000 else None


def _read_text(path: str, uid: int | None, max_file_bytes: int) -> str | None:
    """The UTF-8 text of the regular file at `path`, or None (a link, hard-linked, another owner's, too large,
    binary, gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if (not (st.st_mode & 0o170000 == 0o100000) or st.st_nlink != 1
                or st.st_size > max_file_bytes or (uid is not None and st.st_uid != uid)):
            return None
        data = f.read(max_file_bytes + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def gone(path: str, present: frozenset[str] | set[str]) -> bool:
    """True if the given file `path` is no longer in the work dir `read_back` walked (`present`, its argument):
    nothing is at its path, and no folder above it was one the walk could not enter."""
    norm = os.path.normpath(path)
    if norm in present:
        return False
    parts = norm.split("/")
    return "./" not in present and not any("/".join(parts[:i]) + "/" in present for i in range(1, len(parts)))


class Capture:
    """Reads several fds at once until EOF or a deadline, keeping at most `cap` bytes of each.

    Bytes past the cap are still read (so the child never blocks on a full pipe) and counted.
    """

    def __init__(self, fds: dict[str, int], caps: dict[str, int]):
        self.sel = selectors.DefaultSelector()
        self.data = {name: bytearray() for name in fds}
        self.seen = dict.fromkeys(fds, 0)
        self.caps = caps
        self.open = set(fds)
        for name, fd in fds.items():
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, name)

    def pump(self, deadline: float, until=None) -> bool:
        """Read until all fds hit EOF, `until()` is true, or time.monotonic() >= deadline.

        Returns False if the deadline was hit first.
        """
        while self.open and not (until and until()):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in self.sel.select(min(left, 0.5)):
                self._read(key.fd, key.data)
        return True

    def pump_ready(self) -> None:
        """Read whatever is already buffered in the pipes, without waiting."""
        while self.open:
            ready = self.sel.select(0)
            if not ready:
                return
            for key, _ in ready:
                self._read(key.fd, key.data)

    def _read(self, fd: int, name: str) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.sel.unregister(fd)
            self.open.discard(name)
            return
        self.seen[name] += len(chunk)
        room = self.caps[name] - len(self.data[name])
        if room > 0:
            self.data[name] += chunk[:room]

    def text(self, name: str) -> tuple[str, bool]:
        """Decoded text of `name` (invalid UTF-8 replaced) and whether it was cut, with a visible mark."""
        raw, seen = bytes(self.data[name]), self.seen[name]
        text = raw.decode("utf-8", errors="replace")
        if seen > len(raw):
            text += f"\n[agentrl sandbox: output truncated, {seen - len(raw)} more bytes of {seen} not shown]\n"
        return text, seen > len(raw)

    def close(self, fds: dict[str, int]) -> None:
        self.sel.close()
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
