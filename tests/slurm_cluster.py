"""A real single-machine Slurm cluster from Debian's packages, for the Slurm tests.

munged, slurmctld and slurmd run from a private folder with their own key, socket,
ports, state and logs (SLURM_CONF points the client commands at its slurm.conf), so
nothing under /etc is read or changed and a cluster already on the machine is left
alone. Root only: slurmd starts job steps as the submitting user and must be root.
`python -m tests.slurm_cluster` starts one and prints its SLURM_CONF, for trying by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

# What the cluster needs: (program, where it is, the Debian package that has it).
PROGRAMS = (
    ("munged", "/usr/sbin/munged", "munge"),
    ("slurmctld", "/usr/sbin/slurmctld", "slurmctld"),
    ("slurmd", "/usr/sbin/slurmd", "slurmd"),
    ("srun", "/usr/bin/srun", "slurm-client"),
)
INSTALL = "apt-get install slurm-wlm munge"
START_TIMEOUT_S = 60.0


def unavailable() -> str | None:
    """Why a cluster cannot be started here (not root, a package missing), or None."""
    if os.geteuid() != 0:
        return "the Slurm cluster fixture needs root (slurmd starts job steps as any user)"
    missing = sorted({pkg for name, path, pkg in PROGRAMS if not Path(path).exists()})
    if missing:
        return f"Slurm not installed ({', '.join(missing)} missing): {INSTALL}"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return f"no 'munge' user (the munge package creates it): {INSTALL}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class SlurmCluster:
    """A running cluster: `env` holds what a client command needs (SLURM_CONF)."""

    folder: Path
    node: str
    cpus: int
    procs: list[subprocess.Popen[bytes]]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.folder / "slurm.conf")}

    def environ(self) -> dict[str, str]:
        """This process's environment with the cluster's, and no allocation of another."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return {**env, **self.env}

    def logs(self) -> str:
        """The daemons' last log lines, for a failure message."""
        out = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            with contextlib.suppress(OSError):
                lines = (self.folder / name).read_text(errors="replace").splitlines()
                out.append(f"--- {name} ---\n" + "\n".join(lines[-15:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Cancel every job, stop the daemons, remove the folder."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["scancel", "--full", "--user", "root"],
                env=self.environ(),
                timeout=20,
                capture_output=True,
            )
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._kill_stepds()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _kill_stepds(self) -> None:
        """A step whose srun died as it launched can leave its slurmstepd waiting for that
        srun for ever, outliving slurmd (seen once in a full run): end this cluster's."""
        conf = str(self.folder / "slurm.conf")
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] == "slurmstepd":
                with contextlib.suppress(psutil.Error):
                    if proc.environ().get("SLURM_CONF") == conf:
                        proc.kill()


def _conf(folder: Path, node: str, cpus: int) -> str:
    lines = {
        "ClusterName": "bench",
        "SlurmctldHost": f"{node}(127.0.0.1)",
        "SlurmctldPort": str(_free_port()),
        "SlurmdPort": str(_free_port()),
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={folder / 'munge' / 'socket'}",
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_CPU",
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "MpiDefault": "none",
        "ReturnToService": "2",
        "StateSaveLocation": str(folder / "state"),
        "SlurmdSpoolDir": str(folder / "spool"),
        "SlurmctldPidFile": str(folder / "slurmctld.pid"),
        "SlurmdPidFile": str(folder / "slurmd.pid"),
        "SlurmctldLogFile": str(folder / "slurmctld.log"),
        "SlurmdLogFile": str(folder / "slurmd.log"),
        "AccountingStorageType": "accounting_storage/none",
        "JobCompType": "jobcomp/none",
        # A test's job is over when its command is; no lingering kill wait.
        "KillWait": "5",
        "InactiveLimit": "0",
    }
    text = "".join(f"{k}={v}\n" for k, v in lines.items())
    text += f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n"
    text += f"PartitionName=bench Nodes={node} Default=YES MaxTime=INFINITE State=UP\n"
    return text


def start() -> SlurmCluster:
    """Start munged, slurmctld and slurmd in a new private folder; wait until the node is idle."""
    why = unavailable()
    if why:
        raise RuntimeError(why)
    folder = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    folder.chmod(0o755)  # munged runs as munge and must reach its files here
    munge = pwd.getpwnam("munge")
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 1
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    os.chown(key, munge.pw_uid, munge.pw_gid)
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    (folder / "slurm.conf").write_text(_conf(folder, node, cpus))
    cluster = SlurmCluster(folder, node, cpus, [])
    try:
        # munged as the munge user (it refuses root): its own key, socket and seed.
        (folder / "munge").mkdir(mode=0o755)
        os.chown(folder / "munge", munge.pw_uid, munge.pw_gid)
        munged = [
            "/usr/sbin/munged",
            "--foreground",
            "--key-file",
            str(key),
            "--socket",
            str(folder / "munge" / "socket"),
            "--pid-file",
            str(folder / "munge" / "munged.pid"),
            "--seed-file",
            str(folder / "munge" / "seed"),
            "--log-file",
            str(folder / "munged.log"),
            "--force",
        ]
        cluster.procs.append(
            _daemon(["/usr/sbin/runuser", "-u", "munge", "--", *munged], folder, "munged")
        )
        _wait(lambda: (folder / "munge" / "socket").exists(), cluster, "munged's socket")
        env = cluster.environ()
        cluster.procs.append(_daemon(["/usr/sbin/slurmctld", "-D", "-i"], folder, "slurmctld", env))
        cluster.procs.append(_daemon(["/usr/sbin/slurmd", "-D", "-N", node], folder, "slurmd", env))

        def idle() -> bool:
            out = subprocess.run(
                ["sinfo", "--noheader", "--format=%t", "--nodes", node],
                env=env,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            return out == "idle"

        _wait(idle, cluster, "the node to be idle in sinfo")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _daemon(
    argv: list[str], folder: Path, name: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with open(folder / f"{name}.out", "wb") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def _wait(ready: object, cluster: SlurmCluster, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(subprocess.SubprocessError):
            if ready():  # type: ignore[operator]
                return
        dead = [p.args for p in cluster.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"Slurm daemon exited: {dead}\n{cluster.logs()}")
        time.sleep(0.2)
    raise RuntimeError(
        f"timed out after {START_TIMEOUT_S:.0f}s waiting for {what}\n{cluster.logs()}"
    )


@contextlib.contextmanager
def running() -> Iterator[SlurmCluster]:
    """A cluster for the length of a `with` block."""
    cluster = start()
    try:
        yield cluster
    finally:
        cluster.stop()


if __name__ == "__main__":
    with running() as c:
        print(f"export SLURM_CONF={c.env['SLURM_CONF']}  # Ctrl-C stops the cluster", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
