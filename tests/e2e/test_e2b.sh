#!/usr/bin/env bash
# The e2b driver against tests/fake_e2b/server.py, a local server that follows E2B's API spec:
# the whole lifecycle, error handling, reap, and where the API key may and may not appear.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "python3 is missing"
command -v curl >/dev/null || skip "curl is missing"
cd "$WORK"

start_fake_e2b
fake() { curl -sf "$FAKE_URL/_control/$1" ${2:+-H 'Content-Type: application/json' -d "$2"}; }
# posts METHOD on PATH seen by the fake, with STATUS: "GET /sandboxes/x 503".
seen() { fake requests | jq -r '.[] | select(.path | startswith("/_control") | not) | "\(.method) \(.path) \(.status)"'; }

export E2B_API_KEY="$KEY"
# Everything the binary prints, kept to grep for the key at the end.
LOG="$WORK/all-output"
run() {
  expect_code "$@"
  printf '%s\n%s\n' "$OUT" "$ERR" >>"$LOG"
}

cat >"$PROFILES/e2b.yaml" <<'EOF2'
driver: e2b
ttl: { default: 30m, max: 2h }
labels: { team: e2e }
env: { FROM_PROFILE: yes-profile }
secrets:
  api_key: { env: E2B_API_KEY }
e2b:
  template: base
  api_url: ${FAKE_URL}
  envd_url: ${FAKE_URL}
  env: { FROM_SPEC: yes-spec }
  metadata: { purpose: e2e }
EOF2
sed 's/^  template: base/  template: base\n  on_expiry: pause/' "$PROFILES/e2b.yaml" >"$PROFILES/e2b-pause.yaml"

# The example profile of the repository validates.
run 0 "$SANDBOXER" profiles validate "$SANDBOXER_SOURCE_DIR/profiles/e2b-base.yaml"

# create: metadata carries the ownership labels, E2B's timeout is the TTL plus the grace.
run 0 sbx -v create --profile e2b --name one -o json
ID=$(jq -r .id <<<"$OUT")
BID=$(jq -r .backend_id <<<"$OUT")
LEDGER_ID=$(ledger_jq .ledger_id)
REMOTE=$(fake sandboxes | jq ".\"$BID\"")
[ "$(jq -r '.metadata["sandboxer.id"]' <<<"$REMOTE")" = "$ID" ] || fail "metadata sandboxer.id: $REMOTE"
[ "$(jq -r '.metadata["sandboxer.ledger"]' <<<"$REMOTE")" = "$LEDGER_ID" ] || fail "sandboxer.ledger"
[ "$(jq -r '.metadata.team' <<<"$REMOTE")" = e2e ] || fail "profile labels"
[ "$(jq -r '.metadata.purpose' <<<"$REMOTE")" = e2e ] || fail "spec metadata"
# (The time left when the driver sends it: a loaded machine may have spent a second or two.)
T=$(jq -r .timeout <<<"$REMOTE")
[ "$T" -ge $((30 * 60 + 60 - 5)) ] && [ "$T" -le $((30 * 60 + 60)) ] || fail "timeout: $T"
[ "$(jq -r .autoPause <<<"$REMOTE")" = false ] || fail "autoPause"

# ports: (docs/ports.md): E2B's host per port, as its SDKs build it (PORT-ID.DOMAIN); nothing is
# bound here, so a host_port is refused before anything is made.
{ cat "$PROFILES/e2b.yaml"; printf 'ports: [8080, 3000]\n'; } >"$PROFILES/e2b-web.yaml"
run 0 sbx create --profile e2b-web --name web -o json
WEB_BID=$(jq -r .backend_id <<<"$OUT")
DOMAIN=$(jq -r '.info.domain // "e2b.app"' <<<"$(sbx status web -o json)")
[ "$(jq -c '[.ports[] | [.port, .protocol, .host, .host_port, .url]]' <<<"$OUT")" = \
  "[[8080,\"tcp\",\"8080-$WEB_BID.$DOMAIN\",null,\"https://8080-$WEB_BID.$DOMAIN\"],[3000,\"tcp\",\"3000-$WEB_BID.$DOMAIN\",null,\"https://3000-$WEB_BID.$DOMAIN\"]]" ] ||
  fail "e2b ports: $OUT"
