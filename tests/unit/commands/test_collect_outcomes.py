"""What `collect` says about what it found: a grid that never ran, repeats that disagree."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

import pytest

from toolkit import collect
from toolkit.rank.event_writer import EventWriter
from toolkit.results.layout import CaseDir, rank_file
from toolkit.spec import Case, resolve


def planned_grid(root: Path, repeats: list[int]) -> None:
    """case.json files only, as `submit` leaves them before any job starts."""
    for index, n in enumerate(repeats):
        case = resolve(Case.from_dict({"model": "resnet50", "batch_size_per_device": 1 + index,
                                       "repeats": n}))
        CaseDir(root, case.base_id()).write_case(case)


def test_a_grid_that_never_ran_says_how_many_runs_were_planned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planned_grid(tmp_path, [2, 3, 1])
    assert collect.main([str(tmp_path), "--quiet", "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "no run has started yet: 0 of the 6 run(s) planned in 3 case(s)" in err
    report = (tmp_path / "report.md").read_text()
    assert "0 of the 6 run(s) planned in 3 case(s)" in report
    assert "the grid plans 6 in 3 case(s)" in report


def ran_grid(root: Path, step_times_s: dict[int, list[float]]) -> None:
    """One case per batch size, one finished repeat per step time (throughput = bs / step)."""
    for bs, steps in step_times_s.items():
        case = resolve(Case.from_dict({"model": "resnet50", "batch_size_per_device": bs,
                                       "repeats": len(steps), "warmup_iterations": 1,
                                       "measured_iterations": 3}))
        cdir = CaseDir(root, case.base_id())
        cdir.write_case(case)
        for repeat, step in enumerate(steps):
            run = cdir.prepare_run(repeat)
            with EventWriter(rank_file(run, 0), 0) as w:
                for i in range(1, 5):
                    w.write("iter", iteration=i, elapsed_s=i * step, step_time_s=step,
                            samples=bs, loss=1.0, time_s=10.0 + i)
            (run / "status.json").write_text(json.dumps({"status": "ok"}))


def test_repeats_that_spread_beyond_the_threshold_are_flagged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # bs 8: 80, 80 and 64 samples/s (spread 20%); bs 16: within 1%; bs 32: one repeat
    ran_grid(tmp_path, {8: [0.1, 0.1, 0.125], 16: [0.1, 0.1005, 0.101], 32: [0.1]})
    assert collect.main([str(tmp_path), "--quiet", "--no-plots"]) == 0
    with (tmp_path / "summary.csv").open() as fh:
        spread = {int(r["batch_size_per_device"]): r["throughput_spread"]
                  for r in csv.DictReader(fh)}
    assert float(spread[8]) == pytest.approx((80 - 64) / 80)
    assert float(spread[16]) == pytest.approx((160 - 160 / 1.01) / (160 / 1.005))
    assert spread[32] == ""  # one repeat: no spread
    rule = ("⚠ spread > 5% over the repeats: the median is not a stable figure (spread = "
            "(max - min) / median of the throughput over a case's finished repeats)")
    report = (tmp_path / "report.md").read_text()
    main = report[report.index("## Throughput and speedup"):report.index("## Summary")]
    assert "| 1 | 1 | 8 | 80.0 ⚠ |" in main
    assert "| 1 | 1 | 16 | 159.2 |" in main and "| 1 | 1 | 32 | 320.0 |" in main
    assert rule + ": resnet50 torch fp32 1n1g bs8: 20.0% over 3 repeats" in main
    assert main.count("⚠") == 2  # the mark, and the rule under its table
    summary = report[report.index("## Summary"):]
    assert "| 80.0 ⚠ | 64.0 | 80.0 | 20.0 |" in summary
    page = (tmp_path / "report.html").read_text()
    assert "<td>80.0 ⚠</td>" in page and html.escape(rule) in page
    # the threshold is the user's: at 25% nothing is flagged
    assert collect.main([str(tmp_path), "--quiet", "--no-plots",
                         "--spread-threshold", "0.25"]) == 0
    assert "⚠" not in (tmp_path / "report.md").read_text()
    assert collect.main([str(tmp_path), "--spread-threshold", "-1"]) == collect.EXIT_BAD_INPUT
    assert "--spread-threshold" in capsys.readouterr().err


def test_the_wrote_line_names_folders_and_counts_not_each_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Twelve runs give 24 exported files: the closing line says where they are and how many,
    and stays one short line."""
    ran_grid(tmp_path, {bs: [0.1, 0.1, 0.1] for bs in (1, 2, 4, 8)})
    assert collect.main([str(tmp_path), "--no-plots"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (f"wrote runs.csv, summary.csv, profiles.csv, report.md, report.html, tables/ "
                    f"({len(list((tmp_path / 'tables').iterdir()))} files), mllog/ (12 files), "
                    f"systems/ (12 files) in {tmp_path}")
    assert len(list((tmp_path / "mllog").rglob("*.log"))) == 12


QUICKSTART = Path(__file__).resolve().parents[2] / "data" / "results_quickstart"


def test_runs_that_did_not_run_are_named_with_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from toolkit.launch import job_ledger

    root = tmp_path / "res"
    shutil.copytree(QUICKSTART, root)
    # the real quickstart runs (2 cases x 2 repeats) plus two repeats more of the 1-rank case:
    # one submitted to Slurm and cancelled, one never submitted
    case_id = "bert_base-torch-fp32-1n1g-bs8"
    case_json = root / "cases" / case_id / "case.json"
    data = json.loads(case_json.read_text())
    data["case"]["repeats"] = 4
    case_json.write_text(json.dumps(data))
    script = root / "cases" / case_id / "submission.sh"
    job_ledger.record_submit(root, "4242", script,
                             [job_ledger.Entry("4242", None, case_id, (2,))], [])
    job_ledger.record_cancel(root, ["4242"])
    assert collect.main([str(root), "--quiet", "--no-plots", "--no-store"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"cancelled {case_id} r2: job 4242 cancelled by toolkit.cancel (job 4242)" in err
    assert f"not submitted {case_id} r3: nothing ran or was submitted for it" in err
    report = (root / "report.md").read_text()
    assert ("(4 runs; the grid plans 6 in 2 case(s); 2 did not run (1 cancelled, 1 not "
            "submitted): listed under \"Runs that did not run\")") in report
    assert "## Runs that did not run" in report
    assert f"| {case_id} | 2 | cancelled | job 4242 cancelled by toolkit.cancel | 4242 |" \
        in report
    assert f"| {case_id} | 3 | not submitted | nothing ran or was submitted" in report
    with (root / "tables" / "not_run.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["repeat"], r["state"]) for r in rows] == [("2", "cancelled"),
                                                         ("3", "not submitted")]
