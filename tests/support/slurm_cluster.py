"""A real single-node Slurm cluster for tests: munged with its own key, slurmctld and slurmd (SlurmdUser=root, so
jobs run as whoever submitted them) under a folder of the caller's, stopped by PID.

The node has 8 CPUs and declares two GPUs as generic resources (gres.conf ``File=`` entries that are links to
/dev/null: Slurm 22.05 drops a GPU without a device file, "Removing file-less GPU"), features sm_90 and
nvidia-driver-580.159.04; partition gpu (the default) and partition urgent, whose jobs preempt gpu's. Its folder
is open to every user (the munge socket, slurm.conf, the spool where slurmd puts each job's script), so an
ordinary user may submit; the munge key stays root's."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

NODE = "pmnode"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], bool], timeout: float, procs: list[subprocess.Popen[bytes]],
          logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if [p for p in procs if p.poll() is not None]:
            break
        time.sleep(0.2)
    tails = "\n".join(f"--- {log}:\n" + (log.read_text(errors="replace")[-2000:] if log.exists() else "(none)")
                      for log in logs)
    pytest.fail(f"{what} did not come up:\n{tails}")


def _config(d: Path, sock: Path) -> str:
    return f"""ClusterName=pinmatrix-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'slurmd.pid'}
SlurmctldLogFile={d / 'log' / 'slurmctld.log'}
SlurmdLogFile={d / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
KillWait=2
MinJobAge=600
InactiveLimit=0
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} CPUs=8 RealMemory=4000 Gres=gpu:2 Features=sm_90,nvidia-driver-580.159.04 State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes={NODE} MaxTime=INFINITE State=UP PriorityTier=2
"""


@contextmanager
def slurm_cluster(d: Path) -> Iterator[dict[str, str]]:
    """munged + slurmctld + slurmd of one node, all under ``d``; yields the env that reaches them (SLURM_CONF)."""
    for sub in ("munge", "state", f"spool/{NODE}", "log", "dev"):
        (d / sub).mkdir(parents=True)
    for folder in (d, d / "munge", d / "spool", d / "spool" / NODE, d / "log", d / "dev"):
        os.chmod(folder, 0o755)  # an ordinary user reaches the socket, the config and its job's script
    key = d / "munge" / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    key.chmod(0o600)
    sock = d / "munge" / "sock"
    for i in range(2):
        (d / "dev" / f"gpu{i}").symlink_to("/dev/null")  # a character device, as gres/gpu wants
    conf = d / "slurm.conf"
    conf.write_text(_config(d, sock))
    (d / "gres.conf").write_text(f"NodeName={NODE} Name=gpu File={d / 'dev'}/gpu[0-1]\n")
    env = dict(os.environ, SLURM_CONF=str(conf))
    procs: list[subprocess.Popen[bytes]] = []
    logs = [d / "log" / n for n in ("munged.out", "slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out")]

    def start(argv: list[str], out: str) -> None:
        with open(d / "log" / out, "wb") as fh:
            procs.append(subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=d))

    try:
        start(["munged", "-F", "--force", f"--key-file={key}", f"--socket={sock}", f"--pid-file={d / 'munge' / 'pid'}",
               f"--log-file={d / 'log' / 'munged.log'}", f"--seed-file={d / 'munge' / 'seed'}"], "munged.out")
        _wait("munged", sock.exists, 15, procs, logs)
        start(["slurmctld", "-D", "-f", str(conf)], "slurmctld.out")
        start(["slurmd", "-D", "-f", str(conf), "-N", NODE], "slurmd.out")

        def idle() -> bool:
            proc = subprocess.run(["scontrol", "show", "node", "-o", NODE], env=env, capture_output=True, text=True)
            return proc.returncode == 0 and "State=IDLE" in proc.stdout and "Gres=gpu:2" in proc.stdout

        _wait("the Slurm node", idle, 30, procs, logs)
        yield {"SLURM_CONF": str(conf)}
    finally:
        cancel_everything(env)  # job steps outlive slurmd (proctrack/linuxproc): end them while it runs
        for proc in reversed(procs):  # slurmd, slurmctld, munged: each by its PID
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def cancel_everything(env: dict[str, str]) -> None:
    """Cancel every job of this private cluster and wait (up to 20 s) until none is left."""
    def jobs() -> list[str]:
        proc = subprocess.run(["squeue", "-h", "-o", "%A"], env=env, capture_output=True, text=True)
        return proc.stdout.split() if proc.returncode == 0 else []

    left = jobs()
    if left:
        subprocess.run(["scancel", *left], env=env, capture_output=True)
    deadline = time.monotonic() + 20
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = jobs()
