"""PythonSession: state persists across calls; timeouts and crashes restart the worker and say so."""

from agentrl.sandbox import SessionResult
from agentrl.sandbox._child import HERMETIC_ENV


def test_state_persists_and_tracebacks_come_back(sb):
    with sb.session() as s:
        r = s.execute("def sq(x):\n    return x * x\nprint('defined')")
        assert isinstance(r, SessionResult) and r.stdout == "defined\n" and not r.restarted
        r = s.execute("print(sq(7))\n1/0")
        assert r.stdout == "49\n" and "ZeroDivisionError" in r.stderr and "<run_python>" in r.stderr
        assert s.execute("print(sq(2))").stdout == "4\n"


def test_timeout_restarts_and_reports_lost_state(sb):
    with sb.session() as s:
        s.execute("x = 5")
        r = s.execute("import time\nwhile True:\n    time.sleep(0.05)", timeout_s=0.5)
        assert r.timed_out and r.restarted and "restarted" in r.stderr
        r = s.execute("print('x' in globals())")
        assert r.stdout == "False\n" and not r.restarted


def test_crash_restarts(sb):
    with sb.session() as s:
        r = s.execute("import os\nos._exit(3)")
        assert r.restarted and r.error and "exit code 3" in r.error
        assert s.execute("print(1 + 1)").stdout == "2\n"


def test_session_limits_hold(sb):
    with sb.session() as s:
        r = s.execute("import os\nos.fork()")
        assert "BlockingIOError" in r.stderr
        r = s.execute("import os\nprint(sorted(os.environ))")
        assert r.stdout == f"{sorted({'HOME', 'LANG', 'PATH', *HERMETIC_ENV})}\n"


def test_restart_and_close_are_safe(sb):
    s = sb.session(files={"data.txt": "hello"})
    assert s.execute("print(open('data.txt').read())").stdout == "hello\n"
    s.execute("y = 1")
    s.restart()
    r = s.execute("print('y' in globals())")
    assert r.stdout == "False\n" and not r.restarted
    s.close()
    s.close()
