"""`agentrl train --warm-start sft`: the SFT warm start inside a run, recorded in the results file."""

from __future__ import annotations

import pytest

from agentrl.report.results import validate_results
from agentrl.rl.config import RLConfig
from agentrl.rl.trainer import train
from agentrl.rl.warm_start import register_warm_start, warm_start_fn
from agentrl.sft.warm_start import sft_config


def test_sft_config_follows_the_run_config():
    cfg = RLConfig.from_flat(warm_start="sft", warm_start_epochs=3, warm_start_lr=5e-3, warm_start_batch=2, micro=1, seed=7)
    s = sft_config(cfg)
    assert (s.epochs, s.lr, s.batch, s.micro, s.seed, s.max_tokens) == (3, 5e-3, 2, 1, 7, cfg.sampling.max_context_tokens)


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
