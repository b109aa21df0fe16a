"""`kokoro-tvm serve` as its users run it: the real server process on a loopback port, from the
real-weight model folder of the README's main command (conftest.real_built), called with the
`openai` SDK, httpx and curl. Every format decodes; lossless formats carry the samples the
`Kokoro` API gives for the same request; bad input gets OpenAI's error shape and the server
keeps serving.
"""
from __future__ import annotations

import base64
import functools
import io
import json
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile
from conftest import REPO, model_folder
from test_serve_parts import decode

from kokoro_tvm.facts import SAMPLE_RATE, SAMPLES_PER_FRAME
from kokoro_tvm.measure.bench_serve import Server
from kokoro_tvm.runtime.audio_file import pcm16
from kokoro_tvm.runtime.engine import TvmEngine
from kokoro_tvm.runtime.kokoro import Kokoro
from kokoro_tvm.runtime.speech import LEAD_FRAMES
from kokoro_tvm.serve import DEFAULT_MAX_CHUNK_SECONDS, chunk_frames
from kokoro_tvm.serve.encoders import FORMATS

pytestmark = pytest.mark.slow

# Sentences that each fit the real build's smallest frame bucket (LEAD_FRAMES) with every voice
# these tests use, pads included: each is one chunk, decoded whole, so that a stream of them is
# the same however fast the machine is. A longer sentence is paced against the clock
# (runtime/speech.py, Pacing): where its decodes end depends on the machine's speed and load.
TEXT = "Hi there. Good day. See you."
PARAGRAPH = ("The first sentence is short. The second sentence takes a little longer to say. "
             "Here is a third one, and then a fourth. Finally, the fifth sentence ends it all.")
API_KEY = "test-key-123"


@pytest.fixture(scope="module")
def folder(real_built) -> Path:
    return model_folder(real_built)


# The long text (test_a_long_text_comes_back_whole): its first paragraphs, over 500 words, many
# pieces joined (its whole 2,263 words took 303 to 784 s of a full suite: the suite's budget).
LONG_TEXT_PARAGRAPHS = 4
# The server's deadline (600 s by default) and the client's wait leave room for a slow machine.
LONG_TEXT_SECONDS = 1800


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "server.log"
    with Server(folder, log, "--max-chars", "20000", "--max-queue", "4",
                "--timeout", str(LONG_TEXT_SECONDS)) as running:
        yield running.url


@pytest.fixture(scope="module")
def guarded(folder, tmp_path_factory):
    """A server with an API key, room for one request at a time, and chunks of at most 64
    frames (the real build's smallest frame bucket)."""
    log = tmp_path_factory.mktemp("serve") / "guarded.log"
    with Server(folder, log, "--api-key", API_KEY, "--max-queue", "1",
                "--max-chunk-seconds", str(64 * SAMPLES_PER_FRAME / SAMPLE_RATE)) as running:
        yield running.url


class Reference:
    """The `Kokoro` API on the server's folder, in this process, with the server's frame bound
    (the default --max-chunk-seconds): what the server must give. Each answer is computed once
    (several formats compare with the same samples)."""

    def __init__(self, folder: Path):
        engine = TvmEngine(folder, max_frames=chunk_frames(DEFAULT_MAX_CHUNK_SECONDS))
        self.tts = Kokoro(folder, engine=engine)
        self.stream = functools.cache(self._stream)
        self.create = functools.cache(self.tts.create)

    def _stream(self, text: str, voice: str) -> np.ndarray:
        chunks = list(self.tts.stream(text, voice=voice))
        longest = max(len(c.samples) for c in chunks) // SAMPLES_PER_FRAME
        assert longest <= LEAD_FRAMES, (
            f"a sentence of {text!r} takes {longest} frames with {voice}: over {LEAD_FRAMES}, "
            "its stream is paced against the clock and no longer the same on every machine")
        return np.concatenate([c.samples for c in chunks])


@pytest.fixture(scope="module")
def tts(folder) -> Reference:
    return Reference(folder)


def openai_client(url: str, key: str = "unused"):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def pcm_of(data: bytes, fmt: str) -> np.ndarray:
    samples, rate = decode(data, fmt)
    assert rate == SAMPLE_RATE
    return np.round(samples * 32767).astype(np.int16)


