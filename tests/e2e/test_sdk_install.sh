#!/usr/bin/env bash
# The public SDK face (issue 36.5): `cmake --install` gives an outside C++ project the headers, the
# library and a CMake package; examples/saas-stub built out of the tree with
# find_package(sandboxer-sdk) passes the conformance kit (the whole of test_saas_stub.sh, run on
# that build). The installed headers are only include/sandboxer/: no internal header leaks.
. "$(dirname "$0")/lib.sh"
command -v cmake >/dev/null || skip "cmake is missing"
command -v ninja >/dev/null || skip "ninja is missing"

BUILD_DIR=$(dirname "$SANDBOXER")
PREFIX="$WORK/prefix"
install_into "$PREFIX"
[ -f "$PREFIX/lib/cmake/sandboxer-sdk/sandboxer-sdk-config.cmake" ] || fail "no CMake package installed"
[ -f "$PREFIX/lib/libsandboxer_sdk.a" ] || fail "no SDK library installed"
[ -f "$PREFIX/include/sandboxer/driver.hpp" ] || fail "no SDK headers installed"
# Only the public face: no test hook, no core-only error, no internal header.
! grep -rqE 'allow_fake_now|simulate\(|reset_for_tests|class (UsageError|ProfileError|LedgerError|PolicyError)|#include "' \
  "$PREFIX/include/sandboxer" || fail "an internal declaration is installed: $(grep -rnE 'allow_fake_now|simulate\(|reset_for_tests|#include "' "$PREFIX/include/sandboxer")"

# The build's own sanitizer flags, when it has them: its library is instrumented.
FLAGS=()
if grep -q '^SANDBOXER_SANITIZE:BOOL=ON' "$BUILD_DIR/CMakeCache.txt"; then
  FLAGS=(-DCMAKE_CXX_FLAGS="-fsanitize=address,undefined" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined")
fi
OUT_OF_TREE="$WORK/saas-stub"
cmake -S "$SANDBOXER_SOURCE_DIR/examples/saas-stub" -B "$OUT_OF_TREE" -G Ninja \
  -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release "${FLAGS[@]}" >"$WORK/configure.log" 2>&1 ||
  fail "configuring the example against the installed SDK: $(tail -20 "$WORK/configure.log")"
cmake --build "$OUT_OF_TREE" >"$WORK/build.log" 2>&1 ||
  fail "building the example against the installed SDK: $(tail -20 "$WORK/build.log")"
[ -x "$OUT_OF_TREE/sandboxer-driver-saas-stub" ] || fail "no driver built"
# It was built from the installed headers, not the tree's.
grep -q "$PREFIX/include" "$OUT_OF_TREE/build.ninja" || fail "the build did not use the installed headers"
! grep -q "$SANDBOXER_SOURCE_DIR/include" "$OUT_OF_TREE/build.ninja" || fail "the build used the tree's headers"

SANDBOXER_SAAS_STUB="$OUT_OF_TREE/sandboxer-driver-saas-stub" \
  bash "$SANDBOXER_SOURCE_DIR/tests/e2e/test_saas_stub.sh" || fail "the out-of-tree driver failed test_saas_stub.sh"
echo ok
