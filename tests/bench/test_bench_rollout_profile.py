"""bench_rollout's --profile-steps: the decode step under torch.profiler (CPU here: op names instead of kernels),
written to $OUT/bench_rollout_profile.txt and the JSON's "profile" key; and the kernel-name buckets."""

import json
import re
import sys

import pytest
from bench_rollout import BUCKETS, REGIONS, kernel_bucket, main

import agentrl.rollout.decode_attention as decode_attention
import agentrl.rollout.decode_layer as decode_layer


@pytest.mark.parametrize("name,bucket", [
    ("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "gemm/matmul"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", "gemm/matmul"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>", "gemm/matmul"),
    ("aten::mm", "gemm/matmul"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0", "attention"),
    ("void at::native::cunn_SoftMaxForward<4, float, float, float, SoftMaxForwardEpilogue>", "attention"),
    ("void at::native::cunn_SoftMaxForward<4, float, float, float, LogSoftMaxForwardEpilogue>", "elementwise/other"),
    ("aten::_log_softmax", "elementwise/other"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "elementwise/other"),
])
def test_kernel_buckets_put_fused_attention_before_gemm_and_the_sampling_softmax_in_other(name, bucket):
    assert kernel_bucket(name) == bucket


def test_profile_steps_writes_the_decode_profile_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", [
        "bench_rollout.py", "--device", "cpu", "--tiny", "--config", "qwen2.5-coder-0.5b-instruct",
        "--batches", "2", "--ctx", "24", "--steps", "3", "--repeats", "1", "--skip-hf", "--no-check",
        "--decode-attention", "sdpa", "matmul", "--profile-steps", "3"])
    assert main() == 0
    assert decode_layer.EAGER.attend is decode_attention.attend  # the region wrapper is the sampler's own

    text = (tmp_path / "bench_rollout_profile.txt").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# bench_rollout_profile: model=qwen2.5-coder-0.5b-instruct (tiny), batch=2, ctx=24, "
                               "steps=3, dtype=bf16, attention=sdpa, device=cpu, cuda_graphs=off")
    total = re.search(r"^total device time per decode step: ([\d.]+) ms", text, re.M)
    assert total and float(total.group(1)) > 0
    wall = re.search(r"^wall per decode step, CUDA graphs off \(unprofiled call, 3 steps\): ([\d.]+) ms", text, re.M)
    assert wall and float(wall.group(1)) > 0
    shares = []
    for b in BUCKETS:
        m = re.search(rf"^  bucket {re.escape(b)} +([\d.]+) ms +([\d.]+)%", text, re.M)
        assert m, b
        shares.append(float(m.group(2)))
    assert sum(shares) == pytest.approx(100, abs=0.2)
    for label in REGIONS:
        assert re.search(rf"^  region {re.escape(label)} +[\d.]+ ms", text, re.M), label
    table = [ln for ln in lines if ln.strip().startswith("Name") and "Self CPU" in ln]
    assert table and re.search(r"^ +decode\.step .* 3 *$", text, re.M)  # the step range row, 3 calls
    assert re.search(r"^ +aten::mm ", text, re.M)

    data = json.loads((tmp_path / "bench_rollout.json").read_text())
    prof = data["profile"]
    assert (prof["batch"], prof["attention"], prof["decode_steps"]) == (2, "sdpa", 3)
    assert prof["device_ms_per_step"] == pytest.approx(float(total.group(1)), abs=1e-3)
    assert sum(b["ms_per_step"] for b in prof["buckets"].values()) == pytest.approx(prof["device_ms_per_step"])
    assert prof["buckets"]["gemm/matmul"]["ms_per_step"] > 0  # the tiny model's projections and LM head
    assert prof["regions_ms_per_step"]["decode.lm_head"] > 0 and prof["wall_ms_per_step_measured"] > 0
    assert [r["attn"] for r in data["rows"]] == ["sdpa", "matmul"]  # the table's rows are still there


def test_a_failed_profile_says_why_in_its_file_and_the_exit_status(tmp_path, monkeypatch):
    import bench_rollout

    def oom(*_a, **_kw):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(bench_rollout, "profile_decode", oom)
    monkeypatch.setattr(sys, "argv", [
        "bench_rollout.py", "--device", "cpu", "--tiny", "--config", "qwen2.5-coder-0.5b-instruct", "--batches", "2",
        "--ctx", "16", "--steps", "2", "--repeats", "1", "--skip-hf", "--no-check", "--profile-steps", "2"])
    assert main() == 1
    lines = (tmp_path / "bench_rollout_profile.txt").read_text().splitlines()
    assert lines[0].startswith("# bench_rollout_profile: model=qwen2.5-coder-0.5b-instruct (tiny), batch=2, ctx=16")
    assert lines[1] == "profile OOM: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    data = json.loads((tmp_path / "bench_rollout.json").read_text())
    assert data["profile"]["error"] == lines[1].removeprefix("profile ") and len(data["rows"]) == 1
