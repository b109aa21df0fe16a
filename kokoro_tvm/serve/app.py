"""The HTTP app: OpenAI's speech API and the routes a client looks for, over one ``Kokoro``.

Routes: ``POST /v1/audio/speech``, ``POST /dev/captioned_speech`` (audio with word timestamps),
``GET /v1/models``, ``GET /v1/audio/voices``, ``GET /`` (the playground page, page/index.html),
``GET /health``, ``GET /metrics``. Errors have OpenAI's shape (speech_request.APIError); with an
API key, every ``/v1`` route wants ``Authorization: Bearer KEY``. docs/serving.md describes the
scheduling, limits and figures.
"""
from __future__ import annotations

import base64
import contextlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from importlib import resources
from typing import AsyncIterator

from sse_starlette.sse import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kokoro_tvm.errors import UserError
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime.kokoro import Kokoro
from kokoro_tvm.runtime.speech import Chunk
from kokoro_tvm.runtime.voices import describe_voice
from kokoro_tvm.serve.drain import Drain, Draining
from kokoro_tvm.serve.encoders import FORMATS, Encoder
from kokoro_tvm.serve.metrics import ServerMetrics
from kokoro_tvm.serve.scheduler import DeadlineExceeded, QueueFull, Scheduler
from kokoro_tvm.serve.speech_request import (
    MODELS,
    OPENAI_VOICES,
    APIError,
    SpeechRequest,
    parse_json,
    speech_request,
)

log = logging.getLogger("kokoro_tvm.serve")


