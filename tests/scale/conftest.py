"""Helpers for agentrl.scale tests: launching a few CPU ranks with torchrun on the loopback interface."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], *, nproc: int = 2, timeout_s: float = 300, cwd: Path | None = None
             ) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node nproc <args>` with --master-addr 127.0.0.1 (the ranks pin gloo to the
    loopback interface themselves: agentrl.scale.net), offline, bounded."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
               DO_NOT_TRACK="1", MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):  # the ranks pick the loopback themselves
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", *args]
    return subprocess.run(cmd, env=env, cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture
def run_torchrun():
    return torchrun


@pytest.fixture
def tiny_qwen3_dp():
    def make(seed=0):
        import torch
        from transformers import Qwen3Config, Qwen3ForCausalLM

        torch.manual_seed(seed)
        cfg = Qwen3Config(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=False,
                          max_position_embeddings=128, attn_implementation="eager")
        return Qwen3ForCausalLM(cfg)

    return make
