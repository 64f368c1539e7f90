"""RLConfig: every knob of a training run, as sections (cfg.policy, cfg.sampling, cfg.update, ...) whose fields
are mirrored 1:1 as flat CLI flags. Not the trainer loop, and not the sections' fields (agentrl.rl.sections,
agentrl.models.policy).

Defaults follow the edit-menu-and-tools lab write-up (docs/labs.md; group size 8, 8 prompts per
step, renamed functions, at most 6 turns, adv_mode "grpo", symmetric clip 0.2, 1 epoch, 2 minibatches,
no KL, grad-norm clip 1.0, AdamW without weight decay), except that the embedded default model and
step count are small enough for `agentrl train` with no arguments to finish on a 2-core CPU.

Every field also has a flat name: its flag (`--max-new-tokens` is cfg.sampling.max_new_tokens) and its key
in results files, run records and `--config` files (`to_flat`, `from_flat`, `from_dict`). FLAT maps each
flat name to its (section, field), derived from the dataclasses.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NamedTuple

from agentrl.models.device import canonical_dtype
from agentrl.models.policy import PolicyConfig
from agentrl.preflight import check_seed, lone_surrogate_path
from agentrl.rl.estimators import ADV_ESTIMATORS
from agentrl.rl.sections import (
    ADV_MODES,
    COMPILE_LAYERS,
    PRESETS,
    AgentSection,
    AsyncSection,
    EnvSection,
    EvalSection,
    RunSection,
    SamplingSection,
    ScaleSection,
    TasksSection,
    UpdateSection,
    WarmStartSection,
    read_switch,
)
from agentrl.rollout.samplers import SAMPLERS

# Every episode of a training step (tokens, log-probs, transcript) is held until the update, and every episode of
# an evaluation's task until its end. Far past the largest GRPO steps in use (verl's 1,024 prompts x 16 = 16,384),
# a size like `--group-size 1e11` is a typo that would allocate until the machine runs out of memory.
MAX_EPISODES_PER_CALL = 1 << 20
# torch's intra-op threads (cfg.scale.cpu_threads): above any machine's cores; `--cpu-threads 1e9` made libgomp abort
# the process inside torch.set_num_threads (no Python error, results.json left "running").
MAX_CPU_THREADS = 1024

__all__ = ["ADV_MODES", "FLAT", "MAX_CPU_THREADS", "MAX_EPISODES_PER_CALL", "PRESETS", "RLConfig", "TRAIN_ONLY", "cli_command",
           "flat_fields"]


@dataclass(frozen=True)
class RLConfig:
    """The full configuration of one `agentrl train` run: one frozen section per stage that reads it.

    Sections: policy (the model: agentrl.models.policy.PolicyConfig), tasks, env, agent, sampling, update,
    warm_start, async_rl, scale, eval, run (agentrl.rl.sections documents each, with units). Each field is
    documented once, in its `help` metadata; agentrl.cli.flags turns the fields into flat `--flag`s
    one-to-one. Construction validates the values (ValueError naming the field's flat name, e.g.
    "RLConfig.lr"). Build one from flat names with `from_flat(lr=1e-5, group_size=4)`; change one with
    `replace_flat(steps=0)`.
    """

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    tasks: TasksSection = field(default_factory=TasksSection)
    env: EnvSection = field(default_factory=EnvSection)
    agent: AgentSection = field(default_factory=AgentSection)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    update: UpdateSection = field(default_factory=UpdateSection)
    warm_start: WarmStartSection = field(default_factory=WarmStartSection)
    async_rl: AsyncSection = field(default_factory=AsyncSection)
    scale: ScaleSection = field(default_factory=ScaleSection)
    eval: EvalSection = field(default_factory=EvalSection)
    run: RunSection = field(default_factory=RunSection)

    def __post_init__(self) -> None:
        self._read_switches()
        self.validate()

    def _read_switches(self) -> None:
        """True / false where a field takes words: a choice field with `switch` metadata (compile_layers,
        is_correction, report_to, ...) gets its on / off choice (read_switch: YAML 1.1 reads an unquoted
        `activation_offloading: on` or `report_to: off` as a bool, a JSON file writes 1 / 0), and a boolean field
        given the integer 1 or 0 gets True or False, as `--flag 1` / `--flag 0` do on the command line. Frozen:
        each changed section is replaced once. Other values are left for validate() to name."""
        changed: dict[str, dict[str, Any]] = {}
        for _, section, f, kind in flat_fields():
            value = getattr(getattr(self, section), f.name)
            new = value
            if "switch" in f.metadata:
                new = read_switch(value, _choices(f, kind), *f.metadata["switch"])
            elif isinstance(f.default, bool) and type(value) is int and value in (0, 1):
                new = bool(value)
            if type(new) is not type(value) or new != value:
                changed.setdefault(section, {})[f.name] = new
        for section, values in changed.items():
            object.__setattr__(self, section, dataclasses.replace(getattr(self, section), **values))

    def validate(self) -> None:
        """Raise ValueError naming the first invalid field and what was expected."""
        v = SimpleNamespace(**self.to_flat())
        self._validate_types(v)
        positive = ("max_turns", "group_size", "prompts_per_step", "max_new_tokens", "gen_batch", "epochs",
                    "minibatches", "micro", "logprob_chunk_rows", "eval_n", "n_boot", "max_context_tokens",
                    "warm_start_tasks", "warm_start_epochs", "warm_start_batch")
        for name in positive:
            if not isinstance(getattr(v, name), int) or getattr(v, name) < 1:
                raise ValueError(f"RLConfig.{name}: expected an integer >= 1, got {getattr(v, name)!r}")
        for name in ("steps", "eval_every", "checkpoint_every", "max_edits", "train_size", "eval_size",
                     "keep_checkpoints", "max_observation_chars", "lora_r", "micro_tokens", "cpu_threads"):
            if getattr(v, name) < 0:
                raise ValueError(f"RLConfig.{name}: expected an integer >= 0, got {getattr(v, name)!r}")
        if v.cpu_threads > MAX_CPU_THREADS:
            raise ValueError(f"RLConfig.cpu_threads: expected an integer in [0, {MAX_CPU_THREADS}] (torch intra-op "
                             f"threads; 0: torch's default), got {v.cpu_threads!r}")
        self._validate_names(v)
        check_seed(v.seed, "RLConfig.seed")
        for name in ("clip_low", "clip_high"):
            if not 0.0 < getattr(v, name) < (1.0 if name == "clip_low" else float("inf")):
                raise ValueError(f"RLConfig.{name}: expected 0 < {name}" + (" < 1" if name == "clip_low" else "")
                                 + f", got {getattr(v, name)!r}")
        _validate_floats(v)
        _validate_async(v)
        if v.report_to not in ("none", "tensorboard", "trackio", "wandb"):
            raise ValueError("RLConfig.report_to: expected one of 'none', 'tensorboard', 'trackio', 'wandb', "
                             f"got {v.report_to!r}")
        for name, choices in (("warm_start", ("none", "sft")), ("preset", ("", *PRESETS)),
                              ("compile_layers", COMPILE_LAYERS), ("activation_offloading", COMPILE_LAYERS)):
            if getattr(v, name) not in choices:
                raise ValueError(f"RLConfig.{name}: expected one of {', '.join(map(repr, choices))}, "
                                 f"got {getattr(v, name)!r}")
        _validate_episode_counts(v)

    def _validate_names(self, v: SimpleNamespace) -> None:
        """model, tasks, out, env and device are non-empty; adv_mode and sampler are registered names; dtype is
        canonicalised (aliases accepted)."""
        for name in ("model", "tasks", "out", "env", "device"):  # "" resolved to "." (the current folder) or worse
            if not isinstance(getattr(v, name), str) or not getattr(v, name).strip():
                raise ValueError(f"RLConfig.{name}: expected a non-empty string, got {getattr(v, name)!r}")
        if v.adv_mode not in ADV_ESTIMATORS:
            raise ValueError(f"RLConfig.adv_mode: expected one of {ADV_MODES}, got {v.adv_mode!r}")
        need = ADV_ESTIMATORS[v.adv_mode].min_group_size
        if v.group_size < need:
            raise ValueError(f"RLConfig.group_size: adv_mode {v.adv_mode!r} needs group_size >= {need}, "
                             f"got {v.group_size}")
        if v.sampler not in SAMPLERS:
            raise ValueError(f"RLConfig.sampler: expected one of {tuple(SAMPLERS)}, got {v.sampler!r}")
        v.dtype = canonical_dtype(v.dtype, flag="RLConfig.dtype")
        if v.dtype != self.policy.dtype:  # the canonical name (an alias given): frozen, so set once here
            object.__setattr__(self, "policy", dataclasses.replace(self.policy, dtype=v.dtype))
        if v.dtype == "fp16" and v.steps > 0:
            raise ValueError("RLConfig.dtype: fp16 training needs loss scaling, which agentrl does not do; use "
                             "bf16 or fp32 (agentrl eval takes fp16)")

    @staticmethod
    def _validate_types(flat: SimpleNamespace) -> None:
        """Each field has its default's type: bool for flags, an int (not bool/float) for counts, a finite
        int/float for real numbers (no NaN/inf), str for names; top_k an int or None."""
        for name, _, f, kind in flat_fields():
            v, d = getattr(flat, name), f.default
            if name == "top_k":
                ok, expected = v is None or type(v) is int, "an integer or None"
            elif isinstance(d, bool):
                ok, expected = isinstance(v, bool), "true or false"
            elif isinstance(d, int):
                ok, expected = type(v) is int, "an integer"
            elif isinstance(d, float):
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                expected = "a finite number"
            elif isinstance(d, str) and (choices := _choices(f, kind)) and not isinstance(v, str):
                ok, expected = False, "one of " + ", ".join(map(repr, choices)) + (
                    " (an unquoted YAML on/off/yes/no reads as true/false)" if isinstance(v, bool) else "")
            elif isinstance(d, str):  # UTF-8 text: results.json and the log are UTF-8 (argv bytes or a YAML
                # "\udcff" escape gave a lone surrogate: `--out` made its folder, then the run failed to write)
                ok, expected = isinstance(v, str) and lone_surrogate_path(v) is None, "a string of UTF-8 text"
            else:
                continue
            if not ok:
                raise ValueError(f"RLConfig.{name}: expected {expected}, got {repr(v)[:200].encode('utf-8', 'backslashreplace').decode('utf-8')}")

    @classmethod
    def from_flat(cls, values: dict[str, Any] | None = None, /, **flat: Any) -> RLConfig:
        """The config whose fields have the flat values `values` and `flat` (flag names with underscores:
        `RLConfig.from_flat(lr=1e-5, env="edit-menu")`); the others keep their defaults.

        Raises:
            ValueError: an unknown name (listed), or an invalid value.
        """
        items = {**(values or {}), **flat}
        if unknown := sorted(set(items) - set(FLAT)):
            raise ValueError(f"RLConfig: unknown keys {unknown}; expected a subset of {sorted(FLAT)}")
        by_section: dict[str, dict[str, Any]] = {}
        for name, value in items.items():
            section, attr = FLAT[name]
            by_section.setdefault(section, {})[attr] = value
        return cls(**{s: SECTIONS[s](**kw) for s, kw in by_section.items()})

    def replace_flat(self, **flat: Any) -> RLConfig:
        """A copy with the fields named by their flat names changed (`cfg.replace_flat(steps=0)`), validated."""
        return RLConfig.from_flat(self.to_flat(), **flat)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> RLConfig:
        """The config of preset `name` (PRESETS) with the flat `overrides` on top; `run.preset` records the name.

        Raises:
            ValueError: unknown preset (lists the known ones), or an invalid override.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; expected one of {', '.join(PRESETS)}")
        return cls.from_flat({**PRESETS[name], "preset": name, **overrides})

    def to_flat(self) -> dict[str, Any]:
        """Every field by its flat name, in flag order (the results file's `config`, run records, --print-config)."""
        return {name: getattr(getattr(self, section), attr) for name, (section, attr) in FLAT.items()}

    def to_dict(self) -> dict[str, Any]:
        """The section tree as a JSON-ready dict ({"policy": {"model": ...}, "sampling": {...}, ...})."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RLConfig:
        """Rebuild from `to_flat()` (a results file's or an old checkpoint's flat `config`) or `to_dict()`
        output, or a mix: a key naming a section whose value is a mapping holds that section's fields.

        Raises:
            ValueError: unknown keys (named), or an invalid value.
        """
        flat: dict[str, Any] = {}
        names = {(s, a): n for n, (s, a) in FLAT.items()}
        for key, value in values.items():
            if key in SECTIONS and isinstance(value, dict):
                if unknown := sorted(k for k in value if (key, k) not in names):
                    raise ValueError(f"RLConfig: unknown keys {unknown} in section {key!r}")
                flat.update({names[key, k]: v for k, v in value.items()})
            else:
                flat[key] = value
        return cls.from_flat(flat)


# the sections by attribute name, in RLConfig's order
SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(RLConfig)}  # type: ignore[misc]


class FlatField(NamedTuple):
    """One field under its flat name: `name` (the flag without dashes), `section` (RLConfig's attribute), `field`
    (the section's dataclasses.Field: default and help metadata), `kind` (its resolved type)."""

    name: str
    section: str
    field: dataclasses.Field
    kind: Any


def _walk() -> tuple[FlatField, ...]:
    out = []
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out.append(FlatField(f.metadata.get("flat", f.name), section, f, hints[f.name]))
    if len({f.name for f in out}) != len(out):
        raise AssertionError("RLConfig: two fields share a flat name")
    return tuple(out)


_FLAT_FIELDS = _walk()
# flat name -> (section, field): the one mapping between the flags / results keys and the section tree
FLAT: dict[str, tuple[str, str]] = {f.name: (f.section, f.field.name) for f in _FLAT_FIELDS}


def flat_fields() -> tuple[FlatField, ...]:
    """Every RLConfig field under its flat name, section by section (the flags' and the results file's order)."""
    return _FLAT_FIELDS


def _choices(f: dataclasses.Field, kind: Any) -> tuple[Any, ...]:
    """The values field `f` (of type `kind`) takes: its `choices` metadata or its Literal's; () when free."""
    if "choices" in f.metadata:
        return tuple(f.metadata["choices"])
    return typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else ()


def _validate_episode_counts(v: SimpleNamespace) -> None:
    """Episodes per step and per evaluated task: at most MAX_EPISODES_PER_CALL, and at least one a minibatch."""
    rows = v.prompts_per_step * v.group_size
    for name, n in (("prompts_per_step*group_size", rows), ("eval_n", v.eval_n)):
        if n > MAX_EPISODES_PER_CALL:
            raise ValueError(f"RLConfig.{name}: expected at most {MAX_EPISODES_PER_CALL:,} episodes at once "
                             f"(each is held until the update or the evaluation's end), got {n:,}")
    if v.minibatches > rows:
        raise ValueError(f"RLConfig.minibatches: {v.minibatches} minibatches need at least as many "
                         f"episodes per step, got prompts_per_step*group_size = {rows}")


def _validate_async(v: SimpleNamespace) -> None:
    """The asynchronous, scale and agent sections' values (flat names in `v`)."""
    choices = {"is_correction": ("stale", "always", "off"), "agent_isolation": ("auto", "bwrap", "none")}
    for name, allowed in choices.items():
        if getattr(v, name) not in allowed:
            raise ValueError(f"RLConfig.{name}: expected one of {allowed}, got {getattr(v, name)!r}")
    if v.max_staleness < 0:
        raise ValueError(f"RLConfig.max_staleness: expected an integer >= 0, got {v.max_staleness!r}")
    if v.worker_launcher not in ("process", "ray"):
        raise ValueError(f"RLConfig.worker_launcher: expected 'process' or 'ray', got {v.worker_launcher!r}")
    if v.ray_graders < 0:
        raise ValueError(f"RLConfig.ray_graders: expected an integer >= 0, got {v.ray_graders!r}")
    if v.rollout_workers < 0 or (v.rollout_workers and not v.async_rollouts):
        raise ValueError(f"RLConfig.rollout_workers: expected 0, or >= 1 with async_rollouts (the workers are the "
                         f"asynchronous producer's; --max-staleness 0 keeps it on-policy), got {v.rollout_workers!r}")
    for name in ("is_cap", "agent_timeout_s"):
        if not getattr(v, name) > 0:
            raise ValueError(f"RLConfig.{name}: expected > 0, got {getattr(v, name)!r}")
    if v.agent_max_calls < 1:
        raise ValueError(f"RLConfig.agent_max_calls: expected an integer >= 1, got {v.agent_max_calls!r}")


def _validate_floats(v: SimpleNamespace) -> None:
    """The real-valued fields' ranges, and the sampler's compatibility with LoRA."""
    checks = {
        "temperature": (v.temperature > 0, "> 0"),
        "top_p": (0.0 < v.top_p <= 1.0, "in (0, 1]"),
        "top_k": (v.top_k is None or v.top_k >= 1, "None or >= 1"),
        "kl_coef": (v.kl_coef >= 0, ">= 0"),
        "max_train_s": (v.max_train_s >= 0, ">= 0 (0 = no budget)"),
        "lr": (v.lr > 0, "> 0"),
        "warm_start_lr": (v.warm_start_lr > 0, "> 0"),
        "weight_decay": (v.weight_decay >= 0, ">= 0"),
        "max_grad_norm": (v.max_grad_norm > 0, "> 0"),
        "alpha": (0.0 < v.alpha < 1.0, "in (0, 1)"),
        "lora_alpha": (v.lora_alpha > 0, "> 0"),
        "lora_dropout": (0.0 <= v.lora_dropout < 1.0, "in [0, 1)"),
        # the fast sampler reads the base weights directly and would sample without the adapters
        "lora_r": (not (v.lora_r and not SAMPLERS[v.sampler].supports_lora),
                   f"0 with --sampler {v.sampler} (it reads the base weights, not the adapters; LoRA needs "
                   f"--sampler {' or '.join(n for n, x in SAMPLERS.items() if x.supports_lora)}"
                   + (f"; --preset {v.preset} sets --sampler {v.sampler}, so add --sampler hf"
                      if PRESETS.get(v.preset, {}).get("sampler") == v.sampler else "") + ")"),
        # the resample matrix is n_boot x tasks: beyond this it costs memory, not precision
        "n_boot": (v.n_boot <= 1_000_000, "at most 1,000,000 resamples"),
    }
    for name, (ok, expected) in checks.items():
        if not ok:
            raise ValueError(f"RLConfig.{name}: expected {expected}, got {getattr(v, name)!r}")


# fields (flat names) `agentrl eval` does not take: they only shape the optimization (eval keeps their defaults)
TRAIN_ONLY: tuple[str, ...] = (
    "train_size", "group_size", "prompts_per_step", "adv_mode", "clip_low", "clip_high", "kl_coef", "epochs",
    "minibatches", "micro", "micro_tokens", "lr", "weight_decay", "max_grad_norm", "mask_truncated", "logprob_chunk_rows",
    "gradient_checkpointing", "steps", "max_train_s", "eval_every", "checkpoint_every", "keep_checkpoints", "resume",
    "rollout_workers", "worker_launcher", "ray_graders",  # agentrl.scale's training sessions
    "warm_start", "warm_start_tasks", "warm_start_epochs", "warm_start_lr", "warm_start_batch", "preset",
    "pack_rows", "compile_layers", "activation_offloading",  # the update's trunk (agentrl.rl.packing, rl.update.compile_decoder_layers)
    "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_merge",  # a LoRA folder loads as it is
    "async_rollouts", "max_staleness", "is_correction", "is_cap",  # rollouts overlapping updates
)
if unknown_train_only := sorted(set(TRAIN_ONLY) - set(FLAT)):
    raise AssertionError(f"TRAIN_ONLY names no RLConfig field: {unknown_train_only}")


def cli_command(cfg: RLConfig, *, command: str = "train", resume: bool | None = None) -> str:
    """The `agentrl` command line that reproduces `cfg`: every field that differs from its default, as a flag
    (shell-quoted), e.g. for the "to resume" hint of an interrupted run. A preset's run starts with `--preset
    NAME` and names only what differs from the preset (the quick preset's resume hint spelled out all 15 of its
    values beside `--preset quick`).

    Args:
        resume: override cfg.resume (True appends `--resume`).
    """
    import shlex

    values = cfg.to_flat()
    if resume is not None:
        values["resume"] = resume
    preset = values["preset"]
    default = RLConfig.from_preset(preset).to_flat() if preset in PRESETS else RLConfig().to_flat()
    parts = ["agentrl", command] + (["--preset", shlex.quote(preset)] if preset in PRESETS else [])
    for name, v in values.items():
        if v == default[name]:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(v, bool):
            parts.append(flag if v else f"--no-{name.replace('_', '-')}")
        else:
            parts += [flag, shlex.quote(str(v))]
    return " ".join(parts)
