#!/usr/bin/env bash
# Stop what setup.sh started (by PID file, never by name) and delete the namespace.
set -u
W=${KICI_SYS_WORK:-/tmp/kici-sys}
NS=${KICI_SYS_NETNS:-kici-sys}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -n "$PGBIN" ] && [ -f "$W/pg/data/postmaster.pid" ]; then
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$W/pg/data" -m fast -w stop >/dev/null 2>&1 ||
    kill "$(head -1 "$W/pg/data/postmaster.pid")" 2>/dev/null
fi
# Containers first, so no containerd-shim or conmon outlives its engine; then the engines by PID.
export CONTAINERS_CONF="$W/containers.conf"
DNS=${KICI_SYS_DOCKER_NETNS:-kici-docker}
PNS=${KICI_SYS_PODMAN_NETNS:-kici-podman}
if [ -S "$W/docker.sock" ]; then
  docker -H "unix://$W/docker.sock" ps -aq 2>/dev/null | xargs -r docker -H "unix://$W/docker.sock" rm -f >/dev/null 2>&1
fi
if [ -f "$W/podman.bgpid" ]; then
  nsenter --net="/run/netns/$PNS" podman --root "$W/podman" --runroot "$W/podman-run" rm -af -t 0 >/dev/null 2>&1
fi
if [ -f "$W/pinmacs.bgpid" ]; then
  kill "$(cat "$W/pinmacs.bgpid")" 2>/dev/null
  rm -f "$W/pinmacs.bgpid"
fi
for f in podman.bgpid dockerd.bgpid; do
  [ -f "$W/$f" ] || continue
  p=$(cat "$W/$f")
  kill "$p" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
  rm -f "$W/$f"
done
# Podman exec sessions leave a conmon (--exit-delay 300) behind, and a conmon whose container just
# ended starts `podman container cleanup`, which opens the storage again and re-mounts
# $W/podman/overlay (a CI run was seen to leave that mount after the removal below): end every
# process naming $W/podman, by PID, and wait for them to go.
podman_pids() {
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" = "$$" ] && continue
    tr '\0' ' ' 2>/dev/null <"$d/cmdline" | grep -qE "^(/usr/bin/conmon|/usr/bin/podman|podman) .*$W/podman" &&
      echo "${d#/proc/}"
  done
}
for _ in $(seq 50); do
  left=$(podman_pids)
  [ -z "$left" ] && break
  # shellcheck disable=SC2086
  kill $left 2>/dev/null
  sleep 0.1
done
# The monitors just killed may still hold the mount for a moment: try again for up to 5 s.
for _ in $(seq 50); do
  grep -q " $W/podman/overlay " /proc/mounts || break
  umount "$W/podman/overlay" 2>/dev/null && break
  sleep 0.1
done
# Whatever is still mounted under $W (an engine's overlays, its network-namespace files) would make
# the removal below fail with "Device or resource busy": unmount it, deepest first, lazily if busy.
findmnt -rn -o TARGET | awk -v w="$W/" 'index($0, w) == 1' | sort -r | while read -r m; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
done
rm -rf "$W/podman" "$W/podman-run" "$W/docker" "$W/dx"
# A podman process that escaped the sweep above may have mounted the storage again meanwhile.
if grep -q " $W/podman/overlay " /proc/mounts; then
  umount "$W/podman/overlay" 2>/dev/null || umount -l "$W/podman/overlay" 2>/dev/null
  rm -rf "$W/podman"
fi
ip netns del "$DNS" 2>/dev/null
ip netns del "$PNS" 2>/dev/null
ip netns del "$NS" 2>/dev/null
rm -rf "$W/pg"
echo "system services stopped"
