"""The server's container image as its users run it: `snakemake image` builds it from the
real-weight build (conftest.real_built) with podman, on a Debian base made here with mmdebstrap
(no registry is reachable); it runs as a non-root user on a read-only root filesystem, answers
the `openai` SDK on a published loopback port, drains on SIGTERM and exits 0; compose runs it
with podman-compose; the Kubernetes manifests validate against Kubernetes' schemas.

This machine's container settings are the suite's own (tests/containers/containers.conf, and a
storage configuration written here): the vfs storage driver and runc, cgroupfs, no default
ulimits. podman and mmdebstrap are installed with apt where missing (root).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import (
    BIN,
    REPO,
    apt_lock,
    dry_run,
    edited,
    model_folder,
    once,
    real_build_config,
    run_snakemake,
    run_workflow,
)
from test_serve_parts import decode

from kokoro_tvm import paths
from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime.kokoro import Kokoro

pytestmark = pytest.mark.slow

# runc: the runtime tests/containers/containers.conf names (Debian's podman may bring crun).
PACKAGES = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap",
            "iptables": "iptables"}
# The suite's base: Debian's Python from Debian's packages, without documentation and
# translations (as Debian's own slim images leave them out).
BASE = "localhost/kokoro-tvm-test-base:bookworm"
SUITE = "bookworm"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kokoro-tvm/containers"
TEXT = "Hi there. Good day. See you."
PARAGRAPH = ("The first sentence is short. The second sentence takes a little longer to say. "
             "Here is a third one, and then a fourth. Finally, the fifth sentence ends it all.")
USER = "10001"


def podman(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> dict[str, str]:
    """podman with the suite's settings (environment variables this process and its children
    read), its tools installed where missing."""
    missing = [package for tool, package in PACKAGES.items() if shutil.which(tool) is None]
    if missing:
        with apt_lock(tmp_path_factory):
            done = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                                   *missing], capture_output=True, text=True)
        assert done.returncode == 0, (f"apt-get could not install {' '.join(missing)} (run "
                                      f"`apt-get install {' '.join(missing)}` as root):\n"
                                      f"{done.stderr[-2000:]}")
    CACHE.mkdir(parents=True, exist_ok=True)
    storage = CACHE / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{CACHE / "storage"}"\n'
                       f'runroot = "{CACHE / "run"}"\n')
    settings = {"CONTAINERS_CONF": str(REPO / "tests/containers/containers.conf"),
                "CONTAINERS_STORAGE_CONF": str(storage)}
    os.environ.update(settings)
    return settings


@pytest.fixture(scope="module")
def base(engine, tmp_path_factory) -> str:
    """BASE in the suite's storage, made once with mmdebstrap (the archive kept in CACHE, under
    a name that changes with the command that makes it)."""
    command = ["mmdebstrap", "--variant=minbase", "--format=tar", "--include=python3,python3-venv",
               *[f"--dpkgopt=path-exclude=/usr/share/{part}/*"
                 for part in ("doc", "man", "info", "locale")], SUITE]
    key = hashlib.sha256(" ".join(command).encode()).hexdigest()[:12]
    name = f"{BASE}-{key}"

    def make(_) -> str:
        if podman("image", "exists", name, check=False).returncode != 0:
            archive = CACHE / f"{SUITE}-python3-{key}.tar"
            if not archive.exists():
                partial = archive.with_suffix(".partial")
                subprocess.run([*command, str(partial)], check=True, capture_output=True)
                partial.rename(archive)
            podman("import", str(archive), name)
        return name

    return once(tmp_path_factory, "container_base", make)


@pytest.fixture(scope="module")
def image_config(base) -> list[str]:
    """The image settings the suite builds with: the real build's llvm folder (this machine
    runs it), on the suite's base."""
    settings = {"targets": ["llvm"], "base": base, "builder": "podman",
                "name": "kokoro-tvm-test"}
    return [f"image={json.dumps(settings)}"]


