"""`kokoro-tvm serve` at the edges a deployment meets, as its users run it: the real server
process on loopback, on the tiny model that speaks (conftest.speaking_built, noise with the
random weights). A client that stops reading is dropped within --send-timeout and its slot
freed while another is served; behind Debian's nginx (started here on loopback), a pcm stream's
first bytes arrive before its request ends, the page works under a path prefix, and the
client's address is the one nginx forwards only where nginx is a trusted proxy.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from urllib.parse import urljoin

import httpx
import pytest
from conftest import REPO, SPEAKING_CHUNK_SECONDS, apt_lock, model_folder
from test_serve import metric

from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.measure.bench_serve import Server

pytestmark = pytest.mark.slow

# About 40 minutes of speech with the tiny model (a chunk a word, each about 3.75 s): a stream
# that outlasts any test unless it is stopped.
ENDLESS = "Good day. " * 300


@pytest.fixture(scope="module")
def folder(speaking_built):
    return model_folder(speaking_built)


def speech_request(port: int, text: str, receive_buffer: int) -> socket.socket:
    """A connection that has sent a pcm speech request for ``text`` and read its response's
    headers, with a receive buffer of ``receive_buffer`` bytes (a phone's on a slow network)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"model": "kokoro", "input": text, "voice": "af_heart",
                       "response_format": "pcm"}).encode()
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def test_a_client_that_stops_reading_is_dropped_while_another_is_served(folder, tmp_path):
    """A stream whose client reads nothing after its headers: the server makes a bounded part
    of it (what its buffers hold), a short request meanwhile is served whole, and within
    --send-timeout of its buffers filling the stream is dropped: its synthesis stopped, its
    slot freed, its client's connection cut."""
    timeout = 5.0
    with Server(folder, tmp_path / "server.log", "--send-timeout", str(timeout),
                "--max-chunk-seconds", SPEAKING_CHUNK_SECONDS) as server:
        stalled = speech_request(server.port, ENDLESS, receive_buffer=4096)
        stopped_reading = time.monotonic()
        served = httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
            "model": "kokoro", "input": "Good day.", "voice": "af_heart",
            "response_format": "pcm"})
        assert served.status_code == 200 and len(served.content) > SAMPLE_RATE
        # The stalled one still holds its slot, unless a loaded machine took longer than
        # --send-timeout over the short request and it was dropped already.
        assert (metric(server.url, "kokoro_tvm_queue_depth") == 1
                or metric(server.url, "kokoro_tvm_stopped_jobs_total",
                          'reason="disconnected"') == 1)
        deadline = stopped_reading + 60
        while metric(server.url, "kokoro_tvm_stopped_jobs_total", 'reason="disconnected"') == 0:
            assert time.monotonic() < deadline, "the stalled client was never dropped"
            time.sleep(0.2)
        dropped_after = time.monotonic() - stopped_reading
        assert metric(server.url, "kokoro_tvm_queue_depth") == 0
        spoken = metric(server.url, "kokoro_tvm_audio_seconds_total")
        time.sleep(1)
        assert metric(server.url, "kokoro_tvm_audio_seconds_total") == spoken  # stopped
        # What the buffers held: the chunks ahead, the one being sent, and the kernel's 256 KiB
        # of the server's send buffer and 4 KiB of the client's (5.5 s of pcm): a minute at
        # most, of the text's 40.
        assert spoken - len(served.content) / 2 / SAMPLE_RATE < 60, spoken
        received = 0
        with pytest.raises(ConnectionResetError):
            stalled.settimeout(10)
            while data := stalled.recv(65536):
                received += len(data)
        stalled.close()
        assert received / 2 / SAMPLE_RATE < 60
    print(f"dropped {dropped_after:.1f} s after it stopped reading, {spoken:.1f} s of audio made")
    assert dropped_after < timeout + 20


# The addresses of the proxy test, all on loopback: the client's, and nginx's towards the server.
CLIENT, PROXY = "127.0.0.3", "127.0.0.2"
PREFIX = "/tts/"


def documented(language: str) -> str:
    """docs/deploying.md's snippet for ``language`` (its one fenced block of it)."""
    (block,) = re.findall(rf"```{language}\n(.*?)```", (REPO / "docs/deploying.md").read_text(),
                          re.S)
    return block


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def nginx_binary(tmp_path_factory) -> str:
    """Debian's nginx, installed with apt where missing (root)."""
    search = f"{os.environ['PATH']}{os.pathsep}/usr/sbin"
    if shutil.which("nginx", path=search) is None:
        with apt_lock(tmp_path_factory):
            done = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                                   "nginx"], capture_output=True, text=True,
                                  env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        assert done.returncode == 0, ("apt-get could not install nginx (run `apt-get install "
                                      f"nginx` as root):\n{done.stderr[-2000:]}")
    return shutil.which("nginx", path=search)


