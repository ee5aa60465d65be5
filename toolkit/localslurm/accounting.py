"""Accounting for the local Slurm cluster (opt-in): MariaDB + slurmdbd, associations and limits.

``python -m toolkit.localslurm up --accounting`` (or ``start_cluster(..., accounting=True)``)
calls :func:`start` after munged and before slurmctld. It starts, as children recorded with the
other daemons (so ``down`` stops them, slurmdbd after slurmctld and MariaDB last):

- ``mariadb``: a MariaDB server of its own, datadir ``<state>/db``, socket ``<state>/run/
  mysqld.sock``, TCP only on 127.0.0.1 at ``port_base + nodes + 2``; never the system server, its
  socket or port 3306. A database user ``slurm`` with a random password is created through the
  socket (root there authenticates as the Unix root, which we are).
- ``slurmdbd`` (Debian's 22.05) on ``port_base + nodes + 1``, its ``slurmdbd.conf`` beside
  ``slurm.conf`` (slurmdbd finds it through ``SLURM_CONF``'s folder; mode 600, it holds the
  password).

Then it registers the cluster, an account ``trainbench`` and user root in it with
``sacctmgr -i``, and slurm.conf gets ``AccountingStorageType=accounting_storage/slurmdbd`` with
``AccountingStorageEnforce=associations,limits,qos``. :func:`set_max_submit_jobs` (CLI:
``python -m toolkit.localslurm limit --max-submit-jobs N``) sets a per-user MaxSubmitJobs and
waits until slurmctld enforces it. With accounting on, ``sacct`` reports every job.

The default cluster (no accounting) does not import this module and is unchanged.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from toolkit.localslurm import statedir
from toolkit.localslurm.config import CLUSTER_NAME, ClusterError
from toolkit.localslurm.processes import (
    ClusterRecord,
    add_daemon,
    exe,
    short_hostname,
    wait_for,
    which,
)

PACKAGES = ("mariadb-server", "slurmdbd")
#: Executables whose absence means the packages above must be installed.
REQUIRED_EXECUTABLES = ("mariadbd", "mariadb-install-db", "mariadb", "slurmdbd", "sacctmgr")
ACCOUNT = "trainbench"
DB_USER = "slurm"
DB_NAME = "slurm_acct_db"
DBD_CONF = "slurmdbd.conf"
DEFAULT_USERS = ("root",)
#: slurmdbd pushes association changes to slurmctld asynchronously; how long to wait for them.
LIMIT_PROPAGATION_S = 30.0
UP_TIMEOUT_S = 60.0


def ports(port_base: int, nodes: int) -> tuple[int, int]:
    """(slurmdbd port, MariaDB port): the two after slurmctld's and the nodes' ports."""
    return port_base + nodes + 1, port_base + nodes + 2


def socket_path(state_dir: Path) -> Path:
    return state_dir / "run" / "mysqld.sock"


def slurm_conf_lines(dbd_port: int) -> list[str]:
    """The accounting part of slurm.conf (replaces ``AccountingStorageType=.../none``)."""
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={dbd_port}",
        # associations: a user without one cannot submit; limits: MaxSubmitJobs and the like
        # are enforced; qos: so are QOS limits.
        "AccountingStorageEnforce=associations,limits,qos",
    ]


def render_slurmdbd_conf(state_dir: Path, hostname: str, dbd_port: int, db_port: int,
                         password: str) -> str:
    """The whole slurmdbd.conf (pure). StorageHost is an address, not ``localhost``: the MySQL
    client library turns ``localhost`` into the system's default socket, which is not ours."""
    return "\n".join([
        f"# Written by toolkit.localslurm.accounting for the cluster in {state_dir}.",
        "AuthType=auth/munge",
        f"DbdHost={hostname}",
        "DbdAddr=127.0.0.1",
        f"DbdPort={dbd_port}",
        "SlurmUser=root",
        f"LogFile={state_dir / 'log' / 'slurmdbd.log'}",
        f"PidFile={state_dir / 'run' / 'slurmdbd.pid'}",
        "DebugLevel=info",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={db_port}",
        f"StorageUser={DB_USER}",
        f"StoragePass={password}",
        f"StorageLoc={DB_NAME}",
        "",
    ])


