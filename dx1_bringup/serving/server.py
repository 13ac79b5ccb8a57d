"""``dx1 serve``: an OpenAI-compatible HTTP API over the serving engines, on FastAPI and uvicorn.

Why this stack: FastAPI turns a pydantic model of the request body into validation with a precise message per
field (answered here as OpenAI's ``{"error": {...}}`` with status 400) and streams server-sent events through
starlette; uvicorn is a plain ASGI server (h11, no native build).  The app is thin: it validates, picks the
replica with the fewest requests in flight, and relays the engine's events; the engines run in their own
threads (:mod:`.async_engine`), never inside the event loop.

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions`` (``prompt``, ``max_tokens``,
``temperature``, ``top_p``, ``seed``, ``n``, ``stop``, ``stream``; the answer carries ``usage``; a stream is
server-sent events ending in ``data: [DONE]``), ``GET /metrics`` (Prometheus text format).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import uvicorn
from dx1_driver import Device
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from .async_engine import AsyncEngine, EngineFailed, Overloaded
from .engine import EngineConfig, LLMEngine, TokenEvent
from .metrics import ServingMetrics
from .quant_model import QuantCharLM
from .sequence import SamplingParams

__all__ = ["CompletionRequest", "MODEL_NAME", "create_app", "error_body", "open_engines", "serve_in_thread"]

#: The name the server gives the model in /v1/models.
MODEL_NAME = "dx1-charlm"

#: The largest ``n`` a request may ask for.
MAX_N = 8


class CompletionRequest(BaseModel):
    """The body of ``POST /v1/completions`` (OpenAI's fields that this server implements; others are ignored)."""

    model_config = ConfigDict(strict=True)

    model: str
    prompt: str
    max_tokens: StrictInt = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: StrictInt | None = None
    n: StrictInt = Field(1, ge=1, le=MAX_N)
    stop: str | list[str] | None = Field(None)
    stream: StrictBool = False


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if len(stops) > 4 or any(not s for s in stops):
        raise ValueError("stop must be a non-empty string or a list of at most 4 non-empty strings")
    return stops


class _Relay:
    """One request's events across the replicas.

    The request goes to the healthy replica with the fewest requests in flight.  If that replica's device
    fails, each sample that has not ended continues on another healthy replica as a request of its own whose
    prompt is the original prompt plus the text the sample has emitted, for the tokens it still may
    generate: the stream goes on with no token lost or repeated (greedy samples give exactly the text they
    would have; a seeded sample continues with another seed).  With no healthy replica left, the request
    ends with :class:`EngineFailed`.
    """

    def __init__(self, engines: list[AsyncEngine], rid: str, prompt: str, params: SamplingParams, n: int):
        self.engines, self.rid, self.prompt, self.params, self.n = engines, rid, prompt, params, n
        self.texts, self.tokens, self.base, self.done = [""] * n, [0] * n, [0] * n, [False] * n
        self.out: asyncio.Queue = asyncio.Queue()
        self.live: list[tuple[AsyncEngine, str]] = []
        self.tasks: list[asyncio.Task] = []
        self.failovers = 0

    def _pick(self) -> AsyncEngine:
        healthy = [e for e in self.engines if e.healthy]
        if not healthy:
            raise Overloaded("no device is left to serve the request")
        return min(healthy, key=lambda e: e.outstanding)

    def _follow(self, engine: AsyncEngine, rid: str, queue: asyncio.Queue, indices: list[int]) -> None:
        async def pump() -> None:
            while True:
                item = await queue.get()
                self.out.put_nowait((engine, indices, item))
                if isinstance(item, EngineFailed):
                    return

        self.live.append((engine, rid))
        self.tasks.append(asyncio.create_task(pump()))

    def start(self) -> None:
        """Submit the request (ValueError: the model cannot take it; Overloaded: no replica can now)."""
        engine = self._pick()
        self._follow(engine, self.rid, engine.submit(self.rid, self.prompt, self.params, self.n), list(range(self.n)))

    def _continue(self, i: int, failure: EngineFailed) -> None:
        try:
            engine = self._pick()
        except Overloaded:
            raise EngineFailed(f"{failure} and no replica is left") from None
        self.failovers += 1
        # Tokens are characters: what the sample emitted is where it resumes (text it held back while it could
        # still become a stop string is generated again).
        self.base[i] = len(self.texts[i])
        seed = None if self.params.seed is None else self.params.seed + 7919 * self.failovers
        params = dataclasses.replace(self.params, max_tokens=self.params.max_tokens - self.base[i], seed=seed)
        rid = f"{self.rid}-{i}-{self.failovers}"
        try:
            queue = engine.submit(rid, self.prompt + self.texts[i], params, 1)
        except (ValueError, Overloaded) as e:
            raise EngineFailed(f"{failure}; its sample {i} could not continue elsewhere: {e}") from None
        self._follow(engine, rid, queue, [i])

    async def events(self) -> AsyncIterator[TokenEvent]:
        """The request's events, sample indices as the client sees them, until every sample has ended."""
        while not all(self.done):
            engine, indices, item = await self.out.get()
            if isinstance(item, EngineFailed):
                if not item.device:
                    raise item
                for i in indices:
                    if not self.done[i]:
                        self._continue(i, item)
                continue
            i = indices[item.index]
            self.texts[i] += item.text
            self.tokens[i] = self.base[i] + item.tokens
            self.done[i] = item.finish_reason is not None
            yield dataclasses.replace(item, index=i, tokens=self.tokens[i])

    def close(self) -> None:
        """Abort what is still running anywhere (nothing once the request has ended)."""
        for engine, rid in self.live:
            engine.abort(rid)
        for task in self.tasks:
            task.cancel()


def create_app(engines: list[AsyncEngine], model_name: str, metrics: ServingMetrics) -> FastAPI:
    """The ASGI app over ``engines`` (data-parallel replicas of one model), started and stopped with the app."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        for e in engines:
            e.start()
        try:
            yield
        finally:
            for e in engines:
                await asyncio.to_thread(e.stop)

    app = FastAPI(title="dx1 serve", lifespan=lifespan)
    created = int(time.time())

    def reject(status: int, body: dict) -> JSONResponse:
        metrics.requests_rejected.labels(str(status)).inc()
        return JSONResponse(body, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = [str(p) for p in first.get("loc", ()) if p != "body"]
        message = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            message, where = "the request body is not valid JSON", []
        elif where:
            message = f"{'.'.join(where)}: {message}"
        return reject(400, error_body(message, param=where[0] if where else None))

    @app.get("/health")
    async def health() -> dict:
        failed = [e.name for e in engines if not e.healthy]
        status = "ok" if not failed else "degraded" if len(failed) < len(engines) else "down"
        return {"status": status, "devices": [e.name for e in engines], "failed": failed}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created,
                                            "owned_by": "dx1-bringup"}]}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest):
        if body.model != model_name:
            return reject(400, error_body(f"the model {body.model!r} does not exist; this server serves "
                                          f"{model_name!r}", param="model", code="model_not_found"))
        try:
            params = SamplingParams(max_tokens=body.max_tokens, temperature=body.temperature, top_p=body.top_p,
                                    seed=body.seed, stop=_stops(body.stop))
        except ValueError as e:
            return reject(400, error_body(str(e), param="stop"))
        rid = f"cmpl-{uuid.uuid4().hex[:24]}"
        relay = _Relay(engines, rid, body.prompt, params, body.n)
        try:
            relay.start()
        except ValueError as e:
            return reject(400, error_body(str(e), param="prompt"))
        except Overloaded as e:
            return reject(429, error_body(str(e), kind="rate_limit_error"))
        start = time.monotonic()
        prompt_tokens = len(body.prompt)
        head = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model_name}
        events = relay.events

        if not body.stream:
            texts, reasons = [""] * body.n, [None] * body.n
            try:
                async for e in events():
                    texts[e.index] += e.text
                    reasons[e.index] = e.finish_reason
            except EngineFailed as e:
                return JSONResponse(error_body(str(e), kind="server_error"), status_code=500)
            finally:
                relay.close()  # a no-op once finished; frees the blocks if the client went away
            counts = relay.tokens
            metrics.observe_request(time.monotonic() - start)
            return {**head, "choices": [{"text": t, "index": i, "logprobs": None, "finish_reason": r}
                                        for i, (t, r) in enumerate(zip(texts, reasons, strict=True))],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sum(counts),
                              "total_tokens": prompt_tokens + sum(counts)}}

        async def sse() -> AsyncIterator[str]:
            counts = relay.tokens
            try:
                async for e in events():
                    chunk = {**head, "choices": [{"text": e.text, "index": e.index, "logprobs": None,
                                                  "finish_reason": e.finish_reason}]}
                    yield f"data: {json.dumps(chunk)}\n\n"
                metrics.observe_request(time.monotonic() - start)
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sum(counts),
                         "total_tokens": prompt_tokens + sum(counts)}
                yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n"
            except EngineFailed as e:
                yield f"data: {json.dumps(error_body(str(e), kind='server_error'))}\n\n"
            finally:
                relay.close()  # the client disconnected mid-stream: free its blocks now
            yield "data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream")

    return app


def open_engines(devices: list[str], model: QuantCharLM, config: EngineConfig, metrics: ServingMetrics, *,
                 max_requests: int = 64,
                 on_step: Callable[[str, LLMEngine], None] | None = None) -> list[AsyncEngine]:
    """One engine per device string (data-parallel replicas), each closing its device when stopped.

    ``on_step(device, engine)`` is called in the engine's thread after every step (the bench's KV samples).

    Raises
    ------
    dx1_driver.DriverError
        A device does not open (the ones already opened are closed again).
    """
    engines: list[AsyncEngine] = []
    try:
        for name in devices:
            dev = Device.open(name)
            try:
                engine = LLMEngine(dev, model, config)
            except BaseException:
                dev.close()
                raise

            def close(engine: LLMEngine = engine, dev: Device = dev) -> None:
                engine.close()
                dev.close()

            def observe(eng: LLMEngine, events: list[TokenEvent], seconds: float, name: str = name) -> None:
                metrics.observe_step(name, eng, events, seconds)
                if on_step is not None:
                    on_step(name, eng)

            engines.append(AsyncEngine(engine, name, max_requests=max_requests, on_close=close, observer=observe))
    except BaseException:
        for e in engines:
            e.stop()
        raise
    return engines


@contextlib.contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0, *,
                    timeout: float = 30.0) -> Iterator[str]:
    """Run ``app`` on uvicorn in a thread (``port`` 0: a free one); yields its URL, stops it when the block ends.

    Raises
    ------
    RuntimeError
        The server did not start within ``timeout`` seconds, or did not stop within it.
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"the server on {host}:{sock.getsockname()[1]} did not start within {timeout} s")
            time.sleep(0.02)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()
        if thread.is_alive():
            raise RuntimeError(f"the server did not stop within {timeout} s")
