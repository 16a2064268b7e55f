#!/usr/bin/env bash
# Evidence a user can check: `evidence ID -o json` checked by the Python program of
# docs/evidence.md (stdlib only), on the exported document and on tampered copies; `ledger verify`
# on the whole ledger, and on a ledger edited by hand, a journal line cut short and a foreign
# segment: each named with its file (and offset), the rest still read.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "no /usr/bin/python3"

stub_profile dev <<<'  root: '"$WORK/backend"
export GITHUB_RUN_ID=4242 CI=true
expect_code 0 sbx create --profile dev --name agent --quiet
ID=$OUT
expect_code 3 sbx exec agent -- sh -c 'echo hi; exit 3'
expect_code 0 sbx exec agent -- true
# A copy in and out: the evidence lists both, with each file's digest.
printf 'input bytes\n' >"$WORK/input.txt"
expect_code 0 sbx cp "$WORK/input.txt" agent:/
expect_code 0 sbx cp agent:/input.txt "$WORK/output.txt"
expect_code 0 sbx snapshot agent --name s1 --quiet
expect_code 0 sbx destroy agent
expect_code 0 sbx create --profile dev --name live --quiet
LIVE=$OUT
# A sandbox without snapshots leaves the live document when destroyed: the journal holds it.
expect_code 0 sbx create --profile dev --name gone --quiet
GONE=$OUT
expect_code 0 sbx destroy gone

# The checker, exactly as docs/evidence.md gives it.
sed -n '/^```python$/,/^```$/p' "$SANDBOXER_SOURCE_DIR/docs/evidence.md" | sed '1d;$d' >"$WORK/check.py"
grep -q "def problem" "$WORK/check.py" || fail "no checker in docs/evidence.md"

expect_code 0 sbx evidence "$ID" -o json
SUM=$(sha256sum "$WORK/input.txt" | cut -d' ' -f1)
jq -e --arg sum "$SUM" '[.copies[] | .direction + " " + .file_digests[0].sha256 + " " + .outcome]
  == ["in \($sum) complete", "out \($sum) complete"]' <<<"$OUT" >/dev/null \
  || fail "evidence copies: $(jq -c .copies <<<"$OUT")"
DOC="$WORK/evidence.json"
printf '%s\n' "$OUT" >"$DOC"
[ "$(jq -r .sandbox.id "$DOC")" = "$ID" ] || fail "sandbox: $(head -c 300 "$DOC")"
[ "$(jq -r .sandbox.state "$DOC")" = destroyed ] || fail "state"
[ "$(jq -r .owner.ci.GITHUB_RUN_ID "$DOC")" = 4242 ] || fail "CI variables: $(jq -c .owner "$DOC")"
[ "$(jq -r '.profile.hash' "$DOC")" != "" ] || fail "profile hash"
[ "$(jq -c '[.execs[].exit_code]' "$DOC")" = "[3,0]" ] || fail "execs: $(jq -c .execs "$DOC")"
[ "$(jq -c '[.transitions[].event]' "$DOC")" = '["created","ready","snapshotting","snapshotted","destroying","destroyed"]' ] ||
  fail "transitions: $(jq -c '[.transitions[].event]' "$DOC")"
[ "$(jq '.event_ids | length' "$DOC")" = "$(jq '.sandbox.history | length' "$DOC")" ] || fail "event ids"
[ "$(jq -r .chain.verified "$DOC")" = true ] || fail "chain not verified"
[ "$(jq -r '.snapshots[0].name' "$DOC")" = s1 ] || fail "snapshots: $(jq -c .snapshots "$DOC")"
[ "$($PY "$WORK/check.py" "$DOC")" = ok ] || fail "the checker refuses the exported document"

