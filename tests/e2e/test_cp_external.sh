#!/usr/bin/env bash
# `sandboxer cp` through an external driver's native copy (the protocol's stat_path, copy_in and
# copy_out; docs/driver-protocol.md "Copy"): the stub served by the SDK, whose copy is its own
# (tests/drivers/directory_copy.cpp). Every kind of entry makes the round trip, a driver that dies
# mid-stream fails the copy, and the conformance kit passes its copy checks.
. "$(dirname "$0")/lib.sh"
: "${SANDBOXER_STUB_EXTERNAL:?set SANDBOXER_STUB_EXTERNAL (CTest does)}"
mkdir -p "$WORK/drivers"
ln -s "$SANDBOXER_STUB_EXTERNAL" "$WORK/drivers/sandboxer-driver-stub-external"
export SANDBOXER_DRIVER_PATH="$WORK/drivers"
printf 'driver: stub-external\nstub-external: { root: %s }\n' "$WORK/backend" >"$PROFILES/ext.yaml"

expect_code 0 sbx create --profile ext --name box -o json
BID=$(jq -r .backend_id <<<"$OUT")
ROOT="$WORK/backend/sandboxes/$BID/fs"

# Every kind of entry: all 256 byte values, an empty file, an empty directory, a file of several
# chunks (64 KiB each), a link, the exec bit, an old mtime.
T="$WORK/tree"
mkdir -p "$T/empty dir" "$T/sub"
printf "$(printf '\\%03o' $(seq 0 255))" >"$T/bytes"
[ "$(wc -c <"$T/bytes")" = 256 ] || fail "the 256-byte file has $(wc -c <"$T/bytes") bytes"
: >"$T/empty"
head -c 1500000 /dev/urandom >"$T/sub/big.bin"
printf '#!/bin/sh\necho ran\n' >"$T/run.sh" && chmod 755 "$T/run.sh"
ln -s sub/big.bin "$T/link"
touch -d 2001-09-09T01:46:40Z "$T/sub/big.bin"

expect_code 0 sbx cp -o json "$T" box:/
jq -e '.direction == "in" and .via == "native" and .destination == "/tree"' <<<"$OUT" >/dev/null \
  || fail "cp in: $OUT"
diff -r --no-dereference "$T" "$ROOT/tree" || fail "the tree in the sandbox differs"
cmp "$T/bytes" "$ROOT/tree/bytes" || fail "the byte values differ"
[ "$(readlink "$ROOT/tree/link")" = sub/big.bin ] || fail "the link was not copied as a link"
[ "$(stat -c %a "$ROOT/tree/run.sh")" = 755 ] || fail "the exec bit was lost"
[ "$(stat -c %Y "$ROOT/tree/sub/big.bin")" = 1000000000 ] || fail "the mtime was lost"
[ -d "$ROOT/tree/empty dir" ] || fail "the empty directory is missing"

expect_code 0 sbx cp --verify -o json box:/tree "$WORK/back"
jq -e '.direction == "out" and .via == "native" and .verified == true' <<<"$OUT" >/dev/null \
  || fail "cp out: $OUT"
diff -r --no-dereference "$T" "$WORK/back" || fail "the copy out differs"
[ "$(stat -c %Y "$WORK/back/sub/big.bin")" = 1000000000 ] || fail "the mtime was lost on the way out"
[ "$(stat -c %a "$WORK/back/run.sh")" = 755 ] || fail "the exec bit was lost on the way out"

# A missing path is exit 3, naming it.
expect_code 3 sbx cp box:/no/such "$WORK/none"
expect_contains "$ERR" "/no/such"

# A driver that dies mid copy_out fails the copy (never a short file), and leaves nothing.
SANDBOXER_STUB_EXTERNAL_DIE_IN_COPY_OUT=300000 expect_code 4 sbx cp box:/tree/sub/big.bin "$WORK/cut.bin"
expect_contains "$ERR" "exited before answering copy_out"
[ ! -e "$WORK/cut.bin" ] || fail "a cut copy left $(wc -c <"$WORK/cut.bin") bytes at $WORK/cut.bin"

expect_code 0 sbx destroy box

# The conformance kit's checks of the native copy pass through the protocol. (Its "cp over exec"
# is the core's fallback, which on the stub family runs tar on this machine: not this test's.)
sbx drivers test --profile ext -o json >"$WORK/kit.json" 2>"$WORK/kit.err" || true
OUT=$(cat "$WORK/kit.json")
jq -e '[.checks[] | select(.name == "cp round trip" or .name == "cp of a missing path") | .result]
  == ["pass", "pass"]' \
  <<<"$OUT" >/dev/null || fail "the kit's copy checks: $(jq -c '[.checks[] | {name, result}]' <<<"$OUT")"
echo "ok"
