"""The local cluster's network: every node in a network namespace of its own, on a bridge, so
what one node sends another crosses a link that can be throttled.

Shape (names carry the cluster's slurmctld port, so two clusters on one machine never share one):

    host:   bridge tb<port>br, address <subnet>.254, the controller's address
    node K: namespace tb<port>-nodeK, interface eth0 at <subnet>.K (peer tb<port>n<K> on the
            bridge), default route through the bridge, a hosts file naming every node and a
            resolv.conf naming no server (both in the state directory, bound over /etc for the
            node's processes), its own hostname (slurmd starts in a UTS namespace of its own)

A throttle is tc's `htb`: `NODE=RATE` shapes everything the node sends (inside its namespace)
and everything it receives (on its bridge port); `NODE-NODE=RATE` shapes only what either node
sends to the other, so every other pair of nodes keeps its speed.

Everything `create` makes is listed in the cluster's record before it is made, and carries the
record's mark (the state directory and a token of that `up`) as its alias: the bridge, each
bridge port and each namespace's loopback. Names come from the port base alone, so a stale record
names what another cluster on the same port base made; `remove`, and the ending of processes in
a node's namespace, touch only what carries the record's own mark, and nothing of a record
without one. The builders here
are pure (argv lists and file texts); `run` is the one place a command is executed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import secrets
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import re2

from toolkit.localslurm.config import ClusterError

#: Where the bridges' subnets are taken from: the first /24 of it that no address or route of
#: this machine touches.
SUBNET_POOL = "10.217.0.0/16"

NODE_INTERFACE = "eth0"

REMOVE_RETRY_S = 5.0

#: tc's rate units (tc(8), "RATES"): bits or bytes per second, decimal or binary prefixes.
_RATE = re2.compile(r"^([0-9]+(?:\.[0-9]+)?)((?:[kmgt]i?)?(?:bit|bps))$")
_RATE_BITS = {"bit": 1, "bps": 8}
#: tc keeps a rate in bytes per second: below one byte a second it reads as none ("rate is
#: required"); above a terabit no link here carries it.
MIN_RATE_BITS = 8.0
MAX_RATE_BITS = 1e12
_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
           "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def rate_bits_per_s(rate: str) -> float:
    """A tc rate (`20mbit`, `1gbit`, `500kbps`) in bits per second; ValueError naming the rate
    and the accepted form otherwise."""
    m = _RATE.match(rate.strip().lower())
    if m is None:
        raise ValueError(f"rate {rate!r}: expected a number and a tc unit, e.g. 20mbit, "
                         "1gbit, 500kbps (bit or bps, with k, m, g, t or ki, mi, gi, ti)")
    unit = m.group(2)
    prefix, base = unit[:-3] if unit.endswith(("bit", "bps")) else "", unit[-3:]
    value = float(m.group(1)) * _PREFIX[prefix] * _RATE_BITS[base]
    if not MIN_RATE_BITS <= value <= MAX_RATE_BITS:
        raise ValueError(f"rate {rate!r}: must lie within 8bit..1tbit, what tc shapes")
    return value


@dataclasses.dataclass(frozen=True)
class Throttle:
    """One `--throttle`: a node's link (`nodes` of one name) or the link between two nodes."""

    nodes: tuple[str, ...]
    rate: str

    @property
    def label(self) -> str:
        return "-".join(self.nodes)

    def to_json(self) -> dict[str, object]:
        return {"nodes": list(self.nodes), "rate": self.rate}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Throttle:
        nodes = data["nodes"]
        assert isinstance(nodes, list)
        return cls(tuple(str(n) for n in nodes), str(data["rate"]))


def parse_throttle(text: str, nodes: Sequence[str]) -> Throttle:
    """`NODE=RATE` or `NODE-NODE=RATE` (RATE as tc writes it) against the cluster's nodes;
    ValueError saying what was expected."""
    target, sep, rate = text.partition("=")
    if not sep or not target or not rate:
        raise ValueError(f"--throttle {text!r}: expected NODE=RATE or NODE-NODE=RATE, "
                         "e.g. node3=20mbit or node1-node2=50mbit")
    names = tuple(n.strip() for n in target.split("-"))
    if len(names) > 2:
        raise ValueError(f"--throttle {text!r}: at most two nodes (a link), got {len(names)}")
    unknown = [n for n in names if n not in nodes]
    if unknown:
        raise ValueError(f"--throttle {text!r}: no node {', '.join(unknown)} in this cluster "
                         f"(nodes: {', '.join(nodes)})")
    if len(names) == 2 and names[0] == names[1]:
        raise ValueError(f"--throttle {text!r}: a link needs two different nodes")
    rate_bits_per_s(rate)
    return Throttle(names, rate.strip().lower())


