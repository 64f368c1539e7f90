"""Run setup: what a run is checked and loaded from before its output folder is touched. Not the run folder
(agentrl.rl.run_folder), the training state (agentrl.rl.training_state) or the loop.

`plan_run(cfg)` checks the config, environment, output path, device, tasks, resume checkpoint, agent
backend and warm start (-> RunPlan); `load_inputs` loads the policy and tokenizer and checks the chat
template against the environment's tools and the context budget against the first prompt (-> RunInputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.chat.template import render_prompt
from agentrl.chat.tito import TitoMismatch, assert_tito_consistent
from agentrl.envs import env_names, get_spec, make_env
from agentrl.envs.registry import check_env_runs, own_task_source
from agentrl.models.device import resolve_device, resolve_dtype
from agentrl.models.load import fit_context_tokens
from agentrl.preflight import check_output_dir, did_you_mean
from agentrl.rl.agent_backends import check_agent
from agentrl.rl.checkpoint import check_checkpoint_root, checkpoint_step, latest_checkpoint
from agentrl.rl.config import PRESETS, RLConfig
from agentrl.rl.sections import SamplingSection, TasksSection
from agentrl.rl.warm_start import check_warm_start
from agentrl.tasks.sets import TaskSets, task_sets


def env_kwargs(cfg: RLConfig, sandbox: Any) -> dict[str, Any]:
    """Constructor arguments of environment `cfg.env.name`, as its EnvSpec maps the env section (plus the shared
    sandbox)."""
    return get_spec(cfg.env.name).kwargs_from_config(cfg.env, sandbox=sandbox)


def check_env_fits_tasks(env: str, tasks: TaskSets) -> None:
    """ValueError naming the first task `env` cannot run (its EnvSpec says) and the sources it takes: every task,
    train and held out, so that a task file mixing tasks is refused before the model loads, not at that task's
    reset mid-run."""
    check_env_runs(env, [*tasks.train, *tasks.heldout], tasks.source)


def env_section(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The results file's "env" section: the environment, its constructor arguments (the sandbox and
    word lists summarised), its rules and its end-reason vocabulary."""
    spec = get_spec(name)
    shown = {k: (f"<{len(v)} words>" if k == "words" and v is not None else v) for k, v in kwargs.items()
             if k != "sandbox"}
    return {"name": name, "class": f"{spec.cls.__module__}.{spec.cls.__qualname__}", "kwargs": shown,
            "max_observation_chars": kwargs.get("max_observation_chars"), "end_reasons": list(spec.all_end_reasons())}


def run_task_sets(cfg: RLConfig) -> TaskSets:
    """The run's training and held-out tasks, as cfg selects them (deterministic in cfg.run.seed)."""
    return task_sets(cfg.tasks.source, train_size=cfg.tasks.train_size, eval_size=cfg.eval.size, families=cfg.tasks.families,
                     eval_families=cfg.eval.families, randomize=cfg.tasks.randomize_names, seed=cfg.run.seed,
                     reward_includes_shown_test=cfg.tasks.reward_includes_shown_test)


def check_families_apply(cfg: RLConfig, source: str, why: str = "") -> None:
    """ValueError when --families or --eval-families is set but the run's task source `source` is not bugfix,
    naming where the value came from when a --preset set it (the presets are bug-fix runs in edit-menu, so
    `--preset demo --env wordle` or `--preset quick --tasks mbpp` inherit families the user never typed).
    `why`: how the run came to `source` (e.g. an --env that runs its own tasks)."""
    if source == "bugfix":
        return
    for flag, key, value in (("--families", "families", cfg.tasks.families),
                             ("--eval-families", "eval_families", cfg.eval.families)):
        if not value.strip():
            continue
        preset = PRESETS.get(cfg.run.preset, {})
        origin = (f" (set by --preset {cfg.run.preset}, a bug-fix run in --env {preset.get('env', 'edit-menu')})"
                  if preset.get(key) == value else "")
        raise ValueError(f"{flag} {value!r}{origin} applies to --tasks bugfix only, but this run's tasks are "
                         f"{source!r}{why}; pass {flag} ''" + (" or leave out --preset" if origin else ""))


