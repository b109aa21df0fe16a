"""The speech server under load: `kokoro-tvm serve` on the TVM engine and on the PyTorch
reference engine, one after the other in one run, on a loopback port, called by an asyncio
httpx load generator bounded in requests and time.

Per engine: a baseline (short requests one at a time: their time to first byte with no other
load), then levels of clients each sending a fixed mix of short and long texts as streamed
PCM, in the order ORDER: every loaded level between two levels of one client. Per level: audio
seconds served per wall second and its ratio to the engine alone (audio per second times the
server's own synthesis seconds per audio second, from /metrics, with one client: the level's
own for one client, the mean of the two around it for a loaded level; 1 when the engine never
waits and concurrency does not slow it), time to first
byte p50/p95 of short requests sent while a long one streamed (from its first byte to its
end; a short request sent with a long one, before it streams, waits for other requests' first
chunks, not for a stream: the p95 of every short request is beside it), the worst stall of any
stream played in real time from its first byte (metrics.worst_stall), errors. Then, on the TVM
engine, a soak: SOAK short requests from two clients, the server's RSS after the first
SOAK_WARM and at the end. Peak RSS is the server process's high-water mark.
"""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from kokoro_tvm.atomic import write_json
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.measure.metrics import worst_stall

ENGINES = ("tvm", "torch")
# A shared host's speed drifts by more than the throughput goal's 10% within minutes: each
# loaded level is compared with the engine alone just before and just after it.
ORDER = (1, 2, 1, 4, 1)
assert all(0 < i < len(ORDER) - 1 and ORDER[i - 1] == ORDER[i + 1] == 1
           for i, clients in enumerate(ORDER) if clients != 1)
SHORT = ("Hello there.", "Yes, that works for me.", "Thank you very much!",
         "See you tomorrow at noon.", "The meeting has been moved to Friday.")
LONG = ("When the last train had left and the platform lights were dimmed one by one, the "
        "station master walked slowly along the tracks, listening for anything out of place. "
        "Nothing moved. He locked the gate, put the keys in his coat pocket, and went home "
        "through the snow. By the time he reached his door, the town was asleep.")
# Each client's requests, in turn (client k starts at position k): one long text in four.
MIX = ("long", "short", "short", "short")
REQUESTS_PER_CLIENT = 8
BASELINE_REQUESTS = 10
SOAK, SOAK_WARM = 200, 20
LEVEL_SECONDS = 600  # no new request after this long at one level
BYTES_PER_SECOND = 2 * SAMPLE_RATE  # pcm: 16-bit mono


@dataclass
class Served:
    kind: str
    sent: float
    while_long: bool  # a long request was streaming when this one was sent
    status: int = 0
    first_byte: float | None = None
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    done: float = 0.0

    @property
    def audio_seconds(self) -> float:
        return sum(size for _, size in self.arrivals) / BYTES_PER_SECOND

    @property
    def stall(self) -> float:
        return worst_stall([t for t, _ in self.arrivals],
                           [size / BYTES_PER_SECOND for _, size in self.arrivals])


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int, field_name: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field_name} for process {pid}")


class Server:
    """``kokoro-tvm serve --model model *options`` in a child process on a free loopback port,
    once its /health answers; stopped by ``stop`` or on leaving its ``with`` block. ``python``
    runs it: another install's interpreter measures the server as that install deploys it."""

    def __init__(self, model: Path, log: Path, *options: str, env: dict[str, str] | None = None,
                 python: str | Path = sys.executable, start_seconds: float = 600):
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        # Absolute paths: the server runs from / (it must not depend on the working folder),
        # and not resolved, which would take a virtual environment's python out of it.
        python = os.path.abspath(python) if os.sep in str(python) else str(python)  # or on PATH
        command = [python, "-m", "kokoro_tvm.cli", "serve",
                   "--model", os.path.abspath(model), "--port", str(self.port), *options]
        with open(log, "w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            env={**os.environ, **(env or {})}, cwd="/")
        started = time.monotonic()
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"the server stopped:\n{log.read_text()}")
                try:
                    if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() - started > start_seconds:
                    raise RuntimeError(f"no /health in {start_seconds:.0f} s:\n{log.read_text()}")
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        self.load_seconds = time.monotonic() - started

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *_) -> None:
        self.stop()

    def counters(self) -> dict[str, float]:
        """The engine's audio and synthesis seconds so far (its /metrics)."""
        import httpx

        found = {}
        for line in httpx.get(f"{self.url}/metrics").text.splitlines():
            for name in ("audio_seconds_total", "synthesis_seconds_total"):
                if line.startswith(f"kokoro_tvm_{name} "):
                    found[name] = float(line.split()[-1])
        return found

    def rss_mb(self) -> float:
        return _rss_mb(self.process.pid, "VmRSS")

    def peak_rss_mb(self) -> float:
        return _rss_mb(self.process.pid, "VmHWM")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)


