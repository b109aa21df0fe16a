"""Slow readers beside a normal client: `kokoro-tvm serve` (the TVM engine) on a loopback port,
called by asyncio httpx clients, bounded in clients, requests and time.

Unloaded: the normal client's requests alone (NORMAL: bench_serve's short texts and its long
one, as streamed PCM read as fast as they come). Loaded: SLOW clients each streaming a long
text and reading it at SLOW_RATE of real time (a player behind a link slower than its audio),
and STALLED clients that read nothing after the response's headers; once they have started,
the normal client's requests again. Reported: the normal client's first byte (each request's,
and the short ones' median and worst) and the time to its last byte, unloaded and loaded; the
server's RSS before the load, its highest during it (sampled every RSS_EVERY seconds) and its
peak over the run; the audio the engine made during the load against the audio the slow
readers took; the clients dropped (the stalled ones, and no slow reader) and how long after
their start. Every client stops after LOAD_SECONDS; the server drops a stalled one after
SEND_TIMEOUT (its --send-timeout).
"""
from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from kokoro_tvm.atomic import write_json
from kokoro_tvm.measure.bench_serve import (
    BYTES_PER_SECOND,
    LONG,
    SHORT,
    Server,
    _percentile,
    _request,
)

NORMAL = (*(("short", text) for text in SHORT), ("long", LONG))
# Four slow readers at a quarter of real time take one second of audio a second: a third to a
# half of the engine on 2 cores (bench_serve), so that the normal client is not merely queued.
SLOW, STALLED = 4, 4
SLOW_RATE = 0.25  # of real time: 12 KB/s of PCM, a 96 kbit/s link
SLOW_TEXT = " ".join([LONG] * 3)  # about a minute of speech: longer than LOAD_SECONDS reads
LOAD_SECONDS = 120
SEND_TIMEOUT = 10
RSS_EVERY = 0.5
# The stalled clients' receive buffer, small: the server's buffers, not theirs, hold what they
# leave unread. The slow readers keep the default: one smaller than a segment (64 KiB on
# loopback) never opens a window the sender uses, and the kernel drops it as it would a stalled
# one (docs/deploying.md, Slow readers).
STALLED_RECEIVE_BUFFER = 16384


def _body(text: str) -> dict[str, Any]:
    return {"model": "kokoro", "input": text, "voice": "af_heart", "response_format": "pcm"}


async def _normal(url: str) -> list[dict[str, Any]]:
    """NORMAL's requests in turn, each read as fast as it comes."""
    import httpx

    async with httpx.AsyncClient(timeout=LOAD_SECONDS) as client:
        served = [await _request(client, url, kind, text, [0]) for kind, text in NORMAL]
    return [{"kind": s.kind, "status": s.status, "first_byte": s.first_byte,
             "seconds": s.done - s.sent, "audio_seconds": s.audio_seconds} for s in served]


def _summary(requests: list[dict[str, Any]]) -> dict[str, Any]:
    shorts = [r["first_byte"] for r in requests if r["kind"] == "short" and r["first_byte"]]
    return {"requests": requests, "errors": sum(r["status"] != 200 for r in requests),
            "ttfb_short_p50": _percentile(shorts, 0.5), "ttfb_short_max": max(shorts),
            "total_seconds": sum(r["seconds"] for r in requests)}


async def _slow(client, url: str, ends: float) -> float:
    """One slow reader's stream until ``ends``: the audio seconds it took."""
    took = 0
    started = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/v1/audio/speech",
                                 json=_body(SLOW_TEXT)) as response:
            async for data in response.aiter_raw(4096):
                took += len(data)
                now = time.perf_counter()
                if now >= ends:
                    break
                ahead = took / BYTES_PER_SECOND / SLOW_RATE - (now - started)
                await asyncio.sleep(max(0.0, min(ahead, ends - now)))
    except Exception:  # noqa: BLE001 - a slow reader cut off is a figure, not a crash
        pass
    return took / BYTES_PER_SECOND


async def _stalled(client, url: str, ends: float) -> str:
    """One stalled reader: the response's headers, then nothing read until ``ends``; how its
    stream ended when it read again."""
    try:
        async with client.stream("POST", f"{url}/v1/audio/speech",
                                 json=_body(SLOW_TEXT)) as response:
            await asyncio.sleep(max(0.0, ends - time.perf_counter()))
            async for _ in response.aiter_raw():
                pass
        return "whole"
    except Exception as err:  # noqa: BLE001 - the drop is what is measured
        return type(err).__name__