def parse_throttles(texts: Sequence[str], nodes: Sequence[str]) -> list[Throttle]:
    """Every `--throttle` (`parse_throttle`); ValueError when two shape the same node or the same
    link (`node1-node2` and `node2-node1` are one link): which one was meant cannot be told."""
    out: list[Throttle] = []
    seen: dict[frozenset[str], str] = {}
    for text in texts:
        t = parse_throttle(text, nodes)
        key = frozenset(t.nodes)
        if key in seen:
            raise ValueError(f"--throttle {text!r}: {t.label} is already limited by "
                             f"--throttle {seen[key]!r}; give each node and link one rate")
        seen[key] = text
        out.append(t)
    return out


@dataclasses.dataclass(frozen=True)
class NodeLink:
    node: str
    namespace: str
    host_interface: str
    """The veth end on the bridge (the node's end is NODE_INTERFACE in its namespace)."""
    address: str


@dataclasses.dataclass(frozen=True)
class Network:
    """The namespaces, links and rules of one cluster, as recorded in its state."""

    bridge: str
    subnet: str
    gateway: str
    """The bridge's own address: the controller, as the nodes reach it."""
    nodes: tuple[NodeLink, ...]
    throttles: tuple[Throttle, ...] = ()
    mark: str = ""
    """The alias of everything `create` made (`new_mark`); empty in a record made before
    networks were marked, whose pieces are then never removed."""

    def node(self, name: str) -> NodeLink:
        for link in self.nodes:
            if link.node == name:
                return link
        raise ClusterError(f"no node {name} in the cluster's network")

    def address(self, name: str) -> str:
        return self.node(name).address

    def limits(self, name: str) -> list[str]:
        """What limits this node's traffic, in words (`status`): its own rate, its links'."""
        out = []
        for t in self.throttles:
            if t.nodes == (name,):
                out.append(t.rate)
            elif name in t.nodes:
                other = t.nodes[1] if t.nodes[0] == name else t.nodes[0]
                out.append(f"{t.rate} to {other}")
        return out

    def to_json(self) -> dict[str, object]:
        return {"bridge": self.bridge, "subnet": self.subnet, "gateway": self.gateway,
                "nodes": [dataclasses.asdict(n) for n in self.nodes],
                "throttles": [t.to_json() for t in self.throttles], "mark": self.mark}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Network:
        nodes = data["nodes"]
        throttles = data.get("throttles") or []
        assert isinstance(nodes, list) and isinstance(throttles, list)
        return cls(str(data["bridge"]), str(data["subnet"]), str(data["gateway"]),
                   tuple(NodeLink(**n) for n in nodes),
                   tuple(Throttle.from_json(t) for t in throttles), str(data.get("mark") or ""))


def new_mark(state_dir: Path) -> str:
    """What marks one `up`'s network as its own: its state directory and a fresh token (a later
    `up` of the same directory makes another)."""
    return f"trainbench {state_dir} {secrets.token_hex(4)}"


def plan_network(port_base: int, nodes: Sequence[str], subnet: str,
                 throttles: Sequence[Throttle] = (), mark: str = "") -> Network:
    """Names and addresses of a cluster's network (pure). Interface names stay within the
    kernel's 15 characters for any port and up to 99,999 nodes."""
    net = ipaddress.ip_network(subnet)
    hosts = list(net.hosts())
    if len(nodes) > len(hosts) - 1:
        raise ClusterError(f"{len(nodes)} nodes do not fit subnet {subnet}")
    links = tuple(
        NodeLink(node=name, namespace=f"tb{port_base}-{name}",
                 host_interface=f"tb{port_base}n{k}", address=str(hosts[k - 1]))
        for k, name in enumerate(nodes, start=1)
    )
    return Network(bridge=f"tb{port_base}br", subnet=str(net), gateway=str(hosts[-1]),
                   nodes=links, throttles=tuple(throttles), mark=mark)