async def _request(client, url: str, kind: str, text: str, long_streaming: list[int]
                   ) -> Served:
    served = Served(kind, time.perf_counter(), while_long=long_streaming[0] > 0)
    try:
        async with client.stream("POST", f"{url}/v1/audio/speech", json={
                "model": "kokoro", "input": text, "voice": "af_heart",
                "response_format": "pcm"}) as response:
            served.status = response.status_code
            async for data in response.aiter_bytes():
                now = time.perf_counter()
                if served.first_byte is None:
                    served.first_byte = now - served.sent
                    if kind == "long":  # streaming from its first byte to its end
                        long_streaming[0] += 1
                served.arrivals.append((now, len(data)))
    except Exception:  # noqa: BLE001 - a failed request is a figure (errors), not a crash
        served.status = -1
    finally:
        if kind == "long" and served.first_byte is not None:
            long_streaming[0] -= 1
    served.done = time.perf_counter()
    return served


async def _load(url: str, clients: int, per_client: int, mix: Sequence[str],
                seconds: float) -> tuple[list[Served], float]:
    """``clients`` clients, each sending ``per_client`` requests of ``mix`` in turn (client k
    from position k), stopping early after ``seconds``; the requests and the wall time."""
    import httpx

    long_streaming = [0]
    started = time.perf_counter()
    texts = {"short": SHORT, "long": (LONG,)}

    async def client(k: int, http) -> list[Served]:
        out = []
        for i in range(per_client):
            if time.perf_counter() - started > seconds:
                break
            kind = mix[(k + i) % len(mix)]
            pool = texts[kind]
            out.append(await _request(http, url, kind, pool[(k + i) % len(pool)],
                                      long_streaming))
        return out

    async with httpx.AsyncClient(timeout=seconds) as http:
        per_client_results = await asyncio.gather(*(client(k, http) for k in range(clients)))
    return [s for results in per_client_results for s in results], time.perf_counter() - started


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _level_figures(served: list[Served], wall: float, before: dict, after: dict
                   ) -> dict[str, Any]:
    ok = [s for s in served if s.status == 200]
    audio = sum(s.audio_seconds for s in ok)
    synthesis = after["synthesis_seconds_total"] - before["synthesis_seconds_total"]
    engine_audio = after["audio_seconds_total"] - before["audio_seconds_total"]
    engine_rtf = synthesis / engine_audio if engine_audio else None
    short_ttfb = [s.first_byte for s in ok if s.kind == "short" and s.while_long]
    every_short = [s.first_byte for s in ok if s.kind == "short"]
    stalls = [s.stall for s in ok]
    return {
        "requests": len(served), "errors": len(served) - len(ok),
        "audio_seconds": audio, "wall_seconds": wall,
        "audio_per_second": audio / wall,
        "engine_rtf": engine_rtf,
        "short_while_long": len(short_ttfb),
        "ttfb_short_p50": _percentile(short_ttfb, 0.5),
        "ttfb_short_p95": _percentile(short_ttfb, 0.95),
        "ttfb_every_short_p95": _percentile(every_short, 0.95),
        "worst_stall": max(stalls, default=None),
        "stall_p95": _percentile(stalls, 0.95),
    }


def _level(server: Server, clients: int) -> dict[str, Any]:
    """``clients`` clients sending MIX (REQUESTS_PER_CLIENT each): the level's figures."""
    before = server.counters()
    served, wall = asyncio.run(_load(server.url, clients, REQUESTS_PER_CLIENT, MIX,
                                     LEVEL_SECONDS))
    return _level_figures(served, wall, before, server.counters())


def bench_engine(model: Path, engine: str, threads: int, work: Path, soak: bool,
                 python: str | Path = sys.executable) -> dict[str, Any]:
    threads_env = {"TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    with Server(model, work / f"server_{engine}.log", "--engine", engine, "--max-queue", "64",
                env=threads_env, python=python) as server:
        figures: dict[str, Any] = {"load_seconds": server.load_seconds}
        served, _ = asyncio.run(_load(server.url, 1, BASELINE_REQUESTS, ("short",),
                                      LEVEL_SECONDS))
        alone = [s.first_byte for s in served if s.status == 200]
        figures["baseline"] = {"requests": len(served), "errors": len(served) - len(alone),
                               "ttfb_short_p50": _percentile(alone, 0.5),
                               "ttfb_short_p95": _percentile(alone, 0.95)}
        runs = [dict(_level(server, clients), clients=clients) for clients in ORDER]
        for i, level in enumerate(runs):
            # 1 when the server delivers audio as fast as its engine makes it for one client
            # at a time, always busy: below, concurrency slows the engine or leaves it idle.
            around = [level] if level["clients"] == 1 else [runs[i - 1], runs[i + 1]]
            rtfs = [run["engine_rtf"] for run in around]
            level["engine_alone_rtf"] = sum(rtfs) / len(rtfs) if all(rtfs) else None
            level["throughput_vs_engine"] = (level["audio_per_second"] * level["engine_alone_rtf"]
                                             if level["engine_alone_rtf"] else None)
            p95, alone_p95 = level["ttfb_short_p95"], figures["baseline"]["ttfb_short_p95"]
            level["ttfb_short_p95_vs_alone"] = p95 / alone_p95 if p95 and alone_p95 else None
            print(f"{engine}: {level}", file=sys.stderr)
        figures["levels"] = runs
        if soak:
            figures["soak"] = _soak(server)
        figures["peak_rss_mb"] = server.peak_rss_mb()
    return figures


