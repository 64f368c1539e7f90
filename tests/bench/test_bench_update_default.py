"""bench_update's "RLConfig's default" row measures what the trainer runs on the device: compiled layers where
RLConfig's compile_layers ("auto") resolves on, through the trainer's own agentrl.rl.update.resolve_compile_layers."""

from __future__ import annotations

import bench_update
import pytest


def test_the_default_row_is_compiled_on_cuda_and_eager_on_the_cpu():
    assert bench_update.default_spec("cpu") == "bf16:on:16384"
    assert bench_update.default_spec("cuda") == "bf16:on:16384:compile"
    assert bench_update.parse_extra("default", "cuda") == ("bf16", "on", 16384, True)
    assert bench_update.parse_extra("default") == ("bf16", "on", 16384, False)
    assert bench_update.LONG_RUN_STEPS >= bench_update.update.COMPILE_PAYBACK_STEPS
    with pytest.raises(ValueError, match="or default"):
        bench_update.parse_extra("bf16:on:16384:fast")


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
