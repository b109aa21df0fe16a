"""The server's parts on their own: encoders (PyAV), the request checks, the scheduler.
The server as its clients call it is tested in tests/test_serve.py."""
from __future__ import annotations

import asyncio
import io
import json
import subprocess
import threading

import av
import numpy as np
import pytest
from conftest import BIN

from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime import g2p
from kokoro_tvm.runtime.audio_file import pcm16
from kokoro_tvm.runtime.kokoro import check_request
from kokoro_tvm.runtime.speech import Chunk
from kokoro_tvm.serve.encoders import FORMATS, Encoder
from kokoro_tvm.serve.scheduler import AHEAD, DeadlineExceeded, QueueFull, Scheduler
from kokoro_tvm.serve.speech_request import APIError, check_text, parse_json, speech_request


def decode(data: bytes, fmt: str) -> tuple[np.ndarray, int]:
    """Mono samples (float, -1..1) and their rate, decoded by FFmpeg (PyAV)."""
    if fmt == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32767, SAMPLE_RATE
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [frame.to_ndarray() for frame in container.decode(stream)]
        rate = stream.rate
    samples = np.concatenate([f.reshape(f.shape[0], -1)[0] for f in frames])
    if samples.dtype == np.int16:
        samples = samples.astype(np.float32) / 32767
    return samples.astype(np.float32), rate


def tone_chunks(seconds=(0.4, 1.1, 0.7), frequency=220.0) -> list[np.ndarray]:
    """A continuous tone cut into chunks of these lengths, as a stream's chunks are."""
    total = int(sum(seconds) * SAMPLE_RATE)
    tone = (0.4 * np.sin(2 * np.pi * frequency * np.arange(total) / SAMPLE_RATE)).astype(
        np.float32)
    cuts = np.cumsum([int(s * SAMPLE_RATE) for s in seconds])[:-1]
    return np.split(tone, cuts)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("streaming", [True, False])
def test_every_format_decodes_whole(fmt, streaming):
    """Each format decodes to the whole tone at its length (lossy codecs add at most their
    priming and padding, 0.1 s) with no cut tail; lossless ones carry exactly pcm16 of the
    samples, across chunk joins."""
    chunks = tone_chunks()
    encoder = Encoder(fmt, streaming=streaming)
    data = b"".join(encoder.write(c) for c in chunks) + encoder.close()
    samples, rate = decode(data, fmt)
    whole = np.concatenate(chunks)
    seconds = len(whole) / SAMPLE_RATE
    assert len(samples) / rate == pytest.approx(seconds, abs=0.1 if not FORMATS[fmt].lossless
                                                else 1e-9)
    assert len(samples) / rate >= seconds - 1e-9  # nothing cut at the end
    if FORMATS[fmt].lossless:
        assert np.array_equal(np.round(samples * 32767).astype(np.int16), pcm16(whole))
    else:  # the tone survives to its last 50 ms: the encoder's tail was flushed
        end = int(seconds * rate)
        tail = samples[end - rate // 20:end]
        assert np.sqrt(np.mean(tail ** 2)) > 0.2


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_streamed_bytes_leave_with_each_chunk(fmt):
    """A streaming encoder hands out bytes for the first chunk before the next one is given
    (opus's Ogg pages included), so a client hears the lead while the rest is synthesized."""
    encoder = Encoder(fmt, streaming=True)
    first = encoder.write(tone_chunks()[1])  # 1.1 s
    assert len(first) > 0
    rest = encoder.close()  # the encoders' tails and trailers: nothing for raw samples
    assert len(first) > len(rest)


def test_pcm16_rounds_and_clips():
    samples = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 1.7, -3.0, 1 / 32767 * 0.6], np.float32)
    assert pcm16(samples).tolist() == [0, 16384, -16384, 32767, -32767, 32767, -32767, 1]


