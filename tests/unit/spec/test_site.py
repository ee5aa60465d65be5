"""Site profiles: reading and checking one, the layer it puts beneath a grid, and that where a
case runs never changes its id or its config hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.spec.convert import SCRIPT_VARIABLES, SHELL_VARIABLES
from toolkit.spec.grid import dump_resolved, load_grid, parse_grid
from toolkit.spec.grid_source import GridError
from toolkit.spec.site import SITE_ENV, SITES_DIR, find_site, load_site

GRID = """
name: g
base:
  model: resnet50
  device: cpu
  batch_size_per_device: 4
  slurm: {account: grid-account}
sweep:
  gpus_per_node: [1, 2]
"""


def _site(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_sites_load() -> None:
    names = sorted(p.stem for p in SITES_DIR.glob("*.yaml"))
    assert {"local", "local-mpirun", "nvidia-pyxis-example", "apptainer-example"} <= set(names)
    for name in names:
        site = find_site(name)
        assert site is not None and site.source.endswith(f"{name}.yaml")
    example = find_site("nvidia-pyxis-example")
    assert example is not None
    assert example.options.expected_for("NVIDIA H100 80GB HBM3") == {"gemm_bf16": 700.0,
                                                                      "hbm_copy": 2900.0}
    assert example.options.expected_for("NVIDIA H200") == {}


def test_site_is_a_layer_beneath_the_grid(tmp_path: Path) -> None:
    site = load_site(_site(tmp_path, """
name: c1
slurm: {partition: gpu, account: site-account, launcher: mpirun}
env: {NCCL_SOCKET_IFNAME: "=bond0", SHARED: site}
modules: [cuda/12.4]
gpu_request: gres
"""))
    grid = parse_grid(GRID.replace("slurm: {account: grid-account}",
                                   "slurm: {account: grid-account}\n  env: {SHARED: grid}"),
                      site=site)
    for _, case in grid.items():
        assert case.slurm.partition == "gpu"            # from the site
        assert case.slurm.launcher == "mpirun"          # from the site
        assert case.slurm.account == "grid-account"     # the grid's key wins
        assert case.site.name == "c1" and case.site.modules == ("cuda/12.4",)
        assert case.site.gpu_request == "gres"
        assert dict(case.site.env) == {"NCCL_SOCKET_IFNAME": "=bond0", "SHARED": "site"}
        assert dict(case.env) == {"SHARED": "grid"}    # the grid's env stays its own


def test_two_sites_give_the_same_ids_and_hashes(tmp_path: Path) -> None:
    a = load_site(_site(tmp_path, "slurm: {partition: p1, launcher: srun}\n", "a.yaml"))
    b = load_site(_site(tmp_path, """
