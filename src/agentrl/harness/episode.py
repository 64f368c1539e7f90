"""Black-box episodes: one harness run per rollout against the policy server, scored by hidden tests.

Not the harness launch (agentrl.harness.opencode), not the server (agentrl.serve.policy.server), not the
trainer. `BlackBoxRunner.run(tasks)` runs every episode at once (one harness process each; the server
batches their model calls), then for each: the trace the server captured, the rows rebuilt from it
(agentrl.rollout.trace), and the reward: our hidden tests on the final workspace, in our sandbox.

A harness that crashed (non-zero exit, or no model call at all), hung (killed at its wall-clock limit)
or went over its server-side wall-time budget ends the episode unscorable: reward None, never a silent 0.
One stopped for going over its calls or sampled tokens (the policy's own doing) is graded on the workspace
it left, with end reason budget_max_calls / budget_max_tokens (truncated, as a white-box episode out of turns).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.harness.opencode import (
    INNER_PORT,
    HarnessRun,
    build_launch,
    bwrap_usable,
    find_opencode,
    opencode_config,
    run_harness,
)
from agentrl.rollout.trace import Trace, TraceRow, rows_from_trace
from agentrl.serve.policy.server import PolicyServer, RolloutBudget
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.harness")
MAX_FILE_BYTES = 1 << 20
# the budgets whose overrun is the policy's doing (too many calls or sampled tokens): the episode is graded on the
# workspace it left, as a white-box episode out of turns or tokens is (docs/envs.md), so GRPO sees the overrun's
# reward. An overrun of wall time depends on the machine's load as much as on the policy: unscorable.
GRADED_BUDGETS = ("max_calls", "max_tokens")


@dataclass(frozen=True)
class AgentConfig:
    """Per-episode limits and harness settings.

    Attributes:
        timeout_s: wall-clock limit of one harness run (then it is killed: unscorable, "harness_timeout").
        budget: the server-side per-rollout budget (calls, completion tokens, wall time).
        context_tokens / output_tokens: the limits opencode is told (its compaction and max_tokens).
        isolation: "auto" (bubblewrap where usable), "bwrap", or "none" (a plain child process).
        binary: the opencode binary (default: `find_opencode()`).
        workers: harness processes run at once.
    """

    timeout_s: float = 300.0
    budget: RolloutBudget = field(default_factory=lambda: RolloutBudget(max_calls=16, max_completion_tokens=8192,
                                                                         max_wall_s=300.0))
    context_tokens: int = 16384
    output_tokens: int = 512
    isolation: str = "auto"
    binary: str | None = None
    workers: int = 8

    def __post_init__(self):
        if self.isolation not in ("auto", "bwrap", "none"):
            raise ValueError(f"isolation must be auto, bwrap or none, got {self.isolation!r}")
        if not self.timeout_s > 0 or self.workers < 1:
            raise ValueError("timeout_s and workers must be positive")


@dataclass(frozen=True)
class AgentEpisode:
    """One black-box episode.

    Attributes:
        task_id, group_id, rollout_id: what ran, its GRPO group, and the key its model calls carried.
        reward: 1.0 / 0.0 from the hidden tests, None when unscorable.
        end_reason: "harness_exit" (the harness finished on its own) | "harness_crash" | "harness_timeout"
            | "harness_error" (it reported an error event) | "budget_<what>" (max_calls / max_tokens: graded;
            wall_time: unscorable) | "policy_error" (sampling a call
            failed) | "no_model_calls" | "sandbox_error" | "interrupted" (the run was stopped meanwhile).
        trace: every model call; rows: the training rows rebuilt from it.
        harness: the harness process record; wall_s: whole episode (set-up, run, scoring);
            harness_overhead_s: harness wall time not spent in model calls.
        final_source: the graded file after the run (None if it is gone).
    """

    task_id: str
    group_id: int
    rollout_id: str
    reward: float | None
    end_reason: str
    trace: Trace
    rows: tuple[TraceRow, ...]
    harness: HarnessRun
    wall_s: float
    harness_overhead_s: float
    final_source: str | None
    isolation: str


TEST_RUNNER = "run_tests.py"
"""The test runner every black-box workspace holds beside the task's files (`python3 run_tests.py`)."""