def free_subnet(used: Iterable[str], pool: str = SUBNET_POOL) -> str:
    """The first /24 of `pool` that overlaps none of the `used` networks (addresses and routes
    of this machine, in CIDR form)."""
    taken = []
    for u in used:
        try:
            taken.append(ipaddress.ip_network(u, strict=False))
        except ValueError:
            continue
    for candidate in ipaddress.ip_network(pool).subnets(new_prefix=24):
        if not any(candidate.overlaps(t) for t in taken if t.version == 4):
            return str(candidate)
    raise ClusterError(f"no free /24 left in {pool} for the cluster's bridge")


def parse_ip_networks(text: str) -> list[str]:
    """Every IPv4 network named in `ip -4 -o addr show` or `ip -4 route show` output
    (`10.0.0.5/24`, `default` skipped, a bare address as a /32)."""
    out = []
    for line in text.splitlines():
        for word in line.split():
            if word[:1].isdigit() and ("." in word):
                try:
                    out.append(str(ipaddress.ip_network(word, strict=False)))
                except ValueError:
                    continue
    return out


#: The nodes' resolv.conf: nothing routes beyond the bridge (the machine forwards nothing), so
#: the machine's name server cannot answer a node, and a lookup that reaches DNS (a reverse
#: lookup of an address the hosts file does not name, as PyTorch's c10d makes of every peer)
#: waited for it: 5 s twice, ten seconds of every gloo rendezvous across nodes. With no server
#: named, the resolver asks the node's own 127.0.0.1, where nothing listens: it fails at once.
RESOLV_CONF = ("# Written by toolkit.localslurm: the nodes reach no name server; lookups the "
               "hosts file cannot answer fail at once.\n")


def hosts_file(network: Network, controller_host: str) -> str:
    """/etc/hosts as every node sees it: loopback, the controller, then each node."""
    lines = ["# Written by toolkit.localslurm for this cluster's nodes; removed by down.",
             "127.0.0.1 localhost", f"{network.gateway} {controller_host}"]
    lines += [f"{n.address} {n.node}" for n in network.nodes]
    return "\n".join(lines) + "\n"


def create_commands(network: Network) -> list[list[str]]:
    """`ip` argv lists that make the bridge and every node's namespace and link (pure)."""
    cidr = ipaddress.ip_network(network.subnet).prefixlen
    mark = network.mark
    cmds = [["ip", "link", "add", network.bridge, "type", "bridge"],
            ["ip", "link", "set", network.bridge, "alias", mark],
            ["ip", "addr", "add", f"{network.gateway}/{cidr}", "dev", network.bridge],
            ["ip", "link", "set", network.bridge, "up"]]
    for n in network.nodes:
        ns = n.namespace
        cmds += [
            ["ip", "netns", "add", ns],
            ["ip", "-n", ns, "link", "set", "lo", "alias", mark],
            ["ip", "link", "add", n.host_interface, "type", "veth", "peer", "name",
             NODE_INTERFACE, "netns", ns],
            ["ip", "link", "set", n.host_interface, "alias", mark],
            ["ip", "link", "set", n.host_interface, "master", network.bridge, "up"],
            ["ip", "-n", ns, "addr", "add", f"{n.address}/{cidr}", "dev", NODE_INTERFACE],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            ["ip", "-n", ns, "link", "set", NODE_INTERFACE, "up"],
            ["ip", "-n", ns, "route", "add", "default", "via", network.gateway],
        ]
    return cmds


