"""opencode, run untouched per rollout: finding the binary, its inline config, and the sandboxed launch.

Not the episode bookkeeping or the reward (agentrl.harness.episode) and not the policy server
(agentrl.serve). opencode is the npm package `opencode-ai` (pinned below; its platform binary comes
from the registry as the optional dependency `opencode-<os>-<arch>`). Each run gets a fresh work
directory, its own HOME, and an inline `OPENCODE_CONFIG_CONTENT`: one OpenAI-compatible provider
(id "agentrl", not "openai", so no OpenAI-specific request shaping), one model with
`temperature: true`, autoupdate / sharing / model-list fetching / LSP downloads off, and only the
bash, edit, read and write tools (every other permission denied, which also removes those tools
from the request).

Isolation (bubblewrap, when usable): own PID/IPC/UTS/network namespaces, the system read-only, only
the work dir and HOME writable, and no network but loopback; inside, `sandbox_launch.py` listens on
127.0.0.1:PORT and relays to the policy server's unix socket bound in, so the server's port is the
only thing the harness can reach. Without bubblewrap the harness runs as a plain child process on
the host's loopback, which isolates nothing: `describe()` says which one ran.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPENCODE_VERSION = "1.18.33"
OPENCODE_PACKAGE = f"opencode-ai@{OPENCODE_VERSION}"
PROVIDER_ID = "agentrl"
MODEL_ID = "policy"
TOOLS = ("bash", "edit", "read", "write")
INNER_PORT = 4141  # the policy server's port as the harness sees it inside the sandbox
_ENV_FLAGS = ("OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_MODELS_FETCH", "OPENCODE_DISABLE_LSP_DOWNLOAD",
              "OPENCODE_DISABLE_SHARE", "OPENCODE_DISABLE_DEFAULT_PLUGINS", "OPENCODE_DISABLE_CLAUDE_CODE",
              "OPENCODE_DISABLE_PROJECT_CONFIG", "OPENCODE_DISABLE_EXTERNAL_SKILLS")


def find_opencode(explicit: str | None = None) -> str:
    """Path of the opencode binary: `explicit` (only that), else $AGENTRL_OPENCODE, the copy scripts/setup.sh installs
    (.venv/opencode), then `opencode` on PATH.

    Raises:
        FileNotFoundError: none found (the message says how to install it), or `explicit` is not a binary.
    """
    if explicit:
        if Path(explicit).is_file() and os.access(explicit, os.X_OK):
            return str(Path(explicit).resolve())
        raise FileNotFoundError(f"opencode binary {explicit!r} does not exist or is not executable")
    root = Path(__file__).resolve().parents[3]
    candidates = [os.environ.get("AGENTRL_OPENCODE"),
                  str(root / ".venv" / "opencode" / "node_modules" / ".bin" / "opencode"),
                  str(Path(sys.prefix) / "opencode" / "node_modules" / ".bin" / "opencode"), shutil.which("opencode")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return str(Path(c).resolve())
    raise FileNotFoundError(
        f"opencode is not installed: run scripts/setup.sh on a machine with npm (it runs `npm install "
        f"{OPENCODE_PACKAGE}` into .venv/opencode), or `npm install -g {OPENCODE_PACKAGE}`, or point "
        "$AGENTRL_OPENCODE / --opencode at the binary")


def opencode_version(binary: str) -> str:
    """`opencode --version` (stripped). Raises RuntimeError when it does not run."""
    try:
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{binary} --version failed: {e}") from e
    if p.returncode != 0:
        raise RuntimeError(f"{binary} --version exited {p.returncode}: {p.stderr.strip()[:300]}")
    return p.stdout.strip()


def opencode_config(base_url: str, api_key: str, *, context_tokens: int, output_tokens: int) -> dict[str, Any]:
    """The inline opencode config for one rollout (module docstring)."""
    permission = {"*": "deny", **{t: "allow" for t in TOOLS}}
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False, "share": "disabled", "lsp": False, "formatter": False,
        "model": f"{PROVIDER_ID}/{MODEL_ID}", "small_model": f"{PROVIDER_ID}/{MODEL_ID}",
        "enabled_providers": [PROVIDER_ID],
        "provider": {PROVIDER_ID: {
            "npm": "@ai-sdk/openai-compatible", "name": "agentrl policy",
            "options": {"baseURL": base_url, "apiKey": api_key},
            "models": {MODEL_ID: {"name": MODEL_ID, "tool_call": True, "temperature": True, "reasoning": False,
                                  "limit": {"context": context_tokens, "output": output_tokens}}},
        }},
        "permission": permission,
    }


@dataclass(frozen=True)
class Launch:
    """One harness run: the argv, its environment, and where it runs."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    isolation: str  # "bwrap" | "none"