TEST_RUNNER_SOURCE = '''"""Run every test_* function of the test_*.py files in this folder: python3 run_tests.py"""
import importlib, os, sys, traceback

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
failed = 0
for path in sorted(f for f in os.listdir(here) if f.startswith("test_") and f.endswith(".py")):
    try:
        tests = sorted((n, f) for n, f in vars(importlib.import_module(path[:-3])).items()
                       if n.startswith("test_") and callable(f))
    except Exception:
        failed += 1
        print(f"{path}: could not be imported", flush=True)
        traceback.print_exc()
        continue
    for name, test in tests:
        try:
            test()
            print(f"{path}::{name} passed", flush=True)
        except Exception:
            failed += 1
            print(f"{path}::{name} FAILED", flush=True)
            traceback.print_exc()
print("all tests passed" if failed == 0 else f"{failed} failed")
sys.exit(1 if failed else 0)
'''


def write_repo(workdir: Path, task: Task) -> None:
    """Lay out a black-box episode's workspace in `workdir`: the task's files, its shown test file
    (agentrl.envs.coding_tools.public_test_file) and `TEST_RUNNER` (plain python3, no pytest: the harness's
    interpreter need not have it), unless the task brings a file of that name.

    Raises:
        ValueError: a task file's path leaves `workdir`.
    """
    from agentrl.envs.coding_tools import public_test_file, public_test_name

    files = dict(task.files)
    files.setdefault(public_test_name(task), public_test_file(task))
    files.setdefault(TEST_RUNNER, TEST_RUNNER_SOURCE)
    for rel, text in files.items():
        p = (workdir / rel).resolve()
        if workdir.resolve() not in p.parents:
            raise ValueError(f"task {task.id!r}: file path {rel!r} leaves the repository")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _read_source(workdir: Path, task: Task) -> str | None:
    p = workdir / task.source_file
    try:
        if not p.is_file() or p.is_symlink() or p.stat().st_size > MAX_FILE_BYTES:
            return None
        return p.read_text(errors="replace")
    except OSError:
        return None


def task_message(task: Task) -> str:
    """The user message opencode gets: the coding-tools environment's wording, with relative paths, and how to
    run the shown tests (`TEST_RUNNER`, which `write_repo` puts in the workspace)."""
    from agentrl.envs.coding_tools import public_test_name

    test = public_test_name(task)
    return (f"The function `{task.entry}` in {task.source_file} has a bug. Fix it so that it behaves correctly. "
            f"Tests are in {test}; run them with `python3 {TEST_RUNNER}`.")


