#!/usr/bin/env bash
# Sets up and runs the whole test suite: installs the build dependencies, checks the C++ follows
# .clang-format, builds with warnings as errors, runs every unit and end-to-end test, then does it
# again under ASan/UBSan.
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/check-format.sh
# A real Docker Engine for the docker driver's tests (they skip, exit 125, without one).
scripts/start-docker.sh

jobs=$(nproc)
run_preset() {
  local preset=$1
  cmake --preset "$preset" -DCMAKE_CXX_FLAGS="-Werror"
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs" --timeout 900
}
run_preset default
if [ "${1:-}" != "--no-asan" ]; then
  run_preset asan
fi
echo "all tests passed"
