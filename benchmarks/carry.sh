#!/usr/bin/env bash
# What a lent GPU machine lacks, fetched here (where apt-get and pip reach their registries) into
# .carry/ at the repository's root, for a device call to carry (`carry: [".carry"]`) and
# benchmarks/bring.sh to unpack there:
#   .carry/debs  Debian 12's Slurm 22.05 (slurmctld, slurmd, the client, the basic plugins),
#                munge, PMIx, iproute2 (`ip`, `tc`) and the libraries those need that Ubuntu
#                24.04 lacks or names differently (about 7 MB)
#   .carry/whl   the toolkit's Python packages missing from the machine's Python 3.12
#                (submitit, SQLAlchemy, alembic, Mako, greenlet, google-re2, orjson; about 6 MB)
# Add `/.carry/` to .git/info/exclude so the folder is not committed.
#   bash benchmarks/carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/debs .carry/whl
(cd .carry/debs && apt-get download -q \
  slurmd slurmctld slurm-client libslurm38 slurm-wlm-basic-plugins munge libmunge2 libpmix2 \
  iproute2 libbpf1 libmnl0 libxtables12 libdb5.3 libelf1 libbsd0 libmd0 libtirpc3 libcap2 \
  libdbus-1-3 2>&1 | grep -v 'unsandboxed' || true)
# The versions of this machine's .venv, for CPython 3.12 on x86-64 (the GPU machines' Python).
versions=$(.venv/bin/python -m pip list --format=freeze 2>/dev/null)
pin() { grep -i "^$1==" <<<"$versions" || echo "$1"; }
for package in submitit SQLAlchemy greenlet alembic Mako google-re2 orjson; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .carry/whl "$(pin "$package")" 2>&1 \
    | grep -v "is ignored" || true
done
du -sh .carry/debs .carry/whl
