"""HTTP front of the PolicyServer: FastAPI routes for OpenAI chat completions, and a uvicorn thread.

Not the sampling or the traces (agentrl.serve.policy.server). Routes:

  POST /v1/chat/completions         (and /r/{rollout_id}/v1/chat/completions) streaming SSE or JSON
  GET  /v1/models                   (and /r/{rollout_id}/v1/models)
  POST /rollouts/{rollout_id}       open a rollout (optional JSON body: budget fields)
  GET  /rollouts/{rollout_id}/trace the calls recorded so far
  DELETE /rollouts/{rollout_id}     close it; returns its trace
  GET  /health

The rollout is the URL prefix if present, else the API key (`Authorization: Bearer <id>`). A stream
is sent once the completion is sampled (the whole turn is sampled in one batch; the chunks then follow
OpenAI's order: role, content, tool calls, finish reason, usage, `[DONE]`). Every refusal is a 4xx
with an OpenAI-style error body; a client that disconnects mid-stream disturbs no other request (its
call is still recorded: it was sampled).
"""

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agentrl.report.results import to_json_ready
from agentrl.serve.policy.chat_format import (
    RequestError,
    completion_body,
    loads_strict,
    logprobs_content,
    parse_request,
    stream_chunks,
)
from agentrl.serve.policy.server import PolicyServer, RolloutBudget

log = logging.getLogger("agentrl.serve")


def _rollout_id(request: Any, prefix: str | None) -> str | None:
    if prefix:
        return prefix
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return request.headers.get("x-api-key") or None


