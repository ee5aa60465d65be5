"""Reading rank files fast without changing what is read: orjson's records are json's, the
lines only json reads go through json, and a run's other ranks kept slim give its row as kept
whole."""

from __future__ import annotations

import json
import math

import pytest

from toolkit.rank.event_writer import EventWriter
from toolkit.results.layout import rank_file
from toolkit.results.runs import read_rank_file, read_run
from toolkit.results.scan import PARALLEL_MIN_RANKS, collect_runs
from toolkit.spec import Case, resolve

START = '{"schema":1,"type":"start","rank":0,"time_s":1.5,"host":"n1"}'
ITER = '{"schema":1,"type":"iter","rank":0,"iteration":%d,"elapsed_s":%s,"loss":%s,"time_s":%s}'


def records_by_json(path):
    """What the line-by-line json reading gives: every line that is a JSON object."""
    out = []
    for line in path.read_bytes().splitlines():
        try:
            rec = json.loads(line.decode("utf-8").strip(" \t\r\n"))
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def records_read(log):
    return [r for r in [log.start, *log.iterations.values(), *log.telemetry, log.summary,
                        log.end] if r is not None]


@pytest.mark.parametrize("extra,why", [
    ("", "every line plain JSON: orjson reads the file"),
    (ITER % (5, 1.25, "NaN", 101.25), "a diverged loss: json reads NaN"),
    ('{"schema":1,"type":"summary","rank":0,"parameters":123456789012345678901234567890}',
     "an integer beyond 64 bits stays an integer"),
    ('{"schema":1,"type":"summary","rank":0,"note":"\\ud800"}', "a lone surrogate"),
    ('{"schema":1,"type":"summary","rank":0,"framework_peak_memory_mib":Infinity}',
     "Infinity"),
    ('{"schema":1,"type":"summary","rank":0,"big":1e400}', "a float beyond the doubles"),
])
def test_records_are_what_json_reads(tmp_path, extra, why):
    path = tmp_path / "rank000.jsonl"
    lines = [START, *(ITER % (i, i * 0.25, 7.0 - i / 3, 100 + i * 0.25) for i in range(1, 5)),
             '{"schema":1,"type":"telemetry","rank":0,"time_s":100.6,"power_w":412.5}']
    path.write_text("\n".join([*lines, *([extra] if extra else []),
                               '{"schema":1,"type":"end","rank":0,"time_s":103.0}']) + "\n")
    log = read_rank_file(path)
    assert log.bad_lines == 0 and log.problem() is None, why
    def dumped(records):
        return sorted(json.dumps(r, sort_keys=True) for r in records)

    assert dumped(records_read(log)) == dumped(records_by_json(path)), why
    if "NaN" in extra:
        assert math.isnan(log.iterations[5]["loss"])
    if "parameters" in extra:
        assert log.summary["parameters"] == 123456789012345678901234567890


def test_damaged_lines_are_counted_as_before(tmp_path):
    path = tmp_path / "rank000.jsonl"
    path.write_bytes(b"\n".join([START.encode(), ITER.encode() % (1, b"0.5", b"7.0", b"100.5"),
                                 b'{"schema":1,"type":"iter","rank":0,"itera', b"[1, 2]",
                                 b'{"schema":1,"type":"end"}\r', b"\xff\xfe", b""]))
    log = read_rank_file(path)
    assert log.bad_lines == 3
    assert log.first_bad == "line 3: cut short or not JSON"
    assert list(log.iterations) == [1] and log.end == {"schema": 1, "type": "end"}


CASE = resolve(Case.from_dict({"model": "resnet50", "num_nodes": 2, "gpus_per_node": 40,
                               "batch_size_per_device": 4, "warmup_iterations": 2,
                               "measured_iterations": 4}))


def write_run(run_dir, short_rank=None, bad_elapsed_rank=None):
    """80 ranks: iterations at 0.5 s (rank r: + r ms), telemetry through the run and before
    it, spans on two hosts; optionally a rank that died after fewer iterations (no summary,
    no end: its span ends at its last iteration), or one whose elapsed_s is not a number."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(CASE.world_size):
        step = 0.5 + rank / 1000
        with EventWriter(rank_file(run_dir, rank), rank) as w:
            w.write("start", world_size=CASE.world_size, host=f"n{rank // 40}", time_s=99.0)
            w.write("telemetry", time_s=99.5, utilization_pct=1.0, power_w=90.0)
            last = 5 if rank == short_rank else 6
            for i in range(1, last + 1):
                elapsed = "soon" if rank == bad_elapsed_rank and i == 4 else i * step
                w.write("iter", iteration=i, elapsed_s=elapsed, step_time_s=step, samples=320,
                        loss=9.0 - i, warmup=i <= 2, time_s=100.0 + i * step)
                w.write("telemetry", time_s=100.0 + i * step + 0.1,
                        utilization_pct=90.0 + rank % 7, power_w=400.0 + i)
            if rank == short_rank:
                continue
            w.write("summary", device="cpu", framework_peak_memory_mib=10.0 + rank,
                    cpus=[rank % 40], host_cpus=40,
                    telemetry={"peak_memory_mib": 1000.0 + rank})
            w.write("end", time_s=100.0 + 7 * step)
    (run_dir / "status.json").write_text(json.dumps({"status": "ok", "log": "output.log"}))


@pytest.mark.parametrize("damage", [{}, {"short_rank": 17}, {"bad_elapsed_rank": 33}])
def test_a_run_read_slim_gives_the_row_read_whole(tmp_path, damage):
    run_dir = tmp_path / "r0"
    write_run(run_dir, **damage)
    whole = [(p, read_rank_file(p)) for p in sorted(run_dir.glob("rank*.jsonl"))]
    assert CASE.world_size >= PARALLEL_MIN_RANKS
    row = read_run(run_dir, "c", CASE, 0)
    expected = read_run(run_dir, "c", CASE, 0, rank_logs=whole)
    assert row.to_dict() == expected.to_dict()
    assert row.spans == expected.spans and row.profiles == expected.profiles
    if not damage:
        assert row.status == "ok" and row.extra["energy_per_sample_j"] > 0
    else:
        assert row.status == "incomplete" and row.error == expected.error


def test_the_pool_shares_a_large_runs_files_and_gives_the_serial_rows(tmp_path):
    (tmp_path / "cases" / "c").mkdir(parents=True)
    (tmp_path / "cases" / "c" / "case.json").write_text(
        json.dumps({"id": "c", "case": CASE.to_dict()}))
    for repeat in range(2):
        write_run(tmp_path / "cases" / "c" / f"r{repeat}", short_rank=5 if repeat else None)
    pooled, _ = collect_runs(tmp_path, jobs=2)
    serial, _ = collect_runs(tmp_path, jobs=1)
    assert [r.to_dict() for r in pooled] == [r.to_dict() for r in serial]
    assert [r.status for r in pooled] == ["ok", "incomplete"]
    # the two repeats overlap on the same CPUs: found across the pool's runs as serially
    assert pooled[0].extra["oversubscribed"].startswith("ran at the same time as c r1")
