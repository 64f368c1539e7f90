"""Build and run the `agentrl serve` app: EnvServerConfig -> OpenEnv's FastAPI app -> uvicorn, with a drain.

Not the session logic (serve/env/server.py) and not the CLI flags (cli/serve.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the server module imports OpenEnv: keep this one importable without the extra
    from agentrl.serve.env.server import SessionRegistry, TaskCatalog

log = logging.getLogger("agentrl.serve")


@dataclass
class EnvServerConfig:
    """Everything `agentrl serve` needs.

    Attributes:
        env: environment registry name.
        tasks: task source (bugfix | mbpp | humaneval | wordle | a task JSONL); "" = the environment's
            default (python-session: mbpp, wordle: wordle, else bugfix).
        train_size, eval_size, seed: as in `agentrl train` (task-set sizes; 0 = the source's default).
        max_turns: the environment's turn limit per episode.
        host, port: where to listen (loopback by default).
        max_concurrent_envs: open sessions at most; the next one is refused with OpenEnv's
            CAPACITY_REACHED error naming the limit.
        session_timeout_s: a session idle this long is closed (its environment and sandbox workers too); None: never.
        drain_timeout_s: on SIGTERM/SIGINT, how long in-flight requests may finish before the rest are cut.
        max_message_bytes: largest WebSocket message accepted; a larger one closes that connection only.
        env_kwargs: extra constructor arguments of the environment (tests, custom setups).
    """

    env: str = "python-session"
    tasks: str = ""
    train_size: int = 0
    eval_size: int = 0
    seed: int = 0
    max_turns: int = 6
    host: str = "127.0.0.1"
    port: int = 8000
    max_concurrent_envs: int = 64
    session_timeout_s: float | None = 600.0
    drain_timeout_s: float = 30.0
    max_message_bytes: int = 4 * 1024 * 1024
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def task_source(self) -> str:
        """The task source to serve (`tasks`, else the environment's default)."""
        from agentrl.envs import env_specs

        spec = env_specs().get(self.env)
        return self.tasks or (spec.default_tasks if spec is not None else "bugfix")

    def validate(self) -> None:
        """ValueError naming the first bad field."""
        if not 1 <= self.max_concurrent_envs <= 4096:
            raise ValueError(f"max_concurrent_envs must be in [1, 4096], got {self.max_concurrent_envs}")
        if self.session_timeout_s is not None and not self.session_timeout_s > 0:
            raise ValueError(f"session_timeout_s must be > 0 (or None), got {self.session_timeout_s}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        for name in ("train_size", "eval_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: the source's default), got {getattr(self, name)}")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if not self.drain_timeout_s >= 0:  # NaN too: it served, then shutdown raised "cannot convert float NaN"
            raise ValueError(f"drain_timeout_s must be a number of seconds >= 0, got {self.drain_timeout_s}")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")


@dataclass
class ServedEnv:
    """What `build_app` made: the app and the resources a shutdown must release."""

    app: Any
    registry: SessionRegistry
    catalog: TaskCatalog
    sandbox: Any
    env_name: str

    def shutdown(self) -> None:
        """Close every session's environment and the shared sandbox (idempotent)."""
        n = self.registry.close_all()
        if n:
            log.info("closed %d open session(s)", n)
        if self.sandbox is not None:
            self.sandbox.close()


def require_openenv() -> None:
    """ValueError saying how to install the optional extra when OpenEnv is missing."""
    try:
        import openenv  # noqa: F401
    except ImportError as e:
        raise ValueError("this needs OpenEnv and TRL, the optional extra: pip install 'agentrl[trl]' "
                         f"(after torch; scripts/setup.sh installs it) ({e})") from None


def _env_factory(cfg: EnvServerConfig, sandbox: Any):
    """(spec, zero-arg factory of fresh environments) configured as `agentrl train` would configure them."""
    from agentrl.envs.registry import get_spec
    from agentrl.rl.config import RLConfig

    spec = get_spec(cfg.env)
    run_cfg = RLConfig.from_flat(env=cfg.env, tasks=cfg.task_source(), max_turns=cfg.max_turns, seed=cfg.seed)
    kwargs = {**spec.kwargs_from_config(run_cfg.env, sandbox=sandbox), **cfg.env_kwargs}
    return spec, lambda: spec.make(**kwargs)


def build_app(cfg: EnvServerConfig) -> ServedEnv:
    """The OpenEnv app for `cfg` (tasks loaded, prompts rendered, one shared sandbox).

    Raises:
        ValueError: a bad config, an unknown environment or task source, tasks the environment cannot run.
        FileNotFoundError: a dataset that cannot be found.
    """
    require_openenv()
    from openenv.core.env_server import create_app
    from openenv.core.env_server.types import ConcurrencyConfig

    from agentrl.envs.registry import check_env_runs
    from agentrl.sandbox import Sandbox
    from agentrl.serve.env.server import SessionRegistry, TaskCatalog, make_factory
    from agentrl.serve.env.types import AgentrlAction, AgentrlObservation, AgentrlState
    from agentrl.tasks.sets import task_sets

    cfg.validate()
    sets = task_sets(cfg.task_source(), train_size=cfg.train_size, eval_size=cfg.eval_size, seed=cfg.seed)
    sandbox = Sandbox()
    try:
        spec, new_env = _env_factory(cfg, sandbox)
        check_env_runs(cfg.env, sets.train + sets.heldout, sets.source)
        probe = new_env()
        try:
            catalog = TaskCatalog.from_lists(sets.train, sets.heldout, env=probe)
        finally:
            probe.close()
        registry = SessionRegistry()
        app = create_app(make_factory(new_env, catalog, spec.name, registry), AgentrlAction, AgentrlObservation,
                         env_name=spec.name, state_cls=AgentrlState,
                         concurrency_config=ConcurrencyConfig(max_concurrent_envs=cfg.max_concurrent_envs,
                                                              session_timeout=cfg.session_timeout_s))
    except BaseException:
        sandbox.close()
        raise
    _add_error_handlers(app)
    app.add_middleware(FrameGate)
    app.add_middleware(DrainGate, registry=registry)
    app.add_middleware(ParamGate, max_body_bytes=cfg.max_message_bytes)
    served = ServedEnv(app, registry, catalog, sandbox, spec.name)
    app.router.on_shutdown.append(served.shutdown)
    return served


def _add_error_handlers(app: Any) -> None:
    """HTTP answers for our errors: protocol breaks 409, bad parameters 400 (OpenEnv's routes let them
    propagate; without these they would be bare 500s)."""
    from fastapi.responses import JSONResponse

    from agentrl.serve.env.server import EpisodeProtocolError

    async def protocol(request: Any, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    async def bad_value(request: Any, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)[:2000]})

    app.add_exception_handler(EpisodeProtocolError, protocol)
    app.add_exception_handler(ValueError, bad_value)


DRAINING_MESSAGE = ("the server is shutting down (draining after a stop signal): it opens no new sessions; "
                    "connect to a restarted server")


class DrainGate:
    """ASGI middleware: while the server drains, a new WebSocket session gets one worded error frame
    (OpenEnv's error shape, code SESSION_ERROR) and a 1012 close ("service restart"), before OpenEnv
    builds anything. Without it the refusal surfaced as OpenEnv's FACTORY_ERROR, which names the
    factory by its str. HTTP requests pass through (the session registry refuses them with a 409)."""

    def __init__(self, app: Any, registry: SessionRegistry):
        self.app, self.registry = app, registry

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket" or not self.registry.draining:
            await self.app(scope, receive, send)
            return
        import json

        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        frame = {"type": "error", "data": {"message": DRAINING_MESSAGE, "code": "SESSION_ERROR"}}
        await send({"type": "websocket.send", "text": json.dumps(frame)})
        await send({"type": "websocket.close", "code": 1012, "reason": "server shutting down"})


class FrameGate:
    """ASGI middleware: a WebSocket text frame that is not a JSON object (a list, a string, a number, JSON
    nested past the recursion limit, an integer of too many digits), or a lone surrogate outside its `data`,
    gets one error frame (OpenEnv's shape,
    code INVALID_JSON) and the session goes on. OpenEnv's loop called `.get` on it, or json.loads raised
    RecursionError, outside its error handling: an "'list' object has no attribute 'get'" frame and the
    session closed. A binary frame too (OpenEnv's receive_text: a "'text'" frame and the session closed). Text
    that is not JSON at all passes through (OpenEnv answers it and goes on)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def checked_receive() -> Any:
            while True:
                msg = await receive()
                text = msg.get("text") if msg["type"] == "websocket.receive" else None
                if text is None and msg["type"] == "websocket.receive":  # a binary frame: OpenEnv reads text only
                    why = (f"a binary frame ({len(msg.get('bytes') or b'')} bytes) is not a message; send each "
                           "message as a JSON text frame")
                elif text is None:
                    return msg
                elif len(text) > 1 << 16:  # parsing a large frame would hold the event loop
                    import anyio.to_thread

                    why = await anyio.to_thread.run_sync(_frame_error, text)
                else:
                    why = _frame_error(text)
                if not why:
                    return msg
                import json

                frame = {"type": "error", "data": {"message": why, "code": "INVALID_JSON"}}
                await send({"type": "websocket.send", "text": json.dumps(frame)})

        await self.app(scope, checked_receive, send)


def _frame_error(text: str) -> str:
    """Why a WebSocket text frame is refused before OpenEnv sees it ("" if it passes; see FrameGate)."""
    import json

    from agentrl.preflight import loads_json, lone_surrogate_path

    try:
        data = loads_json(text, "the message")
    except json.JSONDecodeError:
        return ""
    except ValueError as e:
        return str(e)[:500]
    kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(data), "a number")
    if not isinstance(data, dict):
        return f"a message is a JSON object with a 'type', got {kind}"
    # outside `data` (whose strings the action and parameter checks read as U+FFFD or refuse by name), a lone
    # surrogate reached OpenEnv's error echo, which could not be written as JSON: the session closed
    where = lone_surrogate_path({k: v for k, v in data.items() if k != "data"})
    if where is not None:
        return f"'{where or '(a key)'}' holds a lone surrogate (a \\ud800-\\udfff escape), which is not UTF-8 text"
    return ""


class ParamGate:
    """ASGI middleware: the body of HTTP `POST /reset` and `POST /step` is checked with the same strict
    checks as a WebSocket frame and the Python client (check_reset_params / check_step_params) before
    OpenEnv's request models see it; those coerce ("1" became seed 1 over HTTP, an error on the
    WebSocket). A refusal is a 400 naming the parameter; a body past `max_body_bytes` is a 413."""

    def __init__(self, app: Any, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope.get("method") != "POST" or path not in ("/reset", "/step"):
            await self.app(scope, receive, send)
            return
        body, more = bytearray(), True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                return  # the client went away
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > self.max_body_bytes:
                await _json_answer(send, 413, f"request body over the {self.max_body_bytes}-byte limit")
                return
        if len(body) > 1 << 16:  # parsing a large body would hold the event loop: a worker thread does it
            import anyio.to_thread

            why = await anyio.to_thread.run_sync(_param_error, path, bytes(body))
        else:
            why = _param_error(path, bytes(body))
        if why:
            await _json_answer(send, 400, why)
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


def _param_error(path: str, body: bytes) -> str:
    """Why the reset/step body is refused ("" if it passes, or if it is not JSON: OpenEnv answers that; JSON
    nested past the recursion limit or with a huge integer is refused here, as json.loads raised a 500)."""
    import json

    from agentrl.preflight import loads_json
    from agentrl.serve.env.types import ParameterError, check_reset_params, check_step_params

    try:
        data = loads_json(body, f"the {path[1:]} request body") if body.strip() else {}
    except json.JSONDecodeError:
        return ""
    except ValueError as e:
        return str(e)
    if not isinstance(data, dict):
        return f"the {path[1:]} request body must be a JSON object, got {type(data).__name__}"
    try:
        if path == "/reset":
            check_reset_params(data)
        else:
            check_step_params({k: v for k, v in data.items() if k != "action"})
    except ParameterError as e:
        return str(e)
    return ""


async def _json_answer(send: Any, status: int, detail: str) -> None:
    import json

    payload = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def _uvicorn_config(cfg: EnvServerConfig, app: Any) -> Any:
    import uvicorn

    return uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning", lifespan="on",
                          ws_max_size=cfg.max_message_bytes, timeout_graceful_shutdown=cfg.drain_timeout_s,
                          ws_ping_interval=20.0, ws_ping_timeout=20.0)


def run_server(cfg: EnvServerConfig, *, ready: Any = None) -> int:
    """Serve until SIGTERM/SIGINT, then drain: stop accepting, let in-flight requests finish (up to
    `drain_timeout_s`), close every session and the sandbox, return 0.

    Args:
        ready: optional callable run once the socket listens, with the bound (host, port).

    Raises:
        ValueError: an invalid `cfg` (EnvServerConfig.validate), or `cfg.port` already in use on `cfg.host`
            (both checked before the environment is built).
    """
    from agentrl.preflight import check_port_free

    cfg.validate()  # before the port probe: `--port -1` is a bad port, not a bad --host
    check_port_free(cfg.host, cfg.port)
    served = build_app(cfg)
    server = _ReadyServer(_uvicorn_config(cfg, served.app), ready, served.registry, cfg.drain_timeout_s)
    where = (f"http://{cfg.host}:{cfg.port}" if cfg.port
             else f"http://{cfg.host} (port 0: a free port, named when listening)")
    log.warning("agentrl serve: %s on %d train / %d held-out tasks at %s (max %d sessions)",
                served.env_name, len(served.catalog.splits["train"]), len(served.catalog.splits["heldout"]),
                where, cfg.max_concurrent_envs)
    try:
        with _signals_end_quietly():
            server.run()
    finally:
        served.shutdown()
    log.warning("agentrl serve: drained and stopped")
    return 0


@contextlib.contextmanager
def _signals_end_quietly() -> Iterator[None]:
    """uvicorn re-raises the signal it drained on once it has stopped; with these no-op handlers in place
    that re-raise returns, so a drained SIGTERM ends the process with status 0 (main thread only)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.signal(sig, lambda s, f: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


class BackgroundServer:
    """An env server in a daemon thread, for tests, benchmarks and notebooks (loopback, a free port):

        with BackgroundServer(EnvServerConfig(env="wordle", port=0)) as url:
            ...

    Attributes (inside the block): url, served (the ServedEnv).

    Raises:
        RuntimeError: the server did not start within `start_timeout_s`.
    """

    def __init__(self, cfg: EnvServerConfig, start_timeout_s: float = 120.0):
        self.cfg, self.start_timeout_s = cfg, start_timeout_s
        self.url = ""
        self.served: ServedEnv | None = None
        self._server: Any = None
        self._thread: Any = None

    def __enter__(self) -> str:
        import threading

        started = threading.Event()

        def ready(host: str, port: int) -> None:
            self.url = f"http://{host}:{port}"
            started.set()

        self.served = build_app(self.cfg)
        self._server = _ReadyServer(_uvicorn_config(self.cfg, self.served.app), ready, self.served.registry,
                                    self.cfg.drain_timeout_s)
        self._thread = threading.Thread(target=self._server.run, name="agentrl-env-server", daemon=True)
        self._thread.start()
        if not started.wait(self.start_timeout_s):
            self.__exit__(None, None, None)
            raise RuntimeError(f"the env server did not start within {self.start_timeout_s} s")
        return self.url

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.drain_timeout_s + 30)
        if self.served is not None:
            self.served.shutdown()


def _server_class():
    import threading
    import time

    import uvicorn

    class ReadyServer(uvicorn.Server):
        """uvicorn.Server that reports the bound address once it listens (port 0 picks a free one), and
        drains on SIGTERM/SIGINT before uvicorn's own shutdown: new sessions and requests are refused,
        the requests in flight finish and their answers go out, then uvicorn closes the connections
        (1012) and the lifespan shutdown closes every session. A second signal exits at once."""

        def __init__(self, config: Any, ready: Any, registry: Any = None, drain_timeout_s: float = 30.0):
            super().__init__(config)
            self._ready, self._registry, self._drain_timeout_s = ready, registry, drain_timeout_s
            self._draining = False

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self._ready is not None and self.servers:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                self._ready(host, port)

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self._registry is None or self._draining:
                return super().handle_exit(sig, frame)
            self._draining = True
            log.warning("agentrl serve: signal %s, draining (at most %.0f s)", sig, self._drain_timeout_s)
            threading.Thread(target=self._drain_then_exit, args=(sig, frame), daemon=True).start()

        def _drain_then_exit(self, sig: int, frame: Any) -> None:
            if not self._registry.drain(self._drain_timeout_s):
                log.warning("agentrl serve: requests still running after %.0f s; stopping anyway",
                            self._drain_timeout_s)
            time.sleep(0.3)  # the last answers are written by the event loop right after their steps return
            uvicorn.Server.handle_exit(self, sig, frame)

    return ReadyServer


def _ReadyServer(config: Any, ready: Any, registry: Any = None, drain_timeout_s: float = 30.0) -> Any:  # noqa: N802
    return _server_class()(config, ready, registry, drain_timeout_s)
