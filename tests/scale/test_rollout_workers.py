"""Rollout workers (agentrl.scale.workers): generation in spawned processes, weights pushed over gloo."""

import subprocess
import sys

import pytest
import torch

from agentrl.rl.config import RLConfig
from agentrl.rl.session import RunSession
from agentrl.scale.workers import WorkerPool, check_rollout_workers, worker_devices

TINY = dict(env="edit-menu", group_size=2, prompts_per_step=2, eval_size=2, eval_n=1, max_new_tokens=8, max_turns=2,
            micro=2, minibatches=1, device="cpu", n_boot=200, async_rollouts=True, rollout_workers=1)


def test_worker_devices_cpu_and_refusals():
    assert worker_devices("cpu", 2) == ("cpu", ["cpu", "cpu"])
    if not torch.cuda.is_available():
        assert worker_devices("auto", 1) == ("cpu", ["cpu"])
    with pytest.raises(ValueError, match="rollout_workers"):
        RLConfig.from_flat(rollout_workers=1)  # needs async_rollouts
    with pytest.raises(ValueError, match="rollout_workers"):
        RLConfig.from_flat(rollout_workers=-1, async_rollouts=True)
    with pytest.raises(ValueError, match="LoRA"):
        check_rollout_workers(RLConfig.from_flat(lora_r=4, async_rollouts=True, rollout_workers=1))


def test_plain_session_refuses_rollout_workers(tmp_path):
    cfg = RLConfig.from_flat(**TINY, out=str(tmp_path / "x"))
    with pytest.raises(ValueError, match="need agentrl.scale"), RunSession.open(cfg):
        pass
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_pool_pushes_weights_and_samples_on_the_worker(tmp_path):
    from agentrl.scale.data_parallel import open_rank_session

    cfg = RLConfig.from_flat(**TINY, out=str(tmp_path / "run"))
    with open_rank_session(cfg, name="test") as sess:
        pool = WorkerPool.start(cfg, 1, "cpu", timeout_s=300)
        try:
            before = pool.checksums()
            with torch.no_grad():
                for p in sess.model.parameters():
                    p.add_(0.01)
            want = float(sum(p.detach().double().sum() for p in sess.model.parameters()))
            assert before[0] != pytest.approx(want)
            seconds = pool.push_weights(sess.model, version=5)
            assert seconds > 0 and pool.last_sync_bytes == 4 * sum(p.numel() for p in sess.model.parameters())
            assert pool.checksums() == [pytest.approx(want, rel=1e-12)]
            tasks = sess.tasks.train[:2]
            trajs = pool.rollout([tasks[0], tasks[0], tasks[1], tasks[1]], seed=3, group_ids=[0, 0, 1, 1],
                                 policy_version=5)
            assert [t.task_id for t in trajs] == [tasks[0].id, tasks[0].id, tasks[1].id, tasks[1].id]
            assert [t.group_id for t in trajs] == [0, 0, 1, 1] and {t.policy_version for t in trajs} == {5}
            assert all(len(t.completion_ids) == len(t.sampler_logprobs) for t in trajs)
        finally:
            pool.close()
        assert all(not p.is_alive() for p in pool.procs)


@pytest.mark.slow
def test_train_with_a_rollout_worker_bounds_staleness_and_logs_sync_seconds(tmp_path):
    out = tmp_path / "run"
    args = ["--env", "edit-menu", "--steps", "3", "--group-size", "2", "--prompts-per-step", "2", "--eval-size", "2",
            "--eval-n", "1", "--max-new-tokens", "8", "--max-turns", "2", "--micro", "2", "--minibatches", "1",
            "--device", "cpu", "--n-boot", "200", "--async-rollouts", "--max-staleness", "1", "--rollout-workers", "1",
            "--kl-coef", "0.01", "--out", str(out)]
    proc = subprocess.run([sys.executable, "-m", "agentrl", "train", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    from agentrl.report.results import validate_results

    data = validate_results(out / "results.json")
    assert data["status"] == "completed" and data["distributed"]["rollout_workers"] == 1
    steps = data["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert all(0 <= s["async/staleness"] <= 1 for s in steps) and steps[0]["async/staleness"] == 0
    assert all(s["dist/weight_sync_s"] > 0 and s["dist/weight_sync_bytes"] > 0 for s in steps)
    assert all(s["tokens_trained"] > 0 for s in steps)  # KL on: every row trains, stale ones IS-corrected
    assert any(s["async/staleness"] == 1 and "is/ratio_mean" in s for s in steps)
    assert "rollout workers: 1" in (out / "train.log").read_text()
