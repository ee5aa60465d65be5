"""Where a preflight's verdict goes: the next submit's --exclude, and the state of a run whose
job the preflight stopped."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from toolkit.launch.slurm import SlurmExecutor
from toolkit.results.layout import CASE_FILE, SUBMISSION_SCRIPT
from toolkit.results.preflight import excluded_nodes, stopped_by_preflight
from toolkit.spec import Case, PreflightOptions, SlurmJobOptions


def _verdict(directory: Path, nodes: dict[str, str]) -> None:
    directory.mkdir(parents=True)
    rows = [{"node": n, "verdict": v, "reasons": None if v == "ok" else f"{n} gemm slow"}
            for n, v in nodes.items()]
    (directory / "verdict.json").write_text(json.dumps(
        {"ok": all(v == "ok" for v in nodes.values()), "nodes": rows, "figures": [],
         "health": [], "links": []}))


def _case(on_fail: str, extra: tuple[str, ...] = ()) -> Case:
    return Case(device="cpu", num_nodes=2,  # type: ignore[arg-type]
                preflight=PreflightOptions(enabled=True, on_fail=on_fail),
                slurm=SlurmJobOptions(extra_sbatch=extra, repeats_as="sequence"))


def _plan(root: Path, case: Case) -> list[str]:
    (root / "cases" / "c").mkdir(parents=True, exist_ok=True)
    for name in (CASE_FILE, SUBMISSION_SCRIPT):
        (root / "cases" / "c" / name).write_text("")
    (sub,) = SlurmExecutor(gpus=False).plan(root, "g", [("c", case, (0,))])
    return sub.command()


def test_skip_node_excludes_the_nodes_whose_latest_preflight_was_not_ok(tmp_path: Path) -> None:
    _verdict(tmp_path / "cases" / "c" / "preflight" / "20261124T100000Z-7_0",
             {"node1": "ok", "node2": "slow", "node3": "fault"})
    assert excluded_nodes(tmp_path) == ["node2", "node3"]
    cmd = _plan(tmp_path, _case("skip_node", ("--exclude=node9",)))
    # the grid's own --exclude kept: sbatch's command line replaces the script's
    assert "--exclude=node9,node2,node3" in cmd
    assert not any(a.startswith("--exclude") for a in _plan(tmp_path, _case("stop")))
    # a later standalone preflight found node3 fine again: only node2 stays out
    _verdict(tmp_path / "preflight" / "20261124T110000Z-sbatch-1", {"node3": "ok"})
    assert excluded_nodes(tmp_path) == ["node2"]


def test_a_node_name_that_is_not_one_is_never_passed_on(tmp_path: Path) -> None:
    _verdict(tmp_path / "preflight" / "20261124T100000Z-1", {"n1 --hold": "slow", "n2": "slow"})
    assert excluded_nodes(tmp_path) == ["n2"]


def test_a_job_stopped_by_its_preflight_says_so(tmp_path: Path) -> None:
    case_dir = tmp_path / "cases" / "c"
    _verdict(case_dir / "preflight" / "20261124T100000Z-7_0", {"node1": "ok", "node2": "slow"})
    said = stopped_by_preflight(case_dir, "7_0")
    assert said is not None and "node2 slow: node2 gemm slow" in said
    assert stopped_by_preflight(case_dir, "7_1") is None  # another job's preflight
    assert stopped_by_preflight(case_dir, "0") is None


def test_the_script_runs_the_preflight_before_the_repeats_only_when_enabled() -> None:
    ex = SlurmExecutor(gpus=False)
    on = ex.script(_case("stop"), "c", Path("/r/cases/c/case.json"))
    off = ex.script(replace(_case("stop"), preflight=PreflightOptions()), "c",
                    Path("/r/cases/c/case.json"))
    assert "toolkit.preflight" not in off
    lines = on.splitlines()
    begin = next(i for i, ln in enumerate(lines) if "toolkit.preflight begin" in ln)
    loop = next(i for i, ln in enumerate(lines) if ln.startswith("for REPEAT in"))
    assert begin < loop
    assert any("srun" in ln and "toolkit.preflight rank" in ln for ln in lines)
    # a verdict not ok stops the job; ok as far as judged (7) trains
    assert any('verdict "$PREFLIGHT" --on-fail stop || { rc=$?; [ "$rc" -eq 7 ] || exit "$rc"; }'
               in ln for ln in lines)


def test_preflights_of_every_case_are_ordered_by_when_they_ran(tmp_path: Path) -> None:
    from toolkit.results.preflight import verdicts

    _verdict(tmp_path / "cases" / "a" / "preflight" / "20261124T110000Z-2", {"n1": "ok"})
    _verdict(tmp_path / "cases" / "b" / "preflight" / "20261124T100000Z-1", {"n1": "slow"})
    _verdict(tmp_path / "preflight" / "20261124T120000Z-sbatch-9", {"n1": "ok"})
    assert [d.name for d, _ in verdicts(tmp_path)] == [
        "20261124T100000Z-1", "20261124T110000Z-2", "20261124T120000Z-sbatch-9"]


def test_an_exclusion_that_leaves_too_few_nodes_is_said_at_dry_run_and_submit(
        tmp_path: Path) -> None:
    from toolkit.launch.slurm import exclusion_notes

    where = tmp_path / "preflight" / "20261124T100000Z-sbatch-1"
    _verdict(where, {f"n{i}": "slow" if i < 4 else "ok" for i in range(8)})
    fits, too_many = replace(_case("skip_node"), num_nodes=4), replace(_case("skip_node"),
                                                                       num_nodes=7)
    notes = exclusion_notes(tmp_path, [("fits", fits, (0,)), ("big", too_many, (0,))])
    excluded = f"4 of 8 node(s) excluded by the preflight in {where} (n0, n1, n2, n3)"
    assert notes[0] == f"preflight on_fail: skip_node: {excluded}; given to --exclude"
    assert notes[1].startswith(f"big: 7 node(s) asked for, {excluded}: 4 left, so Slurm will "
                               "refuse it")
    assert "move the preflight directory out of the results" in notes[1]
    assert len(notes) == 2  # the case that fits is not named
    assert exclusion_notes(tmp_path, [("c", replace(too_many, preflight=PreflightOptions(
        enabled=True, on_fail="stop")), (0,))]) == []
    # the dry run prints them
    (tmp_path / "cases" / "big").mkdir(parents=True)
    for name in (CASE_FILE, SUBMISSION_SCRIPT):
        (tmp_path / "cases" / "big" / name).write_text("")
    _, lines = SlurmExecutor(gpus=False).dry_run(tmp_path, "g", [("big", too_many, (0,))])
    assert notes[1] in lines