slurm: {partition: p2, launcher: mpirun, time_min: 5}
env: {NCCL_IB_HCA: mlx5_0}
container: {runtime: apptainer, image: /images/x.sif}
""", "b.yaml"))
    plain = parse_grid(GRID)
    on_a, on_b = parse_grid(GRID, site=a), parse_grid(GRID, site=b)
    assert on_a.case_ids == on_b.case_ids == plain.case_ids
    hashes = {tuple(c.config_hash() for c in g.cases) for g in (plain, on_a, on_b)}
    assert len(hashes) == 1
    assert [c.slurm.partition for c in on_b.cases] == ["p2", "p2"]
    assert on_b.cases[0].container.image == "/images/x.sif"


def test_a_grid_drops_the_sites_container_with_runtime_none(tmp_path: Path) -> None:
    site = load_site(_site(tmp_path, "container: {runtime: pyxis, image: nvcr.io#x/y:1}\n"))
    grid = parse_grid(GRID.replace("slurm: {account: grid-account}",
                                   "container: {runtime: none}"), site=site)
    assert not grid.cases[0].container.enabled
    grid = parse_grid(GRID.replace("slurm: {account: grid-account}",
                                   "container: {mounts: [/data]}"), site=site)
    assert grid.cases[0].container.runtime == "pyxis"
    assert grid.cases[0].container.mounts == ("/data",)


def test_a_grid_cannot_set_the_site_block() -> None:
    with pytest.raises(GridError, match=r"base\.site: set by a site profile"):
        parse_grid(GRID.replace("slurm: {account: grid-account}", "site: {name: x}"))
    with pytest.raises(GridError, match=r"sweep\.site\.name: set by a site profile"):
        parse_grid(GRID + "  site.name: [a, b]\n")


@pytest.mark.parametrize(("text", "key", "expected"), [
    ("partition: gpu\n", "partition", "unknown key"),
    ("queue: gpu\n", "queue", "unknown key; valid keys: name (the site's name"),
    ("slurmm: {partition: gpu}\n", "slurmm", "unknown key (did you mean 'slurm'?) (line 1)"),
    ("slurm: {partiton: gpu}\n", "slurm.partiton", "did you mean"),
    ("slurm: {launcher: ssh}\n", "slurm.launcher", "expected srun or mpirun"),
    ("slurm: {partition: \"a\\nb\"}\n", "slurm.partition", "control characters"),
    ("gpu_request: some\n", "gpu_request", "auto, gpus-per-node, gres, none"),
    ("modules: [\"cuda; rm -rf /\"]\n", "modules[0]", "module name"),
    ("env: {\"1BAD\": x}\n", "env.1BAD", "environment variable name"),
    ("container: {runtime: docker, image: x}\n", "container.runtime", "podman, pyxis"),
    ("container: {runtime: pyxis}\n", "container.image", "needs an image"),
    ("container: {runtime: pyxis, image: \"a b\"}\n", "container.image", "no spaces"),
    ("container: {runtime: pyxis, image: x, mounts: [\"/a,/b\"]}\n", "container.mounts[0]",
     "absolute paths"),
    ("container: {runtime: pyxis, image: x, mounts: [relative]}\n", "container.mounts[0]",
     "absolute"),
    ("container: {runtime: pyxis, image: x, options: [--ntasks=9]}\n", "container.options[0]",
     "--container-"),
    ("container: {runtime: pyxis, image: x, options: [--container-image=y]}\n",
     "container.options[0]", "set from container.image"),
    ("container: {runtime: podman, image: x, options: [--volume=/:/host]}\n",
     "container.options[0]", "set from container.mounts"),
    ("container: {runtime: pyxis, image: x}\nslurm: {launcher: mpirun}\n",
     "container.runtime", "through srun"),
    ("expected: {H100: {gemm_bf16: -1}}\n", "expected.H100.gemm_bf16", "number > 0"),
    ("expected: {H100: {gemm_bf16_tflops: 1}}\n", "expected.H100.gemm_bf16_tflops",
     "gemm_bf16 (TFLOP/s)"),
    ("name: \"../x\"\n", "name", "letters, digits"),
])
def test_bad_site_names_file_key_and_expectation(tmp_path: Path, text: str, key: str,
                                                 expected: str) -> None:
    path = _site(tmp_path, text)
    with pytest.raises(GridError) as info:
        load_site(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert f": {key}: " in message and expected in message, message


def test_site_is_chosen_by_argument_then_environment(tmp_path: Path) -> None:
    path = _site(tmp_path, "name: mine\n")
    assert find_site(None, {}) is None
    assert find_site(None, {SITE_ENV: str(path)}).name == "mine"  # type: ignore[union-attr]
    assert find_site("local", {SITE_ENV: str(path)}).name == "local"  # type: ignore[union-attr]
    with pytest.raises(GridError, match=r"no site of that name.*local-mpirun"):
        find_site("no-such-site", {})


def test_resolved_grid_keeps_its_site(tmp_path: Path) -> None:
    """The grid written next to the results, loaded again, runs on the site it was written
    with; another --site replaces it."""
    site = find_site("local-mpirun")
    grid = parse_grid(GRID, site=site)
    written = tmp_path / "grid.yaml"
    written.write_text(dump_resolved(grid))
    again = load_grid(written)
    assert [c.slurm.partition for c in again.cases] == ["urgent", "urgent"]
    assert again.cases[0].site.name == "local-mpirun"
    other = load_grid(written, site=find_site("local"))
    assert [c.slurm.launcher for c in other.cases] == ["srun", "srun"]


def test_a_cases_preflight_is_judged_for_the_site_it_ran_on(tmp_path: Path) -> None:
    """`preflight verdict` of a job's preflight reads the case's site from case.json; --site
    names another; a standalone preflight has none."""
    from toolkit.results.layout import CaseDir
    from toolkit.results.preflight import site_of

    [(cid, case)] = parse_grid(GRID.replace("[1, 2]", "[1]"),
                               site=find_site("nvidia-pyxis-example")).items()
    cdir = CaseDir(tmp_path, cid)
    cdir.write_case(case)
    tag = cdir.path / "preflight" / "20261124T000000Z-1"
    tag.mkdir(parents=True)
    assert site_of(tag, None).expected_for("NVIDIA H100 80GB HBM3")["gemm_bf16"] == 700.0
    assert site_of(tag, "local").expected_for("NVIDIA H100 80GB HBM3") == {}
    alone = tmp_path / "preflight" / "20261124T000000Z-2"
    alone.mkdir(parents=True)
    assert site_of(alone, None).expected == ()


@pytest.mark.parametrize("name", [*sorted(SCRIPT_VARIABLES | SHELL_VARIABLES), "SLURM_PROCID",
                                  "SLURM_CPUS_PER_TASK", "SRUN_CPUS_PER_TASK"])
def test_a_site_env_obeys_the_grid_envs_reserved_names(tmp_path: Path, name: str) -> None:
    """A site's `env` reaches the same job scripts as a grid's: the same names are refused."""
    with pytest.raises(GridError) as grid_info:
        parse_grid(GRID.replace("  slurm: {account: grid-account}",
                                "  slurm: {account: grid-account}\n  env: {" + name + ": x}"))
    assert f"env.{name}: cannot be set by a grid" in str(grid_info.value)
    path = _site(tmp_path, f"env: {{{name}: x}}\n")
    with pytest.raises(GridError) as site_info:
        load_site(path)
    assert f"{path}: env.{name}: cannot be set by a site" in str(site_info.value)
    # what the names are refused for is said the same way for both
    grid_why = str(grid_info.value).split(": cannot be set by a grid: ")[1]
    site_why = str(site_info.value).split(": cannot be set by a site: ")[1]
    assert grid_why.split(" (")[0] == site_why.split(" (")[0]


@pytest.mark.parametrize("name", ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                  "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
                                  "TRAINBENCH_CONTAINER_IMAGE", "TRAINBENCH_REPORT_FILE",
                                  "PATH", "PYTHONPATH", "RUN_DIR", "SLURM_PROCID"])
def test_a_container_env_that_names_a_reserved_variable_is_refused(
        tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A container's `env` passes host variables in by name: one the toolkit sets for the rank
    (or a grid's `env` may not set) is an error naming the file, the key and the name, from a
    site and from a grid, and `submit` writes and submits nothing."""
    from toolkit.submit import main as submit

    path = _site(tmp_path, "container: {runtime: pyxis, image: nvcr.io#x/y:1, env: "
                           f"[NCCL_IB_HCA, {name}]}}\n")
    with pytest.raises(GridError) as site_info:
        load_site(path)
    assert (f"{path}: container.env[1]: {name!r} is a reserved name and cannot be passed into "
            "the container: ") in str(site_info.value)
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID.replace("  slurm: {account: grid-account}",
                                 "  container: {runtime: podman, image: localhost/x:1, env: "
                                 f"[{name}]}}"))
    with pytest.raises(GridError) as grid_info:
        load_grid(grid)
    assert (f"{grid}: base.container.env[0]: {name!r} is a reserved name and cannot be passed "
            "into the container: ") in str(grid_info.value)
    results = tmp_path / "results"
    assert submit(["--grid", str(grid), "--results", str(results)]) == 2
    assert f"{name!r} is a reserved name" in capsys.readouterr().err
    assert not results.exists()
