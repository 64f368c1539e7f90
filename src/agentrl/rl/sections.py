"""The sections of RLConfig, one frozen dataclass each: tasks, env, agent, sampling, update, warm_start,
async_rl, scale, eval, run (the policy section is agentrl.models.policy.PolicyConfig, which smoke, sft
and serve-policy share). Not RLConfig itself (agentrl.rl.config: the composition, the flat names,
presets and the checks across sections).

Each field is documented once, in its `help` metadata (agentrl.cli.flags makes it a `--flag`); a field
whose flag differs from its name says so in `flat` (`cfg.env.name` is `--env`, `cfg.agent.timeout_s` is
`--agent-timeout-s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agentrl.models.policy import FALSE_WORDS, TRUE_WORDS, flag_field
from agentrl.rl.estimators import ADV_ESTIMATORS, adv_mode_help
from agentrl.rollout.samplers import SAMPLERS, sampler_help

ADV_MODES: tuple[str, ...] = tuple(ADV_ESTIMATORS)  # the registry's names (agentrl.rl.estimators)
COMPILE_LAYERS: tuple[str, ...] = ("auto", "on", "off")  # UpdateSection.compile_layers
ACTIVATION_OFFLOADING = COMPILE_LAYERS  # UpdateSection.activation_offloading: the same choices, read alike
IS_CORRECTION: tuple[str, ...] = ("stale", "always", "off")  # AsyncSection.is_correction
AGENT_ISOLATION: tuple[str, ...] = ("auto", "bwrap", "none")  # AgentSection.isolation


def read_switch(value: Any, choices: tuple[str, ...], on: str | None, off: str) -> Any:
    """A choice field's value as given (flag, config file, Python) -> one of `choices`: true / false, their
    spellings (true/false, yes/no, 1/0, any case: TRUE_WORDS, FALSE_WORDS), YAML 1.1's reading of an unquoted
    on/off/yes/no (a bool) and a JSON file's 1 / 0 read as the field's `on` / `off` choice; a choice in another
    case is lowered. A field with no `on` choice (is_correction: stale or always?) leaves true as it is, and
    anything else is returned unchanged, for the choices check to name it."""
    if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
        return (on if value else off) or value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in choices:
            return low
        if low in FALSE_WORDS or (on and low in TRUE_WORDS):
            return off if low in FALSE_WORDS else on
    return value


def switch_arg(choices: tuple[str, ...], on: str | None, off: str, name: str) -> Any:
    """read_switch for one field, as an argparse `type=` named `name` (argparse names the type in its errors)."""

    def read(value: Any) -> Any:
        return read_switch(value, choices, on, off)

    read.__name__ = read.__qualname__ = name
    return read


# UpdateSection.compile_layers' (and activation_offloading's) reader: compile_layers was a boolean before
# 2026-12-04, so True / False and their spellings read as on / off
compile_layers_arg = switch_arg(COMPILE_LAYERS, "on", "off", "compile_layers_arg")

# Named presets: flat field values replacing the defaults (agentrl train --preset NAME; flags given on the
# command line override them). "demo" is what `agentrl train` with no flags runs: the tiny random Qwen3
# with the demo's trimmed vocabulary (demo-qwen3: a 1,644-wide softmax, docs/design.md "The demo's
# vocabulary") learns the tool-call format from scripted experts that pick the edit at random (SFT), then
# GRPO learns which edit fixes each family's bug; held-out pass@1 before (after SFT) and after GRPO, with a
# paired task-level interval. Sized for 2 CPU cores: about 200 CPU-s (results/README.md, "The main job").
# Temperature 0.7, not the write-up's 1.0: at 1.0 it learned about half as much (docs/design.md).
PRESETS: dict[str, dict[str, Any]] = {
    "demo": {
        "model": "demo-qwen3", "env": "edit-menu", "families": "minmax,compare,zero",
        "warm_start": "sft", "warm_start_tasks": 128, "warm_start_epochs": 5, "warm_start_lr": 2e-2,
        "warm_start_batch": 4, "temperature": 0.7, "sampler": "fast",
        "steps": 20, "prompts_per_step": 8, "group_size": 8, "lr": 1e-3, "max_new_tokens": 32,
        "micro": 8, "gen_batch": 32, "eval_size": 24, "eval_n": 4, "cpu_threads": 1,
    },
}
# The demo samples with the fast sampler (static KV cache; on the CPU without CUDA graphs): at seeds 0-2 on a
# 2-core Intel Xeon beside other work, 69-98 s a run against 108-161 s with HF generate, every interval above 0
# (results/README.md, "The fast sampler in the demo").
# "quick": the demo with 10 GRPO steps instead of 20, a newcomer's first run: 61-74 s each at seeds 0-2 there,
# paired +0.417, +0.229, +0.260, every interval above 0 (the figures vary by CPU).
PRESETS["quick"] = {**PRESETS["demo"], "steps": 10}


def _env_help() -> str:
    """The --env help, from the registered EnvSpecs (name and one-line summary each)."""
    from agentrl.envs import env_specs

    return "Environment: " + "; ".join(f"{n} ({s.summary})" for n, s in env_specs().items()) + "."


@dataclass(frozen=True)
class TasksSection:
    """Which tasks a run trains on (`cfg.tasks`): the source, its families, how many training tasks, and how
    they are presented. The held-out set is the eval section's (EvalSection).

    Units: train_size in tasks (0 = all of a dataset's train split).
    """

    source: str = flag_field("bugfix", "Task source: bugfix (generated bug-fix families) | mbpp | humaneval | wordle | a "
                              "path. Left at bugfix, an --env that cannot run it uses its own (wordle: wordle).", flat="tasks")
    families: str = flag_field("", "Comma-separated bug-fix families to train on (empty = all); see `agentrl tasks list`.")
    train_size: int = flag_field(256, "Training tasks: generated bug-fix instances, or a cap on a dataset's train split (0 = all).")
    randomize_names: bool = flag_field(True, "Rename the function under test to an unrelated name (no hint about the bug).")
    reward_includes_shown_test: bool = flag_field(False, "MBPP/HumanEval: also score the example test shown in the prompt "
                                                 "(the write-up's scoring; default: only the tests not shown).")


@dataclass(frozen=True)
class EnvSection:
    """The environment an episode runs in (`cfg.env`) and the episode rules it enforces: its registry name,
    turns, edits and the observation cap. agentrl.envs.EnvSpec.kwargs_from_config reads this section.

    Units: max_turns in assistant turns, max_edits in edits, max_observation_chars in characters (0 = no cap).
    """

    name: str = flag_field("coding-tools", _env_help(), flat="env")
    max_turns: int = flag_field(6, "Maximum assistant turns per episode.")
    max_edits: int = flag_field(1, "Edits allowed per episode in the edit-menu env (ignored by the other envs).")
    shaped_reward: bool = flag_field(False, "Wordle: an unsolved game scores 0.5 x its best guess's (greens + "
                                     "yellows / 2) / 5, so groups that all fail still differ (default: 1 for solving, "
                                     "else 0; pass@1 counts solved games either way; ignored by the other envs).")
    max_observation_chars: int = flag_field(4000, "Characters of one tool observation the model sees; longer ones keep "
                                          "head and tail around a '[... N characters cut ...]' mark (0 = no cap). "
                                          "Separate from the sandbox's byte cap on captured output.")


@dataclass(frozen=True)
class AgentSection:
    """A black-box agent harness run per episode instead of agentrl's own loop (`cfg.agent`; docs/blackbox.md):
    its name ('' = none) and its limits. agentrl.harness.backend reads this section.

    Units: timeout_s in wall-clock seconds per harness run, max_calls in model calls per episode.
    """

    name: str = flag_field("", "Black-box agent harness run per episode instead of agentrl's own loop: '' (none) | "
                        "opencode (npm opencode-ai, installed by scripts/setup.sh; bug-fix tasks).", flat="agent")
    timeout_s: float = flag_field(300.0, "Wall-clock limit of one harness run; a harness killed there is unscorable.", flat="agent_timeout_s")
    max_calls: int = flag_field(16, "Model calls per black-box episode, enforced by the policy server (over it: "
                                  "unscorable).", flat="agent_max_calls")
    isolation: str = flag_field("auto", "Harness sandbox: auto (bubblewrap where usable) | bwrap | none (false/off "
                                "read as none).", AGENT_ISOLATION, flat="agent_isolation", switch=(None, "none"))
    binary: str = flag_field("", "Path of the harness binary (empty: $AGENTRL_OPENCODE, .venv/opencode, PATH).", flat="agent_binary")


@dataclass(frozen=True)
class SamplingSection:
    """How episodes are sampled (`cfg.sampling`): B prompts x G episodes a step, token budgets, the sampler and
    its distribution (TRL's num_generations / max_completion_length / temperature / top_k / top_p). The
    trainer recomputes log-probs with the same temperature and masks. `sampler_config()` is the sampler's
    own view (agentrl.rollout.hf_sampler.SamplingConfig).

    Units: group_size in episodes per prompt, prompts_per_step in tasks, max_new_tokens in tokens per
    assistant turn, max_context_tokens in prompt + completion tokens per episode, gen_batch in episodes
    per generate call; top_k None = off, top_p 1.0 = off.
    """

    group_size: int = flag_field(8, "Episodes per prompt (G); advantages are computed within each group.")
    prompts_per_step: int = flag_field(8, "Distinct training tasks per step (B); a step has B*G episodes.")
    max_new_tokens: int = flag_field(256, "Maximum sampled tokens per assistant turn.")
    max_context_tokens: int = flag_field(4096, "Prompt + completion token budget per episode (then it ends out_of_tokens).")
    gen_batch: int = flag_field(16, "Episodes per generate call (bounds KV-cache memory).")
    sampler: str = flag_field("hf", sampler_help(), tuple(SAMPLERS))
    temperature: float = flag_field(1.0, "Sampling temperature; the trainer divides its logits by the same value.")
    top_k: int | None = flag_field(None, "Top-k sampling: keep the k most likely tokens. Off unless given (leave the flag "
                                 "out); when given, the trainer applies the same mask when it recomputes log-probs.")
    top_p: float = flag_field(1.0, "Top-p (nucleus) sampling; 1.0 = off. Below 1, the trainer applies the same nucleus "
                           "mask when it recomputes log-probs (sampler = trainer).")

    def sampler_config(self) -> Any:
        """The sampler's knobs (agentrl.rollout.hf_sampler.SamplingConfig: top_k 0 = off)."""
        from agentrl.rollout.hf_sampler import SamplingConfig

        return SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                              top_k=self.top_k or 0, top_p=self.top_p, gen_batch=self.gen_batch)


@dataclass(frozen=True)
class UpdateSection:
    """The policy update of each step (`cfg.update`): the advantage estimator, the clipped loss and its KL
    term, epochs / minibatches / microbatches, AdamW, and what trains (full weights or LoRA adapters).
    agentrl.rl.update and agentrl.rl.training_state read this section.

    Units: epochs in passes over a step's episodes, minibatches in optimizer steps per epoch, micro in rows
    per microbatch, micro_tokens in real tokens per microbatch (0 = off), logprob_chunk_rows in policy
    positions per LM-head chunk, lr per optimizer step, max_grad_norm a global L2 norm, lora_r a rank
    (0 = full fine-tuning).
    """

    adv_mode: str = flag_field("grpo", adv_mode_help(), ADV_MODES)
    clip_low: float = flag_field(0.2, "PPO clip below: ratio floor 1 - clip_low (for negative advantages).")
    clip_high: float = flag_field(0.2, "PPO clip above: ratio ceiling 1 + clip_high (for positive advantages).")
    kl_coef: float = flag_field(0.0, "Weight of the k3 KL penalty to a frozen reference copy of the initial model (0 = off).")
    epochs: int = flag_field(1, "Passes over each step's episodes.")
    minibatches: int = flag_field(2, "Optimizer steps per epoch; each has one token-mean normalizer over its policy tokens.")
    micro: int = flag_field(4, "Rows per microbatch (gradient accumulation unit) with --micro-tokens 0; does not change "
                               "the gradient.")
    micro_tokens: int = flag_field(16384, "Token-budget microbatches (0 = off: --micro rows each): consecutive trained "
                              "rows are grouped while their real tokens add up to at most this (a longer row runs "
                              "alone; --micro is then not used; verl's dynamic batch size, its default 16384 tokens); "
                              "does not change the gradient. Halved for the rest of the run after an out-of-memory "
                              "update. H200, Qwen3-0.6B bf16, with checkpointing: 39.0k tokens/s, 1.60x 4-row "
                              "microbatches without checkpointing in 0.79x their memory (bench/README.md).")
    lr: float = flag_field(1e-6, "AdamW learning rate.")
    weight_decay: float = flag_field(0.0, "AdamW weight decay.")
    max_grad_norm: float = flag_field(1.0, "Clip the global gradient norm to this value before each optimizer step.")
    mask_truncated: bool = flag_field(False, "Give episodes that end out of turns or out of tokens advantage 0 (TRL's "
                                     "mask_truncated_completions; they still count in their group's baseline). "
                                     "Default: they are graded on their final state like any other episode.")
    logprob_chunk_rows: int = flag_field(256, "Policy positions per LM-head chunk (bounds the [rows, vocab] logits; "
                                         "256: on the H200 the bf16 update's memory above static fell from 0.35x to "
                                         "0.23x full logits against 1024, at 0.98-1.19x its tokens/s).")
    pack_rows: bool = flag_field(True, "Run the update's trunk padding-free (rows packed, block-diagonal attention) "
                         "where the model allows it; same gradient up to float rounding.")
    compile_layers: str = flag_field(
        "auto", "torch.compile each decoder layer's forward for the update only (agentrl.rl.update."
        "compile_decoder_layers; generation, evaluation and scoring run the eager layers): auto | on | off "
        "(true/false read as on/off). auto: on when the policy is on CUDA and the run trains at least 40 steps, "
        "else off: the first update pays the compile (~25 s on an H200), which pays for itself after ~40 updates "
        "(H200, Qwen3-0.6B bf16 with the default microbatches and checkpointing: 69k tokens/s, 1.8x the eager "
        "update; bench/README.md). A bare --compile-layers is on, --no-compile-layers off.",
        COMPILE_LAYERS, compile_layers_arg, bools=("on", "off"), switch=("on", "off"))
    activation_offloading: str = flag_field(
        "auto", "Keep what the update's forward saves for backward outside the checkpointed layers (each layer's "
        "input) in pinned host memory, copied out and back on a side stream that overlaps the compute (agentrl.rl."
        "offload; the gradient is unchanged): auto | on | off (true/false read as on/off). auto: on when the policy is on CUDA and checkpoints "
        "its layers; on: on CUDA whatever the checkpointing (without it every activation crosses the host link). "
        "A bare --activation-offloading is on, --no-activation-offloading off.",
        ACTIVATION_OFFLOADING, compile_layers_arg, bools=("on", "off"), switch=("on", "off"))
    gradient_checkpointing: bool = flag_field(True, "Recompute trunk activations in backward (saves memory, costs time; "
                                             "on by default as in TRL's GRPOConfig: with --micro-tokens it lets "
                                             "microbatches be large; a model that cannot checkpoint trains "
                                             "without it, with a warning).")
    lora_r: int = flag_field(0, "LoRA rank (0 = full fine-tuning): only the adapters train; checkpoints save adapters; the "
                        "KL reference is the base with adapters off (no second copy).")
    lora_alpha: float = flag_field(16.0, "LoRA scale numerator: the adapter update is scaled by lora_alpha / lora_r.")
    lora_dropout: float = flag_field(0.0, "Dropout on the LoRA adapters' input (0 = off; the sampler runs in eval mode).")
    lora_target_modules: str = flag_field("all-linear", "Modules that get adapters: all-linear (every linear layer but the "
                                                "LM head) or comma-separated names (q_proj,v_proj).")
    lora_merge: bool = flag_field(False, "With lora_r > 0: also write <out>/merged, the adapters merged into a plain model.")

    def __post_init__(self) -> None:  # frozen: a config file's or a caller's True / "false" stored as "on" / "off"
        object.__setattr__(self, "compile_layers", compile_layers_arg(self.compile_layers))
        object.__setattr__(self, "activation_offloading", compile_layers_arg(self.activation_offloading))


@dataclass(frozen=True)
class WarmStartSection:
    """The supervised warm start before the first evaluation (`cfg.warm_start`; docs/design.md "Warm start"):
    the method ('none' or 'sft') and its SFT knobs (agentrl.sft.warm_start.sft_config makes the SFTConfig).

    Units: tasks in expert episodes, epochs in passes over them, batch in episodes per optimizer step, lr
    the AdamW peak learning rate.
    """

    method: Literal["none", "sft"] = flag_field(
        "none", "Supervised warm start before the 'before' evaluation: none | sft (fine-tune on scripted-expert "
        "episodes of --env played on training tasks, the edit picked at random from the menu: the tool-call "
        "format and the procedure, not the fix; agentrl.sft). Its settings, loss curve and NLL go to the results "
        "file's warm_start section. A resumed run does not repeat it. false/off read as none.", flat="warm_start",
        switch=(None, "none"))
    tasks: int = flag_field(200, "With --warm-start sft: expert episodes, one per training task (the first "
                                    "N). The warm_start_* defaults are `agentrl sft`'s (for a pretrained model); "
                                    "--preset demo sizes them for its random demo-qwen3.", flat="warm_start_tasks")
    epochs: int = flag_field(2, "With --warm-start sft: passes over the expert episodes.", flat="warm_start_epochs")
    lr: float = flag_field(1e-4, "With --warm-start sft: AdamW peak learning rate (linear warmup over "
                                    "3 steps, cosine decay to a tenth).", flat="warm_start_lr")
    batch: int = flag_field(16, "With --warm-start sft: episodes per optimizer step (token-mean NLL over "
                                   "their policy tokens; --micro rows per forward).", flat="warm_start_batch")


@dataclass(frozen=True)
class AsyncSection:
    """Asynchronous training (`cfg.async_rl`; `async` is a Python keyword): rollouts of step k+1 overlapping the
    update of step k, and the truncated importance-sampling correction of the stale batches
    (agentrl.rl.async_loop, agentrl.rl.offpolicy).

    Units: max_staleness in optimizer steps, is_cap a ratio (pi_proximal / pi_sampler).
    """

    enabled: bool = flag_field(False, "Collect step k+1's episodes while step k trains (a producer thread and a "
                                     "rollout copy of the policy; see --max-staleness).", flat="async_rollouts")
    max_staleness: int = flag_field(1, "With --async-rollouts: optimizer steps a batch's sampling policy may lag the weights "
                               "it trains (0 = rollouts and updates alternate: identical to the synchronous run).")
    is_correction: str = flag_field("stale", "Truncated importance-sampling correction against the sampler's log-probs: "
                                     "stale (batches sampled by older weights) | always | off (false read as off).",
                                    IS_CORRECTION, switch=(None, "off"))
    is_cap: float = flag_field(2.0, "Truncation cap of the importance ratio pi_proximal / pi_sampler (verl's default 2.0).")


@dataclass(frozen=True)
class ScaleSection:
    """How the run uses processes, actors and threads (`cfg.scale`): rollout worker processes, Ray grader
    actors, torch CPU threads (agentrl.scale). Data parallelism comes from torchrun, not from this section.

    Units: rollout_workers in processes, ray_graders in actors, cpu_threads in threads (0 = torch's default).
    """

    rollout_workers: int = flag_field(0, "With --async-rollouts: sample in N worker processes of their own (a GPU each when the "
                                 "host has N+1, else all on CPU), weights pushed over torch.distributed after each "
                                 "update (agentrl.scale.workers; 0 = in the trainer process).")
    worker_launcher: str = flag_field("process", "How --rollout-workers start: process (spawned by the trainer) | ray (Ray "
                                         "actors, a GPU each when the cluster has them; the agentrl[ray] extra).")
    ray_graders: int = flag_field(0, "Grade (hidden tests, tool runs) in N Ray actors, each with its own sandbox, on a local "
                             "Ray cluster or RAY_ADDRESS's (agentrl[ray]; 0 = a sandbox in the trainer process).")
    cpu_threads: int = flag_field(0, "Torch intra-op threads on CPU (0: torch's default, one per core). --preset demo "
                             "uses 1: its tiny matrices gain nothing from a second thread, and on a shared "
                             "machine two threads per process oversubscribe the cores (4-18x slower at load 5).")


@dataclass(frozen=True)
class EvalSection:
    """The held-out evaluation and its statistics (`cfg.eval`): which tasks, how many episodes each, how
    often, and the bootstrap of the task-level intervals (`bootstrap(seed)` is
    agentrl.eval.bootstrap.BootstrapConfig's view).

    Units: size in tasks (0 = the source's default), n in episodes per task, every in training steps
    (0 = only before and after), n_boot in resamples, alpha the interval's 1 - level.
    """

    families: str = flag_field("", "Comma-separated bug-fix families of the held-out set (empty = the --families, or "
                                "the write-up's five). Families never trained on measure transfer to unseen bugs.", flat="eval_families")
    size: int = flag_field(0, "Held-out tasks (0 = the source's default: bugfix 2 per write-up family = 10, mbpp 64, "
                           "humaneval all 164, wordle 20).", flat="eval_size")
    n: int = flag_field(4, "Held-out episodes per task before and after training (and per eval-curve point).", flat="eval_n")
    every: int = flag_field(0, "Evaluate the fixed held-out set every K steps (0 = only before and after).", flat="eval_every")
    n_boot: int = flag_field(10000, "Bootstrap resamples for task-level confidence intervals (at most 1,000,000).")
    alpha: float = flag_field(0.05, "Interval level: a (1 - alpha) percentile bootstrap interval.")

    def bootstrap(self, seed: int | None) -> Any:
        """How every interval of the run is computed (agentrl.eval.bootstrap.BootstrapConfig), seeded `seed`."""
        from agentrl.eval.bootstrap import BootstrapConfig

        return BootstrapConfig(n_boot=self.n_boot, alpha=self.alpha, seed=seed)


@dataclass(frozen=True)
class RunSection:
    """The run itself (`cfg.run`): preset, schedule, seed, output folder, checkpoints, resume, tracker.

    Units: steps in training steps, max_train_s in wall-clock seconds (0 = no budget), checkpoint_every
    in steps (0 = off), keep_checkpoints in checkpoints (0 = keep all).
    """

    preset: str = flag_field("", "Named preset whose values replace the defaults of every flag not given: '' (none) | "
                         "demo (demo-qwen3 warm-started by SFT, then GRPO in edit-menu on 2 CPU cores; "
                         "agentrl.rl.config.PRESETS) | quick (the demo with 10 GRPO steps: about a minute). "
                         "`agentrl train` with no flags (or only --seed, --out, --resume) runs --preset demo.",
                             ("", *PRESETS))
    steps: int = flag_field(3, "Training steps (each: sample B*G episodes, then update).")
    max_train_s: float = flag_field(0.0, "Wall-clock budget in seconds for the training steps (0 = none): no new step "
                            "starts once it has passed; the evaluation after, the paired difference and the "
                            "results still follow, recording the steps done (results 'stopped_early').")
    seed: int = flag_field(0, "Seed for task sampling, generation, bootstrap and everything else.")
    out: str = flag_field("runs/default", "Output directory: results.json, train.log, plots, checkpoints.")
    checkpoint_every: int = flag_field(0, "Save model, optimizer, RNG and step every N steps (0 = off).")
    keep_checkpoints: int = flag_field(2, "Checkpoints kept on disk (older ones are deleted; 0 = keep all).")
    resume: bool = flag_field(False, "Continue from the latest checkpoint in <out>/checkpoints.")
    report_to: Literal["none", "tensorboard", "trackio", "wandb"] = flag_field(
        "none", "Experiment tracker, local only: none | tensorboard (<out>/tensorboard) | trackio (local store "
        "<out>/trackio) | wandb (offline, <out>/wandb); metric names as TRL's (train/reward, eval/pass_at_1, "
        "tools/call_frequency). Needs the agentrl[trackers] extra. false/off read as none.", switch=(None, "none"))
