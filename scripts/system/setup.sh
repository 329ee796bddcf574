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
# A run that died before its tear-down leaves engines, a database and mounts under $W; clear them
# (by PID file, as the tear-down always does) so nothing below trips on them.
bash "$(dirname "${BASH_SOURCE[0]}")/teardown.sh" >/dev/null 2>&1 || true

# --- packages: install only what is missing (PostgreSQL ships on the image, but a new image may not).
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null || need+=(util-linux)
# promtool (test/system/promtool.test.ts) and the server test/system/prometheus-alerts.test.ts
# starts on loopback ship in Debian's prometheus package: 19 MB download, ~96 MB installed, about
# 10 s. The tests start their own server: the package's service must not run.
{ command -v promtool && command -v prometheus; } >/dev/null || need+=(prometheus)
# Container engines (both driven through the Docker-compatible API), their firewall tooling, a
# registry-free base image (busybox-static), bubblewrap for the bare-metal sandbox and QEMU for the
# micro-VM backend. --no-install-recommends keeps needrestart and friends out.
command -v dockerd >/dev/null || need+=(docker.io)
command -v podman >/dev/null || need+=(podman)
[[ -x /usr/lib/podman/netavark || -x /usr/libexec/podman/netavark ]] || need+=(netavark aardvark-dns)
command -v nft >/dev/null || need+=(nftables)
command -v iptables >/dev/null || need+=(iptables)
[[ -x /bin/busybox ]] || need+=(busybox-static)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
# libfaketime: the wall-clock jump tests move the server's clock by an hour, the host's stays put.
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need+=(faketime)
# Debian's Chromium for the dashboard's browser tests (driven by playwright-core; no browser download).
command -v chromium >/dev/null || need+=(chromium)
# strace for the durability test (the WAL synced before a result is acknowledged).
command -v strace >/dev/null || need+=(strace)
# docker-compose 1.29 (Python, speaks the Docker API) for the compose example's test.
command -v docker-compose >/dev/null || need+=(docker-compose)
# A registry (distribution 2.8) with htpasswd auth for the job-image pull-credential tests.
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v htpasswd >/dev/null || need+=(apache2-utils)
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  # Deny service starts during the install (unless the image already has its own policy).
  own_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >"$W/apt.log" 2>&1 || {
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

# --- container engines, each in its OWN namespace: both want kici-agent-net (172.30.0.0/16), and one
# namespace cannot hold that subnet twice. Engine tests run inside the engine's namespace so that the
# orchestrator under test is reachable from agent containers at the network's gateway.
wait_for() { for _ in $(seq 400); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done; "$@"; }
DNS=${KICI_SYS_DOCKER_NETNS:-kici-docker}
PNS=${KICI_SYS_PODMAN_NETNS:-kici-podman}
for ns in "$DNS" "$PNS"; do
  ip netns add "$ns" 2>/dev/null || true
  ip -n "$ns" link set lo up
done
t=$(date +%s%N)
rm -rf "$W/docker" "$W/dx"
nsenter --net="/run/netns/$DNS" dockerd --host "unix://$W/docker.sock" --data-root "$W/docker" \
  --exec-root "$W/dx" --pidfile "$W/dockerd.pid" >"$W/dockerd.log" 2>&1 &
echo $! >"$W/dockerd.bgpid"
wait_for docker -H "unix://$W/docker.sock" version
echo "dockerd ready: $(ms "$t") ms"

# Podman asks runc for nofile/nproc limits above this sandbox's hard limits (no CAP_SYS_RESOURCE):
# pin them to what the host allows, for the CLI and the API service alike.
cat >"$W/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=32768:32768"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF="$W/containers.conf"
PODMAN="podman --root $W/podman --runroot $W/podman-run"
rm -rf "$W/podman" "$W/podman-run"
t=$(date +%s%N)
nsenter --net="/run/netns/$PNS" $PODMAN system service --time=0 "unix://$W/podman.sock" >"$W/podman.log" 2>&1 &
echo $! >"$W/podman.bgpid"
# netavark 1.4 (Debian 12) lets its bridges' MAC follow their ports: pin each one as it appears
# (the script says why). It stops its own `ip monitor` when teardown stops it.
bash "$(dirname "${BASH_SOURCE[0]}")/pin-bridge-macs.sh" "$PNS" >"$W/pin-bridge-macs.log" 2>&1 &
echo $! >"$W/pinmacs.bgpid"
wait_for curl -sf --unix-socket "$W/podman.sock" http://d/_ping
echo "podman service ready: $(ms "$t") ms"

# A plain job image with no agent of ours: busybox-static, imported into both engines.
t=$(date +%s%N)
R="$W/busybox-rootfs"
rm -rf "$R"
mkdir -p "$R"/{bin,etc,tmp,proc,sys,dev,root}
cp /bin/busybox "$R/bin/"
for a in sh ls cat echo sleep wget nc ip id ps hostname head tail true false env timeout seq tr mkdir rm touch grep dd; do
  ln -sf busybox "$R/bin/$a"
done
echo 'root:x:0:0:root:/root:/bin/sh' >"$R/etc/passwd"
tar -C "$R" -cf "$W/busybox.tar" .
docker -H "unix://$W/docker.sock" import -c 'ENV PATH=/bin' -c 'CMD ["/bin/sh"]' "$W/busybox.tar" kici-test/busybox:1 >/dev/null
$PODMAN import -q -c 'ENV PATH=/bin' -c 'CMD ["/bin/sh"]' "$W/busybox.tar" localhost/kici-test/busybox:1 >/dev/null
echo "busybox image imported: $(ms "$t") ms"

# The agent image (npm run image:agent), loaded into both engines through their APIs.
t=$(date +%s%N)
ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
(cd "$ROOT_DIR" && npm run build --silent)
AGENT_IMAGE=$(cd "$ROOT_DIR" && KICI_AGENT_IMAGE_HOSTS="unix://$W/docker.sock unix://$W/podman.sock" \
  node_modules/.bin/node scripts/build-agent-image.ts | tail -n 1)
echo "agent image $AGENT_IMAGE built into both engines: $(ms "$t") ms"

# The compose example's images (Docker only): the orchestrator image (npm run image:orchestrator)
# and a PostgreSQL image from the host's binaries, since no registry is reachable.
t=$(date +%s%N)
ORCH_IMAGE=$(cd "$ROOT_DIR" && DOCKER_HOST="unix://$W/docker.sock" KICI_AGENT_IMAGE_HOSTS= \
  KICI_ORCHESTRATOR_IMAGE_TAG=kici-test/orchestrator:1 node_modules/.bin/node scripts/build-orchestrator-image.ts | tail -n 1)
PG_IMAGE=$(cd "$ROOT_DIR" && DOCKER_HOST="unix://$W/docker.sock" \
  node_modules/.bin/node scripts/build-postgres-image.ts kici-test/postgres:1 | tail -n 1)
echo "orchestrator image $ORCH_IMAGE and postgres image $PG_IMAGE built into docker: $(ms "$t") ms"

cat >"$W/env" <<ENV
export KICI_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:55432/postgres
export KICI_SYS_NETNS=$NS
export KICI_SYS_DOCKER_NETNS=$DNS
export KICI_SYS_PODMAN_NETNS=$PNS
export KICI_TEST_DOCKER_SOCK=$W/docker.sock
export KICI_TEST_PODMAN_SOCK=$W/podman.sock
export KICI_TEST_BUSYBOX_IMAGE=kici-test/busybox:1
export KICI_TEST_AGENT_IMAGE=$AGENT_IMAGE
export KICI_TEST_ORCHESTRATOR_IMAGE=$ORCH_IMAGE
export KICI_TEST_POSTGRES_IMAGE=$PG_IMAGE
export CONTAINERS_CONF=$W/containers.conf
ENV
echo "system services ready: $(ms "$T0") ms"

# Micro-VM guest for the VM backend's suites (kernel from Debian's linux-image package, rootfs with
# Node and the built agent): needs dist/, which test:system builds first.
t=$(date +%s%N)
bash "$(dirname "$0")/../build-vm-guest.sh" "$W/vm" >"$W/vm-build.log" 2>&1 || { cat "$W/vm-build.log" >&2; exit 1; }
cat >>"$W/env" <<ENV
export KICI_TEST_VM_KERNEL=$W/vm/vmlinux
export KICI_TEST_VM_INITRD=$W/vm/initrd.cpio.gz
export KICI_TEST_VM_ROOTFS=$W/vm/rootfs.ext4
ENV
echo "vm guest built: $(ms "$t") ms"
