"""A local Slurm cluster on this one machine, booted by the project itself (for tests, CI and
laptops): `python -m toolkit.localslurm up|status|down|env|limit`.

`config` holds the fixed names and the pure builders of slurm.conf and its companions,
`processes` starts, records and stops daemons, `network` puts each node in a network namespace
of its own and throttles its links, `daemons` is the cluster's life (start, stop, faults for
tests), `statedir` decides whether a state directory can be trusted and writes into it,
`accounting` adds MariaDB + slurmdbd, `gpus` gives each node its share of the machine's GPUs
(GRES), `agent` is the ssh that enters a node, `__main__` is the command line.
"""

from toolkit.localslurm.config import ClusterError, parse_sinfo_nodes, render_slurm_conf
from toolkit.localslurm.daemons import LocalCluster, load_cluster, start_cluster, stop_cluster
from toolkit.localslurm.processes import free_port_base

__all__ = ["ClusterError", "LocalCluster", "free_port_base", "load_cluster",
           "parse_sinfo_nodes", "render_slurm_conf", "start_cluster", "stop_cluster"]
