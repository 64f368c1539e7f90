"""Ray as the orchestrator (agentrl.scale.ray_actors): grading in Ray actors on a local loopback cluster,
and a training run whose rollout worker and grader are Ray actors."""

import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

from agentrl.envs.grading import source_job  # noqa: E402
from agentrl.sandbox import Sandbox  # noqa: E402
from agentrl.scale.ray_actors import RaySandbox, init_ray  # noqa: E402
from agentrl.tasks.generate import make_tasks  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    resources = init_ray(num_cpus=2)
    yield resources
    ray.shutdown()


@pytest.mark.slow
def test_ray_graders_grade_as_a_local_sandbox_does(local_ray):
    assert local_ray["CPU"] == 2
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")  # loopback only
    tasks = make_tasks(3, seed=0)
    jobs = [source_job(t, src, t.hidden_tests) for t in tasks for src in (t.reference, t.files[t.source_file])]
    with RaySandbox(2) as graders, Sandbox() as local:
        remote = graders.run_tests_batch(jobs)
        single = graders.run_tests(jobs[0])
        ran = graders.run({"a.py": "print(6 * 7)"}, ["python", "a.py"])
        desc = graders.describe()
        want = local.run_tests_batch(jobs)
        local_desc = local.describe()
    assert [(r.passed, r.total) for r in remote] == [(r.passed, r.total) for r in want]
    assert all(r.all_passed for r in remote[::2]) and not any(r.all_passed for r in remote[1::2])
    assert (single.passed, single.total) == (want[0].passed, want[0].total)
    assert ran.exit_code == 0 and ran.stdout.strip() == "42"
    g = desc["graders"]
    assert g["engine"] == "ray" and g["actors"] == 2 and g["nodes"] == ["127.0.0.1"]
    assert len(set(g["pids"])) == 2 and os.getpid() not in g["pids"]  # each grader its own process
    assert set(local_desc) <= set(desc)  # each grader's own sandbox description is kept


def test_ray_sandbox_refuses_zero_graders():
    with pytest.raises(ValueError, match="n must be >= 1"):
        RaySandbox(0)


@pytest.mark.slow
def test_train_with_ray_rollout_worker_and_ray_grader(tmp_path):
    out = tmp_path / "run"
    args = ["--env", "edit-menu", "--steps", "2", "--group-size", "2", "--prompts-per-step", "2", "--eval-size", "2",
            "--eval-n", "1", "--max-new-tokens", "8", "--max-turns", "2", "--micro", "2", "--minibatches", "1",
            "--device", "cpu", "--n-boot", "200", "--async-rollouts", "--rollout-workers", "1",
            "--worker-launcher", "ray", "--ray-graders", "1", "--out", str(out)]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", MPLBACKEND="Agg")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "agentrl", "train", *args], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    from agentrl.report.results import validate_results

    data = validate_results(out / "results.json")
    assert data["status"] == "completed"
    assert data["distributed"]["launcher"] == "rollout-workers (ray)"
    assert data["sandbox"]["graders"]["actors"] == 1 and data["sandbox"]["graders"]["nodes"] == ["127.0.0.1"]
    assert all(s["dist/weight_sync_s"] > 0 for s in data["steps"])
    assert [e["label"] for e in data["evaluations"]] == ["before", "after"]