def throttle_commands(network: Network) -> list[list[str]]:
    """`tc` argv lists for the network's throttles (pure): per shaped node, an htb on its
    interface (what it sends) and, for a node rate, an htb on its bridge port (what it
    receives). What it sends: with a rate of its own, one class 1:1 at that rate holds a
    default class and one class per throttled link (matched by the peer's address, at most the
    slower of the link's and the node's rate), whose assured rates share the node's, so all its
    traffic together stays within it; without one, the link classes sit at the root and other
    traffic goes unshaped."""
    cmds: list[list[str]] = []
    for n in network.nodes:
        own = [t.rate for t in network.throttles if t.nodes == (n.node,)]
        links = [t for t in network.throttles if len(t.nodes) == 2 and n.node in t.nodes]
        if not own and not links:
            continue
        node_rate = own[-1] if own else None
        inside = ["ip", "netns", "exec", n.namespace, "tc"]
        dev = ["dev", NODE_INTERFACE]
        # Without a rate of its own, traffic no link class matches goes to htb's default 0:
        # sent directly, unshaped.
        cmds.append([*inside, "qdisc", "add", *dev, "root", "handle", "1:", "htb", "default",
                     "2" if node_rate else "0"])
        parent = "1:"
        share = ""
        if node_rate:
            parent = "1:1"
            share = f"{max(MIN_RATE_BITS, rate_bits_per_s(node_rate) // (len(links) + 1)):.0f}bit"
            cmds += [[*inside, "class", "add", *dev, "parent", "1:", "classid", "1:1", "htb",
                      "rate", node_rate, "ceil", node_rate],
                     [*inside, "class", "add", *dev, "parent", "1:1", "classid", "1:2", "htb",
                      "rate", share, "ceil", node_rate]]
        for j, t in enumerate(links, start=10):
            peer = t.nodes[1] if t.nodes[0] == n.node else t.nodes[0]
            rate = _slower(t.rate, node_rate) if node_rate else t.rate
            assured = _slower(share, rate) if share else rate
            cmds += [
                [*inside, "class", "add", *dev, "parent", parent, "classid", f"1:{j}", "htb",
                 "rate", assured, "ceil", rate],
                [*inside, "filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1",
                 "u32", "match", "ip", "dst", f"{network.address(peer)}/32", "flowid", f"1:{j}"],
            ]
        if node_rate:
            port = ["dev", n.host_interface]
            cmds += [
                ["tc", "qdisc", "add", *port, "root", "handle", "1:", "htb", "default", "2"],
                ["tc", "class", "add", *port, "parent", "1:", "classid", "1:2", "htb",
                 "rate", node_rate, "ceil", node_rate],
            ]
    return cmds


def clear_throttle_commands(network: Network) -> list[list[str]]:
    """`tc` argv lists that remove every node's shaping, inside its namespace and on its
    bridge port (pure); each fails harmlessly where there is none."""
    cmds = []
    for n in network.nodes:
        cmds += [["ip", "netns", "exec", n.namespace, "tc", "qdisc", "del", "dev",
                  NODE_INTERFACE, "root"],
                 ["tc", "qdisc", "del", "dev", n.host_interface, "root"]]
    return cmds


def _slower(a: str, b: str) -> str:
    return a if rate_bits_per_s(a) <= rate_bits_per_s(b) else b


def remove_commands(network: Network) -> list[list[str]]:
    """argv lists that remove what `create_commands` and `throttle_commands` made (pure):
    each node's bridge port (its veth pair and the rules on it go with it), its namespace,
    then the bridge. Each may fail harmlessly when that piece is already gone."""
    cmds = []
    for n in network.nodes:
        cmds += [["ip", "link", "del", n.host_interface], ["ip", "netns", "del", n.namespace]]
    cmds.append(["ip", "link", "del", network.bridge])
    return cmds


def in_namespace(link: NodeLink, hosts: Path, argv: Sequence[str],
                 resolv: Path | None = None) -> list[str]:
    """argv run as node `link`: in its network namespace, under its own hostname (a UTS
    namespace) and with its own /etc/hosts and, where the machine has one, /etc/resolv.conf
    (`resolv`, RESOLV_CONF; bound over the machine's in a private mount namespace; the rest of
    the file system, /sys and its cgroups included, is the machine's: `ip netns exec` would
    mount a /sys without them, and slurmd needs them). A `resolv` that does not exist (a
    cluster an older toolkit started) is left out. The name and paths travel as arguments,
    never as shell text."""
    return ["nsenter", f"--net=/run/netns/{link.namespace}", "--", "unshare", "--mount",
            "--uts", "--propagation", "private", "--", "sh", "-c",
            'mount --bind "$1" /etc/hosts && '
            '{ [ ! -e "$2" ] || [ ! -e /etc/resolv.conf ] || mount --bind "$2" /etc/resolv.conf; } '
            '&& hostname "$0" && shift 2 && exec "$@"',
            link.node, str(hosts), str(resolv or ""), *argv]


