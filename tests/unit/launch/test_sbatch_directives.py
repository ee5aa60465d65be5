"""`#SBATCH` lines as sbatch itself reads them.

sbatch parses its directives with a tokenizer of its own (a backslash escapes even inside single
quotes, `#` outside quotes starts a comment), then hands them to getopt, which accepts any
unambiguous abbreviation of an option name and takes the next argument as the value of an option
that needs one. These tests run the real `sbatch --test-only -vv` on the generated scripts: with a
`SLURM_CONF` whose controller does not exist, it prints the options it parsed, then fails to reach
the controller; nothing is submitted. For every Slurm-bound field holding a hostile value, the case
is refused naming the key, or sbatch parses exactly the intended options, the value verbatim.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from toolkit import submit
from toolkit.launch.slurm import FLAG_OPTIONS, RESERVED_OPTIONS, SlurmExecutor
from toolkit.spec import Case, CaseError, SlurmJobOptions

CONF = """ClusterName=nowhere
SlurmctldHost=nohost(127.0.0.1)
SlurmctldPort=1
NodeName=n1 CPUs=1 State=UNKNOWN
PartitionName=p Nodes=n1 Default=YES
"""


@pytest.fixture(scope="module")
def sbatch_conf(tmp_path_factory) -> Path:
    if shutil.which("sbatch") is None:
        if os.environ.get("CI"):
            pytest.fail("sbatch is missing: CI must test the job scripts against its parser")
        pytest.skip("sbatch is not installed (Debian: slurm-client)")
    conf = tmp_path_factory.mktemp("slurmconf") / "slurm.conf"
    conf.write_text(CONF)
    return conf


def parsed_options(conf: Path, script: Path) -> dict[str, str] | str:
    """The options sbatch parsed from `script` ({name: value} as `-vv` prints them, without the
    test's own test-only and verbose), or sbatch's error text when it refused the script. sbatch
    is stopped once it has printed them: it would only go on trying to reach the controller."""
    env = dict(os.environ, SLURM_CONF=str(conf))
    for key in [k for k in env if k.startswith("SBATCH_")]:
        del env[key]  # input variables would add options of their own
    proc = subprocess.Popen(["sbatch", "--test-only", "-vv", str(script)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            errors="replace", cwd=script.parent)
    assert proc.stderr is not None
    seen: list[str] = []
    options: dict[str, str] = {}
    inside = done = False
    try:
        for line in proc.stderr:
            seen.append(line)
            if "end of defined options" in line:
                done = True
                break
            if line.startswith("sbatch: defined options"):
                inside = True
            elif inside and " : " in line:
                name, _, value = line.removeprefix("sbatch: ").rstrip("\n").partition(" : ")
                options[name.strip()] = value
    finally:
        proc.kill()
        proc.wait()
    if not done:
        return "".join(seen)
    del options["test-only"], options["verbose"]
    return options


def render(case: Case, tmp: Path) -> Path:
    case_dir = tmp / "cases" / "c"
    case_dir.mkdir(parents=True, exist_ok=True)
    script = case_dir / "submission.sh"
    script.write_text(SlurmExecutor(gpus=False).script(case, "c", case_dir / "case.json"))
    return script


HOSTILE = [
    "a' --hold x", "a\\' --hold x", "x\\", "\\", "a\\nb", "a\r", "a\rb", "\r\n--hold",
    "x --output=/tmp/pwn", "x' --partition=evil '", "'", '"', "\"'\"", "a\" --hold \"b",
    "'\"'\"' --hold", "a # --hold", "#x", "# --hold", " lead", "trail ", "a  b", "a\tb",
    "hetjob", "x hetjob", "packjob", "$(touch PWNED)", "`touch PWNED`", "--hold", "-H",
    "--output=/tmp/pwn", "a=b", "%j %A", "\u2028--hold", "caf\u00e9 \u00a0--hold", "\x85x",
    "a;b&c|d", "~", "*", "!x",
]

#: field -> (how a case sets it, the option sbatch reports it under)
FIELDS = {
    "partition": (lambda v: {"partition": v}, "partition"),
    "account": (lambda v: {"account": v}, "account"),
    "qos": (lambda v: {"qos": v}, "qos"),
    "constraint": (lambda v: {"constraint": v}, "constraint"),
    "extra_sbatch[0]": (lambda v: {"extra_sbatch": (f"--comment={v}",)}, "comment"),
    "extra_sbatch[1]": (lambda v: {"extra_sbatch": ("--hold", f"--mail-user={v}")},
                        "mail-user"),
}


def _case(field: str, value: str, repeats_as: str = "array") -> Case:
    return Case(device="cpu", repeats=2,
                slurm=SlurmJobOptions(repeats_as=repeats_as, **FIELDS[field][0](value)))


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_every_slurm_bound_field_reaches_sbatch_verbatim_or_is_refused(sbatch_conf, tmp_path,
                                                                       field):
    baseline = parsed_options(sbatch_conf, render(_case(field, "SAFE"), tmp_path))
    assert isinstance(baseline, dict), baseline
    option = FIELDS[field][1]
    assert baseline[option] == "SAFE"
    refused = []
    for value in HOSTILE:
        try:
            case = _case(field, value)
        except CaseError as e:
            assert e.key == f"slurm.{field}", (value, e.key)
            refused.append(value)
            continue
        assert [k for k, _ in SlurmExecutor(gpus=False).problems(case) if k != "executor"] == []
        got = parsed_options(sbatch_conf, render(case, tmp_path))
        assert got == {**baseline, option: value}, value
    # what sbatch cannot be handed verbatim is refused, and only that
    assert set(refused) == {v for v in HOSTILE
                            if "\\" in v or any(c < " " or c == "\x7f" for c in v)}


# Options that sbatch would read as one the toolkit sets (abbreviations, short forms), options
# that need a value given none (sbatch would take the next directive as it), and the ones the
# toolkit reads back by their full name.
HOSTILE_OPTIONS = [
    "--outp=/tmp/pwn", "--out=/tmp/pwn", "--erro=/tmp/pwn", "--no-req", "--no-requeue",
    "--requeue", "--arr=5", "--array=5", "--open=truncate", "--output=/tmp/pwn",
    "--error=/tmp/pwn", "--nod=9", "--ntasks=9", "--ntasks-per=9", "--part=evil",
    "--partition=evil", "--acc=evil", "--job=evil", "--job-name=evil", "--ti=1", "--time=1",
    "--cpus-per=9", "--gpus-per-n=9", "--qo=evil", "--constr=evil", "--wra=id", "--pars",
    "--test", "--wai", "--wait", "--comment", "--mail-user", "--begin", "--comm=x", "--ho",
    "-o /tmp/pwn", "-e /tmp/pwn", "-o/tmp/pwn", "-H", "-p evil", "-J evil", "-a 5", "-N 9",
    "-n 9", "-t 1", "-A evil", "-q evil", "-C evil", "-c 9",
]


@pytest.mark.parametrize("opt", HOSTILE_OPTIONS)
def test_extra_sbatch_cannot_give_an_option_the_toolkit_sets(sbatch_conf, tmp_path, opt):
    try:
        case = Case(device="cpu", slurm=SlurmJobOptions(extra_sbatch=("--mem=1G", opt)))
    except CaseError as e:
        assert e.key == "slurm.extra_sbatch[1]"
        return
    problems = SlurmExecutor(gpus=False).problems(case)
    assert [k for k, _ in problems if k != "executor"] == ["slurm.extra_sbatch[1]"], (opt,
                                                                                      problems)
    assert opt.split("=")[0] in dict(problems)["slurm.extra_sbatch[1]"]


@pytest.mark.parametrize("opt", ["--gpus=2", "--comment=x y", "--hold", "--mem=1G",
                                 "--exclude=n1", "--signal=B:USR1@60", *sorted(f"--{f}" for f in
                                                                              FLAG_OPTIONS)])
def test_an_accepted_extra_option_adds_itself_and_nothing_else(sbatch_conf, tmp_path, opt):
    """Every option extra_sbatch accepts, the flags among them, leaves the toolkit's own
    directives as they were (a flag that took a value would swallow the next one)."""
    baseline = parsed_options(sbatch_conf, render(Case(device="cpu"), tmp_path))
    assert isinstance(baseline, dict), baseline
    case = Case(device="cpu", slurm=SlurmJobOptions(extra_sbatch=(opt,)))
    assert [k for k, _ in SlurmExecutor(gpus=False).problems(case) if k != "executor"] == []
    got = parsed_options(sbatch_conf, render(case, tmp_path))
    assert isinstance(got, dict), got
    got.pop("verbose", None)  # --verbose raises the level this test set
    added = set(got) - set(baseline)
    assert {k: v for k, v in got.items() if k in baseline} == baseline, opt
    assert len(added) <= 1, (opt, added)


def test_reserved_options_are_sbatch_long_options(sbatch_conf, tmp_path):
    """Each reserved name is an option sbatch knows in full (not a guess that would let the
    real name through): given in a script, sbatch parses it as itself."""
    script = tmp_path / "s.sh"
    values = {"array": "3", "output": "/tmp/o", "error": "/tmp/e", "open-mode": "append",
              "nodes": "1", "ntasks": "1", "ntasks-per-node": "1", "gpus-per-node": "1",
              "cpus-per-task": "1", "time": "5", "job-name": "j", "partition": "p",
              "account": "a", "qos": "q", "constraint": "c"}
    # not shown by -vv: the ones that print and exit, ours (test-only), and wrap (no script)
    for name in sorted(set(RESERVED_OPTIONS) - {"help", "usage", "version", "test-only",
                                                "wrap"}):
        line = f"--{name}={values[name]}" if name in values else f"--{name}"
        script.write_text(f"#!/bin/bash\n#SBATCH {line}\ntrue\n")
        got = parsed_options(sbatch_conf, script)
        assert isinstance(got, dict) and set(got) - {"verbose"}, (name, got)


def test_a_carriage_return_in_an_env_value_is_refused_for_slurm(sbatch_conf, tmp_path):
    """sbatch refuses a whole script with a carriage return before a line break; an env value
    is the one grid string that reaches the script's body, so the case is refused first."""
    case = Case(device="cpu", env=(("NOTE", "a\r\nb"),))
    problems = dict(SlurmExecutor(gpus=False).problems(case))
    assert "carriage return" in problems["env.NOTE"]
    assert "DOS line breaks" in str(parsed_options(sbatch_conf, render(case, tmp_path)))


def test_a_hostile_results_path_reaches_sbatchs_output_verbatim(sbatch_conf, tmp_path):
    """The results directory is the one Slurm-bound string that is not a grid key: quotes, `#`,
    spaces and `$(...)` reach --output as written, and its `%` as `%%` (Slurm's literal `%`,
    not a replacement symbol such as %j)."""
    root = tmp_path / "res $(touch PWNED) `x` 'q\" # 50%j *"
    case_dir = root / "cases" / "c"
    case_dir.mkdir(parents=True)
    script = case_dir / "submission.sh"
    script.write_text(SlurmExecutor(gpus=False).script(Case(device="cpu", repeats=2), "c",
                                                       case_dir / "case.json"))
    got = parsed_options(sbatch_conf, script)
    assert isinstance(got, dict), got
    assert got["output"] == str(case_dir).replace("%", "%%") + "/slurm-%A_%a.out"
    assert {"hold", "error", "partition"}.isdisjoint(got)


def test_a_results_path_with_a_backslash_is_refused_before_anything_is_written(tmp_path,
                                                                               capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {device: cpu}\n")
    out = tmp_path / "res\\' --hold x"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run",
                        "--executor", "slurm"]) == 2
    assert "contains a backslash" in capsys.readouterr().err
    assert not out.exists()
