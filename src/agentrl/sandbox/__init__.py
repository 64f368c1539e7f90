"""Sandbox: run model-written code in its own process with limits; never in the trainer."""

from agentrl.sandbox.api import RunResult, SandboxLimits, TestJob, TestOutcome, TestReport

__all__ = ["RunResult", "SandboxLimits", "TestJob", "TestOutcome", "TestReport"]
