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

import builtins
import ctypes
import gc
import importlib
import json
import os
import re
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
_PR_SET_PDEATHSIG = 1
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


def apply_limits(limits, extra_processes=0, processes=True):
    """Set rlimits (CPU s, address space bytes, file size bytes, processes, no core files).

    processes=False leaves RLIMIT_NPROC alone: the checker of an isolated grading, which runs no job code
    and forks the agent process (that one sets it, with limit_processes).
    """
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size_bytes"],) * 2)
    if processes:
        limit_processes(limits, extra_processes)
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)


def limit_processes(limits, extra_processes=0):
    """RLIMIT_NPROC: the job's new processes, plus itself and `extra_processes` of its uid (0: none at all)."""
    nproc = int(limits["max_processes"])
    nproc = 0 if nproc == 0 else nproc + 1 + extra_processes
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


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


def _run_one_test(i, spec, agent=None):
    """Test i in a fresh namespace; with `agent` (an isolated job), the module's names are its stand-ins."""
    ns = {"__name__": "__agentrl_test__"}
    signal.setitimer(signal.ITIMER_REAL, float(spec["test_timeout_s"]))
    try:
        if agent is not None:
            agent.bind(ns)
        if spec["setup"]:
            _exec(_compile(spec["setup"], "<test setup>", "exec"), ns)
        if agent is None:
            _exec("from {} import *".format(spec["module"]), ns)
        else:
            ns[AGENT_VALUE] = agent.value
        _exec(_compile(spec["tests"][i], f"<test {i}>", "exec"), ns)
        return "pass", ""
    except _TestTimeout:  # the wording of agentrl.sandbox.api.LimitHit.notice (this file imports only stdlib)
        if agent is not None:
            agent.stop()  # it may still be running the call that timed out: a fresh one serves the next test
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


def run_tests(spec, report, extra_processes=0):
    """The grader: import the module once, then each test in a fresh namespace."""
    signal.signal(signal.SIGALRM, _on_alarm)
    if spec.get("isolate"):
        return run_isolated(spec, report, extra_processes)
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


# ---- Isolated grading (TestJob.isolate): the module runs in an agent process, the tests in this one ----
# This process (the checker) forks the agent process before any of the module's code runs, and never imports
# it: agent code cannot reach the tests' comparisons, their namespaces or this harness. The two talk over a
# socketpair in length-prefixed JSON of plain data only (tagged below); the agent process has no other fd of
# the job's (no result fd), and this one stays undumpable (drop_privileges), so it cannot be ptraced.

AGENT_VALUE = "__agent_value__"  # agentrl.sandbox.api.AGENT_VALUE
_WIRE_CAP = 32 << 20  # bytes of one message either way
_ITEMS_CAP = 10 ** 6  # items drained from one iterator
_DEPTH_CAP = 100
_OPAQUE_TYPES = (type(re.match("", "")), type(re.compile("")))
_BUILTIN_NAMES = frozenset(vars(builtins))  # at launcher start, before any job code


class Opaque:
    """A stand-in for a stdlib object without plain data (re.Match): truthy, equal only to itself."""
    __slots__ = ("kind",)

    def __init__(self, kind):
        self.kind = kind

    def __repr__(self):
        return f"<{self.kind}>"


def _int_wire(x, depth):
    v = int.__index__(x)
    return v if -(1 << 63) < v < (1 << 63) else {"int": format(v, "x")}  # hex: no str-digits limit


_BASES = (  # a builtin type (or subclass) -> its value as JSON, read through the base type's own methods
    (int, _int_wire),
    (float, lambda x, d: float.__float__(x)),
    (str, lambda x, d: str.__str__(x)),
    (bytes, lambda x, d: {"bytes": bytes.__bytes__(x).hex()}),
    (list, lambda x, d: [_to_wire(v, d) for v in list.__iter__(x)]),
    (tuple, lambda x, d: {"tuple": [_to_wire(v, d) for v in tuple.__iter__(x)]}),
    (dict, lambda x, d: {"dict": [[_to_wire(k, d), _to_wire(v, d)] for k, v in dict.items(x)]}),
    (frozenset, lambda x, d: {"frozenset": [_to_wire(v, d) for v in frozenset.__iter__(x)]}),
    (set, lambda x, d: {"set": [_to_wire(v, d) for v in set.__iter__(x)]}),
)


