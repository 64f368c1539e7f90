"""agentrl.scale pieces that need no process group: group sharding, seeds, optimizer-state formats, refusals."""

import pytest
import torch

from agentrl.rl.config import RLConfig
from agentrl.scale.context import launched_by_torchrun, shard_groups
from agentrl.scale.data_parallel import check_data_parallel, shard_seed
from agentrl.scale.fsdp import decoder_layers, optimizer_state_from_fqn, optimizer_state_to_fqn


def test_shard_groups_keeps_groups_whole_and_balanced():
    gids = [g for g in range(5) for _ in range(3)]  # 5 groups of 3, in order
    owner = shard_groups(gids, 2)
    assert owner == [0] * 9 + [1] * 6  # groups 0-2 on rank 0, 3-4 on rank 1
    for g in range(5):
        assert len({o for o, gg in zip(owner, gids, strict=True) if gg == g}) == 1


def test_shard_groups_by_id_not_position_and_more_ranks_than_groups():
    assert shard_groups([7, 3, 7, 3, 9, 9], 3) == [0, 1, 0, 1, 2, 2]  # order of first appearance
    assert shard_groups([0, 0, 1, 1], 4) == [0, 0, 1, 1]  # ranks 2, 3 own nothing
    assert shard_groups([], 2) == []
    with pytest.raises(ValueError, match="world_size"):
        shard_groups([0], 0)


def test_shard_seed_first_shard_is_the_run_seed():
    assert shard_seed(123, 0) == 123
    assert shard_seed(123, 8) != 123 and shard_seed(123, 8) == shard_seed(123, 8)
    assert shard_seed(123, 8) != shard_seed(123, 16)


def test_optimizer_state_fqn_round_trip(tiny_qwen3_dp):
    model = tiny_qwen3_dp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    plain = opt.state_dict()
    full = optimizer_state_to_fqn(plain, model)
    names = [n for n, _ in model.named_parameters()]
    assert full["param_groups"][0]["params"] == ["lm." + n for n in names]
    assert set(full["state"]) == {"lm." + n for n in names}
    back = optimizer_state_from_fqn(full, model)
    assert back["param_groups"] == plain["param_groups"]
    for i, st in plain["state"].items():
        assert all(torch.equal(st[k], back["state"][i][k]) for k in st)


def test_decoder_layers_found_and_refused(tiny_qwen3_dp):
    assert len(decoder_layers(tiny_qwen3_dp())) == 2
    with pytest.raises(ValueError, match="no decoder layers"):
        decoder_layers(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("field,value", [("lora_r", 8), ("agent", "opencode"), ("async_rollouts", True),
                                         ("compile_layers", "on"), ("activation_offloading", "on")])
def test_data_parallel_refuses_what_it_does_not_support(field, value):
    cfg = RLConfig.from_flat(**{field: value})
    with pytest.raises(ValueError, match="torchrun data parallel does not support"):
        check_data_parallel(cfg)


def test_data_parallel_takes_compile_layers_auto_and_off():
    for setting in ("auto", "off"):  # auto: the FSDP2 engine's update runs eager (open_data_parallel sets off)
        check_data_parallel(RLConfig.from_flat(compile_layers=setting))


def test_data_parallel_takes_activation_offloading_auto_and_off():
    """auto resolves off there (the FSDP2 engine's update does not offload), as compile_layers' auto does."""
    for setting in ("auto", "off"):
        check_data_parallel(RLConfig.from_flat(activation_offloading=setting))


def test_not_under_torchrun_here(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not launched_by_torchrun()
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launched_by_torchrun()


def test_eval_under_torchrun_is_refused_and_train_flags_stay_off_eval(monkeypatch, capsys):
    from agentrl.cli import build_parser, main

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit, match="agentrl eval runs in one process"):
        main(["eval", "--device", "cpu"])
    monkeypatch.delenv("WORLD_SIZE")
    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    ev = parser._subparsers._group_actions[0].choices["eval"]
    train_flags = {s for a in train._actions for s in a.option_strings}
    eval_flags = {s for a in ev._actions for s in a.option_strings}
    for flag in ("--rollout-workers", "--worker-launcher", "--ray-graders"):
        assert flag in train_flags and flag not in eval_flags
