"""The body of ``POST /v1/audio/speech``, as OpenAI's SDK sends it, checked field by field.

Every check runs before the request is queued, so bad input costs no synthesis; each failure
is an ``APIError`` whose message names the field, what was wrong and what to send instead.
"""
from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass
from typing import Any

from kokoro_tvm.abi import MAX_SEED
from kokoro_tvm.errors import UserError
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.kokoro import SPEED_RANGE, Kokoro
from kokoro_tvm.runtime.voices import check_voice
from kokoro_tvm.serve.encoders import FORMATS

# Model names a client may send: Kokoro's, and OpenAI's two speech models (so that a client
# that hard-codes them works); all are the same model here.
MODELS = ("kokoro", "tts-1", "tts-1-hd")
STREAM_FORMATS = ("audio", "sse")
# OpenAI's voice names, each spoken by the Kokoro voice named for it where kokoro-js has one,
# else the one nearest in character (docs/serving.md has the table).
OPENAI_VOICES = {
    "alloy": "af_alloy", "ash": "am_adam", "ballad": "bm_lewis", "coral": "af_heart",
    "echo": "am_echo", "fable": "bm_fable", "nova": "af_nova", "onyx": "am_onyx",
    "sage": "af_sarah", "shimmer": "af_nicole", "verse": "am_michael",
}
FIELDS = ("model", "input", "voice", "response_format", "speed", "stream_format",
          "instructions", "lang", "seed", "stream")
# Characters that mark a text as garbled rather than speakable: Unicode controls other than
# the whitespace ones, and unpaired surrogates.
ALLOWED_CONTROLS = "\t\n\r"


class APIError(Exception):
    """An error response in OpenAI's shape: ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind, self.headers = kind, headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    voice: str  # a Kokoro voice or blend, after OpenAI's names are mapped
    response_format: str
    speed: float
    lang: str
    seed: int
    stream_format: str
    stream: bool  # False: the whole file at once, with its length in the headers


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; NaN and Infinity, which JSON has not, are refused too."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise APIError(400, f"the request body is not UTF-8 (byte {err.start}): send JSON "
                            "encoded as UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as err:  # JSONDecodeError, NaN, and integers too long to read
        raise APIError(400, f"the request body is not valid JSON ({err}): send an object such "
                            'as {"model": "kokoro", "input": "Hello.", "voice": "af_heart"}'
                       ) from None
    if not isinstance(value, dict):
        raise APIError(400, f"the request body is a JSON {type(value).__name__}, not an object:"
                            ' send {"model": ..., "input": ..., "voice": ...}')
    return value


def _string(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if value is None:
        raise APIError(400, f"'{name}' is required", param=name, code="missing_required_parameter")
    if not isinstance(value, str):
        raise APIError(400, f"'{name}' must be a string, not {type(value).__name__}", param=name)
    return value


def _choice(body: dict[str, Any], name: str, choices, default: str) -> str:
    value = _string(body, name, default)
    if value not in choices:
        raise APIError(400, f"'{name}' {value!r} is not supported: choose one of "
                            f"{', '.join(choices)}", param=name)
    return value


def check_text(text: str, max_chars: int) -> str:
    if len(text) > max_chars:
        raise APIError(413, f"'input' is {len(text)} characters, over this server's limit of "
                            f"{max_chars}: split the text into several requests, or start the "
                            "server with a larger --max-chars", param="input",
                       code="input_too_long")
    for position, char in enumerate(text):
        if char in ALLOWED_CONTROLS:
            continue
        if unicodedata.category(char) in ("Cc", "Cs"):
            raise APIError(400, f"'input' holds the control character U+{ord(char):04X} at "
                                f"position {position}: remove it (tabs and newlines are "
                                "fine)", param="input")
    if not text.strip():
        raise APIError(400, "'input' is empty: give some words to speak", param="input")
    return text


def _voice(body: dict[str, Any]) -> str:
    """The voice's Kokoro name or blend: a string, or ``{"id": ...}`` as the SDK also sends."""
    value = body.get("voice")
    if isinstance(value, dict):
        value = value.get("id")
    if value is None:
        raise APIError(400, "'voice' is required: a Kokoro voice (GET /v1/audio/voices), a "
                            "blend such as af_heart:0.7,am_adam:0.3, or an OpenAI voice name",
                       param="voice", code="missing_required_parameter")
    if not isinstance(value, str):
        raise APIError(400, f"'voice' must be a string or {{\"id\": string}}, not "
                            f"{type(value).__name__}", param="voice")
    return OPENAI_VOICES.get(value.strip(), value)


def _speed(body: dict[str, Any]) -> float:
    value = body.get("speed", 1.0)
    low, high = SPEED_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise APIError(400, f"'speed' must be a number from {low} to {high}, not "
                            f"{type(value).__name__}", param="speed")
    if not math.isfinite(value) or not low <= value <= high:
        raise APIError(400, f"'speed' {value} is outside {low}-{high}, the range Kokoro stays "
                            f"intelligible in (OpenAI's 0.25-4 is wider): send a speed from "
                            f"{low} to {high}", param="speed")
    return float(value)


def _seed(body: dict[str, Any]) -> int:
    value = body.get("seed", 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise APIError(400, f"'seed' must be a whole number from 0 to {MAX_SEED}, not "
                            f"{value!r:.40}", param="seed")
    return value


def _stream(body: dict[str, Any]) -> bool:
    value = body.get("stream", True)
    if not isinstance(value, bool):
        raise APIError(400, f"'stream' must be true or false, not {value!r:.40}", param="stream")
    return value


def speech_request(body: dict[str, Any], tts: Kokoro, max_chars: int,
                   route_fields: tuple[str, ...] = ()) -> SpeechRequest:
    """The request ``body`` (parsed JSON) asks for, every field checked against ``tts``;
    ``route_fields`` are a route's own fields, accepted besides FIELDS (each a boolean)."""
    known = FIELDS + route_fields
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise APIError(400, f"unrecognized request argument {unknown[0]!r}: this route takes "
                            f"{', '.join(known)}", param=unknown[0])
    for name in route_fields:
        if not isinstance(body.get(name, True), bool):
            raise APIError(400, f"'{name}' must be true or false", param=name)
    _choice(body, "model", MODELS, None)
    text = check_text(_string(body, "input"), max_chars)
    voice = _voice(body)
    response_format = _choice(body, "response_format", tuple(FORMATS), "mp3")
    speed = _speed(body)
    stream_format = _choice(body, "stream_format", STREAM_FORMATS, "audio")
    _string(body, "instructions", "")  # accepted, as OpenAI's tts-1 does, and not followed
    lang = body.get("lang")
    if lang is not None:
        lang = _choice(body, "lang", g2p.LANGUAGES, None)
    seed, stream = _seed(body), _stream(body)
    if stream_format == "sse" and not stream:
        raise APIError(400, "'stream_format' sse streams by definition: drop 'stream': false",
                       param="stream")
    try:
        check_voice(voice, tts.folder)
    except UserError as err:  # an unknown voice, a bad blend
        raise APIError(400, str(err), param="voice") from None
    try:
        speed, lang = tts.check_request(text, voice, speed, lang, seed)
    except UserError as err:  # the language asked for, or else the voice's, is not installed
        raise APIError(400, str(err), param="voice" if lang is None else "lang") from None
    return SpeechRequest(text, voice, response_format, speed, lang, seed, stream_format, stream)
