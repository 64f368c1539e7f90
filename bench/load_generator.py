"""A bounded load generator for `agentrl serve`: N concurrent sessions playing full scripted episodes.

Each session is one OpenEnv EnvClient (WebSocket) in its own thread; it plays `episodes` episodes with
the environment's scripted expert (agentrl.envs.experts), timing every step round trip. Bounded in
sessions, episodes and wall time (a deadline stops new episodes). Used by bench/env_server_load.py
(which prints the figures) and by a smaller test (which checks correctness only). Not the server.
"""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentrl.tasks.task import Task


@dataclass
class LoadReport:
    """What a load run measured.

    Attributes:
        sessions: concurrent sessions held; episodes: episodes finished; steps: step round trips.
        wall_s: wall-clock seconds from the first connect to the last episode.
        step_latency_s: every step's round-trip time, seconds (client side: send to answer).
        rewards: (task id, reward) per finished episode; errors: one line per failed session or episode.
    """

    sessions: int
    episodes: int = 0
    steps: int = 0
    wall_s: float = 0.0
    step_latency_s: list[float] = field(default_factory=list)
    rewards: list[tuple[str, float | None]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def percentile_ms(self, q: float) -> float:
        """The q-th percentile (0-100) of step latency in milliseconds (nearest-rank on sorted samples)."""
        if not self.step_latency_s:
            return float("nan")
        xs = sorted(self.step_latency_s)
        k = min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))
        return 1000.0 * xs[k]

    @property
    def episodes_per_s(self) -> float:
        """Finished episodes per wall-clock second."""
        return self.episodes / self.wall_s if self.wall_s > 0 else 0.0


def _play(url: str, env_name: str, tasks: list[Task], episodes: int, seed: int, deadline: float,
          report: LoadReport, lock: threading.Lock) -> None:
    from agentrl.envs.experts import expert_turns
    from agentrl.serve.env.client import AgentrlEnvClient
    from agentrl.serve.env.types import AgentrlAction, ToolCallModel

    rng = random.Random(seed)
    lat: list[float] = []
    done: list[tuple[str, float | None]] = []
    try:
        with AgentrlEnvClient(base_url=url, message_timeout_s=120).sync() as client:
            for _ in range(episodes):
                if time.monotonic() > deadline:
                    break
                task = rng.choice(tasks)
                client.reset(task_id=task.id)
                result = None
                for turn in expert_turns(env_name, task, random.Random(rng.random())):
                    t0 = time.perf_counter()
                    result = client.step(AgentrlAction(calls=[ToolCallModel.from_call(c) for c in turn]))
                    lat.append(time.perf_counter() - t0)
                    if result.done:
                        break
                if result is None or not result.done:
                    t0 = time.perf_counter()
                    result = client.step(AgentrlAction(final_answer="done"))
                    lat.append(time.perf_counter() - t0)
                done.append((task.id, result.reward))
    except Exception as e:  # noqa: BLE001 - recorded in the report: a load run reports failures, never hides them
        with lock:
            report.errors.append(f"session {seed}: {type(e).__name__}: {e}")
    with lock:
        report.step_latency_s += lat
        report.steps += len(lat)
        report.rewards += done
        report.episodes += len(done)


def run_load(url: str, env_name: str, tasks: list[Task], *, sessions: int = 64, episodes: int = 3,
             max_wall_s: float = 300.0, seed: int = 0) -> LoadReport:
    """Hold `sessions` concurrent sessions, each playing `episodes` expert episodes on random `tasks`.

    Args:
        url: the server (loopback); env_name: its environment (for the expert); tasks: tasks it serves,
            with their full data (the expert reads references and secrets).
        max_wall_s: no episode starts after this many seconds; threads are joined with a bound too.

    Raises:
        ValueError: no tasks, or sessions / episodes < 1.
    """
    if not tasks or sessions < 1 or episodes < 1:
        raise ValueError(f"run_load needs tasks, sessions >= 1 and episodes >= 1 (got {len(tasks)}, {sessions}, "
                         f"{episodes})")
    report = LoadReport(sessions=sessions)
    lock = threading.Lock()
    t0 = time.monotonic()
    threads = [threading.Thread(target=_play, args=(url, env_name, tasks, episodes, seed * 100_003 + i,
                                                    t0 + max_wall_s, report, lock), daemon=True)
               for i in range(sessions)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=max(1.0, t0 + max_wall_s + 120 - time.monotonic()))
    report.wall_s = time.monotonic() - t0
    alive = sum(th.is_alive() for th in threads)
    if alive:
        report.errors.append(f"{alive} session(s) still running after the wall-clock bound")
    return report


def summary(report: LoadReport) -> dict[str, Any]:
    """The headline figures: p50/p99 step latency (ms), episodes/s, counts."""
    return {"sessions": report.sessions, "episodes": report.episodes, "steps": report.steps,
            "wall_s": round(report.wall_s, 3), "step_p50_ms": round(report.percentile_ms(50), 2),
            "step_p99_ms": round(report.percentile_ms(99), 2), "episodes_per_s": round(report.episodes_per_s, 3),
            "errors": len(report.errors)}
