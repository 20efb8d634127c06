"""A real single-node SLURM cluster for the tests: munged, slurmctld and slurmd on this machine.

:class:`SlurmCluster` writes a munge key and a ``slurm.conf`` into a folder of its own (state,
spool, logs and sockets too: nothing of the machine's ``/etc`` is used), starts the three daemons in
the foreground as children of this process, waits until ``sinfo`` shows the node idle, and stops
every daemon it started. The clients (``sbatch``, ``squeue``, ``scancel``, ``scontrol``, what
submitit calls) find the cluster through ``SLURM_CONF``, set in :meth:`env`.

It needs Debian's ``slurm-wlm`` and ``munge`` (``make system-deps`` installs them) and root (the
daemons run as root; ``make test`` runs as root on CI). Accounting is off
(``AccountingStorageType=accounting_storage/none``): ``sacct`` needs slurmdbd and a database, and
answers "Slurm accounting storage is disabled"; submitit's job states come from ``sacct`` (without
it a cancelled job stays "UNKNOWN" and ``job.result()`` waits for ever), so the sweep follows its
jobs through their result files and ``squeue`` instead (``focalcal.lab.slurm.wait``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sinfo", "sbatch", "squeue", "scancel", "scontrol", "srun")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def why_not_startable() -> str | None:
    """Why this machine cannot run the cluster (``None`` when it can)."""
    missing = [p for p in DAEMONS + CLIENTS if shutil.which(p) is None
               and not Path("/usr/sbin", p).is_file()]
    if missing:
        return (f"SLURM's programs are missing ({', '.join(missing)}): install Debian's slurm-wlm and "
                "munge (`make system-deps` does, as root)")
    if os.geteuid() != 0:
        return "the SLURM daemons of the test cluster run as root; run the tests as root (CI does)"
    return None


def _die_with_parent() -> None:
    # prctl(PR_SET_PDEATHSIG, SIGTERM): a daemon gets SIGTERM when the process that started it
    # ends, so that a test session killed before its teardown leaves no cluster behind
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def _exe(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class SlurmCluster:
    """One node (this machine, its cores and memory as ``slurmd -C`` reports them), one partition
    ``test``, configuration and state under ``folder``."""

    partition = "test"

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.conf = self.folder / "slurm.conf"
        self.procs: dict[str, subprocess.Popen] = {}
        self.node = socket.gethostname().split(".")[0]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default ``os.environ``) with ``SLURM_CONF`` naming this cluster's file."""
        return {**(os.environ if base is None else base), "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True, timeout: float = 30) -> str:
        proc = subprocess.run([_exe(cmd[0]), *cmd[1:]], env=self.env(), capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def write_config(self) -> None:
        f = self.folder
        for sub in ("state", "spool", "log", "munge"):
            (f / sub).mkdir(parents=True, exist_ok=True)
        key = f / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (f / "munge").chmod(0o700)
        node_line = subprocess.run([_exe("slurmd"), "-C"], capture_output=True, text=True,
                                   check=True).stdout.splitlines()[0]
        # this machine's node line, named as slurmd will name itself
        node_line = " ".join(f"NodeName={self.node}" if w.startswith("NodeName=") else w
                             for w in node_line.split())
        ctl_port, d_port = _free_ports(2)
        self.conf.write_text("\n".join([
            "ClusterName=focalcal-test",
            f"SlurmctldHost={self.node}",
            f"SlurmctldPort={ctl_port}",
            f"SlurmdPort={d_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # the clients and daemons reach this munged, not a system one; a requeued job waits
            # cred_expire seconds before it starts again (SLURM's default: 120)
            f"AuthInfo=socket={f / 'munge' / 'munge.socket'},cred_expire=20",
            f"StateSaveLocation={f / 'state'}",
            f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}",
            f"SlurmdPidFile={f / 'slurmd.pid'}",
            f"SlurmctldLogFile={f / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={f / 'log' / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            # no slurmdbd: sacct answers "accounting storage is disabled"
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            # seconds between SIGTERM and SIGKILL when a job is cancelled or times out
            "KillWait=5",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "MinJobAge=600",
            node_line,
            f"PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            ""]))

    def _start(self, name: str, *args: str) -> None:
        log = open(self.folder / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen([_exe(name), *args], env=self.env(), stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True,
                                            preexec_fn=_die_with_parent)
        log.close()

    def _log_tail(self) -> str:
        parts = []
        for path in sorted((self.folder / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def start(self, timeout: float = 90) -> None:
        """Write the configuration, start the daemons, wait until the node is idle."""
        why = why_not_startable()
        if why:
            raise RuntimeError(why)
        self.write_config()
        m = self.folder / "munge"
        self._start("munged", "--foreground", "--force", f"--key-file={m / 'munge.key'}",
                    f"--socket={m / 'munge.socket'}", f"--pid-file={m / 'munged.pid'}",
                    f"--seed-file={m / 'munged.seed'}", f"--log-file={self.folder / 'log' / 'munged.log'}")
        deadline = time.monotonic() + timeout
        while not (m / "munge.socket").exists():
            self._check_alive(deadline)
            time.sleep(0.1)
        # -i: ignore (there is none) saved state; -D: foreground, so that we hold each daemon's pid
        self._start("slurmctld", "-D", "-i", "-f", str(self.conf))
        self._start("slurmd", "-D", "-f", str(self.conf), "-N", self.node)
        while True:
            self._check_alive(deadline)
            out = subprocess.run([_exe("sinfo"), "-h", "-N", "-o", "%N %t"], env=self.env(),
                                 capture_output=True, text=True).stdout.split()
            if out == [self.node, "idle"]:
                return
            time.sleep(0.5)

    def _check_alive(self, deadline: float) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead or time.monotonic() > deadline:
            what = (f"exited ({dead})" if dead else "did not bring the node to idle in time")
            self.stop()
            raise RuntimeError(f"the test SLURM cluster {what}; its logs:\n{self._log_tail()}")

    def stop(self) -> list[str]:
        """Stop every daemon started here (SIGTERM, SIGKILL after 20 s) and return the names of
        those still alive afterwards (none, unless the kernel refused). Jobs still in the queue
        (a test that failed mid-run) are cancelled first, so that no job step outlives slurmd."""
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            try:
                self.run("scancel", "--full", "--partition", self.partition, check=False, timeout=10)
                deadline = time.monotonic() + 30
                while self.run("squeue", "--noheader", check=False, timeout=10).strip():
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass  # the daemons are stopped below whatever the queue says
        for name in reversed(list(self.procs)):  # slurmd, slurmctld, then munged
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        return [n for n, p in self.procs.items() if p.poll() is None]

    def pids_alive(self) -> list[int]:
        """The daemons' pids that are still running."""
        return [p.pid for p in self.procs.values() if Path(f"/proc/{p.pid}").exists()
                and p.poll() is None]
