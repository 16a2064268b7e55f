#!/usr/bin/env bash
# How much a one-file change rebuilds (docs/testing.md, "A change rebuilds in seconds"): in a
# build tree that is up to date, touches one .cpp of a driver, then one public header of the SDK,
# and for each prints how many files were compiled, which targets, and the wall time of
# `cmake --build BUILD --target sandboxer`. The driver's change must compile that one file and
# relink; the header's must compile only the files that include it (checked against the compiler's
# own dependency lists: `ninja -t deps`).
# Usage: bench/rebuild.sh [BUILD_DIR] [DRIVER_CPP] [SDK_HEADER]
# BUILD_DIR defaults to build-dev: the dev preset, one object per source.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-dev}
DRIVER_CPP=${2:-drivers/docker/spec.cpp}
SDK_HEADER=${3:-include/sandboxer/base64.hpp}
[ -f "$BUILD/build.ninja" ] || { echo "rebuild.sh: no Ninja build in $BUILD (cmake --preset dev && cmake --build --preset dev)" >&2; exit 2; }
cmake --build "$BUILD" --target sandboxer >/dev/null

# rebuild FILE: touches FILE, rebuilds, prints what was compiled and how long it took.
rebuild() {
  local file=$1 log start end compiled
  log=$(mktemp)
  touch "$file"
  start=$(date +%s%N)
  cmake --build "$BUILD" --target sandboxer -- -v >"$log" 2>&1
  end=$(date +%s%N)
  compiled=$(grep -c ' -c ' "$log" || true)
  printf 'rebuild.sh: touch %s: %d file(s) compiled, %s, %d.%02d s\n' "$file" "$compiled" \
    "$(grep -q ' -o sandboxer ' "$log" && echo "sandboxer relinked" || echo "no relink")" \
    $(((end - start) / 1000000000)) $((((end - start) / 10000000) % 100))
  grep ' -c ' "$log" | sed -n 's/.* -c \([^ ]*\).*/    \1/p' | sed "s|$PWD/||"
  rm -f "$log"
}

rebuild "$DRIVER_CPP"
# The objects of the sandboxer target whose recorded dependencies name the header.
includers=$(ninja -C "$BUILD" -t deps 2>/dev/null | awk -v h="$PWD/$SDK_HEADER" '
  /^[^ ].*: #deps/ { obj = $1; sub(/:$/, "", obj) } $1 == h { print obj }' | sort -u | wc -l)
rebuild "$SDK_HEADER"
echo "rebuild.sh: $includers object file(s) of the whole tree include $SDK_HEADER (ninja -t deps)"
