"""torchrun + FSDP2 data parallelism on CPU (gloo): the gradient equals one process's, and a 2-rank
`agentrl train` writes one results file and resumes on another world size."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.report.results import validate_results

HERE = Path(__file__).resolve().parent
TINY = ["--env", "edit-menu", "--group-size", "2", "--prompts-per-step", "3", "--eval-size", "2", "--eval-n", "1",
        "--max-new-tokens", "8", "--max-turns", "2", "--micro", "2", "--minibatches", "1", "--kl-coef", "0.01",
        "--checkpoint-every", "1", "--device", "cpu", "--n-boot", "200"]


@pytest.mark.slow
def test_two_ranks_give_the_one_process_gradient_and_update(tmp_path, run_torchrun):
    out = tmp_path / "grad.json"
    proc = run_torchrun([str(HERE / "dp_grad_worker.py"), str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    rep = json.loads(out.read_text())
    assert rep["world_size"] == 2 and rep["owner"] == [0] * 6 + [1] * 4  # groups of 2 never split
    g = rep["grad"]
    # fp64 model (HF's RMSNorm rounds through fp32: 1 process with micro 1 vs 2 differs by ~2e-7 too)
    assert g["params"] == 25 and g["max_rel_err"] < 1e-6, g
    assert math.isclose(g["loss_dp"], g["loss_1p"], rel_tol=1e-6)
    assert g["normalizer"] == 92 and g["passes"] == 2  # rank 1 ran one pass fewer of real rows
    tp = rep["grad_top_p"]  # top-p 0.9: the sampler's truncated distribution, on both sides
    assert tp["max_rel_err"] < 1e-6 and math.isclose(tp["loss_dp"], tp["loss_1p"], rel_tol=1e-6)
    assert not math.isclose(tp["loss_1p"], g["loss_1p"], rel_tol=1e-3)  # the mask did change the loss
    st = rep["step"]
    assert st["max_rel_err_update"] < 1e-6, st
    for k, (dp, one) in st["metrics"].items():
        assert math.isclose(dp, one, rel_tol=1e-6, abs_tol=1e-12), (k, dp, one)
    opt = rep["optimizer"]
    assert opt["ids"] and opt["params"] == 25 and opt["momentum_max_rel_err"] < 1e-6
    assert opt["roundtrip_equal"] and opt["param_groups_equal"]


def _single(args, timeout_s=300):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MPLBACKEND="Agg")
    env.pop("WORLD_SIZE", None)
    return subprocess.run([sys.executable, "-m", "agentrl", "train", *args], env=env, capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.mark.slow
def test_torchrun_train_writes_one_results_file_and_resumes_on_other_world_sizes(tmp_path, run_torchrun):
    out = tmp_path / "run"
    proc = run_torchrun(["-m", "agentrl", "train", *TINY, "--steps", "2", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith("results: ")] == [f"results: {out / 'results.json'}"]  # rank 0 only
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("results.json")) == ["run/results.json"]
    assert len(list(tmp_path.rglob("train.log"))) == 1
    data = validate_results(out / "results.json")
    assert data["status"] == "completed" and data["distributed"]["world_size"] == 2
    assert [s["step"] for s in data["steps"]] == [0, 1]
    for s in data["steps"]:
        assert s["dist/world_size"] == 2 and s["dist/weight_sync_s"] > 0 and s["dist/weight_sync_bytes"] > 0
        assert s["rollout/episodes"] == 6 and s["tokens_trained"] == s["policy_tokens"]  # KL on: every row trains
    assert [e["label"] for e in data["evaluations"]] == ["before", "after"]
    assert (out / "checkpoints" / "step_000002" / "meta.json").is_file()

    # a 2-rank checkpoint resumes in one process (no torchrun) ...
    one = _single([*TINY, "--steps", "3", "--out", str(out), "--resume"])
    assert one.returncode == 0, one.stderr[-4000:]
    data = validate_results(out / "results.json")
    assert [s["step"] for s in data["steps"]] == [0, 1, 2] and "dist/world_size" not in data["steps"][2]
    # ... and a one-process checkpoint on 2 ranks
    two = run_torchrun(["-m", "agentrl", "train", *TINY, "--steps", "4", "--out", str(out), "--resume"])
    assert two.returncode == 0, two.stderr[-4000:]
    data = validate_results(out / "results.json")
    assert data["status"] == "completed" and [s["step"] for s in data["steps"]] == [0, 1, 2, 3]
    assert data["steps"][3]["dist/world_size"] == 2 and len(data["wall_clock_parts_s"]) == 3
    assert "resumed from" in (out / "train.log").read_text()
