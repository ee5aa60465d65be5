"""`benchmarks/gpu_scaling.py` gets a few runs on a two-GPU machine: its grids must be valid, hold
each workload on one GPU and on two at the defaults (what the table claims to measure), profile
every rank, and its table must compute speedups and ratios from runs.csv as collect writes it."""

from __future__ import annotations

import pytest

from tests.unit.workloads.conftest import benchmark_module
from toolkit.spec import DeviceKind
from toolkit.spec.grid import parse_grid


def _ok_runs(*tputs):
    """runs.csv rows of compiled runs that ended ok, at these throughputs."""
    return [{"status": "ok", "throughput_sps": str(t), "compile": "compiled"} for t in tputs]


@pytest.fixture(scope="module")
def scaling():
    yield from benchmark_module("gpu_scaling")


@pytest.mark.parametrize("part", ["dp", "gpt"])
@pytest.mark.parametrize("smoke", [False, True])
def test_grids_hold_one_and_two_gpu_cases_at_the_defaults(scaling, part, smoke):
    items = scaling.pairs(part)
    cases = dict(parse_grid(scaling.grid_text(part, items, smoke), source="g.yaml").items())
    for case in cases.values():
        assert case.repeats == 2 and case.compile is None and case.cuda_graphs is None
        assert case.compiled_ddp is None
        assert case.profile.ranks == tuple(range(case.world_size)) and case.profile.steps == 3
        assert case.device is (DeviceKind.CPU if smoke else DeviceKind.AUTO)
    two = {n: c for n, c in cases.items() if n.endswith("-2g")}
    assert all(c.world_size == 2 for c in two.values())
    if part == "gpt" and not smoke:
        assert (two["gpt-tp-2g"].parallel.tp, two["gpt-pp-2g"].parallel.pp) == (2, 2)
        assert two["gpt-pp-2g"].accumulation_steps == 16
        assert cases["gpt-pp-1g"].batch_size_per_device == 128  # the same global batch


def test_a_variant_changes_the_two_gpu_case_only(scaling):
    items = scaling.with_variants(scaling.pairs("dp")[:1], ["compiled_ddp=bucket_graphs"])
    base, variant = items
    assert variant.one is None and variant.one_of == base.name
    assert variant.many == {**base.many, "compiled_ddp": "bucket_graphs"}
    cases = dict(parse_grid(scaling.grid_text("dp", items, False, repeats=1),
                            source="g.yaml").items())
    assert sorted(cases) == ["rn50-1g", "rn50-2g", "rn50-compiled-ddp-bucket-graphs-2g"]
    assert cases["rn50-compiled-ddp-bucket-graphs-2g"].compiled_ddp.value == "bucket_graphs"


