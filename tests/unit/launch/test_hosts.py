"""The hosts executor's input and command: `--hosts` and `--hostfile` read or refused naming
where and what, mpirun over the case's first hosts with every rank variable forwarded, and a
host that does not answer named before anything is written (agents are real small programs)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from toolkit.launch.hosts import (
    Host,
    HostsError,
    HostsExecutor,
    parse_hosts,
    read_hostfile,
    rsh_agent,
)
from toolkit.spec import Case, DeviceKind
from toolkit.submit import main as submit


def test_hosts_and_slots_are_read():
    assert parse_hosts("a:2, b.example.org ,c-1:8") == [Host("a", 2), Host("b.example.org"),
                                                         Host("c-1", 8)]


@pytest.mark.parametrize("text, why", [
    ("", "no host given"), ("a,a", "named twice"), ("-oProxyCommand=x", "expected a host name"),
    ("a;reboot", "expected a host name"), ("a:0", "SLOTS a whole number"),
    ("a:2:3", "SLOTS a whole number"), ("a b", "expected a host name")])
def test_a_bad_host_list_is_refused_naming_the_flag(text, why):
    with pytest.raises(HostsError) as info:
        parse_hosts(text)
    assert str(info.value).startswith("--hosts") and why in str(info.value)


def test_a_hostfile_in_open_mpis_form_or_ours(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# the lab\nn1 slots=4\nn2:2   # spare\n\nn3\n")
    assert read_hostfile(f) == [Host("n1", 4), Host("n2", 2), Host("n3")]
    f.write_text("n1\nn2 slots=4 max_slots=8\n")
    with pytest.raises(HostsError) as info:
        read_hostfile(f)
    assert f"{f}:2" in str(info.value)
    with pytest.raises(HostsError, match="cannot read it"):
        read_hostfile(tmp_path / "missing")


def agent(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "agent.sh"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return [str(path)]


def executor(hosts: str, agent_argv: list[str]) -> HostsExecutor:
    return HostsExecutor(hosts=parse_hosts(hosts), agent=agent_argv, mpirun="/usr/bin/mpirun",
                         python="/usr/bin/python3", gpus=0, cpus=4)


def test_the_command_spans_the_cases_hosts_and_forwards_what_ranks_get(tmp_path):
    ex = executor("h1:2,h2:2,h3:2", agent(tmp_path, "exit 0"))
    case = Case(device=DeviceKind.CPU, num_nodes=2, gpus_per_node=2)
    cmd = ex.command(case, tmp_path / "c" / "case.json", tmp_path / "c" / "r0", 0)
    assert cmd[cmd.index("--host") + 1] == "h1:2,h2:2"
    # Open MPI's ssh launcher, whatever launcher the environment names (OMPI_MCA_plm=isolated)
    assert cmd[cmd.index("--mca") + 1:cmd.index("--mca") + 3] == ["plm", "rsh"]
    assert cmd[cmd.index("-np") + 1] == "4"
    forwarded = {cmd[i + 1] for i, w in enumerate(cmd) if w == "-x"}
    assert {"PYTHONPATH", "OMP_NUM_THREADS", "PYTHONFAULTHANDLER", "MASTER_ADDR"} <= forwarded
    assert ex.environment(case)["MASTER_ADDR"] == "h1"
    assert ex.problems(case) == []


def test_too_few_hosts_or_slots_and_unreachable_hosts_are_problems(tmp_path):
    ex = executor("good:1,bad", agent(tmp_path, '[ "$1" = good ] || { echo "no route to $1" >&2;'
                                                 " exit 255; }"))
    assert ex.problems(Case(device=DeviceKind.CPU, num_nodes=1)) == []
    problems = dict(ex.problems(Case(device=DeviceKind.CPU, num_nodes=2, gpus_per_node=2)))
    assert problems["gpus_per_node"] == "2 ranks a node, but host good has 1 slot(s)"
    assert problems["hosts"].startswith("cannot reach bad: ")
    assert problems["hosts"].endswith("exited 255: no route to bad")
    three = dict(ex.problems(Case(device=DeviceKind.CPU, num_nodes=3)))
    assert three["num_nodes"] == "3 nodes, but 2 host(s) were given (good:1, bad)"


def test_the_agent_is_open_mpis_own_else_ssh_that_never_asks():
    assert rsh_agent({"OMPI_MCA_plm_rsh_agent": "/x/agent --state-dir /s"}) == [
        "/x/agent", "--state-dir", "/s"]
    assert rsh_agent({})[0] == "ssh" and "BatchMode=yes" in rsh_agent({})


def test_submit_refuses_hosts_with_another_executor_and_a_bad_list(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {model: resnet50, device: cpu}\n")
    results = tmp_path / "res"
    assert submit(["--grid", str(grid), "--results", str(results), "--hosts", "a",
                   "--executor", "slurm"]) == 2
    assert "leave out --executor slurm" in capsys.readouterr().err
    assert submit(["--grid", str(grid), "--results", str(results), "--hosts", "a,a"]) == 2
    assert "--hosts: host a is named twice" in capsys.readouterr().err
    assert not results.exists()


def test_submit_names_an_unreachable_host_and_writes_nothing(tmp_path, capsys, monkeypatch):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {model: resnet50, device: cpu, num_nodes: 2}\n")
    results = tmp_path / "res"
    monkeypatch.setitem(os.environ, "OMPI_MCA_plm_rsh_agent",
                        agent(tmp_path, 'echo "$1: Name or service not known" >&2; exit 255')[0])
    assert submit(["--grid", str(grid), "--results", str(results), "--hosts", "n1,n2"]) == 2
    err = capsys.readouterr().err
    assert "hosts: cannot reach n1: " in err and "Name or service not known" in err
    assert not results.exists()
