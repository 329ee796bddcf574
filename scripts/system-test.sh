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
made_template=
# Where the suites that install the packed package share one install (the container path's file
# runs on both engines); removed with everything else at the end.
# Passable by every uid, as an operator's install must be (the orchestrator refuses one that is not).
KICI_TEST_INSTALL_DIR=$(mktemp -d)
chmod 755 "$KICI_TEST_INSTALL_DIR"
export KICI_TEST_INSTALL_DIR
trap 'bash "$ROOT/scripts/system/teardown.sh"; rm -rf "$KICI_TEST_INSTALL_DIR"; [[ -z $made_template ]] || rm -rf "$made_template"' EXIT
if [[ ${KICI_SYS_PREPARED:-} != 1 ]]; then
  bash "$ROOT/scripts/system/setup.sh"
fi
# shellcheck disable=SC1091
source "$KICI_SYS_WORK/env"
VITEST=("$ROOT/node_modules/.bin/node" "$ROOT/node_modules/vitest/vitest.mjs" run)
# Every suite below starts from one migrated database (scripts/test-template.ts), made here unless
# the caller made one for its whole run.
if [[ -z ${KICI_TEST_TEMPLATE_DIR:-} ]]; then
  made_template=$("$ROOT/node_modules/.bin/node" "$ROOT/scripts/test-template.ts")
  export KICI_TEST_TEMPLATE_DIR=$made_template
fi
report() { [[ -n ${KICI_SYS_REPORT_DIR:-} ]] && echo "--reporter=default --reporter=json --outputFile.json=$KICI_SYS_REPORT_DIR/$1.json"; }

# Each suite runs in its own namespace and its own vitest process, several at once: the system suite
# as two halves, and the engine suites. Each writes its own log, printed whole when the tier ends,
# so the output stays readable. Every suite runs even when another fails; the exit code is the first
# failure's.
LOGS=$(mktemp -d)
run_suite() {
  local name=$1 ns=$2
  shift 2
  # shellcheck disable=SC2046
  nsenter --net="/run/netns/$ns" "$@" $(report "$name") >"$LOGS/$name.log" 2>&1
}

# One engine's suite, whole or in part, in that engine's namespace. Its chaos file, the suite's one
# long file, is a part of its own: its cells stop the engine's service, so no other part of the same
# engine may run beside it (KICI_ENGINE_PART, ENGINE_CHAOS in test/helpers/test-projects.ts).
engine_suite() {
  local engine=$1 part=$2 ns sock name=engine-$1
  shift 2
  if [[ $engine == docker ]]; then ns=$KICI_SYS_DOCKER_NETNS sock=$KICI_TEST_DOCKER_SOCK; else ns=$KICI_SYS_PODMAN_NETNS sock=$KICI_TEST_PODMAN_SOCK; fi
  [[ -z $part ]] || name+=-$part
  KICI_ENGINE_PART=$part KICI_TEST_ENGINE=$engine DOCKER_HOST="unix://$sock" \
    run_suite "$name" "$ns" "${VITEST[@]}" --project system-engine "$@"
}

# One half of the system suite (KICI_SYSTEM_PART, test/helpers/test-projects.ts), under a name.
system_half() {
  KICI_SYSTEM_PART=$1 run_suite "$2" "$KICI_SYS_NETNS" "${VITEST[@]}" --project system
}

# Suites run as background jobs; each one's exit code is kept by name, and the logs are printed in
# the order the suites started.
declare -A name_of=() rc_of=()
order=()
launch() {
  local name=$1
  shift
  "$@" &
  name_of[$!]=$name
  order+=("$name")
}
# Waits for the next suite to end; its name is left in $ended.
ended=
reap() {
  local pid r=0
  wait -n -p pid "${!name_of[@]}" || r=$?
  ended=${name_of[$pid]}
  rc_of[$ended]=$r
  unset "name_of[$pid]"
}

if (($# > 0)); then
  # File filters: the system suite whole, and each engine's whole suite, one engine after the other.
  # A filter may match files of one suite only: the others then have nothing to do.
  launch system run_suite system "$KICI_SYS_NETNS" "${VITEST[@]}" --project system --passWithNoTests "$@"
  launch engine-docker engine_suite docker "" --passWithNoTests "$@"
  while ((${#name_of[@]})); do
    reap
    [[ $ended == engine-docker ]] && launch engine-podman engine_suite podman "" --passWithNoTests "$@"
  done
else
  # The system suite is the longest, and most of its time is spent waiting (QEMU guests booting,
  # PostgreSQL, agents holding steps), so it runs as two halves at once in the same namespace
  # (KICI_SYSTEM_PART, see test/helpers/test-projects.ts). Beside them a third lane runs the engine
  # suites: never two engine parts at once beside both halves, since four suites at once on a
  # 2-core host starved starts, reconnects and heartbeats past the tests' deadlines. Run whole, one
  # engine after the other, that lane was the longest by about a minute, which it spent alone on a
  # half-idle host. So the third lane runs Podman's suite without its chaos file, then Docker's
  # whole, and Podman's chaos file takes the place of the first half to end (never beside the rest
  # of Podman's suite, which has ended long before).
  launch system-vm system_half vm system-vm
  launch system system_half rest system
  launch engine-podman-rest engine_suite podman rest
  podman_rest_done= half_done= podman_chaos=
  while ((${#name_of[@]})); do
    reap
    case $ended in
      engine-podman-rest) podman_rest_done=1 && launch engine-docker engine_suite docker "" ;;
      system-vm | system) half_done=1 ;;
    esac
    if [[ $podman_rest_done && $half_done && ! $podman_chaos ]]; then
      podman_chaos=1
      launch engine-podman-chaos engine_suite podman chaos
    fi
  done
fi

rc=0
for name in "${order[@]}"; do
  r=${rc_of[$name]}
  echo "== $name suites (exit $r)"
  cat "$LOGS/$name.log" || true
  if ((r != 0 && rc == 0)); then rc=$r; fi
done
rm -rf "$LOGS"
exit "$rc"
