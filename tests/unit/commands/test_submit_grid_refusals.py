"""submit refuses grids that do not mean what they say, and grids past a limit, fast: exit 2, a
message naming the limit and how to raise it, and nothing under --results. The limit tests run
submit as a process under a timeout, so that a hang fails the test instead of stalling it.

"Fast" is against what this machine takes now to start submit and refuse a grid file that does
not exist (`startup_s`, the imports every refusal pays): a refusal may take that twice and 5 s
more, while expanding a billion values or reading an endless file would take minutes."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from toolkit import submit

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
    for p, n in zip("abcdefgh", "bcdefghi", strict=True))
"""A billion-laughs document: 10^9 values through nine levels of aliases."""


def run_submit(args: list[str], timeout: float = 10,
               env: dict[str, str] | None = None) -> tuple[int, str, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "toolkit.submit", "--executor", "local",
                           *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    return proc.returncode, proc.stderr, time.monotonic() - start


@functools.cache
def startup_s() -> float:
    """What submit takes on this machine, as loaded now, to start and refuse a missing grid."""
    rc, err, took = run_submit(["--grid", str(ROOT / "no-such-grid.yaml")], timeout=120)
    assert rc == 2 and "no-such-grid.yaml" in err, err
    return took


def fast_s() -> float:
    """The longest a refusal may take: twice the start-up, and 5 s more."""
    return 5 + 2 * startup_s()


def assert_refused(args: list[str], out: Path, expected: str, **kw: object) -> str:
    rc, err, took = run_submit([*args, "--results", str(out)],  # type: ignore[arg-type]
                               timeout=2 * fast_s(), **kw)
    assert rc == 2, err
    assert expected in err
    assert "Traceback" not in err
    assert not out.exists()
    assert took < fast_s(), f"took {took:.1f} s (start-up {startup_s():.1f} s)"
    return err


def test_billion_laughs_is_refused_at_once(tmp_path):
    grid = tmp_path / "lol.yaml"
    grid.write_text(LAUGHS)
    assert_refused(["--grid", str(grid)], tmp_path / "r",
                   "expands to more than 1,000,000 values through YAML aliases (*name repeats "
                   "&name); set TRAINBENCH_MAX_GRID_NODES to raise the limit")


def test_billion_laughs_in_a_set_value_is_refused_at_once(tmp_path):
    levels = ["&a [x, x, x, x, x, x, x, x, x, x]"] + [
        f"&{n} [{', '.join([f'*{p}'] * 10)}]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    assert_refused(["--grid", str(QUICKSTART), "--set", f"description=[{', '.join(levels)}]"],
                   tmp_path / "r", "--set description: expected a YAML value")


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    grid = tmp_path / "loop.yaml"
    grid.write_text("base: &b {env: *b}\n")
    assert_refused(["--grid", str(grid)], tmp_path / "r", "a YAML alias inside its own anchor")


def test_dev_zero_is_refused_at_once(tmp_path):
    assert_refused(["--grid", "/dev/zero"], tmp_path / "r",
                   "/dev/zero: larger than the limit of 1,048,576 bytes for a grid file; set "
                   "TRAINBENCH_MAX_GRID_BYTES to raise it")


def test_the_size_limit_can_be_raised_and_lowered(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {precision: fp32}\n")
    assert_refused(["--grid", str(grid)], tmp_path / "r", "larger than the limit of 10 bytes",
                   env={"TRAINBENCH_MAX_GRID_BYTES": "10"})
    assert_refused(["--grid", str(grid)], tmp_path / "r",
                   "$TRAINBENCH_MAX_GRID_BYTES: expected a positive integer",
                   env={"TRAINBENCH_MAX_GRID_BYTES": "ten"})


def test_an_endless_fifo_is_refused_and_one_without_writer_does_not_hang(tmp_path):
    fifo = tmp_path / "grid.fifo"
    os.mkfifo(fifo)
    stop = threading.Event()

    def write_forever() -> None:
        try:
            with open(fifo, "wb") as fh:
                while not stop.is_set():
                    fh.write(b"# " + b"x" * 65536 + b"\n")
        except (BrokenPipeError, OSError):
            pass

    writer = threading.Thread(target=write_forever, daemon=True)
    writer.start()
    try:
        assert_refused(["--grid", str(fifo)], tmp_path / "r", "larger than the limit")
    finally:
        stop.set()
        writer.join(5)
    # no writer: read as an empty grid at once instead of waiting for one
    rc, err, took = run_submit(["--grid", str(fifo), "--dry-run", "--results",
                                str(tmp_path / "r2")], timeout=2 * fast_s())
    assert took < fast_s() and rc == 0, err


def test_a_grid_of_a_billion_cases_is_refused_before_expanding(tmp_path):
    grid = tmp_path / "big.yaml"
    grid.write_text("sweep:\n" + "".join(f"  env.V{i}: [a, b]\n" for i in range(30)))
    err = assert_refused(["--grid", str(grid)], tmp_path / "r",
                         "the sweeps and zips make 1,073,741,824 cases (2 (sweep.env.V0) x ")
    assert ("more than the limit of 100,000; split the grid, or raise the limit with "
            "--max-cases or TRAINBENCH_MAX_CASES") in err


def test_the_case_limit_can_be_set_by_flag_and_environment(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("sweep: {seed: [1, 2, 3]}\n")
    out = tmp_path / "r"
    args = ["--grid", str(grid), "--results", str(out), "--executor", "local", "--dry-run"]
    assert submit.main([*args, "--max-cases", "2"]) == 2
    assert "make 3 cases (3 (sweep.seed)), more than the limit of 2" in capsys.readouterr().err
    assert not out.exists()
    os.environ["TRAINBENCH_MAX_CASES"] = "2"
    try:
        assert submit.main(args) == 2
        assert submit.main([*args, "--max-cases", "3"]) == 0
    finally:
        del os.environ["TRAINBENCH_MAX_CASES"]


@pytest.mark.parametrize("override, expected", [
    ("model_config.seq_len=512", "--set model_config.seq_len: zip[0].model_config sets "
                                 "model_config as a whole in every case"),
    ("model_config.seqlen=3", "--set model_config.seqlen: unknown key 'model_config.seqlen' "
                              "(did you mean 'seq_len'?)"),
])
def test_set_that_would_not_take_effect_exits_2_and_writes_nothing(tmp_path, capsys, override,
                                                                   expected):
    out = tmp_path / "r"
    assert submit.main(["--grid", str(QUICKSTART), "--results", str(out), "--executor", "local",
                        "--dry-run", "--set", override]) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()


def test_grid_text_that_is_not_utf8_exits_2_and_writes_nothing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_bytes(b"base: {precision: fp32}\n# \xff\n")
    out = tmp_path / "r"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--executor", "local"]) == 2
    assert "g.yaml: not UTF-8: byte 0xff at line 2, column 3" in capsys.readouterr().err
    assert not out.exists()


def test_a_results_path_that_is_not_utf8_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "r\udcffx"  # the byte 0xff in a directory name
    assert submit.main(["--grid", str(QUICKSTART), "--results", str(out), "--executor", "local",
                        "--dry-run"]) == 2
    assert "r\\xffx' is not UTF-8 text" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_every_problem_of_a_grid_in_one_submit_and_nothing_written(tmp_path):
    """A duplicate key, an unknown model, two bad values, misspelt keys and an exclude that
    matches nothing: one submit names them all, each with its file and line, and submits
    nothing."""
    from tests.unit.spec.test_grid_meaning import EVERY_PROBLEM

    grid = tmp_path / "all.yaml"
    grid.write_text(EVERY_PROBLEM)
    err = assert_refused(["--grid", str(grid)], tmp_path / "r", f"{grid}: base.model: ")
    lines = [line for line in err.splitlines() if line.startswith(f"{grid}: ")]
    assert [line.split(": ")[1] for line in lines] == [
        "base.model", "base.batch_size_per_device", "base.precision", "base.warmup_iters",
        "sweep.gpu_per_node", "sweep.wibble", "exclude[0]"]
    assert [line.rsplit("(line ", 1)[1] for line in lines] == [
        "3)", "5)", "6)", "7)", "9)", "10)", "12)"]
    assert err.count("valid keys:") == 1  # only for `wibble`, which is close to no key
