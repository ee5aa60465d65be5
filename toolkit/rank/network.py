"""The network interface a rank's communication uses, taken from its node as on a real cluster.

Before MPI starts (Open MPI reads its settings at MPI_Init) and before a framework opens its
communicator, a rank of a multi-node case finds the interface its node reaches rank 0's node
through (the kernel's route to the rendezvous address) and sets, where nobody else did,

- `NCCL_SOCKET_IFNAME` (NCCL's bootstrap and socket transport),
- `GLOO_SOCKET_IFNAME` (torch's gloo, the CPU backend),
- `OMPI_MCA_btl_tcp_if_include` (Open MPI's TCP transport between ranks),

to that interface, never to loopback: a loopback route means rank 0's address is this host's
own and says nothing about the link to the other nodes, and then nothing is set. What the grid
or the site set (the case's `env`, already in the environment) and what the job's environment
carries win; the record says which interface was found, which variables were set and which were
left as they were. One node: nothing to choose, nothing set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Any

from toolkit.rank.discovery import master_address

NETWORK_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include")

LOOPBACK_PREFIXES = ("lo",)


def network_environment(num_nodes: int, env: Mapping[str, str],
                        ifname: str | None) -> dict[str, Any]:
    """What to set, given the interface found (pure): `{"interface", "env_applied",
    "env_kept", "reason"}`."""
    if num_nodes <= 1:
        return {"interface": None, "env_applied": {}, "env_kept": {},
                "reason": "one node: no link between nodes to choose"}
    kept = {k: env[k] for k in NETWORK_VARIABLES if env.get(k)}
    if ifname is None:
        return {"interface": None, "env_applied": {}, "env_kept": kept,
                "reason": "no route to rank 0's node was found"}
    if ifname.startswith(LOOPBACK_PREFIXES):
        return {"interface": ifname, "env_applied": {}, "env_kept": kept,
                "reason": f"rank 0's address is reached through {ifname}: loopback is never "
                          "set"}
    applied = {k: ifname for k in NETWORK_VARIABLES if k not in kept}
    return {"interface": ifname, "env_applied": applied, "env_kept": kept, "reason": None}


def apply_network_environment(num_nodes: int,
                              environ: MutableMapping[str, str] | None = None) -> dict[str, Any]:
    """Find this node's interface to rank 0's node and set the variables in `environ`
    (default: this process's); returns the record for the run's metadata."""
    environ = os.environ if environ is None else environ
    ifname = target = None
    if num_nodes > 1:  # one node: no name to resolve, no route to ask for
        from topology import socket_ifname_for

        target = master_address(environ)
        ifname = socket_ifname_for(target)
    record = network_environment(num_nodes, environ, ifname)
    environ.update(record["env_applied"])
    record["rank0_address"] = target
    return record


SIOCETHTOOL = 0x8946
ETHTOOL_GSET = 1


def interface_speed_mbps(ifname: str | None) -> int | None:
    """The link speed of `ifname` in Mbit/s as its driver reports it (ethtool's `Speed`), asked
    through a socket, so it is the interface of this process's network namespace; None where
    the driver reports none (loopback, a link that is down) or the name is unknown."""
    import array
    import fcntl
    import socket
    import struct

    if not ifname:
        return None
    # struct ethtool_cmd: cmd, supported, advertising (u32), speed (u16) at byte 12, duplex,
    # port, phy_address, transceiver, autoneg, mdio_support (u8), maxtxpkt, maxrxpkt (u32),
    # speed_hi (u16) at byte 28; 44 bytes
    data = array.array("B", struct.pack("I", ETHTOOL_GSET) + bytes(40))
    try:
        ifreq = struct.pack("16sP", ifname.encode()[:15], data.buffer_info()[0])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifreq)
        raw = data.tobytes()
    except OSError:
        return None
    speed = struct.unpack_from("H", raw, 12)[0] | (struct.unpack_from("H", raw, 28)[0] << 16)
    return speed if 0 < speed < 0xFFFFFFFF else None