@dataclass(frozen=True)
class RunInputs:
    """The run's inputs once loaded and checked (before anything in --out is touched): the policy and its
    tokenizer on `device`, the environment's tool schemas, and the concrete dtype loaded (--dtype auto resolved)."""

    model: Any
    tokenizer: Any
    device: str
    tool_schemas: list
    dtype: str = "fp32"  # the concrete dtype loaded (--dtype auto resolved)
    cfg: RLConfig | None = None  # the config to run: max_context_tokens fitted to the model (fit_context_tokens)


def check_context_fits(cfg: RLConfig, prompt_tokens: int) -> None:
    """Refuse a --max-context-tokens that the first held-out prompt already fills: every episode would
    end out_of_tokens before its first turn and the run would train on nothing (a black-box harness
    writes its own prompt, so --agent runs are not checked here)."""
    if not cfg.agent.name and prompt_tokens + 1 > cfg.sampling.max_context_tokens:
        raise ValueError(f"--max-context-tokens {cfg.sampling.max_context_tokens} leaves no room to sample: the first "
                         f"held-out prompt is already {prompt_tokens} tokens; pass at least "
                         f"{prompt_tokens + cfg.sampling.max_new_tokens} (prompt + --max-new-tokens)")


def load_inputs(cfg: RLConfig, tasks: TaskSets, sandbox: Any) -> RunInputs:
    """Load the policy and tokenizer and check the chat template against the environment's tools.

    Raises:
        FileNotFoundError / ValueError: a missing or broken model, a bad tokenizer path, a template that
            fails the token-in/token-out check (agentrl.chat.tito.TitoMismatch is re-raised as ValueError).
    """
    device = resolve_device(cfg.policy.device)
    dtype = resolve_dtype(cfg.policy.dtype, cfg.policy.model, allow_download=cfg.policy.allow_download)  # "auto": the checkpoint's
    if dtype == "fp16" and cfg.run.steps:
        raise ValueError(f"--dtype {cfg.policy.dtype}: model {cfg.policy.model!r} is stored in fp16; fp16 training needs loss "
                         "scaling, which agentrl does not do; pass --dtype bf16 or fp32")
    torch.manual_seed(cfg.run.seed)
    try:
        model, tok = cfg.policy.load(device, dtype=dtype, seed=cfg.run.seed)
    except (FileNotFoundError, ValueError):
        raise
    except Exception as e:  # noqa: BLE001 - a broken model folder (corrupt weights, bad config) is bad input
        raise ValueError(f"--model {cfg.policy.model!r} could not be loaded: {type(e).__name__}: {e}") from e
    env = make_env(cfg.env.name, **env_kwargs(cfg, sandbox))
    try:
        obs = env.reset(tasks.heldout[0], seed=cfg.run.seed)
        if obs.tools:
            assert_tito_consistent(tok, obs, enable_thinking=cfg.policy.thinking)
        fitted = fit_context_tokens(model, cfg.sampling.max_context_tokens, SamplingSection.max_context_tokens,
                                    "--max-context-tokens", cfg.policy.model)
        if fitted != cfg.sampling.max_context_tokens:
            cfg = cfg.replace_flat(max_context_tokens=fitted)
        check_context_fits(cfg, len(render_prompt(tok, obs, enable_thinking=cfg.policy.thinking)))
        schemas = env.tools()
    except TitoMismatch as e:
        raise ValueError(f"the chat template of {cfg.policy.tokenizer or cfg.policy.model!r} fails the token-in/token-out "
                         f"check: {e}") from e
    finally:
        env.close()
    return RunInputs(model, tok, device, schemas, dtype, cfg)