# Tampered copies: each refused, with what is wrong.
tampered() { # NAME JQ-FILTER EXPECTED-WORDS
  jq "$2" "$DOC" >"$WORK/$1.json"
  local rc=0 said
  said=$($PY "$WORK/check.py" "$WORK/$1.json") || rc=$?
  [ "$rc" = 1 ] || fail "$1: the checker accepted it ($said)"
  expect_contains "$said" "$3"
}
FIRST_EXEC=$(jq '.execs[0].index' "$DOC")
tampered exit-code ".sandbox.history[$FIRST_EXEC].details.exec.exit_code = 0" "history[$((FIRST_EXEC + 1))].prev"
tampered removed 'del(.sandbox.history[2])' "history[2].prev"
tampered reordered '.sandbox.history |= (.[0:2] + [.[3], .[2]] + .[4:])' "history[2].prev"
tampered last-entry '.sandbox.history[-1].actor = "someone else"' "chain_head"
tampered summary '.execs[0].exit_code = 0' "execs does not match"
tampered owner '.owner.user = "mallory"' "owner does not match"
# The record's own fields (issue 34.4): its state and what was fixed at creation are sealed.
tampered state '.sandbox.state = "running"' "state does not match where the history ends"
tampered record-owner '.sandbox.owner.user = "mallory" | .owner.user = "mallory"' "owner differs from the value sealed"
tampered labels '.sandbox.labels = {"team": "other"}' "labels differs from the value sealed"
tampered profile-hash '.sandbox.profile.hash = "sha256:00" | .profile.hash = "sha256:00"' "profile differs from the value sealed"
tampered policy '.sandbox.policy.ttl = 999999' "policy differs from the value sealed"
tampered created-at '.sandbox.created_at = "2020-01-01T00:00:00Z"' "created_at differs from the value sealed"
tampered spec '.sandbox.spec = {}' "spec differs from the value sealed"
tampered driver '.sandbox.driver = "docker"' "driver differs from the value sealed"
# The checker reads stdin too.
[ "$($PY "$WORK/check.py" - <"$DOC")" = ok ] || fail "the checker does not read stdin"
[ "$($PY "$WORK/check.py" <"$WORK/state.json")" != ok ] || fail "the checker accepts a tampered stdin"

# ledger verify: the whole ledger holds.
expect_code 0 sbx ledger verify -o json
[ "$(jq -r .ok <<<"$OUT")" = true ] || fail "verify: $OUT"
[ "$(jq -r .records <<<"$OUT")" = 3 ] || fail "records: $OUT"

# A closed record edited by hand in its journal segment: named with sandbox, index and file.
SEGMENT=$(ls "$STATE"/journal/segment-*.jsonl | head -1)
cp "$SEGMENT" "$WORK/segment.good"
sed -i 's/"reason":"created"/"reason":"made"/' "$SEGMENT"
expect_code 8 sbx ledger verify
expect_contains "$OUT" "sandbox $GONE history[2]"
expect_contains "$OUT" "$SEGMENT"
expect_contains "$ERR" "does not verify"
expect_code 8 sbx evidence "$GONE" -o json
[ "$(jq -r .chain.verified <<<"$OUT")" = false ] || fail "evidence of a broken chain"
cp "$WORK/segment.good" "$SEGMENT"

# A closed record's state edited back to running in the journal (same length: the committed end
# stays right).
sed -i "/\"id\":\"$GONE\"/s/\"state\":\"destroyed\"/\"state\":  \"running\"/" "$SEGMENT"
expect_code 8 sbx ledger verify
expect_contains "$OUT" "its state is running, but its history ends in destroyed"
cp "$WORK/segment.good" "$SEGMENT"

# A live record edited in ledger.json.
jq -c --arg id "$LIVE" '(.sandboxes[] | select(.id == $id) | .history[0].actor) = "x"' \
  "$STATE/ledger.json" >"$WORK/l.json"
cp "$STATE/ledger.json" "$WORK/ledger.good"
cp "$WORK/l.json" "$STATE/ledger.json"
expect_code 8 sbx ledger verify
expect_contains "$OUT" "sandbox $LIVE"
expect_contains "$OUT" "ledger.json"
cp "$WORK/ledger.good" "$STATE/ledger.json"
expect_code 0 sbx ledger verify

# A crash mid-append leaves bytes past the committed end: not read, not a problem, cut by the
# next writer.
printf '{"id":"sbx-halfwritten' >>"$SEGMENT"
expect_code 0 sbx ledger verify
expect_code 0 sbx list -a -q
expect_contains "$OUT" "$GONE"
expect_code 0 sbx destroy live
expect_code 0 sbx ledger verify
if grep -q halfwritten "$STATE"/journal/*.jsonl; then fail "the uncommitted bytes were not cut"; fi

# A corrupt committed line: named with file and byte offset; every other record still read.
OFFSET=$(head -1 "$SEGMENT" | wc -c)
sed -i '2s/^{"id":/{"id";/' "$SEGMENT" # same length: the committed end stays right
expect_code 8 sbx ledger verify
expect_contains "$OUT" "$SEGMENT at byte $((OFFSET + 5))" # the line, then the bad byte in it
expect_code 0 sbx list -a
expect_contains "$OUT" "$LIVE"
expect_contains "$ERR" "$SEGMENT at byte"

# A segment of a newer schema is reported and skipped, not misread.
cp "$WORK/segment.good" "$SEGMENT"
sed -i '1s/"sandboxer_journal":[0-9]*/"sandboxer_journal":9/' "$SEGMENT"
expect_code 8 sbx ledger verify
expect_contains "$OUT" "newer than this sandboxer understands"
echo ok
