"""``kokoro-tvm serve``: everything loaded first, then the port opened (uvicorn) until a
signal's drain is over."""
from __future__ import annotations

import logging
import socket

from kokoro_tvm.runtime.engine import TvmEngine
from kokoro_tvm.runtime.kokoro import Kokoro
from kokoro_tvm.runtime.model_folder import ModelFolder
from kokoro_tvm.runtime.voices import describe_voice
from kokoro_tvm.serve.app import Limits, create_app
from kokoro_tvm.serve.drain import Drain, DrainingServer

log = logging.getLogger("kokoro_tvm.serve")


def ready_model(folder: ModelFolder, engine=None, lstm: str | None = None,
                max_frames: int | None = None) -> Kokoro:
    """``folder``'s model with every library loaded and its weights prepared, and the G2P of
    every language its voices speak that is installed, each used once: no request pays a first
    use. The compiled engine (``engine`` None) decodes at most ``max_frames`` frames a call
    (TvmEngine)."""
    spoken = {}
    for info in map(describe_voice, folder.voices):
        if info.language is not None and info.unavailable is None:
            spoken.setdefault(info.language, info.name)
    if engine is None:  # every bucket runs in a server: keep one call's activations at a time
        engine = TvmEngine(folder, lstm=lstm, allocator="naive", max_frames=max_frames)
        engine.load_all()
    tts = Kokoro(folder, engine=engine, languages=sorted(spoken))
    english = next((spoken[lang] for lang in ("en-us", "en-gb") if lang in spoken), None)
    if english is not None:  # the first calls: page in code and tables before any request
        tts.create("Ready.", voice=english)
    return tts


# The kernel's send buffer of each connection, fixed (Linux doubles it, to 256 KiB): instead of
# growing to tcp_wmem's 4 MiB for a client that does not read. Audio is at most 64 KB a second
# (SSE's base64 PCM), so this is a second of it even at 4 s of round trip.
SEND_BUFFER = 128 * 1024


def listening_socket(config, send_timeout: float) -> socket.socket:
    """uvicorn's socket for ``config``, with what every connection accepted on it inherits: a
    fixed send buffer (SEND_BUFFER), and, on Linux, TCP_USER_TIMEOUT: a connection whose sent
    data has waited ``send_timeout`` seconds unread (its client's window shut) or unacknowledged
    is dropped by the kernel, and its request ends as a disconnect (its slot freed)."""
    sock = config.bind_socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, round(send_timeout * 1000))
    return sock


def serve(tts: Kokoro, host: str, port: int, limits: Limits, api_key: str | None,
          grace_period: float, send_timeout: float, trusted_proxies: list[str],
          web: str | None = None) -> None:
    """Serves until a signal and the drain it starts (drain.py) are over. A request's client
    is the address it came from, or, from ``trusted_proxies`` alone (addresses or networks), the
    one its X-Forwarded-For names (uvicorn's proxy headers)."""
    import uvicorn

    drain = Drain(grace_period)
    app = create_app(tts, limits, api_key, drain, web)
    # The drain has waited for the requests in flight: uvicorn's own wait is for the
    # connections' last bytes.
    config = uvicorn.Config(app, host=host, port=port, log_level="info",
                            timeout_graceful_shutdown=1, proxy_headers=bool(trusted_proxies),
                            forwarded_allow_ips=trusted_proxies)
    DrainingServer(config, drain).run(sockets=[listening_socket(config, send_timeout)])