def assert_same_pcm(got: bytes, want: bytes) -> None:
    """Two 16-bit PCM bodies are the same samples; a failure says where they part, not the
    whole of both (seconds of audio would bury every other failure in the report)."""
    a, b = np.frombuffer(got, "<i2"), np.frombuffer(want, "<i2")
    if len(a) == len(b) and np.array_equal(a, b):
        return
    common = min(len(a), len(b))
    differ = np.flatnonzero(a[:common] != b[:common])
    first = int(differ[0]) if len(differ) else common
    raise AssertionError(f"{len(a)} samples against {len(b)}; they part at sample {first} "
                         f"({first / SAMPLE_RATE:.3f} s)")


def metric(url: str, name: str, labels: str = "") -> float:
    """A value from /metrics (0 if the series has not appeared)."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f"{name}{labels} ") or line.startswith(f"{name}{{{labels}}} "):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_openai_sdk_gets_every_format(server, tts, fmt):
    """OpenAI's SDK as a client writes it (OpenAI's model and voice names): every format
    decodes to the audio's duration; lossless ones carry exactly the samples the API's
    stream gives for the same request (the server streams by default)."""
    client = openai_client(server)
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, response_format=fmt) as response:
        assert response.headers["content-type"] == FORMATS[fmt].media_type
        data = response.read()
    expected = tts.stream(TEXT, "af_alloy")
    if FORMATS[fmt].lossless:
        assert np.array_equal(pcm_of(data, fmt), pcm16(expected))
    else:  # opus decodes at 48 kHz
        samples, rate = decode(data, fmt)
        assert len(samples) / rate == pytest.approx(len(expected) / SAMPLE_RATE, abs=0.1)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
def test_a_whole_file_equals_create(server, tts, fmt):
    """``"stream": false`` gives the whole file at once, with its length in its header and
    Content-Length; its samples are ``Kokoro.create``'s."""
    response = httpx.post(f"{server}/v1/audio/speech", timeout=120, json={
        "model": "kokoro", "input": PARAGRAPH, "voice": "am_adam", "response_format": fmt,
        "stream": False, "seed": 7, "speed": 1.2})
    assert response.status_code == 200, response.text
    assert int(response.headers["content-length"]) == len(response.content)
    samples, _ = tts.create(PARAGRAPH, voice="am_adam", seed=7, speed=1.2)
    if FORMATS[fmt].lossless:
        assert np.array_equal(pcm_of(response.content, fmt), pcm16(samples))
        header_frames = soundfile.info(io.BytesIO(response.content)).frames
        assert header_frames == len(samples)
    else:
        decoded, rate = decode(response.content, fmt)
        assert len(decoded) / rate == pytest.approx(len(samples) / SAMPLE_RATE, abs=0.1)


def test_streamed_bytes_arrive_while_the_rest_is_synthesized(server):
    """The first audio bytes of a five-sentence text arrive while the request is still being
    synthesized: the server's queue still holds it when they are read."""
    with httpx.stream("POST", f"{server}/v1/audio/speech", timeout=120, json={
            "model": "kokoro", "input": PARAGRAPH, "voice": "af_heart",
            "response_format": "pcm"}) as response:
        assert response.status_code == 200
        parts = response.iter_bytes()
        first = next(parts)
        assert len(first) > 0
        assert metric(server, "kokoro_tvm_queue_depth") == 1
        rest = b"".join(parts)
    assert len(first) < len(first + rest)
    assert metric(server, "kokoro_tvm_queue_depth") == 0


