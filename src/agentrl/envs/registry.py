"""The environment registry: one `EnvSpec` per environment, declared in the environment's own module.

`make_env(name, **kwargs)`, `get_spec(name)`, `env_names()`, `register_env(spec)`, `unregister_env(name)`. The built-in
specs are collected from the modules of this package that define a module-level `ENV_SPEC`, so an
environment added to `agentrl/envs/` is found without editing this file; environments defined
elsewhere call `register_env`. Not the environments themselves, and not a plugin loader.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.envs.base import Env, ToolCall
from agentrl.preflight import did_you_mean
from agentrl.tasks.task import Task

# The end reasons only the driver can know (agentrl.rollout.driver); every environment may end so.
DRIVER_END_REASONS: tuple[str, ...] = ("out_of_tokens", "env_error")
# env-section fields (agentrl.rl.sections.EnvSection) every environment's constructor receives (see
# EnvSpec.kwargs_from_config).
COMMON_CONFIG_FIELDS: tuple[str, ...] = ("max_turns", "max_observation_chars")


def _accepts_any(task: Task) -> bool:
    return True


def _no_extra_kwargs(cfg: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class EnvSpec:
    """Everything the rest of agentrl needs to know about one environment.

    Attributes:
        name: registry name, also the environment's `name` attribute (e.g. "edit-menu").
        cls: the Env subclass; `cls(**kwargs)` builds one (every built-in takes `sandbox=`).
        expert: the scripted expert, `expert(task, rng, random_op=False) -> [[ToolCall, ...], ...]`
            (the turns a competent agent plays; check_env requires them to score 1.0).
        summary: one line for help texts ("Read/Edit/Write/Bash over an in-memory repository").
        task_sources: which task sources it runs, for error messages ("bug-fix tasks (--tasks bugfix)").
        accepts: `accepts(task) -> bool`, whether it can run `task` (checked before a run starts).
        end_reasons: every `end_reason` the environment itself can give ("final_answer", "out_of_turns",
            ...); results files zero-fill a fraction for each, plus DRIVER_END_REASONS.
        config_kwargs: `config_kwargs(cfg) -> dict`, the constructor arguments this environment takes
            from a run's env section (an agentrl.rl.sections.EnvSection, `cfg.env` of an RLConfig, or
            anything with its attributes) beyond
            COMMON_CONFIG_FIELDS, e.g. edit-menu's `max_edits`.
        random_op_expert: the expert honours `random_op=True` (plays its procedure with a random edit).
        common_fields: the env-section fields passed to every constructor (default COMMON_CONFIG_FIELDS);
            an environment whose constructor lacks one lists fewer.
        default_tasks: the task source it runs when none is chosen (`agentrl serve` without --tasks; a run
            whose --tasks is the default source when this environment cannot run that source).
    """

    name: str
    cls: type[Env]
    expert: Callable[..., list[list[ToolCall]]]
    summary: str
    task_sources: str
    end_reasons: tuple[str, ...]
    accepts: Callable[[Task], bool] = _accepts_any
    config_kwargs: Callable[[Any], dict[str, Any]] = _no_extra_kwargs
    random_op_expert: bool = False
    common_fields: tuple[str, ...] = field(default=COMMON_CONFIG_FIELDS)
    default_tasks: str = "bugfix"

    def __post_init__(self) -> None:
        if not self.name or getattr(self.cls, "name", None) != self.name:
            raise ValueError(f"EnvSpec {self.name!r}: cls.name must equal the spec name, got "
                             f"{getattr(self.cls, 'name', None)!r}")
        if not self.end_reasons:
            raise ValueError(f"EnvSpec {self.name!r}: end_reasons must list the environment's end reasons")

    def kwargs_from_config(self, cfg: Any, **extra: Any) -> dict[str, Any]:
        """Constructor arguments from a run's env section `cfg`: COMMON_CONFIG_FIELDS, then `config_kwargs(cfg)`,
        then `extra` (e.g. `sandbox=`)."""
        return {**{f: getattr(cfg, f) for f in self.common_fields}, **self.config_kwargs(cfg), **extra}

    def make(self, **kwargs: Any) -> Env:
        """A new environment: `cls(**kwargs)`."""
        return self.cls(**kwargs)

    def all_end_reasons(self) -> tuple[str, ...]:
        """The environment's end reasons followed by the driver's (the full vocabulary of its episodes)."""
        return self.end_reasons + tuple(r for r in DRIVER_END_REASONS if r not in self.end_reasons)


_EXTRA: dict[str, EnvSpec] = {}


@functools.cache
def _builtin_specs() -> dict[str, EnvSpec]:
    """Collect `ENV_SPEC` from every module of agentrl.envs (imported once, in name order)."""
    specs: dict[str, EnvSpec] = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        module = importlib.import_module(f"{__package__}.{info.name}")
        spec = getattr(module, "ENV_SPEC", None)
        if isinstance(spec, EnvSpec):
            if spec.name in specs:
                raise ValueError(f"two environment modules declare {spec.name!r}")
            specs[spec.name] = spec
    return specs


def env_specs() -> dict[str, EnvSpec]:
    """Every registered environment by name: the built-ins, then those added with register_env."""
    return {**_builtin_specs(), **_EXTRA}


class _ReadRecorder:
    """Stands in for an env section and records which of its attributes a `config_kwargs` reads."""

    def __init__(self, section: Any):
        self._section, self.read = section, set()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self._section, name)


def fields_read(spec: EnvSpec, section: Any) -> set[str]:
    """The env-section fields `spec` builds its environment from: its common fields and those its
    `config_kwargs` reads (a config_kwargs that fails reads nothing here; building the env will say why)."""
    rec = _ReadRecorder(section)
    try:
        spec.config_kwargs(rec)
    except Exception:  # noqa: BLE001, S110 - only a probe
        pass
    return set(spec.common_fields) | rec.read


def ignored_env_settings(section: Any, defaults: Any) -> list[tuple[str, list[str]]]:
    """[(field, [environments that read it])] for each environment-specific field of `section` (an env
    section: `cfg.env`) set away from its value in `defaults` (a dataclass instance of the same section)
    that the chosen environment (`section.name`) never reads, e.g. --shaped-reward (wordle's) in edit-menu.
    [] for an unknown environment name. The environments' config_kwargs are probed only when some field
    other than the chosen environment's common ones is set away from its default (a run's start-up path)."""
    specs = env_specs()
    name = getattr(section, "name", "")
    chosen = specs.get(name)
    if chosen is None:
        return []
    changed = {f.name for f in dataclasses.fields(defaults)
               if getattr(section, f.name, None) != getattr(defaults, f.name)} - set(chosen.common_fields)
    if not changed:
        return []
    reads = {n: fields_read(spec, section) for n, spec in specs.items()}
    readers: dict[str, list[str]] = {}
    for n, spec in specs.items():
        for f in reads[n] - set(spec.common_fields):
            readers.setdefault(f, []).append(n)
    return [(f, envs) for f, envs in sorted(readers.items()) if f in changed and f not in reads[name]]


def env_names() -> tuple[str, ...]:
    """The registered environment names, in registration order (built-ins sorted by name)."""
    return tuple(env_specs())


def register_env(spec: EnvSpec, *, replace: bool = False) -> EnvSpec:
    """Add an environment defined outside agentrl.envs (returns `spec`).

    Raises:
        ValueError: the name is taken and `replace` is False.
    """
    if spec.name in env_specs() and not replace:
        raise ValueError(f"environment {spec.name!r} is already registered; pass replace=True to override")
    if spec.name in _builtin_specs() and replace:
        raise ValueError(f"environment {spec.name!r} is built in; register yours under another name")
    _EXTRA[spec.name] = spec
    return spec


def unregister_env(name: str) -> None:
    """Remove an environment added with register_env (built-ins stay). Raises KeyError if it was not added."""
    del _EXTRA[name]


def get_spec(name: str) -> EnvSpec:
    """The spec registered as `name`.

    Raises:
        ValueError: unknown name (lists the known ones).
    """
    specs = env_specs()
    if name not in specs:
        raise ValueError(f"unknown environment {name!r}{did_you_mean(name, specs)}; expected one of {', '.join(specs)}")
    return specs[name]


def check_env_runs(name: str, tasks: Iterable[Task], source: str) -> None:
    """Raise ValueError, naming the first task of `tasks` (from `--tasks source`) that environment `name`'s spec
    refuses and the sources it takes; return None when it accepts them all."""
    spec = get_spec(name)
    refused = next((t for t in tasks if not spec.accepts(t)), None)
    if refused is not None:
        raise ValueError(f"--env {name} cannot run --tasks {source} (task {refused.id!r}); it takes {spec.task_sources}")


def own_task_source(name: str, source: str, sample: Task) -> str | None:
    """The task source environment `name` plays instead of `source` when it cannot run `sample` (a task of
    `source`) and has a default source of its own (Wordle's words for bug-fix tasks); None when it runs `source`
    or has no other. Raises ValueError for an unknown name."""
    spec = get_spec(name)
    if spec.default_tasks == source or spec.accepts(sample):
        return None
    return spec.default_tasks


def make_env(name: str, **kwargs: Any) -> Env:
    """A new environment by registry name; `kwargs` go to its constructor (e.g. sandbox=, max_turns=).

    Raises:
        ValueError: unknown name (lists the known ones).
    """
    return get_spec(name).make(**kwargs)


def __getattr__(attr: str) -> Any:
    if attr == "ENV_NAMES":  # kept for `from agentrl.envs import ENV_NAMES`; the names at access time
        return env_names()
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