run 0 sbx port web 8080
[ "$OUT" = "https://8080-$WEB_BID.$DOMAIN" ] || fail "port web 8080: $OUT"
# forward: E2B's URL is reached from anywhere; nothing is proxied, it says where and ends.
run 0 sbx forward web 8080 -o json
[ "$(jq -c '[.proxied, .forwards[0].url, .forwards[0].local_port]' <<<"$OUT")" = \
  "[false,\"https://8080-$WEB_BID.$DOMAIN\",null]" ] || fail "forward on e2b: $OUT"
run 3 sbx forward web 9999
run 0 sbx destroy web
SANDBOXES_BEFORE=$(fake sandboxes | jq length)
{ cat "$PROFILES/e2b.yaml"; printf 'ports: [{port: 8080, host_port: 18080}]\n'; } >"$PROFILES/e2b-hostport.yaml"
run 2 sbx create --profile e2b-hostport
expect_contains "$ERR" "host_port"
[ "$(fake sandboxes | jq length)" = "$SANDBOXES_BEFORE" ] || fail "a refused create made an E2B sandbox"

# list shows it; status asks E2B.
run 0 sbx list -o json
[ "$(jq -r --arg id "$ID" '[.[] | select(.id == $id)] | length' <<<"$OUT")" = 1 ] || fail "list: $OUT"
run 0 sbx status one -o json
[ "$(jq -r .backend.state <<<"$OUT")" = running ] || fail "status: $OUT"

# exec through envd: stdout and stderr apart, the exit code, env from the profile and the spec.
run 5 sbx exec one -- sh -c 'echo "out $FROM_PROFILE $FROM_SPEC"; echo err >&2; exit 5'
[ "$OUT" = "out yes-profile yes-spec" ] || fail "exec stdout: $OUT"
[ "$ERR" = err ] || fail "exec stderr: $ERR"

# cp through envd's /files (native: envd's exec has no stdin): every kind of entry in and back
# out, compared byte for byte with modes, times and links. The fake's sandbox paths are this
# machine's, so the destination is a directory of the test.
BOX="$WORK/e2b-box"
mkdir -p "$BOX" "$WORK/cp-src/tree/empty dir"
T="$WORK/cp-src/tree"
printf "$(printf '\\%03o' $(seq 0 255))" >"$T/all-bytes"
: >"$T/empty"
printf '#!/bin/sh\necho hi\n' >"$T/run.sh" && chmod 755 "$T/run.sh"
UTF8_NAME=$'sp ace \xc3\xbc.txt'
echo utf8 >"$T/$UTF8_NAME"
head -c $((50 << 20)) /dev/urandom >"$T/big"
ln -s all-bytes "$T/link"
touch -d @1700000000 "$T/all-bytes" "$T/run.sh"
[ "$(wc -c <"$T/all-bytes")" = 256 ] || fail "the 256-byte file has $(wc -c <"$T/all-bytes") bytes"
run 0 sbx cp -v --verify -o json "$T" "one:$BOX"
jq -e '.direction == "in" and .via == "native" and .verified == true and .files == 5' <<<"$OUT" >/dev/null || fail "cp in: $OUT"
run 0 sbx cp --verify -o json "one:$BOX/tree" "$WORK/cp-back"
jq -e '.direction == "out" and .via == "native" and .verified == true and .files == 5' <<<"$OUT" >/dev/null || fail "cp out: $OUT"
for f in all-bytes empty run.sh "$UTF8_NAME" big; do
  cmp "$T/$f" "$WORK/cp-back/$f" || fail "cp round trip: $f differs"
done
[ "$(stat -c %a "$WORK/cp-back/run.sh")" = 755 ] || fail "cp: the exec bit was lost"
[ "$(stat -c %Y "$WORK/cp-back/all-bytes")" = 1700000000 ] || fail "cp: the mtime was lost"
[ "$(readlink "$WORK/cp-back/link")" = all-bytes ] || fail "cp: the link is not a link"
[ -d "$WORK/cp-back/empty dir" ] || fail "cp: the empty directory is missing"
run 3 sbx cp "one:$BOX/missing" "$WORK/nothing"

# exec -u: envd runs the command as the user it looks up by name; a uid is refused before any call,
# and an unknown name is envd's own "unknown user".
run 0 sbx exec -u nobody one -- id -u
[ "$OUT" = "$(id -u nobody)" ] || fail "exec -u nobody ran as uid $OUT"
run 0 sbx exec one -- id -u
[ "$OUT" = "$(id -u)" ] || fail "exec without -u ran as uid $OUT"
CALLS=$(seen | wc -l)
run 2 sbx exec -u 65534 one -- id -u
grep -q "not a uid" <<<"$ERR" || fail "exec -u 65534: $ERR"
[ "$(seen | wc -l)" = "$CALLS" ] || fail "exec -u 65534 sent a request"
run 4 sbx exec -u no-such-user one -- id -u
grep -q "unknown user no-such-user" <<<"$ERR" || fail "exec -u no-such-user: $ERR"

