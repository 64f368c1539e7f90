"""agentrl.integrations.trl without a trainer: the environment_factory classes against TRL 1.16's contract
(zero-arg class, reset(**row), public methods = tools with get_json_schema schemas equal to ours,
get_reward, episode-over answers) and the task datasets."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from agentrl.envs.registry import make_env  # noqa: E402
from agentrl.integrations.trl import (  # noqa: E402
    AgentrlTRLEnv,
    EpisodeOver,
    ToolCallFailed,
    env_stats,
    make_trl_env_class,
    task_dataset,
    trl_env_class,
    trl_tool_schemas,
)


@pytest.mark.parametrize("env", ["python-session", "coding-tools", "wordle", "edit-menu"])
def test_tool_schemas_trl_builds_equal_ours(env):
    cls = make_trl_env_class(env)
    assert trl_tool_schemas(cls) == make_env(env).tools()
    public = {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}
    assert public == {"reset", "get_reward"} | {t["function"]["name"] for t in make_env(env).tools()}


def _wordle_rows(n=2):
    from agentrl.tasks.words import wordle_tasks

    tasks = wordle_tasks(split="heldout")[:n]
    return tasks, task_dataset(tasks, "wordle")


def test_dataset_rows_are_conversational_and_carry_the_task():
    tasks, ds = _wordle_rows()
    row = ds[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and "Wordle" in row["prompt"][0]["content"]
    assert row["task_id"] == tasks[0].id and json.loads(row["task"])["meta"]["secret"] == tasks[0].meta["secret"]
    from agentrl.integrations.trl import _decode_task
    from agentrl.tasks.mbpp import load_mbpp

    assert _decode_task(row["task"]) == tasks[0]
    mbpp = load_mbpp(split="train")[:1]
    from agentrl.tasks.jsonl import task_to_dict

    decoded = _decode_task(task_dataset(mbpp, "python-session")[0]["task"])  # meta tuples come back as lists
    assert json.dumps(task_to_dict(decoded)) == json.dumps(task_to_dict(mbpp[0]))
    with pytest.raises(ValueError, match="not a task"):
        _decode_task('{"id": "x"}')


def test_episode_over_after_the_end_and_failed_calls_raise():
    tasks, ds = _wordle_rows()
    env = make_trl_env_class("wordle")()
    assert env.reset(**ds[0]) is None  # the row's prompt already holds the task
    with pytest.raises(ToolCallFailed, match="not a five-letter word"):
        env.guess(word="xx")
    out = env.guess(word=tasks[0].meta["secret"])
    assert "Solved!" in out and "The episode is over (solved)" in out
    with pytest.raises(EpisodeOver, match="episode is over"):
        env.guess(word="crane")
    assert env.get_reward() == 1.0
    env.reset(**ds[1])  # a reset starts over
    assert env.get_reward() == 0.0 and env._env.end_reason == "rollout_ended"  # ended from outside, graded


def test_reset_without_prompt_returns_the_user_message():
    tasks, ds = _wordle_rows(1)
    env = make_trl_env_class("wordle")()
    assert env.reset(task=ds[0]["task"], task_id=ds[0]["task_id"]) == "Guess the secret word."
    with pytest.raises(ValueError, match="no 'task' column"):
        env.reset(prompt=ds[0]["prompt"], task_id=ds[0]["task_id"])


def test_env_stats_logs_statistics_and_takes_the_final_reply():
    from agentrl.tasks import make_tasks

    tasks = make_tasks(2, families=["minmax"], seed=0, split="train")
    ds = task_dataset(tasks, "coding-tools")
    cls = make_trl_env_class("coding-tools")
    envs = [cls(), cls()]
    for e, row, task in zip(envs, ds, tasks, strict=True):
        e.reset(**row)
        e.Read(file_path=f"/repo/{task.source_file}")
    logged: dict[str, float] = {}
    completions = [[{"role": "assistant", "content": "All tests pass now."}],
                   [{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]},
                    {"role": "tool", "name": "Read", "content": "..."}]]
    out = env_stats(envs, completions=completions, log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [None, None]
    assert logged["env/reads"] == 1.0 and logged["env/claims_tests_pass"] == 0.5
    assert logged["env/end_reason/final_answer"] == 0.5 and logged["env/end_reason/rollout_ended"] == 0.5
    assert logged["env/unscorable"] == 0.0
    assert [e.get_reward() for e in envs] == [0.0, 0.0]  # unfixed files fail the hidden tests


def test_episode_log_appends_each_ended_episode(tmp_path):
    import json
    from types import SimpleNamespace

    from agentrl.integrations.trl import episode_log
    from agentrl.tasks import make_tasks

    tasks = make_tasks(2, families=["minmax"], seed=0, split="train")
    ds = task_dataset(tasks, "coding-tools")
    cls = make_trl_env_class("coding-tools")
    envs = [cls(), cls()]
    for e, row in zip(envs, ds, strict=True):
        e.reset(**row)
    completions = [[{"role": "assistant", "content": "Done."}], [{"role": "assistant", "content": "Fixed."}]]
    env_stats(envs, completions=completions, log_metric=lambda k, v: None)  # ends the episodes
    log = episode_log(tmp_path / "trl" / "episodes.jsonl")
    assert log(envs, completions=completions, trainer_state=SimpleNamespace(global_step=3)) == [None, None]
    assert log(envs[:1], completions=completions[:1]) == [None]
    rows = [json.loads(line) for line in (tmp_path / "trl" / "episodes.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [tasks[0].id, tasks[1].id, tasks[0].id]
    assert [r["step"] for r in rows] == [3, 3, None]
    assert rows[0]["completion"] == completions[0] and rows[0]["end_reason"] == "final_answer"
    assert rows[0]["reward"] == 0.0 and "reads" in rows[0]["stats"]


def test_a_schema_trl_cannot_express_is_refused():
    from agentrl.envs.wordle import WordleEnv

    class Nested(WordleEnv):
        def tools(self):
            schema = super().tools()
            schema[0]["function"]["parameters"]["properties"]["word"]["minLength"] = 5
            return schema

    with pytest.raises(ValueError, match="TRL would render"):
        trl_env_class(Nested)
    assert issubclass(trl_env_class(WordleEnv), AgentrlTRLEnv)


@pytest.mark.parametrize("field, value, why", [
    ("hidden_tests", "assert f()", "'hidden_tests' is str .*expected a list of strings"),
    ("public_tests", [1], "'public_tests' is list .*expected a list of strings"),
    ("edit_ops", [1], "'edit_ops' is list .*expected a list of objects"),
    ("meta", "abc", "'meta' is str .*expected an object"),
    ("meta", [1], "'meta' is list .*expected an object"),
    ("files", {"a.py": 5}, "'files' is dict .*expected an object of file names to strings"),
    ("id", 5, "'id' is int"),
])
def test_task_rows_with_fields_of_the_wrong_type_are_named_value_errors(field, value, why):
    """A row whose task had edit_ops [1] or meta [1] raised a bare TypeError from reset (and meta "abc" a
    ValueError about 'dictionary update sequence'); hidden_tests "abc" became the three tests 'a', 'b', 'c'.
    Each is now a ValueError naming the field and what it should be."""
    _, ds = _wordle_rows(1)
    cls, row = make_trl_env_class("wordle"), dict(ds[0])
    row["task"] = json.dumps({**json.loads(row["task"]), field: value})
    with pytest.raises(ValueError, match=f"dataset row 'task' field {why}"):
        cls().reset(**row)


def test_episode_log_to_a_path_it_cannot_append_to_is_refused_when_built(tmp_path):
    """episode_log(a directory) (or a path under a file) was accepted, then raised IsADirectoryError from inside
    GRPOTrainer the first time TRL scored a batch, ending the run after its first generation."""
    from agentrl.integrations.trl import episode_log

    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="episode_log .* is a directory"):
        episode_log(tmp_path)
    with pytest.raises(ValueError, match="episode_log .* is under the file"):
        episode_log(tmp_path / "file" / "episodes.jsonl")
