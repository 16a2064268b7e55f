#!/usr/bin/env bash
# `sandboxer cp` on the stub driver (its native copy): docker cp's rules for where a copy goes,
# every kind of entry kept, tar streams on stdin and stdout, --verify, --owner, the history and
# its digests, and each refusal with its exit code (docs/cp.md).
. "$(dirname "$0")/lib.sh"
stub_profile box </dev/null
stub_profile slow <<<'  latency: { copy: 5s }'

expect_code 0 sbx create --profile box --name box -o json
ID=$(jq -r .id <<<"$OUT")
# The sandbox's root on this machine (the stub runs commands in it).
expect_code 0 sbx exec box -- pwd
ROOT=$OUT

# A tree with every kind of entry.
T="$WORK/tree"
mkdir -p "$T/empty dir" "$T/sub"
head -c 3000000 /dev/urandom >"$T/sub/random.bin"
: >"$T/empty"
printf '#!/bin/sh\necho ran\n' >"$T/run.sh" && chmod 755 "$T/run.sh"
printf 'utf-8\n' >"$T/name with spaces é.txt"
ln -s sub/random.bin "$T/link"
touch -d 2001-09-09T01:46:40Z "$T/sub/random.bin"

# A directory into an existing directory lands under its own name.
expect_code 0 sbx cp -o json "$T" box:/
jq -e '.direction == "in" and .via == "native" and .files == 4 and .destination == "/tree"
  and (.sha256 | length) == 64 and .verified == null' <<<"$OUT" >/dev/null || fail "cp in json: $OUT"
diff -r --no-dereference "$T" "$ROOT/tree" || fail "the tree in the sandbox differs"
[ "$(readlink "$ROOT/tree/link")" = sub/random.bin ] || fail "the link was not copied as a link"
[ "$(stat -c %a "$ROOT/tree/run.sh")" = 755 ] || fail "the exec bit was lost"
[ "$(stat -c %Y "$ROOT/tree/sub/random.bin")" = 1000000000 ] || fail "the mtime was lost"
SUM=$(sha256sum "$T/sub/random.bin" | cut -d' ' -f1)
jq -e --arg sum "$SUM" '.file_digests[] | select(.path == "/tree/sub/random.bin") | .sha256 == $sum' \
  <<<"$OUT" >/dev/null || fail "the file's digest is not in the output: $OUT"

# The history says what went in, with the same digests.
jq -e --arg sum "$SUM" '.history[-1] | .event == "files.copied" and .details.copy.outcome == "complete"
  and any(.details.copy.file_digests[]; .sha256 == $sum)' <<<"$(record "$ID" .)" >/dev/null \
  || fail "history: $(record "$ID" '.history[-1]')"

# Out to a missing name: the copy is that name; --verify reads it back.
expect_code 0 sbx cp --verify -o json box:/tree "$WORK/back"
jq -e '.direction == "out" and .verified == true and .files == 4' <<<"$OUT" >/dev/null || fail "cp out: $OUT"
diff -r --no-dereference "$T" "$WORK/back" || fail "the copy out differs"
# SRC/. copies a directory's contents.
mkdir "$WORK/contents"
expect_code 0 sbx cp box:/tree/sub/. "$WORK/contents"
[ -f "$WORK/contents/random.bin" ] && [ ! -e "$WORK/contents/sub" ] || fail "SRC/. copied: $(ls "$WORK/contents")"
# A file onto a file replaces it; a file to a missing name takes that name.
echo new >"$WORK/new.txt"
expect_code 0 sbx cp "$WORK/new.txt" box:/tree/empty
[ "$(cat "$ROOT/tree/empty")" = new ] || fail "a file onto a file"
expect_code 0 sbx cp "$WORK/new.txt" box:/renamed.txt
[ "$(cat "$ROOT/renamed.txt")" = new ] || fail "a file to a new name"
# Several sources into a directory.
expect_code 0 sbx cp "$WORK/new.txt" "$T/run.sh" box:/tree/sub
[ -f "$ROOT/tree/sub/new.txt" ] && [ -x "$ROOT/tree/sub/run.sh" ] || fail "several sources"

# Tar streams: stdin in, stdout out.
tar -c -C "$T/sub" . | sbx cp - box:/tree/empty\ dir >/dev/null 2>&1 || fail "cp - ID:DIR"
[ -f "$ROOT/tree/empty dir/random.bin" ] || fail "the stdin stream was not unpacked"
sbx cp box:/tree/run.sh - 2>/dev/null | tar -t >"$WORK/listing" || fail "cp ID:SRC -"
grep -qx './run.sh\|run.sh' "$WORK/listing" || fail "the stdout stream lists: $(cat "$WORK/listing")"

# --owner (the stub copies as root here).
if [ "$(id -u)" = 0 ]; then
  expect_code 0 sbx cp --owner 4321:4322 "$WORK/new.txt" box:/owned.txt
  [ "$(stat -c %u:%g "$ROOT/owned.txt")" = 4321:4322 ] || fail "--owner: $(stat -c %u:%g "$ROOT/owned.txt")"
fi
expect_code 2 sbx cp --owner alice "$WORK/new.txt" box:/
expect_code 2 sbx cp --owner 1:1 box:/owned.txt "$WORK/"

# Refusals, each before any transfer, each with its code.
HISTORY=$(record "$ID" '.history | length')
expect_code 3 sbx cp "$WORK/no-such-file" box:/
expect_contains "$ERR" "no-such-file"
expect_code 3 sbx cp box:/no/such/path "$WORK/"
expect_contains "$ERR" "/no/such/path"
expect_code 3 sbx cp "$WORK/new.txt" box:/no/such/dir/x
expect_code 10 sbx cp "$T" box:/renamed.txt
expect_code 10 sbx cp "$WORK/new.txt" box:/missing-dir/
expect_code 10 sbx cp box:/tree "$WORK/new.txt"
expect_code 2 sbx cp "$WORK/new.txt" "$WORK/other.txt"
expect_code 2 sbx cp box:/a box:/b
expect_code 3 sbx cp "$WORK/new.txt" no-such-sandbox:/
[ "$(record "$ID" '.history | length')" -eq "$HISTORY" ] || fail "a refused copy wrote history"

# A signal during a copy: exit 143, and the history says interrupted.
expect_code 0 sbx create --profile slow --name slow -o json
SLOW=$(jq -r .id <<<"$OUT")
# (Not through sbx: the signal goes to sandboxer itself, not to a subshell.)
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" -v cp "$WORK/new.txt" slow:/ \
  >/dev/null 2>"$WORK/slow.err" &
CP=$!
for _ in $(seq 100); do grep -q "cp: sandbox" "$WORK/slow.err" && break; sleep 0.1; done
sleep 0.5
kill -TERM "$CP"
rc=0; wait "$CP" || rc=$?
[ "$rc" = 143 ] || fail "an interrupted cp exited $rc"
jq -e '.history[-1] | .event == "files.copied" and .details.copy.outcome == "interrupted"
  and (.reason | contains("SIGTERM"))' <<<"$(record "$SLOW" .)" >/dev/null \
  || fail "interrupted cp history: $(record "$SLOW" '.history[-1]')"

# A sandbox that is not running.
expect_code 0 sbx destroy box
expect_code 10 sbx cp "$WORK/new.txt" "$ID":/
expect_contains "$ERR" "not running"
echo "ok"
