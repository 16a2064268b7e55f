#!/usr/bin/env bash
# Hostile neighbours (issue 34.3): what another user plants where sandboxer reads or writes (a
# FIFO, a symlink, a file of theirs, a directory they can write) is refused, never followed, never
# waited on. Every command runs under a timeout: a blocked open must fail the test, not hang it.
. "$(dirname "$0")/lib.sh"
stub_profile dev <<<"  root: $WORK/backend"
bounded() { timeout -k 5 60 "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" "$@"; }
ID=$(sbx create --profile dev --quiet)

# reap --metrics-file: the previous file is read only when it is our own regular file.
M="$WORK/textfile/reap.prom"
mkdir -p "$WORK/textfile"
mkfifo "$M"
expect_code 0 bounded reap --metrics-file "$M"
expect_contains "$ERR" "refusing the previous --metrics-file $M: it is a FIFO"
[ -f "$M" ] && [ ! -L "$M" ] || fail "the FIFO was not replaced by the metrics"
grep -q '^sandboxer_reap_duration_seconds ' "$M" || fail "metrics: $(cat "$M")"
printf 'top-secret-value 42\n' >"$WORK/secret"
chmod 600 "$WORK/secret"
for target in /dev/zero "$WORK/secret"; do
  rm -f "$M"
  ln -s "$target" "$M"
  expect_code 0 bounded reap --metrics-file "$M"
  expect_contains "$ERR" "it is a symbolic link"
  [ ! -L "$M" ] || fail "the link to $target is still there"
  ! grep -q top-secret "$M" || fail "the linked file's content was copied out"
done
[ "$(cat "$WORK/secret")" = "top-secret-value 42" ] || fail "the link's target changed"

# The ledger's own files: a journal directory others can write is refused before a write, and a
# segment swapped for a link is neither read nor truncated through it.
expect_code 0 sbx destroy "$ID"
SEGMENT=$(ls "$STATE"/journal/segment-*.jsonl | tail -1)
chmod 0777 "$STATE/journal"
expect_code 1 bounded create --profile dev
expect_contains "$ERR" "refusing journal directory $STATE/journal: it is writable by others (mode 0777)"
chmod 0700 "$STATE/journal"
head -c 600000 /dev/urandom >"$WORK/precious"
mv "$SEGMENT" "$WORK/segment.real"
ln -s "$WORK/precious" "$SEGMENT"
ID2=$(sbx create --profile dev --quiet)
expect_code 1 bounded destroy "$ID2"
expect_contains "$ERR" "it is a symbolic link"
[ "$(stat -c %s "$WORK/precious")" = 600000 ] || fail "the link's target was truncated"
expect_code 1 bounded ledger verify
expect_contains "$ERR" "it is a symbolic link"
rm "$SEGMENT" && mv "$WORK/segment.real" "$SEGMENT"
expect_code 0 bounded destroy "$ID2"

# A ledger.json, a segment or a lock file another user owns, or a FIFO in their place.
if [ "$(id -u)" = 0 ]; then
  chown nobody "$STATE/ledger.json"
  expect_code 1 bounded list
  expect_contains "$ERR" "refusing ledger $STATE/ledger.json: it belongs to uid $(id -u nobody)"
  chown root "$STATE/ledger.json"
  chown nobody "$SEGMENT"
  expect_code 1 bounded ledger verify
  expect_contains "$ERR" "it belongs to uid $(id -u nobody)"
  chown root "$SEGMENT"
fi
rm -f "$STATE/ledger.lock"
mkfifo "$STATE/ledger.lock"
expect_code 1 bounded create --profile dev
expect_contains "$ERR" "refusing lock file $STATE/ledger.lock: it is a FIFO"
rm "$STATE/ledger.lock"
expect_code 0 bounded ledger verify
echo ok
