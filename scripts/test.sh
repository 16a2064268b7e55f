#!/usr/bin/env bash
# Sets up and runs the whole test suite: installs the build dependencies, checks the C++ follows
# .clang-format, builds with warnings as errors, runs every unit and end-to-end test, then does it
# again under ASan/UBSan, then runs each libFuzzer target for a bounded time (scripts/fuzz.sh).
# Ends with a table of where the time went (scripts/phases.sh; the budget is in docs/testing.md).
#
# The sanitizer and fuzz builds run in the background, at the lowest priority, while the tests
# before them run: the end-to-end tests mostly wait on dockerd, sshd, QEMU and PostgreSQL, and the
# compiler takes the cores they leave idle.
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/phases.sh
trap phase_exit EXIT

asan=yes
[ "${1:-}" = --no-asan ] && asan=no
jobs=$(nproc)

# (Called as a phase, that is after ||, where set -e does not apply: hence the &&.)
build_preset() {
  cmake --preset "$1" -DCMAKE_CXX_FLAGS="-Werror" >/dev/null &&
    cmake --build --preset "$1" -j "$jobs"
}

# The build folder of PRESET (CMakePresets.json: build, build-asan).
preset_build_dir() { if [ "$1" = default ]; then echo build; else echo "build-$1"; fi; }

# LeakSanitizer's stop-the-world tracer now and then crashes as a process exits ("Tracer caught
# signal 11", google/sanitizers#1353): no leak was found, the exit status just became 1. True when
# every test that failed in BUILD_DIR's last CTest run failed with that in its output.
only_tracer_crashes() {
  local dir=$1/Testing/Temporary name
  [ -s "$dir/LastTestsFailed.log" ] || return 1
  while IFS=: read -r _ name; do
    awk -v start="\"$name\" start time:" -v end="\"$name\" end time:" \
      'index($0, start) == 1 { inside = 1 } inside { print } index($0, end) == 1 { inside = 0 }' \
      "$dir/LastTest.log" | grep -q 'Tracer caught signal' || return 1
  done <"$dir/LastTestsFailed.log"
}

# Runs one preset's tests, then says how many ran and how many were skipped. Under CI=true
# (.ci/run sets it) a skip fails the run: a test that cannot find its component (dockerd, jq, ...)
# fails itself there, and this catches any skip that slips through. A test over the time limit
# fails the run even where CTest let it pass.
test_preset() {
  local preset=$1 log=$PHASE_LOGS/ctest-$1.log rc total skipped slow dir
  dir=$(preset_build_dir "$1")
  phase_tests "$preset" "$log"
  set +e
  ctest --preset "$preset" -j "$jobs" --timeout "$PHASE_TEST_LIMIT_S" --no-tests=error 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  total=$(sed -n 's/.* tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  skipped=$(grep -c '(Skipped)' "$log" || true)
  # Those crashes are rerun once, and said; any other failure stands (docs/testing.md).
  if [ "$rc" -ne 0 ] && only_tracer_crashes "$dir"; then
    echo "test.sh: LeakSanitizer's tracer crashed at exit in" \
      "$(cut -d: -f2 "$dir/Testing/Temporary/LastTestsFailed.log" | tr '\n' ' ')- rerunning once" | tee -a "$log"
    set +e
    ctest --preset "$preset" --rerun-failed --timeout "$PHASE_TEST_LIMIT_S" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    set -e
  fi
  echo "test.sh: preset $preset: ${total:-0} tests, $((${total:-0} - skipped)) ran, $skipped skipped"
  slow=$(phase_slow_tests "$log")
  if [ -n "$slow" ]; then
    echo "test.sh: tests over the ${PHASE_TEST_LIMIT_S}s limit of a single test (docs/testing.md):" >&2
    echo "$slow" >&2
    return 1
  fi
  [ "$rc" -eq 0 ] || return "$rc"
  if [ "${CI:-}" = true ] && [ "$skipped" -gt 0 ]; then
    echo "test.sh: $skipped test(s) skipped under CI=true: a skip in CI is a failure" >&2
    return 1
  fi
}

phase install scripts/install-deps.sh
phase format scripts/check-format.sh
# Each folder includes only from the rooms below it (docs/architecture.md).
phase layers scripts/check-layers.sh
# A real Docker Engine for the docker driver's tests (they skip without one, and fail under CI=true).
phase dockerd scripts/start-docker.sh
phase "build default" build_preset default
[ "$asan" = yes ] && phase_start "build asan" build_preset asan
phase "tests default" test_preset default
if [ "$asan" = yes ]; then
  phase_wait "build asan"
  phase_start "build fuzz" scripts/fuzz.sh --build-only
  phase "tests asan" test_preset asan
  phase_wait "build fuzz"
  # Each parser of untrusted input, fuzzed from its seed corpus; any finding fails the run.
  phase "fuzz run" scripts/fuzz.sh --run-only "${SANDBOXER_FUZZ_SECONDS:-360}"
fi
echo "all tests passed"
