"""A small bounded load run against `agentrl serve` (loopback): concurrent sessions through full expert
episodes, checked for correctness only (every episode ends, the expert's reward, no errors); timing is
bench/env_server_load.py's job, never asserted here."""

from __future__ import annotations

import pytest

pytest.importorskip("openenv")

from load_generator import run_load, summary  # noqa: E402

from agentrl.serve.env.app import BackgroundServer, EnvServerConfig  # noqa: E402


@pytest.mark.parametrize("env,sessions,episodes", [("python-session", 12, 2), ("wordle", 16, 3)])
def test_concurrent_sessions_through_full_episodes(env, sessions, episodes):
    server = BackgroundServer(EnvServerConfig(env=env, train_size=6, eval_size=2, port=0,
                                              max_concurrent_envs=sessions))
    with server as url:
        tasks = list(server.served.catalog.splits["train"])
        report = run_load(url, env, tasks, sessions=sessions, episodes=episodes, max_wall_s=240)
        assert server.served.registry.open_count() <= sessions
    assert report.errors == []
    assert report.episodes == sessions * episodes
    rewards = [r for _, r in report.rewards]
    assert len(rewards) == report.episodes
    if env == "wordle":  # the expert plays real games over the word list: most, not all, solved in six guesses
        assert set(rewards) <= {0.0, 1.0} and sum(rewards) >= 0.7 * len(rewards)
    else:  # the reference solution passes every hidden test
        assert all(r == pytest.approx(1.0) for r in rewards)
    assert report.steps == len(report.step_latency_s) >= report.episodes
    figures = summary(report)
    assert figures["step_p50_ms"] <= figures["step_p99_ms"] and figures["episodes_per_s"] > 0