def _soak(server: Server) -> dict[str, Any]:
    """SOAK short requests from two clients; the server's RSS after SOAK_WARM and after all."""
    per_client = SOAK_WARM // 2
    warm, _ = asyncio.run(_load(server.url, 2, per_client, ("short",), LEVEL_SECONDS))
    rss_warm = server.rss_mb()
    rest, _ = asyncio.run(_load(server.url, 2, (SOAK - SOAK_WARM) // 2, ("short",),
                                LEVEL_SECONDS * 2))
    rss_end = server.rss_mb()
    served = warm + rest
    return {"requests": len(served), "errors": sum(s.status != 200 for s in served),
            "rss_after_warm_mb": rss_warm, "rss_after_all_mb": rss_end,
            "rss_growth": rss_end / rss_warm - 1}


def run(model: str | Path, engines: Sequence[str], threads: int, out_json: str | Path,
        runtime_python: str | Path | None = None) -> dict[str, Any]:
    """Every engine's figures (the TVM one with the soak), written to ``out_json``; the TVM
    server is run by ``runtime_python`` where given (a runtime-only install's interpreter with
    the serve extra: what a deployment's memory is), else by this one."""
    out_json = Path(out_json)
    work = out_json.parent / f"{out_json.stem}_logs"
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"model": str(model), "threads": threads,
                               "order": list(ORDER), "requests_per_client": REQUESTS_PER_CLIENT,
                               "mix": list(MIX), "engines": {},
                               "tvm_python": str(runtime_python or sys.executable)}
    for engine in engines:
        python = runtime_python if engine == "tvm" and runtime_python else sys.executable
        figures["engines"][engine] = bench_engine(Path(model), engine, threads, work,
                                                  soak=engine == "tvm", python=python)
    write_json(out_json, figures)
    return figures


def summary(figures: dict[str, Any]) -> str:
    """The figures as a table: one line per engine and level."""
    lines = [f"{'engine':6} {'clients':>7} {'audio/s':>8} {'vs engine':>9} {'rtf':>6} "
             f"{'ttfb p50':>8} "
             f"{'ttfb p95':>8} {'p95/alone':>9} {'every p95':>9} {'stall':>6} {'errors':>6}"]

    def num(value, fmt=".2f"):
        return format(value, fmt) if value is not None else "-"

    for engine, by_level in figures["engines"].items():
        base = by_level["baseline"]
        lines.append(f"{engine:6} {'alone':>7} {'':>8} {'':>9} {'':>6} "
                     f"{num(base['ttfb_short_p50']):>8} "
                     f"{num(base['ttfb_short_p95']):>8} {'':>9} {'':>9} {'':>6} "
                     f"{base['errors']:>6}")
        for f in by_level["levels"]:
            lines.append(f"{engine:6} {f['clients']:>7} {num(f['audio_per_second']):>8} "
                         f"{num(f['throughput_vs_engine']):>9} {num(f['engine_rtf'], '.3f'):>6} "
                         f"{num(f['ttfb_short_p50']):>8} "
                         f"{num(f['ttfb_short_p95']):>8} {num(f['ttfb_short_p95_vs_alone']):>9} "
                         f"{num(f['ttfb_every_short_p95']):>9} {num(f['worst_stall']):>6} "
                         f"{f['errors']:>6}")
        lines.append(f"{engine:6} peak RSS {by_level['peak_rss_mb']:.0f} MB, loaded in "
                     f"{by_level['load_seconds']:.1f} s")
        if "soak" in by_level:
            s = by_level["soak"]
            lines.append(f"{engine:6} soak: {s['requests']} requests, {s['errors']} errors, RSS "
                         f"{s['rss_after_warm_mb']:.0f} -> {s['rss_after_all_mb']:.0f} MB "
                         f"({100 * s['rss_growth']:+.1f}%)")
    return "\n".join(lines)
