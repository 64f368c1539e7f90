import pytest

from agentrl.eval.bootstrap import BootstrapConfig
from agentrl.eval.evaluate import evaluate, mean_stats, summarize
from agentrl.eval.report import EvalReport, FamilyResult, TaskResult, paired_difference, report_from_counts
from agentrl.rollout.trajectory import Trajectory
from agentrl.tasks.task import Task

BOOT = BootstrapConfig(n_boot=200, alpha=0.05, seed=7)


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
    res = summarize(tasks, trajs[::-1], 2, BOOT)
    assert res.successes == [1, 2, 0] and res.trials == [2, 2, 2] and res.unscorable == 0
    assert [t.mean_reward for t in res.tasks] == [0.5, 1.0, 0.25]
    assert res.pass_at_1.mean == pytest.approx(0.5)  # mean over tasks of 1/2, 2/2, 0/2
    assert res.pass_at_1.lo <= res.pass_at_1.mean <= res.pass_at_1.hi
    assert (res.pass_at_1.n_boot, res.pass_at_1.seed) == (200, 7)  # the one BootstrapConfig, nothing else
    assert res.per_family() == {"a": FamilyResult("a", 2, 4, 4, 3, 0.75), "b": FamilyResult("b", 1, 2, 2, 0, 0.0)}
    assert res.tool_stats == {"edits": pytest.approx(4 / 6)}
    assert set(res.transcripts) == {"a-0", "a-1", "b-2"}
    back = EvalReport.from_dict(res.to_dict())
    assert back.tasks == res.tasks and back.pass_at_1 == res.pass_at_1 and back.to_dict() == res.to_dict()


def test_unscorable_episodes_are_not_trials():
    tasks = [_task(0, "a"), _task(1, "a"), _task(2, "b")]
    rewards = {"a-0": [1.0, None, 0.0], "a-1": [None, None, None], "b-2": [1.0, 1.0, None]}
    trajs = [_traj(t, r) for t, rs in rewards.items() for r in rs]
    res = summarize(tasks, trajs, 3, BOOT)
    assert [(t.episodes, t.trials, t.successes, t.unscorable) for t in res.tasks] == [(3, 2, 1, 1), (3, 0, 0, 3),
                                                                                       (3, 2, 2, 1)]
    assert res.unscorable == 5 and res.tasks[1].rate is None and res.tasks[1].mean_reward is None
    assert res.pass_at_1.mean == pytest.approx(0.75) and res.pass_at_1.n_tasks == 2  # (1/2 + 2/2) / 2; a-1 left out
    assert res.per_family()["a"] == FamilyResult("a", 2, 6, 2, 1, 0.5)
    none = summarize(tasks[1:2], trajs[3:6], 3, BOOT)
    assert none.pass_at_1.mean is None and none.pass_at_1.undefined == "no task has a scorable episode"


def test_summarize_rejects_a_wrong_episode_count_and_evaluate_bad_n():
    tasks = [_task(0, "a")]
    with pytest.raises(ValueError, match="expected 2 episodes per task"):
        summarize(tasks, [_traj("a-0", 1.0)], 2, BOOT)
    with pytest.raises(ValueError, match="not evaluated"):
        summarize(tasks, [_traj("zz", 1.0)], 1, BOOT)
    with pytest.raises(ValueError, match="n >= 1"):
        evaluate(lambda ts: [], tasks, 0, BOOT)


def test_evaluate_runs_n_episodes_per_task():
    tasks = [_task(0, "a"), _task(1, "b")]
    seen = []

    def rollout(ts):
        seen.extend(t.id for t in ts)
        return [_traj(t.id, 1.0 if t.family == "a" else 0.0) for t in ts]

    res = evaluate(rollout, tasks, 3, BOOT)
    assert sorted(seen) == ["a-0"] * 3 + ["b-1"] * 3
    assert res.successes == [3, 0] and res.pass_at_1.mean == pytest.approx(0.5)


def _report(counts, trials=4):
    return report_from_counts([TaskResult(f"t{i}", "f", trials, trials, s) for i, s in enumerate(counts)], BOOT)


def test_paired_difference_matches_tasks_by_id_and_says_when_undefined():
    before, after = _report([0, 4]), _report([4, 4])  # differences 1 and 0: resampled means 0, 1/2, 1
    d = paired_difference(before, after, BootstrapConfig(n_boot=4000, seed=0))
    assert (d.diff.mean, d.diff.lo, d.diff.hi, d.task_ids) == (0.5, 0.0, 1.0, ("t0", "t1"))
    same = paired_difference(_report([0, 1]), _report([2, 3]), BOOT)  # +2/4 on both tasks
    assert (same.diff.mean, same.diff.lo, same.diff.hi) == (0.5, None, None)
    assert same.diff.undefined == "every task has the same difference (0.5): resampling tasks cannot vary the mean"
    assert same.to_dict()["diff"]["undefined"] == same.diff.undefined
    with pytest.raises(ValueError, match="only before: \\['t2'\\]"):
        paired_difference(_report([0, 1, 2]), _report([0, 1]), BOOT)


def test_paired_difference_leaves_out_tasks_unscored_on_either_side():
    before = report_from_counts([TaskResult("x", "f", 4, 4, 1), TaskResult("y", "f", 4, 0, 0),
                                 TaskResult("z", "f", 4, 4, 0)], BOOT)
    after = report_from_counts([TaskResult("x", "f", 4, 4, 3), TaskResult("y", "f", 4, 4, 4),
                                TaskResult("z", "f", 4, 4, 4)], BOOT)
    d = paired_difference(before, after, BOOT)
    assert d.task_ids == ("x", "z") and d.excluded == ("y",) and d.diff.mean == pytest.approx((0.5 + 1.0) / 2)


def test_mean_stats_counts_missing_stats_as_zero():
    assert mean_stats([_traj("x", 0, a=2.0), _traj("y", 0)]) == {"a": 1.0}
    assert mean_stats([]) == {}


def test_summarize_counts_end_reasons_and_they_round_trip():
    from dataclasses import replace

    from agentrl.eval.report import EvalReport

    tasks = [_task(0, "a"), _task(1, "a")]
    trajs = [replace(_traj("a-0", 1.0), end_reason="final_answer"), replace(_traj("a-0", None), end_reason="env_error"),
             replace(_traj("a-1", None), end_reason="final_answer"), replace(_traj("a-1", 0.0), end_reason="out_of_turns")]
    rep = summarize(tasks, trajs, 2, BOOT)
    assert rep.unscorable == 2 and rep.end_reasons == {"env_error": 1, "final_answer": 2, "out_of_turns": 1}
    assert rep.successes == [1, 0] and rep.trials == [1, 1]
    d = rep.to_dict()
    assert d["end_reasons"] == rep.end_reasons and EvalReport.from_dict(d).end_reasons == rep.end_reasons
