"""Clients of `agentrl serve`: OpenEnv's EnvClient typed for our models, and `RemoteEnv`, an agentrl `Env`
whose episodes run on the server (so agentrl's driver, evaluation and TRL adapter use a served
environment exactly like a local one).

Not the server (env_server.py). Everything here goes through OpenEnv's own `EnvClient` (WebSocket
sessions); the task list comes from OpenEnv's task API over HTTP.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import threading
import time
import weakref
from typing import Any

from openenv.core.client_types import StepResult as OpenEnvStepResult
from openenv.core.env_client import EnvClient

from agentrl.envs.base import Env, Observation, StepResult, ToolCall, ToolResult
from agentrl.serve.env.types import (
    MAX_CALLS_PER_ACTION,
    AgentrlAction,
    AgentrlObservation,
    AgentrlState,
    ToolCallModel,
    check_reset_params,
    check_step_params,
    step_result_from_observation,
)
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.serve")
CLOSE_TIMEOUT_S = 5.0  # how long close() waits for the server's goodbye before it lets the session go
_LIVE: weakref.WeakSet[RemoteEnv] = weakref.WeakSet()
_AT_EXIT = threading.Lock()
_at_exit_registered = False


def _track(env: RemoteEnv) -> None:
    """Remember `env` for the exit hook (registered on first use: nothing happens on import)."""
    global _at_exit_registered
    with _AT_EXIT:
        _LIVE.add(env)
        if not _at_exit_registered:
            atexit.register(close_all, CLOSE_TIMEOUT_S)
            _at_exit_registered = True


def close_all(timeout_s: float = CLOSE_TIMEOUT_S) -> int:
    """Close every RemoteEnv still open, all at once, within about `timeout_s` in total; returns how
    many were open. Runs at interpreter exit (atexit, while threads still run), so a script that ends
    with live instances (TRL holds its environments for the trainer's life) ends in seconds, whether or
    not the server is still there."""
    live = [e for e in list(_LIVE) if not e.closed]
    threads = [threading.Thread(target=e.close, args=(timeout_s,), name="agentrl-remote-env-close", daemon=True)
               for e in live]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s + 1.0
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return len(live)


class AgentrlEnvClient(EnvClient[AgentrlAction, AgentrlObservation, AgentrlState]):
    """OpenEnv's EnvClient for `agentrl serve` (what an OpenEnv environment's `client.py` holds).

    `reset(task_id=..., split=..., index=..., seed=...)`, `step(AgentrlAction(...))`, `state()`; async by
    default, `.sync()` for blocking use (OpenEnv's own wrapper). Parameters are checked here exactly as
    the server checks them (check_reset_params / check_step_params): a bad one raises ParameterError
    before anything is sent.
    """

    async def _reset_async(self, **kwargs: Any) -> OpenEnvStepResult[AgentrlObservation]:
        params = check_reset_params(kwargs).model_dump(exclude_none=True)
        return await super()._reset_async(**params)

    async def _step_async(self, action: AgentrlAction, **kwargs: Any) -> OpenEnvStepResult[AgentrlObservation]:
        check_step_params(kwargs)  # OpenEnv's WebSocket step sends the action only; these are checked, not sent
        if not isinstance(action, AgentrlAction):
            action = AgentrlAction.model_validate(action)  # pydantic ValidationError naming the field
        return await super()._step_async(action)

    def _step_payload(self, action: AgentrlAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> OpenEnvStepResult[AgentrlObservation]:
        fields = dict(payload.get("observation", {}))
        fields["done"] = bool(payload.get("done", False))
        fields["reward"] = payload.get("reward")
        obs = AgentrlObservation.model_validate(fields)
        return OpenEnvStepResult(observation=obs, reward=payload.get("reward"), done=obs.done,
                                 metadata=payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> AgentrlState:
        return AgentrlState.model_validate(payload)


def http_base(url: str) -> str:
    """`url` as an http(s) base without a trailing slash (ws:// -> http://)."""
    url = url.rstrip("/")
    if url.startswith("ws://"):
        return "http://" + url[5:]
    if url.startswith("wss://"):
        return "https://" + url[6:]
    return url


def server_info(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The server's environment name and splits: {"env": name, "splits": [...]} (OpenEnv routes).

    Raises:
        ConnectionError: the server cannot be reached or is not an agentrl/OpenEnv server.
        ValueError: `url` is not an http(s):// or ws(s):// URL.
    """
    import requests

    base = http_base(url)
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"--env-url {url!r}: expected http://HOST:PORT (or ws://), as `agentrl serve` prints")
    try:
        envs = requests.get(f"{base}/list_environments", timeout=timeout_s)
    except requests.RequestException as e:
        raise ConnectionError(f"{base}: cannot be reached ({type(e).__name__}); is `agentrl serve` running "
                              f"there?") from e
    try:
        envs.raise_for_status()
        name = envs.json()[0]
        splits = requests.get(f"{base}/{name}/splits", timeout=timeout_s)
        splits.raise_for_status()
    except (requests.RequestException, ValueError, IndexError, KeyError, TypeError) as e:
        raise ConnectionError(f"{base}: not an OpenEnv environment server ({type(e).__name__}: {e})") from e
    return {"env": name, "splits": [s["name"] if isinstance(s, dict) else s for s in splits.json()]}


def fetch_tasks(url: str, split: str = "heldout", timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """The public descriptions of a split's tasks ({"id", "family", "split", "index", "prompt"}).

    Raises:
        ConnectionError: the server cannot be reached; ValueError: it refused the split.
    """
    import requests

    base, name = http_base(url), server_info(url)["env"]
    try:
        r = requests.post(f"{base}/{name}/tasks", json={"split": split}, timeout=timeout_s)
    except requests.RequestException as e:
        raise ConnectionError(f"{base}: {e}") from e
    if r.status_code >= 400:
        raise ValueError(f"{base}: split {split!r} refused ({r.status_code}): {r.text[:500]}")
    return list(r.json()["tasks"])


def stub_task(spec: dict[str, Any]) -> Task:
    """A Task that names a served task (id, family, split); its files and tests stay on the server."""
    return Task(id=str(spec["id"]), family=str(spec.get("family", "")), split=str(spec.get("split", "")),
                files={}, entry="", source_file="", public_tests=(), hidden_tests=(), reference="",
                meta={"served": True, "index": spec.get("index")})


class RemoteEnv(Env):
    """An agentrl Env whose episodes run in a session of `agentrl serve` (one WebSocket each).

    `reset(task)` starts the served task with `task.id`; `step`, `final_answer`, `truncate` send one
    action each; the reward and stats arrive with the observation that ends the episode.

    Args:
        url: the server's base URL (http://127.0.0.1:PORT or ws://...).
        name: the environment name (default: asked from the server).
        message_timeout_s: how long one reply may take.
    """

    def __init__(self, url: str, name: str | None = None, message_timeout_s: float = 300.0):
        self.url = url
        self.name = name or server_info(url)["env"]
        self._client = AgentrlEnvClient(base_url=http_base(url), message_timeout_s=message_timeout_s).sync()
        self._tools: list[dict[str, Any]] = []
        self._task: Task | None = None
        self._reward: float | None = None
        self._stats: dict[str, float] = {}
        self.end_reason, self.terminated, self.truncated = None, False, False
        self.max_turns = 0
        self._closed = False
        _track(self)

    def reset(self, task: Task, seed: int | None = None) -> Observation:
        """Start the served task `task.id` (a new episode in this session)."""
        obs = self._client.reset(task_id=task.id, seed=seed).observation
        self._task, self._tools, self._reward, self._stats = task, list(obs.tools), None, {}
        self.end_reason, self.terminated, self.truncated = None, False, False
        return Observation(system=obs.system, user=obs.user, tools=list(obs.tools))

    def _send(self, action: AgentrlAction, calls: list[ToolCall]) -> StepResult:
        if self._task is None:
            raise RuntimeError("RemoteEnv: step before reset()")
        obs = self._client.step(action).observation
        res = step_result_from_observation(obs, calls)
        if obs.done:
            self.end_reason, self.terminated, self.truncated = res.end_reason, res.terminated, res.truncated
            self._reward, self._stats = obs.reward, dict(obs.stats)
        return res

    def step(self, calls: list[ToolCall]) -> StepResult:
        """One turn's calls, run on the server in order. Past MAX_CALLS_PER_ACTION (the wire's limit per action)
        a model's calls are not sent: each comes back "failed" unrun, as calls past an environment's own
        max_calls_per_turn do, instead of the request being refused and the episode ending in an error."""
        calls = list(calls)
        sent, unsent = calls[:MAX_CALLS_PER_ACTION], calls[MAX_CALLS_PER_ACTION:]
        res = self._send(AgentrlAction(calls=[ToolCallModel.from_call(c) for c in sent]), sent)
        if not unsent:
            return res
        why = f"Error: at most {MAX_CALLS_PER_ACTION} tool calls per turn reach a served environment; call not run."
        return dataclasses.replace(res, results=res.results + tuple(ToolResult(c, "failed", why) for c in unsent))

    def final_answer(self, text: str) -> StepResult:
        """A turn without calls: ends the episode on the server."""
        return self._send(AgentrlAction(final_answer=text), [])

    def truncate(self, reason: str) -> StepResult:
        """End the served episode from here (e.g. "out_of_tokens"); the server grades the final state."""
        if self.done:
            return StepResult((), done=True, terminated=self.terminated, truncated=self.truncated,
                              end_reason=self.end_reason)
        return self._send(AgentrlAction(truncate=reason), [])

    @property
    def done(self) -> bool:
        return self.end_reason is not None

    def reward(self) -> float | None:
        """The served episode's reward (None: unscorable).

        Raises:
            RuntimeError: before the episode ended.
        """
        if not self.done:
            raise RuntimeError("RemoteEnv.reward() called while the episode runs")
        return self._reward

    def tools(self) -> list[dict[str, Any]]:
        """The tool schemas the server sent at reset (before the first reset: a reset on a random
        training task, to learn them)."""
        if not self._tools and self._task is None:
            self._tools = list(self._client.reset(seed=0).observation.tools)
        return list(self._tools)

    def stats(self) -> dict[str, float]:
        """The episode's tool statistics (sent by the server when the episode ended; {} before)."""
        return dict(self._stats)

    @property
    def closed(self) -> bool:
        """True once close() or release() ran."""
        return self._closed

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Close the WebSocket session (the server then closes the environment). Idempotent, and bounded:
        it returns within about `timeout_s` even when the server is gone or does not answer (the
        session is then left to the server, which ends it when the connection drops)."""
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        client = self._client
        done = threading.Event()

        def goodbye() -> None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection is not an error worth raising
                pass
            finally:
                done.set()

        threading.Thread(target=goodbye, name="agentrl-remote-env-close", daemon=True).start()
        if not done.wait(timeout_s):
            log.warning("RemoteEnv %s: the server did not answer the close within %.1f s; leaving the session "
                        "to it", self.url, timeout_s)

    def release(self) -> None:
        """Forget the session without any network I/O or thread start (what `__del__` does): the socket
        closes when the client is collected, and the server ends the session then."""
        self._closed = True
        _LIVE.discard(self)

    def __del__(self) -> None:
        # No close() here: a finalizer must not talk to the network or start a thread (at interpreter
        # exit that hung forever: OpenEnv's sync client started its loop thread and waited on it).
        # Instances alive at exit are closed by close_all (atexit), before finalizers run.
        try:
            self.release()
        except Exception:  # noqa: BLE001 - half-built instance
            pass
