"""EnvSpec and the registry: each environment declares its spec in its own module; the rest asks the spec.
The "Adding an environment" example in docs/envs.md is extracted and checked, so the doc cannot rot."""

import re
from pathlib import Path

import pytest

from agentrl.envs import (
    DRIVER_END_REASONS,
    EnvSpec,
    check_env,
    env_names,
    env_specs,
    expert_turns,
    get_spec,
    make_env,
    register_env,
    unregister_env,
)
from agentrl.rl.config import RLConfig
from agentrl.rl.run_setup import check_env_fits_tasks, env_kwargs
from agentrl.rl.sections import EnvSection
from agentrl.tasks.sets import TaskSets
from agentrl.tasks.words import wordle_task

DOC = Path(__file__).resolve().parents[2] / "docs" / "envs.md"


def doc_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Adding an environment"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_each_builtin_spec_is_declared_in_its_own_module():
    for name, spec in env_specs().items():
        module = __import__(spec.cls.__module__, fromlist=["ENV_SPEC"])
        assert module.ENV_SPEC is spec and spec.cls.name == name
        assert spec.expert.__module__ == spec.cls.__module__  # its expert lives beside it
        assert spec.all_end_reasons()[-2:] == DRIVER_END_REASONS and "out_of_turns" in spec.end_reasons


def test_the_session_asks_the_spec():
    cfg = RLConfig.from_flat(env="edit-menu", max_edits=2, max_observation_chars=123)
    kw = env_kwargs(cfg, sandbox="box")
    assert kw == {"max_turns": 6, "max_observation_chars": 123, "max_edits": 2, "sandbox": "box"}
    env = make_env("edit-menu", **{**kw, "sandbox": None})
    assert env.max_edits == 2 and env.max_observation_chars == 123
    wordle = TaskSets(train=[wordle_task("crane")], heldout=[wordle_task("slate")], source="wordle")
    check_env_fits_tasks("wordle", wordle)
    with pytest.raises(ValueError, match="it takes bug-fix tasks with an edit menu"):
        check_env_fits_tasks("edit-menu", wordle)
    help_text = EnvSection.__dataclass_fields__["name"].metadata["help"]
    assert all(f"{n} ({get_spec(n).summary})" in help_text for n in env_names())


def test_unknown_names_and_duplicates_are_refused():
    with pytest.raises(ValueError, match="expected one of"):
        make_env("chess")
    spec = get_spec("wordle")
    with pytest.raises(ValueError, match="already registered"):
        register_env(spec)
    with pytest.raises(ValueError, match="built in"):
        register_env(spec, replace=True)
    with pytest.raises(ValueError, match="cls.name must equal"):
        EnvSpec(name="other", cls=spec.cls, expert=spec.expert, summary="", task_sources="", end_reasons=("x",))


def test_doc_example_env_registers_and_passes_check_env(tmp_path):
    namespace: dict = {"__name__": "doc_example"}
    try:
        exec(compile(doc_example(), str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
        assert 50 <= len(doc_example().splitlines()) <= 75  # "a ~60-line example"
        assert "reverse-word" in env_names()
        env = make_env("reverse-word")
        summary = check_env(env, namespace["reverse_task"]("stressed"))
        assert summary == {"reward": 1.0, "turns": 2, "end_reason": "submitted"}
        assert expert_turns("reverse-word", namespace["reverse_task"]("abc"))[1][0].arguments == {"text": "cba"}
        cfg = RLConfig.from_flat(max_observation_chars=50)
        assert get_spec("reverse-word").kwargs_from_config(cfg.env) == {"max_turns": 6, "max_observation_chars": 50}
    finally:
        if "reverse-word" in env_names():
            unregister_env("reverse-word")
    assert "reverse-word" not in env_names()


def test_every_task_is_checked_against_the_env_not_only_the_first():
    """A task file whose first task the env runs but a later one it cannot: refused before the model loads, naming
    that task (only the first was checked: the run loaded the model, evaluated, and failed at the bad task's reset).
    The edit-menu env also needs the source file among the task's files, as its reset does."""
    import dataclasses

    from agentrl.tasks import make_tasks

    train, heldout = make_tasks(3), make_tasks(3, split="heldout")
    check_env_fits_tasks("edit-menu", TaskSets(train=train, heldout=heldout, source="t.jsonl"))
    no_menu = dataclasses.replace(heldout[2], edit_ops=())
    with pytest.raises(ValueError, match=rf"cannot run --tasks t\.jsonl \(task '{no_menu.id}'\)"):
        check_env_fits_tasks("edit-menu", TaskSets(train=train, heldout=[*heldout[:2], no_menu], source="t.jsonl"))
    no_source = dataclasses.replace(train[1], files={})
    for env in ("edit-menu", "coding-tools"):
        with pytest.raises(ValueError, match=rf"cannot run --tasks t\.jsonl \(task '{no_source.id}'\)"):
            check_env_fits_tasks(env, TaskSets(train=[train[0], no_source], heldout=heldout, source="t.jsonl"))
