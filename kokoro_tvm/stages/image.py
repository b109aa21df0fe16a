from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

from kokoro_tvm import paths
from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.errors import UserError
from kokoro_tvm.paths import PathLike
from kokoro_tvm.stages.wheel import own_wheel

# What the image installs: the runtime with the server, no build stack.
REQUIREMENT = "kokoro-tvm[serve]"
# Pythons the package supports (pyproject.toml's requires-python).
PYTHONS = ("3.10", "3.11", "3.12")
# What the base's python3 reports: its version, C library and machine.
_DESCRIBE_PYTHON = ("import json, platform, sys; print(json.dumps({'version': "
                    "'%d.%d' % sys.version_info[:2], 'libc': platform.libc_ver(), "
                    "'machine': platform.machine()}))")


def _run(command: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    """``command``, its output passed on (the job's log); a failure names ``what`` failed."""
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, **kwargs)
    if done.returncode != 0:
        raise UserError(f"{what} failed (exit status {done.returncode}; the log above has "
                        "its output)")
    return done


# What a failed pull's output says, and the reason a base cannot be had that it means.
_PULL_FAILURES = (
    (("short-name", "unqualified-search"), "its name names no registry and none is configured "
                                           "to search"),
    (("no such host", "connection refused", "network is unreachable", "i/o timeout",
      "dial tcp", "pinging container registry", "tls handshake timeout",
      "temporary failure in name resolution"), "its registry ({registry}) cannot be reached from "
                                                   "here"),
    (("manifest unknown", "name unknown", "not found", "access to the resource is denied",
      "unauthorized", "does not exist"), "its registry ({registry}) has no such image"),
)


def _registry(base: str) -> str:
    """The registry an image name pulls from: its first part where that names a host, else
    Docker Hub (what docker and podman's usual search list take)."""
    first, _, rest = base.partition("/")
    return first if rest and ("." in first or ":" in first or first == "localhost") else "docker.io"


def _pull_failure(base: str, output: str) -> str:
    """Why a pull of ``base`` failed, from the engine's ``output``: one of _PULL_FAILURES'
    reasons, else its last line."""
    lowered = output.lower()
    for words, reason in _PULL_FAILURES:
        if any(word in lowered for word in words):
            return reason.format(registry=_registry(base))
    lines = output.strip().splitlines()
    return f"the pull failed ({lines[-1].strip() if lines else 'no output'})"