async def _loaded(server: Server) -> dict[str, Any]:
    import httpx

    options = [(socket.SOL_SOCKET, socket.SO_RCVBUF, STALLED_RECEIVE_BUFFER)]
    before = server.counters()
    dropped_before = _dropped(server)
    started = time.perf_counter()
    ends = started + LOAD_SECONDS
    rss, drops = [], []
    async with httpx.AsyncClient(timeout=LOAD_SECONDS * 2,
                                 limits=httpx.Limits(max_connections=SLOW)) as slow_client, \
            httpx.AsyncClient(timeout=LOAD_SECONDS * 2, transport=httpx.AsyncHTTPTransport(
                socket_options=options, limits=httpx.Limits(max_connections=STALLED))
            ) as stalled_client:
        slow = [asyncio.create_task(_slow(slow_client, server.url, ends)) for _ in range(SLOW)]
        stalled = [asyncio.create_task(_stalled(stalled_client, server.url, ends))
                   for _ in range(STALLED)]

        async def watch() -> None:
            while time.perf_counter() < ends:
                rss.append(server.rss_mb())
                dropped = _dropped(server) - dropped_before
                drops.extend([time.perf_counter() - started] * (dropped - len(drops)))
                await asyncio.sleep(RSS_EVERY)

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(2)  # every slow and stalled stream started
        normal = await _normal(server.url)
        took = await asyncio.gather(*slow)
        ended = await asyncio.gather(*stalled)
        await watcher
    after = server.counters()
    return {**_summary(normal), "rss_highest_mb": max(rss),
            "engine_audio_seconds": after["audio_seconds_total"] - before["audio_seconds_total"],
            "slow_took_audio_seconds": sum(took),
            "dropped_after_seconds": drops, "stalled_ended": ended}


def _dropped(server: Server) -> int:
    import httpx

    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith('kokoro_tvm_stopped_jobs_total{reason="disconnected"} '):
            return int(float(line.split()[-1]))
    return 0


def run(model: str | Path, threads: int, out_json: str | Path,
        runtime_python: str | Path | None = None) -> dict[str, Any]:
    """The figures (module docstring), written to ``out_json``; the server run by
    ``runtime_python`` where given (a runtime-only install's interpreter), else by this one."""
    out_json = Path(out_json)
    threads_env = {"TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    host_load = os.getloadavg()[0]  # what else runs here: the figures are only as good
    with Server(Path(model), out_json.with_suffix(".log"), "--send-timeout", str(SEND_TIMEOUT),
                env=threads_env, python=runtime_python or sys.executable) as server:
        alone = _summary(asyncio.run(_normal(server.url)))
        rss_before = server.rss_mb()
        loaded = asyncio.run(_loaded(server))
        figures = {"model": str(model), "threads": threads, "slow": SLOW, "stalled": STALLED,
                   "slow_rate": SLOW_RATE, "load_seconds": LOAD_SECONDS,
                   "send_timeout": SEND_TIMEOUT, "alone": alone, "loaded": loaded,
                   "host_load_before": host_load,
                   "rss_before_mb": rss_before, "rss_after_mb": server.rss_mb(),
                   "peak_rss_mb": server.peak_rss_mb()}
    write_json(out_json, figures)
    return figures


def summary(figures: dict[str, Any]) -> str:
    alone, loaded = figures["alone"], figures["loaded"]
    lines = [f"normal client, {'alone':>6}: short first byte p50 {alone['ttfb_short_p50']:.2f} s, "
             f"max {alone['ttfb_short_max']:.2f} s; all {len(NORMAL)} requests "
             f"{alone['total_seconds']:.1f} s; errors {alone['errors']}",
             f"normal client, {'loaded':>6}: short first byte p50 "
             f"{loaded['ttfb_short_p50']:.2f} s, max {loaded['ttfb_short_max']:.2f} s; all "
             f"{len(NORMAL)} requests {loaded['total_seconds']:.1f} s; errors {loaded['errors']}",
             f"{figures['slow']} slow readers at {figures['slow_rate']}x real time took "
             f"{loaded['slow_took_audio_seconds']:.1f} s of audio; the engine made "
             f"{loaded['engine_audio_seconds']:.1f} s in the load",
             f"{figures['stalled']} stalled; clients dropped after "
             f"{', '.join(f'{s:.1f}' for s in loaded['dropped_after_seconds'])} s "
             f"(--send-timeout {figures['send_timeout']}); the stalled saw "
             f"{loaded['stalled_ended']}",
             f"RSS {figures['rss_before_mb']:.0f} MB before, {loaded['rss_highest_mb']:.0f} MB "
             f"at most in the load, {figures['rss_after_mb']:.0f} MB after; peak "
             f"{figures['peak_rss_mb']:.0f} MB; the host's load before the run "
             f"{figures['host_load_before']:.2f}"]
    return "\n".join(lines)
