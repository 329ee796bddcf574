#!/usr/bin/env bash
# `npm run test:system`: needs root. Starts the services in a private network namespace, runs the
# system suites inside it, and always tears the services down.
set -euo pipefail
if [[ $EUID -ne 0 ]]; then
  echo "npm run test:system needs root (it creates a network namespace and starts PostgreSQL)" >&2
  exit 1
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export KICI_SYS_WORK=${KICI_SYS_WORK:-/tmp/kici-sys}
export KICI_SYS_NETNS=${KICI_SYS_NETNS:-kici-sys}
trap 'bash "$ROOT/scripts/system/teardown.sh"' EXIT
bash "$ROOT/scripts/system/setup.sh"
# shellcheck disable=SC1091
source "$KICI_SYS_WORK/env"
VITEST=("$ROOT/node_modules/.bin/node" "$ROOT/node_modules/vitest/vitest.mjs" run)
# Every suite runs even when an earlier one failed, so one run shows every failure; the exit code
# is the first failure's.
rc=0
keep_going() {
  local r=0
  "$@" || r=$?
  if ((r != 0 && rc == 0)); then rc=$r; fi
  return 0
}
keep_going nsenter --net="/run/netns/$KICI_SYS_NETNS" "${VITEST[@]}" --project system "$@"
# The engine suites run once per engine, inside that engine's namespace (see setup.sh).
for engine in docker podman; do
  if [[ $engine == docker ]]; then ns=$KICI_SYS_DOCKER_NETNS sock=$KICI_TEST_DOCKER_SOCK; else ns=$KICI_SYS_PODMAN_NETNS sock=$KICI_TEST_PODMAN_SOCK; fi
  echo "== engine suites on $engine"
  KICI_TEST_ENGINE=$engine DOCKER_HOST="unix://$sock" keep_going nsenter --net="/run/netns/$ns" "${VITEST[@]}" --project system-engine "$@"
done
exit "$rc"
