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
nsenter --net="/run/netns/$KICI_SYS_NETNS" "$ROOT/node_modules/.bin/node" "$ROOT/node_modules/vitest/vitest.mjs" run --project system "$@"
