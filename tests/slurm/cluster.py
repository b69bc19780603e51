"""A private SLURM for the tests: munged, slurmctld and slurmd of Debian's ``slurm-wlm`` and ``munge``, on this host.

Everything lives in one temporary folder: munged's key and socket, ``slurm.conf``, the controller's state, the
nodes' spool, pid and log files. The daemons listen on free ports of this host, run in the foreground as children
of this process (no systemd, nothing in /etc or /run), and :meth:`LocalSlurm.stop` cancels the jobs and ends
each daemon by its pid.

    python -m tests.slurm.cluster [--nodes 2]   # one by hand: prints `export SLURM_CONF=...`; Ctrl-C stops it

The cluster: one partition ``debug`` of one node or two (``nodes=2``: this host under two names, see
:func:`node_names`, each name with its own slurmd and port) with ``CPUS`` CPUs in all (more than the machine has:
``SlurmdParameters=config_overrides``, so that the tests' small jobs run side by side on 2 cores), no GPUs,
``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``, ``SelectType=select/cons_tres``, no accounting
(``sacct`` fails, as on clusters without slurmdbd), and ``cred_expire`` of a few seconds: a requeued job starts
again at once instead of after the default 120 s.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "srun")
CPUS = 4  # in all, shared by the nodes
PARTITION = "debug"


def node_names() -> list[str]:
    """Names of this host for the nodes (one slurmd each): a job's tasks meet at its first node by name
    (torch.distributed's MASTER_ADDR), so each must resolve to this host; at most two (its name and localhost)."""
    names = []
    for name in (socket.gethostname(), "localhost"):
        try:
            resolved = socket.gethostbyname(name)
        except OSError:
            continue
        if resolved.startswith("127.") and name not in names:
            names.append(name)
    return names or ["localhost"]


def missing_binaries() -> list[str]:
    """The SLURM / munge programs this host lacks (empty: a cluster can start)."""
    found = {name: shutil.which(name) or next((str(Path(d) / name) for d in ("/usr/sbin", "/sbin")
                                                if (Path(d) / name).exists()), None)
             for name in (*DAEMONS, *CLIENTS)}
    return [name for name, path in found.items() if path is None]


def why_not() -> str | None:
    """Why no cluster can start here (a sentence for pytest's skip), or None."""
    missing = missing_binaries()
    if missing:
        return (f"SLURM is not installed here (no {', '.join(missing)}): as root, `apt-get install slurm-wlm munge` "
                "(.ci/run does)")
    if os.geteuid() != 0:
        return "the private SLURM runs its daemons as root (SlurmUser=root), and this is not root"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or next(str(Path(d) / name) for d in ("/usr/sbin", "/sbin") if (Path(d) / name).exists())


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class LocalSlurm:
    """munged, slurmctld and a slurmd per node, in ``root``; :meth:`env` is the environment for SLURM's commands."""

    def __init__(self, root: str | Path | None = None, cred_expire_s: int = 5, nodes: int = 1):
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="csg-slurm-"))
        self.cred_expire_s = cred_expire_s
        self.nodes = node_names()[:nodes]
        self.processes: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"

    # -- environment -------------------------------------------------------------------------------------------
    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with ``SLURM_CONF`` pointing at this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        for key in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != "SLURM_CONF"]:
            del env[key]  # a test run inside a SLURM job must not leak that job's settings into ours
        return env

    def run(self, *command: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        """A SLURM command against this cluster (``squeue``, ``scontrol``, ...), with a deadline."""
        return subprocess.run(list(command), env=self.env(), capture_output=True, text=True, timeout=timeout,
                              check=check)

    # -- start / stop ------------------------------------------------------------------------------------------
    def _write_config(self) -> None:
        munge, state, spool, logs = (self.root / name for name in ("munge", "state", "spool", "log"))
        for folder in (munge, state, spool, logs):
            folder.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # munged wants every folder above its socket searchable
        munge.chmod(0o755)
        key = munge / "munge.key"
        key.write_bytes(secrets.token_bytes(128))
        key.chmod(0o600)
        ctld_port, *node_ports = _free_ports(1 + len(self.nodes))
        self.conf.write_text("\n".join([
            "ClusterName=csgtest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge / 'munge.socket'},cred_expire={self.cred_expire_s}",
            f"StateSaveLocation={state}",
            f"SlurmdSpoolDir={spool}/%n",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",  # CPUS above the host's: jobs share its cores
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2,bf_interval=1",
            "MinJobAge=600",  # finished jobs stay visible to squeue --states=all for 10 minutes
            "KillWait=10",  # SIGTERM (scancel, time limit) to SIGKILL: time to write the checkpoint
            "InactiveLimit=0",
            "MessageTimeout=20",
            "SlurmdTimeout=60",
            "SlurmctldTimeout=60",
            *(f"NodeName={name} NodeAddr=127.0.0.1 Port={port} CPUs={CPUS // len(self.nodes)} RealMemory=4000 "
              "State=UNKNOWN" for name, port in zip(self.nodes, node_ports)),
            f"PartitionName={PARTITION} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=NO",
            "",
        ]))

    def _spawn(self, name: str, command: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                env=self.env(), start_new_session=True)
        log.close()

    def start(self, timeout: float = 60) -> "LocalSlurm":
        """Start munged, slurmctld and the slurmds; return once every node is idle (or stop everything and raise)."""
        try:
            self._write_config()
            munge = self.root / "munge"
            self._spawn("munged", [_binary("munged"), "--foreground", "--force", f"--socket={munge / 'munge.socket'}",
                                   f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
                                   f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"])
            self._wait_for(lambda: (munge / "munge.socket").exists(), "munged's socket", timeout)
            self._spawn("slurmctld", [_binary("slurmctld"), "-D", "-c", "-f", str(self.conf)])
            self._wait_for(lambda: self.run("scontrol", "ping", check=False, timeout=10).returncode == 0,
                           "slurmctld to answer `scontrol ping`", timeout)
            for name in self.nodes:
                self._spawn(f"slurmd-{name}", [_binary("slurmd"), "-D", "-f", str(self.conf), "-N", name])
            self._wait_for(self._nodes_idle, f"node(s) {', '.join(self.nodes)} to be idle", timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _nodes_idle(self) -> bool:
        result = self.run("sinfo", "--noheader", "--Node", "--format=%T", check=False, timeout=10)
        states = [state.rstrip("*") for state in result.stdout.split()]
        return result.returncode == 0 and states == ["idle"] * len(self.nodes)

    def _wait_for(self, condition, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [name for name, process in self.processes.items() if process.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} ended while waiting for {what}:\n{self.logs()}")
            if condition():
                return
            time.sleep(0.3)
        raise RuntimeError(f"no {what} after {timeout:.0f} s:\n{self.logs()}")

    def logs(self, lines: int = 30) -> str:
        """The last ``lines`` of every daemon's log (for a failure's message)."""
        parts = []
        for path in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.log"]:
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def jobs(self) -> list[str]:
        """The ids of this cluster's jobs that are queued or running."""
        answer = self.run("squeue", "--noheader", "--array", "--format=%i", check=False, timeout=30)
        return answer.stdout.split() if answer.returncode == 0 else []

    def cancel_all(self, timeout: float = 30) -> None:
        """Cancel every job of this cluster and wait (at most ``timeout``) until none is left."""
        self.run("scancel", "--full", "-p", PARTITION, check=False, timeout=30)  # this cluster's only (SLURM_CONF)
        deadline = time.monotonic() + timeout
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)

    def stop(self, timeout: float = 20) -> None:
        """End the jobs, then slurmd, slurmctld and munged (SIGTERM, then SIGKILL), each by its own pid."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            try:
                self.cancel_all()
            except (subprocess.SubprocessError, OSError):
                pass
        for name in [*(f"slurmd-{node}" for node in self.nodes), "slurmctld", "munged"]:
            process = self.processes.pop(name, None)
            if process is None:
                continue
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=timeout)

    def __enter__(self) -> "LocalSlurm":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Start a private SLURM on this host until Ctrl-C (or SIGTERM).")
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=1)
    parser.add_argument("--root", type=Path, help="its folder (default: a new one under the temporary folder)")
    args = parser.parse_args()
    reason = why_not()
    if reason:
        sys.exit(reason)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill <pid>` stops the cluster as Ctrl-C does
    with LocalSlurm(args.root, nodes=args.nodes) as cluster:
        print(f"export SLURM_CONF={cluster.conf}   # then sbatch, squeue, train.py -m hydra/launcher=slurm ...",
              flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
