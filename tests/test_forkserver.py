"""The fork servers a local build hands its stage jobs to (kokoro_tvm/stages/forkserver.py): a
job handed over runs as its own process would (arguments, directory, environment, streams,
exit status, errors), refuses nothing it should take and takes nothing it should refuse, and
neither a cancelled job nor a server outlives what started it."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

from kokoro_tvm.stages import forkserver

# A stage script in miniature: what it reports shows where and how it ran. It imports no TVM
# itself, so "tvm loaded" says it ran in the tvm server.
SCRIPT = """\
import os, sys, time
from kokoro_tvm.errors import UserError
from kokoro_tvm.stages.forkserver import run_stage

def main():
    print(f"pid={os.getpid()} cwd={os.getcwd()} args={sys.argv[1:]} "
          f"probe={os.environ.get('PROBE')} tvm={'tvm' in sys.modules}", flush=True)
    print("to stderr", file=sys.stderr)
    if sys.argv[1] == "exit":
        sys.exit(int(sys.argv[2]))
    if sys.argv[1] == "user-error":
        raise UserError("the input names no bucket; give --bucket")
    if sys.argv[1] == "crash":
        raise RuntimeError("boom")
    if sys.argv[1] == "sleep":
        time.sleep(60)

sys.exit(run_stage(main, "tvm"))
"""


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {seconds} s")
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (an ended process waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.fixture(scope="module")
def server():
    """The tvm server, serving."""
    folder, servers = forkserver.start_servers(("tvm",))
    try:
        wait_for(lambda: os.path.exists(forkserver.socket_path(folder, "tvm")), 120,
                 "the tvm server serves")
        yield folder
    finally:
        forkserver.stop_servers(folder, servers)
    assert not os.path.exists(folder) and all(s.poll() is not None for s in servers)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "stage.py"
    path.write_text(SCRIPT)
    return path


def run(script: Path, *args: str, folder: str | None, cwd: Path, **popen):
    env = {**os.environ, "PROBE": "42"}
    env.pop(forkserver.FOLDER_VARIABLE, None)
    if folder is not None:
        env[forkserver.FOLDER_VARIABLE] = folder
    return subprocess.run([sys.executable, str(script), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, **popen)


def test_a_handed_over_job_runs_as_its_own_process_would(server, script, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = run(script, "exit", "3", folder=server, cwd=work)
    assert done.returncode == 3
    assert f"cwd={work} args=['exit', '3'] probe=42 tvm=True" in done.stdout
    assert done.stderr == "to stderr\n"

    ok = run(script, "fine", folder=server, cwd=work)
    assert ok.returncode == 0 and "tvm=True" in ok.stdout


def test_errors_of_a_handed_over_job_read_as_in_its_own_process(server, script, tmp_path):
    user = run(script, "user-error", folder=server, cwd=tmp_path)
    assert user.returncode == 1
    assert user.stderr.endswith("error: the input names no bucket; give --bucket\n")
    crash = run(script, "crash", folder=server, cwd=tmp_path)
    assert crash.returncode == 1 and "RuntimeError: boom" in crash.stderr


def test_a_stage_script_runs_in_the_server(server, tmp_path):
    done = run(REPO / "workflow_scripts" / "lower.py", "--help", folder=server, cwd=tmp_path)
    assert done.returncode == 0 and "--bucket" in done.stdout
    bad = run(REPO / "workflow_scripts" / "lower.py", "--bucket", "x", folder=server,
              cwd=tmp_path)
    assert bad.returncode == 2 and "invalid int value" in bad.stderr


def test_without_a_server_the_script_runs_itself(script, tmp_path):
    alone = run(script, "fine", folder=None, cwd=tmp_path)
    assert alone.returncode == 0 and "tvm=False" in alone.stdout
    gone = run(script, "fine", folder=str(tmp_path / "no-server"), cwd=tmp_path)
    assert gone.returncode == 0 and "tvm=False" in gone.stdout


def test_a_job_of_another_python_is_refused(server):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(forkserver.socket_path(server, "tvm"))
    job = {"argv": ["x.py"], "cwd": "/", "env": {}, "python": "/another/env",
           "package": forkserver.PACKAGE}
    with conn:
        socket.send_fds(conn, [json.dumps(job).encode()], [0, 1, 2])
        assert "refused" in json.loads(conn.recv(4096))


def test_a_cancelled_job_ends_its_run(server, script, tmp_path):
    client = subprocess.Popen(
        [sys.executable, str(script), "sleep"], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
        env={**os.environ, forkserver.FOLDER_VARIABLE: server})
    line = client.stdout.readline()
    assert "tvm=True" in line
    child = int(line.split()[0].removeprefix("pid="))
    assert child != client.pid and alive(child)
    client.send_signal(signal.SIGTERM)  # as Snakemake cancels a job
    client.wait(timeout=30)
    wait_for(lambda: not alive(child), 30, "the cancelled job's run ends")


def test_a_server_ends_with_the_process_that_started_it(tmp_path):
    starter = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from kokoro_tvm.stages.forkserver import start_servers\n"
         "folder, servers = start_servers(('tvm',))\n"
         "print(servers[0].pid, folder, flush=True)\n"
         "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    pid, folder = starter.stdout.readline().split()
    assert alive(int(pid))
    starter.kill()  # no chance to stop it
    starter.wait()
    wait_for(lambda: not alive(int(pid)), 60, "the orphaned server ends")
    wait_for(lambda: not os.path.exists(folder), 10, "its socket folder is removed")


def test_a_job_whose_server_dies_fails_and_its_run_ends(script, tmp_path):
    folder, servers = forkserver.start_servers(("tvm",))
    try:
        wait_for(lambda: os.path.exists(forkserver.socket_path(folder, "tvm")), 120,
                 "the tvm server serves")
        client = subprocess.Popen(
            [sys.executable, str(script), "sleep"], cwd=tmp_path, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
            env={**os.environ, forkserver.FOLDER_VARIABLE: folder})
        line = client.stdout.readline()
        child = int(line.split()[0].removeprefix("pid="))
        servers[0].kill()
        _, stderr = client.communicate(timeout=30)
        assert client.returncode == 1
        assert "fork server ended before this job did; run the build again" in stderr
        wait_for(lambda: not alive(child), 30, "the job's run ends with its server")
    finally:
        forkserver.stop_servers(folder, servers)