def run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one `ip`/`tc` command; ClusterError with its stderr when it fails and `check`."""
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=30)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def namespaces_work(probe: str) -> str | None:
    """None when this kernel lets us make a network namespace (tried with `probe`, removed at
    once), else the reason in one line."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    made = run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip() or 'no reason given'}"
    run(["ip", "netns", "del", probe], check=False)
    return None


def use_namespaces(mode: str, refused: str | None, throttled: bool) -> bool:
    """Whether the nodes get namespaces of their own (`up --network MODE`), given why the kernel
    refused one (None: it did not) and whether links are to be throttled; ClusterError where
    what was asked for cannot be had. `auto` falls back to loopback nodes, which the caller
    says in one line."""
    if mode == "loopback":
        return False
    if refused is None:
        return True
    if mode == "namespaces" or throttled:
        raise ClusterError(f"nodes on their own network: {refused}")
    return False


def used_networks() -> list[str]:
    """The IPv4 networks of this machine's addresses and routes."""
    text = run(["ip", "-4", "-o", "addr", "show"]).stdout
    text += run(["ip", "-4", "route", "show"]).stdout
    return parse_ip_networks(text)


def create(network: Network) -> None:
    """Make the network and its throttles; on failure, remove what was made and raise."""
    try:
        for argv in create_commands(network):
            run(argv)
        apply_throttles(network)
    except BaseException:
        remove(network)
        raise


def apply_throttles(network: Network) -> None:
    for argv in throttle_commands(network):
        run(argv)


def node_pids(link: NodeLink) -> list[int]:
    """Processes still running in the node's namespace (job steps a stopped slurmd left)."""
    out = run(["ip", "netns", "pids", link.namespace], check=False)
    return [int(p) for p in out.stdout.split() if p.isdigit()]


def parse_alias(text: str) -> str | None:
    """The alias in `ip -o link show` output of one link (None: it has none)."""
    _, sep, alias = text.partition("\\    alias ")
    return alias.strip() if sep else None


def marked(network: Network) -> set[str]:
    """The bridge, bridge ports and namespaces of the record that exist now and carry its mark
    (none for a record without one)."""
    if not network.mark:
        return set()

    def alias(*argv: str) -> str | None:
        done = run(["ip", *argv], check=False)
        return parse_alias(done.stdout) if done.returncode == 0 else None

    found = {name for name in (network.bridge, *(n.host_interface for n in network.nodes))
             if alias("-o", "link", "show", "dev", name) == network.mark}
    found |= {n.namespace for n in network.nodes
              if alias("-n", n.namespace, "-o", "link", "show", "dev", "lo") == network.mark}
    return found


def remove(network: Network) -> list[str]:
    """Remove what the record names and carries its mark; returns what was there and is gone
    now. A piece without the mark (another cluster's, on the same port base) stays."""
    ours = marked(network)
    removed = []
    for argv in remove_commands(network):
        if argv[-1] not in ours:
            continue
        # A namespace file stays busy while a process that just left it still holds a copy of
        # its mount (a node's private mount namespace): try again for a few seconds.
        deadline = time.monotonic() + REMOVE_RETRY_S
        while True:
            done = run(argv, check=False)
            if done.returncode == 0 or "No such" in done.stderr or "Cannot find" in done.stderr \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if done.returncode == 0:
            removed.append(argv[-1])
    return removed


def existing(network: Network) -> list[str]:
    """The names of the record that exist on this machine now (namespaces and links)."""
    names = set(run(["ip", "-o", "link", "show"], check=False).stdout.split())
    links = {w.rstrip(":").split("@")[0] for w in names}
    spaces = {line.split()[0] for line in
              run(["ip", "netns", "list"], check=False).stdout.splitlines() if line.strip()}
    out = [network.bridge] if network.bridge in links else []
    for n in network.nodes:
        out += [x for x in (n.host_interface,) if x in links]
        out += [x for x in (n.namespace,) if x in spaces]
    return out