def bwrap_usable() -> bool:
    """bubblewrap is installed and can create a network namespace here (probed once per process)."""
    global _BWRAP_OK
    if _BWRAP_OK is None:
        _BWRAP_OK = False
        if shutil.which("bwrap"):
            try:
                p = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--dev", "/dev",
                                    "--proc", "/proc", "true"], capture_output=True, timeout=30)
                _BWRAP_OK = p.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                pass
    return _BWRAP_OK


_BWRAP_OK: bool | None = None


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib64", "/sbin", "/lib32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for f in ("/etc/passwd", "/etc/group", "/etc/hosts", "/etc/nsswitch.conf", "/etc/localtime", "/etc/ssl",
              "/etc/ca-certificates", "/etc/alternatives"):
        args += ["--ro-bind-try", f, f]
    return args


def _python_binds() -> tuple[list[str], str]:
    """Read-only binds for the interpreter that runs the launcher, and its path."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.join(prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")
    binds = [] if prefix.startswith("/usr") else ["--ro-bind", prefix, prefix]
    return binds, exe


def build_launch(binary: str, *, workdir: str, home: str, message: str, title: str, config: dict[str, Any],
                 isolation: str, uds: str | None) -> Launch:
    """The command that runs `opencode run --format json --title TITLE MESSAGE` in `workdir`.

    Args:
        isolation: "bwrap" (needs `uds`, the policy server's unix socket) or "none".
        config: from `opencode_config` (its baseURL must be http://127.0.0.1:INNER_PORT/... under bwrap).
    """
    py_binds, py = _python_binds()
    env = {"PATH": f"/usr/local/bin:/usr/bin:/bin:{os.path.dirname(py)}", "HOME": home, "LANG": "C.UTF-8",
           "TMPDIR": "/tmp" if isolation == "bwrap" else home, "OPENCODE_CONFIG_CONTENT": json.dumps(config),
           **{k: "1" for k in _ENV_FLAGS}}
    oc = [binary, "run", "--format", "json", "--title", title, "--pure", message]
    if isolation == "none":
        return Launch(oc, env, workdir, "none")
    if uds is None:
        raise ValueError("build_launch: isolation 'bwrap' needs the policy server's unix socket (uds)")
    launcher = str(Path(__file__).with_name("sandbox_launch.py"))
    sock_dir = os.path.dirname(uds)
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--hostname", "agentrl", *_system_binds(), *py_binds,
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--ro-bind", binary, binary, "--ro-bind", launcher, launcher, "--ro-bind", sock_dir, sock_dir,
            "--bind", workdir, workdir, "--bind", home, home, "--chdir", workdir,
            "--", py, "-I", "-S", launcher, str(INNER_PORT), uds, "--", *oc]
    return Launch(args, env, workdir, "bwrap")


@dataclass(frozen=True)
class HarnessRun:
    """What one harness process did.

    Attributes:
        returncode: exit status (negative: killed by that signal); None if it could not start.
        timed_out: killed at the wall-clock limit.
        wall_s: seconds from start to exit.
        events: opencode's JSON events (`--format json`, one object per stdout line).
        stderr_tail: the last 4000 characters of stderr.
        error: why it could not start ("" otherwise).
        stopped: why it was killed early by `stop()` ("" otherwise).
        limits_hit: the limits that stopped it, in the sandbox's one wording (LimitHit.notice(), e.g.
            "[stopped: wall-clock limit of 600 s reached]").
    """

    returncode: int | None
    timed_out: bool
    wall_s: float
    events: tuple[dict[str, Any], ...]
    stderr_tail: str
    error: str = ""
    stopped: str = ""
    limits_hit: tuple[Any, ...] = ()


def _events(stdout: str) -> tuple[dict[str, Any], ...]:
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                out.append(ev)
    return tuple(out)


def run_harness(launch: Launch, timeout_s: float, stop: Callable[[], str] | None = None,
                poll_s: float = 0.25) -> HarnessRun:
    """Run `launch` to completion, to `timeout_s`, or until `stop()` returns a reason (e.g. the server
    refused a call over budget: harnesses retry refused calls with back-off instead of exiting); then its
    whole process group is killed. Never raises for the harness's own failures: they are in the record.
    """
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(launch.argv, cwd=launch.cwd, env=launch.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    except OSError as e:
        return HarnessRun(None, False, time.monotonic() - t0, (), "", f"{type(e).__name__}: {e}")
    timed_out, stopped = False, ""
    deadline = t0 + timeout_s
    while True:
        try:
            out, err = proc.communicate(timeout=min(poll_s, max(0.0, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            stopped = stop() if stop is not None else ""
            timed_out = time.monotonic() >= deadline
            if stopped or timed_out:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                out, err = proc.communicate()
                break
    from agentrl.sandbox.api import LimitHit

    timed_out = timed_out and not stopped
    hits = (LimitHit("wall", float(timeout_s), True),) if timed_out else ()
    return HarnessRun(proc.returncode, timed_out, time.monotonic() - t0, _events(out or ""),
                      (err or "")[-4000:], stopped=stopped, limits_hit=hits)
