"""The report's table of how each own-script case was measured: the rate's scope and every
run's flag are shown, not only the first run's."""

from __future__ import annotations

from toolkit.report.tables import measured_by


def test_rate_scope_and_the_flags_of_every_run_are_shown():
    base = {"case_id": "tv-2g", "measured_by": "pattern", "method": "mean_of_rates",
            "measured_clock": "rate", "rate_scope": "job (default)", "timed_ranks": "0"}
    runs = [dict(base, repeat=0, figure_flag="timed on 1 of 2 ranks (rank 0 printed steps)"),
            dict(base, repeat=1, figure_flag="timed on 1 of 2 ranks (rank 0 printed steps)"),
            dict(base, repeat=2, figure_flag="the reader fell behind")]
    [table] = measured_by(runs).tables
    assert table.header[4:] == ["rate", "timed ranks", "flag"]
    [row] = table.rows
    assert row[4] == "job (default)"
    assert row[6] == "timed on 1 of 2 ranks (rank 0 printed steps) | the reader fell behind"
    assert "`command.rate: job`, the default" in table.note


def test_a_case_without_flag_or_rate_shows_dashes():
    [table] = measured_by([{"case_id": "m", "measured_by": "log:megatron", "method": "latency",
                            "measured_clock": "step_time", "timed_ranks": "0-1"}]).tables
    assert table.rows[0][4:] == ["-", "0-1", "-"]