def ensure_base(engine: str, builder: str, base: str) -> None:
    """``base`` among ``engine``'s local images, pulled if it is not; where it cannot be had, a
    UserError naming it, why, and the fix (a local image: docs/deploying.md, Containers)."""
    exists = ["image", "exists", base] if builder == "podman" else ["image", "inspect", base]
    if subprocess.run([engine, *exists], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        print(f"the base image {base} is among {builder}'s local images", flush=True)
        return
    print(f"+ {engine} pull {base}", flush=True)
    pulled = subprocess.run([engine, "pull", base], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    print(pulled.stdout, flush=True)  # the job's log
    if pulled.returncode != 0:
        raise UserError(f"the base image {base} cannot be had: it is not among {builder}'s "
                        f"local images and {_pull_failure(base, pulled.stdout)}; set image.base to "
                        f"a local image (`{builder} images`; to make one without a registry, "
                        "see docs/deploying.md, Containers: mmdebstrap), or pull it where a "
                        f"registry is reachable and `{builder} load` it here")


def _engine(builder: str) -> str:
    """The container engine ``builder``'s executable."""
    engine = shutil.which(builder)
    if engine is None:
        raise UserError(f"image.builder is {builder}, which is not installed here: install it "
                        "(Debian: apt-get install podman) or set image.builder to docker")
    return engine


def describe_base(builder: str, base: str) -> dict[str, Any]:
    """The base image's python3 (its version, C library and machine), checked against the
    Pythons the package runs on; the base pulled first where it is not local (ensure_base)."""
    engine = _engine(builder)
    ensure_base(engine, builder, base)
    done = _run([engine, "run", "--rm", "--network", "none", "--entrypoint", "python3", base,
                 "-c", _DESCRIBE_PYTHON], f"running python3 in the base image {base}",
                stdout=subprocess.PIPE, text=True)
    python = json.loads(done.stdout.strip().splitlines()[-1])
    if python["version"] not in PYTHONS:
        raise UserError(f"the base image {base} has Python {python['version']}; kokoro-tvm "
                        f"runs on {', '.join(PYTHONS)}: set image.base to one with such a "
                        "python3 (e.g. python:3.12-slim)")
    return {"base": base, "builder": builder, "python": python}


def check_machine(base: dict[str, Any], architecture: str) -> None:
    """The base (describe_base's) runs libraries for ``architecture`` with glibc."""
    python = base["python"]
    if python["libc"][0] != "glibc" or python["machine"] != architecture:
        raise UserError(f"the base image {base['base']} is {python['machine']} with "
                        f"{python['libc'][0] or 'no glibc'}; the model folder's libraries need "
                        f"{architecture} with glibc: set image.base to such an image")


def wheel_platforms(libc_version: str, machine: str) -> list[str]:
    """pip's platform tags of the wheels a glibc ``libc_version`` on ``machine`` runs, newest
    first (manylinux_2_17 is manylinux2014)."""
    major, minor = map(int, libc_version.split(".")[:2])
    assert major == 2, libc_version
    return ([f"manylinux_2_{m}_{machine}" for m in range(minor, 16, -1)]
            + [f"manylinux2014_{machine}", f"linux_{machine}"])


def gather_wheels(source: Path, dest: Path, python: dict[str, Any], work: Path) -> None:
    """Into ``dest``: this package's wheel and every wheel REQUIREMENT needs, for the base's
    Python, at the versions installed here (what the suite ran), so that the image installs
    without an index. Packages published only as source are built into wheels here first:
    they are pure Python (a compiled one fails the download, named). ``work`` holds what is
    made on the way (outside the build's context, which the engine reads whole)."""
    pip = [sys.executable, "-m", "pip"]
    package = own_wheel(source, dest, work)
    requirement = f"{package}{REQUIREMENT.removeprefix('kokoro-tvm')}"
    frozen = _run([*pip, "freeze", "--exclude-editable"], "listing the installed versions",
                  stdout=subprocess.PIPE, text=True).stdout
    constraints = work / "constraints.txt"
    constraints.write_text("".join(line + "\n" for line in frozen.splitlines()
                                   if "==" in line and not line.startswith("kokoro-tvm")))
    built = work / "built"
    _run([*pip, "wheel", "--wheel-dir", str(built), "-c", str(constraints), requirement],
         "building the wheels of packages published as source")
    cp = "cp" + python["version"].replace(".", "")
    platforms = wheel_platforms(python["libc"][1], python["machine"])
    _run([*pip, "download", "--dest", str(dest), "--find-links", str(built),
          "--only-binary=:all:", "--python-version", python["version"],
          "--implementation", "cp", "--abi", cp, "--abi", "abi3", "--abi", "none",
          *[f"--platform={tag}" for tag in platforms], "-c", str(constraints), requirement],
         f"fetching the wheels for Python {python['version']} on {python['machine']}")


def strip_debug_info(wheels: Path, work: Path) -> int:
    """Each wheel in ``wheels`` whose shared libraries carry debugging sections (spaCy's, thinc's
    and PyAV's do: about 150 MB of the image), repacked without them (`strip --strip-debug`,
    which keeps every symbol; `wheel pack` writes the RECORD anew). Libraries that auditwheel
    grafted (the ``*.libs`` folders, rewritten by patchelf) are left as they are. The bytes
    saved."""
    strip = shutil.which("strip")
    if strip is None:
        raise UserError("`strip` is not installed here, and the image's wheels are stripped of "
                        "debugging sections with it: install binutils (Debian: apt-get install "
                        "binutils)")
    saved = 0
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            if not any(_is_own_library(name) for name in archive.namelist()):
                continue
        unpacked = work / "unpacked"
        _run([sys.executable, "-m", "wheel", "unpack", "--dest", str(unpacked), str(wheel)],
             f"unpacking {wheel.name}", stdout=subprocess.DEVNULL)
        (tree,) = unpacked.iterdir()
        before = sum(f.stat().st_size for f in tree.rglob("*") if f.is_file())
        libraries = [str(f) for f in tree.rglob("*")
                     if f.is_file() and _is_own_library(str(f.relative_to(tree)))]
        _run([strip, "--strip-debug", *libraries], f"stripping {wheel.name}")
        after = sum(f.stat().st_size for f in tree.rglob("*") if f.is_file())
        if after < before:
            repacked = work / "repacked"
            repacked.mkdir()
            _run([sys.executable, "-m", "wheel", "pack", "--dest-dir", str(repacked), str(tree)],
                 f"repacking {wheel.name}", stdout=subprocess.DEVNULL)
            (new,) = repacked.iterdir()
            new.replace(wheel)
            repacked.rmdir()
            saved += before - after
        shutil.rmtree(unpacked)
    return saved


def _is_own_library(name: str) -> bool:
    """Whether a wheel's file ``name`` is a shared library of its own (not auditwheel's)."""
    top = name.split("/", 1)[0]
    return not top.endswith(".libs") and (name.endswith(".so") or ".so." in name.rsplit("/", 1)[-1])


def _link_tree(folder: Path, dest: Path) -> None:
    """``folder`` at ``dest``, hard-linked where the filesystem allows (no 400 MB copy)."""
    def link(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    shutil.copytree(folder, dest, copy_function=link)


def _git(source: Path, *command: str) -> str:
    """What git says of the checkout at ``source`` (its commit, its remote), or "unknown"."""
    done = subprocess.run(["git", "-C", str(source), *command], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def build_image(folder: PathLike, containerfile: PathLike, source: PathLike, out: PathLike,
                base: PathLike, name: str) -> dict[str, Any]:
    """The server's container image for a model folder (results/dist/{target}), saved as a
    docker-archive that `podman load` and `docker load` read, tagged {name}:{version}-{target}.

    The image is ``containerfile`` built FROM the base image that ``base`` describes
    (describe_base's JSON: the image, its engine and its Python) with that engine:
    the runtime-only install of kokoro-tvm[serve] from the package's ``source`` folder (no
    PyTorch, no compiler), the model folder, a non-root user and `kokoro-tvm serve` on port
    8880. Its wheels are gathered here, for the base's Python and at the versions installed
    here, and installed without an index: the build needs no network beyond the base image.
    Saved beside ``out`` and renamed into place."""
    folder, source, out = Path(folder), Path(source), Path(out)
    described = json.loads(Path(base).read_text())
    base, builder, python = described["base"], described["builder"], described["python"]
    engine = _engine(builder)
    manifest = json.loads((folder / paths.MODEL_MANIFEST).read_text())
    check_machine(described, manifest["architecture"])
    tag = f"{name}:{version('kokoro-tvm')}-{manifest['target']}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.stem}.context.") as work:
        context = Path(work) / "context"
        context.mkdir()
        gather_wheels(source, context / "wheels", python, Path(work))
        saved = strip_debug_info(context / "wheels", Path(work))
        print(f"debugging sections stripped from the wheels: {saved / 1e6:.0f} MB", flush=True)
        _link_tree(folder, context / "model")
        labels = {"VERSION": version("kokoro-tvm"), "REVISION": _git(source, "rev-parse", "HEAD"),
                  "SOURCE": _git(source, "remote", "get-url", "origin"),
                  "TARGET": manifest["target"], "CPU": manifest["cpu"]["mcpu"] or "generic"}
        _run([engine, "build", *(["--format", "docker"] if builder == "podman" else []),
              "--file", str(Path(containerfile).resolve()), "--build-arg", f"BASE={base}",
              *[f"--build-arg={key}={value}" for key, value in labels.items()],
              "--tag", tag, str(context)], f"building the image {tag}")
    with atomic_path(out) as tmp:
        tmp.unlink()  # the engine writes the archive itself
        _run([engine, "save", *(["--format", "docker-archive"] if builder == "podman" else []),
              "--output", str(tmp), tag], f"saving the image {tag}")
    return {"image": tag, "builder": builder, "python": python["version"], **labels}
