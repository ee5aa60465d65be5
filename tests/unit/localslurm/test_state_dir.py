"""Where the local cluster keeps its state, and whether root acts on what it finds there: a state
directory or record that someone else could have written is refused, as ssh's StrictModes
refuses keys others can write, and no write follows a symbolic link."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from toolkit.localslurm import cli, statedir
from toolkit.localslurm.config import ClusterError
from toolkit.localslurm.daemons import default_state_dir, load_cluster
from toolkit.localslurm.processes import proc_stat

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="down runs as root; chown needs root")


def test_roots_default_state_directory_is_under_run_and_a_users_under_tmp(monkeypatch):
    monkeypatch.delenv("TRAINBENCH_SLURM_DIR", raising=False)
    assert default_state_dir(uid=0) == Path("/run/trainbench-slurm")
    assert default_state_dir(uid=1000) == Path("/tmp/trainbench-slurm-1000")
    monkeypatch.setenv("TRAINBENCH_SLURM_DIR", "/tmp/mine")
    assert default_state_dir() == Path("/tmp/mine")


def test_a_state_directory_made_here_is_the_callers_alone(tmp_path):
    state = tmp_path / "state"
    statedir.make_state_dir(state)
    assert (state.stat().st_mode & 0o777) == 0o700
    assert statedir.why_unsafe(state) is None


def _planted_record(state: Path, victim: subprocess.Popen[bytes]) -> None:
    """A record as another user writes it: a process it does not own named as slurmd."""
    stat = proc_stat(victim.pid)
    assert stat is not None
    record = {"state_dir": str(state), "conf": str(state / "slurm.conf"), "nodes": ["node1"],
              "cpus_per_node": 1, "port_base": 17817, "started_at": time.time(),
              "daemons": [{"name": "slurmd-node1", "pid": victim.pid, "start_ticks": stat[1],
                           "log_path": str(state / "x.log")}],
              "network": None}
    (state / "cluster.json").write_text(json.dumps(record))


@needs_root
@pytest.mark.parametrize("plant", ["another users directory", "a directory others can write",
                                   "a record others can write", "a record of another user",
                                   "a record that is a link"])
def test_root_does_not_kill_a_process_named_in_a_planted_record(tmp_path, plant, capsys):
    state = tmp_path / "trainbench-slurm-0"
    state.mkdir(mode=0o700)
    victim = subprocess.Popen(["sleep", "60"])
    try:
        _planted_record(state, victim)
        record = state / "cluster.json"
        if plant == "another users directory":
            os.chown(state, NOBODY, NOBODY)
            os.chown(record, NOBODY, NOBODY)
        elif plant == "a directory others can write":
            state.chmod(0o1777)
        elif plant == "a record others can write":
            record.chmod(0o666)
        elif plant == "a record of another user":
            os.chown(record, NOBODY, NOBODY)
        else:
            record.rename(tmp_path / "elsewhere.json")
            record.symlink_to(tmp_path / "elsewhere.json")
        assert cli.main(["down", "--state-dir", str(state)]) == 1
        assert "refusing" in capsys.readouterr().err
        assert victim.poll() is None, "root's down killed a process a planted record named"
    finally:
        victim.kill()
        victim.wait()


@needs_root
def test_a_state_directory_under_a_parent_others_can_write_without_the_sticky_bit(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    (parent / "state").mkdir(mode=0o700)
    assert "without the sticky bit" in (statedir.why_unsafe(parent / "state") or "")
    parent.chmod(0o1777)  # as /tmp: others cannot move our directory away
    assert statedir.why_unsafe(parent / "state") is None


@needs_root
def test_a_state_directory_reached_through_another_users_link_is_refused(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(statedir.UnsafeStateDir, match="symbolic link of uid"):
        load_cluster(link)


def test_a_file_of_the_state_directory_is_never_written_through_a_link(tmp_path):
    state = tmp_path / "state"
    statedir.make_state_dir(state)
    target = tmp_path / "hosts-of-the-machine"
    target.write_text("precious\n")
    (state / "hosts").symlink_to(target)
    statedir.write_file(state, "hosts", "10.0.0.1 node1\n")
    assert target.read_text() == "precious\n"
    assert not (state / "hosts").is_symlink()
    assert (state / "hosts").read_text() == "10.0.0.1 node1\n"
    prolog = statedir.write_file(state, "taskprolog.sh", "#!/bin/sh\n", mode=0o755)
    assert (prolog.stat().st_mode & 0o777) == 0o755


def test_a_second_up_of_one_state_directory_is_told_why(tmp_path):
    with statedir.up_lock(tmp_path), pytest.raises(ClusterError, match=f"pid {os.getpid()}"), \
            statedir.up_lock(tmp_path):
        pass
    with statedir.up_lock(tmp_path):  # released
        pass


@needs_root
@pytest.mark.parametrize(("argv", "says"), [
    (["--port-base", "65535"], "must lie within 1024..65535"),
    (["--port-base", "80"], "must lie within 1024..65535"),
    (["--nodes", "100000", "--network", "loopback"], "nodes must be 1 to 253"),
])
def test_up_refuses_ports_and_node_counts_out_of_range(tmp_path, argv, says, capsys):
    assert cli.main(["up", "--state-dir", str(tmp_path / "s"), *argv]) == 1
    assert says in capsys.readouterr().err


def test_a_state_directory_this_user_cannot_read_is_said_in_one_line(tmp_path, capsys,
                                                                     monkeypatch):
    def refused(*_args: object) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / "cluster.json"))

    monkeypatch.setattr(statedir, "read_record", refused)
    assert cli.main(["status", "--state-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (f"localslurm: Permission denied: "
                                       f"{tmp_path / 'cluster.json'}\n")
