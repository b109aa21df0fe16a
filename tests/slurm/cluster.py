"""A throwaway one-node Slurm cluster on localhost, for tests (docs/cluster.md, The test cluster).

Everything lives in one folder: the munge key and socket, slurm.conf, state and spool dirs, logs
and PID files. The daemons run in the foreground as child processes of the caller and are
stopped by PID (`Cluster.stop`), so nothing is left running when the caller cleans up.
Nothing under /etc is written: clients find the config through SLURM_CONF, and
`bin/srun` (put first on PATH) restores SLURM_CONF for the `srun` that the slurm executor's
jobstep starts inside each job after stripping every SLURM_* variable.

Run as a script to keep a cluster up by hand: `python tests/slurm/cluster.py DIR` prints the
environment to use and stops the cluster on Ctrl-C.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "srun", "sinfo", "scontrol")
# Debian 12's packages (Slurm 22.05); the image's policy-rc.d keeps them from auto-starting.
APT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")


def missing_programs() -> list[str]:
    return [p for p in DAEMONS + CLIENTS if shutil.which(p, path=_sbin_path()) is None]


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def install_with_apt() -> None:
    """Installs Slurm and munge from Debian if they are missing (needs root and the network)."""
    if not missing_programs():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES],
                   check=True, env=env, capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _available_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


class Cluster:
    """munged + slurmctld + slurmd on localhost with one node of ``cpus`` CPUs."""

    def __init__(self, root: Path, cpus: int = 2, memory_mb: int | None = None):
        self.root = Path(root)
        self.cpus = cpus
        # Slurm drains a node that reports less memory than configured: stay below the total.
        self.memory_mb = memory_mb or int(_available_memory_mb() * 0.8)
        self.processes: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.bin = self.root / "bin"

    # -- environment for clients -----------------------------------------------------------
    def env(self, base: dict | None = None) -> dict:
        """An environment in which sbatch/squeue/srun talk to this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        # Survives the jobstep's SLURM_* clean-up; bin/srun turns it back into SLURM_CONF.
        env["KOKORO_TEST_SLURM_CONF"] = str(self.conf)
        env["PATH"] = os.pathsep.join([str(self.bin), env.get("PATH", ""), "/usr/sbin"])
        return env

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(command, env=self.env(), capture_output=True, text=True,
                              check=check)

    # -- start/stop ------------------------------------------------------------------------
    def write_config(self) -> None:
        for sub in ("munge", "state", "spool", "log", "bin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o600)
        template = (HERE / "slurm.conf.in").read_text()
        self.conf.write_text(template.format(
            root=self.root, user=_user(), cpus=self.cpus, memory_mb=self.memory_mb,
            ctld_port=_free_port(), slurmd_port=_free_port()))
        srun = self.bin / "srun"
        shutil.copy2(HERE / "srun-shim.sh", srun)
        srun.chmod(0o755)

    def start(self, timeout: float = 30) -> None:
        self.write_config()
        munge = self.root / "munge"
        self._spawn("munged", ["munged", "--foreground", "--force",
                               f"--socket={munge / 'munge.socket'}",
                               f"--key-file={munge / 'munge.key'}",
                               f"--pid-file={munge / 'munged.pid'}",
                               f"--seed-file={munge / 'munged.seed'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}"])
        self._wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket", timeout)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-N", "localhost", "-f", str(self.conf)])
        self._wait_for(self._node_idle, "the node to become idle", timeout)

    def stop(self) -> None:
        """SIGTERM each daemon, SIGKILL what has not exited in 10 s; cancel nothing else."""
        for name in reversed(DAEMONS):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # Job processes are children of slurmstepd, which outlives slurmd: kill any left.
        for pid in _pids_whose_environment_has(str(self.conf)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def running(self) -> list[str]:
        return [name for name, p in self.processes.items() if p.poll() is None]

    def _spawn(self, name: str, command: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.processes[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=self.env(), start_new_session=True)
        log.close()

    def _node_idle(self) -> bool:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}; see "
                                   f"{self.root / 'log'}")
        done = self.run("sinfo", "-h", "-o", "%t", check=False)
        return done.returncode == 0 and done.stdout.strip() == "idle"

    @staticmethod
    def _wait_for(condition, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.2)


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _pids_whose_environment_has(needle: str) -> list[int]:
    """Processes started under this cluster (their environment names its slurm.conf)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"KOKORO_TEST_SLURM_CONF={needle}".encode() in environ.split(b"\0"):
            pids.append(int(proc.name))
    return pids


def _exit(signum, frame):
    raise SystemExit(0)


if __name__ == "__main__":
    # SIGTERM too: a background job started by a script ignores SIGINT.
    signal.signal(signal.SIGTERM, _exit)
    cluster = Cluster(Path(sys.argv[1]).resolve())
    cluster.start()
    print(f"export SLURM_CONF={cluster.conf} KOKORO_TEST_SLURM_CONF={cluster.conf} "
          f"PATH={cluster.bin}:$PATH", flush=True)
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        cluster.stop()
