"""Hostile strings from a grid or the command line can neither execute nor write outside the
results directory.

Grid strings (env values, Slurm partition/account/qos/constraint, extra_sbatch values,
data_path) and the --results path itself carry `$(...)`, backticks, `;`, `&`, quotes, globs,
newlines and `../`. The scripts are written by `toolkit.submit --dry-run` for both executors
and then EXECUTED with bash: every shell line runs (the real `python -m toolkit.runstate begin/end`
included) except the launcher, which is a stand-in (`mpirun`, `srun`, `sbatch` first on PATH,
the one seam) that records its argv and environment. Nothing may create the marker file, each
hostile string must reach the launcher verbatim as one argument (or one variable), and every
new file must lie inside the results directory.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit import submit
from toolkit.launch import job_ledger
from toolkit.launch.local import LocalExecutor
from toolkit.launch.slurm import SlurmExecutor
from toolkit.results.layout import CaseDir
from toolkit.spec import Case, SlurmJobOptions, valid_case_id
from toolkit.spec.convert import script_env_name
from toolkit.spec.grid import GridError, parse_grid

MARK = "PWNED"
CASE_ID = "resnet50-torch-fp32-1n1g-bs32"
STUB = """#!/bin/bash
# stand-in launcher: records its argv and environment (NUL-separated), launches nothing
log={log}/"$(basename "$0").$$"
printf '%s\\0' "$@" > "$log.argv"
env -0 > "$log.env"
if [ "$(basename "$0")" = sbatch ]; then echo 4242; fi
exit 0
"""


def make_stubs(tmp: Path) -> tuple[Path, Path]:
    """bin/ with mpirun, srun and sbatch stand-ins; calls/ where they record."""
    bin_dir, calls = tmp / "bin", tmp / "calls"
    bin_dir.mkdir()
    calls.mkdir()
    for name in ("mpirun", "srun", "sbatch"):
        path = bin_dir / name
        path.write_text(STUB.format(log=shlex.quote(str(calls))))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir, calls


def recorded(calls: Path, name: str) -> list[tuple[list[str], dict[str, str]]]:
    out = []
    for argv_file in sorted(calls.glob(f"{name}.*.argv")):
        argv = argv_file.read_bytes().decode().split("\0")[:-1]
        env_items = argv_file.with_suffix(".env").read_bytes().decode().split("\0")[:-1]
        out.append((argv, dict(item.split("=", 1) for item in env_items)))
    return out


def hostile_strings(tmp: Path) -> dict[str, str]:
    """Each one runs `touch` on the marker if any shell ever evaluates it."""
    m = tmp / MARK
    return {
        "cmd": f"$(touch {m})",
        "tick": f"`touch {m}`",
        "semi": f"x; touch {m}; touch {MARK} #",
        "quotes": f"it's \"q\" '$(touch {m})' \\' \\\" $((1+1)) ${{HOME}}",
        "amp": f"* & touch {m} | tee {MARK} > ../{MARK}",
        "newline": f"a\ntouch {m}\n'\"\n",
        "dots": f"../../{MARK}/../x",
        # line separators that are not "\n" for bash, but are for Python's str.splitlines()
        "linesep": f"a\u2028touch {MARK} #\x85touch {MARK} #\u2029touch {MARK} #",
    }


def hostile_grid(tmp: Path, launcher: str = "srun", scope: str = "case") -> dict:
    h = hostile_strings(tmp)
    # sbatch values are one line each, without backslashes (sbatch's tokenizer escapes with
    # them even inside quotes: refused, see tests/unit/launch/test_sbatch_directives.py)
    line = {k: v.replace("\\", "") for k, v in h.items() if "\n" not in v}
    return {
        "name": "hostile",
        "base": {
            "device": "cpu", "gpus_per_node": 1, "warmup_iterations": 0,
            "measured_iterations": 1,
            "data": "image_folder", "data_path": h["dots"] + h["cmd"] + h["newline"],
            "env": {f"EVIL_{k.upper()}": v for k, v in h.items()},
            "slurm": {"partition": line["cmd"], "account": line["tick"], "qos": line["semi"],
                      "constraint": line["quotes"], "launcher": launcher, "array_scope": scope,
                      "extra_sbatch": [f"--comment={line['amp']}",
                                       f"--mail-user={line['quotes']}",
                                       f"--licenses={line['linesep']}"]},
        },
    }


def results_dir(tmp: Path) -> Path:
    """A --results path that is itself hostile (no newline: submit refuses that)."""
    return tmp / f"res $(touch {MARK}) `touch {MARK}`; touch {MARK} & 'q\" *"


def files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def assert_no_marker(tmp: Path) -> None:
    hits = [p for p in tmp.rglob(MARK)] + [p for p in (Path.cwd(), Path("/tmp"))
                                            if (p / MARK).exists()]
    assert not hits, f"a hostile string was executed: {hits}"


def run_script(script: Path, bin_dir: Path, cwd: Path, *args: str,
               extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stderr
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           **(extra_env or {})}
    return subprocess.run(["bash", "-x", str(script), *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120, check=False)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    bin_dir, calls = make_stubs(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path, bin_dir, calls, cwd


def _submit(tmp: Path, grid: dict, executor: str, dry_run: bool = True) -> Path:
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    results = results_dir(tmp)
    argv = ["--grid", str(path), "--results", str(results), "--executor", executor]
    assert submit.main(argv + (["--dry-run"] if dry_run else [])) == 0
    return results


def _check_launch(calls: Path, launcher: str, results: Path, tmp: Path) -> None:
    """The launcher ran once, got the case file and run directory as one argument each, and
    every hostile environment value unchanged."""
    (argv, env), = recorded(calls, launcher)
    case_dir = (results / "cases" / CASE_ID).absolute()
    assert str(case_dir / "case.json") in argv
    assert argv[argv.index("--run-dir") + 1] == str(case_dir / "r0")
    for key, value in hostile_strings(tmp).items():
        assert env[f"EVIL_{key.upper()}"] == value


@pytest.mark.parametrize("executor,launcher,scope", [
    ("local", "mpirun", "case"),
    ("slurm", "srun", "case"),
    ("slurm", "mpirun", "case"),
    ("slurm", "srun", "grid"),
])
def test_hostile_grid_strings_never_execute(sandbox, executor, launcher, scope):
    tmp, bin_dir, calls, cwd = sandbox
    grid = hostile_grid(tmp, launcher if executor == "slurm" else "srun", scope)
    results = _submit(tmp, grid, executor)
    case_dir = results / "cases" / CASE_ID
    case = json.loads((case_dir / "case.json").read_text())["case"]
    assert case["data_path"] == grid["base"]["data_path"]  # verbatim in case.json ...
    if executor == "local":
        script, args, env = case_dir / "run_local.sh", ("0",), {}
    elif scope == "grid":
        # a dry run's array script lies under dry-run/ (never beside those of queued jobs)
        script, args, env = (results / "dry-run" / "slurm" / "array-0000.sh", (),
                             {"SLURM_ARRAY_TASK_ID": "0"})
    else:
        script, args, env = case_dir / "submission.sh", (), {"SLURM_ARRAY_TASK_ID": "0"}
    scripts = list(results.rglob("*.sh"))
    assert script in scripts
    for path in scripts:  # ... and never in a script: the worker reads it from case.json
        assert grid["base"]["data_path"] not in path.read_text()
    if executor == "slurm":
        check_sbatch_directives(case_dir / "submission.sh", grid["base"]["slurm"], cwd, bin_dir)
    before = files(tmp)

    proc = run_script(script, bin_dir, cwd, *args, extra_env=env)

    assert_no_marker(tmp)
    assert proc.returncode == 1, proc.stderr  # `runstate end`: failed, no rank files
    _check_launch(calls, launcher, results, tmp)
    new = files(tmp) - before
    assert new, "the run wrote nothing"
    outside = [p for p in new if results not in p.parents and calls not in p.parents]
    assert not outside, outside
    # every line ran, the last one included: `runstate end` wrote the verdict
    status = json.loads((case_dir / "r0" / "status.json").read_text())
    assert status["status"] == "failed" and "no rank file" in status["reason"]


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer"])
def test_hostile_container_and_site_values_never_execute(sandbox, runtime):
    """Container mounts, options and a site's env carry shell syntax (the results directory
    itself cannot: a mount list cannot carry its spaces); the job script hands each to srun as
    one argument and runs nothing of them."""
    tmp, bin_dir, calls, cwd = sandbox
    h = hostile_strings(tmp)
    # no spaces (mount lists cannot carry them): ${IFS} stands for one in a shell
    evil_path = f"/data/$(touch${{IFS}}{tmp / MARK})`touch${{IFS}}{MARK}`;'q\"&*"
    option = ("--container-remap-root=" if runtime == "pyxis" else "--fakeroot=") + \
        f"$(touch${{IFS}}{tmp / MARK})"
    site = tmp / "site.yaml"
    site.write_text(yaml.safe_dump({"name": "evil", "env": {"SITE_EVIL": h["quotes"]},
                                    "modules": ["cuda/12.4"]}))
    grid = {"name": "hostile", "base": {
        "device": "cpu", "warmup_iterations": 0, "measured_iterations": 1,
        "container": {"runtime": runtime, "image": "img@sha256:ab", "mounts": [evil_path],
                      "options": [option], "python": "python3"}}}
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    results = tmp / "res"
    assert submit.main(["--grid", str(path), "--results", str(results), "--executor", "slurm",
                        "--site", str(site), "--dry-run"]) == 0
    script = results / "cases" / CASE_ID / "submission.sh"
    module = bin_dir / "module-calls"
    proc = run_script(script, bin_dir, cwd, extra_env={
        "SLURM_ARRAY_TASK_ID": "0", "BASH_FUNC_module%%": f"() {{ echo \"$*\" > {module}; }}"})
    assert_no_marker(tmp)
    assert proc.returncode == 1, proc.stderr
    (argv, env), = recorded(calls, "srun")
    assert option in argv and env["SITE_EVIL"] == h["quotes"]
    binds = next(a for a in argv if a.startswith(("--container-mounts=", "--bind=")))
    assert binds.endswith(f",{evil_path}:{evil_path}")
    assert module.read_text() == "load cuda/12.4\n"


def test_a_results_path_a_mount_list_cannot_carry_is_refused(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {device: cpu, container: {runtime: apptainer, image: /i.sif}}\n")
    results = tmp_path / "my results"
    assert submit.main(["--grid", str(grid), "--results", str(results), "--executor",
                        "slurm"]) == 2
    err = capsys.readouterr().err
    assert "container: " in err and "comma, colon or space" in err
    assert not results.exists()


def check_sbatch_directives(script: Path, slurm: dict, cwd: Path, bin_dir: Path) -> None:
    """Each hostile Slurm value is on one `#SBATCH` line, and that line read by a shell gives
    exactly one word, the option with the value unchanged."""
    lines = script.read_text().split("\n")  # bash's lines (not str.splitlines: U+2028 ...)
    wanted = {f"--{k}={slurm[k]}" for k in ("partition", "account", "qos", "constraint")}
    wanted |= set(slurm["extra_sbatch"])
    directives = [ln.removeprefix("#SBATCH ") for ln in lines if ln.startswith("#SBATCH ")]
    probe = cwd / "directives.sh"
    probe.write_text("".join(f"printf '%s\\0' {d}\nprintf '\\n'\n" for d in directives))
    out = subprocess.run(["bash", str(probe)], capture_output=True, text=True, cwd=cwd,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                         check=True).stdout
    words = [line.split("\0")[:-1] for line in out.split("\n")[:-1]]
    assert all(len(w) == 1 for w in words), words
    assert wanted <= {w[0] for w in words}


def test_sbatch_gets_the_hostile_script_path_as_one_argument(sandbox):
    """A real (not dry) Slurm submit through the sbatch stand-in: --test-only, then the
    submission, each with the script path as one argument; the job is recorded."""
    tmp, _, calls, _ = sandbox
    results = _submit(tmp, hostile_grid(tmp), "slurm", dry_run=False)
    script = str(results / "cases" / CASE_ID / "submission.sh")
    argvs = sorted(argv for argv, _ in recorded(calls, "sbatch"))
    token = next(iter(job_ledger.load(results).intents))
    # The grid's own (hostile) --comment and the tag: one argument, as given.
    comment = "--comment=" + hostile_strings(tmp)["amp"]
    assert argvs == [["--array=0", f"{comment} trainbench:{token}", "--parsable", script],
                     ["--array=0", "--test-only", script]]
    assert [e.job_id for e in job_ledger.load(results).entries] == ["4242"]
    assert_no_marker(tmp)


@pytest.mark.parametrize("key", ["partition", "account", "qos", "constraint"])
def test_a_line_break_in_an_sbatch_value_is_refused(key):
    with pytest.raises(GridError) as info:
        parse_grid(yaml.safe_dump({"base": {"slurm": {key: "a\n#SBATCH --wrap=x"}}}),
                   source="g.yaml")
    assert f"g.yaml: base.slurm.{key}: " in str(info.value)
    assert "without control characters or newlines" in str(info.value)


def test_a_line_break_in_extra_sbatch_is_refused():
    with pytest.raises(GridError) as info:
        parse_grid(yaml.safe_dump({"base": {"slurm": {"extra_sbatch": ["--mem=1G\ntouch x"]}}}),
                   source="g.yaml")
    assert "g.yaml: base.slurm.extra_sbatch[0]: " in str(info.value)


@pytest.mark.parametrize("executor", ["local", "slurm"])
def test_results_path_with_a_newline_is_refused_before_writing(tmp_path, capsys, executor):
    """Its absolute path goes into `#SBATCH --output=`: a newline would start a script line."""
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {device: cpu}\n")
    results = tmp_path / f"r\ntouch {tmp_path / MARK} #"
    assert submit.main(["--grid", str(grid), "--results", str(results), "--dry-run",
                        "--executor", executor]) == 2
    assert "contains the control character '\\n'" in capsys.readouterr().err
    assert not results.exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", [
    "../x", "a/b", "..", ".", ".hidden", "-rf", "$(touch PWNED)", "`touch PWNED`", "a b",
    "a\nb", "x;y", "a'b", 'a"b', "", "a" * 201, "a/../../b", "/abs", "~user", "a*", "é",
])
def test_hostile_case_names_are_refused(name):
    assert not valid_case_id(name)
    with pytest.raises(GridError) as info:
        parse_grid(yaml.safe_dump({"base": {"name": name}}), source="g.yaml")
    assert "g.yaml: base.name: " in str(info.value)
    with pytest.raises(GridError) as info:
        parse_grid(yaml.safe_dump({"sweep": {"name": ["ok", name]}}), source="g.yaml")
    assert "g.yaml: sweep.name[1]: " in str(info.value)


@pytest.mark.parametrize("name", ["../up", "a/b", "..", ".x", "$(touch PWNED)"])
def test_hostile_grid_names_cannot_choose_the_default_results_dir(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({"name": name}))
    assert submit.main(["--grid", str(grid), "--dry-run", "--executor", "local"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.yaml"]


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_a_valid_case_id_is_one_directory_inside_cases(text):
    """Whatever passes `_ID_RE` names one directory directly under cases/, never elsewhere."""
    if not valid_case_id(text):
        return
    root = Path("/results")
    path = CaseDir(root, text).path
    assert path.parent == root / "cases" and path.name == text
    assert os.path.normpath(path) == str(path)  # no `..`, `.` or `/` to resolve
    assert not text.startswith(("-", "."))


# -- env and extra_sbatch values round-trip through the shell (hypothesis) ------------------

SHELL_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                     min_size=0, max_size=30)
SHELL_SPECIALS = st.sampled_from(["$(touch PWNED)", "`touch PWNED`", "'", '"', "\\", "\n", ";",
                                  "&", "|", "$HOME", "${X:-y}", "!", "*", "~", "#", " ", "\t",
                                  "\r", "'\"'\"'", "%", "$'\\n'", "\u2028", "\x85", "\x1c",
                                  "\u2029", "\x0b", "\x0c"])
VALUES = st.lists(st.one_of(SHELL_TEXT, SHELL_SPECIALS), min_size=1, max_size=6).map("".join)
# what an #SBATCH value may hold: one printable line without backslashes (sbatch's own tokenizer
# reads those as escapes; tests/unit/launch/test_sbatch_directives.py has the real parser)
ONE_LINE = VALUES.map(lambda v: "".join(c for c in v if c >= " " and c not in "\x7f\\") or "x")

PY_STUB = """#!/bin/bash
# stand-in for python -m toolkit.runstate begin/end: begin makes the run directory
if [ "$3" = begin ]; then mkdir -p "$4/r$5"; fi
exit 0
"""


@pytest.fixture(scope="module")
def shell_stubs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sh")
    bin_dir, calls = make_stubs(tmp)
    python = bin_dir / "python"
    python.write_text(PY_STUB)
    python.chmod(0o755)
    return tmp, bin_dir, calls, python


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(env=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True).filter(
           lambda n: script_env_name(n) is None), VALUES,
                           min_size=1, max_size=3),
       extra=st.lists(ONE_LINE, max_size=2), slurm=st.booleans())
def test_env_and_extra_sbatch_values_round_trip_through_the_shell(shell_stubs, env, extra,
                                                                    slurm):
    tmp, bin_dir, calls, python = shell_stubs
    for old in calls.iterdir():
        old.unlink()
    case = Case(device="cpu", env=tuple(sorted(env.items())),
                slurm=SlurmJobOptions(extra_sbatch=tuple(f"--{name}={v}" for name, v in zip(
                    ("comment", "mail-user")[:len(extra)], extra, strict=True))))
    case_dir = tmp / "cases" / "c"
    case_dir.mkdir(parents=True, exist_ok=True)
    if slurm:
        text = SlurmExecutor(python=str(python), gpus=False).script(case, "c",
                                                                    case_dir / "case.json")
        script = case_dir / "submission.sh"
    else:
        text = LocalExecutor(python=str(python), mpirun=str(bin_dir / "mpirun"), gpus=0,
                             cpus=2).script(case, "c", case_dir / "case.json")
        script = case_dir / "run_local.sh"
    script.write_text(text)
    if slurm:
        directives = [ln.removeprefix("#SBATCH ") for ln in text.split("\n")
                      if ln.startswith(("#SBATCH --comment", "#SBATCH --mail-user"))]
        probe = tmp / "probe.sh"
        probe.write_text("".join(f"printf '%s\\0' {d}\n" for d in directives))
        out = subprocess.run(["bash", str(probe)], capture_output=True, text=True, cwd=tmp,
                             check=True).stdout
        assert sorted(out.split("\0")[:-1]) == sorted(case.slurm.extra_sbatch)
    proc = run_script(script, bin_dir, tmp, "0", extra_env={"SLURM_ARRAY_TASK_ID": "0"})
    assert proc.returncode == 0, proc.stderr
    (argv, seen), = recorded(calls, "srun" if slurm else "mpirun")
    assert str(case_dir / "case.json") in argv
    for key, value in env.items():
        assert seen[key] == value
    assert not (tmp / MARK).exists() and not (case_dir / "r0" / MARK).exists()


@pytest.mark.parametrize("slurm", [False, True])
def test_the_callers_environment_does_not_steer_the_job_scripts(shell_stubs, slurm):
    """sbatch passes the submitting shell's environment to the job, and `bash run_local.sh`
    runs in the caller's: a FAILED or REPEATS there changes neither the repeats run nor the
    exit status."""
    tmp, bin_dir, calls, python = shell_stubs
    for old in calls.iterdir():
        old.unlink()
    case = Case(device="cpu", repeats=1)
    case_dir = tmp / "cases" / "steer"
    case_dir.mkdir(parents=True, exist_ok=True)
    if slurm:
        text = SlurmExecutor(python=str(python), gpus=False).script(case, "steer",
                                                                    case_dir / "case.json")
    else:
        text = LocalExecutor(python=str(python), mpirun=str(bin_dir / "mpirun"), gpus=0,
                             cpus=2).script(case, "steer", case_dir / "case.json")
    script = case_dir / "script.sh"
    script.write_text(text)
    proc = run_script(script, bin_dir, tmp, extra_env={
        "FAILED": "1", "REPEATS": "5 6", "REPEAT": "7", "SLURM_ARRAY_TASK_ID": "0",
        "TERMINATED": "--terminated", "CASE_DIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    (argv, _), = recorded(calls, "srun" if slurm else "mpirun")
    assert argv[-4:] == ["--run-dir", str(case_dir / "r0"), "--repeat", "0"]


def test_only_submitits_own_lines_are_dropped_from_the_rendered_script():
    """The renderer drops submitit's empty wckey, its USR2 signal and its executor marker; it
    kept dropping the grid's own --signal/--wckey and any env line naming SUBMITIT_EXECUTOR."""
    case = Case(device="cpu", env=(("A", "SUBMITIT_EXECUTOR"), ("SUBMITIT_EXECUTOR", "slurm")),
                slurm=SlurmJobOptions(extra_sbatch=("--signal=B:USR1@60", "--wckey=proj")))
    text = SlurmExecutor(gpus=False).script(case, "c", Path("/r/cases/c/case.json"))
    lines = text.split("\n")
    assert "#SBATCH --signal=B:USR1@60" in lines and "#SBATCH --wckey=proj" in lines
    assert "export A=SUBMITIT_EXECUTOR" in lines
    assert lines.count("export SUBMITIT_EXECUTOR=slurm") == 1  # the grid's, not submitit's
    plain = SlurmExecutor(gpus=False).script(Case(device="cpu"), "c", Path("/r/cases/c/x.json"))
    assert "--signal" not in plain and "--wckey" not in plain and "SUBMITIT" not in plain


@pytest.mark.parametrize("executor", ["local", "slurm"])
def test_dot_dot_in_results_writes_only_into_the_named_directory(tmp_path, executor):
    """`--results nowhere/../res` is res: nothing else appears (mkdir made `nowhere` before)."""
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {device: cpu}\n")
    assert submit.main(["--grid", str(grid), "--results", str(tmp_path / "nowhere/../res"),
                        "--dry-run", "--executor", executor]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.yaml", "res"]
    case_dir = tmp_path / "res" / "cases" / CASE_ID
    assert (case_dir / "case.json").is_file()
    script = case_dir / ("run_local.sh" if executor == "local" else "submission.sh")
    assert ".." not in script.read_text()


@pytest.mark.parametrize("where", ["results", "results/deeper"])
def test_results_under_a_file_is_refused_before_writing(tmp_path, capsys, where):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {device: cpu}\n")
    (tmp_path / "results").write_text("precious\n")
    assert submit.main(["--grid", str(grid), "--results", str(tmp_path / where), "--dry-run",
                        "--executor", "local"]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert (tmp_path / "results").read_text() == "precious\n"