def mariadb_argv(mariadbd: str, state_dir: Path, db_port: int) -> list[str]:
    """A foreground MariaDB server that reads no system option file (``--no-defaults``)."""
    return [
        mariadbd, "--no-defaults", f"--datadir={state_dir / 'db'}",
        f"--socket={socket_path(state_dir)}", f"--port={db_port}", "--bind-address=127.0.0.1",
        f"--pid-file={state_dir / 'run' / 'mariadb.pid'}",
        f"--log-error={state_dir / 'log' / 'mariadb.log'}", "--user=root",
        "--skip-name-resolve", "--skip-log-bin",
        # Small: a test database of a few thousand jobs. slurmdbd's docs ask for a long lock
        # wait so its table upgrades are not cut off.
        "--innodb-buffer-pool-size=64M", "--innodb-lock-wait-timeout=900",
    ]


# ---------------------------------------------------------------------------------------------
# Processes


def ensure_packages() -> None:
    """Install MariaDB and slurmdbd with apt-get when any of their programs is missing (the
    image's policy-rc.d, where there is one, keeps apt from starting the system services)."""

    missing = [n for n in REQUIRED_EXECUTABLES if which(n) is None]
    if not missing:
        return
    print(f"localslurm: missing {', '.join(missing)}; installing {' '.join(PACKAGES)}",
          flush=True)
    apt = shutil.which("apt-get")
    if apt is None:
        raise ClusterError(f"missing {', '.join(missing)} and no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # The packages' scripts would start the system MariaDB (port 3306) and slurmdbd; a
    # policy-rc.d that denies every start (as container images ship) stops them, for this
    # install only.
    policy = Path("/usr/sbin/policy-rc.d")
    ours = not policy.exists()
    if ours:
        policy.write_text("#!/bin/sh\n# toolkit.localslurm.accounting\nexit 101\n")
        policy.chmod(0o755)
    try:
        subprocess.run([apt, "update"], check=True, env=env)
        subprocess.run([apt, "install", "-y", *PACKAGES], check=True, env=env)
    finally:
        if ours:
            policy.unlink(missing_ok=True)
    still = [n for n in REQUIRED_EXECUTABLES if which(n) is None]
    if still:
        raise ClusterError(f"still missing after apt-get install: {', '.join(still)}")


def _popen(argv: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a foreground daemon in its own session (as localslurm does), with env."""
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True, env=env)


def _client(state_dir: Path, sql: str) -> subprocess.CompletedProcess[str]:

    return subprocess.run([exe("mariadb"), "--no-defaults", f"--socket={socket_path(state_dir)}",
                           "-u", "root", "-e", sql],
                          capture_output=True, text=True, check=False, timeout=30)


def sacctmgr(cluster: ClusterRecord, *args: str) -> str:
    """``sacctmgr -i <args>`` against this cluster's slurmdbd; raises ClusterError on failure.
    "Nothing new added" / "already exists" count as done."""

    proc = subprocess.run([exe("sacctmgr"), "-i", *args], capture_output=True, text=True,
                          env=cluster.client_env(), check=False, timeout=60)
    out = (proc.stdout + proc.stderr).strip()
    done = ("already exists", "nothing new added")
    if proc.returncode != 0 and not any(d in out.lower() for d in done):
        raise ClusterError(f"sacctmgr -i {' '.join(args)} failed: {out}")
    return out


def start(cluster: ClusterRecord, users: tuple[str, ...] = DEFAULT_USERS) -> None:
    """Start MariaDB and slurmdbd for cluster (its slurm.conf already written, slurmctld not
    yet started) and register the cluster, the account and users. Each daemon is recorded in
    cluster as soon as it runs, so a failure half way still leaves it for ``down``."""

    state_dir = cluster.state_dir
    dbd_port, db_port = ports(cluster.port_base, len(cluster.nodes))
    env = cluster.client_env()
    log_dir = state_dir / "log"
    # A new database on every up, as slurmctld -c forgets every job: no limits or job records
    # are left over from the cluster's last life.
    shutil.rmtree(state_dir / "db", ignore_errors=True)
    (state_dir / "db").mkdir(parents=True)
    proc = subprocess.run(
        [exe("mariadb-install-db"), "--no-defaults", f"--datadir={state_dir / 'db'}",
         "--user=root", "--skip-test-db", "--auth-root-authentication-method=socket"],
        capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:

        raise ClusterError(f"mariadb-install-db failed: {proc.stdout}{proc.stderr}")
    mariadb = _popen(mariadb_argv(exe("mariadbd"), state_dir, db_port), log_dir / "mariadb.out",
                     env)
    add_daemon(cluster, "mariadb", mariadb, log_dir / "mariadb.log")
    wait_for(lambda: _client(state_dir, "SELECT 1").returncode == 0, UP_TIMEOUT_S, cluster,
              "MariaDB to answer on its socket")

    password = secrets.token_hex(16)
    grant = (f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}'; "
             f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1'; FLUSH PRIVILEGES;")
    proc = _client(state_dir, grant)
    if proc.returncode != 0:

        raise ClusterError(f"creating the slurmdbd database user failed: {proc.stderr}")

    # slurmdbd refuses a readable one: it holds the password
    statedir.write_file(state_dir, DBD_CONF, render_slurmdbd_conf(
        state_dir, short_hostname(), dbd_port, db_port, password), mode=0o600)
    dbd = _popen([exe("slurmdbd"), "-D"], log_dir / "slurmdbd.out", env)
    add_daemon(cluster, "slurmdbd", dbd, log_dir / "slurmdbd.log")
    wait_for(lambda: _dbd_answers(cluster), UP_TIMEOUT_S, cluster, "slurmdbd to answer")

    sacctmgr(cluster, "add", "cluster", CLUSTER_NAME)
    sacctmgr(cluster, "add", "account", ACCOUNT, f"Cluster={CLUSTER_NAME}",
             "Description=trainbench local cluster", "Organization=trainbench")
    for user in users:
        sacctmgr(cluster, "add", "user", user, f"Account={ACCOUNT}", f"DefaultAccount={ACCOUNT}",
                 f"Cluster={CLUSTER_NAME}")


def _dbd_answers(cluster: ClusterRecord) -> bool:

    try:
        proc = subprocess.run([exe("sacctmgr"), "-n", "-P", "show", "cluster", "format=cluster"],
                              capture_output=True, text=True, env=cluster.client_env(),
                              check=False, timeout=15)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


# ---------------------------------------------------------------------------------------------
# Limits


def enforced_max_submit_jobs(cluster: ClusterRecord, user: str = "root") -> list[str]:
    """MaxSubmitJobs of user's associations as slurmctld holds them (``scontrol show
    assoc_mgr``): what it enforces now, not what the database says; one value per association,
    ``N(used)`` as scontrol prints it, ``N`` alone when there is no limit."""

    proc = subprocess.run([exe("scontrol"), "show", "assoc_mgr", f"users={user}",
                           "flags=assoc"], capture_output=True, text=True,
                          env=cluster.client_env(), check=False, timeout=30)
    return parse_assoc_mgr_max_submit(proc.stdout, user)


def parse_assoc_mgr_max_submit(text: str, user: str) -> list[str]:
    """MaxSubmitJobs of user's own association records in ``scontrol show assoc_mgr`` output
    (records start with ``ClusterName=``; account records, ``UserName=`` empty, are skipped)."""
    values = []
    for record in text.split("ClusterName=")[1:]:
        tokens = dict(t.split("=", 1) for t in record.split() if "=" in t)
        if tokens.get("UserName", "").split("(")[0] == user and "MaxSubmitJobs" in tokens:
            values.append(tokens["MaxSubmitJobs"])
    return values


def set_max_submit_jobs(cluster: ClusterRecord, limit: int | None, user: str = "root",
                        timeout_s: float = LIMIT_PROPAGATION_S) -> None:
    """Set (None: clear) user's MaxSubmitJobs on every association of theirs, and wait until
    slurmctld enforces it (slurmdbd pushes the change to slurmctld in the background)."""

    if not cluster.accounting:
        raise ClusterError(f"the cluster in {cluster.state_dir} has no accounting: start it with "
                           "up --accounting to set limits")
    if limit is not None and limit < 0:
        raise ClusterError(f"MaxSubmitJobs must be >= 0, got {limit}")
    sacctmgr(cluster, "modify", "user", user, "set",
             f"MaxSubmitJobs={-1 if limit is None else limit}")
    deadline = time.monotonic() + timeout_s
    while True:
        values = enforced_max_submit_jobs(cluster, user)
        want = "" if limit is None else str(limit)
        # scontrol prints the limit with the usage in brackets: MaxSubmitJobs=50(3).
        if values and all(v.split("(")[0] == want for v in values):
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"slurmctld does not enforce MaxSubmitJobs={limit} for {user} "
                               f"after {timeout_s:.0f} s (assoc_mgr says {values})")
        time.sleep(0.5)
