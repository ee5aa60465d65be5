"""Which executor runs a grid: `--executor slurm|local|auto`, or `--hosts`/`--hostfile`."""

from __future__ import annotations

from toolkit.launch.executor import Executor, NoController
from toolkit.launch.hosts import Host, HostsExecutor
from toolkit.launch.local import LocalExecutor
from toolkit.launch.slurm import SlurmExecutor
from toolkit.launch.slurm_client import SlurmClient


def choose_executor(name: str, hosts: list[Host] | None = None) -> Executor:
    """`slurm`, `local`, or `auto`: Slurm where its controller answers, local where the machine
    has no Slurm, and neither (NoController) where it has one that does not answer; given
    `hosts`, mpirun across them (`toolkit.launch.hosts`)."""
    if hosts:
        return HostsExecutor(hosts=hosts)
    if name == "slurm":
        return SlurmExecutor()
    if name == "auto":
        state, why = SlurmClient.probe()
        if state == "up":
            return SlurmExecutor()
        if state == "down":
            raise NoController(why)
    return LocalExecutor()
