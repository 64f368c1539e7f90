"""The warm pool's workers import pytest before their first job (Sandbox(preload_pytest=True), the default): a
pytest job's fork finds it imported, sys.path is what it was without the preload, and what one job does to the
preloaded modules never reaches the next job."""

import pytest

from agentrl.sandbox import Sandbox, SandboxLimits
from agentrl.sandbox._child import preload_pytest

LIMITS = SandboxLimits(timeout_s=30.0, cpu_s=10)  # pytest runs, on a CI machine that may be loaded

PROBE = "import sys\nprint('pytest' in sys.modules, '_pytest.python' in sys.modules)\nprint(sys.path[1:])\n"


@pytest.fixture(scope="module", params=["bwrap", "rlimit"])
def pair(request):
    """(preloading sandbox, non-preloading sandbox) of one backend, one worker each: every job of a sandbox
    forks from the same worker."""
    try:
        on = Sandbox(limits=LIMITS, backend=request.param, max_workers=1)
    except RuntimeError as e:
        pytest.skip(f"bubblewrap unusable on this host: {e}")
    off = Sandbox(limits=LIMITS, backend=request.param, max_workers=1, preload_pytest=False)
    yield on, off
    on.close()
    off.close()


def test_jobs_fork_with_pytest_imported_and_the_same_sys_path(pair):
    on, off = pair
    got_on = on.run({"probe.py": PROBE}, ["python", "probe.py"]).stdout.splitlines()
    got_off = off.run({"probe.py": PROBE}, ["python", "probe.py"]).stdout.splitlines()
    assert got_on[0] == "True True"
    assert got_off[0] == "False False"
    # past the work dir (a per-job temp dir), the same import path; a staged pytest copy (the rlimit backend as root
    # with a private site dir: uid_reach.stage_pytest) lies under each sandbox's own root
    assert got_on[1].replace(on._root, "ROOT") == got_off[1].replace(off._root, "ROOT")


def test_a_job_that_patches_preloaded_pytest_does_not_reach_the_next_job(pair):
    on, _ = pair
    hack = ("import _pytest.python, pytest\n"
            "_pytest.python.Function.runtest = lambda self: None\n"
            "pytest.main = lambda *a, **k: 0\n")
    files = {"m.py": "def f():\n    return 1\n", "test_m.py": "from m import f\n\ndef test_f():\n    assert f() == 2\n"}
    # within the job, the patch works (the job's own process): its own pytest run passes
    inside = on.run(files | {"hack.py": hack + "import sys\nsys.exit(pytest.main(['-q', 'test_m.py']))\n"},
                    ["python", "hack.py"])
    assert inside.exit_code == 0
    # the next job on the same worker gets the unpatched modules: the failing test fails
    after = on.run(files, ["python", "-m", "pytest", "-q", "test_m.py"])
    assert after.exit_code == 1 and "1 failed" in after.stdout


def test_pytest_runs_the_same_with_and_without_the_preload(pair):
    on, off = pair
    files = {"m.py": "def f(x):\n    return x + 1\n",
             "test_m.py": "from m import f\n\ndef test_a():\n    assert f(1) == 2\n\ndef test_b():\n    assert f(1) == 3\n"}
    a = on.run(files, ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_m.py"])
    b = off.run(files, ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_m.py"])
    assert a.exit_code == b.exit_code == 1
    assert "assert 2 == 3" in a.stdout  # assertion rewriting still on with the preloaded modules
    strip = [ln for ln in a.stdout.splitlines() if " in " not in ln]  # the summary line's seconds differ
    assert strip == [ln for ln in b.stdout.splitlines() if " in " not in ln]


def test_a_preload_that_cannot_import_leaves_the_path_and_raises_nothing(monkeypatch):
    import sys

    before = list(sys.path)
    monkeypatch.setitem(sys.modules, "pytest", None)  # `import pytest` raises ImportError
    preload_pytest(["/nonexistent-agentrl-site"])
    assert sys.path == before
    preload_pytest([])
    assert sys.path == before


@pytest.mark.parametrize("shadow", ["random.py", "pkg/logging/__init__.py", "sub/calendar.py"])
def test_a_work_dir_module_named_like_a_preloaded_one_shadows_it_as_in_a_shell(pair, shadow):
    """A module of the job's own named like one the preload imported (pytest imports `random`, `logging`,
    `calendar`...) is what the job imports, as without the preload: the preloaded modules are dropped first."""
    on, off = pair
    name = shadow.removesuffix("/__init__.py").removesuffix(".py").rsplit("/", 1)[-1]
    where = shadow.rsplit("/", 2)[0] if shadow.endswith("__init__.py") else shadow.rpartition("/")[0]
    script = f"import sys\nsys.path.insert(0, {where!r})\nimport {name}\nprint({name}.X)\n" if where else \
        f"import {name}\nprint({name}.X)\n"
    files = {shadow: "X = 'local'\n", "s.py": script}
    for sb in (on, off):
        r = sb.run(files, ["python", "s.py"])
        assert (r.exit_code, r.stdout) == (0, "local\n"), r.stderr[-500:]
    if shadow == "random.py":  # pytest's own imports get the local module too, and fail the same way
        files = {shadow: "X = 'local'\n", "test_s.py": "def test_x():\n    pass\n"}
        runs = [sb.run(files, ["python", "-m", "pytest", "-q", "test_s.py"]) for sb in (on, off)]
        assert runs[0].exit_code == runs[1].exit_code != 0
        assert "cannot import name 'Random' from 'random'" in runs[0].stderr
        assert runs[0].stderr.splitlines()[-1] == runs[1].stderr.splitlines()[-1]