@pytest.fixture(scope="module")
def proxied(folder, nginx_binary, tmp_path_factory):
    """The server, trusting PROXY alone, behind nginx on loopback with docs/deploying.md's
    location block, nginx connecting from PROXY: (nginx's URL, the server)."""
    work = tmp_path_factory.mktemp("nginx")
    with Server(folder, work / "server.log", "--trusted-proxy", PROXY,
                "--max-chunk-seconds", SPEAKING_CHUNK_SECONDS) as server:
        port = free_port()
        location = documented("nginx").replace("127.0.0.1:8880", f"127.0.0.1:{server.port}")
        temp = "\n".join(f"{kind}_temp_path {work / kind};"
                          for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (work / "nginx.conf").write_text(f"""
{"user root;" if os.geteuid() == 0 else ""}
daemon off;
worker_processes 1;
pid {work / "nginx.pid"};
error_log {work / "error.log"} info;
events {{ worker_connections 64; }}
http {{
    access_log {work / "access.log"};
    {temp}
    server {{
        listen 127.0.0.1:{port};
        proxy_bind {PROXY};
        {location}
    }}
}}
""")
        process = subprocess.Popen([nginx_binary, "-p", str(work), "-e", str(work / "error.log"),
                                    "-c", str(work / "nginx.conf")], stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, f"nginx stopped: {process.stderr.read()}"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "nginx never listened"
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}", server
        finally:
            process.terminate()
            process.wait(30)


def client_at(address: str, **kwargs) -> httpx.Client:
    """An httpx client whose connections come from ``address``."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60,
                        **kwargs)


def test_a_pcm_stream_comes_through_nginx_as_it_is_made(proxied):
    """Through nginx, a pcm stream's first bytes arrive while the server still synthesizes the
    rest (the request is in its queue), and the rest follows to the end."""
    url, server = proxied
    with client_at(CLIENT) as client, client.stream(
            "POST", urljoin(url, PREFIX + "v1/audio/speech"), json={
                "model": "kokoro", "input": "Good day. " * 6, "voice": "af_heart",
                "response_format": "pcm"}) as response:
        assert response.status_code == 200
        parts = response.iter_bytes()
        first = next(parts)
        assert len(first) > 0
        assert metric(server.url, "kokoro_tvm_queue_depth") == 1
        rest = b"".join(parts)
    assert len(rest) > 10 * len(first)  # twelve words, each one chunk
    assert metric(server.url, "kokoro_tvm_queue_depth") == 0


def test_the_page_works_under_a_path_prefix(proxied):
    """The page at nginx's /tts/ (and /tts redirected there); every URL its script fetches,
    taken relative to it, answers through the prefix: the voices, and speech with its words."""
    url, _ = proxied
    with client_at(CLIENT) as client:
        bare = client.get(urljoin(url, PREFIX.rstrip("/")))
        assert bare.status_code == 301 and bare.headers["location"].endswith(PREFIX)
        page = client.get(urljoin(url, PREFIX))
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        fetched = set(re.findall(r'fetch\("([^"]+)"', page.text))
        assert fetched == {"v1/audio/voices", "dev/captioned_speech"}
        voices = client.get(urljoin(str(page.url), "v1/audio/voices"))
        assert [v["id"] for v in voices.json()["voices"]] == ["af_heart"]
        captioned = client.post(urljoin(str(page.url), "dev/captioned_speech"), json={
            "model": "kokoro", "input": "Good day.", "voice": "af_heart",
            "response_format": "mp3", "stream": False})
        assert captioned.status_code == 200, captioned.text
        assert [t["word"] for t in captioned.json()["timestamps"]] == ["Good", "day."]


def logged_clients(server: Server, path: str) -> list[str]:
    """The client addresses the server's access log names for requests of ``path``."""
    return re.findall(rf'(\S+):\d+ - "GET {re.escape(path)} ', server.log.read_text())


def test_forwarded_addresses_are_honoured_from_the_trusted_proxy_alone(proxied):
    """A request through nginx (a trusted proxy) is logged as from its client, even when the
    client sends an X-Forwarded-For of its own; the same header sent to the server directly,
    from an address it does not trust, is ignored."""
    url, server = proxied
    spoofed = {"X-Forwarded-For": "198.51.100.7"}
    with client_at(CLIENT, headers=spoofed) as client:
        assert client.get(urljoin(url, PREFIX + "v1/models")).status_code == 200
        assert client.get(f"{server.url}/health").status_code == 200
    time.sleep(0.5)  # the access log's line is written after the response
    assert logged_clients(server, "/v1/models") == [CLIENT]
    assert logged_clients(server, "/health")[-1] == CLIENT  # the others: Server's wait for it
    assert "198.51.100.7" not in server.log.read_text()
