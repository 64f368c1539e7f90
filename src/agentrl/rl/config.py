"""RLConfig: every knob of a training run, mirrored 1:1 as CLI flags. Not the trainer loop.

Defaults follow the edit-menu-and-tools lab write-up (docs/labs.md; group size 8, 8 prompts per
step, renamed functions, at most 6 turns, adv_mode "grpo", symmetric clip 0.2, 1 epoch, 2 minibatches,
no KL, grad-norm clip 1.0, AdamW without weight decay), except that the embedded default model and
step count are small enough for `agentrl train` with no arguments to finish on a 2-core CPU.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrl.models.device import DTYPE_HELP, DTYPES, canonical_dtype, dtype_arg
from agentrl.rl.estimators import ADV_ESTIMATORS, adv_mode_help
from agentrl.rollout.samplers import SAMPLERS, sampler_help

ADV_MODES: tuple[str, ...] = tuple(ADV_ESTIMATORS)  # the registry's names (agentrl.rl.estimators)


def _env_help() -> str:
    """The --env help, from the registered EnvSpecs (name and one-line summary each)."""
    from agentrl.envs import env_specs

    return "Environment: " + "; ".join(f"{n} ({s.summary})" for n, s in env_specs().items()) + "."


def _f(default: Any, help: str, choices: tuple[str, ...] | None = None,  # noqa: A002 - HfArgumentParser's key
       type: Any = None) -> Any:  # noqa: A002 - argparse's keyword
    """A field whose metadata becomes add_argument(help=..., choices=..., type=...) (as in HfArgumentParser):
    `choices` from a registry (samplers, estimators, dtypes), `type` a converter run before the choices
    check (dtype aliases -> the canonical name)."""
    meta: dict[str, Any] = {"help": help}
    if choices is not None:
        meta["choices"] = list(choices)
    if type is not None:
        meta["type"] = type
    return field(default=default, metadata=meta)


# Named presets: RLConfig field values replacing the defaults (agentrl train --preset NAME; flags given on
# the command line override them). "demo" is what `agentrl train` with no flags runs: the tiny random
# Qwen3 with the demo's trimmed vocabulary (demo-qwen3: a 1,644-wide softmax, docs/design.md "The demo's
# vocabulary") learns the tool-call format from scripted experts that pick the edit at random (SFT), then
# GRPO learns which edit fixes each family's bug; held-out pass@1 before (after SFT) and after GRPO, with a
# paired task-level interval. Sized for 2 CPU cores: about 200 CPU-s (results/README.md, "The main job").
# Temperature 0.7, not the write-up's 1.0: at 1.0 it learned about half as much (docs/design.md).
PRESETS: dict[str, dict[str, Any]] = {
    "demo": {
        "model": "demo-qwen3", "env": "edit-menu", "families": "minmax,compare,zero",
        "warm_start": "sft", "warm_start_tasks": 128, "warm_start_epochs": 5, "warm_start_lr": 2e-2,
        "warm_start_batch": 4, "temperature": 0.7,
        "steps": 20, "prompts_per_step": 8, "group_size": 8, "lr": 1e-3, "max_new_tokens": 32,
        "micro": 8, "gen_batch": 32, "eval_size": 24, "eval_n": 4, "cpu_threads": 1,
    },
}

@dataclass
class RLConfig:
    """The full configuration of one `agentrl train` run (printed and stored in the results file).

    Each field is documented once, in its `help` metadata; agentrl.cli.flags turns the fields into
    `--flag`s one-to-one. Construction validates the values (ValueError naming the field).
    """

    # -- what to train on
    model: str = _f("tiny-qwen3", "HF causal LM: local path, HF-cache repo id, 'tiny-qwen3' (random tiny Qwen3), "
                                  "'demo-qwen3' (the same with the demo's trimmed vocabulary), or a fetched model: "
                                  "'smollm2-135m-instruct', 'qwen2.5-coder-0.5b-instruct', 'qwen2.5-coder-1.5b-instruct' "
                                  "(`agentrl assets fetch NAME`).")
    env: str = _f("coding-tools", _env_help())
    tasks: str = _f("bugfix", "Task source: bugfix (generated bug-fix families) | mbpp | humaneval | wordle | a "
                              "path. Left at bugfix, an --env that cannot run it uses its own (wordle: wordle).")
    families: str = _f("", "Comma-separated bug-fix families to train on (empty = all); see `agentrl tasks list`.")
    eval_families: str = _f("", "Comma-separated bug-fix families of the held-out set (empty = the --families, or "
                                "the write-up's five). Families never trained on measure transfer to unseen bugs.")
    train_size: int = _f(256, "Training tasks: generated bug-fix instances, or a cap on a dataset's train split (0 = all).")
    eval_size: int = _f(0, "Held-out tasks (0 = the source's default: bugfix 2 per write-up family = 10, mbpp 64, "
                           "humaneval all 164, wordle 20).")
    randomize_names: bool = _f(True, "Rename the function under test to an unrelated name (no hint about the bug).")
    max_turns: int = _f(6, "Maximum assistant turns per episode.")
    max_edits: int = _f(1, "Edits allowed per episode in the edit-menu env (ignored by the other envs).")
    max_observation_chars: int = _f(4000, "Characters of one tool observation the model sees; longer ones keep "
                                          "head and tail around a '[... N characters cut ...]' mark (0 = no cap). "
                                          "Separate from the sandbox's byte cap on captured output.")
    reward_includes_shown_test: bool = _f(False, "MBPP/HumanEval: also score the example test shown in the prompt "
                                                 "(the write-up's scoring; default: only the tests not shown).")
    # -- warm start (before the first evaluation; docs/design.md "Warm start")
    warm_start: Literal["none", "sft"] = _f(
        "none", "Supervised warm start before the 'before' evaluation: none | sft (fine-tune on scripted-expert "
        "episodes of --env played on training tasks, the edit picked at random from the menu: the tool-call "
        "format and the procedure, not the fix; agentrl.sft). Its settings, loss curve and NLL go to the results "
        "file's warm_start section. A resumed run does not repeat it.")
    warm_start_tasks: int = _f(200, "With --warm-start sft: expert episodes, one per training task (the first "
                                    "N). The warm_start_* defaults are `agentrl sft`'s (for a pretrained model); "
                                    "--preset demo sizes them for the random tiny-qwen3.")
    warm_start_epochs: int = _f(2, "With --warm-start sft: passes over the expert episodes.")
    warm_start_lr: float = _f(1e-4, "With --warm-start sft: AdamW peak learning rate (linear warmup over "
                                    "3 steps, cosine decay to a tenth).")
    warm_start_batch: int = _f(16, "With --warm-start sft: episodes per optimizer step (token-mean NLL over "
                                   "their policy tokens; --micro rows per forward).")
    # -- sampling
    group_size: int = _f(8, "Episodes per prompt (G); advantages are computed within each group.")
    prompts_per_step: int = _f(8, "Distinct training tasks per step (B); a step has B*G episodes.")
    max_new_tokens: int = _f(256, "Maximum sampled tokens per assistant turn.")
    max_context_tokens: int = _f(4096, "Prompt + completion token budget per episode (then it ends out_of_tokens).")
    gen_batch: int = _f(16, "Episodes per generate call (bounds KV-cache memory).")
    sampler: str = _f("hf", sampler_help(), tuple(SAMPLERS))
    temperature: float = _f(1.0, "Sampling temperature; the trainer divides its logits by the same value.")
    top_k: int | None = _f(None, "Top-k sampling: keep the k most likely tokens. Off unless given (leave the flag "
                                 "out); when given, the trainer applies the same mask when it recomputes log-probs.")
    top_p: float = _f(1.0, "Top-p (nucleus) sampling; 1.0 = off. Below 1, the trainer applies the same nucleus "
                           "mask when it recomputes log-probs (sampler = trainer).")
    thinking: bool = _f(False, "Thinking mode of templates that have one (Qwen3 enable_thinking): the policy writes "
                               "its own <think> block each turn, kept in the rows as sampled; --no-thinking "
                               "(default): the template's empty think block ends the prompt.")
    # -- loss and update
    adv_mode: str = _f("grpo", adv_mode_help(), ADV_MODES)
    clip_low: float = _f(0.2, "PPO clip below: ratio floor 1 - clip_low (for negative advantages).")
    clip_high: float = _f(0.2, "PPO clip above: ratio ceiling 1 + clip_high (for positive advantages).")
    kl_coef: float = _f(0.0, "Weight of the k3 KL penalty to a frozen reference copy of the initial model (0 = off).")
    epochs: int = _f(1, "Passes over each step's episodes.")
    minibatches: int = _f(2, "Optimizer steps per epoch; each has one token-mean normalizer over its policy tokens.")
    micro: int = _f(4, "Rows per microbatch (gradient accumulation unit); does not change the gradient.")
    micro_tokens: int = _f(0, "Token-budget microbatches (0 = off: --micro rows each): consecutive trained rows "
                              "are grouped while their real tokens add up to at most this (a longer row runs "
                              "alone; --micro is then not used); does not change the gradient.")
    lr: float = _f(1e-6, "AdamW learning rate.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    max_grad_norm: float = _f(1.0, "Clip the global gradient norm to this value before each optimizer step.")
    mask_truncated: bool = _f(False, "Give episodes that end out of turns or out of tokens advantage 0 (TRL's "
                                     "mask_truncated_completions; they still count in their group's baseline). "
                                     "Default: they are graded on their final state like any other episode.")
    lora_r: int = _f(0, "LoRA rank (0 = full fine-tuning): only the adapters train; checkpoints save adapters; the "
                        "KL reference is the base with adapters off (no second copy).")
    lora_alpha: float = _f(16.0, "LoRA scale numerator: the adapter update is scaled by lora_alpha / lora_r.")
    lora_dropout: float = _f(0.0, "Dropout on the LoRA adapters' input (0 = off; the sampler runs in eval mode).")
    lora_target_modules: str = _f("all-linear", "Modules that get adapters: all-linear (every linear layer but the "
                                                "LM head) or comma-separated names (q_proj,v_proj).")
    lora_merge: bool = _f(False, "With lora_r > 0: also write <out>/merged, the adapters merged into a plain model.")
    logprob_chunk_rows: int = _f(1024, "Policy positions per LM-head chunk (bounds the [rows, vocab] logits).")
    pack_rows: bool = _f(True, "Run the update's trunk padding-free (rows packed, block-diagonal attention) "
                         "where the model allows it; same gradient up to float rounding.")
    compile_layers: bool = _f(False, "torch.compile each decoder layer's forward for the update "
                              "(agentrl.rl.update.compile_decoder_layers; the first update pays the compile, ~20 s "
                              "on an H200). Needs a sampler that does not run the layers' forward (--sampler fast). "
                              "H200, Qwen3-0.6B bf16 with --micro-tokens 32768: 95-101k tokens/s, 3x the "
                              "full-logits update (bench/README.md).")
    # -- asynchronous training and black-box agents (docs/blackbox.md)
    async_rollouts: bool = _f(False, "Collect step k+1's episodes while step k trains (a producer thread and a "
                                     "rollout copy of the policy; see --max-staleness).")
    max_staleness: int = _f(1, "With --async-rollouts: optimizer steps a batch's sampling policy may lag the weights "
                               "it trains (0 = rollouts and updates alternate: identical to the synchronous run).")
    is_correction: str = _f("stale", "Truncated importance-sampling correction against the sampler's log-probs: "
                                     "stale (batches sampled by older weights) | always | off.")
    rollout_workers: int = _f(0, "With --async-rollouts: sample in N worker processes of their own (a GPU each when the "
                                 "host has N+1, else all on CPU), weights pushed over torch.distributed after each "
                                 "update (agentrl.scale.workers; 0 = in the trainer process).")
    worker_launcher: str = _f("process", "How --rollout-workers start: process (spawned by the trainer) | ray (Ray "
                                         "actors, a GPU each when the cluster has them; the agentrl[ray] extra).")
    ray_graders: int = _f(0, "Grade (hidden tests, tool runs) in N Ray actors, each with its own sandbox, on a local "
                             "Ray cluster or RAY_ADDRESS's (agentrl[ray]; 0 = a sandbox in the trainer process).")
    is_cap: float = _f(2.0, "Truncation cap of the importance ratio pi_proximal / pi_sampler (verl's default 2.0).")
    agent: str = _f("", "Black-box agent harness run per episode instead of agentrl's own loop: '' (none) | "
                        "opencode (npm opencode-ai, installed by scripts/setup.sh; bug-fix tasks).")
    agent_timeout_s: float = _f(300.0, "Wall-clock limit of one harness run; a harness killed there is unscorable.")
    agent_max_calls: int = _f(16, "Model calls per black-box episode, enforced by the policy server (over it: "
                                  "unscorable).")
    agent_isolation: str = _f("auto", "Harness sandbox: auto (bubblewrap where usable) | bwrap | none.")
    agent_binary: str = _f("", "Path of the harness binary (empty: $AGENTRL_OPENCODE, .venv/opencode, PATH).")
    # -- numerics and hardware
    dtype: str = _f("fp32", DTYPE_HELP + " Training refuses fp16 (no loss scaling); eval takes it.", DTYPES,
                    dtype_arg)
    gradient_checkpointing: bool = _f(False, "Recompute trunk activations in backward (saves memory, costs time).")
    device: str = _f("auto", "Torch device: auto (cuda if available, else cpu) | cpu | cuda | cuda:N.")
    cpu_threads: int = _f(0, "Torch intra-op threads on CPU (0: torch's default, one per core). --preset demo "
                             "uses 1: its tiny matrices gain nothing from a second thread, and on a shared "
                             "machine two threads per process oversubscribe the cores (4-18x slower at load 5).")
    tokenizer: str = _f("", "Tokenizer path if it is not beside the model (empty = the model's own).")
    chat_template: str = _f("", "Chat template replacing the model's own, for templates without tool support: a "
                                "bundled name (chatml-tools) or a .jinja path (empty = the model's own). Saved "
                                "with checkpoints, so a trained model reloads with it.")
    allow_download: bool = _f(False, "Let transformers download a missing model from the HF hub (default: local only).")
    # -- schedule, evaluation, output
    preset: str = _f("", "Named preset whose values replace the defaults of every flag not given: '' (none) | "
                         "demo (demo-qwen3 warm-started by SFT, then GRPO in edit-menu on 2 CPU cores; "
                         "agentrl.rl.config.PRESETS). `agentrl train` with no flags (or only --seed, --out, "
                         "--resume) runs --preset demo.",
                     ("", *PRESETS))
    steps: int = _f(3, "Training steps (each: sample B*G episodes, then update).")
    max_train_s: float = _f(0.0, "Wall-clock budget in seconds for the training steps (0 = none): no new step "
                            "starts once it has passed; the evaluation after, the paired difference and the "
                            "results still follow, recording the steps done (results 'stopped_early').")
    seed: int = _f(0, "Seed for task sampling, generation, bootstrap and everything else.")
    eval_n: int = _f(4, "Held-out episodes per task before and after training (and per eval-curve point).")
    eval_every: int = _f(0, "Evaluate the fixed held-out set every K steps (0 = only before and after).")
    n_boot: int = _f(10000, "Bootstrap resamples for task-level confidence intervals (at most 1,000,000).")
    alpha: float = _f(0.05, "Interval level: a (1 - alpha) percentile bootstrap interval.")
    out: str = _f("runs/default", "Output directory: results.json, train.log, plots, checkpoints.")
    checkpoint_every: int = _f(0, "Save model, optimizer, RNG and step every N steps (0 = off).")
    keep_checkpoints: int = _f(2, "Checkpoints kept on disk (older ones are deleted; 0 = keep all).")
    resume: bool = _f(False, "Continue from the latest checkpoint in <out>/checkpoints.")
    report_to: Literal["none", "tensorboard", "trackio", "wandb"] = _f(
        "none", "Experiment tracker, local only: none | tensorboard (<out>/tensorboard) | trackio (local store "
        "<out>/trackio) | wandb (offline, <out>/wandb); metric names as TRL's (train/reward, eval/pass_at_1, "
        "tools/call_frequency). Needs the agentrl[trackers] extra.")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field and what was expected."""
        self._validate_types()
        positive = ("max_turns", "group_size", "prompts_per_step", "max_new_tokens", "gen_batch", "epochs",
                    "minibatches", "micro", "logprob_chunk_rows", "eval_n", "n_boot", "max_context_tokens",
                    "warm_start_tasks", "warm_start_epochs", "warm_start_batch")
        for name in positive:
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"RLConfig.{name}: expected an integer >= 1, got {getattr(self, name)!r}")
        for name in ("steps", "eval_every", "checkpoint_every", "max_edits", "train_size", "eval_size",
                     "keep_checkpoints", "max_observation_chars", "lora_r", "micro_tokens", "cpu_threads"):
            if getattr(self, name) < 0:
                raise ValueError(f"RLConfig.{name}: expected an integer >= 0, got {getattr(self, name)!r}")
        self._validate_names()
        for name in ("clip_low", "clip_high"):
            if not 0.0 < getattr(self, name) < (1.0 if name == "clip_low" else float("inf")):
                raise ValueError(f"RLConfig.{name}: expected 0 < {name}" + (" < 1" if name == "clip_low" else "")
                                 + f", got {getattr(self, name)!r}")
        self._validate_floats()
        self._validate_async()
        if self.report_to not in ("none", "tensorboard", "trackio", "wandb"):
            raise ValueError("RLConfig.report_to: expected one of 'none', 'tensorboard', 'trackio', 'wandb', "
                             f"got {self.report_to!r}")
        for name, choices in (("warm_start", ("none", "sft")), ("preset", ("", *PRESETS))):
            if getattr(self, name) not in choices:
                raise ValueError(f"RLConfig.{name}: expected one of {', '.join(map(repr, choices))}, "
                                 f"got {getattr(self, name)!r}")
        rows = self.prompts_per_step * self.group_size
        if self.minibatches > rows:
            raise ValueError(f"RLConfig.minibatches: {self.minibatches} minibatches need at least as many "
                             f"episodes per step, got prompts_per_step*group_size = {rows}")

    def _validate_names(self) -> None:
        """adv_mode and sampler are registered names; dtype is canonicalised (aliases accepted)."""
        if self.adv_mode not in ADV_ESTIMATORS:
            raise ValueError(f"RLConfig.adv_mode: expected one of {ADV_MODES}, got {self.adv_mode!r}")
        need = ADV_ESTIMATORS[self.adv_mode].min_group_size
        if self.group_size < need:
            raise ValueError(f"RLConfig.group_size: adv_mode {self.adv_mode!r} needs group_size >= {need}, "
                             f"got {self.group_size}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"RLConfig.sampler: expected one of {tuple(SAMPLERS)}, got {self.sampler!r}")
        self.dtype = canonical_dtype(self.dtype, flag="RLConfig.dtype")
        if self.dtype == "fp16" and self.steps > 0:
            raise ValueError("RLConfig.dtype: fp16 training needs loss scaling, which agentrl does not do; use "
                             "bf16 or fp32 (agentrl eval takes fp16)")

    def _validate_types(self) -> None:
        """Each field has its default's type: bool for flags, an int (not bool/float) for counts, a finite
        int/float for real numbers (no NaN/inf), str for names; top_k an int or None."""
        for f in dataclasses.fields(self):
            v, d = getattr(self, f.name), f.default
            if f.name == "top_k":
                ok, expected = v is None or type(v) is int, "an integer or None"
            elif isinstance(d, bool):
                ok, expected = isinstance(v, bool), "true or false"
            elif isinstance(d, int):
                ok, expected = type(v) is int, "an integer"
            elif isinstance(d, float):
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                expected = "a finite number"
            elif isinstance(d, str):
                ok, expected = isinstance(v, str), "a string"
            else:
                continue
            if not ok:
                raise ValueError(f"RLConfig.{f.name}: expected {expected}, got {v!r}")

    def _validate_async(self) -> None:
        choices = {"is_correction": ("stale", "always", "off"), "agent_isolation": ("auto", "bwrap", "none")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"RLConfig.{name}: expected one of {allowed}, got {getattr(self, name)!r}")
        if self.max_staleness < 0:
            raise ValueError(f"RLConfig.max_staleness: expected an integer >= 0, got {self.max_staleness!r}")
        if self.worker_launcher not in ("process", "ray"):
            raise ValueError(f"RLConfig.worker_launcher: expected 'process' or 'ray', got {self.worker_launcher!r}")
        if self.ray_graders < 0:
            raise ValueError(f"RLConfig.ray_graders: expected an integer >= 0, got {self.ray_graders!r}")
        if self.rollout_workers < 0 or (self.rollout_workers and not self.async_rollouts):
            raise ValueError(f"RLConfig.rollout_workers: expected 0, or >= 1 with async_rollouts (the workers are the "
                             f"asynchronous producer's; --max-staleness 0 keeps it on-policy), got {self.rollout_workers!r}")
        for name in ("is_cap", "agent_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"RLConfig.{name}: expected > 0, got {getattr(self, name)!r}")
        if self.agent_max_calls < 1:
            raise ValueError(f"RLConfig.agent_max_calls: expected an integer >= 1, got {self.agent_max_calls!r}")

    def _validate_floats(self) -> None:
        checks = {
            "temperature": (self.temperature > 0, "> 0"),
            "top_p": (0.0 < self.top_p <= 1.0, "in (0, 1]"),
            "top_k": (self.top_k is None or self.top_k >= 1, "None or >= 1"),
            "kl_coef": (self.kl_coef >= 0, ">= 0"),
            "max_train_s": (self.max_train_s >= 0, ">= 0 (0 = no budget)"),
            "lr": (self.lr > 0, "> 0"),
            "warm_start_lr": (self.warm_start_lr > 0, "> 0"),
            "weight_decay": (self.weight_decay >= 0, ">= 0"),
            "max_grad_norm": (self.max_grad_norm > 0, "> 0"),
            "alpha": (0.0 < self.alpha < 1.0, "in (0, 1)"),
            "lora_alpha": (self.lora_alpha > 0, "> 0"),
            "lora_dropout": (0.0 <= self.lora_dropout < 1.0, "in [0, 1)"),
            # the fast sampler reads the base weights directly and would sample without the adapters
            "compile_layers": (not (self.compile_layers and SAMPLERS[self.sampler].runs_layer_forward),
                               f"False with --sampler {self.sampler} (it runs the layers' own forward, which would "
                               f"then run compiled on its own shapes; use --sampler "
                               f"{' or '.join(n for n, x in SAMPLERS.items() if not x.runs_layer_forward)})"),
            "lora_r": (not (self.lora_r and not SAMPLERS[self.sampler].supports_lora),
                       f"0 with --sampler {self.sampler} (it reads the base weights, not the adapters; LoRA needs "
                       f"--sampler {' or '.join(n for n, x in SAMPLERS.items() if x.supports_lora)})"),
            # the resample matrix is n_boot x tasks: beyond this it costs memory, not precision
            "n_boot": (self.n_boot <= 1_000_000, "at most 1,000,000 resamples"),
        }
        for name, (ok, expected) in checks.items():
            if not ok:
                raise ValueError(f"RLConfig.{name}: expected {expected}, got {getattr(self, name)!r}")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> RLConfig:
        """The config of preset `name` (PRESETS) with `overrides` on top; `preset` records the name.

        Raises:
            ValueError: unknown preset (lists the known ones), or an invalid override.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; expected one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], "preset": name, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """All fields as a JSON-ready dict (for the results file and the console)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RLConfig:
        """Rebuild from `to_dict()` output; unknown keys raise ValueError naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"RLConfig: unknown keys {unknown}; expected a subset of {sorted(known)}")
        return cls(**values)


# fields `agentrl eval` does not take: they only shape the optimization (eval keeps their defaults)
TRAIN_ONLY: tuple[str, ...] = (
    "train_size", "group_size", "prompts_per_step", "adv_mode", "clip_low", "clip_high", "kl_coef", "epochs",
    "minibatches", "micro", "micro_tokens", "lr", "weight_decay", "max_grad_norm", "mask_truncated", "logprob_chunk_rows",
    "gradient_checkpointing", "steps", "max_train_s", "eval_every", "checkpoint_every", "keep_checkpoints", "resume",
    "rollout_workers", "worker_launcher", "ray_graders",  # agentrl.scale's training sessions
    "warm_start", "warm_start_tasks", "warm_start_epochs", "warm_start_lr", "warm_start_batch", "preset",
    "pack_rows", "compile_layers",  # the update's trunk (agentrl.rl.packing, rl.update.compile_decoder_layers)
    "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_merge",  # a LoRA folder loads as it is
    "async_rollouts", "max_staleness", "is_correction", "is_cap",  # rollouts overlapping updates
)


def cli_command(cfg: RLConfig, *, command: str = "train", resume: bool | None = None) -> str:
    """The `agentrl` command line that reproduces `cfg`: every field that differs from its default, as a flag
    (shell-quoted), e.g. for the "to resume" hint of an interrupted run.

    Args:
        resume: override cfg.resume (True appends `--resume`).
    """
    import shlex

    values = cfg.to_dict()
    if resume is not None:
        values["resume"] = resume
    default = RLConfig().to_dict()
    parts = ["agentrl", command]
    for f in dataclasses.fields(RLConfig):
        v = values[f.name]
        if v == default[f.name]:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(v, bool):
            parts.append(flag if v else f"--no-{f.name.replace('_', '-')}")
        else:
            parts += [flag, shlex.quote(str(v))]
    return " ".join(parts)
