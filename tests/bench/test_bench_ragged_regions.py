"""bench_ragged's --regions: a continuous call's time split into decode steps, host checks and admissions (CPU
here: perf_counter instead of CUDA events), and the split adds up to the call."""

import json
import sys

import pytest
from _common import make_model
from bench_ragged import main, region_call, region_fields
from bench_rollout import make_contexts

from agentrl.rollout.fast_sampler import FastSampler
from agentrl.rollout.hf_sampler import SamplingConfig


def test_region_fields_take_the_admissions_out_of_the_checks_and_both_out_of_the_decode():
    call = {"call_s": 10.0, "check": (5, 3.0), "admit": (4, 2.5), "first_admit_s": 0.5, "steps": 100,
            "prefill_tokens": 5000}
    one = {"call_s": 1.0, "check": (2, 1.0), "admit": (2, 1.0), "first_admit_s": 0.5, "steps": 0,
           "prefill_tokens": 4000}
    f = region_fields(call, one)
    # the checks ran 2.0 s of admissions (2.5 - the first, outside every check): 1.0 s of their own
    assert f["check_s"] == pytest.approx(1.0)
    assert f["admit_s"] == pytest.approx(2.5)
    assert f["decode_ms"] == pytest.approx(1e3 * (10.0 - 3.0 - 0.5) / 100)
    assert f["pf_ms_ktok"] == pytest.approx(500.0)
    assert f["pf1_ms_ktok"] == pytest.approx(250.0)


def test_region_call_splits_a_continuous_call_into_parts_that_add_up_to_it():
    model = make_model(None, "fp32", "cpu", tiny=True)
    ctxs = make_contexts(8, 20, model.config.vocab_size, seed=1)
    budgets = [3, 9, 5, 7, 4, 8, 6, 2]

    fs = FastSampler(model, stop_ids=(), pad_id=0, cfg=SamplingConfig(max_new_tokens=9), max_batch=3,
                     keep_kv=False, share_prompts=False, check_every=2, admit_rows=1)
    reg = region_call(fs, ctxs, budgets, "cpu")
    assert "_run" not in fs.__dict__ and "_check" not in fs.__dict__  # the wrappers are gone afterwards
    assert reg["steps"] == fs.stats["decode_steps"] > 0
    assert reg["check"][0] == fs.stats["host_checks"] and reg["admit"][0] == fs.stats["admissions"] >= 3
    assert reg["prefill_tokens"] == sum(map(len, ctxs))
    parts = region_fields(reg, reg)
    total = parts["decode_ms"] * reg["steps"] / 1e3 + parts["check_s"] + parts["admit_s"]
    assert total == pytest.approx(reg["call_s"], rel=1e-6)
    assert min(parts["decode_ms"], parts["check_s"], parts["admit_s"]) >= 0


def test_regions_flag_adds_the_columns_to_the_table(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["bench_ragged.py", "--device", "cpu", "--tiny", "--batch", "3", "--ctx", "16",
                                      "--min-new", "2", "--max-new", "6", "--repeats", "1", "--requests", "2",
                                      "--modes", "continuous", "--regions"])
    assert main() == 0
    rows = json.loads((tmp_path / "bench_ragged.json").read_text())["rows"]
    assert [r["mode"] for r in rows] == ["full", "continuous"]
    for r in rows:
        assert r["decode_ms"] > 0 and r["admit_s"] > 0 and r["pf1_ms_ktok"] > 0
