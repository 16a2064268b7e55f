#!/usr/bin/env bash
# `sandboxer cp` on the docker driver's native path (the Engine's archive endpoint,
# docs/drivers/docker.md "Copy"): a tree with every kind of entry goes in and comes back the same,
# as seen in the container and here; ownership without and with --owner; --follow; a missing path.
. "$(dirname "$0")/lib.sh"
require_docker
cp "$SANDBOXER_SOURCE_DIR/profiles/default.yaml" "$PROFILES/box.yaml"
expect_code 0 sbx create --profile box --name box -o json
ID=$(jq -r .id <<<"$OUT")
at_exit "sbx destroy --force $ID >/dev/null 2>&1 || true"
CONTAINER=$(record "$ID" .backend_id)

T="$WORK/tree"
mkdir -p "$T/empty dir" "$T/sub"
head -c $((50 * 1024 * 1024)) /dev/urandom >"$T/sub/big.bin"
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)))' >"$T/all-bytes"
: >"$T/empty"
printf '#!/bin/sh\necho ran\n' >"$T/run.sh" && chmod 755 "$T/run.sh"
printf 'utf-8\n' >"$T/name with spaces é ф.txt"
ln -s sub/big.bin "$T/link"
touch -d 2001-09-09T01:46:40Z "$T/sub/big.bin"

expect_code 0 sbx cp -v -o json "$T" box:/tmp
jq -e '.direction == "in" and .via == "native" and .files == 5' <<<"$OUT" >/dev/null || fail "cp in: $OUT"
# In the container, as its own tools see it: root's (no --owner), modes, times, the link, bytes.
expect_code 0 sbx exec box -- sh -c 'cd /tmp/tree && stat -c "%n %a %u:%g" run.sh all-bytes "empty dir" &&
  stat -c %Y sub/big.bin && readlink link && ./run.sh && sha256sum < sub/big.bin && cat "name with spaces é ф.txt"'
BIG=$(sha256sum <"$T/sub/big.bin")
[ "$OUT" = "run.sh 755 0:0
all-bytes 644 0:0
empty dir 755 0:0
1000000000
sub/big.bin
ran
$BIG
utf-8" ] || fail "the tree in the container: $OUT"

# Back out, verified, the same as it went.
expect_code 0 sbx cp --verify -o json box:/tmp/tree "$WORK/back"
jq -e '.direction == "out" and .via == "native" and .verified == true' <<<"$OUT" >/dev/null || fail "cp out: $OUT"
diff -r --no-dereference "$T" "$WORK/back" || fail "the round trip differs"
[ "$(readlink "$WORK/back/link")" = sub/big.bin ] || fail "the link came back as $(stat -c %F "$WORK/back/link")"
[ "$(stat -c %Y "$WORK/back/sub/big.bin")" = 1000000000 ] || fail "the mtime came back changed"

# --owner: the files are that uid:gid in the container.
expect_code 0 sbx cp --owner 4321:4322 "$T/run.sh" box:/tmp/owned.sh
expect_code 0 sbx exec box -- stat -c %u:%g /tmp/owned.sh
[ "$OUT" = 4321:4322 ] || fail "--owner: $OUT"

# --follow: what the link points to, a file here.
expect_code 0 sbx cp -L box:/tmp/tree/link "$WORK/followed"
[ -f "$WORK/followed" ] && [ ! -L "$WORK/followed" ] || fail "--follow copied $(stat -c %F "$WORK/followed")"
cmp -s "$WORK/followed" "$T/sub/big.bin" || fail "--follow copied other bytes"

# A missing path is exit 3 naming it.
expect_code 3 sbx cp "box:/tmp/no such path" "$WORK/"
expect_contains "$ERR" "/tmp/no such path"
[ -n "$CONTAINER" ] || fail "no container recorded"
echo "ok"