def _to_wire(x, depth=0):
    """`x` as JSON of plain data, with a tagged object for what JSON lacks (tuples, sets, bytes, big ints, ...):
    builtin subclasses as their base type, re.Match/re.Pattern as Opaque, iterators drained. Else TypeError."""
    if depth > _DEPTH_CAP:
        raise TypeError(f"value nests deeper than {_DEPTH_CAP} levels")
    t = type(x)
    if x is None or t is bool:
        return x
    for base, encode in _BASES:
        if issubclass(t, base):
            return encode(x, depth + 1)
    if t is complex:
        return {"complex": [x.real, x.imag]}
    if t is range:
        return {"range": [_to_wire(x.start), _to_wire(x.stop), _to_wire(x.step)]}
    if t in _OPAQUE_TYPES or t is Opaque:
        return {"opaque": t.__name__ if t is not Opaque else str.__str__(x.kind)}
    if hasattr(t, "__next__"):
        items = []
        for v in x:
            if len(items) >= _ITEMS_CAP:
                raise TypeError(f"iterator yields more than {_ITEMS_CAP} items")
            items.append(_to_wire(v, depth + 1))
        return {"iter": items}
    raise TypeError(f"value of type {t.__name__} is not plain data (expected int, float, str, bytes, list, tuple, "
                    "dict, set, None, bool)")


_UNTAG = {"int": lambda v: int(str.__str__(v), 16), "bytes": lambda v: bytes.fromhex(v),
          "tuple": lambda v: tuple(map(_from_wire, v)), "frozenset": lambda v: frozenset(map(_from_wire, v)),
          "set": lambda v: set(map(_from_wire, v)), "iter": lambda v: iter(list(map(_from_wire, v))),
          "dict": lambda v: {_from_wire(k): _from_wire(x) for k, x in v},
          "complex": lambda v: complex(*(float(_from_wire(p)) for p in v)),
          "range": lambda v: range(*(int(_from_wire(p)) for p in v)), "opaque": lambda v: Opaque(str.__str__(v))}


def _from_wire(w):
    """The plain data JSON `w` encodes (exact builtin types; ValueError for anything else)."""
    t = type(w)
    if w is None or t in (bool, int, float, str):
        return w
    if t is list:
        return list(map(_from_wire, w))
    if t is dict and len(w) == 1:
        (tag, v), = w.items()
        if tag in _UNTAG and type(v) in (str, list):
            return _UNTAG[tag](v)
    raise ValueError("not an encoding of plain data")


def _send(conn, msg):
    data = json.dumps(msg).encode()
    if len(data) > _WIRE_CAP:
        raise ValueError(f"message of {len(data)} bytes, over the cap of {_WIRE_CAP}")
    conn.sendall(len(data).to_bytes(4, "big") + data)


def _recv_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("the other process closed the connection")
        buf += chunk
    return bytes(buf)


def _recv(conn):
    n = int.from_bytes(_recv_exact(conn, 4), "big")
    if n > _WIRE_CAP:
        raise ValueError(f"message of {n} bytes, over the cap of {_WIRE_CAP}")
    return json.loads(_recv_exact(conn, n))


def _error_reply(e):
    try:
        msg = str(e)[:_MSG_CAP]
    except BaseException:
        msg = ""
    return {"err": [c.__name__ for c in type(e).__mro__ if isinstance(c.__name__, str)], "msg": msg}


def _answer(ns, req):
    """The agent process's reply to one request: names (name -> "call", "value" or {"module": name}),
    ("get", name) and ("call", name, args, kwargs), the last two as plain data."""
    try:
        if req[0] == "names":
            names = ns.get("__all__")
            if not isinstance(names, (list, tuple)):
                names = [k for k in ns if not k.startswith("__")]
            return {"ok": {n: "call" if callable(ns[n]) else {"module": ns[n].__name__}
                           if isinstance(ns[n], type(sys)) else "value"
                           for n in names if isinstance(n, str) and n in ns}}
        if req[0] == "get":
            return {"ok": _to_wire(ns[req[1]])}
        args, kwargs = _from_wire(req[2]), _from_wire(req[3])
        return {"ok": _to_wire(ns[req[1]](*args, **kwargs))}
    except BaseException as e:  # the checker raises it in the test (agent code can raise anything here)
        return _error_reply(e)