class BlackBoxRunner:
    """Runs opencode episodes against an in-process PolicyServer and scores them.

    Args:
        server: the PolicyServer (its model is the rollout policy).
        sandbox: an agentrl Sandbox for the hidden tests.
        cfg: AgentConfig.

    Raises:
        FileNotFoundError: opencode is not installed (the message says how to install it).
        RuntimeError: isolation "bwrap" asked for but bubblewrap is unusable here.
    """

    def __init__(self, server: PolicyServer, sandbox: Any, cfg: AgentConfig | None = None):
        from agentrl.serve.policy.app import ServerThread

        self.server, self.sandbox, self.cfg = server, sandbox, cfg or AgentConfig()
        self._interrupted = threading.Event()  # set by an interruption or close(): running harnesses are killed
        self.binary = find_opencode(self.cfg.binary)
        iso = self.cfg.isolation
        if iso == "bwrap" and not bwrap_usable():
            raise RuntimeError("isolation 'bwrap' asked for, but bubblewrap cannot create a network namespace here")
        self.isolation = "bwrap" if iso == "bwrap" or (iso == "auto" and bwrap_usable()) else "none"
        self._root = Path(tempfile.mkdtemp(prefix="agentrl-bb-"))
        if self.isolation == "bwrap":
            (self._root / "sock").mkdir()
            self.uds: str | None = str(self._root / "sock" / "policy.sock")
            self._http = ServerThread(server, uds=self.uds).start()
            self.base_url = f"http://127.0.0.1:{INNER_PORT}/v1"
        else:
            self.uds = None
            self._http = ServerThread(server, port=0).start()
            self.base_url = self._http.base_url

    def describe(self) -> dict[str, Any]:
        """How episodes run (for the results file)."""
        from agentrl.harness.opencode import OPENCODE_VERSION

        return {"harness": "opencode", "version": OPENCODE_VERSION, "binary": self.binary,
                "isolation": self.isolation, "timeout_s": self.cfg.timeout_s,
                "budget": vars(self.cfg.budget), "network": "loopback relay to the policy server only"
                if self.isolation == "bwrap" else "host loopback (not isolated)"}

    def run(self, tasks: list[Task], group_ids: list[int] | None = None) -> list[AgentEpisode]:
        """One episode per task, all at once (at most cfg.workers harness processes); same order.

        An exception in the calling thread while they run (Ctrl-C, SIGTERM turned into an exception by
        the trainer) kills every running harness within a poll interval and is re-raised: an interrupted
        run never waits for its harnesses' own time limits.
        """
        gids = group_ids if group_ids is not None else list(range(len(tasks)))
        with ThreadPoolExecutor(max_workers=self.cfg.workers) as pool:
            try:
                return list(pool.map(self.episode, tasks, gids))
            except BaseException:
                self._interrupted.set()
                raise

    def _stop_reason(self, rid: str) -> str:
        return "interrupted" if self._interrupted.is_set() else self.server.stop_reason(rid)

    def episode(self, task: Task, group_id: int = 0) -> AgentEpisode:
        """Run one episode (never raises for harness or sandbox failures: they are its end_reason)."""
        t0 = time.monotonic()
        rid = f"ro-{uuid.uuid4().hex[:16]}"
        ep_dir = Path(tempfile.mkdtemp(prefix=f"{rid}-", dir=self._root))
        work, home = ep_dir / "repo", ep_dir / "home"
        work.mkdir()
        home.mkdir()
        try:
            write_repo(work, task)
            self.server.open_rollout(rid, self.cfg.budget)
            config = opencode_config(self.base_url, rid, context_tokens=self.cfg.context_tokens,
                                     output_tokens=self.cfg.output_tokens)
            launch = build_launch(self.binary, workdir=str(work), home=str(home), message=task_message(task),
                                  title=f"agentrl {task.id}", config=config, isolation=self.isolation, uds=self.uds)
            run = run_harness(launch, self.cfg.timeout_s, stop=lambda: self._stop_reason(rid))
            trace = self.server.close_rollout(rid)
            source = _read_source(work, task)
        finally:
            shutil.rmtree(ep_dir, ignore_errors=True)
        rows = tuple(rows_from_trace(trace))
        reward, reason = self._score(task, run, trace, rows, source)
        model_s = sum(c.wall_s for c in trace.calls)
        return AgentEpisode(task_id=task.id, group_id=group_id, rollout_id=rid, reward=reward, end_reason=reason,
                            trace=trace, rows=rows, harness=run,
                            wall_s=time.monotonic() - t0, harness_overhead_s=max(0.0, run.wall_s - model_s),
                            final_source=source, isolation=self.isolation)

    def _score(self, task: Task, run: HarnessRun, trace: Trace, rows: tuple[TraceRow, ...],
               source: str | None) -> tuple[float | None, str]:
        from agentrl.envs.grading import grade, is_sandbox_failure, source_job

        if run.stopped == "interrupted":
            return None, "interrupted"
        if run.timed_out:
            log.warning("task %s: harness %s", task.id, " ".join(h.notice() for h in run.limits_hit) or "timed out")
            return None, "harness_timeout"
        budget = trace.budget_exceeded
        if budget and budget not in GRADED_BUDGETS:
            return None, f"budget_{budget}"
        if trace.failed:
            log.warning("task %s: sampling a model call failed: %s", task.id, trace.failed)
            return None, "policy_error"
        # over a graded budget the harness was killed on purpose (its refused call may also have been reported
        # as an error event), so neither its exit status nor its events say anything about the episode
        if not budget and (run.returncode != 0 or run.error):
            log.warning("task %s: harness exited %s%s; stderr: %s", task.id, run.returncode,
                        f" ({run.error})" if run.error else "", run.stderr_tail[-500:])
            return None, "harness_crash"
        if not rows:  # no main model call (at most side calls): the policy did not act
            return None, "no_model_calls"
        if not budget and any(ev.get("type") == "error" for ev in run.events):  # e.g. a model call that failed
            return None, "harness_error"
        report = grade(self.sandbox, source_job(task, source, task.hidden_tests))
        if is_sandbox_failure(report):
            return None, "sandbox_error"
        return (1.0 if report.all_passed and source is not None else 0.0), (f"budget_{budget}" if budget
                                                                            else "harness_exit")

    def close(self) -> None:
        self._interrupted.set()
        self._http.stop()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> BlackBoxRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
