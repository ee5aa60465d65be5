"""torch.compile's caches: one directory per grid, in its results directory, given to every
torch rank by the one rank-environment builder; the grid's own `env` still wins."""

from __future__ import annotations

import subprocess
from pathlib import Path

from toolkit.launch.launcher import rank_environment
from toolkit.launch.local import LocalExecutor
from toolkit.results.layout import COMPILE_CACHE_DIR
from toolkit.spec import Case


def _case(**fields) -> Case:
    return Case.from_dict({"model": "resnet50", **fields})


def test_torch_ranks_share_the_grids_compile_cache(tmp_path):
    case_json = tmp_path / "res" / "cases" / "c1" / "case.json"
    env = rank_environment(_case(), {}, "4", case_json=case_json)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "res" / COMPILE_CACHE_DIR)
    assert env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1"
    assert env["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"
    # another case of the same grid: the same directory (its graphs may be the same)
    other = rank_environment(_case(batch_size_per_device=8), {}, "4",
                             case_json=tmp_path / "res" / "cases" / "c2" / "case.json")
    assert other["TORCHINDUCTOR_CACHE_DIR"] == env["TORCHINDUCTOR_CACHE_DIR"]


def test_relative_case_file_gives_an_absolute_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = rank_environment(_case(), {}, "4", case_json=Path("r") / "cases" / "c" / "case.json")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "r" / COMPILE_CACHE_DIR)


def test_grid_env_wins_and_oneflow_gets_none(tmp_path):
    case_json = tmp_path / "cases" / "c" / "case.json"
    mine = rank_environment(_case(env={"TORCHINDUCTOR_CACHE_DIR": "/scratch/mine",
                                       "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}), {}, "4",
                            case_json=case_json)
    assert mine["TORCHINDUCTOR_CACHE_DIR"] == "/scratch/mine"
    assert mine["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "0"
    flow = rank_environment(_case(framework="oneflow"), {}, "4", case_json=case_json)
    assert not any(k.startswith("TORCHINDUCTOR") for k in flow)
    assert "TORCHINDUCTOR_CACHE_DIR" not in rank_environment(_case(), {}, "4")


def test_local_runs_and_scripts_get_it(tmp_path):
    case_json = tmp_path / "cases" / "c" / "case.json"
    ex = LocalExecutor()
    assert ex.environment(_case(), case_json)["TORCHINDUCTOR_CACHE_DIR"] == \
        str(tmp_path / COMPILE_CACHE_DIR)
    script = ex.script(_case(), "c", case_json)
    # run_local.sh finds the cache beside itself: a copied results directory uses the copy's
    export = next(line for line in script.splitlines()
                  if line.startswith("export TORCHINDUCTOR_CACHE_DIR="))
    copy = tmp_path / "copy" / "cases" / "c"
    copy.mkdir(parents=True)
    (copy / "show.sh").write_text(f'{export}\necho "$TORCHINDUCTOR_CACHE_DIR"\n')
    shown = subprocess.run(["bash", str(copy / "show.sh")], capture_output=True, text=True,
                           check=True, cwd="/").stdout.strip()
    assert shown == str(tmp_path / "copy" / COMPILE_CACHE_DIR)
    # a cache the grid's env names is exported as given
    mine = ex.script(_case(env={"TORCHINDUCTOR_CACHE_DIR": "/scratch/mine"}), "c", case_json)
    assert "export TORCHINDUCTOR_CACHE_DIR=/scratch/mine" in mine