def test_sse_events_carry_the_audio_and_end_with_usage(server, tts):
    """stream_format sse: OpenAI's speech.audio.delta events (base64 audio) and one
    speech.audio.done with usage; the deltas join into the same audio as a plain stream."""
    body = {"model": "kokoro", "input": TEXT, "voice": "af_heart", "response_format": "pcm",
            "seed": 3}
    events = []
    with httpx.stream("POST", f"{server}/v1/audio/speech", timeout=120,
                      json={**body, "stream_format": "sse"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"}
    assert events[-1]["usage"]["input_tokens"] == len(TEXT)
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    plain = httpx.post(f"{server}/v1/audio/speech", json=body, timeout=120).content
    tts.stream(TEXT, "af_heart")  # checks that TEXT's stream does not depend on the clock
    assert_same_pcm(audio, plain)


def test_curl_downloads_a_wav_and_reads_an_error(server, tmp_path):
    out = tmp_path / "speech.wav"
    done = subprocess.run(
        ["curl", "-sS", "-o", str(out), "-w", "%{http_code}", f"{server}/v1/audio/speech",
         "-H", "Content-Type: application/json",
         "-d", json.dumps({"model": "kokoro", "input": TEXT, "voice": "af_heart",
                           "response_format": "wav"})], capture_output=True, text=True)
    assert done.stdout == "200", done.stderr
    samples, rate = decode(out.read_bytes(), "wav")
    assert rate == SAMPLE_RATE and len(samples) > SAMPLE_RATE
    error = subprocess.run(
        ["curl", "-sS", f"{server}/v1/audio/speech", "-H", "Content-Type: application/json",
         "-d", '{"model": "kokoro", "input": "Hi.", "voice": "af_heart", "speed": 9}'],
        capture_output=True, text=True)
    assert "outside 0.5-2.0" in json.loads(error.stdout)["error"]["message"]


def speech(**fields) -> dict:
    return {"model": "kokoro", "input": "Hello.", "voice": "af_heart", **fields}


BAD_REQUESTS = {
    # name: (body bytes, status, param, words of the message)
    "malformed JSON": (b'{"model": "kokoro", "input": ', 400, None, "not valid JSON"),
    "not an object": (b'["Hello."]', 400, None, "JSON list, not an object"),
    "not UTF-8": (b'{"model": "kokoro", "input": "\xff\xfe", "voice": "af_heart"}', 400, None,
                  "not UTF-8"),
    "NaN speed": (b'{"model": "kokoro", "input": "Hi.", "voice": "af_heart", "speed": NaN}',
                  400, None, "NaN is not a JSON number"),
    "huge speed": (json.dumps(speech(speed=1e308)).encode(), 400, "speed", "outside 0.5-2.0"),
    "infinite speed": (b'{"model": "kokoro", "input": "Hi.", "voice": "af_heart", '
                       b'"speed": 1e999}', 400, "speed", "outside 0.5-2.0"),
    "slow speed": (json.dumps(speech(speed=0.25)).encode(), 400, "speed", "outside 0.5-2.0"),
    "speed as text": (json.dumps(speech(speed="fast")).encode(), 400, "speed",
                      "must be a number"),
    "huge integer": (b'{"model": "kokoro", "input": "Hi.", "voice": "af_heart", "seed": '
                     + b"9" * 5000 + b"}", 400, None, "not valid JSON"),
    "seed too large": (json.dumps(speech(seed=2**70)).encode(), 400, "seed", "whole number"),
    "negative seed": (json.dumps(speech(seed=-1)).encode(), 400, "seed", "whole number"),
    "input not text": (json.dumps(speech(input=42)).encode(), 400, "input", "must be a string"),
    "no input": (json.dumps({"model": "kokoro", "voice": "af_heart"}).encode(), 400, "input",
                 "'input' is required"),
    "empty input": (json.dumps(speech(input="   ")).encode(), 400, "input", "'input' is empty"),
    "control character": (json.dumps(speech(input="Hi\x00there")).encode(), 400, "input",
                          "control character U+0000"),
    "unknown voice": (json.dumps(speech(voice="xx_nobody")).encode(), 400, "voice",
                      "unknown voice 'xx_nobody'"),
    "voice not text": (json.dumps(speech(voice=["af_heart"])).encode(), 400, "voice",
                       "must be a string"),
    "bad blend": (json.dumps(speech(voice="af_heart:x,am_adam:1")).encode(), 400, "voice",
                  "weight 'x' of af_heart is not a number"),
    "unknown format": (json.dumps(speech(response_format="ogg")).encode(), 400,
                       "response_format", "'ogg' is not supported"),
    "unknown model": (json.dumps(speech(model="gpt-4o")).encode(), 400, "model",
                      "'gpt-4o' is not supported"),
    "unknown field": (json.dumps(speech(sped=1.5)).encode(), 400, "sped",
                      "unrecognized request argument 'sped'"),
    "unknown language": (json.dumps(speech(lang="xx")).encode(), 400, "lang",
                         "'xx' is not supported"),
    "too long": (json.dumps(speech(input="word " * 5000)).encode(), 413, "input",
                 "over this server's limit of 20000"),
    "body too large": (b'{"input": "' + b"a" * 300_000 + b'"}', 413, None,
                       "request body is over"),
}


@pytest.mark.parametrize("name", sorted(BAD_REQUESTS))
def test_bad_input_gets_openai_errors_and_the_server_stays_up(server, name):
    body, status, param, words = BAD_REQUESTS[name]
    response = httpx.post(f"{server}/v1/audio/speech", content=body, timeout=30,
                          headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert words in error["message"] and error["param"] == param
    assert "Traceback" not in response.text
    after = httpx.post(f"{server}/v1/audio/speech", json=speech(response_format="pcm"),
                       timeout=60)
    assert after.status_code == 200 and len(after.content) > 0


def test_openai_sdk_raises_the_servers_error(server):
    import openai

    with pytest.raises(openai.BadRequestError, match="outside 0.5-2.0") as err:
        openai_client(server).audio.speech.create(model="tts-1", voice="alloy", input="Hi.",
                                                  speed=4.0)
    assert err.value.body["param"] == "speed"


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/v1/audio/speak", 404), ("GET", "/nothing", 404),
    ("GET", "/v1/audio/speech", 405), ("DELETE", "/v1/models", 405)])
def test_unknown_routes_and_methods(server, method, path, status):
    response = httpx.request(method, f"{server}{path}")
    assert response.status_code == status
    assert response.json()["error"]["message"]


def test_models_voices_health_and_metrics(server):
    models = httpx.get(f"{server}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["kokoro", "tts-1", "tts-1-hd"]
    listing = httpx.get(f"{server}/v1/audio/voices").json()
    voices = {v["id"]: v for v in listing["voices"]}
    assert voices["af_heart"]["language"] == "en-us" and voices["af_heart"]["gender"] == "female"
    assert voices["am_adam"]["gender"] == "male" and voices["am_adam"]["available"]
    assert listing["openai_voices"]["alloy"] == "af_alloy"
    assert httpx.get(f"{server}/health").json()["status"] == "ready"
    before = metric(server, "kokoro_tvm_requests_total",
                    'route="/v1/audio/speech",status="200"')
    httpx.post(f"{server}/v1/audio/speech", json=speech(response_format="pcm"), timeout=60)
    text = httpx.get(f"{server}/metrics").text
    for name in ("kokoro_tvm_time_to_first_byte_seconds_bucket", "kokoro_tvm_request_seconds",
                 "kokoro_tvm_audio_seconds_total", "kokoro_tvm_chunk_real_time_factor",
                 "kokoro_tvm_queue_depth"):
        assert name in text
    assert metric(server, "kokoro_tvm_requests_total",
                  'route="/v1/audio/speech",status="200"') == before + 1
    assert metric(server, "kokoro_tvm_audio_seconds_total") > 0


def test_a_disconnect_stops_the_synthesis(server):
    """A client that leaves after the first bytes of a long text: its synthesis stops at the
    next chunk (one chunk, not the text's dozens)."""
    text = " ".join([PARAGRAPH] * 8)  # 40 sentences
    stopped = metric(server, "kokoro_tvm_stopped_jobs_total", 'reason="disconnected"')
    audio_before = metric(server, "kokoro_tvm_audio_seconds_total")
    with httpx.stream("POST", f"{server}/v1/audio/speech", timeout=120, json={
            "model": "kokoro", "input": text, "voice": "af_heart",
            "response_format": "pcm"}) as response:
        next(response.iter_bytes())
    deadline = time.monotonic() + 60
    while metric(server, "kokoro_tvm_stopped_jobs_total", 'reason="disconnected"') == stopped:
        assert time.monotonic() < deadline, "the synthesis did not stop"
        time.sleep(0.2)
    assert metric(server, "kokoro_tvm_queue_depth") == 0
    spoken = metric(server, "kokoro_tvm_audio_seconds_total") - audio_before
    assert spoken < 15  # the whole text is over two minutes of speech


def test_a_short_request_is_served_while_a_long_one_streams(server):
    """Chunks are interleaved: a one-sentence request started while a long text streams ends
    before the long one does."""
    text = " ".join([PARAGRAPH] * 3)
    with httpx.stream("POST", f"{server}/v1/audio/speech", timeout=120, json={
            "model": "kokoro", "input": text, "voice": "af_heart",
            "response_format": "pcm"}) as long:
        parts = long.iter_bytes()
        next(parts)
        short = httpx.post(f"{server}/v1/audio/speech", timeout=120,
                           json=speech(response_format="pcm"))
        assert short.status_code == 200
        assert metric(server, "kokoro_tvm_queue_depth") == 1  # the long one goes on
        b"".join(parts)


def test_api_key_and_a_full_queue(guarded):
    """With --api-key, /v1 routes want the key (health and metrics do not); with
    --max-queue 1, a second speech request while one streams gets 503 with Retry-After."""
    assert httpx.get(f"{guarded}/v1/models").status_code == 401
    wrong = httpx.get(f"{guarded}/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{guarded}/health").status_code == 200
    client = openai_client(guarded, API_KEY)
    assert [m.id for m in client.models.list()] == ["kokoro", "tts-1", "tts-1-hd"]
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.stream("POST", f"{guarded}/v1/audio/speech", headers=headers, timeout=120,
                      json=speech(input=PARAGRAPH, response_format="pcm")) as first:
        parts = first.iter_bytes()
        next(parts)
        busy = httpx.post(f"{guarded}/v1/audio/speech", headers=headers, json=speech())
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["code"] == "queue_full"
        b"".join(parts)
    assert httpx.post(f"{guarded}/v1/audio/speech", headers=headers, timeout=60,
                      json=speech()).status_code == 200



def test_sigterm_drains_a_stream_then_exits_0(folder, tts, tmp_path):
    """SIGTERM during a stream (a container's stop, Kubernetes' rollout): /health answers 503
    while the stream goes on, a new request gets 503 (shutting_down), the stream ends whole,
    and the process exits 0 once it has."""
    text = " ".join([PARAGRAPH] * 2)
    with Server(folder, tmp_path / "server.log", "--grace-period", "120") as running:
        with httpx.stream("POST", f"{running.url}/v1/audio/speech", timeout=120,
                          json=speech(input=text, response_format="pcm")) as streamed:
            parts = streamed.iter_bytes()
            received = [next(parts)]
            running.process.send_signal(signal.SIGTERM)
            health = httpx.get(f"{running.url}/health")
            assert health.status_code == 503 and health.json()["status"] == "draining"
            assert httpx.get(f"{running.url}/metrics").status_code == 200  # liveness
            refused = httpx.post(f"{running.url}/v1/audio/speech", json=speech())
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "shutting_down"
            received += list(parts)  # a stream cut short raises here
        assert running.process.wait(60) == 0
    spoken = len(b"".join(received)) / 2
    whole = len(tts.create(text, voice="af_heart")[0])
    assert abs(spoken - whole) < 0.1 * whole, (spoken, whole)
    assert "grace period" not in running.log.read_text()


def test_the_grace_period_bounds_the_drain(folder, tmp_path):
    """A stream longer than --grace-period is cut when it is over; the process still exits 0,
    and a second signal stops a drain at once."""
    text = " ".join([PARAGRAPH] * 8)  # minutes of speech
    with Server(folder, tmp_path / "server.log", "--grace-period", "2") as running:
        with httpx.stream("POST", f"{running.url}/v1/audio/speech", timeout=120,
                          json=speech(input=text, response_format="pcm")) as streamed:
            parts = streamed.iter_bytes()
            next(parts)
            signalled = time.monotonic()
            running.process.send_signal(signal.SIGTERM)
            with pytest.raises(httpx.RemoteProtocolError):
                b"".join(parts)
        assert running.process.wait(60) == 0
        assert time.monotonic() - signalled < 20
    assert "grace period of 2 s over: 1 request(s) still in flight are cut" in (
        running.log.read_text())
    with Server(folder, tmp_path / "twice.log", "--grace-period", "600") as running:
        with httpx.stream("POST", f"{running.url}/v1/audio/speech", timeout=120,
                          json=speech(input=text, response_format="pcm")) as streamed:
            next(streamed.iter_bytes())
            running.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            running.process.send_signal(signal.SIGTERM)
            assert running.process.wait(30) == 0


def captioned_words(timestamps: list[dict]) -> list[tuple[str, float, float]]:
    return [(t["word"], t["start_time"], t["end_time"]) for t in timestamps]


def test_captioned_speech_whole_and_streamed(server, tts):
    """/dev/captioned_speech (Kokoro-FastAPI's shape): one JSON body with the audio and every
    word's times, which are ``Kokoro.create``'s; streamed, one JSON line a chunk, whose audio
    joins into the plain stream's and whose words are the text's, in order. The stream speaks
    TEXT, whose chunks do not depend on the machine's speed (PARAGRAPH's longer sentences are
    paced against the clock, so two streams of it may be cut at different words)."""
    body = {"model": "kokoro", "input": PARAGRAPH, "voice": "am_adam",
            "response_format": "wav", "seed": 5}
    whole = httpx.post(f"{server}/dev/captioned_speech", timeout=120,
                       json={**body, "stream": False})
    assert whole.status_code == 200, whole.text
    reply = whole.json()
    assert reply["audio_format"] == "audio/wav"
    samples, _, words = tts.create(PARAGRAPH, voice="am_adam", seed=5, timestamps=True)
    assert np.array_equal(pcm_of(base64.b64decode(reply["audio"]), "wav"), pcm16(samples))
    expected = [(w.text, round(w.start, 3), round(w.end, 3)) for w in words]
    assert captioned_words(reply["timestamps"]) == expected

    streaming = {**body, "input": TEXT, "response_format": "pcm"}
    with httpx.stream("POST", f"{server}/dev/captioned_speech", timeout=120,
                      json=streaming) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert len(lines) == len(TEXT.split(". "))  # a chunk a sentence
    audio = b"".join(base64.b64decode(line["audio"]) for line in lines)
    plain = httpx.post(f"{server}/v1/audio/speech", timeout=120, json=streaming).content
    assert_same_pcm(audio, plain)
    streamed = [w for line in lines for w in captioned_words(line["timestamps"])]
    _, _, text_words = tts.create(TEXT, voice="am_adam", seed=5, timestamps=True)
    assert [w[0] for w in streamed] == [w.text for w in text_words]
    starts = [w[1] for w in streamed]
    assert starts == sorted(starts) and streamed[-1][2] <= len(plain) / 2 / SAMPLE_RATE


def test_a_long_text_comes_back_whole(server):
    """A text of over five hundred words (examples/long_text.txt's first paragraphs, under
    the test server's --max-chars) is spoken whole: every word of it is timed, in order, and
    the audio lasts to the last word's end (at speed 2, to take half the decoding)."""
    paragraphs = (REPO / "examples" / "long_text.txt").read_text().split("\n\n")
    text = "\n\n".join(paragraphs[:LONG_TEXT_PARAGRAPHS])
    assert len(text.split()) > 500
    response = httpx.post(f"{server}/dev/captioned_speech", timeout=LONG_TEXT_SECONDS, json={
        "model": "kokoro", "input": text, "voice": "af_heart", "response_format": "pcm",
        "speed": 2.0, "stream": False})
    assert response.status_code == 200, response.text
    reply = response.json()
    seconds = len(base64.b64decode(reply["audio"])) / 2 / SAMPLE_RATE

    def letters(words) -> str:
        return re.sub(r"[^0-9a-z]", "", "".join(words).lower())

    timed = captioned_words(reply["timestamps"])
    assert letters(w[0] for w in timed) == letters(text.split())
    assert [w[1] for w in timed] == sorted(w[1] for w in timed)
    assert timed[-1][2] <= seconds < timed[-1][2] + 1.0


def test_max_chunk_seconds_splits_long_sentences(guarded):
    """--max-chunk-seconds 1.6: every chunk of a long sentence is at most 64 frames, the
    sentence cut at clause or word boundaries, every word still spoken."""
    sentence = ("When the last train had left and the platform lights were dimmed one by one, "
                "the station master walked slowly along the tracks, listening for anything.")
    with httpx.stream("POST", f"{guarded}/dev/captioned_speech", timeout=120,
                      headers={"Authorization": f"Bearer {API_KEY}"},
                      json=speech(input=sentence, response_format="pcm")) as response:
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line]
    sizes = [len(base64.b64decode(line["audio"])) // 2 for line in lines]
    assert len(sizes) > 2 and max(sizes) <= 64 * SAMPLES_PER_FRAME
    words = [t["word"] for line in lines for t in line["timestamps"]]
    assert re.findall(r"[\w']+", " ".join(words)) == re.findall(r"[\w']+", sentence)
