"""`agentrl train --warm-start sft`: the SFT warm start inside a run, recorded in the results file."""

from __future__ import annotations

import pytest

from agentrl.report.results import validate_results
from agentrl.rl.config import RLConfig
from agentrl.rl.trainer import train
from agentrl.rl.warm_start import register_warm_start, warm_start_fn
from agentrl.sft.warm_start import sft_config, turns_over_budget


def test_sft_config_follows_the_run_config():
    cfg = RLConfig.from_flat(warm_start="sft", warm_start_epochs=3, warm_start_lr=5e-3, warm_start_batch=2, micro=1, seed=7)
    s = sft_config(cfg)
    assert (s.epochs, s.lr, s.batch, s.micro, s.seed, s.max_tokens) == (3, 5e-3, 2, 1, 7, cfg.sampling.max_context_tokens)


def test_turns_over_budget_counts_expert_turns_the_policy_could_not_finish():
    from types import SimpleNamespace as NS

    trajs = [NS(turns=[NS(completion_ids=(1,) * 20), NS(completion_ids=(1,) * 40)]), NS(turns=[NS(completion_ids=(1,) * 32)])]
    assert turns_over_budget(trajs, 32) == (1, 3, 40)
    assert turns_over_budget(trajs, 64) == (0, 3, 40) and turns_over_budget([], 32) == (0, 0, 0)


def test_the_quick_preset_budget_fits_edit_menu_experts_but_not_coding_tools():
    """`train --preset quick --env coding-tools` ran 4 minutes with every group at reward 0: the preset's 32-token
    turns cut the coding-tools expert's Edit calls, so the warm start now says so; edit-menu's turns fit."""
    from agentrl.models.load import load_policy
    from agentrl.rl.run_setup import env_kwargs, run_task_sets
    from agentrl.sandbox import Sandbox
    from agentrl.sft.data import expert_trajectories

    _, tok = load_policy("demo-qwen3", "fp32", "cpu")
    sandbox = Sandbox()
    try:
        over = {}
        for env in ("edit-menu", "coding-tools"):
            cfg = RLConfig.from_flat(**{**RLConfig.from_preset("quick").to_flat(), "env": env})
            trajs = expert_trajectories(env, list(run_task_sets(cfg).train[:8]), tok, random_op=True, sandbox=sandbox,
                                        max_turns=cfg.env.max_turns, env_kwargs=env_kwargs(cfg, sandbox))
            over[env] = turns_over_budget(trajs, cfg.sampling.max_new_tokens)
    finally:
        sandbox.close()
    assert over["edit-menu"][0] == 0 and over["coding-tools"][0] > 0, over


@pytest.mark.parametrize("env", ["wordle", "python-session"])
def test_an_env_without_a_random_op_expert_points_at_agentrl_sft(env):
    """`train --preset quick --env wordle --families ''` said only that wordle has no random-op expert; `agentrl sft
    --env wordle` warm-starts it, so the message says so."""
    from agentrl.sft.warm_start import check_sft_warm_start

    with pytest.raises(ValueError, match=rf"--env {env} has none: warm-start it with `agentrl sft --env {env}`.*"
                                         r"--model with --warm-start none"):
        check_sft_warm_start(RLConfig.from_flat(env=env, warm_start="sft"))


def test_unknown_warm_start_names_the_registered_ones():
    with pytest.raises(ValueError, match="is not a registered warm start; expected one of .*sft"):
        warm_start_fn("nope")
    with pytest.raises(ValueError, match="other than"):
        register_warm_start("none", lambda sess: {})


@pytest.mark.slow
def test_warm_start_runs_before_the_first_evaluation_and_is_recorded(tmp_path):
    cfg = RLConfig.from_flat(model="tiny-qwen3", env="edit-menu", families="minmax", warm_start="sft", warm_start_tasks=3,
                   warm_start_epochs=2, warm_start_batch=2, warm_start_lr=1e-2, micro=2, steps=1, group_size=2,
                   prompts_per_step=1, eval_size=1, eval_n=1, max_new_tokens=8, max_turns=2, n_boot=100,
                   device="cpu", out=str(tmp_path / "run"))
    data = validate_results(train(cfg))
    ws = data["warm_start"]
    assert ws["method"] == "sft" and ws["settings"]["random_op"] is True and ws["settings"]["tasks"] == 3
    assert ws["settings"]["env"] == "edit-menu" and len(ws["settings"]["task_ids"]) == 3
    assert ws["data"]["trajectories"] == 3 and ws["data"]["policy_tokens"] > 0 and ws["data"]["dropped"] == 0
    assert len(ws["losses"]) == len(ws["steps"]) == 2 * 2  # ceil(3 / 2) batches x 2 epochs
    assert ws["nll_after"] < ws["nll_before"] and ws["nll_before"] > 10  # random init: ~ln(151936) = 11.9
    assert ws["wall_clock_s"] >= ws["train_s"] > 0
    assert data["config"]["warm_start"] == "sft" and [e["label"] for e in data["evaluations"]] == ["before", "after"]
    log = (tmp_path / "run" / "train.log").read_text()
    assert log.index("warm start (sft)") < log.index("evaluation before")
