#!/usr/bin/env bash
# The static checks of `.ci/run` (types, lint and import cycles, licenses, formatting), run beside
# the test tiers at the lowest CPU priority. Every check runs even when one fails; the first
# failure's exit code is written to the file given as $1 once all have ended.
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
rc=0
for check in typecheck lint licenses format:check; do
  echo "-- npm run $check"
  nice -n 19 npm run --silent "$check" || {
    r=$?
    echo "-- npm run $check failed (exit $r)"
    ((rc)) || rc=$r
  }
done
echo "-- the checks took $(($(date +%s) - started))s beside the tiers"
echo "$rc" >"$1"
