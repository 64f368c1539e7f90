"""RunSession: everything one training run holds (policy, optimizer, sandbox, tasks, results, checkpoints).

Opening a session composes the run's jobs: agentrl.rl.run_setup checks the inputs before any work,
agentrl.rl.run_folder locks --out, archives an earlier run's output instead of overwriting it and
keeps the results file's status, agentrl.rl.training_state builds the optimizer and reference and on
`--resume` restores model, optimizer, RNG and completed steps; the execution strategy is a
`Backend` (agentrl.rl.backend). Not the loop (agentrl.rl.trainer) and not the maths.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentrl.models.device import resolve_device
from agentrl.models.lora import merged_copy
from agentrl.report.log import progress
from agentrl.report.results import ordinary_modes
from agentrl.report.trackers import open_tracker
from agentrl.rl.agent_backends import agent_factory
from agentrl.rl.backend import LocalBackend
from agentrl.rl.checkpoint import save_model
from agentrl.rl.config import RLConfig
from agentrl.rl.run_folder import (
    exclusive,
    open_results,
    record_failure,
    sigterm_interrupts,
    start_run_folder,
)
from agentrl.rl.run_record import run_record, write_run_record
from agentrl.rl.run_setup import RunPlan, load_inputs, plan_run
from agentrl.rl.training_state import build_training_state
from agentrl.rollout.driver import bind_sampler
from agentrl.rollout.samplers import build_sampler
from agentrl.rollout.trajectory import Trajectory
from agentrl.sandbox import Sandbox
from agentrl.tasks.sets import TaskSets
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.train")


@dataclass
class RunSession:
    """The live state of one run. Build it with `RunSession.open(cfg)` (a context manager).

    rollout / update / checkpoint / rollout_copy / sync_weights / decide go to `backend` (LocalBackend,
    or an agentrl.scale strategy composed over it)."""

    cfg: RLConfig
    out: Path
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer | None  # None for an evaluation of a frozen model
    sandbox: Any
    tasks: TaskSets
    results: Any
    device: str
    start_step: int = 0
    ref_model: Any = None
    sampler: Any = None  # optional agentrl.rollout.driver.SampleFn replacing HF generate (e.g. a server client)
    progress: Any = None  # a rich Progress (agentrl.report.log.progress) shown while the run is open
    tracker: Any = None  # the --report-to tracker (agentrl.report.trackers.Tracker), open while the run is
    t_start: float = field(default_factory=time.perf_counter)
    registered_sampler: bool = False  # the sampler is the registered --sampler built for `model` (rebuilt for copies)
    agents: dict[int, Any] = field(default_factory=dict)  # agent backends, one per rollout model (by id)
    main_process: bool = True  # False on the other ranks of a data-parallel run (agentrl.scale): they write nothing
    log_path: Path | None = None  # the run's log file (<out>/train.log; agentrl eval: <out>/eval.log)
    backend: Any = None  # the execution strategy (agentrl.rl.backend.Backend); LocalBackend(self) unless a strategy sets one

    @property
    def results_path(self) -> Path:
        return self.out / "results.json"

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def __post_init__(self) -> None:
        if self.backend is None:
            self.backend = LocalBackend(self)

    # -- the backend's work -----------------------------------------------------------------------
    def rollout(self, tasks: Sequence[Task], *, seed: int, group_ids: Sequence[int] | None = None,
                label: str = "rollout", policy_version: int | None = None, policy: Any = None) -> list[Trajectory]:
        """One episode per entry of `tasks` (agentrl.rl.backend.LocalBackend.rollout documents the arguments)."""
        return self.backend.rollout(tasks, seed=seed, group_ids=group_ids, label=label,
                                    policy_version=policy_version, policy=policy)

    def update(self, batch: Any, *, group_ids: Sequence[int], generator: torch.Generator | None,
               minibatches: int) -> dict[str, float]:
        """The step's update on `batch`; `group_ids`: each row's GRPO group. Returns the update's metrics."""
        return self.backend.update(batch, group_ids=group_ids, generator=generator, minibatches=minibatches)

    def checkpoint(self, step: int, final: bool = False) -> Path | None:
        """A checkpoint after `step` completed steps when the schedule says so (or `final`), else None."""
        return self.backend.checkpoint(step, final=final)

    def rollout_copy(self) -> Any:
        """A policy that samples while the learner updates; `sync_weights` refreshes it."""
        return self.backend.rollout_copy()

    def sync_weights(self, policy: Any) -> None:
        """The learner's weights into `policy` (a rollout_copy)."""
        self.backend.sync_weights(policy)

    def decide(self, flag: bool) -> bool:
        """A schedule decision every process of the run takes alike (a data-parallel run: rank 0's)."""
        return self.backend.decide(flag)

    # -- rollouts' helpers -------------------------------------------------------------------------
    def sampling_config(self) -> Any:
        """The sampler knobs of this run (agentrl.rollout.hf_sampler.SamplingConfig)."""
        return self.cfg.sampling.sampler_config()

    def agent_for(self, model: Any, sampler: Any) -> Any:
        """The agent backend sampling `model` (built once per model; agentrl.rl.agent_backends)."""
        if id(model) not in self.agents:
            backend = agent_factory(self.cfg.agent.name)(self.cfg, model, self.tokenizer, sampler, self.sandbox,
                                                    self.sampling_config())
            self.agents[id(model)] = backend
            self.results.set("agent", {"name": self.cfg.agent.name, **backend.describe()})
        return self.agents[id(model)]

    def build_sampler(self, model: Any) -> Any:
        """The registered --sampler (agentrl.rollout.samplers) for `model` with this run's sampling
        settings; None for the driver's own HF generate path."""
        return build_sampler(self.cfg.sampling.sampler, model, self.tokenizer, self.sampling_config(),
                             max_batch=self.cfg.sampling.gen_batch, enable_thinking=self.cfg.policy.thinking)

    def close_agents(self) -> None:
        for backend in self.agents.values():
            try:
                backend.close()
            except Exception as e:  # noqa: BLE001 - closing is best effort; the run's results are written
                log.warning("closing agent backend: %s: %s", type(e).__name__, e)
        self.agents.clear()

    # -- persistence ------------------------------------------------------------------------------
    def export_model(self, step: int) -> Path | None:
        """Write the run's final model to `<out>/model` (main process only; else None) and return it: an HF
        folder with the tokenizer and chat template (for LoRA the adapters and agentrl_lora.json naming the
        base) and agentrl_run.json (agentrl.rl.run_record) recording the environment, tasks and settings
        after `step` completed steps. Written beside, then renamed: a crash leaves no half model."""
        if not self.main_process:
            return None
        path = self.out / "model"
        tmp = self.out / f".tmp-model-{uuid.uuid4().hex[:8]}"
        try:
            save_model(self.model, tmp)
            self.tokenizer.save_pretrained(tmp)
            write_run_record(tmp, run_record(self.cfg, step))
            if path.exists():  # a resumed run that had finished once: the newer model wins
                shutil.rmtree(path)
            os.rename(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("model: %s (load it with --model %s)", path, self.out)
        return path

    def export_merged(self) -> Path | None:
        """With --lora-merge and LoRA: write `<out>/merged` (adapters merged into a plain model, and the
        tokenizer) and return it; else None."""
        if not (self.cfg.update.lora_merge and self.cfg.update.lora_r):
            return None
        path = self.out / "merged"
        merged_copy(self.model).save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        ordinary_modes(path)
        log.info("merged LoRA model: %s", path)
        return path

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def open(cls, cfg: RLConfig, *, sampler: Any = None, make_sandbox: Callable[[RLConfig], Any] | None = None,
             scaled: bool = False, log_name: str = "train.log") -> Iterator[RunSession]:
        """Build the session; on exit close the sandbox and mark the results file failed/interrupted if
        the run did not finish (the file keeps every completed step).

        Everything that can be checked without touching `cfg.run.out` (agentrl.rl.run_setup.plan_run) is
        checked before an earlier run there is archived; `cfg.run.out` is locked for the whole run, so a
        second job on the same folder is refused instead of mixing two runs.

        Args:
            sampler: a SampleFn replacing the registered --sampler (e.g. a server client).
            make_sandbox: builds the run's sandbox from the config (default agentrl.sandbox.Sandbox();
                agentrl.scale's Ray graders pass theirs).
            scaled: an agentrl.scale strategy runs this session (--rollout-workers / --ray-graders need one).
            log_name: the run's log file in `cfg.run.out` (`agentrl eval`: eval.log).

        Raises:
            ValueError / FileNotFoundError: invalid input, named (nothing is archived or written).
        """
        plan = plan_run(cfg, scaled=scaled)
        plan.out.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(plan.out), sigterm_interrupts(), torch_cpu_threads(cfg):
            with cls._started(plan, sampler, make_sandbox or default_sandbox, log_name) as sess:
                yield sess

    @classmethod
    @contextlib.contextmanager
    def _started(cls, plan: RunPlan, sampler: Any, make_sandbox: Callable[[RLConfig], Any],
                 log_name: str = "train.log") -> Iterator[RunSession]:
        cfg, out, tasks = plan.cfg, plan.out, plan.tasks
        sandbox = make_sandbox(cfg)
        try:  # every input is loaded and checked before an earlier run in `out` is touched
            inputs = load_inputs(cfg, tasks, sandbox)
        except BaseException:
            sandbox.close()
            raise
        cfg = inputs.cfg or cfg  # max_context_tokens fitted to the model
        start_run_folder(cfg, out, tasks, log_name)
        for note in plan.notes:
            log.info("%s", note)
        sess = None
        try:
            log.info("model %s on %s in %s (--dtype %s)", cfg.policy.model, inputs.device, inputs.dtype,
                     cfg.policy.dtype)
            state = build_training_state(cfg, out, inputs.model)
            results = open_results(cfg, out, tasks, sandbox, inputs, state.model, state.start_step)
            warn_unsolvable_tasks(cfg, tasks, sandbox, results)
            sess = cls(cfg=cfg, out=out, model=state.model, tokenizer=inputs.tokenizer, optimizer=state.optimizer,
                       sandbox=sandbox, tasks=tasks, results=results, device=inputs.device,
                       start_step=state.start_step, ref_model=state.ref_model)
            sess.log_path = out / log_name
            sess.attach_sampler(sampler)
            sess.tracker = open_tracker(cfg.run.report_to, out, config=cfg.to_flat())
            with progress(transient=True) as bars:
                sess.progress = bars
                yield sess
        except BaseException as e:
            record_failure(sess.results if sess is not None else None, cfg, out, e,
                           time.perf_counter() - sess.t_start if sess is not None else 0.0)
            raise
        finally:
            if sess is not None:
                sess.close_agents()
            if sess is not None and sess.tracker is not None:
                sess.tracker.finish()
            sandbox.close()

    def attach_sampler(self, sampler: Any) -> None:
        """Sample with `sampler`, or (None) the registered --sampler built for this session's model (None
        for the driver's HF generate path); a sampler with `bind()` is bound to the model and tokenizer."""
        if sampler is None:
            sampler = self.build_sampler(self.model)
            self.registered_sampler = True
        self.sampler = sampler
        bind_sampler(sampler, self.model, self.tokenizer)


@contextlib.contextmanager
def torch_cpu_threads(cfg: RLConfig) -> Iterator[None]:
    """torch's intra-op threads = cfg.scale.cpu_threads while the run is open, on a CPU run (0: unchanged); the
    previous count is restored on exit (a run inside a longer process leaves it as it found it)."""
    if not cfg.scale.cpu_threads or not str(resolve_device(cfg.policy.device)).startswith("cpu"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(cfg.scale.cpu_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def default_sandbox(cfg: RLConfig) -> Any:
    """The run's sandbox: agentrl.sandbox.Sandbox() (agentrl.scale's Ray graders grade in Ray actors instead)."""
    return Sandbox()


def warn_unsolvable_tasks(cfg: RLConfig, tasks: TaskSets, sandbox: Any, results: Any) -> list[tuple[str, str]]:
    """A task file's tasks (train and held out) whose reference fails their own hidden tests: logged as one
    warning and recorded in the results file's `warnings` (kind unsolvable_tasks, step 0). Such a task scores 0
    whatever the policy does (agentrl.tasks.check.failing_references); the run goes on. Built-in sources
    (generated or pinned: checked by their own tests), sandboxes without `run_tests_batch` and a resumed run whose
    results already hold this warning are not checked. Returns [(task id, why)]."""
    from agentrl.tasks.sets import is_task_file

    run_batch = getattr(sandbox, "run_tests_batch", None)
    done = any(w.get("kind") == "unsolvable_tasks" for w in getattr(results, "data", {}).get("warnings") or [])
    if not is_task_file(cfg.tasks.source) or run_batch is None or done:
        return []
    from agentrl.tasks.check import failing_references

    bad = failing_references([*tasks.train, *tasks.heldout], run_batch)
    if bad:
        shown = "; ".join(f"{tid}: {why}" for tid, why in bad[:5])
        shown += f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
        msg = (f"{len(bad)} of {len(tasks.train) + len(tasks.heldout)} tasks in {cfg.tasks.source} can never be "
               f"solved: their reference fails their own hidden tests, so they reward 0 whatever the policy writes "
               f"({shown}). `agentrl tasks check --file {cfg.tasks.source}` shows every check")
        log.warning("%s", msg)
        results.add_warning({"step": 0, "kind": "unsolvable_tasks", "metric": "tasks", "value": len(bad),
                             "message": msg})
    return bad
