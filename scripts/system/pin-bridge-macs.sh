#!/usr/bin/env bash
# Usage: pin-bridge-macs.sh NETNS
#
# Keeps every bridge in NETNS on the MAC address it has when first seen, for as long as it exists.
#
# Why: a Linux bridge whose address was never set takes the lowest MAC of its ports, so it changes
# whenever a container with a lower random MAC joins or leaves. The containers already on the bridge
# keep sending to the old gateway MAC, which the host now drops as meant for another host, until
# their ARP entry is refreshed: 10 s and more of silence on connections that are otherwise fine
# (seen here as agents closed for missed heartbeats). netavark sets the bridge MAC itself from
# version 1.9; the Podman of Debian 12 ships 1.4. Setting a bridge's address, even to the one it
# already has, marks it as set, and the kernel no longer recalculates it.
#
# Runs until sent TERM (setup.sh records its PID; teardown.sh stops it by that PID).
set -u
NS=$1
declare -A pinned=()

pin_all() {
  local line idx name mac
  # "7: podman0: <...> ... link/ether 2a:16:97:80:f2:d9 brd ff:ff:ff:ff:ff:ff"
  while read -r line; do
    idx=${line%%:*}
    name=${line#*: }
    name=${name%%[:@]*}
    mac=$(sed -n 's/.*link\/ether \([0-9a-f:]*\) .*/\1/p' <<<"$line")
    [ -n "$mac" ] || continue
    [ "${pinned[$idx]:-}" = "$name" ] && continue
    # Pinned at once: ports joining later no longer move it.
    if ip -n "$NS" link set dev "$name" address "$mac" 2>/dev/null; then
      pinned[$idx]=$name
    fi
  done < <(ip -n "$NS" -o link show type bridge 2>/dev/null)
}

# Each link event (a bridge made by netavark, a port added) is a reason to look again. The monitor
# is a child of this shell, stopped with it.
coproc MON { exec ip -n "$NS" monitor link; }
trap 'kill "$MON_PID" 2>/dev/null; exit 0' TERM INT
pin_all
while read -r _ <&"${MON[0]}"; do pin_all; done
