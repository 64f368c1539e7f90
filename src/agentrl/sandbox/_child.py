"""Child-side launcher of the sandbox: runs inside `python -I -S -B`, applies limits, runs one job.

Standard library only; never imported by the trainer for execution (the parent copies this file
into the sandbox root and starts it). Not the parent side: spawning and output capture live in
agentrl.sandbox.process and agentrl.sandbox.pool.

Modes (argv[1]):
  once FD      read one JSON job spec from fd FD, run it in this process, exit.
  zygote FD    serve jobs from the AF_UNIX socket FD: fork one clean child per job (a warm pool).
  session FD   read JSON requests from fd FD and run them in one persistent namespace.

Every job reports through a result fd as JSON lines that carry the per-call marker `k`; printed
text goes to stdout/stderr and is never parsed by the parent.
"""

import ctypes
import importlib
import json
import os
import resource
import runpy
import select
import signal
import socket
import sys
import traceback

# Bound at launcher start, before repository code runs: a module that patches builtins.exec,
# json or os.write cannot silence the harness or rewrite its reports.
_exec, _compile, _write, _isinstance = exec, compile, os.write, isinstance
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_MSG_CAP = 4000


def _prctl(option, arg):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except Exception:  # no libc prctl: the limits below still hold
        pass


_ENV_KEYS = ("PATH", "HOME", "LANG")
# Set in every child, so a run's output depends on neither the host's core count nor its installed
# packages (the interpreter runs -I -S -B, so PYTHON* variables would be ignored): pytest loads no third-party plugin from the site dir it imports from (entry-point
# autoloading off; a plugin that imports numpy would start one BLAS thread per host core, and under
# the process limit each failed start prints "pthread_create failed"), threaded native libraries run
# one thread, and the terminal width is fixed.
HERMETIC_ENV = {
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "BLIS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "NUMEXPR_MAX_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "COLUMNS": "80",
    "NO_COLOR": "1",
}


def drop_privileges(uid):
    """Become `uid` (group `uid`, no supplementary groups) if we are root; no new privileges.

    The environment is reduced to PATH, HOME and LANG, plus HERMETIC_ENV.
    """
    for key in list(os.environ):  # bwrap adds PWD; the child sees only PATH, HOME, LANG and HERMETIC_ENV
        if key not in _ENV_KEYS:
            del os.environ[key]
    os.environ.update(HERMETIC_ENV)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _prctl(_PR_SET_DUMPABLE, 0)  # same-uid jobs cannot ptrace this process or read its memory


def apply_limits(limits, extra_processes=0):
    """Set rlimits (CPU s, address space bytes, file size bytes, processes, no core files)."""
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size_bytes"],) * 2)
    nproc = int(limits["max_processes"])
    nproc = 0 if nproc == 0 else nproc + 1 + extra_processes
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)


def _encode(value):
    """Minimal JSON for str/int/bool values (independent of the json module, which jobs can patch)."""
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return str(int.__repr__(value))
    out = ['"']
    for ch in str.__str__(value):
        code = ord(ch)
        out.append(ch if 0x20 <= code < 0x7F and ch not in '"\\' else f"\\u{code:04x}"
                   if code < 0x10000 else "\\ufffd")
    out.append('"')
    return "".join(out)


def _reporter(fd, marker):
    def report(**fields):
        fields["k"] = marker
        line = "{" + ",".join(_encode(k) + ":" + _encode(v) for k, v in fields.items()) + "}\n"
        data = line.encode("ascii")
        try:
            while data:
                data = data[_write(fd, data):]
        except OSError:
            pass
    return report


def _short(exc):
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[:_MSG_CAP]


class _TestTimeout(BaseException):
    """Raised by SIGALRM inside a test that ran past its per-test limit."""


def _on_alarm(signum, frame):
    raise _TestTimeout()


def _run_one_test(i, spec):
    ns = {"__name__": "__agentrl_test__"}
    signal.setitimer(signal.ITIMER_REAL, float(spec["test_timeout_s"]))
    try:
        if spec["setup"]:
            _exec(_compile(spec["setup"], "<test setup>", "exec"), ns)
        _exec("from {} import *".format(spec["module"]), ns)
        _exec(_compile(spec["tests"][i], f"<test {i}>", "exec"), ns)
        return "pass", ""
    except _TestTimeout:  # the wording of agentrl.sandbox.api.LimitHit.notice (this file imports only stdlib)
        return "timeout", "[stopped: wall-clock limit of {:g} s per test reached]".format(float(spec["test_timeout_s"]))
    except MemoryError:
        mem = (spec.get("limits") or {}).get("memory_bytes")
        return "error", (f"[stopped: memory limit of {mem / (1 << 20):g} MiB reached]" if mem
                         else "MemoryError")
    except AssertionError as e:
        return "fail", _short(e)
    except BaseException as e:  # SystemExit, MemoryError, RecursionError, ...: an error, not a crash
        return "error", _short(e)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run_tests(spec, report):
    """The grader: import the module once, then each test in a fresh namespace."""
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.path.insert(0, spec["workdir"])
    sys.argv = [spec["module"]]
    try:
        importlib.import_module(spec["module"])
    except BaseException as e:  # includes sys.exit() at import
        report(ev="import_error", msg=_short(e))
        return 0
    report(ev="imported")
    for i in range(len(spec["tests"])):
        status, msg = _run_one_test(i, spec)
        report(ev="test", i=i, s=status, msg=msg)
    report(ev="done")
    return 0


