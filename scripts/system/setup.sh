#!/usr/bin/env bash
# Start what the system tier needs inside ONE private network namespace, so the host's network,
# firewall ruleset and ip_forward are never touched. State lives under $KICI_SYS_WORK; the
# variables the tests need are written to $KICI_SYS_WORK/env.
set -euo pipefail
W=${KICI_SYS_WORK:-/tmp/kici-sys}
NS=${KICI_SYS_NETNS:-kici-sys}
IN_NS="nsenter --net=/run/netns/$NS" # not `ip netns exec`: that remounts /sys and hides the cgroup tree
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
mkdir -p "$W"
T0=$(date +%s%N)

# --- packages: install only what is missing (PostgreSQL ships on the image, but a new image may not).
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null || need+=(util-linux)
# promtool (test/system/promtool.test.ts) ships in Debian's prometheus package: 19 MB download,
# ~96 MB installed, about 10 s. Only the tool is wanted: the package's server must not start.
command -v promtool >/dev/null || need+=(prometheus)
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  # Deny service starts during the install (unless the image already has its own policy).
  own_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >"$W/apt.log" 2>&1 || {
    tail -20 "$W/apt.log"
    [[ -n $own_policy ]] && rm -f /usr/sbin/policy-rc.d
    exit 1
  }
  [[ -n $own_policy ]] && rm -f /usr/sbin/policy-rc.d
  # On a systemd host the package also enables its unit for the next boot: undo that.
  if [[ -d /run/systemd/system ]] && systemctl is-enabled prometheus >/dev/null 2>&1; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

# --- private network namespace (loopback only: nothing in it can reach off the machine)
ip netns add "$NS" 2>/dev/null || true
ip -n "$NS" link set lo up

# --- scratch PostgreSQL on 127.0.0.1:55432 inside the namespace
t=$(date +%s%N)
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
rm -rf "$W/pg"
mkdir -p "$W/pg" "$W/pgrun"
chown postgres: "$W/pg" "$W/pgrun"
runuser -u postgres -- "$PGBIN/initdb" -D "$W/pg/data" -A trust -U postgres --no-sync >"$W/initdb.log"
$IN_NS runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg/data" -l "$W/pgrun/pg.log" -w \
  -o "-p 55432 -k $W/pgrun -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null
echo "postgres ready: $(ms "$t") ms"

cat >"$W/env" <<ENV
export KICI_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres
export KICI_SYS_NETNS=$NS
ENV
echo "system services ready: $(ms "$T0") ms"