@dataclass(frozen=True)
class Limits:
    max_chars: int = 4096  # OpenAI's limit on 'input'
    max_queue: int = 16  # speech requests admitted at once (synthesizing or waiting)
    timeout: float = 600.0  # seconds from admission to the last chunk
    retry_after: int = 1  # seconds a 503 asks a client to wait

    @property
    def max_body(self) -> int:
        """Bytes a speech request's body may have: the longest input, every character
        written as a JSON escape pair (12 bytes), plus room for the other fields."""
        return 12 * self.max_chars + 16384


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it is known to exceed ``limit`` bytes."""
    too_large = APIError(413, f"the request body is over this server's limit of {limit} bytes: "
                              "send a shorter 'input' (or start the server with a larger "
                              "--max-chars)", code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise too_large
    return bytes(body)


def _error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class SpeechService:
    """The speech route and what it shares: the engine's scheduler, limits and metrics."""

    def __init__(self, tts: Kokoro, limits: Limits, metrics: ServerMetrics):
        self.tts, self.limits, self.metrics = tts, limits, metrics
        self.scheduler = Scheduler(limits.max_queue, on_chunk=self._chunk_done,
                                   on_drop=lambda reason: metrics.dropped.labels(reason).inc())

    def _chunk_done(self, chunk: Chunk, seconds: float) -> None:
        self.metrics.chunk(len(chunk.samples) / SAMPLE_RATE, seconds)

    async def _first_and_rest(self, request: SpeechRequest) -> AsyncIterator[Chunk]:
        """The request's chunks, the first already made: an error before any audio (text with
        nothing to say, a full queue, the deadline) is still an error response."""
        chunks = self.tts.stream(request.text, request.voice, request.speed, request.lang,
                                 seed=request.seed, per_sentence=request.stream,
                                 sharing=self.scheduler)
        try:
            job = self.scheduler.submit(chunks, self.limits.timeout)
        except QueueFull:
            raise APIError(503, f"the server is busy ({self.limits.max_queue} requests in "
                                "progress): retry shortly", kind="server_error",
                           code="queue_full",
                           headers={"Retry-After": str(self.limits.retry_after)}) from None
        self.metrics.queue_depth.inc()
        results = job.results()
        try:
            first = await results.__anext__()
        except StopAsyncIteration:
            first = None
        except BaseException as err:
            self.metrics.queue_depth.dec()
            await results.aclose()
            raise _synthesis_error(err) from None
        return self._rest(first, results)

    async def _rest(self, first: Chunk | None, results: AsyncIterator[Chunk]
                    ) -> AsyncIterator[Chunk]:
        try:
            if first is not None:
                yield first
            async for chunk in results:
                yield chunk
        finally:
            self.metrics.queue_depth.dec()
            await results.aclose()

    async def _synthesis(self, request: Request, fields: tuple[str, ...] = ()
                         ) -> tuple[SpeechRequest, AsyncIterator[Chunk], Encoder, float]:
        """The checked request, its chunks (the first made already), its encoder and when it
        arrived; ``fields`` are a route's own besides the speech request's."""
        arrived = time.perf_counter()
        body = parse_json(await read_body(request, self.limits.max_body))
        wanted = speech_request(body, self.tts, self.limits.max_chars, fields)
        chunks = await self._first_and_rest(wanted)
        return wanted, chunks, Encoder(wanted.response_format, streaming=wanted.stream), arrived

    async def _whole(self, request: Request, chunks: AsyncIterator[Chunk], encoder: Encoder,
                     arrived: float) -> tuple[bytes, list[Chunk]] | None:
        """Every chunk encoded, for a response sent whole; None if the client left."""
        spoken = []
        async for chunk in chunks:
            encoder.write(chunk.samples)
            spoken.append(chunk)
            if await request.is_disconnected():
                await chunks.aclose()  # stops the synthesis before its next chunk
                return None
        self.metrics.first_byte.observe(time.perf_counter() - arrived)
        return encoder.close(), spoken

    async def _encoded(self, chunks: AsyncIterator[Chunk], encoder: Encoder, arrived: float
                       ) -> AsyncIterator[tuple[bytes, Chunk | None]]:
        """Each chunk with the bytes it adds to the stream, then the encoder's tail (None)."""
        sent = False
        try:
            async for chunk in chunks:
                data = encoder.write(chunk.samples)
                if data and not sent:
                    self.metrics.first_byte.observe(time.perf_counter() - arrived)
                    sent = True
                yield data, chunk
            yield encoder.close(), None
        except DeadlineExceeded:
            # The status is sent already: end the connection without the final chunk, so the
            # client sees a cut response rather than a short file it takes as whole.
            raise RuntimeError(f"deadline of {self.limits.timeout} s passed") from None
        finally:
            await chunks.aclose()

    async def speech(self, request: Request) -> Response:
        """``POST /v1/audio/speech``: OpenAI's speech request (docs/serving.md)."""
        wanted, chunks, encoder, arrived = await self._synthesis(request)
        media_type = FORMATS[wanted.response_format].media_type
        if not wanted.stream:
            whole = await self._whole(request, chunks, encoder, arrived)
            return Response(whole[0], media_type=media_type) if whole else Response(status_code=499)
        encoded = self._encoded(chunks, encoder, arrived)
        if wanted.stream_format == "audio":
            return StreamingResponse((data async for data, _ in encoded if data),
                                     media_type=media_type)

        async def events() -> AsyncIterator[ServerSentEvent]:
            async for data, _ in encoded:
                if data:
                    yield _event("speech.audio.delta",
                                 {"audio": base64.b64encode(data).decode("ascii")})
            characters = len(wanted.text)  # Kokoro bills nothing: the input's size as its usage
            yield _event("speech.audio.done", {"usage": {
                "input_tokens": characters, "output_tokens": 0, "total_tokens": characters}})

        return EventSourceResponse(events())

    async def captioned(self, request: Request) -> Response:
        """``POST /dev/captioned_speech``, in Kokoro-FastAPI's shape: the speech request; the
        audio (base64) with its words' start and end seconds, as one JSON object, or streamed as
        one JSON object a line, each chunk's words with its audio."""
        wanted, chunks, encoder, arrived = await self._synthesis(
            request, fields=("return_timestamps",))
        media_type = FORMATS[wanted.response_format].media_type
        if not wanted.stream:
            whole = await self._whole(request, chunks, encoder, arrived)
            if whole is None:
                return Response(status_code=499)
            data, spoken = whole
            return JSONResponse(_captioned(data, media_type,
                                           [w for chunk in spoken for w in chunk.words]))

        async def lines() -> AsyncIterator[str]:
            async for data, chunk in self._encoded(chunks, encoder, arrived):
                words = chunk.words if chunk is not None else ()
                if data or words:
                    yield json.dumps(_captioned(data, media_type, words)) + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")


def _captioned(audio: bytes, media_type: str, words) -> dict:
    return {"audio": base64.b64encode(audio).decode("ascii"), "audio_format": media_type,
            "timestamps": [{"word": w.text, "start_time": round(w.start, 3),
                            "end_time": round(w.end, 3)} for w in words]}


def _event(kind: str, fields: dict) -> ServerSentEvent:
    return ServerSentEvent(json.dumps({"type": kind, **fields}), event=kind)


def _synthesis_error(err: BaseException) -> APIError:
    if isinstance(err, DeadlineExceeded):
        return APIError(504, "the request's deadline passed before its first audio: retry when "
                             "the server is less busy", kind="server_error", code="timeout")
    if isinstance(err, UserError):  # text the G2P or the model folder cannot take
        return APIError(400, str(err), param="input")
    log.exception("synthesis failed", exc_info=err)
    return APIError(500, "synthesis failed on the server (its log has the details)",
                    kind="server_error")