def test_the_table_gives_speedups_per_gpu_and_the_ratio_to_the_plain_script(scaling):
    items = scaling.with_variants(scaling.pairs("dp")[:1], ["compiled_ddp=bucket_graphs"])
    base, variant = items

    base.result["one"] = scaling.figures(_ok_runs(5756.6, 5754.5))
    base.result["many"] = scaling.figures(_ok_runs(11247.5, 11249.2))
    variant.result["many"] = scaling.figures(_ok_runs(11121.7, 11133.1))
    base.result["plain"] = {"1": {"bare_throughput_sps": 5000.0},
                            "2": {"bare_throughput_sps": 9900.0}}
    text = scaling.table(items, "test")
    row, other = (line for line in text.splitlines() if line.startswith("| ResNet50"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[1] == "5,755.6" and cells[2] == "11,248.4 (11,247.5, 11,249.2)"
    assert cells[3] == "0.0%" and cells[4] == "1.954" and cells[5] == "0.977"
    assert cells[6] == "5,000.0 -> 9,900.0" and cells[7] == "1.980"
    assert cells[8] == "0.987"  # 1.954 / 1.980
    assert cells[10] == "**no**"  # target 1.97
    other_cells = [c.strip() for c in other.split("|")[1:-1]]
    assert other_cells[1] == "5,755.6" and other_cells[4] == "1.933"


def test_a_variant_that_does_not_fit_a_pair_is_left_out_there(scaling):
    items = scaling.with_variants(scaling.pairs("gpt"), ["sequence_parallel=true"])
    assert [p.name for p in items] == ["gpt-dp", "gpt-tp", "gpt-tp-sequence-parallel-True",
                                       "gpt-pp"]
    variant = items[2]
    assert variant.one_of == "gpt-dp" and variant.many["sequence_parallel"] is True


def test_the_tp_and_pp_rows_run_plain_parallel_scripts_of_the_same_work(scaling):
    by_name = {p.name: p for p in scaling.pairs("gpt")}
    tp, pp = by_name["gpt-tp"], by_name["gpt-pp"]
    # tp: the plain tensor-parallel script on two ranks at the toolkit row's micro-batch, against
    # the DDP row's one-rank plain script (the toolkit's tp row is against its one-GPU case)
    assert scaling.plain_commands(tp) == [
        (2, ["bare_gpt_parallel.py", "--compile", "--tp", "2", "--micro-batch", "16",
             "--warmup", "8", "--iters", "16"])]
    assert tp.many["parallel"]["micro_batch_size"] == 16
    # pp: 16 micro-batches of 8 on two stages, one rank at the same global batch of 128
    (one, one_cmd), (two, two_cmd) = scaling.plain_commands(pp)
    assert (one, two) == (1, 2)
    assert one_cmd[one_cmd.index("--micro-batch") + 1] == "16"
    assert one_cmd[one_cmd.index("--micro-batches") + 1] == "8"
    assert two_cmd[two_cmd.index("--pp") + 1] == "2"
    assert (two_cmd[two_cmd.index("--micro-batch") + 1],
            two_cmd[two_cmd.index("--micro-batches") + 1]) == ("8", "16")
    assert pp.one["batch_size_per_device"] == pp.many["batch_size_per_device"] == 128
    assert pp.many["parallel"]["micro_batch_size"] == 8


def test_only_keeps_a_baseline_for_its_one_gpu_case_and_one_rank_plain_run(scaling):
    items = scaling.select(scaling.pairs("gpt"), "gpt-tp")
    assert [(p.name, p.baseline_only) for p in items] == [("gpt-dp", True), ("gpt-tp", False)]
    assert scaling.plain_commands(items[0]) == [(1, scaling.pairs("gpt")[0].plain)]
    cases = dict(parse_grid(scaling.grid_text("gpt", items, False), source="g.yaml").items())
    assert sorted(cases) == ["gpt-dp-1g", "gpt-tp-2g"]
    plan = scaling.plan(items, smoke=False, no_plain=False)
    assert "gpt-dp, 1 rank(s): bare_gpt.py" in plan and "gpt-dp, 2 rank(s)" not in plan
    assert "gpt-tp, 2 rank(s): bare_gpt_parallel.py --compile --tp 2" in plan
    with pytest.raises(SystemExit, match="no row gpt-xx"):
        scaling.select(scaling.pairs("gpt"), "gpt-xx")


def test_the_tp_and_pp_rows_get_their_plain_speedups_and_ratios(scaling):
    items = scaling.select(scaling.pairs("gpt"), "gpt-tp,gpt-pp")
    dp, tp, pp = items

    dp.result["one"] = scaling.figures(_ok_runs(65.0, 65.0))
    tp.result["many"] = scaling.figures(_ok_runs(91.0, 91.0))
    pp.result["one"] = scaling.figures(_ok_runs(66.0, 66.0))
    pp.result["many"] = scaling.figures(_ok_runs(118.8, 118.8))
    dp.result["plain"] = {"1": {"bare_throughput_sps": 64.0}}
    tp.result["plain"] = {"2": {"bare_throughput_sps": 96.0}}
    pp.result["plain"] = {"1": {"bare_throughput_sps": 64.0},
                          "2": {"bare_throughput_sps": 112.0}}
    text = scaling.table(items, "test")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in text.splitlines() if line.startswith("| GPT")}
    assert sorted(rows) == ["GPT pp = 2, 1F1B, 16 micro-batches of 8",
                            "GPT tp = 2 (dp 1), mb 16"]  # no row for the baseline alone
    tp_row, pp_row = rows["GPT tp = 2 (dp 1), mb 16"], rows[
        "GPT pp = 2, 1F1B, 16 micro-batches of 8"]
    assert tp_row[1] == "65.0" and tp_row[4] == "1.400" and tp_row[6] == "64.0 -> 96.0"
    assert tp_row[7] == "1.500" and tp_row[8] == "0.933"  # 1.400 / 1.500
    assert pp_row[4] == "1.800" and pp_row[6] == "64.0 -> 112.0" and pp_row[7] == "1.750"
    assert pp_row[8] == "1.029"  # 1.800 / 1.750
    assert "- gpt-pp, 2 rank(s): `bare_gpt_parallel.py --compile --pp 2" in text


@pytest.mark.parametrize("gpus", [4, 8])
def test_gpus_sets_every_n_gpu_case_and_n_rank_plain_run(scaling, gpus):
    items = scaling.pairs("gpt", gpus)
    cases = dict(parse_grid(scaling.grid_text("gpt", items, False), source="g.yaml").items())
    assert sorted(n for n in cases if not n.endswith("-1g")) == [
        f"gpt-dp-{gpus}g", f"gpt-pp-{gpus}g", f"gpt-tp-{gpus}g"]
    many = {n: c for n, c in cases.items() if not n.endswith("-1g")}
    assert all(c.world_size == gpus for c in many.values())
    assert all(c.profile.ranks == tuple(range(gpus)) for c in many.values())
    assert many[f"gpt-tp-{gpus}g"].parallel.tp == many[f"gpt-pp-{gpus}g"].parallel.pp == gpus
    assert all(c.world_size == 1 for n, c in cases.items() if n.endswith("-1g"))
    by_name = {p.name: p for p in items}
    assert scaling.plain_commands(by_name["gpt-dp"]) == [(1, by_name["gpt-dp"].plain),
                                                       (gpus, by_name["gpt-dp"].plain)]
    tp_cmd = scaling.plain_commands(by_name["gpt-tp"])[0]
    assert tp_cmd[0] == gpus and tp_cmd[1][tp_cmd[1].index("--tp") + 1] == str(gpus)
    # a variant's case has the same size; the plan says so
    dp = scaling.with_variants(scaling.pairs("dp", gpus)[:1], ["grad_reduce=bf16"])
    assert [p.gpus for p in dp] == [gpus, gpus]
    plan = scaling.plan(dp, smoke=False, no_plain=False)
    assert f"rn50-grad-reduce-bf16-{gpus}g: {gpus} GPU(s)" in plan
    assert f"rn50, {gpus} rank(s): bare_resnet50.py" in plan


def test_targets_follow_the_machine_size(scaling):
    def targets(gpus):
        return {p.name: p.target_speedup for p in scaling.pairs("dp", gpus)
                + scaling.pairs("gpt", gpus) if p.target_speedup is not None}

    assert targets(2) == {"rn50": 1.97, "bert": 1.90, "gpt-dp": 1.95}
    assert targets(4) == {"rn50": 3.92, "bert": 3.80, "gpt-dp": 3.85}
    assert targets(8) == {}  # none set: the table leaves "met" empty


def test_the_table_at_four_gpus_divides_by_four_and_names_the_size(scaling):
    (bert,) = scaling.select(scaling.pairs("dp", 4), "bert")
    bert.result["one"] = scaling.figures(_ok_runs(4375.4, 4375.4))
    bert.result["many"] = scaling.figures(_ok_runs(16098.3, 16100.9))
    bert.result["plain"] = {"1": {"bare_throughput_sps": 4298.0},
                            "4": {"bare_throughput_sps": 9344.8}}
    text = scaling.table([bert], "test")
    assert "| toolkit 4 GPUs (repeats) |" in text and "| plain 1 -> 4 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| BERT"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[4] == "3.680" and cells[5] == "0.920"  # 16,099.6 / 4,375.4; / 4
    assert cells[6] == "4,298.0 -> 9,344.8" and cells[7] == "2.174"
    assert cells[9] == ">= 3.80x" and cells[10] == "**no**"
    assert "- bert, 4 rank(s): `bare_bert.py" in text
    skipped = scaling.table([bert], "test", plain_ran=False)
    assert "- none in this call" in skipped and "rank(s): `bare_bert.py" not in skipped


def test_gpus_takes_two_four_or_eight_and_refuses_a_machine_with_fewer(scaling, monkeypatch,
                                                                      capsys):
    with pytest.raises(SystemExit):
        scaling.main(["--part", "dp", "--gpus", "3", "--plan"])
    assert "invalid choice: 3" in capsys.readouterr().err
    assert scaling.main(["--part", "dp", "--gpus", "4", "--plan"]) == 0
    assert "bert-4g: 4 GPU(s)" in capsys.readouterr().out
    monkeypatch.setattr(scaling, "gpus_missing", lambda gpus: "this machine has 2 CUDA device(s)")
    with pytest.raises(SystemExit, match="--gpus 4: this machine has 2 CUDA device"):
        scaling.main(["--part", "dp", "--gpus", "4", "--out", "unused"])


def test_an_env_variant_adds_a_variable_and_keeps_nvlink_multicast_off(scaling):
    items = scaling.with_variants(scaling.select(scaling.pairs("dp", 4), "bert"),
                                  ["env.NCCL_MIN_NCHANNELS=32,env.NCCL_NTHREADS=512"])
    variant = items[1]
    assert variant.name == "bert-env.NCCL-MIN-NCHANNELS-32-env.NCCL-NTHREADS-512"
    assert variant.many["env"] == {"NCCL_MIN_NCHANNELS": "32", "NCCL_NTHREADS": "512"}
    cases = dict(parse_grid(scaling.grid_text("dp", items, False), source="g.yaml").items())
    off = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1"}
    for case in cases.values():  # every case, the variant too, runs with multicast off
        assert off.items() <= dict(case.env).items()
    assert dict(cases[variant.name + "-4g"].env)["NCCL_MIN_NCHANNELS"] == "32"
    assert "NCCL_MIN_NCHANNELS" not in dict(cases["bert-4g"].env)
    with pytest.raises(SystemExit, match=r"NCCL_NVLS_ENABLE stays as gpu\.sh sets it"):
        scaling.with_variants(items[:1], ["env.NCCL_NVLS_ENABLE=1"])


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_every_matrix_layout_runs_its_one_gpu_cases_global_batch(scaling, gpus):
    """Each layout of the GPT matrix does the one-GPU case's work per step: a global batch of
    16 without a pipeline, 256 with one; its N-GPU case is valid and uses every GPU."""
    items = scaling.matrix(gpus)
    cases = dict(parse_grid(scaling.grid_text("matrix", items, False, repeats=1),
                            source="g.yaml").items())
    assert cases["dp-1g"].batch_size_per_device == 16
    assert cases["pp-1g"].batch_size_per_device == 256
    assert cases["pp-1g"].accumulation_steps == 16
    for p in items:
        case = cases[f"{p.name}-{gpus}g"]
        dp, tp, pp = scaling.layout_of(p)
        assert (case.dp, case.parallel.tp, case.parallel.pp) == (dp, tp, pp)
        assert case.world_size == gpus
        one = cases["pp-1g" if pp > 1 else "dp-1g"]
        assert case.batch_size_per_device * dp == one.batch_size_per_device
    names = {p.name for p in items}
    assert {"dp", "tp", "pp", "pp-int"} <= names
    assert ({"2d-2x2", "dp-pp", "tp-pp"} <= names) == (gpus == 4)
    assert ({"2d-2x4", "2d-4x2"} <= names) == (gpus == 8)
    assert cases[f"pp-int-{gpus}g"].pipeline_schedule.value == "interleaved_1f1b"
    assert cases[f"pp-{gpus}g"].accumulation_steps == 32


def test_the_matrix_smoke_grid_keeps_the_batches_and_runs_on_cpu(scaling):
    cases = dict(parse_grid(scaling.grid_text("matrix", scaling.matrix(4), True, repeats=1),
                            source="g.yaml").items())
    assert all(c.device is DeviceKind.CPU for c in cases.values())
    assert cases["pp-4g"].accumulation_steps == 32 and cases["tp-4g"].parallel.tp == 4
    assert cases["pp-int-4g"].model_config.num_layers == 8  # two stages a rank at pp 4


def test_layouts_over_dp_stand_beside_the_seeds_ratios(scaling):
    items = scaling.matrix(4)
    by = {p.name: p for p in items}
    by["dp"].result["many"] = scaling.figures(_ok_runs(200.4))
    by["tp"].result["many"] = scaling.figures(_ok_runs(130.3))
    by["2d-2x2"].result["many"] = scaling.figures(_ok_runs(122.5))
    text = scaling.over_dp(items)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| GPT")}
    tp = next(v for k, v in rows.items() if "1x4x1" in k)
    two_d = next(v for k, v in rows.items() if "2x2x1" in k)
    assert tp == ["0.650", "0.65", ">= 0.65", "yes"]  # 130.3 / 200.4
    assert two_d == ["0.611", "0.77", ">= 0.77", "**no**"]
    assert not any("1x1x4" in k for k in rows)  # a pipeline runs another global batch


def test_nodes_plans_each_dp_row_at_one_gpu_and_over_namespaced_nodes(scaling, capsys,
                                                                      tmp_path):
    assert scaling.node_shapes(4, 4) == [(1, 1), (1, 4), (2, 2), (4, 1)]
    assert scaling.node_shapes(4, 2) == [(1, 1), (1, 4), (2, 2)]
    assert scaling.node_shapes(8, 3) == [(1, 1), (1, 8), (2, 4)]  # 3 nodes cannot share 8 GPUs
    items = scaling.pairs("dp", 4)
    cases = scaling.node_cases(items, 4, 4, smoke=False)
    assert [c["name"] for c in cases if c["name"].startswith("bert")] == [
        "bert-1n1g", "bert-1n4g", "bert-2n2g", "bert-4n1g"]
    two = next(c for c in cases if c["name"] == "rn50-2n2g")
    assert (two["num_nodes"], two["gpus_per_node"], two["profile"]["ranks"]) == (2, 2, [0, 1, 2, 3])
    assert scaling.main(["--part", "dp", "--gpus", "4", "--nodes", "4", "--plan",
                         "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rn50-4n1g: 4 node(s) x 1 GPU(s)" in out and "--executor slurm" in out
    grid = dict(parse_grid((tmp_path / "grid-dp-4nodes.yaml").read_text(), source="g.yaml")
                .items())
    assert {(c.num_nodes, c.gpus_per_node) for c in grid.values()} == {(1, 1), (1, 4), (2, 2),
                                                                        (4, 1)}
    assert len(grid) == 8
    with pytest.raises(SystemExit, match="planning only"):
        scaling.main(["--part", "dp", "--gpus", "4", "--nodes", "2"])
