#!/usr/bin/env bash
# `npm run test:system`: needs root. Starts the services in a private network namespace, runs the
# system suites inside it, and always tears the services down.
# With KICI_SYS_PREPARED=1 the services were started already (`.ci/run` starts them in the background
# while the unit and e2e tiers run) and only the suites and the tear-down happen here.
# KICI_SYS_REPORT_DIR=<dir> makes each suite also write vitest's JSON report there.
set -euo pipefail
if [[ $EUID -ne 0 ]]; then
  echo "npm run test:system needs root (it creates a network namespace and starts PostgreSQL)" >&2
  exit 1
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export KICI_SYS_WORK=${KICI_SYS_WORK:-/tmp/kici-sys}
export KICI_SYS_NETNS=${KICI_SYS_NETNS:-kici-sys}
trap 'bash "$ROOT/scripts/system/teardown.sh"' EXIT
if [[ ${KICI_SYS_PREPARED:-} != 1 ]]; then
  bash "$ROOT/scripts/system/setup.sh"
fi
# shellcheck disable=SC1091
source "$KICI_SYS_WORK/env"
VITEST=("$ROOT/node_modules/.bin/node" "$ROOT/node_modules/vitest/vitest.mjs" run)
report() { [[ -n ${KICI_SYS_REPORT_DIR:-} ]] && echo "--reporter=default --reporter=json --outputFile.json=$KICI_SYS_REPORT_DIR/$1.json"; }

# Each suite runs in its own namespace and its own vitest process: the system suite (two halves) and
# the engine suites (one engine after the other) at the same time. The engine suites mostly wait on
# their engine, the system suite mostly on PostgreSQL and QEMU. Each writes its own log, printed
# whole when it ends, so the output stays readable. Every suite runs even when another fails; the
# exit code is the first failure's.
LOGS=$(mktemp -d)
run_suite() {
  local name=$1 ns=$2
  shift 2
  # shellcheck disable=SC2046
  nsenter --net="/run/netns/$ns" "$@" $(report "$name") >"$LOGS/$name.log" 2>&1
}
pids=() names=()
# The system suite is the longest, and most of its time is spent waiting (QEMU guests booting,
# PostgreSQL, agents holding steps), so it runs as two halves at once in the same namespace
# (KICI_SYSTEM_PART, see test/helpers/test-projects.ts). A run given file filters keeps it whole.
if (($# == 0)); then
  KICI_SYSTEM_PART=vm run_suite system-vm "$KICI_SYS_NETNS" "${VITEST[@]}" --project system &
  pids+=($!) names+=(system-vm)
  KICI_SYSTEM_PART=rest run_suite system "$KICI_SYS_NETNS" "${VITEST[@]}" --project system &
  pids+=($!) names+=(system)
else
  run_suite system "$KICI_SYS_NETNS" "${VITEST[@]}" --project system "$@" &
  pids+=($!) names+=(system)
fi
# The two engine suites run one after the other, beside the system suite's halves: four suites at
# once on a 2-core host starved starts, reconnects and heartbeats past the tests' deadlines.
engine_suites() {
  local r=0 e engine ns sock
  for engine in docker podman; do
    if [[ $engine == docker ]]; then ns=$KICI_SYS_DOCKER_NETNS sock=$KICI_TEST_DOCKER_SOCK; else ns=$KICI_SYS_PODMAN_NETNS sock=$KICI_TEST_PODMAN_SOCK; fi
    e=0
    KICI_TEST_ENGINE=$engine DOCKER_HOST="unix://$sock" run_suite "engine-$engine" "$ns" "${VITEST[@]}" --project system-engine "$@" || e=$?
    echo "$e" >"$LOGS/engine-$engine.rc"
    ((r)) || r=$e
  done
  return "$r"
}
engine_suites "$@" &
pids+=($!) names+=("engine-docker engine-podman")
rc=0
for i in "${!pids[@]}"; do
  r=0
  wait "${pids[$i]}" || r=$?
  for name in ${names[$i]}; do
    # The engine pair exits with its first failure; each suite's own code is in its .rc file.
    e=$r
    [[ -f $LOGS/$name.rc ]] && e=$(cat "$LOGS/$name.rc")
    echo "== $name suites (exit $e)"
    cat "$LOGS/$name.log"
  done
  if ((r != 0 && rc == 0)); then rc=$r; fi
done
rm -rf "$LOGS"
exit "$rc"
