"""RunSession: everything one training run holds (policy, optimizer, sandbox, tasks, results, checkpoints).

Opening a session validates the inputs before any work, archives an earlier run's output instead of
overwriting it, and on `--resume` restores model, optimizer, RNG and completed steps from the latest
checkpoint. Not the loop (agentrl.rl.trainer) and not the maths.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentrl.rl.config import RLConfig
from agentrl.rollout.device import resolve_device, resolve_dtype
from agentrl.rollout.trajectory import Trajectory
from agentrl.tasks.sets import TaskSets, task_sets
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.train")


def env_kwargs(cfg: RLConfig, sandbox: Any) -> dict[str, Any]:
    """Constructor arguments of `cfg.env`, as its EnvSpec maps the run config (plus the shared sandbox)."""
    from agentrl.envs import get_spec

    return get_spec(cfg.env).kwargs_from_config(cfg, sandbox=sandbox)


def check_env_fits_tasks(env: str, tasks: TaskSets) -> None:
    """ValueError naming the supported sources when `env` cannot run the tasks of `tasks` (its EnvSpec says)."""
    from agentrl.envs import get_spec

    spec = get_spec(env)
    sample = (tasks.train or tasks.heldout)[0]
    if not spec.accepts(sample):
        raise ValueError(f"--env {env} cannot run --tasks {tasks.source} (task {sample.id!r}); "
                         f"it takes {spec.task_sources}")


def env_section(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The results file's "env" section: the environment, its constructor arguments (the sandbox and
    word lists summarised), its rules and its end-reason vocabulary."""
    from agentrl.envs import get_spec

    spec = get_spec(name)
    shown = {k: (f"<{len(v)} words>" if k == "words" and v is not None else v) for k, v in kwargs.items()
             if k != "sandbox"}
    return {"name": name, "class": f"{spec.cls.__module__}.{spec.cls.__qualname__}", "kwargs": shown,
            "max_observation_chars": kwargs.get("max_observation_chars"), "end_reasons": list(spec.all_end_reasons())}


def _with_lora(cfg: RLConfig, model: Any) -> Any:
    """`model` wrapped in LoRA adapters when cfg.lora_r > 0 (agentrl.models.lora), else unchanged."""
    if not cfg.lora_r:
        return model
    from agentrl.models.lora import apply_lora

    base = Path(cfg.model).expanduser()
    return apply_lora(model, r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_target_modules, seed=cfg.seed,
                      base=str(base.resolve()) if base.exists() else cfg.model)


