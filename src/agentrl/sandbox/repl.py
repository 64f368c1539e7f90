"""PythonSession: a sandboxed worker that keeps Python state across calls (for run_python).

Same backend, uid policy and limits as one-shot runs; each call is held to the wall-clock limit
and cpu_s CPU-seconds. A call that times out or kills the worker restarts it and says so
(`restarted=True`: earlier state is gone); the caller never hangs. Not the one-shot path.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import subprocess
import time

from agentrl.sandbox.api import SandboxLimits, SessionResult
from agentrl.sandbox.guarantees import limit_hits
from agentrl.sandbox.oneshot import kill_group, parse_events
from agentrl.sandbox.process import Backend, Capture, make_workdir, next_uid, spawn_long_lived

_EXIT_GRACE_S = 2.0  # how long a worker whose pipes closed may take to exit before it is killed
_RESTART_NOTE = "[agentrl sandbox: the Python session was restarted; earlier variables and definitions are gone]\n"


class PythonSession:
    """A persistent sandboxed interpreter; use execute(), restart(), close() or a `with` block.

    Created by Sandbox.session(); `files` are copied into the session's private work dir.
    """

    def __init__(self, backend: Backend, limits: SandboxLimits, files: dict[str, str]):
        self._backend = backend
        self._limits = limits
        self._files = dict(files)
        self._proc: subprocess.Popen | None = None
        self._started_once = False
        self._closed = False
        self._fds: dict[str, int] = {}

    def _start(self) -> None:
        b = self._backend
        self._uid = next_uid() if b.drop_uid else None
        self._workdir = make_workdir(b.root, self._files, self._uid)
        self._marker = secrets.token_hex(16)
        (out_r, out_w), (err_r, err_w), (res_r, res_w), (req_r, req_w) = (os.pipe() for _ in range(4))
        spec = {"workdir": self._workdir, "uid": self._uid, "marker": self._marker, "result_fd": res_w,
                "sys_path": list(b.sys_path), "limits": dataclasses.asdict(self._limits),
                "session_cpu_s": self._limits.session_cpu_s}
        try:
            self._proc = spawn_long_lived(b.command(self._workdir, ["session", str(req_r)]),
                                          stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w,
                                          pass_fds=(res_w, req_r), env=b.env(self._workdir),
                                          cwd=self._workdir, start_new_session=True)
        finally:
            for fd in (out_w, err_w, res_w, req_r):
                os.close(fd)
        self._fds = {"stdout": out_r, "stderr": err_r, "result": res_r}
        self._req = req_w
        self._done_seen = 0
        self._result_buf = b""
        self._send(spec)
        self._started_once = True

    def _send(self, obj: dict) -> bool:
        data = (json.dumps(obj) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._req, data):]
            return True
        except OSError:
            return False

    def _stop(self) -> None:
        if self._proc is not None:
            kill_group(self._proc)
            self._proc.wait()
            self._proc = None
            for fd in (*self._fds.values(), self._req):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fds = {}
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _dones(self, cap: Capture) -> int:
        return sum(ev.get("ev") == "done" for ev in parse_events(bytes(cap.data["result"]), self._marker))

    def execute(self, code: str, timeout_s: float | None = None) -> SessionResult:
        """Run `code` in the persistent namespace; print output and tracebacks come back as text.

        timeout_s lowers (never raises) limits.timeout_s. Raises ValueError if `code` is not str,
        RuntimeError after close().
        """
        if self._closed:
            raise RuntimeError("PythonSession is closed")
        if not isinstance(code, str):
            raise ValueError(f"run_python code {type(code).__name__}: expected str")
        timeout = min(timeout_s or self._limits.timeout_s, self._limits.timeout_s)
        restarted = False
        if self._proc is None or self._proc.poll() is not None:
            restarted = self._started_once
            self._stop()
            self._start()
        t0 = time.monotonic()
        cap_bytes = self._limits.max_output_bytes
        cap = Capture(self._fds, {"stdout": cap_bytes, "stderr": cap_bytes, "result": 1 << 20})
        sent = self._send({"code": code})
        finished = sent and cap.pump(t0 + timeout, until=lambda: self._dones(cap) >= 1)
        done = self._dones(cap) >= 1
        if done:
            cap.pump_ready()  # what was written before `done` is already in the pipes
        cap.sel.close()
        out, cut1 = cap.text("stdout")
        err, cut2 = cap.text("stderr")
        timed_out = not finished and sent and not done and (time.monotonic() - t0) >= timeout
        error, code_ = None, None
        if not done:
            code_ = self._exit_code(timed_out)
        wall = time.monotonic() - t0
        hits = limit_hits(self._limits, exit_code=code_, timed_out=timed_out, timeout_s=timeout, wall_clock_s=wall,
                          stderr=err, truncated=cut1 or cut2)
        if not done:
            self._stop()
            self._start()  # eager: the next call finds a live (empty) worker
            restarted = True
            if not any(h.stopped for h in hits):  # a kill by a limit is the code's, not a sandbox failure
                error = f"the Python session worker died (exit code {code_})"
            err += _RESTART_NOTE
        elif restarted:
            err = _RESTART_NOTE + err
        return SessionResult(out, err, timed_out, restarted, wall, error, hits)

    def _exit_code(self, timed_out: bool) -> int | None:
        """The dead worker's exit status. Its pipes reach EOF while it is still exiting (and bwrap
        reports after its child), so wait up to _EXIT_GRACE_S for it rather than read a racy poll()."""
        if self._proc is None:
            return None
        if timed_out:
            return self._proc.poll()
        try:
            return self._proc.wait(timeout=_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return None

    def restart(self) -> None:
        """Discard all state: the next execute() runs in a fresh worker (reported as not restarted)."""
        self._stop()
        self._started_once = False

    def close(self) -> None:
        """Stop the worker and delete its work dir (idempotent)."""
        if not self._closed:
            self._closed = True
            self._stop()

    def __enter__(self) -> PythonSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
