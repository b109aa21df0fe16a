"""The server's Prometheus metrics (``GET /metrics``), in a registry of each app's own."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

PREFIX = "kokoro_tvm"
# Latencies from a short reply's first byte (tens of ms on a GPU) to a long text (minutes).
LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 120, 300, 600)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 4)


class ServerMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(f"{PREFIX}_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.first_byte = Histogram(f"{PREFIX}_time_to_first_byte_seconds",
                                    "Speech requests: from arrival to the first audio byte",
                                    buckets=LATENCY_BUCKETS, registry=r)
        self.latency = Histogram(f"{PREFIX}_request_seconds", "Requests: arrival to last byte",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.audio = Counter(f"{PREFIX}_audio_seconds", "Seconds of audio synthesized",
                             registry=r)
        self.synthesis = Counter(f"{PREFIX}_synthesis_seconds",
                                 "Seconds the engine spent synthesizing", registry=r)
        self.real_time_factor = Histogram(f"{PREFIX}_chunk_real_time_factor",
                                          "Synthesis seconds per audio second, per chunk",
                                          buckets=RTF_BUCKETS, registry=r)
        self.queue_depth = Gauge(f"{PREFIX}_queue_depth",
                                 "Speech requests admitted and not finished", registry=r)
        self.dropped = Counter(f"{PREFIX}_stopped_jobs",
                               "Syntheses stopped early: client gone, or deadline passed",
                               ["reason"], registry=r)

    def chunk(self, audio_seconds: float, synthesis_seconds: float) -> None:
        self.audio.inc(audio_seconds)
        self.synthesis.inc(synthesis_seconds)
        if audio_seconds > 0:
            self.real_time_factor.observe(synthesis_seconds / audio_seconds)

    def text(self) -> bytes:
        return generate_latest(self.registry)
