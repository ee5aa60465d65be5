"""submit's command line: bad input exits 2 and writes nothing; dry-run writes nothing."""

from __future__ import annotations

import json

from toolkit import submit
from toolkit.results import CaseDir


def test_invalid_grid_exits_2_and_writes_nothing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {precision: fp64}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{grid}: base.precision: expected one of" in err
    assert not out.exists()


def test_local_executor_refuses_two_nodes_before_writing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {num_nodes: 2, gpus_per_node: 1}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out)]) == 2
    assert "num_nodes: 2 nodes, but the local executor runs on this machine only" in \
        capsys.readouterr().err
    assert not out.exists()


def test_unsupported_workload_is_refused(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {model: resnet50, gpus_per_node: 2, parallel: {tp: 2}}\n")
    assert submit.main(["--grid", str(grid), "--results", str(tmp_path / "r")]) == 2
    assert "tensor/pipeline parallelism is not available for resnet50" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_dry_run_lists_cases_and_writes_nothing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("repeats: 3\nsweep: {batch_size_per_device: [8, 16]}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "resnet50-torch-fp32-1n1g-bs8" in text and "resnet50-torch-fp32-1n1g-bs16" in text
    assert "2 cases x 3 repeats" in text
    assert not out.exists()


def test_changed_configuration_under_same_id_is_refused(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {batch_size_per_device: 8}\n")
    out = tmp_path / "results"
    cid = "resnet50-torch-fp32-1n1g-bs8"
    cdir = CaseDir(out, cid)
    cdir.path.mkdir(parents=True)
    (cdir.path / "case.json").write_text(json.dumps({"id": cid, "config_hash": "000000000000",
                                                     "case": {}}))
    before = sorted(p.name for p in out.rglob("*"))
    assert submit.main(["--grid", str(grid), "--results", str(out)]) == 2
    assert "holds config 000000000000" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == before