def _agent_main(conn, spec, extra_processes):
    """The agent process: import the module, then answer the checker until it closes the socket. Never returns."""
    try:
        keep = conn.fileno()
        os.closerange(3, keep)  # the result fd above all: this process cannot report
        os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        limit_processes(spec["limits"], extra_processes + 1)  # + 1: the checker, of the same uid
        sys.path.insert(0, spec["workdir"])
        sys.argv = [spec["module"]]
        try:
            ns = vars(importlib.import_module(spec["module"]))
        except BaseException as e:  # includes sys.exit() at import
            _send(conn, {"import_error": _short(e)})
            os._exit(0)
        _send(conn, {"ok": None})
        while True:
            req = _recv(conn)
            reply = _answer(ns, req)
            try:
                _send(conn, reply)
            except BaseException as e:  # too large, or not JSON
                _send(conn, _error_reply(e))
    except BaseException:
        pass
    finally:
        os._exit(0)


class _AgentBroken(BaseException):
    """The agent process died, hung, or answered what is not plain data: the test errs (no `except Exception`
    in a test catches it)."""


class _Call:
    """A callable of the module, called in the agent process; returns its result as plain data."""
    __slots__ = ("_agent", "_name")

    def __init__(self, agent, name):
        self._agent, self._name = agent, name

    def __call__(self, *args, **kwargs):
        return self._agent.ask("call", self._name, _to_wire(args), _to_wire(kwargs))

    def __repr__(self):
        return f"<function {self._name} of the graded module>"