# logs: E2B's log of the sandbox (GET /v2/sandboxes/{id}/logs): the fake's first entry, then what
# a command printed on the console; ERROR lines are stderr; --tail and -o json shape it.
run 0 sbx exec one -- sh -c 'printf "hello\nERROR broken\n" >>"$SANDBOXER_CONSOLE"'
run 0 sbx logs one
[ "$OUT" = $'sandbox '"$BID"$' started\nhello' ] && [ "$ERR" = "ERROR broken" ] || fail "logs: $OUT / $ERR"
run 0 sbx logs one --tail 1 -o json
jq -e '.line == "ERROR broken" and .stream == "stderr" and (.time | test("Z$"))' <<<"$OUT" >/dev/null \
  || fail "logs --tail 1 -o json: $OUT"
run 0 sbx logs one --since 2099-01-01T00:00:00Z
[ -z "$OUT" ] || fail "logs --since the future: $OUT"
seen | grep -q '^GET /v2/sandboxes/'"$BID"'/logs?direction=forward&limit=1000&cursor=4070908800000 200$' \
  || fail "logs --since did not ask from its cursor: $(seen | grep logs)"

# snapshot, then restore into a new sandbox that has the files of the moment of the snapshot.
run 0 sbx exec one -- sh -c 'echo before > mark'
run 0 sbx snapshot one --name s1 -o json
SNAP_REF=$(jq -r .backend_ref <<<"$OUT")
[ "$SNAP_REF" = "$ID-s1:default" ] || fail "snapshot ref: $SNAP_REF"
fake templates | jq -e --arg t "$ID-s1" 'index($t) != null' >/dev/null || fail "no snapshot template"
run 0 sbx exec one -- sh -c 'echo after > mark'
run 0 sbx restore "one:s1" --name two -o json
ID2=$(jq -r .id <<<"$OUT")
BID2=$(jq -r .backend_id <<<"$OUT")
[ "$BID2" != "$BID" ] || fail "restore reused the sandbox"
run 0 sbx exec two -- cat mark
[ "$OUT" = before ] || fail "restored content: $OUT"

# extend: E2B's deadline follows the ledger's (plus the grace).
END_BEFORE=$(fake sandboxes | jq ".\"$BID\".endAt")
run 0 sbx extend one --by 30m -o json
LEDGER_END=$(date -d "$(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .expires_at')" +%s)
END_AFTER=$(fake sandboxes | jq ".\"$BID\".endAt")
python3 -c "import sys; d = $END_AFTER - $LEDGER_END; sys.exit(0 if 55 <= d <= 65 else 1)" ||
  fail "E2B's end $END_AFTER is not the ledger's $LEDGER_END plus the grace"
python3 -c "import sys; sys.exit(0 if $END_AFTER - $END_BEFORE > 1700 else 1)" || fail "extend did not move it"