def voice_list(voices: list[str]) -> list[dict]:
    """Each voice with its language and gender (from its name), and why it cannot speak here
    where its language's G2P is not installed."""
    listed = []
    for info in map(describe_voice, voices):
        listed.append({"id": info.name, "name": info.name, "language": info.language,
                       "language_name": info.language_name, "gender": info.gender,
                       "available": info.unavailable is None,
                       "unavailable_reason": info.unavailable})
    return listed


def _models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [
        {"id": name, "object": "model", "created": 0, "owned_by": "kokoro-tvm"}
        for name in MODELS]})


class Authorised:
    """ASGI middleware: every ``/v1`` request must carry ``Authorization: Bearer KEY``,
    compared in constant time; /health and /metrics stay open to probes and scrapers."""

    def __init__(self, app, api_key: str):
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = _error_response(APIError(
                    401, "missing or incorrect API key: send the server's --api-key as "
                         "'Authorization: Bearer KEY'", code="invalid_api_key"))
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


class Measured:
    """ASGI middleware counting requests by route and status, and timing them to their last
    byte (a streamed response's end, not its headers)."""

    def __init__(self, app, metrics: ServerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]

        async def measured_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, measured_send)
        finally:
            route = scope.get("route")
            label = route.path if route is not None else "unmatched"
            self.metrics.requests.labels(label, str(status[0])).inc()
            self.metrics.latency.labels(label).observe(time.perf_counter() - started)


def create_app(tts: Kokoro, limits: Limits = Limits(), api_key: str | None = None,
               drain: Drain | None = None, web: str | None = None) -> Starlette:
    """The app over ``tts``, whose libraries and G2Ps should be loaded already (serve.run);
    ``drain`` (drain.DrainingServer's) says when it stops taking requests; ``web``, a web folder
    (`snakemake web`), is served at /web/ as files."""
    drain = drain or Drain(grace_period=0.0)
    metrics = ServerMetrics()
    service = SpeechService(tts, limits, metrics)
    voices = voice_list(tts.voices)

    async def voices_route(request: Request) -> Response:
        return JSONResponse({"voices": voices, "openai_voices": OPENAI_VOICES})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "draining" if drain.draining else "ready",
                             "target": tts.folder.target, "voices": len(tts.voices),
                             "queue": len(service.scheduler)},
                            status_code=503 if drain.draining else 200)

    page = (resources.files("kokoro_tvm.serve") / "page" / "index.html").read_bytes()

    async def playground(request: Request) -> Response:
        return Response(page, media_type="text/html; charset=utf-8")

    async def metrics_route(request: Request) -> Response:
        return Response(metrics.text(), media_type="text/plain; version=0.0.4")

    async def api_error(request: Request, error: APIError) -> Response:
        return _error_response(error)

    async def http_error(request: Request, error: HTTPException) -> Response:
        what = {404: f"no route {request.url.path}: this server has /v1/audio/speech, "
                     "/dev/captioned_speech, /v1/audio/voices, /v1/models, /, /health and "
                     f"/metrics{', and /web/' if web else ''}",
                405: f"{request.method} is not allowed on {request.url.path}"}
        return _error_response(APIError(error.status_code,
                                        what.get(error.status_code, str(error.detail))))

    async def server_error(request: Request, error: Exception) -> Response:
        log.exception("request failed", exc_info=error)
        return _error_response(APIError(500, "the server failed on this request (its log has "
                                             "the details)", kind="server_error"))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        service.scheduler.stop()

    app = Starlette(
        routes=[Route("/v1/audio/speech", service.speech, methods=["POST"]),
                Route("/dev/captioned_speech", service.captioned, methods=["POST"]),
                Route("/v1/models", _models, methods=["GET"]),
                Route("/v1/audio/voices", voices_route, methods=["GET"]),
                Route("/", playground, methods=["GET"]),
                Route("/health", health, methods=["GET"]),
                Route("/metrics", metrics_route, methods=["GET"]),
                *([Mount("/web", StaticFiles(directory=web, html=True))] if web else [])],
        exception_handlers={APIError: api_error, HTTPException: http_error,
                            Exception: server_error},
        lifespan=lifespan)

    if api_key is not None:
        app.add_middleware(Authorised, api_key=api_key)
    app.add_middleware(Draining, drain=drain, refusal=_error_response(APIError(
        503, "the server is shutting down: retry (another replica, or this one once it has "
             "restarted)", kind="server_error", code="shutting_down",
        headers={"Retry-After": str(limits.retry_after)})))
    app.add_middleware(Measured, metrics=metrics)  # the outermost: it counts refusals too
    return app
