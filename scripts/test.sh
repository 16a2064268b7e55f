#!/usr/bin/env bash
# Sets up and runs the whole test suite: installs the build dependencies, checks the C++ follows
# .clang-format, builds with warnings as errors, runs every unit and end-to-end test, then does it
# again under ASan/UBSan, then runs each libFuzzer target for a bounded time (scripts/fuzz.sh).
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/check-format.sh
# A real Docker Engine for the docker driver's tests (they skip without one, and fail under CI=true).
scripts/start-docker.sh

jobs=$(nproc)
# Builds and runs one preset's tests, then says how many ran and how many were skipped. Under
# CI=true (.ci/run sets it) a skip fails the run: a test that cannot find its component (dockerd,
# jq, ...) fails itself there, and this catches any skip that slips through.
run_preset() {
  local preset=$1 log rc total skipped
  cmake --preset "$preset" -DCMAKE_CXX_FLAGS="-Werror"
  cmake --build --preset "$preset" -j "$jobs"
  log=$(mktemp)
  set +e
  ctest --preset "$preset" -j "$jobs" --timeout 900 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  total=$(sed -n 's/.* tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  skipped=$(grep -c '(Skipped)' "$log" || true)
  rm -f "$log"
  echo "test.sh: preset $preset: ${total:-0} tests, $((${total:-0} - skipped)) ran, $skipped skipped"
  if [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
  if [ "${CI:-}" = true ] && [ "$skipped" -gt 0 ]; then
    echo "test.sh: $skipped test(s) skipped under CI=true: a skip in CI is a failure" >&2
    exit 1
  fi
}
run_preset default
if [ "${1:-}" != "--no-asan" ]; then
  run_preset asan
  # Each parser of untrusted input, fuzzed from its seed corpus; any finding fails the run.
  scripts/fuzz.sh "${SANDBOXER_FUZZ_SECONDS:-60}"
fi
echo "all tests passed"
