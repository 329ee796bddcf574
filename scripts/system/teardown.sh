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
ip netns del "$NS" 2>/dev/null
rm -rf "$W/pg"
echo "system services stopped"
