"""The pure parts of toolkit.localslurm.accounting and the accounting hooks of localslurm: what
is written for slurmdbd, MariaDB and slurm.conf, and how scontrol's association dump is read
(recorded real output in tests/data/slurm). The daemons run in
tests/integration/test_slurm_limits.py."""

from __future__ import annotations

from pathlib import Path

from toolkit import localslurm
from toolkit.launch.slurm_client import SlurmClient, expand_array_id
from toolkit.localslurm.accounting import (
    mariadb_argv,
    parse_assoc_mgr_max_submit,
    ports,
    render_slurmdbd_conf,
    slurm_conf_lines,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"


def conf_dict(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines()
                if "=" in line and not line.startswith("#") and not line.startswith("Node")
                and not line.startswith("Partition"))


def test_default_slurm_conf_has_no_accounting() -> None:
    conf = conf_dict(localslurm.render_slurm_conf(Path("/s"), "h", 2, 2, 17817))
    assert conf["AccountingStorageType"] == "accounting_storage/none"
    assert "AccountingStorageEnforce" not in conf


def test_accounting_slurm_conf_points_at_our_slurmdbd_and_enforces_limits() -> None:
    dbd_port, db_port = ports(21817, 2)
    assert (dbd_port, db_port) == (21820, 21821)  # after slurmctld 21817 and nodes 21818-9
    text = localslurm.render_slurm_conf(Path("/s"), "h", 2, 2, 21817,
                                        accounting=slurm_conf_lines(dbd_port))
    conf = conf_dict(text)
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert conf["AccountingStoragePort"] == "21820"
    assert conf["AccountingStorageEnforce"] == "associations,limits,qos"
    assert text.count("AccountingStorageType=") == 1


def test_slurmdbd_and_mariadb_use_their_own_ports_and_socket_never_the_systems() -> None:
    conf = conf_dict(render_slurmdbd_conf(Path("/tmp/x"), "vm", 21820, 21821, "pw"))
    assert conf["DbdPort"] == "21820" and conf["DbdAddr"] == "127.0.0.1"
    # An address, not localhost: libmysqlclient maps localhost to the default system socket.
    assert conf["StorageHost"] == "127.0.0.1" and conf["StoragePort"] == "21821"
    assert conf["StoragePass"] == "pw" and conf["LogFile"] == "/tmp/x/log/slurmdbd.log"
    argv = mariadb_argv("/usr/sbin/mariadbd", Path("/tmp/x"), 21821)
    assert argv[1] == "--no-defaults"  # no /etc/mysql option file (its socket, port 3306)
    assert "--port=21821" in argv and "--socket=/tmp/x/run/mysqld.sock" in argv
    assert "--bind-address=127.0.0.1" in argv and "--datadir=/tmp/x/db" in argv


def test_assoc_mgr_gives_the_users_own_limits_only() -> None:
    text = (DATA / "assoc_mgr_root.txt").read_text()
    assert parse_assoc_mgr_max_submit(text, "root") == ["2(0)", "2(1)"]
    assert parse_assoc_mgr_max_submit(text, "alice") == []


def test_cluster_record_keeps_the_accounting_flag() -> None:
    c = localslurm.LocalCluster(Path("/s"), ["node1"], 2, 17817, [], 0.0, accounting=True)
    assert localslurm.LocalCluster.from_json(c.to_json()).accounting
    old = c.to_json()
    del old["accounting"]  # a record written before accounting existed
    assert not localslurm.LocalCluster.from_json(old).accounting


def test_active_jobs_counts_array_tasks_and_skips_ended_jobs() -> None:
    out = (DATA / "squeue_me.txt").read_text()
    calls: list[list[str]] = []

    def runner(argv):  # type: ignore[no-untyped-def]
        import subprocess

        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, out, "")

    assert SlurmClient(runner=runner).active_jobs() == 2  # 7_0, 7_1; not the cancelled 6
    assert calls[0][:4] == ["squeue", "-h", "-r", "--me"]


def test_sacct_records_of_array_tasks_that_never_ran_name_each_task() -> None:
    # 8: a one-task array (--array=0) cancelled while pending; 9: --array=0-2 with 9_1
    # cancelled first (sacct lists it nowhere), then the rest; 10: tasks that ran.
    out = (DATA / "sacct_cancelled_pending_arrays.txt").read_text()

    def runner(argv):  # type: ignore[no-untyped-def]
        import subprocess

        return subprocess.CompletedProcess(argv, 0, out, "")

    acct = SlurmClient(runner=runner).accounting(["8_0", "9_0", "9_1", "9_2", "10_0", "10_1"])
    assert acct is not None
    assert {k: v[0] for k, v in acct.items() if "_" in k} == {
        "8_0": "CANCELLED", "9_0": "CANCELLED", "9_2": "CANCELLED", "10_0": "CANCELLED",
        "10_1": "CANCELLED"}
    assert expand_array_id("12_[0-2,5%4]") == ["12_0", "12_1", "12_2", "12_5"]
    assert expand_array_id("12_3") == ["12_3"] and expand_array_id("12") == ["12"]
