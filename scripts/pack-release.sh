#!/usr/bin/env bash
# `npm run pack [-- DEST]`: build, then pack a tarball that carries our lockfile as npm-shrinkwrap.json,
# so an install resolves exactly the tested dependency versions and works offline from a warm npm cache.
# Prints the tarball's path as its last line.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$(cd "${1:-$ROOT}" && pwd)
cd "$ROOT"
npm run --silent build
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
cp -r package.json README.md LICENSE dist docs examples "$STAGE/"
rm -f "$STAGE/dist/.tsbuildinfo" # the incremental build's state, not part of the package
cp package-lock.json "$STAGE/npm-shrinkwrap.json"
cd "$STAGE"
# `files` lists what ships; the shrinkwrap is added to the staged copy only.
"$ROOT/node_modules/.bin/node" -e '
const fs = require("node:fs");
const p = JSON.parse(fs.readFileSync("package.json", "utf8"));
p.files = [...p.files, "npm-shrinkwrap.json"];
fs.writeFileSync("package.json", JSON.stringify(p, null, 2) + "\n");'
name=$(npm pack --pack-destination "$DEST" --silent | tail -1)
echo "$DEST/$name"
