"""bench_update's "RLConfig's default" row measures what the trainer runs on the device: compiled layers where
RLConfig's compile_layers ("auto") resolves on, through the trainer's own agentrl.rl.update.resolve_compile_layers."""

from __future__ import annotations

import bench_update
import pytest


def test_the_default_row_is_compiled_on_cuda_and_eager_on_the_cpu():
    assert bench_update.default_spec("cpu") == "bf16:on:16384"
    assert bench_update.default_spec("cuda") == "bf16:on:16384:compile:offload"
    groups = bench_update.packing.ATTENTION_HEAD_GROUPS
    assert bench_update.parse_extra("default", "cuda") == ("bf16", "on", 16384, True, groups, True)
    assert bench_update.parse_extra("default") == ("bf16", "on", 16384, False, groups, False)
    assert bench_update.LONG_RUN_STEPS >= bench_update.update.COMPILE_PAYBACK_STEPS
    for bad in ("bf16:on:16384:fast", "bf16:on:16384:hg0", "bf16:on:16384:compile:hg", "bf16:on:hg2",
                "bf16:on:16384:offload:compile", "bf16:on:16384:compile:compile"):
        with pytest.raises(ValueError, match="or default"):
            bench_update.parse_extra(bad)


def test_head_groups_suffix_sets_the_rows_attention_split():
    assert bench_update.parse_extra("bf16:on:16384:compile:hg2") == ("bf16", "on", 16384, True, 2, False)
    assert bench_update.parse_extra("bf16:on:12288:hg4") == ("bf16", "on", 12288, False, 4, False)
    assert bench_update.parse_extra("bf16:on:12288:offload:hg4") == ("bf16", "on", 12288, False, 4, True)


def _figure(rows, prefix):
    return next(t for t in bench_update.targets(rows) if t["figure"].startswith(prefix))


def test_targets_read_the_row_marked_as_rlconfigs_default():
    row = {"dtype": "bf16", "grad_ckpt": "on", "micro_tok": 16384}
    eager = {**row, "extra": "bf16:on:16384", "rlconfig_default": False, "packed_all_tok_s": 38000.0}
    compiled = {**row, "extra": "bf16:on:16384:compile", "rlconfig_default": True, "packed_all_tok_s": 69400.0}
    t = _figure([eager, compiled], "update tokens/s packed, RLConfig's default")
    assert t["figure"].endswith("(bf16:on:16384:compile)") and t["value"] == 69400.0 and t["status"] == "short"  # < 70k
    old = {**row, "extra": "bf16:on:16384", "packed_all_tok_s": 38950.0}  # a table from before the mark: eager was the default
    assert _figure([old], "update tokens/s packed, RLConfig's default")["value"] == 38950.0
    assert _figure([eager], "update tokens/s packed, RLConfig's default")["status"] == "missing"


def test_targets_name_the_leanest_extra_row_that_keeps_70k_tokens_per_s():
    row = {"dtype": "bf16", "grad_ckpt": "on", "micro_tok": 16384}
    rows = [{**row, "extra": "bf16:on:16384:compile", "rlconfig_default": True, "packed_all_tok_s": 78000.0,
             "mem_ratio": 0.308},
            {**row, "extra": "bf16:on:16384:compile:hg2", "packed_all_tok_s": 76000.0, "mem_ratio": 0.296},
            {**row, "extra": "bf16:on:12288:compile", "packed_all_tok_s": 60000.0, "mem_ratio": 0.29}]  # too slow
    t = _figure(rows, "update memory above static packed / full logits, leanest extra row")
    assert "bf16:on:16384:compile:hg2 (76,000 tokens/s)" in t["figure"] and t["value"] == 0.296
    assert t["status"] == "met"
    assert not [t for t in bench_update.targets(rows[2:]) if "leanest" in t["figure"]]  # none at >= 70k
