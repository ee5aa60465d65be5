"""Where Slurm's plugins and slurmstepd are for a Slurm unpacked under a prefix (the packages
`dpkg -x`'d on a machine that lacks them), and what slurm.conf and slurmd are told."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.localslurm.config import ClusterError, render_slurm_conf
from toolkit.localslurm.processes import SlurmInstall, slurm_install


def _unpacked(root: Path, plugins: bool = True, stepd: bool = True) -> Path:
    """Debian's slurmd package layout under `root`, with slurmd linked to slurmd-wlm as the
    package's alternatives would at install."""
    sbin = root / "usr" / "sbin"
    sbin.mkdir(parents=True)
    (sbin / "slurmd-wlm").write_text("")
    (sbin / "slurmd").symlink_to("slurmd-wlm")
    if stepd:
        (sbin / "slurmstepd-wlm").write_text("")
        (sbin / "slurmstepd").symlink_to("slurmstepd-wlm")
    if plugins:
        lib = root / "usr" / "lib" / "x86_64-linux-gnu" / "slurm-wlm"
        lib.mkdir(parents=True)
        (lib / "select_cons_tres.so").write_text("")
    return sbin / "slurmd"


def test_a_slurm_under_a_prefix_gets_its_plugin_dir_and_slurmstepd(tmp_path: Path) -> None:
    found = slurm_install(str(_unpacked(tmp_path / "prefix")))
    assert found == SlurmInstall(
        plugin_dir=str(tmp_path / "prefix/usr/lib/x86_64-linux-gnu/slurm-wlm"),
        stepd=str(tmp_path / "prefix/usr/sbin/slurmstepd"))


def test_the_system_slurm_keeps_its_compiled_in_paths() -> None:
    assert slurm_install("/usr/sbin/slurmd") == SlurmInstall()


def test_a_prefix_without_plugins_or_slurmstepd_is_refused_naming_where_it_looked(
        tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"no Slurm plugins were found \(looked in .*slurm-wlm"):
        slurm_install(str(_unpacked(tmp_path / "a", plugins=False)))
    with pytest.raises(ClusterError, match="no slurmstepd beside"):
        slurm_install(str(_unpacked(tmp_path / "b", stepd=False)))


def test_slurm_conf_names_the_plugin_dir_only_when_given() -> None:
    assert "PluginDir=" not in render_slurm_conf(Path("/s"), "h", 2, 2)
    conf = render_slurm_conf(Path("/s"), "h", 2, 2, plugin_dir="/opt/p/usr/lib/x/slurm-wlm")
    assert "\nPluginDir=/opt/p/usr/lib/x/slurm-wlm\n" in conf


def test_the_stepd_slice_is_made_only_under_cgroup_v2_without_systemd(tmp_path: Path) -> None:
    from toolkit.localslurm.processes import ensure_stepd_slice
    v1 = tmp_path / "v1"
    v1.mkdir()
    assert ensure_stepd_slice(v1, tmp_path / "no-bus") is None
    assert not (v1 / "system.slice").exists()
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    bus = tmp_path / "bus"
    bus.write_text("")
    assert ensure_stepd_slice(v2, bus) is None  # systemd answers: it makes the scopes
    assert ensure_stepd_slice(v2, tmp_path / "no-bus") == v2 / "system.slice"
    assert (v2 / "system.slice").is_dir()
    assert ensure_stepd_slice(v2, tmp_path / "no-bus") is None  # made once