# destroy: gone from E2B; a sandbox E2B already dropped counts as destroyed.
run 0 sbx destroy one
[ "$(fake sandboxes | jq "has(\"$BID\")")" = false ] || fail "destroy left the sandbox"
curl -sf -X DELETE -H "X-API-KEY: $KEY" "$FAKE_URL/sandboxes/$BID2" -o /dev/null || true
run 0 sbx destroy two
[ "$(ledger_jq --arg id "$ID2" '.sandboxes[] | select(.id == $id) | .state')" = destroyed ] ||
  fail "a sandbox gone from E2B is not destroyed"
run 0 sbx snapshots rm "one:s1"
fake templates | jq -e --arg t "$ID-s1" 'index($t) == null' >/dev/null || fail "snapshot template left"

# on_expiry: pause -> E2B pauses at its deadline; exec resumes it.
run 0 sbx create --profile e2b-pause --name paused -o json
PBID=$(jq -r .backend_id <<<"$OUT")
[ "$(fake sandboxes | jq ".\"$PBID\".autoPause")" = true ] || fail "autoPause not sent"
fake advance '{"seconds": 1900}' >/dev/null
run 0 sbx status paused -o json
[ "$(jq -r .backend.state <<<"$OUT")" = paused ] || fail "not paused: $OUT"
run 0 sbx exec paused -- echo resumed
[ "$OUT" = resumed ] || fail "exec after pause: $OUT"
[ "$(fake sandboxes | jq -r ".\"$PBID\".state")" = running ] || fail "not resumed"
run 0 sbx destroy paused

# Errors, each before or after exactly the requests it should make.
count() { seen | wc -l; }
BEFORE=$(count)
E2B_API_KEY='' run 2 sbx create --profile e2b
expect_contains "$ERR" "E2B_API_KEY is not set"
E2B_API_KEY='not-a-key' run 2 sbx create --profile e2b
expect_contains "$ERR" 'does not look like an E2B API key'
[ "$(count)" = "$BEFORE" ] || fail "a missing or malformed key still sent a request"

E2B_API_KEY="e2b_00000000000000000000000000000000deadbeef" run 4 sbx create --profile e2b
expect_contains "$ERR" "Invalid API key (code 401) (HTTP 401)"
[ "$(grep -c . <<<"$ERR")" = 1 ] || fail "not one line: $ERR"

# 429: waited out (Retry-After), then the create goes through.
fake inject '{"status": 429, "count": 1, "method": "POST", "path": "/sandboxes", "retry_after": 1}' >/dev/null
run 0 sbx create --profile e2b --name limited -o json
[ "$(seen | grep -c '^POST /sandboxes 429$')" = 1 ] || fail "no 429 seen"
run 0 sbx destroy limited

# 503 on GET is retried; on POST create it is not (the sandbox might exist already).
run 0 sbx create --profile e2b --name flaky -o json
FBID=$(jq -r .backend_id <<<"$OUT")
fake inject '{"status": 503, "count": 2, "method": "GET", "path": "/sandboxes"}' >/dev/null
run 0 sbx status flaky -o json
[ "$(jq -r .backend.state <<<"$OUT")" = running ] || fail "status after 503s: $OUT"
[ "$(seen | grep -c "^GET /sandboxes/$FBID 503$")" = 2 ] || fail "GET was not retried twice"
fake inject '{"status": 503, "count": 1, "method": "POST", "path": "/sandboxes"}' >/dev/null
POSTS=$(seen | grep -c '^POST /sandboxes ' || true)
run 4 sbx create --profile e2b
expect_contains "$ERR" "(HTTP 503)"
[ "$(seen | grep -c '^POST /sandboxes ')" = $((POSTS + 1)) ] || fail "create was retried after a 503"

# A create whose answer is lost after E2B made the sandbox (issue 34.7): the create fails, and the
# sandbox it made, found by its sandboxer.id metadata, is killed: nothing is left that no record
# tracks. (It is not adopted: its envd access token came only in the lost answer.)
live() { fake sandboxes | jq '[.[] | select(.state == "running")] | length'; }
LIVE=$(live)
fake inject '{"lose": true, "count": 1, "method": "POST", "path": "/sandboxes"}' >/dev/null
run 4 sbx create --profile e2b --name lost -o json
expect_contains "$ERR" "removed the 1 backend resource(s) it had made"
[ "$(seen | grep -c '^POST /sandboxes lost$')" = 1 ] || fail "the answer was not lost: $(seen | tail -3)"
[ "$(live)" = "$LIVE" ] || fail "the lost create left a sandbox: $(live) running, $LIVE before"

# A timeout beyond the E2B plan is a TTL cap (exit 7).
fake max_timeout '{"seconds": 3600}' >/dev/null
run 7 sbx create --profile e2b --ttl 2h
expect_contains "$ERR" "Timeout cannot be greater than 1 hours"
# ... and so is an extend beyond it; the ledger keeps its deadline.
FLAKY_END=$(ledger_jq '.sandboxes[] | select(.name == "flaky") | .expires_at')
run 7 sbx extend flaky --by 1h
expect_contains "$ERR" "Timeout cannot be greater than 1 hours"
[ "$(ledger_jq '.sandboxes[] | select(.name == "flaky") | .expires_at')" = "$FLAKY_END" ] ||
  fail "a refused extend moved the ledger's deadline"
fake max_timeout '{"seconds": 86400}' >/dev/null

# reap: one sandbox past the ledger's deadline, one E2B already killed on its own clock.
run 0 sbx create --profile e2b --name short --ttl 1m -o json
SBID=$(jq -r .backend_id <<<"$OUT")
run 0 sbx create --profile e2b --name gone --ttl 2m -o json
GBID=$(jq -r .backend_id <<<"$OUT")
curl -sf -X POST -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' -d '{"timeout": 0}' \
  "$FAKE_URL/sandboxes/$GBID/timeout" >/dev/null
LATER=$(date -u -d '+10 minutes' +%Y-%m-%dT%H:%M:%SZ)
# Only the test build honours SANDBOXER_FAKE_NOW.
SANDBOXER=$SANDBOXER_TESTCLOCK SANDBOXER_FAKE_NOW="$LATER" run 0 sbx -v reap -o json
[ "$(fake sandboxes | jq "has(\"$SBID\") or has(\"$GBID\")")" = false ] || fail "reap left sandboxes"
for name in short gone; do
  [ "$(ledger_jq --arg n "$name" '.sandboxes[] | select(.name == $n) | .state')" = destroyed ] ||
    fail "$name not destroyed by reap"
done

# Orphans: a sandbox whose record is lost is reported, then killed only with =destroy; one carrying
# another ledger's labels is never touched; a record whose sandbox E2B lost is closed as vanished.
api() { curl -sf -X "$1" -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' ${3:+-d "$3"} \
  "$FAKE_URL$2"; }
run 0 sbx create --profile e2b --name lost -o json
LOST_ID=$(jq -r .id <<<"$OUT")
LOST_BID=$(jq -r .backend_id <<<"$OUT")
jq --arg id "$LOST_ID" '.sandboxes |= map(select(.id != $id))' "$STATE/ledger.json" >"$WORK/l.json"
cp "$WORK/l.json" "$STATE/ledger.json"
FOREIGN_BID=$(api POST /sandboxes '{"templateID": "base", "timeout": 3600, "metadata":
  {"sandboxer.id": "sbx-foreign00000", "sandboxer.ledger": "ldg-another00000"}}' | jq -r .sandboxID)
UNLABELLED_BID=$(api POST /sandboxes '{"templateID": "base", "timeout": 3600}' | jq -r .sandboxID)
run 0 sbx reap --orphans -o json
[ "$(jq -r '[.items[] | select(.action == "orphan") | .id + ":" + .outcome] | join(",")' \
  <<<"$OUT")" = "$LOST_ID:reported" ] || fail "orphan report: $OUT"
[ "$(fake sandboxes | jq "has(\"$LOST_BID\")")" = true ] || fail "a report killed the orphan"
run 0 sbx reap --orphans=destroy -o json
[ "$(jq -r '[.items[] | select(.action == "orphan") | .outcome] | join(",")' <<<"$OUT")" = \
  destroyed ] || fail "orphan destroy: $OUT"
[ "$(fake sandboxes | jq "has(\"$LOST_BID\")")" = false ] || fail "the orphan is still running"
[ "$(fake sandboxes | jq "has(\"$FOREIGN_BID\") and has(\"$UNLABELLED_BID\")")" = true ] ||
  fail "reap touched a sandbox that is not this ledger's"
run 0 sbx create --profile e2b --name vanishing -o json
VANISH_BID=$(jq -r .backend_id <<<"$OUT")
api DELETE "/sandboxes/$VANISH_BID" >/dev/null
run 0 sbx reap --orphans -o json
[ "$(ledger_jq '.sandboxes[] | select(.name == "vanishing") | .state + ":" + .history[-1].reason')" \
  = "destroyed:vanished" ] || fail "vanished record: $(ledger_jq '.sandboxes[] | select(.name == "vanishing")')"
api DELETE "/sandboxes/$FOREIGN_BID" >/dev/null
api DELETE "/sandboxes/$UNLABELLED_BID" >/dev/null

# The key: never in the ledger, the state directory, or anything printed (even with debug logs).
run 0 sbx --log-level debug status flaky
run 0 sbx --log-level debug exec flaky -- echo debug
run 0 sbx --log-level debug destroy flaky
expect_contains "$ERR" "DELETE /sandboxes/$FBID"
grep -rqF "$KEY" "$STATE" && fail "the key is in the state directory"
grep -qF "$KEY" "$LOG" && fail "the key was printed"
VIOLATIONS=$(fake violations)
[ "$VIOLATIONS" = "[]" ] || fail "the fake saw the key where it must not be: $VIOLATIONS"
[ -n "${E2B_TEST_SHOW:-}" ] && cat "$LOG" >&2
echo "ok"
