"""One job in a fresh sandboxed process: start, feed the spec, capture, enforce the wall clock, clean up.

Not the warm pool (agentrl.sandbox.pool reuses a clean interpreter per job through fork) and not
the public API (agentrl.sandbox.sandbox).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from agentrl.sandbox.process import RESULT_CAP_BYTES, Backend, Capture, make_workdir, next_uid, read_back


@dataclass
class RawRun:
    """What one sandboxed job produced, before it becomes a RunResult / TestReport.

    `events` are the result-channel records that carried this call's marker (marker removed).
    """

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
    wall_clock_s: float
    events: list[dict]
    files: dict[str, str] | None = None
    error: str | None = None
    present: frozenset[str] | None = None  # with files: what read_back's walk met (its `present`; see `gone`)
    left_out: tuple[str, ...] = ()  # with files: files read_back did not return because its caps were reached


def parse_events(raw: bytes, marker: str) -> list[dict]:
    """JSON lines of the result fd that carry `marker`; anything else (forgeries, noise) is dropped."""
    events = []
    for line in raw.splitlines():
        try:
            ev = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(ev, dict) and ev.pop("k", None) == marker:
            events.append(ev)
    return events


def feed(fd: int, data: bytes) -> None:
    """Write `data` to pipe `fd` and close it; a thread does it when it may not fit the pipe buffer."""

    def write() -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            pass  # the child died before reading its spec: its exit status says why
        finally:
            os.close(fd)

    if len(data) < 60_000:
        write()
    else:
        threading.Thread(target=write, daemon=True).start()


def new_spec(kind: str, workdir: str, uid: int | None, backend: Backend, limits: dict, **extra) -> dict:
    """A job spec for the child launcher, with a fresh random marker."""
    return {"kind": kind, "workdir": workdir, "uid": uid, "marker": secrets.token_hex(16),
            "sys_path": list(backend.sys_path), "limits": limits, **extra}


def finish(cap: Capture, marker: str, exit_code: int | None, timed_out: bool, t0: float,
           workdir: str, uid: int | None, return_files: bool, error: str | None = None) -> RawRun:
    """Assemble a RawRun from a finished capture."""
    out, cut_out = cap.text("stdout")
    err, cut_err = cap.text("stderr")
    present: set[str] = set()
    left_out: list[str] = []
    files = read_back(workdir, uid, present=present, left_out=left_out) if return_files else None
    return RawRun(exit_code, out, err, cut_out or cut_err, timed_out, time.monotonic() - t0,
                  parse_events(bytes(cap.data["result"]), marker), files, error,
                  frozenset(present) if return_files else None, tuple(left_out))


def run_fresh(backend: Backend, files: dict[str, str], kind: str, limits: dict, timeout_s: float,
              return_files: bool = False, **extra) -> RawRun:
    """Run one job in a newly started interpreter (the baseline the pool is measured against)."""
    uid = next_uid() if backend.drop_uid else None
    workdir = make_workdir(backend.root, files, uid)
    t0 = time.monotonic()
    fds: dict[str, int] = {}
    try:
        spec = new_spec(kind, workdir, uid, backend, limits, **extra)
        marker = spec["marker"]
        (out_r, out_w), (err_r, err_w), (res_r, res_w), (spec_r, spec_w) = (os.pipe() for _ in range(4))
        fds = {"stdout": out_r, "stderr": err_r, "result": res_r}
        spec["result_fd"] = res_w
        try:
            proc = subprocess.Popen(backend.command(workdir, ["once", str(spec_r)]), stdin=subprocess.DEVNULL,
                                    stdout=out_w, stderr=err_w, pass_fds=(res_w, spec_r),
                                    env=backend.env(workdir), cwd=workdir, start_new_session=True)
        finally:
            for fd in (out_w, err_w, res_w, spec_r):
                os.close(fd)
        feed(spec_w, json.dumps(spec).encode())
        cap = Capture(fds, {"stdout": limits["max_output_bytes"], "stderr": limits["max_output_bytes"],
                            "result": RESULT_CAP_BYTES})
        deadline = t0 + timeout_s
        done = cap.pump(deadline)
        timed_out = False
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()) if done else 0)
        except subprocess.TimeoutExpired:
            timed_out = True
        if timed_out or not done:
            timed_out = True
            kill_group(proc)
        proc.wait()
        cap.pump(time.monotonic() + 0.2)
        return finish(cap, marker, proc.returncode, timed_out, t0, workdir, uid, return_files)
    finally:
        if fds:
            cap_fds = fds
            for fd in cap_fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
        shutil.rmtree(workdir, ignore_errors=True)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group `proc` leads (bwrap's --die-with-parent takes the sandbox down too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
