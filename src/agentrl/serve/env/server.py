"""`agentrl serve`: any agentrl environment behind OpenEnv's own server app (HTTP + WebSocket sessions).

Built on `openenv.core.env_server.create_app` with typed Action / Observation / State
(agentrl.serve.env.types), so OpenEnv's `EnvClient` (and any OpenEnv-speaking trainer) talks to
it unchanged: WebSocket `/ws` sessions (one environment instance each, with its own sandbox workers),
HTTP `/reset`, `/step`, `/state`, `/schema`, `/health`, `/metadata`, and OpenEnv's task API
(`/{env}/splits`, `/{env}/tasks`, ...). Not the client (serve/env/client.py), not the CLI.

What the server adds to OpenEnv's app: the task catalog (reset picks a task by id, by split and index,
or at random from the training split), the episode protocol checks (step before reset, after the end,
on an expired session each get a clear error), environment failures ending the episode as unscorable
("env_error", reward None) instead of an error, and a drain on SIGTERM (in-flight steps finish, every
session's sandbox is closed, the process exits 0). OpenEnv's HTTP `/reset` and `/step` are stateless
by design (a fresh environment per request); episodes live in WebSocket sessions.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from agentrl.envs.base import Env, StepResult
from agentrl.serve.env.types import (
    AgentrlAction,
    AgentrlObservation,
    AgentrlState,
    ResetParams,
    check_reset_params,
    check_step_params,
    results_to_models,
)
from agentrl.tasks.task import Task

log = logging.getLogger("agentrl.serve")
SPLITS = ("train", "heldout")
ENV_ERROR = "env_error"


class EpisodeProtocolError(RuntimeError):
    """A request that breaks the episode protocol (step before reset, after the end, on a closed session).
    The session stays usable: a reset starts over (unless it was closed)."""


@dataclass(frozen=True, repr=False)
class TaskCatalog:
    """The tasks a server offers, by split ("train", "heldout") and by id.

    Only ids, families and prompts leave the server (`describe`); hidden tests never do, and the repr
    is the split sizes only (an error message that prints the catalog carries no task).
    """

    splits: dict[str, tuple[Task, ...]]
    by_id: dict[str, Task] = field(default_factory=dict)
    prompts: dict[str, list[dict[str, str]]] = field(default_factory=dict)

    @classmethod
    def from_lists(cls, train: tuple[Task, ...] | list[Task], heldout: tuple[Task, ...] | list[Task],
                   env: Env | None = None) -> TaskCatalog:
        """A catalog of `train` and `heldout` tasks; with `env`, each task's prompt messages ([system,
        user], TRL's conversational form) are rendered once by `env.reset` (no tool runs).

        Raises:
            ValueError: a task id appears twice (across both splits), or `env` cannot reset on a task.
        """
        splits = {"train": tuple(train), "heldout": tuple(heldout)}
        by_id: dict[str, Task] = {}
        prompts: dict[str, list[dict[str, str]]] = {}
        for split, tasks in splits.items():
            for t in tasks:
                if t.id in by_id:
                    raise ValueError(f"task id {t.id!r} appears twice (second time in split {split!r})")
                by_id[t.id] = t
                if env is not None:
                    obs = env.reset(t)
                    prompts[t.id] = [{"role": "system", "content": obs.system}, {"role": "user", "content": obs.user}]
        return cls(splits, by_id, prompts)

    def __repr__(self) -> str:
        return "TaskCatalog(" + ", ".join(f"{k}: {len(v)} tasks" for k, v in self.splits.items()) + ")"

    def split(self, name: Any) -> tuple[Task, ...]:
        """The tasks of split `name`.

        Raises:
            ValueError: an unknown split name.
        """
        if not isinstance(name, str) or name not in self.splits:
            raise ValueError(f"unknown split {name!r}; expected one of {', '.join(self.splits)}")
        return self.splits[name]

    def pick(self, task_id: Any = None, split: Any = None, index: Any = None, seed: int | None = None) -> Task:
        """The task named by `task_id`, else `split`[`index`], else a random task of `split` (default
        "train", or "heldout" when the catalog has no training tasks) drawn with `seed`.

        Raises:
            ValueError: wrong argument types, an unknown id or split, an index out of range, an empty split.
        """
        if task_id is not None:
            if not isinstance(task_id, str):
                raise ValueError(f"task_id must be a string, got {type(task_id).__name__}")
            if task_id not in self.by_id:
                raise ValueError(f"unknown task_id {task_id[:200]!r}; list them with POST /<env>/tasks "
                                 '{"split": "train" | "heldout"}')
            return self.by_id[task_id]
        if split is None:
            split = "train" if self.splits["train"] else "heldout"
        tasks = self.split(split)
        if not tasks:
            raise ValueError(f"split {split!r} has no tasks")
        if index is None:
            return random.Random(seed).choice(tasks)
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError(f"index must be an integer, got {type(index).__name__}")
        if not 0 <= index < len(tasks):
            raise ValueError(f"index {index} is out of range for split {split!r} ({len(tasks)} tasks)")
        return tasks[index]

    def describe(self, task: Task, index: int) -> dict[str, Any]:
        """The public description of one task: id, family, split, index, and its prompt messages when
        the catalog rendered them (never its hidden tests or reference)."""
        out: dict[str, Any] = {"id": task.id, "family": task.family, "split": task.split, "index": index}
        if task.id in self.prompts:
            out["prompt"] = self.prompts[task.id]
        return out


def _secrets(task: Task) -> list[str]:
    """The texts of `task` that never leave the server: its hidden tests, its reference and the correct
    edit op, whole and line by line (lines of at least 8 characters, which a message could quote)."""
    whole = [*task.hidden_tests, task.reference, *(op.new for op in task.edit_ops if op.correct)]
    lines = [ln.strip() for text in whole for ln in text.splitlines() if len(ln.strip()) >= 8]
    return [t for t in whole if t.strip()] + lines


def public_failure(e: BaseException, task: Task | None, limit: int = 2000) -> str:
    """An environment failure in words for the client: the exception's type and message, or only its type
    when the message quotes any hidden test, reference or correct edit of `task` (the full traceback is
    in the server's log)."""
    msg = str(e)
    if task is not None and any(s in msg for s in _secrets(task)):
        return f"{type(e).__name__} (message withheld: it quotes the task's hidden data; see the server log)"
    return f"{type(e).__name__}: {msg}"[:limit]


def observation_from_step(res: StepResult, task_id: str, env: Env) -> AgentrlObservation:
    """The wire observation of one turn; once the episode is done it carries the reward and stats."""
    obs = AgentrlObservation(task_id=task_id, results=results_to_models(res.results), done=res.done,
                             terminated=res.terminated, truncated=res.truncated, end_reason=res.end_reason)
    if res.done:
        reward = env.reward()
        obs.reward = reward
        obs.stats = {k: float(v) for k, v in env.stats().items()}
        if reward is None:
            obs.metadata = {"unscorable": True}
    return obs


class AgentrlEnvironment(Environment[AgentrlAction, AgentrlObservation, AgentrlState]):
    """One OpenEnv session over one agentrl environment of its own (and that environment's sandbox workers).

    `reset(seed=None, episode_id=None, task_id=None, split=None, index=None)` starts an episode on the
    chosen task (TaskCatalog.pick); `step(action)` runs one turn. Protocol breaks raise
    EpisodeProtocolError (OpenEnv answers an error frame; the session lives on); an exception inside
    the environment or its sandbox ends the episode "env_error" with reward None (unscorable) and is
    logged with its traceback.

    Args:
        env_factory: builds the session's own agentrl environment (owned: closed with the session).
        catalog: the server's tasks.
        env_name: the registry name (reported in state and metadata).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_factory: Callable[[], Env], catalog: TaskCatalog, env_name: str,
                 registry: SessionRegistry | None = None):
        super().__init__()
        self._closed = False
        self._registry = registry
        if registry is not None:
            registry.add(self)  # refuses while the server drains, before any environment is built
        self._env, self._catalog, self._env_name = env_factory(), catalog, env_name
        self._task: Task | None = None
        self._episode_id: str | None = None
        self._steps = 0
        self._ended: str | None = None

    # -- OpenEnv Environment ----------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> AgentrlObservation:
        """Start an episode: `task_id`, or `split` + `index`, or a random task (see TaskCatalog.pick).
        Parameters are checked (ResetParams) before anything changes: a refused reset leaves the session
        as it was.

        Raises:
            ParameterError (a ValueError): an unknown or wrongly typed parameter, named.
            ValueError: a task that cannot be found (unknown id or split, index out of range).
            EpisodeProtocolError: the session was closed, or the server is draining.
        """
        params = check_reset_params({"seed": seed, "episode_id": episode_id, **kwargs})
        with self._request():
            return self._reset(params)

    def step(self, action: AgentrlAction, timeout_s: float | None = None, **kwargs: Any) -> AgentrlObservation:
        """Run one turn: the action's calls, its final answer, or a truncation from outside. `timeout_s`
        and `request_id` (OpenEnv's HTTP step fields) are checked (StepParams) and otherwise unused:
        the environment's own limits hold.

        Raises:
            ParameterError (a ValueError): an unknown or wrongly typed step parameter, named.
            EpisodeProtocolError: before reset, after the episode ended, on a closed session, while
                the server drains, or an action of the wrong type.
        """
        check_step_params({"timeout_s": timeout_s, **kwargs})
        with self._request():
            return self._step(action)

    @contextlib.contextmanager
    def _request(self) -> Iterator[None]:
        if self._registry is None:
            yield
            return
        self._registry.begin()
        try:
            yield
        finally:
            self._registry.end()

    def _reset(self, p: ResetParams) -> AgentrlObservation:
        self._check_open()
        task = self._catalog.pick(p.task_id, p.split, p.index, p.seed)
        try:
            obs = self._env.reset(task, seed=p.seed)
        except Exception as e:  # noqa: BLE001 - the environment failed: a worded error without task data
            log.error("environment %s failed to reset on task %s", self._env_name, task.id, exc_info=True)
            raise EpisodeProtocolError(f"the environment could not start task {task.id!r}: "
                                       f"{public_failure(e, task)}; send another reset") from None
        self._task, self._episode_id, self._steps, self._ended = task, p.episode_id, 0, None
        return AgentrlObservation(task_id=task.id, system=obs.system, user=obs.user, tools=list(obs.tools),
                                  metadata={"episode_id": p.episode_id} if p.episode_id else {})

    def _step(self, action: AgentrlAction) -> AgentrlObservation:
        self._check_open()
        if not isinstance(action, AgentrlAction):
            raise EpisodeProtocolError(f"expected an AgentrlAction, got {type(action).__name__}")
        if self._task is None:
            raise EpisodeProtocolError("step before reset: send a reset (with task_id, or split and index) first")
        if self._ended:
            raise EpisodeProtocolError(f"the episode has ended ({self._ended}); send a reset to start another")
        self._steps += 1
        try:
            res = self._run(action)
            obs = observation_from_step(res, self._task.id, self._env)
        except Exception as e:  # noqa: BLE001 - the environment or sandbox failed: unscorable, never a crash
            log.error("environment %s failed on task %s (episode unscorable)", self._env_name, self._task.id,
                      exc_info=True)
            obs = AgentrlObservation(task_id=self._task.id, done=True, truncated=True, end_reason=ENV_ERROR,
                                     metadata={"unscorable": True, "error": public_failure(e, self._task)})
        if obs.done:
            self._ended = obs.end_reason or "done"
        return obs

    def _run(self, action: AgentrlAction) -> StepResult:
        if action.calls:
            return self._env.step([c.to_call() for c in action.calls])
        if action.truncate is not None:
            return self._env.truncate(action.truncate)
        return self._env.final_answer(action.final_answer or "")

    @property
    def state(self) -> AgentrlState:
        """The session's episode state."""
        return AgentrlState(episode_id=self._episode_id, step_count=self._steps, env=self._env_name,
                            task_id=self._task.id if self._task else None,
                            turns=int(getattr(self._env, "turns", self._steps)) if self._task else 0,
                            done=self._ended is not None, end_reason=self._ended)

    def get_metadata(self) -> EnvironmentMetadata:
        """Name and description for OpenEnv's /metadata."""
        return EnvironmentMetadata(name=self._env_name, description=f"agentrl environment {self._env_name!r} "
                                   "(tool calls in, observations out; reward from hidden tests at the end)",
                                   version=_version())

    def close(self) -> None:
        """Close the environment (and its sandbox workers); later requests get EpisodeProtocolError."""
        if self._closed:
            return
        self._closed = True
        try:
            self._env.close()
        except Exception:  # noqa: BLE001 - best effort: a failing close must not break the server's cleanup
            log.warning("closing environment %s failed", self._env_name, exc_info=True)

    def _check_open(self) -> None:
        if self._closed:
            raise EpisodeProtocolError("this session is closed (idle past the session timeout, or the server "
                                       "is shutting down); open a new session")

    # -- OpenEnv TaskProvider (discovery only: ids, families, prompts; never hidden tests) ----------
    def list_splits(self) -> list[str]:
        """The split names."""
        return list(self._catalog.splits)

    def num_tasks(self, split: str) -> int:
        """How many tasks `split` has."""
        return len(self._catalog.split(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """One task's public description (IndexError out of range, as OpenEnv's route expects)."""
        tasks = self._catalog.split(split)
        if not isinstance(index, int) or not 0 <= index < len(tasks):
            raise IndexError(f"index {index!r} out of range for split {split!r} ({len(tasks)} tasks)")
        return self._describe(tasks[index], index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """Public descriptions of `split`[start:stop]."""
        tasks = self._catalog.split(split)
        idx = range(len(tasks))[slice(start, stop)]
        return [self._describe(tasks[i], i) for i in idx]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """Public descriptions of every task of `split`, each with its prompt messages."""
        return self.get_task_range(split)

    def _describe(self, task: Task, index: int) -> dict[str, Any]:
        return self._catalog.describe(task, index)

    @property
    def closed(self) -> bool:
        """True once close() ran."""
        return self._closed


class SessionRegistry:
    """The live sessions of one server (weakly held) and its drain state.

    A drain (SIGTERM) refuses new sessions and new requests, waits for the requests in flight to
    finish, and lets the server close every session's environment afterwards.
    """

    def __init__(self) -> None:
        self._live: weakref.WeakSet[AgentrlEnvironment] = weakref.WeakSet()
        self._cond = threading.Condition()
        self._in_flight = 0
        self.draining = False

    def add(self, env: AgentrlEnvironment) -> None:
        """Track `env`.

        Raises:
            EpisodeProtocolError: the server is draining (no new sessions).
        """
        with self._cond:
            if self.draining:
                raise EpisodeProtocolError("the server is shutting down; no new sessions")
            self._live.add(env)

    def begin(self) -> None:
        """A request starts (EpisodeProtocolError while draining)."""
        with self._cond:
            if self.draining:
                raise EpisodeProtocolError("the server is shutting down; this session takes no more requests")
            self._in_flight += 1

    def end(self) -> None:
        """A request finished."""
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def drain(self, timeout_s: float) -> bool:
        """Refuse new work and wait up to `timeout_s` for the requests in flight; True if none is left."""
        with self._cond:
            self.draining = True
            return self._cond.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)

    def open_count(self) -> int:
        """Sessions not yet closed."""
        with self._cond:
            return sum(not e.closed for e in self._live)

    def close_all(self) -> int:
        """Close every open session's environment; returns how many were open."""
        with self._cond:
            live = [e for e in self._live if not e.closed]
        for env in live:
            env.close()
        return len(live)


def _version() -> str:
    from agentrl import __version__

    return __version__


class SessionFactory(functools.partial):
    """A partial over AgentrlEnvironment that names itself: OpenEnv reports a failed factory by its
    `__name__`, else by `str(factory)`, and a plain partial's str is the repr of every argument (the
    catalog's tasks with their hidden tests went out in a FACTORY_ERROR frame that way)."""

    def __repr__(self) -> str:
        return self.__name__


def make_factory(env_factory: Callable[[], Env], catalog: TaskCatalog, env_name: str,
                 registry: SessionRegistry | None = None) -> SessionFactory:
    """OpenEnv's environment factory: each call builds one session, `AgentrlEnvironment(env_factory(), ...)`.

    A partial over the class, so OpenEnv reads SUPPORTS_CONCURRENT_SESSIONS from the class without
    building a probe instance; its name and repr are `agentrl-<env>-session`.
    """
    factory = SessionFactory(AgentrlEnvironment, env_factory, catalog, env_name, registry)
    factory.__name__ = f"agentrl-{env_name}-session"
    return factory