@pytest.mark.parametrize("body, message", [
    (b'{"input": ', "not valid JSON"),
    (b'{"speed": NaN}', "NaN is not a JSON number"),
    (b'{"speed": Infinity}', "Infinity is not a JSON number"),
    (b'\xff\xfe{}', "not UTF-8 (byte 0)"),
    (b'[1, 2]', "JSON list, not an object"),
    (b'{"seed": ' + b"9" * 5000 + b"}", "not valid JSON"),
])
def test_bodies_that_are_not_a_json_object_are_named(body, message):
    with pytest.raises(APIError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        parse_json(body)
    assert err.value.status == 400


def test_text_checks_name_length_controls_and_emptiness():
    assert check_text("Tabs\tand\nnewlines are fine.", 100) == "Tabs\tand\nnewlines are fine."
    with pytest.raises(APIError, match="over this server's limit of 5") as err:
        check_text("Hello there", 5)
    assert err.value.status == 413 and err.value.code == "input_too_long"
    with pytest.raises(APIError, match="control character U\\+0007 at position 5"):
        check_text("Hello\x07", 100)
    with pytest.raises(APIError, match="'input' is empty"):
        check_text("  \n ", 100)
    assert json.loads(json.dumps(APIError(400, "m", param="p").body())) == {
        "error": {"message": "m", "type": "invalid_request_error", "param": "p", "code": None}}


class Cue:
    """A job's chunk 1 and a test meeting: the chunk says it has started (the worker is inside
    it) and waits until the test has submitted the jobs meant to arrive during it. Without it,
    when the test submits depends on how soon the event loop sees chunk 0 and how soon the
    worker starts chunk 1: on a busy machine, either can come first."""

    def __init__(self):
        self.started, self.submitted = threading.Event(), threading.Event()

    def meet(self) -> None:
        """On the worker thread, at chunk 1's start."""
        self.started.set()
        assert self.submitted.wait(30), "the test never submitted its jobs"

    async def inside(self) -> None:
        """On the event loop: until the worker is inside chunk 1."""
        assert await asyncio.to_thread(self.started.wait, 30), "chunk 1 never started"


class CountingChunks:
    """A job's chunk iterator: ``count`` chunks named ``name:i``, each taking ``seconds``, the
    last one marked (Chunk.last) where ``marks_last``; records when it was closed. Chunk 1
    meets its ``cue`` first, if given."""

    def __init__(self, name: str, count: int, log: list, seconds: float = 0.0,
                 marks_last: bool = False, cue: Cue | None = None):
        self.name, self.count, self.log, self.seconds = name, count, log, seconds
        self.marks_last, self.cue = marks_last, cue
        self.closed = False

    def meet_cue(self, i: int) -> None:
        if i == 1 and self.cue is not None:
            self.cue.meet()

    def __iter__(self):
        return self.generate()

    def generate(self):
        import time

        try:
            for i in range(self.count):
                self.meet_cue(i)
                time.sleep(self.seconds)
                self.log.append(f"{self.name}:{i}")
                yield Chunk(f"{self.name}:{i}", "", np.zeros(240, np.float32), 0.0,
                            last=self.marks_last and i == self.count - 1)
            self.log.append(f"{self.name} ended")
        finally:
            self.closed = True


def run(coroutine):
    return asyncio.run(coroutine)


async def drain(results) -> list[str]:
    """Every chunk's text, read as a client that keeps up reads them."""
    return [chunk.text async for chunk in results]


async def inside_chunk_1(scheduler: Scheduler, chunks: CountingChunks):
    """``chunks`` (with a cue) submitted, its chunk 0 read and the worker inside its chunk 1:
    where tests submit the jobs meant to arrive while a stream works. Its results."""
    results = scheduler.submit(iter(chunks), timeout=60).results()
    assert (await results.__anext__()).text == f"{chunks.name}:0"
    await chunks.cue.inside()
    return results


def test_new_jobs_go_first_then_round_robin():
    """A job that has produced nothing goes before the others' next chunks; the rest take
    turns, so a long job does not hold the engine."""
    async def scenario():
        log: list[str] = []
        scheduler = Scheduler(max_jobs=4)
        cue = Cue()
        long_results = await inside_chunk_1(
            scheduler, CountingChunks("long", 6, log, 0.05, cue=cue))  # both arrive in long:1
        short = scheduler.submit(iter(CountingChunks("short", 2, log, 0.05)), timeout=60)
        other = scheduler.submit(iter(CountingChunks("other", 2, log, 0.05)), timeout=60)
        cue.submitted.set()
        got = {}
        for name, job in (("short", short), ("other", other)):
            got[name] = [c.text async for c in job.results()]
        rest = [c.text async for c in long_results]
        scheduler.stop()
        return log, got, rest

    log, got, rest = run(scenario())
    assert got == {"short": ["short:0", "short:1"], "other": ["other:0", "other:1"]}
    assert rest == [f"long:{i}" for i in range(1, 6)]
    # Both new jobs' first chunks come right after the chunk in progress, then turns alternate.
    assert log[:6] == ["long:0", "long:1", "short:0", "other:0", "long:2", "short:1"]


class TwoCallChunks(CountingChunks):
    """CountingChunks whose every chunk is two engine calls of ``seconds`` with a turn of
    ``scheduler`` between them, as a stream's text side and decode are. ``seconds_of`` records
    each chunk's wall time from its start to its yield."""

    def __init__(self, scheduler: Scheduler | None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scheduler = scheduler
        self.seconds_of: dict[str, float] = {}

    def generate(self):
        import time

        for i in range(self.count):
            started = time.perf_counter()
            self.meet_cue(i)
            time.sleep(self.seconds)
            self.log.append(f"{self.name}:{i} text")
            self.scheduler.turn()
            time.sleep(self.seconds)
            self.log.append(f"{self.name}:{i}")
            self.seconds_of[f"{self.name}:{i}"] = time.perf_counter() - started
            yield Chunk(f"{self.name}:{i}", "", np.zeros(240, np.float32), 0.0)


def test_a_new_job_goes_between_the_engine_calls_of_a_streaming_one():
    """A job that has sent audio gives way at its turns: jobs submitted during its chunk's
    first call make their first chunks before that chunk's second call, and the turn's time is
    not counted as the streaming chunk's. A new job's own turns give way to nobody."""
    chunk_seconds: dict[str, float] = {}
    cue = Cue()
    long = TwoCallChunks(None, "long", 3, [], 0.2, cue=cue)
    new = TwoCallChunks(None, "new", 1, long.log, 0.2)
    late = TwoCallChunks(None, "late", 1, long.log, 0.05)

    async def scenario():
        scheduler = Scheduler(max_jobs=4, on_chunk=lambda c, s: chunk_seconds.update({c.text: s}))
        for chunks in (long, new, late):
            chunks.scheduler = scheduler
        long_results = await inside_chunk_1(scheduler, long)  # both arrive in its first call
        new_job = scheduler.submit(iter(new), timeout=60)
        late_job = scheduler.submit(iter(late), timeout=60)
        cue.submitted.set()
        got = [c.text async for c in new_job.results()] + [c.text async for c in
                                                             late_job.results()]
        rest = [c.text async for c in long_results]
        scheduler.stop()
        return got, rest

    got, rest = run(scenario())
    assert got == ["new:0", "late:0"] and rest == ["long:1", "long:2"]
    log = long.log
    start = log.index("long:1 text")
    assert log[start:start + 6] == ["long:1 text", "new:0 text", "new:0", "late:0 text",
                                    "late:0", "long:1"]
    # Each chunk's time is its own calls: long:1's leaves out the two chunks made in its turn.
    own = {**long.seconds_of, **new.seconds_of, **late.seconds_of}
    assert chunk_seconds["new:0"] == pytest.approx(own["new:0"], abs=0.05)
    assert chunk_seconds["late:0"] == pytest.approx(own["late:0"], abs=0.05)
    assert chunk_seconds["long:1"] == pytest.approx(
        own["long:1"] - own["new:0"] - own["late:0"], abs=0.05)
    assert chunk_seconds["long:1"] >= 0.4


def test_a_job_ends_with_its_last_chunk_where_it_is_marked():
    """A job whose last chunk is marked ends with it, before the others' next chunks; one
    whose speaker could not tell ends at its next turn (the iterator's end)."""
    async def scenario():
        log: list[str] = []
        scheduler = Scheduler(max_jobs=4)
        cue = Cue()
        long_results = await inside_chunk_1(
            scheduler, CountingChunks("long", 4, log, 0.1, cue=cue))  # both arrive in long:1
        marked = scheduler.submit(iter(CountingChunks("marked", 2, log, 0.1, True)), timeout=60)
        unmarked = scheduler.submit(iter(CountingChunks("unmarked", 2, log, 0.1)), timeout=60)
        cue.submitted.set()
        await asyncio.gather(*map(drain, (marked.results(), unmarked.results(), long_results)))
        scheduler.stop()
        return log

    log = run(scenario())
    assert log.index("marked ended") == log.index("marked:1") + 1
    assert log.index("unmarked ended") > log.index("long:3") > log.index("unmarked:1")


def test_a_job_whose_reader_stops_waits_at_most_ahead_while_the_others_go_on():
    """A job whose results nobody takes has AHEAD chunks made and then waits, while another
    job is made whole; once its reader takes one, its next is made."""
    async def scenario():
        log: list[str] = []
        scheduler = Scheduler(max_jobs=4)
        stalled = scheduler.submit(iter(CountingChunks("stalled", 20, log, 0.02)), timeout=60)
        await asyncio.sleep(0.3)  # time for 15 of its chunks
        served = await drain(scheduler.submit(iter(CountingChunks("served", 5, log, 0.02)),
                                              timeout=60).results())
        made_while_stalled = [entry for entry in log if entry.startswith("stalled:")]
        results = stalled.results()
        first = (await results.__anext__()).text
        await asyncio.sleep(0.1)
        made_after_one = [entry for entry in log if entry.startswith("stalled:")]
        await results.aclose()
        scheduler.stop()
        return served, made_while_stalled, first, made_after_one

    served, made_while_stalled, first, made_after_one = run(scenario())
    assert served == [f"served:{i}" for i in range(5)]
    assert made_while_stalled == [f"stalled:{i}" for i in range(AHEAD)]
    assert first == "stalled:0" and made_after_one == [f"stalled:{i}" for i in range(AHEAD + 1)]


def test_a_cancelled_job_stops_before_its_next_chunk_and_is_closed():
    async def scenario():
        log: list[str] = []
        scheduler = Scheduler(max_jobs=2)
        cue = Cue()
        chunks = CountingChunks("long", 50, log, 0.02, cue=cue)
        results = await inside_chunk_1(scheduler, chunks)
        await results.aclose()  # what a disconnected client's response does, during long:1
        cue.submitted.set()
        await asyncio.sleep(0.3)
        scheduler.stop()
        return log, chunks, len(scheduler)

    log, chunks, queued = run(scenario())
    assert log == ["long:0", "long:1"] and chunks.closed and queued == 0


def test_queue_limit_and_deadline():
    async def scenario():
        log: list[str] = []
        scheduler = Scheduler(max_jobs=1)
        slow = scheduler.submit(iter(CountingChunks("slow", 30, log, 0.05)), timeout=0.2)
        with pytest.raises(QueueFull):
            scheduler.submit(iter(CountingChunks("more", 1, log)), timeout=60)
        with pytest.raises(DeadlineExceeded):
            async for _ in slow.results():
                pass
        after = scheduler.submit(iter(CountingChunks("after", 1, log)), timeout=60)
        texts = [c.text async for c in after.results()]
        scheduler.stop()
        return log, texts

    log, texts = run(scenario())
    assert texts == ["after:0"]
    assert 1 <= sum(entry.startswith("slow") for entry in log) < 10


def test_an_error_in_synthesis_reaches_its_request_alone():
    def failing():
        yield Chunk("ok", "", np.zeros(10, np.float32), 0.0)
        raise ValueError("the engine failed")

    async def scenario():
        scheduler = Scheduler(max_jobs=2)
        job = scheduler.submit(failing(), timeout=60)
        texts = []
        with pytest.raises(ValueError, match="the engine failed"):
            async for chunk in job.results():
                texts.append(chunk.text)
        other = scheduler.submit(iter(CountingChunks("next", 1, [])), timeout=60)
        texts += [c.text async for c in other.results()]
        scheduler.stop()
        return texts

    assert run(scenario()) == ["ok", "next:0"]


@pytest.mark.parametrize("options, message", [
    (["--max-chars", "0"], "--max-chars must be more than 0"),
    (["--timeout", "nan"], "--timeout must be more than 0"),
    (["--port", "70000"], "--port 70000 is not a port number"),
    (["--send-timeout", "0"], "--send-timeout must be more than 0"),
    (["--trusted-proxy", "nginx"], "--trusted-proxy nginx is not an IP address or network"),
    (["--model", "/nonexistent/model"], "/nonexistent/model is not a model folder"),
])
def test_serve_options_are_checked_before_the_model_loads(options, message):
    done = subprocess.run([str(BIN / "kokoro-tvm"), "serve", *options], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


class FolderOfVoices:
    """A model folder as the request checks see it: its voices' names."""

    voices = ["af_heart", "jf_alpha"]


class SpeakerOfFolder:
    folder = FolderOfVoices()

    def check_request(self, text, voice, speed, lang, seed):
        return check_request(self.folder, text, voice, speed, lang, seed)


@pytest.mark.parametrize("fields, param", [
    ({"voice": "xx_nobody"}, "voice"),
    ({"voice": "af_heart:x"}, "voice"),
    ({"voice": "jf_alpha"}, "voice"),  # its language is not installed
    ({"voice": "af_heart", "lang": "ja"}, "lang"),
])
def test_a_request_error_names_the_field_at_fault(monkeypatch, fields, param):
    monkeypatch.setattr(g2p, "unavailable_reason",
                        lambda lang: "Japanese (ja) needs pyopenjtalk" if lang == "ja" else None)
    body = {"model": "kokoro", "input": "Hello.", **fields}
    with pytest.raises(APIError) as raised:
        speech_request(body, SpeakerOfFolder(), max_chars=100)
    assert raised.value.status == 400 and raised.value.param == param
