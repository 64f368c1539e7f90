"""Ray as the orchestrator: sandbox graders and rollout workers as Ray actors. Not a scheduler of ours.

Ray (the optional `agentrl[ray]` extra) places the actors on the cores and hosts of a cluster: a local
one started here (`init_ray`: no dashboard, usage stats and their cloud-metadata probes off, every Ray
server on 127.0.0.1), or an existing one named by RAY_ADDRESS (then Ray's own networking applies).

- `RaySandbox` has the grading surface of agentrl.sandbox.Sandbox that environments use (`run_tests`,
  `run_tests_batch`, `run`), each call executed by one of N `GraderActor`s, each owning its own
  Sandbox (its own warm pool and limits) in its own process, wherever Ray put it. So hidden-test
  grading and tool runs scale past one process and host. Persistent `run_python` workers
  (`Sandbox.session()`, the python-session env) are stateful and stay in a local Sandbox.
- `RolloutWorkerActor` runs agentrl.scale.workers' worker loop inside a Ray actor (a GPU each when the
  cluster has them), so `--rollout-workers N --worker-launcher ray` places generation through Ray
  while weights still travel over torch.distributed (NCCL/gloo), as verl does.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

from agentrl.sandbox.api import RunResult, SandboxLimits, TestJob, TestReport


def ray_available() -> bool:
    """Whether the `ray` package is importable (pip install 'agentrl[ray]')."""
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def init_ray(num_cpus: int | None = None, *, address: str | None = None) -> dict[str, Any]:
    """Connect to Ray once per process: RAY_ADDRESS / `address` if given, else a local cluster with
    `num_cpus` CPUs bound to 127.0.0.1, dashboard off. Usage statistics (and the cloud-metadata probes
    they make) are disabled before Ray is imported. Returns the cluster's resources.

    Raises: ValueError when ray is not installed (names the extra).
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DISABLE_DOCKER_CPU_WARNING", "1")
    if not ray_available():
        raise ValueError("Ray is not installed: pip install 'agentrl[ray]' (scripts/setup.sh installs it)")
    addr = address or os.environ.get("RAY_ADDRESS")
    if not addr:
        # Ray resolves 127.0.0.1 to the host's external IP and binds its servers there; its single-machine
        # mode (the macOS/Windows default) keeps every server on the loopback address instead. The variable
        # reaches Ray's own processes; the constant covers a `ray` imported before this call.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    if not addr:
        import ray._private.ray_constants as ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
    if not ray.is_initialized():
        if addr:
            ray.init(address=addr, log_to_driver=False, configure_logging=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return dict(ray.cluster_resources())


class GraderActor:
    """One grader: an agentrl Sandbox in a Ray actor process (run_tests / run / describe / close)."""

    def __init__(self, limits: SandboxLimits | None, backend: str, max_workers: int):
        from agentrl.sandbox import Sandbox

        self.sandbox = Sandbox(limits, backend, max_workers=max_workers)

    def run_tests(self, job: TestJob) -> TestReport:
        return self.sandbox.run_tests(job)

    def run(self, files: dict[str, str], argv: list[str], timeout_s: float | None, return_files: bool) -> RunResult:
        return self.sandbox.run(files, argv, timeout_s=timeout_s, return_files=return_files)

    def describe(self) -> dict[str, Any]:
        import ray

        return {**self.sandbox.describe(), "node": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def close(self) -> None:
        self.sandbox.close()


class RaySandbox:
    """Sandbox-compatible grading over `n` GraderActors (module docstring).

    Args:
        n: grader actors (>= 1), each with `max_workers` concurrent jobs (its sandbox pool width and the
            actor's max_concurrency) and `num_cpus` Ray CPUs.
        limits, backend: as agentrl.sandbox.Sandbox's, for every grader.

    Single calls go to the graders in turn; a batch is spread over all of them. Raises ValueError
    (n < 1, Ray missing); a grader's exception is re-raised by the call that hit it.
    """

    def __init__(self, n: int, *, limits: SandboxLimits | None = None, backend: str = "auto", max_workers: int = 1,
                 num_cpus: float = 1.0):
        if n < 1:
            raise ValueError(f"RaySandbox: n must be >= 1, got {n}")
        init_ray()
        import ray

        self.limits = limits or SandboxLimits()
        self.max_workers = max_workers * n
        actor = ray.remote(num_cpus=num_cpus, max_concurrency=max_workers)(GraderActor)
        self._actors = [actor.remote(self.limits, backend, max_workers) for _ in range(n)]
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._local: Any = None
        self._closed = False

    def _next(self) -> Any:
        with self._lock:
            return self._actors[next(self._turn) % len(self._actors)]

    def run_tests(self, job: TestJob) -> TestReport:
        import ray

        return ray.get(self._next().run_tests.remote(job))

    def run_tests_batch(self, jobs: list[TestJob], max_workers: int | None = None) -> list[TestReport]:
        """Every job at once over the graders (Ray queues what exceeds their concurrency); order kept."""
        import ray

        return ray.get([self._next().run_tests.remote(j) for j in jobs])

    def run(self, files: dict[str, str], argv: list[str], *, timeout_s: float | None = None,
            return_files: bool = False) -> RunResult:
        import ray

        return ray.get(self._next().run.remote(files, argv, timeout_s, return_files))

    def session(self, limits: SandboxLimits | None = None, files: dict[str, str] | None = None) -> Any:
        """A persistent run_python session: stateful, so it runs in a local Sandbox of this process."""
        if self._local is None:
            from agentrl.sandbox import Sandbox

            self._local = Sandbox(self.limits)
        return self._local.session(limits, files)

    def describe(self) -> dict[str, Any]:
        """The first grader's sandbox description, plus where every grader runs."""
        import ray

        descs = ray.get([a.describe.remote() for a in self._actors])
        out = {k: v for k, v in descs[0].items() if k not in ("node", "pid")}
        out["graders"] = {"engine": "ray", "actors": len(descs), "nodes": sorted({d["node"] for d in descs}),
                          "pids": [d["pid"] for d in descs]}
        return out

    def close(self) -> None:
        """Close every grader's sandbox and end the actors (idempotent)."""
        if self._closed:
            return
        self._closed = True
        import ray

        for a in self._actors:
            try:
                ray.get(a.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - the actor may be dead already; it is killed next
                pass
            ray.kill(a)
        if self._local is not None:
            self._local.close()

    def __enter__(self) -> RaySandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def ray_sandbox(cfg: Any) -> RaySandbox:
    """The run's sandbox when it grades in Ray actors: a RaySandbox of cfg.scale.ray_graders actors (pass it as
    RunSession.open's `make_sandbox`)."""
    return RaySandbox(cfg.scale.ray_graders)
