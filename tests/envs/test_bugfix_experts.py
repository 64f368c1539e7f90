import random

import pytest

from agentrl.envs import check_env, make_env
from agentrl.envs.experts import candidate_line_edits, expert_turns, play
from agentrl.tasks import FAMILIES


def _solve_all(env_name, tasks, sandbox):
    env = make_env(env_name, sandbox=sandbox)
    return {t.family: play(env, t, expert_turns(env_name, t, random.Random(0))) for t in tasks}


@pytest.mark.parametrize("env_name", ["edit-menu", "coding-tools"])
def test_expert_solves_some_families(env_name, gym_tasks, sandbox):
    tasks = [t for t in gym_tasks if t.family in ("minmax", "zero", "init")]
    assert _solve_all(env_name, tasks, sandbox) == {"minmax": 1.0, "zero": 1.0, "init": 1.0}


@pytest.mark.slow
@pytest.mark.parametrize("env_name", ["edit-menu", "coding-tools"])
def test_expert_solves_every_family(env_name, gym_tasks, sandbox):
    assert _solve_all(env_name, gym_tasks, sandbox) == dict.fromkeys(FAMILIES, 1.0)


def test_every_op_of_every_family_is_a_unique_line_edit(gym_tasks):
    for t in gym_tasks:
        assert [name for name, _ in candidate_line_edits(t)] == [op.name for op in t.edit_ops], t.id


def test_random_op_expert_gets_wrong_ops_scored_zero(gym_tasks, sandbox):
    task = next(t for t in gym_tasks if t.family == "zero")
    env = make_env("edit-menu", sandbox=sandbox)
    by_op = {}
    for seed in range(12):
        turns = expert_turns("edit-menu", task, random.Random(seed), random_op=True)
        op = turns[1][0].arguments["op"]
        if op not in by_op:
            by_op[op] = play(env, task, turns)
    assert by_op == {op.name: float(op.correct) for op in task.edit_ops}


@pytest.mark.parametrize("env_name", ["edit-menu", "coding-tools"])
def test_check_env_on_a_real_renamed_task(env_name, gym_tasks, sandbox):
    assert check_env(make_env(env_name, sandbox=sandbox), gym_tasks[0])["reward"] == 1.0