class StrictJSONResponse(JSONResponse):
    """A JSON response that is always RFC 8259 JSON: non-finite floats are written as null
    (agentrl.report.results.to_json_ready), so no stored value can turn a route into a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(to_json_ready(content), ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")


def _error(e: RequestError) -> JSONResponse:
    return StrictJSONResponse(e.body(), status_code=e.status)


async def _read_body(request: Any, max_bytes: int) -> bytes:
    """The raw body, refused (413) as soon as it is known to pass `max_bytes`: from Content-Length before
    any byte is read, else while it streams in. Reading awaits the socket, so it never holds the loop."""
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > max_bytes:
        raise RequestError(413, f"request body of {size} bytes exceeds the {max_bytes}-byte limit", "too_large")
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > max_bytes:
            raise RequestError(413, f"request body exceeds the {max_bytes}-byte limit", "too_large")
    return bytes(raw)


def _decode_json(raw: bytes) -> Any:
    try:
        return loads_strict(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise RequestError(400, f"request body is not valid JSON: {str(e)[:200]}", "invalid_json") from None


async def _read_json(request: Any, max_bytes: int) -> Any:
    return _decode_json(await _read_body(request, max_bytes))


def _usage(record: Any) -> dict[str, int]:
    p, c = len(record.prompt_ids), len(record.completion_ids)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _sse(chunks: list[dict[str, Any]]):
    async def gen():
        for ch in chunks:
            yield f"data: {json.dumps(to_json_ready(ch), ensure_ascii=False, allow_nan=False)}\n\n"
            await asyncio.sleep(0)  # a point where a disconnected client's cancellation lands
        yield "data: [DONE]\n\n"
    return gen()


def create_app(server: PolicyServer, *, prepare_workers: int = 4) -> FastAPI:
    """The FastAPI app over `server` (routes in the module docstring).

    Nothing that grows with a request runs on the event loop: JSON decoding, request checks, the chat
    template and the tokenizer run on `prepare_workers` threads of the app's own pool (so large requests
    cannot use up the thread pool that other routes share), and sampling runs on the server's worker.
    """
    app = FastAPI(title="agentrl policy server", docs_url=None, redoc_url=None, openapi_url=None,
                  default_response_class=StrictJSONResponse)
    prepare_pool = concurrent.futures.ThreadPoolExecutor(max_workers=prepare_workers,
                                                         thread_name_prefix="agentrl-policy-prepare")
    app.state.prepare_pool = prepare_pool

    def prepare(rid: str | None, raw: bytes) -> tuple[Any, concurrent.futures.Future]:
        req = parse_request(_decode_json(raw))
        return req, server.submit(rid, req)

    async def chat(request: Request, prefix: str | None = None):
        rid = _rollout_id(request, prefix)
        try:
            raw = await _read_body(request, server.max_request_bytes)
            req, fut = await asyncio.get_running_loop().run_in_executor(prepare_pool, prepare, rid, raw)
            reply, record = await asyncio.wrap_future(fut)
        except RequestError as e:
            server.refuse(rid)
            return _error(e)
        except Exception as e:  # noqa: BLE001 - the sampler failed: a 500 naming it, the server lives on
            return _error(RequestError(500, f"sampling failed: {type(e).__name__}: {str(e)[:300]}", "server_error"))
        name = req.model or server.model_name
        cid = f"chatcmpl-{rid}-{record.index}"
        lps = None
        if req.logprobs:
            pieces = [server.tokenizer.decode([t], skip_special_tokens=False) for t in record.completion_ids]
            lps = logprobs_content(pieces, list(record.logprobs))
        if req.stream:
            chunks = stream_chunks(cid, name, reply, _usage(record) if req.include_usage else None, lps)
            return StreamingResponse(_sse(chunks), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return StrictJSONResponse(completion_body(cid, name, reply, _usage(record), lps))

    async def models():  # constant work: answered on the loop, never queued behind the thread pool
        return {"object": "list", "data": [{"id": server.model_name, "object": "model", "created": int(time.time()),
                                            "owned_by": "agentrl"}]}

    app.add_api_route("/v1/chat/completions", chat, methods=["POST"])
    app.add_api_route("/r/{prefix}/v1/chat/completions", chat, methods=["POST"])
    app.add_api_route("/v1/models", models, methods=["GET"])

    async def prefixed_models(prefix: str):
        return await models()

    app.add_api_route("/r/{prefix}/v1/models", prefixed_models, methods=["GET"])

    _rollout_routes(app, server)
    return app


def _rollout_routes(app: FastAPI, server: PolicyServer) -> None:
    """/health and the /rollouts routes (open, trace, close)."""

    @app.get("/health")
    async def health():  # constant work: answered on the loop, never queued behind the thread pool
        return {"status": "ok", "policy_version": server.policy_version, "rollouts": len(server.rollout_ids()),
                **server.stats}

    @app.post("/rollouts/{rollout_id}")
    async def open_rollout(rollout_id: str, request: Request):
        try:
            body = await _read_json(request, 1 << 16) if int(request.headers.get("content-length") or 0) else {}
            budget = RolloutBudget.from_json(body) if body not in ({}, None) else None  # none: the server's
            server.open_rollout(rollout_id, budget, client=True)
        except RequestError as e:
            return _error(e)
        except (TypeError, ValueError) as e:
            return _error(RequestError(400, str(e)))
        return {"rollout_id": rollout_id}

    @app.get("/rollouts/{rollout_id}/trace")
    def get_trace(rollout_id: str):
        try:
            return server.trace(rollout_id).to_dict()
        except KeyError:
            return StrictJSONResponse(RequestError(404, f"unknown rollout {rollout_id!r}").body(), status_code=404)

    @app.delete("/rollouts/{rollout_id}")
    def close(rollout_id: str):
        try:
            return server.close_rollout(rollout_id).to_dict()
        except KeyError:
            return StrictJSONResponse(RequestError(404, f"unknown rollout {rollout_id!r}").body(), status_code=404)


class ServerThread:
    """uvicorn serving `create_app(server)` in a background thread, on 127.0.0.1:port or a unix socket.

    Use as a context manager; `port=0` picks a free port (read `.port` / `.base_url` after start).
    """

    def __init__(self, server: PolicyServer, *, host: str = "127.0.0.1", port: int = 0, uds: str | None = None):
        import uvicorn

        self.server = server
        self._app = create_app(server)
        config = uvicorn.Config(self._app, host=host, port=port, uds=uds, log_level="warning",
                                access_log=False, lifespan="off", timeout_keep_alive=30)
        self._uv = uvicorn.Server(config)
        self._uv.install_signal_handlers = lambda: None  # not the main thread
        self._thread = threading.Thread(target=self._uv.run, name="agentrl-policy-http", daemon=True)
        self.host, self.port, self.uds = host, port, uds

    def start(self, timeout_s: float = 30.0) -> "ServerThread":
        """Start serving. Raises RuntimeError if uvicorn does not come up within `timeout_s`."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._uv.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"policy server did not start on {self.uds or f'{self.host}:{self.port}'}")
            time.sleep(0.02)
        if self.uds is None and self.port == 0:
            self.port = self._uv.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def base_url(self) -> str:
        """`http://host:port/v1` (TCP only)."""
        return f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        """Stop uvicorn (up to 15 s) and the app's request-preparing threads."""
        self._uv.should_exit = True
        self._thread.join(timeout=15)
        self._app.state.prepare_pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
