"""Warm pool: pre-started clean interpreters (zygotes) that fork one limited child per job.

A zygote is the launcher in `zygote` mode, started under the same backend as a fresh run (bwrap
namespaces, dedicated uid). It imports only the standard library and never runs job code: for each
job it forks, and the child applies the rlimits, switches to the job's fresh work dir and runs.
The fork replaces interpreter start-up (tens of ms) with ~1 ms. Each zygote has its own uid, so
`kill(-1)` after a job removes anything the job left behind, and jobs of different zygotes cannot
signal or read each other. Not the public API (agentrl.sandbox.sandbox).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import threading
import time

from agentrl.sandbox.oneshot import RawRun, feed, finish, kill_group, new_spec
from agentrl.sandbox.process import (
    RESULT_CAP_BYTES,
    Backend,
    Capture,
    lease_pool_uid,
    make_workdir,
    release_pool_uid,
    spawn_long_lived,
)

_START_TIMEOUT_S = 30.0
_SLACK_S = 3.0  # the zygote enforces the wall clock; the parent waits this much longer before killing it


class ZygoteError(RuntimeError):
    """A pool worker died, hung or could not start; the job did not get a trustworthy result."""


def _zygote_log():
    """Where a zygote's own stderr goes: inherited when AGENTRL_SANDBOX_DEBUG=1, else nowhere."""
    return None if os.environ.get("AGENTRL_SANDBOX_DEBUG") == "1" else subprocess.DEVNULL


