#!/usr/bin/env bash
# On a lent GPU machine (Ubuntu 24.04, root, no network): unpack what benchmarks/carry.sh put in
# .carry/ and make it usable, then `source "$PREFIX/env.sh"`:
#   - Slurm, munge (and PMIx, where Open MPI brought none) under $PREFIX/root, with the plain
#     names Debian's packages link at install (slurmd -> slurmd-wlm, ...); toolkit.localslurm
#     finds their plugins and slurmstepd from where slurmd is (PluginDir, slurmd -d);
#   - iproute2's `ip` and `tc` (where the machine has none) behind wrappers in $PREFIX/bin that
#     give them their own libraries, so nothing else loads Debian's copies;
#   - the `munge` user and the directories munged keeps its key, socket, log and seed in, as
#     the munge package makes them at install;
#   - the wheels installed into $PREFIX/site.
# Prints what it brought and what the machine already had. Changes nothing on a second run.
#   PREFIX=/opt/trainbench-carry bash benchmarks/bring.sh && source /opt/trainbench-carry/env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/opt/trainbench-carry}
root=$PREFIX/root
mkdir -p "$root" "$PREFIX/iproute2" "$PREFIX/bin" "$PREFIX/site"
brought=() had=()

have_lib() { ldconfig -p | grep -qE "^[[:space:]]*$1 "; }
for deb in .carry/debs/*.deb; do
  pkg=$(dpkg-deb -f "$deb" Package)
  case $pkg in
    iproute2|libbpf1|libmnl0|libxtables12|libdb5.3|libelf1|libbsd0|libmd0|libtirpc3|libcap2)
      if command -v ip >/dev/null && command -v tc >/dev/null; then had+=("$pkg"); continue; fi
      dpkg -x "$deb" "$PREFIX/iproute2" ;;
    libpmix2)  # Open MPI's own PMIx, where it has one, serves the Slurm plugin too (same soname)
      if have_lib libpmix.so.2; then had+=("$pkg"); continue; fi
      dpkg -x "$deb" "$root" ;;
    libdbus-1-3)
      if have_lib libdbus-1.so.3; then had+=("$pkg"); continue; fi
      dpkg -x "$deb" "$root" ;;
    *) dpkg -x "$deb" "$root" ;;
  esac
  brought+=("$pkg $(dpkg-deb -f "$deb" Version)")
done
for daemon in slurmd slurmstepd slurmctld; do
  [ -e "$root/usr/sbin/$daemon-wlm" ] && ln -sfn "$daemon-wlm" "$root/usr/sbin/$daemon"
done

lib=$root/usr/lib/x86_64-linux-gnu
if [ -x "$PREFIX/iproute2/bin/ip" ]; then
  for tool in ip:bin tc:sbin; do
    name=${tool%%:*} dir=${tool##*:}
    cat >"$PREFIX/bin/$name" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$PREFIX/iproute2/usr/lib/x86_64-linux-gnu:$PREFIX/iproute2/lib/x86_64-linux-gnu \\
  TC_LIB_DIR=$PREFIX/iproute2/usr/lib/x86_64-linux-gnu/tc exec $PREFIX/iproute2/$dir/$name "\$@"
EOF
    chmod 755 "$PREFIX/bin/$name"
  done
fi

if ! id munge >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin munge
  brought+=("the munge user")
fi
for d in /etc/munge /var/lib/munge /var/log/munge /run/munge; do
  mkdir -p "$d" && chown munge:munge "$d" && chmod 0700 "$d"
done
chmod 0755 /run/munge  # clients reach munged's socket through it

if ls .carry/whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$PREFIX/site" .carry/whl/*.whl
  brought+=("wheels: $(cd .carry/whl && ls *.whl | sed 's/-[0-9].*//' | tr '\n' ' ')")
fi

cat >"$PREFIX/env.sh" <<EOF
export PATH="$PREFIX/bin:$root/usr/sbin:$root/usr/bin:\$PATH"
export LD_LIBRARY_PATH="$lib/slurm-wlm:$lib:$root/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PYTHONPATH="\${PYTHONPATH:+\$PYTHONPATH:}$PREFIX/site"
EOF
echo "bring.sh: brought ${#brought[@]}: $(printf '%s; ' "${brought[@]}")"
echo "bring.sh: the machine had: ${had[*]:-nothing of it}"
