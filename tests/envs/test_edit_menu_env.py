import random

from agentrl.envs import ToolCall, check_env, make_env
from agentrl.envs.edit_menu import edit_menu_turns
from agentrl.envs.experts import play


def c(name, **args):
    return ToolCall(name, args)


def test_expert_solves_and_random_ops_are_graded_by_hidden_tests(minmax_task, zero_task, sandbox):
    env = make_env("edit-menu", sandbox=sandbox)
    for task in (minmax_task, zero_task):
        assert play(env, task, edit_menu_turns(task, random.Random(0))) == 1.0
        assert env.end_reason == "submitted" and env.stats()["hidden_pass_fraction"] == 1.0
    # fix_floor (part // whole): only ratio_share(0, 5) == 0.0 still passes; (3, 0) divides by zero
    turns = [[c("edit", op="fix_floor")], [c("submit")]]
    assert play(env, zero_task, turns) == 0.0
    assert env.stats()["hidden_pass_fraction"] == 1 / 3


def test_menu_hides_the_correct_op_and_is_seeded(minmax_task, sandbox):
    env = make_env("edit-menu", sandbox=sandbox)
    menus = {tuple(env.reset(minmax_task, seed=s).user.split("Edit menu: ")[1].rstrip(".").split(", ")) for s in range(12)}
    assert all(set(m) == {"fix_compare", "fix_init", "fix_range"} for m in menus) and len(menus) > 1
    obs = env.reset(minmax_task, seed=3)
    assert "correct" not in obs.user.lower() and "correct" not in str(obs.tools).lower()
    assert obs == env.reset(minmax_task, seed=3)


def test_mistakes_unknown_op_second_edit_and_truncation(minmax_task, sandbox):
    env = make_env("edit-menu", sandbox=sandbox, max_turns=4)
    env.reset(minmax_task, seed=0)
    (r,) = env.step([c("edit", op="fix_everything")]).results
    assert r.status == "malformed" and "fix_everything" in r.content
    (r,) = env.step([ToolCall("", {}, raw="<tool_call>{oops", malformed="bad JSON")]).results
    assert r.status == "malformed"
    r1, r2 = env.step([c("edit", op="fix_compare"), c("edit", op="fix_init")]).results
    assert (r1.status, r2.status) == ("ok", "failed") and "limit" in r2.content
    (r,) = env.step([c("run_tests")]).results
    assert r.status == "ok" and r.content.startswith("1/1 tests passed")
    assert env.done and env.end_reason == "out_of_turns" and env.truncated and not env.terminated
    s = env.stats()
    assert (s["malformed_calls"], s["failed_calls"], s["edits"], s["edits_over_limit"], s["turns"]) == (2, 1, 1, 1, 4)
    assert s["unknown_ops"] == 1
    assert env.reward() == 1.0  # graded at the end whatever the ending


def test_check_env_edit_menu(zero_task, sandbox):
    assert check_env(make_env("edit-menu", sandbox=sandbox), zero_task)["reward"] == 1.0
