"""Sandbox: run model-written code in its own limited process; never in the trainer.

    from agentrl.sandbox import Sandbox, TestJob
    with Sandbox() as sb:
        report = sb.run_tests(TestJob(files={"fn.py": src}, module="fn", tests=("assert f(1) == 2",)))

See docs/sandbox.md for what holds when (root or not, bubblewrap or rlimit only) and what does not.
"""

from agentrl.sandbox.api import (
    RunResult,
    SandboxLimits,
    SessionResult,
    TestJob,
    TestOutcome,
    TestReport,
)
from agentrl.sandbox.repl import PythonSession
from agentrl.sandbox.sandbox import Sandbox, normalize_argv

__all__ = ["PythonSession", "RunResult", "Sandbox", "SandboxLimits", "SessionResult", "TestJob",
           "TestOutcome", "TestReport", "normalize_argv"]
