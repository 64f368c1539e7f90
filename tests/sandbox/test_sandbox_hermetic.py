"""The sandbox is hermetic: pytest inside loads no host plugin, native thread pools stay at one thread.

Reproduces the 16-core GPU host on any machine: a pytest plugin installed (as a distribution with a
`pytest11` entry point) in a site dir the child imports from, whose import sizes a thread pool the way
OpenBLAS does (its env variable, else one thread per core: 64 here) and prints one "pthread_create
failed" line per thread the process limit refuses. Without the hermetic environment every sandboxed
`pytest` run starts with that flood; with it the output is the plain pytest report.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

import agentrl.sandbox.process as process
from agentrl.envs import make_env
from agentrl.envs.base import ToolCall
from agentrl.sandbox import Sandbox, SandboxLimits

PLUGIN = '''import os, sys, threading, time
# sized like OpenBLAS: OPENBLAS_NUM_THREADS, else one thread per core of a big host
n = int(os.environ.get("OPENBLAS_NUM_THREADS") or 64)
started = 0
for k in range(1, n):
    try:
        threading.Thread(target=time.sleep, args=(0,), daemon=True).start()
        started += 1
    except RuntimeError:
        sys.stderr.write(f"pthread_create failed for thread {k} of {n}: Resource temporarily unavailable\\n")
print(f"manythreads loaded: {started + 1} threads")
'''
REPO = {"calc.py": "def add(a, b):\n    return a + b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"}


@pytest.fixture(scope="module")
def plugin_site():
    """A site dir holding distribution `manythreads` with a pytest11 entry point (as pip installs one);
    world-readable, as a host's site-packages is (pytest's tmp_path is private to the caller's uid)."""
    site = Path(tempfile.mkdtemp(prefix="agentrl-hostsite-"))
    (site / "manythreads.py").write_text(PLUGIN)
    info = site / "manythreads-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: manythreads\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nmanythreads = manythreads\n")
    (info / "RECORD").write_text("manythreads.py,,\n")
    for p in (site, info):
        p.chmod(0o755)
    for f in (site / "manythreads.py", info / "METADATA", info / "entry_points.txt", info / "RECORD"):
        f.chmod(0o644)
    yield str(site)
    shutil.rmtree(site, ignore_errors=True)


@pytest.fixture(params=["bwrap", "rlimit"])
def host_sb(request, plugin_site, monkeypatch):
    """A fresh-process Sandbox whose child imports from the host's site dir plus the plugin's."""
    real = process._child_sys_path
    monkeypatch.setattr(process, "_child_sys_path", lambda *a: (*real(*a), plugin_site))
    try:
        sb = Sandbox(limits=SandboxLimits(timeout_s=20.0, cpu_s=10), backend=request.param, warm_pool=False)
    except RuntimeError as e:
        pytest.skip(f"bubblewrap unusable on this host: {e}")
    assert plugin_site in sb._backend.sys_path
    yield sb
    sb.close()


def test_the_plugin_is_importable_and_floods_without_the_thread_settings(host_sb):
    """Control: the fake host plugin is visible to the child and, sized from the core count, floods."""
    files = {"probe.py": "import os\nos.environ.pop('OPENBLAS_NUM_THREADS', None)\nimport manythreads\n"}
    r = host_sb.run(files, ["python", "probe.py"])
    assert r.stderr.count("pthread_create failed") == 63 and "manythreads loaded: 1 threads" in r.stdout


def test_pytest_loads_no_host_plugin(host_sb):
    r = host_sb.run(REPO, ["python", "-m", "pytest", "-q", "test_calc.py"])
    assert r.exit_code == 0 and "1 passed" in r.stdout
    assert "manythreads" not in r.stdout + r.stderr and "pthread_create" not in r.stderr


def test_a_plugin_the_repo_asks_for_runs_single_threaded(host_sb):
    """`-p manythreads` still loads it (explicit plugins are the repo's choice): one thread, no flood."""
    r = host_sb.run(REPO, ["python", "-m", "pytest", "-q", "-p", "manythreads", "test_calc.py"])
    assert r.exit_code == 0 and "1 passed" in r.stdout and "manythreads loaded: 1 threads" in r.stdout
    assert "pthread_create" not in r.stderr


def test_the_child_environment_is_fixed(host_sb):
    from agentrl.sandbox._child import HERMETIC_ENV

    files = {"env.py": "import json, os\nprint(json.dumps(dict(os.environ)))\n"}
    env = json.loads(host_sb.run(files, ["python", "env.py"]).stdout)
    assert {k: env[k] for k in HERMETIC_ENV} == HERMETIC_ENV
    assert set(env) == set(HERMETIC_ENV) | {"PATH", "HOME", "LANG"}
    assert host_sb.describe()["environment"] == HERMETIC_ENV


def test_coding_tools_bash_pytest_observation_stays_small_and_reward_is_right(host_sb):
    """The issue's episode: fix the file, run the tests with Bash on a plugin-laden host, then answer."""
    from agentrl.tasks import make_tasks

    task = make_tasks(1, seed=0)[0]
    env = make_env("coding-tools", sandbox=host_sb)
    env.reset(task)
    call = lambda name, **kw: ToolCall(name=name, arguments=kw, raw="")  # noqa: E731
    env.step([call("Read", file_path=f"/repo/{task.source_file}")])
    (r,) = env.step([call("Write", file_path=f"/repo/{task.source_file}", content=task.reference)]).results
    assert r.status == "ok", r.content
    (r,) = env.step([call("Bash", command="python -m pytest -q")]).results
    assert r.status == "ok" and " passed" in r.content and "failed" not in r.content, r.content
    assert len(r.content) < 1000 and "pthread_create" not in r.content and "manythreads" not in r.content
    env.final_answer("Fixed; the tests pass.")
    assert env.reward() == 1.0
