import pytest

from agentrl.eval.evaluate import evaluate, mean_stats, summarize
from agentrl.rollout.trajectory import Trajectory
from agentrl.tasks.task import Task


def _task(i, fam):
    return Task(id=f"{fam}-{i}", family=fam, split="heldout", files={}, entry="f", source_file="f.py",
                public_tests=(), hidden_tests=("assert True",), reference="")


def _traj(task_id, reward, **stats):
    return Trajectory(task_id=task_id, group_id=0, prompt_ids=(1,), completion_ids=(), policy_mask=(),
                      sampler_logprobs=(), reward=reward, stats=stats, transcript=f"t {task_id} {reward}")


def test_summarize_counts_successes_per_task_and_family():
    tasks = [_task(0, "a"), _task(1, "a"), _task(2, "b")]
    rewards = {"a-0": [1.0, 0.0], "a-1": [1.0, 1.0], "b-2": [0.5, 0.0]}  # 0.5 is not a success
    trajs = [_traj(t, r, edits=1.0 if r else 0.0) for t, rs in rewards.items() for r in rs]
    res = summarize(tasks, trajs[::-1], 2, n_boot=200)
    assert res.successes == [1, 2, 0] and res.trials == 2
    assert res.mean_reward == [0.5, 1.0, 0.25]
    assert res.pass_at_1 == pytest.approx(0.5)  # mean over tasks of 1/2, 2/2, 0/2
    assert res.ci[0] <= res.pass_at_1 <= res.ci[1]
    assert res.per_family() == {"a": {"tasks": 2, "successes": 3, "trials": 4},
                                "b": {"tasks": 1, "successes": 0, "trials": 2}}
    assert res.tool_stats == {"edits": pytest.approx(4 / 6)}
    assert set(res.transcripts) == {"a-0", "a-1", "b-2"}


def test_summarize_rejects_a_wrong_episode_count_and_evaluate_bad_n():
    tasks = [_task(0, "a")]
    with pytest.raises(ValueError, match="expected 2 episodes per task"):
        summarize(tasks, [_traj("a-0", 1.0)], 2)
    with pytest.raises(ValueError, match="n >= 1"):
        evaluate(lambda ts: [], tasks, 0)


def test_evaluate_runs_n_episodes_per_task():
    tasks = [_task(0, "a"), _task(1, "b")]
    seen = []

    def rollout(ts):
        seen.extend(t.id for t in ts)
        return [_traj(t.id, 1.0 if t.family == "a" else 0.0) for t in ts]

    res = evaluate(rollout, tasks, 3)
    assert sorted(seen) == ["a-0"] * 3 + ["b-1"] * 3
    assert res.successes == [3, 0] and res.pass_at_1 == pytest.approx(0.5)


def test_mean_stats_counts_missing_stats_as_zero():
    assert mean_stats([_traj("x", 0, a=2.0), _traj("y", 0)]) == {"a": 1.0}
    assert mean_stats([]) == {}