class Zygote:
    """One warm worker: a sandboxed clean interpreter serving one job at a time over a socket."""

    def __init__(self, backend: Backend, slot: int, uid: int | None):
        self.backend = backend
        self.uid = uid
        self.dir = os.path.join(backend.root, f"slot-{slot}")
        os.makedirs(self.dir, mode=0o711, exist_ok=True)
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        reap = "1" if (self.uid is not None or backend.name == "bwrap") else "0"
        preload = json.dumps(list(backend.sys_path) if backend.preload_pytest else [])
        mode = ["zygote", str(child.fileno()), "-" if self.uid is None else str(self.uid), reap, preload]
        try:
            self.proc = spawn_long_lived(backend.command(self.dir, mode), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=_zygote_log(),
                                         pass_fds=(child.fileno(),), env=backend.env(self.dir),
                                         cwd=self.dir, start_new_session=True)
        finally:
            child.close()
        self.sock.settimeout(_START_TIMEOUT_S)
        try:
            hello = self.sock.recv(4096)
        except OSError as e:
            hello = b""
            self.close()
            raise ZygoteError(f"pool worker did not start: {e}") from e
        if b"ready" not in hello:
            self.close()
            raise ZygoteError(f"pool worker did not start (exit code {self.proc.poll()})")
        self.sock.settimeout(None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, files: dict[str, str], kind: str, limits: dict, timeout_s: float,
            return_files: bool = False, **extra) -> RawRun:
        """Run one job in a forked child.

        Raises ZygoteError, after closing this worker, when the worker is dead or dies, hangs or
        breaks the socket before it has reported the job's exit status (the job then has no
        trustworthy result and may be re-dispatched). ValueError for bad `files`.
        """
        workdir = make_workdir(self.dir, files, self.uid)
        try:
            return self._run_in(workdir, kind, limits, timeout_s, return_files, extra)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run_in(self, workdir: str, kind: str, limits: dict, timeout_s: float, return_files: bool,
                extra: dict) -> RawRun:
        if not self.alive():
            self.close()
            raise ZygoteError(f"pool worker exited before the job (exit code {self.proc.poll()})")
        t0 = time.monotonic()
        pipes = [os.pipe() for _ in range(4)]
        (out_r, out_w), (err_r, err_w), (res_r, res_w), (spec_r, spec_w) = pipes
        fds = {"stdout": out_r, "stderr": err_r, "result": res_r, "ctl": self.sock.fileno()}
        cap = None
        try:
            spec = new_spec(kind, workdir, self.uid, self.backend, limits, timeout_s=timeout_s, **extra)
            try:
                socket.send_fds(self.sock, [b"job"], [out_w, err_w, res_w, spec_r])
            except OSError as e:  # EPIPE/ECONNRESET: the worker exited or is being killed
                os.close(spec_w)
                self.close()
                raise ZygoteError(f"pool worker unreachable: {e}") from e
            finally:
                for fd in (out_w, err_w, res_w, spec_r):
                    os.close(fd)
            feed(spec_w, json.dumps(spec).encode())
            cap_bytes = limits["max_output_bytes"]
            cap = Capture(fds, {"stdout": cap_bytes, "stderr": cap_bytes, "result": RESULT_CAP_BYTES,
                                "ctl": 4096})
            done = cap.pump(t0 + timeout_s + _SLACK_S,
                            until=lambda: b"\n" in cap.data["ctl"] and not (cap.open - {"ctl"}))
            reply = bytes(cap.data["ctl"]).split(b"\n", 1)[0]
            if not done or not reply:
                self.close()
                raise ZygoteError("pool worker hung or died during the job" if not done
                                  else "pool worker died during the job")
            status = json.loads(reply)
            return finish(cap, spec["marker"], status["exit_code"], status["timed_out"], t0, workdir,
                          self.uid, return_files)
        finally:
            if cap is not None:
                cap.sel.close()
            for fd in (out_r, err_r, res_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self.sock.fileno() >= 0:
                os.set_blocking(self.sock.fileno(), True)  # Capture made it non-blocking

    def close(self) -> None:
        """Stop this worker (idempotent): closing the socket ends it; SIGKILL if it lingers."""
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                kill_group(self.proc)
                self.proc.wait()
        if self.uid is not None and self.backend.name != "bwrap":
            reap_uid(self.backend, self.uid)


def reap_uid(backend: Backend, uid: int) -> None:
    """SIGKILL every process of dedicated `uid` (what a dead rlimit-backend zygote left behind)."""
    code = "import os\ntry:\n os.kill(-1, 9)\nexcept OSError:\n pass\n"
    subprocess.run([backend.python, "-I", "-S", "-B", "-c", code], user=uid, group=uid, extra_groups=[],
                   env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)


class WarmPool:
    """Up to `width` zygotes; a job takes an idle one (starting it if needed) and gives it back."""

    def __init__(self, backend: Backend, width: int):
        if not 1 <= width <= 16:
            raise ValueError(f"pool width {width}: expected 1..16 workers")
        self.backend = backend
        self.width = width
        self._idle: queue.SimpleQueue[Zygote] = queue.SimpleQueue()
        self._free_slots = list(range(width))
        self._all: set[Zygote] = set()
        self._lock = threading.Lock()
        self._sem = threading.Semaphore(width)
        self._closed = False
        # One uid per slot, kept across that slot's restarts and unique in this process.
        self._uids: list[int | None] = [None] * width
        if backend.drop_uid:
            try:
                for slot in range(width):
                    self._uids[slot] = lease_pool_uid()
            except RuntimeError:
                self._release_uids()
                raise

    def warm(self) -> None:
        """Start every worker now (otherwise they start on first use)."""
        started = []
        for _ in range(self.width):
            self._sem.acquire()
            started.append(self._take())
        for z in started:
            self._give(z)

    def _take(self, fresh: bool = False) -> Zygote:
        """A live idle worker, or a newly started one in a free slot (always a new one if `fresh`).

        The caller holds a semaphore permit, so an idle worker or a free slot exists. Idle
        workers that exited meanwhile are closed here and never handed a job.
        """
        while True:
            if not fresh:
                try:
                    z = self._idle.get_nowait()
                except queue.Empty:
                    z = None
                if z is not None:
                    if z.alive():
                        return z
                    self._retire(z)
                    continue
            with self._lock:
                if self._closed:
                    raise ZygoteError("the pool is closed")
                slot = self._free_slots.pop() if self._free_slots else None
            if slot is not None:
                return self._start(slot)
            if fresh:  # every slot holds a live idle worker: take one of those
                fresh = False
                continue
            raise ZygoteError("pool bookkeeping error: no idle worker and no free slot")

    def _start(self, slot: int) -> Zygote:
        try:
            uid = self._uids[slot]
            if uid is None and self.backend.drop_uid:  # close() gave the uids back meanwhile
                raise ZygoteError("the pool is closed")
            z = Zygote(self.backend, slot, uid)
        except BaseException:
            with self._lock:
                self._free_slots.append(slot)
            raise
        z.slot = slot
        with self._lock:
            self._all.add(z)
        return z

    def _retire(self, z: Zygote) -> None:
        """Close `z` and free its slot (the caller keeps or releases its permit)."""
        z.close()
        with self._lock:
            self._all.discard(z)
            self._free_slots.append(z.slot)

    def _give(self, z: Zygote) -> None:
        if z.alive() and not self._closed:
            self._idle.put(z)
        else:
            self._retire(z)
        self._sem.release()

    def run(self, *args, **kwargs) -> RawRun:
        """Zygote.run on a live worker; one that dies before reporting is replaced by a newly
        started worker and the job re-dispatched there once (its first attempt's output is
        discarded, so a job yields exactly one result). Raises ZygoteError if that fails too."""
        for attempt in range(2):
            self._sem.acquire()
            try:
                z = self._take(fresh=attempt > 0)
            except BaseException:
                self._sem.release()
                raise
            try:
                return z.run(*args, **kwargs)
            except ZygoteError:
                if attempt == 1:
                    raise
            finally:
                self._give(z)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
        for z in workers:
            z.close()
        self._release_uids()

    def _release_uids(self) -> None:
        uids, self._uids = self._uids, [None] * self.width
        for uid in uids:
            if uid is not None:
                release_pool_uid(uid)