class _Ref:
    """Another value of the module: AGENT_VALUE(ref) fetches it as plain data; by itself it is good for nothing."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __bool__(self):
        raise TypeError(f"{self.name} is a value of the graded module: read it through {AGENT_VALUE}")

    def __repr__(self):
        return f"<value {self.name} of the graded module>"


class _Agent:
    """The checker's end of the agent process: (re)starts it, asks it, stops it."""

    def __init__(self, spec, extra_processes):
        self.spec, self.extra, self.pid, self.conn = spec, extra_processes, None, None

    def start(self):
        """Fork the agent process (it imports the module); None, or the import error's message."""
        mine, theirs = socket.socketpair()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:  # closes every other fd (`mine` too), exits, never returns here
            _agent_main(theirs, self.spec, self.extra)
        theirs.close()
        self.pid, self.conn = pid, mine
        try:
            reply = _recv(mine)
        except BaseException:
            self.stop()
            raise
        if type(reply) is dict and type(reply.get("import_error")) is str:
            self.stop()
            return reply["import_error"][:_MSG_CAP]
        if reply != {"ok": None}:
            self.stop()
            return "the agent process did not start"
        return None

    def stop(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = None

    def ask(self, *req):
        """Send one request; the plain data it answers, or the exception it raised (a builtin one, by name)."""
        if self.conn is None:
            err = self.start()
            if err is not None:
                raise _AgentBroken("import of the module failed when its process was restarted: " + err)
        try:
            _send(self.conn, list(req))
            reply = _recv(self.conn)
            if type(reply) is not dict or len(reply) != 1 and set(reply) != {"err", "msg"}:
                raise ValueError("a reply of another shape")
            if "ok" in reply:
                return reply["ok"] if req[0] == "names" else _from_wire(reply["ok"])
            names, msg = reply["err"], reply["msg"]
            if type(names) is not list or type(msg) is not str:
                raise ValueError("a reply of another shape")
        except BaseException as e:
            self.stop()  # a half-done exchange leaves the connection unusable: a fresh process serves the next
            if isinstance(e, _TestTimeout):
                raise
            raise _AgentBroken(f"the graded module's process failed: {_short(e)}") from None
        for name in names:
            cls = vars(builtins).get(name) if type(name) is str else None
            if isinstance(cls, type) and issubclass(cls, Exception):
                try:
                    exc = cls(msg[:_MSG_CAP])
                except Exception:
                    continue
                raise exc
        raise _AgentBroken("{}: {}".format(names[0] if names and type(names[0]) is str else "error", msg[:_MSG_CAP]))

    def bind(self, ns):
        """The module's names in test namespace `ns` (see TestJob.isolate)."""
        kinds = self.ask("names")
        if type(kinds) is not dict:
            self.stop()
            raise _AgentBroken("the graded module's process answered names of another shape")
        entry = self.spec.get("entry_names") or ()
        for name, kind in kinds.items():
            if not name.isidentifier() or name.startswith("__") or (name in _BUILTIN_NAMES and name not in entry):
                continue  # a module's `sorted` or `set` must not change what the test's own calls compute
            if kind == "call":
                ns[name] = _Call(self, name)
            elif kind == "value":
                ns[name] = _Ref(name)
            elif type(kind) is dict and type(kind.get("module")) is str and kind["module"] in sys.modules:
                ns[name] = sys.modules[kind["module"]]

    def value(self, x):
        """AGENT_VALUE: a _Ref fetched as plain data; a stand-in callable as it is; a module is not plain data."""
        if type(x) is _Ref:
            return self.ask("get", x.name)
        if isinstance(x, type(sys)):
            raise TypeError("value of type module is not plain data")
        return x


def run_isolated(spec, report, extra_processes=0):
    """run_tests for an isolated job: the module is imported in the agent process, each test runs here."""
    agent = _Agent(spec, extra_processes)
    try:
        err = agent.start()
        if err is not None:
            report(ev="import_error", msg=err)
            return 0
        report(ev="imported")
        for i in range(len(spec["tests"])):
            status, msg = _run_one_test(i, spec, agent)
            report(ev="test", i=i, s=status, msg=msg)
        report(ev="done")
        return 0
    finally:
        agent.stop()


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
        unshadow_preload(spec["workdir"])
        isolated = spec["kind"] == "tests" and bool(spec.get("isolate"))
        apply_limits(spec["limits"], extra_processes, processes=not isolated)
        report = _reporter(result_fd, spec.pop("marker"))
        report(ev="started")
        if spec["kind"] == "tests":
            code = run_tests(spec, report, extra_processes)
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


_PRELOADED = ()  # names preload_pytest added to sys.modules (in a zygote and its forks)


def preload_pytest(paths):
    """Import pytest and its default plugins from `paths` (the jobs' sys_path) into this zygote, so a pytest
    job's fork finds them in sys.modules instead of importing them (docs/sandbox.md, "pytest preloaded").
    Nothing of a job's runs here; each job is a fresh fork, so what one does to these modules never reaches the
    next. sys.path is left as it was; the names added are kept in _PRELOADED (see unshadow_preload). Any failure
    leaves the import to the job, as without a preload."""
    global _PRELOADED
    if not paths:
        return
    before, had = list(sys.path), set(sys.modules)
    sys.path.extend(paths)
    try:
        importlib.import_module("pytest")
        for name in (*importlib.import_module("_pytest.config").default_plugins, "assertion.rewrite"):
            try:
                importlib.import_module("_pytest." + name)
            except Exception:  # a plugin this pytest lacks, or one needing what is not here: its job imports it
                pass
    except Exception:
        pass
    finally:
        sys.path[:] = before
        _PRELOADED = tuple(sorted(set(sys.modules) - had))


def unshadow_preload(workdir):
    """In a job's fork: if the work dir holds a module or package (at any depth: a script's folder, pytest's
    rootdir and test folders go on sys.path) named like a top-level module the preload imported (`random.py`,
    `logging/`, `code.py`: pytest imports ~120 of them), drop every preloaded module from sys.modules, so the job
    imports as a fresh interpreter would and the job's own module shadows the standard one, as in a shell."""
    if not _PRELOADED:
        return
    tops = {n.partition(".")[0] for n in _PRELOADED}
    for _root, dirs, files in os.walk(workdir):
        if any(d in tops for d in dirs) or any(f[:-3] in tops for f in files if f.endswith(".py")):
            for name in _PRELOADED:
                sys.modules.pop(name, None)
            return


def main_zygote(sock_fd, uid, reap_all, preload=()):
    """A clean interpreter that forks one child per job; it never runs job code itself. `preload`: import dirs
    to preload pytest from (preload_pytest), after dropping privileges."""
    drop_privileges(uid)
    preload_pytest(preload)
    gc.freeze()  # the zygote's objects are permanent in its forks: a job's collections skip (and never write) them
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
        main_zygote(_fd, None if sys.argv[3] == "-" else int(sys.argv[3]), sys.argv[4] == "1",
                    json.loads(sys.argv[5]) if len(sys.argv) > 5 else ())
    elif _mode == "session":
        main_session(_fd)
    else:
        sys.exit(f"unknown mode {_mode!r}")