def run_argv(spec):
    """`python FILE args` or pytest, as the parent validated them; returns the exit code."""
    argv = spec["argv"]
    if argv[0] == "pytest":
        sys.path.insert(0, spec["workdir"])
        sys.argv = ["pytest"] + argv[1:]
        import pytest
        return pytest.main(argv[1:])
    path = os.path.join(spec["workdir"], argv[0])
    sys.argv = [argv[0]] + argv[1:]
    sys.path.insert(0, os.path.dirname(path))
    runpy.run_path(argv[0], run_name="__main__")
    return 0


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _harness_frame(filename):
    """True for a frame of this launcher or of runpy (which `python FILE` itself never shows)."""
    return filename in (__file__, os.path.abspath(__file__)) or filename.startswith("<frozen runpy") \
        or os.path.basename(filename) == "runpy.py"


def _print_user_traceback(exc, strip_harness, workdir=None):
    """Print `exc` as `python FILE` would: without the launcher's and runpy's leading frames.

    Only a traceback that went through `run_argv` is stripped; an error of the launcher itself keeps
    every frame. With no user frame left (a SyntaxError in the file), Python's own format has no stack.
    Paths inside the work dir are printed relative to it (the job's cwd), as the run's own file is, so
    the host's temporary directory never reaches the model.
    """
    tb = exc.__traceback__
    if strip_harness and any(f.f_code.co_name == "run_argv" and _harness_frame(f.f_code.co_filename)
                             for f, _ in traceback.walk_tb(tb)):
        while tb is not None and _harness_frame(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    if workdir:
        text = text.replace(os.path.join(workdir, ""), "")
    sys.stderr.write(text)


def execute(spec, result_fd, extra_processes=0):
    """Run one job in this (already separate) process and never return: os._exit at the end."""
    code = 1
    try:
        for p in spec.get("sys_path", []):
            sys.path.append(p)
        os.chdir(spec["workdir"])
        os.environ["HOME"] = spec["workdir"]
        apply_limits(spec["limits"], extra_processes)
        report = _reporter(result_fd, spec.pop("marker"))
        report(ev="started")
        if spec["kind"] == "tests":
            code = run_tests(spec, report)
        else:
            code = run_argv(spec)
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException as e:
        try:
            _print_user_traceback(e, spec.get("kind") != "tests", spec.get("workdir"))
        except BaseException:
            pass
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code if isinstance(code, int) else 1)


def _read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    return json.loads(b"".join(chunks).decode())


def main_once(spec_fd):
    spec = _read_all(spec_fd)
    drop_privileges(spec.get("uid"))
    execute(spec, spec.pop("result_fd"))


def _recv_job(sock):
    """One request: 4 fds (stdout, stderr, result, spec pipe); the spec is read from the last."""
    msg, fds, _flags, _addr = socket.recv_fds(sock, 4096, 4)
    if not msg or len(fds) != 4:
        for fd in fds:
            os.close(fd)
        return None, []
    return _read_all(fds[3]), fds[:3]


def _serve_one(sock, spec, fds, reap_all):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        sock.close()
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        result_fd = os.dup(fds[2])
        os.closerange(3, result_fd)
        execute(spec, result_fd, extra_processes=1)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([pidfd], [], [], float(spec["timeout_s"]))
    timed_out = not ready
    if timed_out:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    if reap_all:  # a dedicated uid or a private PID namespace: kill(-1) hits only job leftovers
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    code = os.waitstatus_to_exitcode(status)
    sock.sendall((json.dumps({"exit_code": code, "timed_out": timed_out}) + "\n").encode())


def main_zygote(sock_fd, uid, reap_all):
    """A clean interpreter that forks one child per job; it never runs job code itself."""
    drop_privileges(uid)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sock = socket.socket(fileno=sock_fd)
    sock.sendall(b'{"ready": true}\n')
    while True:
        spec, fds = _recv_job(sock)
        if spec is None:
            return
        _serve_one(sock, spec, fds, reap_all)


def _session_call(code, ns, report, cpu_s):
    used = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    soft = int(used) + int(cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (min(soft, hard), hard))
    try:
        try:
            tree = compile(code, "<run_python>", "exec", flags=0, dont_inherit=True)
            exec(tree, ns)
        except SystemExit as e:
            print(f"SystemExit: {e.code}", file=sys.stderr)
        except BaseException:
            etype, value, tb = sys.exc_info()
            traceback.print_exception(etype, value, tb.tb_next if tb else None)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        report(ev="done")


def main_session(req_fd):
    """A persistent namespace: one JSON request line per call on req_fd, a `done` event after each."""
    reader = open(req_fd, "rb", buffering=0)
    spec = json.loads(reader.readline().decode())
    drop_privileges(spec.get("uid"))
    for p in spec.get("sys_path", []):
        sys.path.append(p)
    os.chdir(spec["workdir"])
    sys.path.insert(0, spec["workdir"])
    limits = dict(spec["limits"])
    cpu_s = limits["cpu_s"]
    limits["cpu_s"] = spec["session_cpu_s"]  # hard cap over the whole session; soft cap per call
    apply_limits(limits)
    report = _reporter(spec["result_fd"], spec.pop("marker"))
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    report(ev="started")
    while True:
        line = reader.readline()
        if not line:
            os._exit(0)
        _session_call(json.loads(line.decode())["code"], ns, report, cpu_s)


if __name__ == "__main__":
    _mode, _fd = sys.argv[1], int(sys.argv[2])
    if _mode == "once":
        main_once(_fd)
    elif _mode == "zygote":
        main_zygote(_fd, None if sys.argv[3] == "-" else int(sys.argv[3]), sys.argv[4] == "1")
    elif _mode == "session":
        main_session(_fd)
    else:
        sys.exit(f"unknown mode {_mode!r}")
