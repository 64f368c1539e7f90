"""An SFT run (`agentrl sft`): supervised warm start on expert trajectories (or a JSONL file), saved for
`agentrl train --model`. Not the RL trainer and not the command (agentrl.cli.sft). Writes into --out: the model and tokenizer (save_pretrained), `sft_summary.json`
(config, loss curve, token counts, NLL before/after, wall clock) and `sft.log`.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentrl.models.policy import PolicyConfig
from agentrl.sft.config import SFTConfig

log = logging.getLogger("agentrl.sft")


@dataclass(frozen=True)
class SFTRunConfig:
    """`agentrl sft` options besides the SFTConfig knobs (one CLI flag each).

    Attributes:
        policy: the model and how it loads (agentrl.models.policy.PolicyConfig, the same section as `agentrl
            train`'s): model / tokenizer (a preset such as "tiny-qwen3", a fetched model such as
            "smollm2-135m-instruct", a folder, or an HF id in the cache); chat_template (a bundled name such
            as "chatml-tools" or a path; saved with the output); device ("auto" or a torch device); dtype
            (fp32 | bf16 | auto or an alias: bf16 = autocast with fp32 master weights; fp16 is refused: no
            loss scaling); thinking (template thinking mode, Qwen3 enable_thinking, as `agentrl train
            --thinking` samples: each expert turn is the template's own rendering of it as a thinking turn).
        env: environment whose scripted expert plays the episodes (agentrl.envs.ENV_NAMES).
        tasks: task source the expert plays: "bugfix" (generated bug-fix tasks) or any other `agentrl train
            --tasks` source with a training split (e.g. "wordle"; agentrl.tasks.task_sets).
        n_tasks / families / split: tasks to play (bug-fix: agentrl.tasks.make_tasks, names randomized;
            another source: the first n_tasks of its shuffled training split).
        random_op: the expert follows the procedure but picks the edit op at random from the menu.
        max_turns: environment turn limit (None: its default).
        from_jsonl: train on this JSONL (token-level or chat-messages records) instead of expert episodes.
        save_jsonl: also write the training trajectories here.
        out: output folder; gradient_checkpointing: activation checkpointing.
        lora_r / lora_alpha / lora_dropout / lora_target_modules: LoRA adapters (r > 0; agentrl.models.lora):
            only they train and --out holds them (it loads as --model); lora_merge: also <out>/merged.
        agent: "" (agentrl's own environment loop) or "opencode": the expert plays bug-fix tasks through the
            real opencode harness (agentrl.harness.expert), so the rows are opencode's own token stream;
            agent_isolation / agent_binary / agent_timeout_s: as `agentrl train --agent-*`.
    """

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    env: str = "edit-menu"
    tasks: str = "bugfix"
    n_tasks: int = 200
    families: str | None = None
    split: str = "train"
    random_op: bool = False
    max_turns: int | None = None
    from_jsonl: str | None = None
    save_jsonl: str | None = None
    out: str = "runs/sft"
    gradient_checkpointing: bool = False
    lora_r: int = 0
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: str = "all-linear"
    lora_merge: bool = False
    agent: str = ""
    agent_isolation: str = "auto"
    agent_binary: str = ""
    agent_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        """Raises ValueError: with LoRA on (lora_r > 0), a lora_alpha or lora_dropout that agentrl.models.lora
        refuses, naming the flag, before any expert plays or --out is made (`--lora-alpha inf` was refused after
        both, leaving an empty --out)."""
        if self.lora_r and not 0 < self.lora_alpha < math.inf:
            raise ValueError(f"--lora-alpha {self.lora_alpha}: expected a finite number > 0")
        if self.lora_r and not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"--lora-dropout {self.lora_dropout}: expected a number in [0, 1)")


def run_summary(run: SFTRunConfig) -> dict[str, Any]:
    """`run` as one flat JSON-ready mapping (its policy section's fields beside the others, as the flags are):
    sft_summary.json's "run"."""
    own = {k: v for k, v in asdict(run).items() if k != "policy"}
    return {**asdict(run.policy), **own}


def _expert_source(run: SFTRunConfig) -> SFTRunConfig:
    """`run` with the task source its expert will play: --tasks left at bugfix for an --env that cannot run
    bug-fix tasks (wordle) becomes that environment's own source, as in `agentrl train`.

    Raises:
        ValueError: unknown --env.
    """
    from dataclasses import replace

    from agentrl.envs.registry import own_task_source
    from agentrl.tasks import make_tasks

    if run.from_jsonl or run.agent or run.tasks != "bugfix":
        return run
    own = own_task_source(run.env, run.tasks, make_tasks(1)[0])
    if own is None:
        return run
    log.warning("--env %s cannot run --tasks bugfix: its expert plays its own task source, --tasks %s", run.env, own)
    return replace(run, tasks=own)


def _trajectories(run: SFTRunConfig, cfg: SFTConfig, tok: Any, model: Any = None) -> list:
    from agentrl.sft.data import expert_trajectories, load_trajectories

    if run.from_jsonl:
        vocab = model.get_input_embeddings().num_embeddings if model is not None else None
        return load_trajectories(run.from_jsonl, tok, enable_thinking=run.policy.thinking, vocab_size=vocab)
    from agentrl.sandbox import Sandbox
    from agentrl.tasks import make_tasks, randomize_names

    if run.tasks != "bugfix":
        from agentrl.tasks.sets import task_sets

        sets = task_sets(run.tasks, train_size=run.n_tasks, families=run.families or "", seed=cfg.seed)
        tasks = list(sets.train if run.split == "train" else sets.heldout)[: run.n_tasks]
        if not tasks:
            raise ValueError(f"--tasks {run.tasks!r} has no {run.split} tasks for the expert to play")
    else:
        families = [f.strip() for f in run.families.split(",") if f.strip()] if run.families else None
        rng = random.Random(cfg.seed)
        tasks = [randomize_names(t, rng) for t in make_tasks(run.n_tasks, families, seed=cfg.seed, split=run.split)]
    if run.agent:
        return _agent_trajectories(run, cfg, tasks, tok, model)
    from agentrl.envs.registry import check_env_runs

    check_env_runs(run.env, tasks, run.tasks)  # before an expert meets a task it has no play for
    return expert_trajectories(run.env, tasks, tok, random_op=run.random_op, seed=cfg.seed, sandbox=Sandbox(),
                               max_turns=run.max_turns, enable_thinking=run.policy.thinking)


def _agent_trajectories(run: SFTRunConfig, cfg: SFTConfig, tasks: list, tok: Any, model: Any) -> list:
    """The expert through the black-box harness `run.agent` (agentrl.harness.expert); one row each."""
    import os

    from agentrl.harness.episode import AgentConfig
    from agentrl.harness.expert import agent_expert_trajectories
    from agentrl.serve.policy.server import RolloutBudget

    if run.agent != "opencode":
        raise ValueError(f"--agent {run.agent!r}: the only black-box harness is opencode")
    if run.tasks != "bugfix":
        raise ValueError("--agent opencode plays bug-fix repositories (--tasks bugfix)")
    from agentrl.harness import MIN_CONTEXT_TOKENS

    if cfg.max_tokens < MIN_CONTEXT_TOKENS:
        raise ValueError(f"--agent opencode needs --max-tokens >= {MIN_CONTEXT_TOKENS} (opencode's own system prompt "
                         f"and tool schemas are about 4,500 tokens), got {cfg.max_tokens}")
    acfg = AgentConfig(timeout_s=run.agent_timeout_s, isolation=run.agent_isolation, binary=run.agent_binary or None,
                       budget=RolloutBudget(max_calls=8, max_completion_tokens=8192, max_wall_s=run.agent_timeout_s),
                       context_tokens=cfg.max_tokens, workers=max(1, min(32, os.cpu_count() or 1)))
    model.eval()
    return agent_expert_trajectories(tasks, model, tok, random_op=run.random_op, seed=cfg.seed, cfg=acfg,
                                     max_context_tokens=cfg.max_tokens)


def _fit_or_keep(model: Any, tok: Any, trajs: list, cfg: SFTConfig, run: SFTRunConfig, out: Path,
                 base_summary: dict[str, Any], steps: int, t0: float) -> tuple[float, Any]:
    """The NLL before and the SFT steps: (nll_before, sft's metrics). Interrupted (Ctrl-C, SIGTERM: a scheduler's
    stop, `timeout`), it saves the model as trained so far (once a step finished) and a summary with status
    "interrupted", then re-raises."""
    from agentrl.report.results import atomic_write_json, to_json_ready
    from agentrl.rl.run_folder import sigterm_interrupts
    from agentrl.sft.trainer import policy_nll, save_policy, sft

    done: list[int] = []

    def on_step(r: dict[str, Any]) -> None:
        done.append(r["step"])
        log.info("step %d epoch %d loss %.4f grad_norm %.3f lr %.2e", r["step"], r["epoch"], r["loss"],
                 r["grad_norm"], r["lr"])

    nll_before = None
    try:
        with sigterm_interrupts():
            nll_before = policy_nll(model, trajs, tok.pad_token_id, micro=cfg.micro, autocast_bf16=cfg.autocast_bf16)
            return nll_before, sft(model, trajs, cfg, pad_id=tok.pad_token_id, on_step=on_step)
    except KeyboardInterrupt as e:
        if done:
            save_policy(model, tok, out, merged=run.lora_merge)
        summary = {**base_summary, "status": "interrupted", "interrupted_by": str(e) or "KeyboardInterrupt",
                   "steps_done": len(done), "steps_planned": steps, "nll_before": nll_before,
                   "total_wall_clock_s": time.perf_counter() - t0}
        atomic_write_json(out / "sft_summary.json", to_json_ready(summary))
        log.error("interrupted after %d of %d optimizer steps: %s", len(done), steps,
                  f"the model as trained so far is in {out}" if done else "no step had finished, no model saved")
        raise


def run_sft(run: SFTRunConfig, cfg: SFTConfig) -> dict[str, Any]:
    """Build or load the trajectories, fine-tune, save model + tokenizer + summary into `run.out`.

    Interrupted (Ctrl-C, SIGTERM) during training, it saves the model as trained so far (when a step finished) and
    a summary with status "interrupted", steps_done and steps_planned, then re-raises.

    Returns:
        The summary written to `<out>/sft_summary.json` (status "completed").

    Raises:
        FileNotFoundError / ValueError: bad model path, JSONL file, environment, or SFT settings.
    """
    from agentrl.chat.bundled import tokenizer_template
    from agentrl.models.device import resolve_device
    from agentrl.preflight import archive_previous, prepare_output_dir
    from agentrl.report.log import setup_logging
    from agentrl.report.results import atomic_write_json, to_json_ready, versions
    from agentrl.rl.update import enable_gradient_checkpointing
    from agentrl.sft.data import save_trajectories
    from agentrl.sft.trainer import planned_steps, policy_nll, save_policy, trainable

    if run.save_jsonl:  # before the model loads and the expert plays, not after
        from agentrl.preflight import check_output_file

        check_output_file(run.save_jsonl, "--save-jsonl")
    if run.from_jsonl:  # the file's every check that needs no model, before the model loads
        from agentrl.sft.data import check_trajectory_file

        check_trajectory_file(run.from_jsonl)
    if not run.from_jsonl and run.n_tasks < 1:
        raise ValueError(f"--n-tasks must be >= 1 (expert episodes to train on), got {run.n_tasks}")
    run = _expert_source(run)
    if Path(run.policy.model).is_dir() and Path(run.out).resolve() == Path(run.policy.model).resolve():
        raise ValueError(f"--out {run.out!r} is the --model folder; pass another --out so the input model is kept")
    t0 = time.perf_counter()
    device = resolve_device(run.policy.device)  # a bad --device is refused before an earlier output is moved
    # Every input (model, tokenizer, its template, the data) is loaded and checked before an earlier
    # output in --out is moved aside. fp32 master weights always; bf16 means autocast (SFTConfig.autocast_bf16).
    model, tok = run.policy.load(device, dtype="fp32", seed=cfg.seed)
    trajs = _trajectories(run, cfg, tok, model)
    if not trajs:
        raise ValueError(f"no trajectories to train on (from {run.from_jsonl or 'expert episodes'!r})")
    kept = len(trainable(trajs, cfg.max_tokens))
    if not kept:
        shortest = min(len(t.prompt_ids) + len(t.completion_ids) for t in trajs)  # sft() refused it after --out moved
        raise ValueError(f"--max-tokens {cfg.max_tokens}: none of the {len(trajs)} trajectories (from "
                         f"{run.from_jsonl or 'expert episodes'}) with policy tokens fits; the shortest has {shortest} "
                         "tokens")
    data_s = time.perf_counter() - t0
    archived = archive_previous(run.out, "sft_summary.json")  # never overwrite an earlier SFT model
    out = prepare_output_dir(run.out, "--out")
    setup_logging(out / "sft.log")
    if archived:
        logging.getLogger("agentrl.sft").info("an earlier SFT output in %s was moved to %s", out, archived)
    if run.save_jsonl:
        save_trajectories(trajs, run.save_jsonl)
    rewards = [t.reward for t in trajs if t.reward is not None]
    log.info("%d trajectories in %.1f s (mean reward %.3f over %d scorable, %d policy tokens)", len(trajs), data_s,
             sum(rewards) / max(len(rewards), 1), len(rewards), sum(t.num_policy_tokens for t in trajs))
    if run.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if run.lora_r:
        from agentrl.models.lora import apply_lora

        base = Path(run.policy.model).expanduser()
        model = apply_lora(model, r=run.lora_r, alpha=run.lora_alpha, dropout=run.lora_dropout,
                           target_modules=run.lora_target_modules, seed=cfg.seed,
                           base=str(base.resolve()) if base.exists() else run.policy.model)
    pad = tok.pad_token_id
    steps = planned_steps(kept, cfg)  # sft()'s count: only the trajectories that fit are batched
    # a 135M model on 2 CPU cores spends minutes here before the first step's line: say what is running
    log.info("policy NLL before training (a forward pass over the %d trajectories), then %d optimizer steps",
             len(trajs), steps)
    base_summary = {
        "run": run_summary(run), "sft": asdict(cfg), "device": device, "versions": versions(),
        "chat_template": tokenizer_template(tok, run.policy.chat_template or "model").describe(),
        "data": {"trajectories": len(trajs), "mean_reward": sum(rewards) / len(rewards),
                 "data_wall_clock_s": data_s},
    }
    nll_before, metrics = _fit_or_keep(model, tok, trajs, cfg, run, out, base_summary, steps, t0)
    save_policy(model, tok, out, merged=run.lora_merge)  # before the after-pass: an interrupt there loses nothing
    nll_after = policy_nll(model, trajs, pad, micro=cfg.micro, autocast_bf16=cfg.autocast_bf16)
    log.info("policy NLL %.4f -> %.4f nats/token", nll_before, nll_after)
    summary = {**base_summary, "status": "completed", "nll_before": nll_before, "nll_after": nll_after,
               **metrics.to_dict(), "total_wall_clock_s": time.perf_counter() - t0}
    atomic_write_json(out / "sft_summary.json", to_json_ready(summary))
    log.info("saved model, tokenizer and sft_summary.json to %s (%.1f s)", out, summary["total_wall_clock_s"])
    return summary
