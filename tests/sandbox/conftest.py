"""Shared sandbox fixtures: one warm Sandbox per backend, with short limits so hostile tests are fast."""

import pytest

from agentrl.sandbox import Sandbox, SandboxLimits

FAST = SandboxLimits(timeout_s=4.0, cpu_s=2, test_timeout_s=1.0)


def _make(kind: str, warm_pool: bool = True) -> Sandbox:
    try:
        return Sandbox(limits=FAST, backend=kind, max_workers=2, warm_pool=warm_pool)
    except RuntimeError as e:  # only bwrap can be unusable; the fallback is tested separately
        pytest.skip(f"bubblewrap unusable on this host: {e}")


@pytest.fixture(scope="module", params=["bwrap", "rlimit"])
def sb(request):
    s = _make(request.param)
    yield s
    s.close()


@pytest.fixture(scope="module", params=["bwrap", "rlimit"])
def fresh_sb(request):
    s = _make(request.param, warm_pool=False)
    yield s
    s.close()
