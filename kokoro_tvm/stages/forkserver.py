"""Warm starts for the stages' jobs: a local build keeps one process per kind of stage with
its heavy modules imported (PyTorch and Kokoro; TVM), and each job's workflow script hands its
command line to it; the server forks, and the child runs the script as its own process would,
on the job's standard streams, working directory and environment. A job pays for its work, not
for the imports every job repeats (docs/build-time.md).

A script runs in its own process whenever no server takes it: outside a build, on a cluster's
nodes, under another Python (a conda environment), or while the server still starts.

    python -m kokoro_tvm.stages.forkserver --kind torch --socket PATH   (rules/common.smk)
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Callable

import kokoro_tvm
from kokoro_tvm.errors import run_script

# The folder of the servers' sockets, set in the build's environment while they run.
FOLDER_VARIABLE = "KOKORO_TVM_FORKSERVER"
PACKAGE = str(Path(kokoro_tvm.__file__).parent)

# What each kind of server imports before it serves: what its scripts' jobs would import first.
# Importing runs no parallel region, so a fork leaves the child no thread pool to inherit.
PRELOADS = {
    "torch": ("torch", "kokoro", "kokoro_tvm.model.components", "kokoro_tvm.stages.export",
              "kokoro_tvm.stages.params", "kokoro_tvm.stages.reference"),
    "tvm": ("tvm", "tvm.relax", "kokoro_tvm.compile.lower", "kokoro_tvm.compile.build",
            "kokoro_tvm.compile.specialize", "kokoro_tvm.measure.validate",
            "kokoro_tvm.stages.validate"),
}


def socket_path(folder: str | os.PathLike, kind: str) -> str:
    return os.path.join(folder, f"{kind}.sock")


# --------------------------------------------------------------------------------------------
# The job's side.
# --------------------------------------------------------------------------------------------

def run_stage(main: Callable[[], object], kind: str) -> int:
    """A workflow script's ``main`` run by the ``kind`` server when one takes it, else here
    (``run_script``): its exit status either way."""
    handed = _hand_over(kind)
    return run_script(main) if handed is None else handed


def _hand_over(kind: str) -> int | None:
    """The job's exit status from the server, or None when no server takes the job."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(socket_path(folder, kind))
    except OSError:  # not started yet, or ended: the job runs here
        conn.close()
        return None
    env = {k: v for k, v in os.environ.items() if k != FOLDER_VARIABLE}
    job = {"argv": [os.path.abspath(sys.argv[0]), *sys.argv[1:]], "cwd": os.getcwd(),
           "env": env, "python": sys.prefix, "package": PACKAGE}
    with conn:
        socket.send_fds(conn, [json.dumps(job).encode()], [0, 1, 2])
        reply = conn.recv(4096)  # when the job has ended
    if not reply:
        print(f"{sys.argv[0]}: error: the {kind} fork server ended before this job did; run the "
              "build again", file=sys.stderr)
        return 1
    answer = json.loads(reply)
    return None if "refused" in answer else answer["exit"]


# --------------------------------------------------------------------------------------------
# The server's side.
# --------------------------------------------------------------------------------------------

def serve(kind: str, path: str, owner: int) -> None:
    """Imports the ``kind``'s modules, then runs each job it is handed in a fork of itself,
    while its parent is ``owner`` (the process that started it; once that ends, no more)."""
    if kind == "tvm":
        from kokoro_tvm.stages.common import without_torch

        without_torch()
    for module in PRELOADS[kind]:
        __import__(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".part")  # jobs find it once it serves
    listener.listen(64)
    os.rename(path + ".part", path)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    running: dict[int, socket.socket | None] = {}  # pid -> its job's connection
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while os.getppid() == owner:
            for key, _ in selector.select(timeout=0.5):
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    pid = _start(conn, listener, running)
                    if pid is not None:
                        running[pid] = conn
                        selector.register(conn, selectors.EVENT_READ, pid)
                else:  # the job's process went away (cancelled): so does its run
                    _kill(key.data)
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
                    running[key.data] = None
            _reap(running, selector)
    finally:
        for pid in running:
            _kill(pid)
        with contextlib.suppress(OSError):
            os.unlink(path)
            os.rmdir(os.path.dirname(path))  # the last server out, when no stop_servers came


def _start(conn: socket.socket, listener: socket.socket,
           running: dict[int, socket.socket | None]) -> int | None:
    """The pid of the fork running the job ``conn`` hands over; None when it is refused (the
    job then runs itself) or unreadable (its process reports the server's end)."""
    fds = []
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        job = json.loads(message)
        ours = job["python"] == sys.prefix and job["package"] == PACKAGE and len(fds) == 3
        if not ours:
            conn.send(json.dumps({"refused": "another Python or package"}).encode())
    except (OSError, ValueError, KeyError, TypeError):
        ours = False
    if not ours:
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)  # the job and what it starts are killed together
            _end_with_parent(server)
            listener.close()
            for other in running.values():
                if other is not None:
                    other.close()
            conn.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            code = _run(job)
        finally:
            os._exit(code)
    for fd in fds:
        os.close(fd)
    try:
        os.setpgid(pid, pid)
    except OSError:  # the child got there first, or has already ended
        pass
    return pid


def _end_with_parent(server: int) -> None:
    """This process is killed when the server ends (Linux): a job whose server died has
    already been reported failed, and must not write its outputs afterwards."""
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1  # linux/prctl.h
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != server:  # it ended before the request
        os._exit(1)


def _run(job: dict) -> int:
    """The script as its own process would run it: the job's directory, environment and
    arguments, its exit status."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    threads = os.environ.get("OMP_NUM_THREADS")  # PyTorch read it when the server started
    if sys.modules.get("torch") is not None and threads:
        sys.modules["torch"].set_num_threads(int(threads))
    sys.argv = list(job["argv"])
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code
        if not isinstance(code, int):
            if code is not None:
                print(code, file=sys.stderr)
            code = 0 if code is None else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        pass


def _reap(running: dict[int, socket.socket | None], selector: selectors.BaseSelector) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = running.pop(pid, None)
        if conn is not None:
            selector.unregister(conn)
            try:
                conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:
                pass
            conn.close()


# --------------------------------------------------------------------------------------------
# The build's side.
# --------------------------------------------------------------------------------------------

def start_servers(kinds=tuple(PRELOADS)) -> tuple[str, list[subprocess.Popen]]:
    """One server per kind for this process's build: the socket folder (for
    ``FOLDER_VARIABLE``) and the servers, which end with this process (``stop_servers``)."""
    folder = tempfile.mkdtemp(prefix="kokoro-tvm-")
    servers = [subprocess.Popen([sys.executable, "-m", __name__, "--kind", kind,
                                 "--socket", socket_path(folder, kind),
                                 "--owner", str(os.getpid())],
                                stdin=subprocess.DEVNULL, start_new_session=True)
               for kind in kinds]
    return folder, servers


def stop_servers(folder: str, servers: list[subprocess.Popen]) -> None:
    for server in servers:
        server.terminate()
    for server in servers:
        server.wait()
    shutil.rmtree(folder, ignore_errors=True)  # a server stopped while it imported leaves it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", required=True, choices=sorted(PRELOADS))
    parser.add_argument("--socket", required=True, help="where jobs find the server")
    parser.add_argument("--owner", required=True, type=int,
                        help="the process that started it: the server ends with it")
    args = parser.parse_args()
    serve(args.kind, args.socket, args.owner)


if __name__ == "__main__":
    main()