@dataclass(frozen=True)
class RunPlan:
    """What `plan_run` checked before anything is loaded or written: the config, the resolved output
    folder and the run's task sets."""

    cfg: RLConfig
    out: Path
    tasks: TaskSets
    notes: tuple[str, ...] = ()  # choices made for the user, logged once the run's log is open


def plan_run(cfg: RLConfig, *, scaled: bool = False) -> RunPlan:
    """Check everything that can be checked without loading a model or touching `cfg.run.out`: config values,
    environment, output path, device, task source, the checkpoint a --resume needs, the agent backend and
    the warm start. `scaled`: an agentrl.scale strategy runs the session (--rollout-workers / --ray-graders
    need one).

    Raises:
        ValueError / FileNotFoundError: invalid input, named (nothing is archived or written).
    """
    cfg.validate()
    if (cfg.scale.rollout_workers or cfg.scale.ray_graders) and not scaled:
        raise ValueError("--rollout-workers / --ray-graders need agentrl.scale's sessions: run `agentrl train` (or "
                         "agentrl.scale.train.train_scaled)")
    if cfg.env.name not in env_names():
        raise ValueError(f"--env {cfg.env.name!r} is not an environment{did_you_mean(cfg.env.name, env_names())}; "
                         f"expected one of {', '.join(env_names())}")
    out = check_output_dir(Path(cfg.run.out).expanduser()).resolve()  # "." and ".." refused before resolving
    resolve_device(cfg.policy.device)
    check_families_apply(cfg, cfg.tasks.source)
    tasks, notes = run_task_sets(cfg), []
    own = own_task_source(cfg.env.name, cfg.tasks.source, (tasks.train or tasks.heldout)[0]) \
        if cfg.tasks.source == TasksSection().source else None
    if own is not None:
        check_families_apply(cfg, own, why=f" (--env {cfg.env.name} cannot run bug-fix tasks and uses its own)")
        notes.append(f"--env {cfg.env.name} cannot run --tasks {cfg.tasks.source}: using its own task source, --tasks "
                     f"{own}")
        cfg = cfg.replace_flat(tasks=own)
        tasks = run_task_sets(cfg)
    if cfg.run.steps and not tasks.train:
        raise ValueError(f"task source {cfg.tasks.source!r} has no training tasks; use `agentrl eval` for it")
    check_env_fits_tasks(cfg.env.name, tasks)
    if cfg.run.resume or (cfg.run.checkpoint_every and not (out / "results.json").exists()):  # a folder that stays
        check_checkpoint_root(out / "checkpoints")
    if cfg.run.resume and latest_checkpoint(out / "checkpoints") is None:
        raise ValueError(f"--resume: no checkpoint in {out / 'checkpoints'} to continue from (a run saves "
                         "them with --checkpoint-every N); leave out --resume to start a new run there")
    if cfg.run.resume and (done := checkpoint_step(latest_checkpoint(out / "checkpoints"))) > cfg.run.steps:
        # it ran no step, recorded the checkpoint's steps under `steps: N` and evaluated a model of more steps
        raise ValueError(f"--resume: the latest checkpoint in {out / 'checkpoints'} has {done} completed steps, "
                         f"more than --steps {cfg.run.steps}; pass --steps {done} or more to continue this run")
    if cfg.run.resume and (out / "results.json").exists() and not (out / "results.json").is_file():
        raise ValueError(f"--resume: {out / 'results.json'} is a directory or special file, not the run's results "
                         "file; restore the file, or leave out --resume to start a new run there")
    if cfg.run.resume and not (out / "results.json").is_file():
        raise ValueError(f"--resume: {out / 'results.json'} is missing; it holds the run's 'before' evaluation and "
                         "config, without which the checkpoint's trained model would be warm-started again and "
                         "evaluated as 'before'; restore it, or leave out --resume to start a new run there")
    if cfg.agent.name:
        check_agent(cfg, tasks)
    check_warm_start(cfg)
    return RunPlan(cfg, out, tasks, tuple(notes))