@contextlib.contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on `out` for the run (a lock file beside it, so archiving cannot move it);
    the lock file is removed when the run ends, so nothing is left beside `out`.

    A lock is taken only on the file that is at the path after locking (an inode check), so a job
    that opened the file just before the previous holder removed it retries on the new file instead
    of holding a lock nobody else sees.

    Raises:
        ValueError: another live process holds the lock (it names that process), or the lock file cannot
            be made beside `out` (a read-only or special directory such as /proc or /sys).
    """
    lock_path = out.with_name(f".{out.name}.lock")
    for _ in range(100):
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ValueError(f"--out {str(out)!r}: cannot write in {str(out.parent)!r} "
                             f"({e.strerror or e}); pass an --out in a writable directory") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ValueError(f"--out {out} is in use by a running job (pid {holder}); pass another --out, "
                             "or wait for it to finish") from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                break
        os.close(fd)  # the holder removed this file after we opened it: lock the new one
    else:
        raise ValueError(f"--out {out}: could not take the lock {lock_path}")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock_path.unlink()  # while still holding the lock, so no other job holds this inode
        os.close(fd)  # releases the lock


@dataclass(frozen=True)
class RolloutPolicy:
    """A policy copy that samples rollouts (the asynchronous trainer's), with its sampler (None: HF generate)."""

    model: Any
    sampler: Any = None


class Terminated(KeyboardInterrupt):
    """SIGTERM (preemption, `timeout`, `docker stop`): the run ends as "interrupted", like Ctrl-C."""


@contextlib.contextmanager
def _torch_cpu_threads(cfg: RLConfig) -> Iterator[None]:
    """torch's intra-op threads = cfg.cpu_threads while the run is open, on a CPU run (0: unchanged); the
    previous count is restored on exit (a run inside a longer process leaves it as it found it)."""
    if not cfg.cpu_threads or not str(resolve_device(cfg.device)).startswith("cpu"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(cfg.cpu_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM into `Terminated` while the run is open (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class _Inputs:
    """The run's inputs once loaded and checked (before anything in --out is touched)."""

    model: Any
    tokenizer: Any
    device: str
    tool_schemas: list
    dtype: str = "fp32"  # the concrete dtype loaded (--dtype auto resolved)


def _check_context_fits(cfg: RLConfig, prompt_tokens: int) -> None:
    """Refuse a --max-context-tokens that the first held-out prompt already fills: every episode would
    end out_of_tokens before its first turn and the run would train on nothing (a black-box harness
    writes its own prompt, so --agent runs are not checked here)."""
    if not cfg.agent and prompt_tokens + 1 > cfg.max_context_tokens:
        raise ValueError(f"--max-context-tokens {cfg.max_context_tokens} leaves no room to sample: the first "
                         f"held-out prompt is already {prompt_tokens} tokens; pass at least "
                         f"{prompt_tokens + cfg.max_new_tokens} (prompt + --max-new-tokens)")


def _load_inputs(cfg: RLConfig, tasks: TaskSets, sandbox: Any) -> _Inputs:
    """Load the policy and tokenizer and check the chat template against the environment's tools.

    Raises:
        FileNotFoundError / ValueError: a missing or broken model, a bad tokenizer path, a template that
            fails the token-in/token-out check (agentrl.chat.tito.TitoMismatch is re-raised as ValueError).
    """
    from agentrl.chat.template import render_prompt
    from agentrl.chat.tito import TitoMismatch, assert_tito_consistent
    from agentrl.envs import make_env
    from agentrl.rollout.models import load_policy

    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, cfg.model, allow_download=cfg.allow_download)  # "auto": the checkpoint's
    if dtype == "fp16" and cfg.steps:
        raise ValueError(f"--dtype {cfg.dtype}: model {cfg.model!r} is stored in fp16; fp16 training needs loss "
                         "scaling, which agentrl does not do; pass --dtype bf16 or fp32")
    torch.manual_seed(cfg.seed)
    try:
        model, tok = load_policy(cfg.model, dtype, device, cfg.allow_download,
                                 tokenizer_path=cfg.tokenizer or None, seed=cfg.seed,
                                 chat_template=cfg.chat_template or None)
    except (FileNotFoundError, ValueError):
        raise
    except Exception as e:  # noqa: BLE001 - a broken model folder (corrupt weights, bad config) is bad input
        raise ValueError(f"--model {cfg.model!r} could not be loaded: {type(e).__name__}: {e}") from e
    env = make_env(cfg.env, **env_kwargs(cfg, sandbox))
    try:
        obs = env.reset(tasks.heldout[0], seed=cfg.seed)
        if obs.tools:
            assert_tito_consistent(tok, obs, enable_thinking=cfg.thinking)
        _check_context_fits(cfg, len(render_prompt(tok, obs, enable_thinking=cfg.thinking)))
        schemas = env.tools()
    except TitoMismatch as e:
        raise ValueError(f"the chat template of {cfg.tokenizer or cfg.model!r} fails the token-in/token-out "
                         f"check: {e}") from e
    finally:
        env.close()
    return _Inputs(model, tok, device, schemas, dtype)


def run_task_sets(cfg: RLConfig) -> TaskSets:
    """The run's training and held-out tasks, as cfg selects them (deterministic in cfg.seed)."""
    return task_sets(cfg.tasks, train_size=cfg.train_size, eval_size=cfg.eval_size, families=cfg.families,
                     randomize=cfg.randomize_names, seed=cfg.seed,
                     reward_includes_shown_test=cfg.reward_includes_shown_test)


def resume_hint(cfg: RLConfig, out: Path) -> str:
    """How to continue an interrupted or failed run: the command (every non-default setting, then --resume)
    when a checkpoint exists, else why it cannot be resumed."""
    from agentrl.rl.checkpoint import latest_checkpoint
    from agentrl.rl.config import cli_command

    ckpt = latest_checkpoint(out / "checkpoints")
    if ckpt is None:
        return ("no checkpoint was saved, so this run cannot be resumed"
                + ("" if cfg.checkpoint_every else " (pass --checkpoint-every N to save them)"))
    return f"to resume from {ckpt.name}: {cli_command(cfg, resume=True)}"


@dataclass
class RunSession:
    """The live state of one run. Build it with `RunSession.open(cfg)` (a context manager)."""

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
    progress: Any = None  # a rich Progress (agentrl.io.log.progress) shown while the run is open
    tracker: Any = None  # the --report-to tracker (agentrl.io.trackers.Tracker), open while the run is
    t_start: float = field(default_factory=time.perf_counter)
    registered_sampler: bool = False  # the sampler is the registered --sampler built for `model` (rebuilt for copies)
    agents: dict[int, Any] = field(default_factory=dict)  # agent backends, one per rollout model (by id)
    main_process: bool = True  # False on the other ranks of a data-parallel run (agentrl.dist): they write nothing

    @property
    def results_path(self) -> Path:
        return self.out / "results.json"

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    # -- rollouts ---------------------------------------------------------------------------------
    def sampling_config(self) -> Any:
        """The sampler knobs of this run (agentrl.rollout.sampler.SamplingConfig)."""
        from agentrl.rollout.sampler import SamplingConfig

        cfg = self.cfg
        return SamplingConfig(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                              top_k=cfg.top_k or 0, top_p=cfg.top_p, gen_batch=cfg.gen_batch)

    def rollout(self, tasks: Sequence[Task], *, seed: int, group_ids: Sequence[int] | None = None,
                label: str = "rollout", policy_version: int | None = None,
                policy: RolloutPolicy | None = None) -> list[Trajectory]:
        """One episode per entry of `tasks` (a fresh env each, or one black-box harness run each with
        `cfg.agent`), all advancing together (a progress bar named `label` counts finished episodes);
        `policy_version` is stored in each Trajectory. `policy`: sample with another copy of the policy
        (the asynchronous trainer's rollout model) instead of the learner's."""
        from agentrl.envs import make_env
        from agentrl.rollout.driver import RolloutConfig, run_episodes

        cfg = self.cfg
        model, sampler = (policy.model, policy.sampler) if policy is not None else (self.model, self.sampler)
        model.eval()
        bar = self.progress.add_task(label, total=len(tasks), unit="episodes") if self.progress is not None else None
        on_progress = None if bar is None else (lambda done, total: self.progress.update(bar, completed=done))
        gids = list(group_ids) if group_ids is not None else None
        try:
            if cfg.agent:
                return self._agent_for(model, sampler)(tasks, seed=seed, group_ids=gids, policy_version=policy_version,
                                                       on_progress=on_progress)
            rcfg = RolloutConfig(sampling=self.sampling_config(), max_context_tokens=cfg.max_context_tokens,
                                 enable_thinking=cfg.thinking)
            pairs = [(make_env(cfg.env, **env_kwargs(cfg, self.sandbox)), t) for t in tasks]
            return run_episodes(model, self.tokenizer, pairs, cfg=rcfg, seed=seed, sampler=sampler, group_ids=gids,
                                policy_version=policy_version, on_progress=on_progress)
        finally:
            if bar is not None:
                self.progress.remove_task(bar)

    def update(self, batch: Any, *, group_ids: Sequence[int], generator: torch.Generator | None,
               minibatches: int) -> dict[str, float]:
        """The step's update on `batch` (agentrl.rl.update.minibatch_step on the learner). `group_ids`:
        each row's GRPO group (a data-parallel session, agentrl.dist, trains each group on one rank)."""
        from agentrl.rl.update import minibatch_step

        return minibatch_step(self.model, self.optimizer, batch, self.cfg, ref_model=self.ref_model,
                              generator=generator, minibatches=minibatches)

    def decide(self, flag: bool) -> bool:
        """A schedule decision every process of the run must take alike (stop early?): here `flag` itself;
        a data-parallel session (agentrl.dist) returns rank 0's."""
        return flag

    def _agent_for(self, model: Any, sampler: Any) -> Any:
        """The agent backend sampling `model` (built once per model; agentrl.rl.backends)."""
        from agentrl.rl.backends import agent_factory

        if id(model) not in self.agents:
            backend = agent_factory(self.cfg.agent)(self.cfg, model, self.tokenizer, sampler, self.sandbox,
                                                    self.sampling_config())
            self.agents[id(model)] = backend
            self.results.set("agent", {"name": self.cfg.agent, **backend.describe()})
        return self.agents[id(model)]

    def rollout_copy(self) -> RolloutPolicy:
        """A separate copy of the policy for rollouts that run while the learner updates (no gradients,
        eval mode; its own fast sampler when the run uses one). `sync_weights` refreshes it."""
        model = copy.deepcopy(self.model).eval().requires_grad_(False)
        if self.registered_sampler:
            sampler = self.build_sampler(model)
        else:
            from agentrl.rollout.driver import bind_sampler

            sampler = self.sampler
            bind_sampler(sampler, model, self.tokenizer)
        return RolloutPolicy(model, sampler)

    def build_sampler(self, model: Any) -> Any:
        """The registered --sampler (agentrl.rollout.samplers) for `model` with this run's sampling
        settings; None for the driver's own HF generate path."""
        from agentrl.rollout.samplers import build_sampler

        return build_sampler(self.cfg.sampler, model, self.tokenizer, self.sampling_config(),
                             max_batch=self.cfg.gen_batch, enable_thinking=self.cfg.thinking)

    def sync_weights(self, policy: RolloutPolicy) -> None:
        """Copy the learner's weights into `policy.model` in place (so samplers holding its tensors,
        e.g. captured CUDA graphs, see the new values)."""
        with torch.no_grad():
            for dst, src in zip(policy.model.parameters(), self.model.parameters(), strict=True):
                dst.copy_(src)
            for dst, src in zip(policy.model.buffers(), self.model.buffers(), strict=True):
                dst.copy_(src)

    def close_agents(self) -> None:
        for backend in self.agents.values():
            try:
                backend.close()
            except Exception as e:  # noqa: BLE001 - closing is best effort; the run's results are written
                log.warning("closing agent backend: %s: %s", type(e).__name__, e)
        self.agents.clear()

    # -- persistence ------------------------------------------------------------------------------
    def checkpoint(self, step: int, final: bool = False) -> Path | None:
        """Save a checkpoint after `step` completed steps when the schedule says so (and at the end: the
        last step, or `final` when the run stops early)."""
        from agentrl.rl.checkpoint import prune_checkpoints, save_checkpoint

        every = self.cfg.checkpoint_every
        if not every or (step % every and step != self.cfg.steps and not final):
            return None
        path = save_checkpoint(self.out / "checkpoints", step, self.model, self.optimizer, extra={"step": step},
                               tokenizer=self.tokenizer)
        if self.cfg.keep_checkpoints:
            prune_checkpoints(self.out / "checkpoints", self.cfg.keep_checkpoints)
        return path

    def export_merged(self) -> Path | None:
        """With --lora-merge and LoRA: write `<out>/merged` (adapters merged into a plain model, and the
        tokenizer) and return it; else None."""
        if not (self.cfg.lora_merge and self.cfg.lora_r):
            return None
        from agentrl.models.lora import merged_copy

        path = self.out / "merged"
        merged_copy(self.model).save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        log.info("merged LoRA model: %s", path)
        return path

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def open(cls, cfg: RLConfig, *, sampler: Any = None) -> Iterator[RunSession]:
        """Build the session; on exit close the sandbox and mark the results file failed/interrupted if
        the run did not finish (the file keeps every completed step).

        Everything that can be checked without touching `cfg.out` (config values, device, task source,
        the output path) is checked before an earlier run there is archived; `cfg.out` is locked for
        the whole run, so a second job on the same folder is refused instead of mixing two runs.

        Raises:
            ValueError / FileNotFoundError: invalid input, named (nothing is archived or written).
        """
        from agentrl.cli_checks import check_output_dir
        from agentrl.envs import env_names

        cfg.validate()
        if (cfg.rollout_workers or cfg.ray_graders) and cls is RunSession:
            raise ValueError("--rollout-workers / --ray-graders need agentrl.dist's sessions: run `agentrl train` (or "
                             "agentrl.dist.train.train_scaled)")
        if cfg.env not in env_names():
            raise ValueError(f"--env {cfg.env!r} is not an environment; expected one of {', '.join(env_names())}")
        out = check_output_dir(Path(cfg.out).expanduser()).resolve()  # "." and ".." refused before resolving
        resolve_device(cfg.device)
        tasks = run_task_sets(cfg)
        if cfg.steps and not tasks.train:
            raise ValueError(f"task source {cfg.tasks!r} has no training tasks; use `agentrl eval` for it")
        check_env_fits_tasks(cfg.env, tasks)
        if cfg.resume:
            from agentrl.rl.checkpoint import latest_checkpoint

            if latest_checkpoint(out / "checkpoints") is None:
                raise ValueError(f"--resume: no checkpoint in {out / 'checkpoints'} to continue from (a run saves "
                                 "them with --checkpoint-every N); leave out --resume to start a new run there")
        if cfg.agent:
            from agentrl.rl.backends import check_agent

            check_agent(cfg, tasks)
        from agentrl.rl.warm_start import check_warm_start

        check_warm_start(cfg)
        out.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive(out), _sigterm_interrupts(), _torch_cpu_threads(cfg):
            with cls._started(cfg, out, tasks, sampler) as sess:
                yield sess

    @classmethod
    def make_sandbox(cls, cfg: RLConfig) -> Any:
        """The run's sandbox: agentrl.sandbox.Sandbox() (agentrl.dist's Ray session grades in Ray actors)."""
        from agentrl.sandbox import Sandbox

        return Sandbox()

    @classmethod
    @contextlib.contextmanager
    def _started(cls, cfg: RLConfig, out: Path, tasks: TaskSets, sampler: Any) -> Iterator[RunSession]:
        from agentrl.cli_checks import archive_previous
        from agentrl.io.log import log_config, progress, setup_logging
        from agentrl.io.trackers import open_tracker

        sandbox = cls.make_sandbox(cfg)
        try:  # every input is loaded and checked before an earlier run in `out` is touched
            inputs = _load_inputs(cfg, tasks, sandbox)
        except BaseException:
            sandbox.close()
            raise
        archived = None if cfg.resume else archive_previous(out, "results.json")
        out.mkdir(parents=True, exist_ok=True)
        logger = setup_logging(out / "train.log")
        if archived:
            log.info("an earlier run in %s was moved to %s", out, archived)
        log_config(logger, cfg.to_dict())
        log.info("tasks: %d train, %d held-out (%s)", len(tasks.train), len(tasks.heldout), tasks.source)
        sess = None
        try:
            sess = cls._load(cfg, out, tasks, sandbox, inputs)
            if sampler is None:  # the registered --sampler (None for the driver's HF generate path)
                sampler = sess.build_sampler(sess.model)
                sess.registered_sampler = True
            sess.sampler = sampler
            from agentrl.rollout.driver import bind_sampler

            bind_sampler(sampler, sess.model, sess.tokenizer)
            sess.tracker = open_tracker(cfg.report_to, out, config=cfg.to_dict())
            with progress(transient=True) as bars:
                sess.progress = bars
                yield sess
        except BaseException as e:
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            if sess is not None:
                sess.results.finish(status, wall_clock_s=time.perf_counter() - sess.t_start,
                                    error=f"{type(e).__name__}: {e}")
            log.error("run %s: %s: %s (results: %s)", status, type(e).__name__, e,
                      sess.results_path if sess else "none written")
            if sess is not None:
                log.error("%s", resume_hint(cfg, out))
            raise
        finally:
            if sess is not None:
                sess.close_agents()
            if sess is not None and sess.tracker is not None:
                sess.tracker.finish()
            sandbox.close()

    @classmethod
    def _load(cls, cfg: RLConfig, out: Path, tasks: TaskSets, sandbox: Any, inputs: _Inputs) -> RunSession:
        from agentrl.chat.bundled import tokenizer_template
        from agentrl.io.results import RunResults
        from agentrl.models.lora import AdapterOffReference
        from agentrl.rl.checkpoint import latest_checkpoint, load_checkpoint, remove_partial_checkpoints
        from agentrl.rl.update import compile_decoder_layers, enable_gradient_checkpointing

        model, tok, device, schemas = inputs.model, inputs.tokenizer, inputs.device, inputs.tool_schemas
        log.info("model %s on %s in %s (--dtype %s)", cfg.model, device, inputs.dtype, cfg.dtype)
        if cfg.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        if cfg.compile_layers and cfg.steps > 0:
            log.info("compiled %d decoder layers for the update (--compile-layers)", compile_decoder_layers(model))
        model = _with_lora(cfg, model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        if not trainable and cfg.steps > 0:
            raise ValueError(f"--model {cfg.model}: no trainable parameters (a frozen model cannot be trained)")
        # an evaluation (steps 0) of a frozen model, e.g. a merged LoRA checkpoint, needs no optimizer
        opt = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay) if trainable else None
        ref = None
        if cfg.kl_coef > 0:  # LoRA: the policy with its adapters off is the reference (no second copy)
            ref = AdapterOffReference(model) if cfg.lora_r else copy.deepcopy(model).eval().requires_grad_(False)
        start = 0
        ckpt = latest_checkpoint(out / "checkpoints") if cfg.resume else None
        if cfg.resume and ckpt is None:  # checked in open(); a checkpoint folder removed since is an error too
            raise ValueError(f"--resume: no checkpoint in {out / 'checkpoints'}")
        if ckpt is not None:
            removed = remove_partial_checkpoints(out / "checkpoints")  # left by a kill mid-write
            start = int(load_checkpoint(ckpt, model, opt)["step"])
            log.info("resumed from %s at step %d%s", ckpt, start,
                     f" (removed {len(removed)} partial checkpoint(s))" if removed else "")
        kwargs = env_kwargs(cfg, sandbox)
        path = out / "results.json"
        if cfg.resume and path.exists():
            results = RunResults.resume(path, completed_steps=start, config=cfg.to_dict())
        else:
            results = RunResults(path, cfg.to_dict(), seed=cfg.seed)
        results.set("tool_schemas", schemas)
        results.set("env", env_section(cfg.env, kwargs))
        results.set("chat_template", tokenizer_template(tok, cfg.chat_template or "model").describe())
        results.set("model", {"parameters": sum(p.numel() for p in model.parameters()),
                              "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
                              "lora": bool(cfg.lora_r)})
        results.set("sandbox", sandbox.describe())
        results.set("tasks", {"source": tasks.source, "train": len(tasks.train),
                              "heldout_ids": [t.id for t in tasks.heldout],
                              "reward_includes_shown_test": cfg.reward_includes_shown_test,
                              "heldout_families": {t.id: t.family for t in tasks.heldout}})
        return cls(cfg=cfg, out=out, model=model, tokenizer=tok, optimizer=opt, sandbox=sandbox, tasks=tasks,
                   results=results, device=device, start_step=start, ref_model=ref)
