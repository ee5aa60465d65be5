"""What a rank checks of its MPI world against the case and Slurm's variables."""

from __future__ import annotations

from toolkit.rank.discovery import RankInfo, check_consistency


def _info(world: int) -> RankInfo:
    return RankInfo(rank=0, world_size=world, local_rank=0, local_size=world, node_index=0,
                    num_nodes=1, host="h", hosts=("h",) * world, master_addr="h",
                    master_port=1)


def test_separate_worlds_under_srun_are_caught() -> None:
    """srun without PMI wiring: each task a world of one, Slurm says 2 tasks."""
    problems = check_consistency(_info(1), None, None, {"SLURM_NTASKS": "2",
                                                        "SLURM_STEP_NUM_TASKS": "2"})
    assert problems == ["MPI world size 1 != SLURM_NTASKS 2"]


def test_ranks_of_mpirun_do_not_read_the_daemons_step() -> None:
    """mpirun inside an allocation starts its daemons with an srun step of one task per node;
    its ranks inherit that step's SLURM_NTASKS."""
    env = {"SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert check_consistency(_info(2), 2, 1, env) == []
    assert check_consistency(_info(2), 4, 1, env) == [
        "MPI world size is 2 but the case needs 4 ranks (was the launcher started without PMI "
        "wiring, giving separate worlds?)"]