def test_a_base_that_cannot_be_had_stops_the_build_before_any_library(engine, tmp_path):
    """`snakemake --cores 2 image` on a fresh folder with a base that is neither local nor
    pullable (a name on this machine's own registry address, where none listens): it fails in
    one line that names the base, the reason and the fix, and no library was built."""
    base = "localhost/kokoro-tvm-no-such-base:1"
    settings = {"targets": ["llvm"], "base": base, "builder": "podman", "name": "kokoro-tvm-test"}
    done = run_snakemake(tmp_path, "image", "--config", f"image={json.dumps(settings)}",
                         check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    (line,) = [line for line in output.splitlines()
               if f"the base image {base} cannot be had" in line]
    assert "its registry (localhost) cannot be reached from here" in line, line
    assert "set image.base to a local image" in line and "mmdebstrap" in line, line
    assert not (tmp_path / "results/lib").exists(), sorted((tmp_path / "results/lib").rglob("*"))


@pytest.fixture(scope="module")
def image(real_built, workflow, image_config) -> str:
    """`snakemake image` in the real build, its archive loaded: the image's name."""
    run_workflow(real_built, workflow, "image", *real_build_config(), *image_config,
                 configfiles=())
    archive = paths.artifact(paths.IMAGE, real_built, target="llvm")
    loaded = podman("load", "--input", str(archive)).stdout
    name = loaded.strip().splitlines()[-1].split(": ", 1)[-1]
    assert name.endswith("kokoro-tvm-test:0.1.0-llvm"), loaded
    yield name
    podman("rmi", "--force", name, check=False)


def wait_for_health(url: str, seconds: float, alive=lambda: None) -> None:
    """Until ``url``/health answers 200, for at most ``seconds``; ``alive`` fails the wait
    early (a container that stopped)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        alive()
        assert time.monotonic() < deadline, f"{url} never answered /health"
        time.sleep(0.25)


class Container:
    """The image run detached, its port published on loopback, until /health answers."""

    def __init__(self, image: str, *options: str, start_seconds: float = 300):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        started = time.monotonic()
        self.id = podman("run", "--detach", "--read-only", "--tmpfs", "/tmp",
                         "--publish", f"127.0.0.1:{self.port}:8880", *options,
                         image).stdout.strip()
        wait_for_health(self.url, start_seconds, self._running)
        self.ready_seconds = time.monotonic() - started

    def _running(self) -> None:
        state = podman("inspect", "--format", "{{.State.Status}}", self.id).stdout.strip()
        assert state == "running", f"the container stopped:\n{self.logs()}"

    def logs(self) -> str:
        done = podman("logs", self.id, check=False)
        return done.stdout + done.stderr

    def remove(self) -> None:
        podman("rm", "--force", "--time", "0", self.id, check=False)


@pytest.fixture(scope="module")
def container(image):
    running = Container(image)
    print(f"run to /health ready: {running.ready_seconds:.1f} s")
    yield running
    running.remove()


def test_the_image_is_labelled_and_runs_as_a_user(real_built, image, container):
    """OCI labels name the version, the target and its CPU; the health check and the stop
    signal are the image's; the server runs as user 10001, not root, on a root filesystem it
    cannot write."""
    inspected = json.loads(podman("image", "inspect", image).stdout)[0]
    config = inspected["Config"]
    labels = config["Labels"]
    manifest = json.loads((model_folder(real_built) / paths.MODEL_MANIFEST).read_text())
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["io.kokoro-tvm.target"] == "llvm"
    assert labels["io.kokoro-tvm.cpu"] == manifest["cpu"]["mcpu"]
    assert config["User"] == f"{USER}:{USER}" and config["ExposedPorts"] == {"8880/tcp": {}}
    # podman 4 reports the health check beside the config, docker and podman 5 inside it
    health_check = inspected.get("Healthcheck") or config["Healthcheck"]
    assert "/health" in " ".join(health_check["Test"])
    assert config["StopSignal"] == "SIGTERM"
    assert podman("exec", container.id, "id", "-u").stdout.strip() == USER
    whoami = podman("top", container.id, "huser", "args").stdout
    assert "kokoro-tvm serve" in whoami and "root" not in whoami
    wrote = podman("exec", container.id, "touch", "/opt/kokoro-tvm/x", check=False)
    assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr


def test_openai_sdk_speaks_with_the_image(real_built, container):
    """The `openai` SDK against the container: a wav whose samples are those the `Kokoro` API's
    stream gives here for the same request (the server streams by default; the same libraries
    and weights), and a streamed mp3 of the same length."""
    import openai

    client = openai.OpenAI(base_url=f"{container.url}/v1", api_key="unused", max_retries=0)
    wav = client.audio.speech.create(model="tts-1", voice="af_heart", input=TEXT,
                                     response_format="wav").content
    got, rate = decode(wav, "wav")
    assert rate == SAMPLE_RATE
    want = np.concatenate([chunk.samples for chunk in
                           Kokoro(model_folder(real_built)).stream(TEXT, voice="af_heart")])
    assert len(got) == len(want)
    assert np.abs(np.round(got * 32767) - np.round(np.clip(want, -1, 1) * 32767)).max() <= 1
    with client.audio.speech.with_streaming_response.create(
            model="kokoro", voice="af_heart", input=TEXT, response_format="mp3") as response:
        parts = list(response.iter_bytes())
    mp3, rate = decode(b"".join(parts), "mp3")
    assert rate == SAMPLE_RATE and abs(len(mp3) - len(want)) < 0.05 * len(want)
    health = httpx.get(f"{container.url}/health").json()
    assert health["status"] == "ready" and health["target"] == "llvm"


def test_sigterm_during_a_stream_ends_it_whole_and_exits_0(image):
    """`podman stop` during a stream: the stream ends whole (a cut one raises), and the
    container exits 0 well within the grace period."""
    running = Container(image)
    try:
        text = " ".join([PARAGRAPH] * 2)
        with httpx.stream("POST", f"{running.url}/v1/audio/speech", timeout=120, json={
                "model": "kokoro", "input": text, "voice": "af_heart",
                "response_format": "pcm"}) as streamed:
            parts = streamed.iter_bytes()
            received = [next(parts)]
            stopping = subprocess.Popen(["podman", "stop", "--time", "30", running.id],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            received += list(parts)
        assert stopping.wait(60) == 0
        status = json.loads(podman("inspect", running.id).stdout)[0]["State"]
        assert status["ExitCode"] == 0, running.logs()
        assert len(b"".join(received)) / 2 > 10 * SAMPLE_RATE  # ten sentences of speech
        assert "draining: 1 request(s) in flight" in running.logs()
    finally:
        running.remove()


def image_jobs(real_built: Path, workflow: Path, image_config: list[str]) -> list[str]:
    """The rules a dry run of `snakemake image` in the real build would run."""
    return [job["rule"] for job in dry_run(real_built, "image", *real_build_config(),
                                           *image_config, snakefile=workflow / "Snakefile",
                                           configfiles=()) if job["rule"] != "image"]


def test_a_second_snakemake_image_does_nothing(real_built, workflow, image, image_config):
    assert image_jobs(real_built, workflow, image_config) == []


def test_a_runtime_edit_rebuilds_the_image_and_a_build_edit_does_not(real_built, workflow, image,
                                                                     image_config):
    """The image holds the runtime-only install: an edit of the engine rebuilds it alone (the
    model folder is current); an edit of build-only code (the GPU LSTM kernel) changes neither
    the CPU folder nor the image."""
    with edited(workflow, "kokoro_tvm/runtime/engine.py"):
        assert image_jobs(real_built, workflow, image_config) == ["image_target"]
    with edited(workflow, "kokoro_tvm/compile/gpu/lstm.py"):
        assert image_jobs(real_built, workflow, image_config) == []


def test_compose_serves_the_image_from_a_named_volume(image, tmp_path):
    """deploy/compose.yaml under podman-compose: the server's model folder in a named volume
    (filled from the image), its port published, a request answered; `down -v` removes it."""
    port = free_port()
    env = {**os.environ, "KOKORO_IMAGE": image, "KOKORO_PORT": f"127.0.0.1:{port}"}
    compose = [str(BIN / "podman-compose"), "--project-name",
               f"kokoro-test-{port}", "--file", str(REPO / "deploy/compose.yaml")]
    up = subprocess.run([*compose, "up", "--detach"], env=env, capture_output=True, text=True)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for_health(f"http://127.0.0.1:{port}", 300)
        wav = tmp_path / "hello.wav"
        subprocess.run(["curl", "--silent", "--fail", "--output", str(wav),
                        f"http://127.0.0.1:{port}/v1/audio/speech", "-H",
                        "Content-Type: application/json", "--data",
                        '{"model": "kokoro", "input": "Hello.", "voice": "af_heart", '
                        '"response_format": "wav"}'], check=True)
        samples, rate = decode(wav.read_bytes(), "wav")
        assert rate == SAMPLE_RATE and len(samples) > SAMPLE_RATE // 4
        volumes = podman("volume", "ls", "--format", "{{.Name}}").stdout.split()
        assert f"kokoro-test-{port}_kokoro-model" in volumes
    finally:
        down = subprocess.run([*compose, "down", "--volumes"], env=env, capture_output=True,
                              text=True)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"kokoro-test-{port}_kokoro-model" not in podman(
        "volume", "ls", "--format", "{{.Name}}").stdout.split()


def kubernetes_validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "kubernetes-validate"),
                           "--strict", str(path)], capture_output=True, text=True)


def test_the_kubernetes_manifests_validate(tmp_path):
    """deploy/kubernetes.yaml against Kubernetes' schemas, strictly (a misspelt field fails,
    as the second run shows); the Deployment runs the image's server with the drain inside
    the pod's grace period, probes on /health, and threads from its CPU limit."""
    import yaml

    manifests = REPO / "deploy/kubernetes.yaml"
    checked = kubernetes_validate(manifests)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "deployment/kokoro-tvm" in checked.stdout and "service/kokoro-tvm" in checked.stdout
    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text(manifests.read_text().replace("readinessProbe:", "readinesProbe:"))
    assert kubernetes_validate(misspelt).returncode != 0
    deployment = next(yaml.safe_load_all(manifests.read_text()))
    pod = deployment["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    args = server["args"]
    grace = float(args[args.index("--grace-period") + 1])
    assert grace < pod["terminationGracePeriodSeconds"]
    assert args[args.index("--threads") + 1] == "$(CPU_LIMIT)"
    assert server["env"][0]["valueFrom"]["resourceFieldRef"]["resource"] == "limits.cpu"
    assert server["readinessProbe"]["httpGet"]["path"] == "/health"
    assert server["securityContext"]["readOnlyRootFilesystem"] is True
