#!/usr/bin/env bash
# pause and resume on the stub (docs/pause.md): the verbs, list, the history and its CloudEvents,
# exec refused (exit 10) or resuming first (resume: {on_exec: true}), a process stopped while paused
# and going on after, ttl.paused_max through reap with the test clock, a driver that cannot pause
# (exit 7), and pauses and resumes SIGKILLed at random moments, settled by reap.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip "jq is missing"

stub_profile plain <<'EOF'
  latency: {}
EOF
cat >>"$PROFILES/plain.yaml" <<EOF
events: [ { type: jsonl, path: "$WORK/events.jsonl" } ]
EOF
stub_profile on-exec <<'EOF'
  latency: {}
EOF
printf 'resume: { on_exec: true }\n' >>"$PROFILES/on-exec.yaml"

# The verbs, on a sandbox with a process that counts in the background. It renames each count into
# place: a pause may stop it between truncating a file and writing it, and the reads below need a number.
expect_code 0 sbx create --profile plain --name counter -o json
ID=$(jq -r .id <<<"$OUT")
expect_code 0 sbx exec counter -- sh -c \
  'printf kept > note.txt; (i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo $i > ticks.new; mv ticks.new ticks; sleep 0.1; done) >/dev/null 2>&1 </dev/null & echo $! > ticks.pid'
FILES=$(record "$ID" .info.path)
for _ in $(seq 50); do [ "$(cat "$FILES/ticks" 2>/dev/null || echo 0)" -ge 2 ] && break; sleep 0.1; done
COUNTER=$(cat "$FILES/ticks.pid")
at_exit "kill $COUNTER 2>/dev/null"

expect_code 0 sbx pause counter -o json
[ "$(jq -r '.[0] | "\(.id) \(.state) \(.how) \(.memory) \(.already) \(.error)"' <<<"$OUT")" = \
  "$ID paused sigstop true false null" ] || fail "pause -o json: $OUT"
[ "$(cut -d' ' -f3 "/proc/$COUNTER/stat")" = T ] || fail "the counter is not stopped while paused"
BEFORE=$(cat "$FILES/ticks")
sleep 1
[ "$(cat "$FILES/ticks")" = "$BEFORE" ] || fail "the counter counted while paused"
expect_code 0 sbx list
expect_contains "$OUT" "$ID"
grep "$ID" <<<"$OUT" | grep -q paused || fail "list does not say paused: $OUT"
expect_code 0 sbx list --state paused -q
[ "$OUT" = "$ID" ] || fail "list --state paused: $OUT"
expect_code 0 sbx status counter -o json
[ "$(jq -r '.state, .pause.how, .pause.memory' <<<"$OUT" | tr '\n' ' ')" = "paused sigstop true " ] ||
  fail "status of a paused sandbox: $OUT"
# exec and cp refuse, and say how to resume.
expect_code 10 sbx exec counter -- true
expect_contains "$ERR" "sandboxer resume $ID"
expect_code 10 sbx cp counter:/note.txt "$WORK/note"
expect_contains "$ERR" "it is paused"
# Again: nothing done, nothing written.
ENTRIES=$(record "$ID" '.history | length')
expect_code 0 sbx pause counter -o json
[ "$(jq -r '.[0].already' <<<"$OUT")" = true ] || fail "a second pause: $OUT"
[ "$(record "$ID" '.history | length')" = "$ENTRIES" ] || fail "a second pause wrote history"

expect_code 0 sbx resume counter -o json
[ "$(jq -r '.[0] | "\(.state) \(.already)"' <<<"$OUT")" = "running false" ] || fail "resume: $OUT"
for _ in $(seq 30); do [ "$(cat "$FILES/ticks")" -gt "$BEFORE" ] && break; sleep 0.1; done
[ "$(cat "$FILES/ticks")" -gt "$BEFORE" ] || fail "the counter did not go on after the resume"
expect_code 0 sbx exec counter -- cat note.txt
[ "$OUT" = kept ] || fail "the file after the resume: $OUT"
expect_code 0 sbx resume counter -o json
[ "$(jq -r '.[0].already' <<<"$OUT")" = true ] || fail "a resume of a running sandbox: $OUT"

# The history and the events: pausing, paused, resuming, resumed, in order, with their details.
expect_code 0 sbx history counter -o json
[ "$(jq -r '[.[] | .event] | map(select(test("paus|resum"))) | join(" ")' <<<"$OUT")" = \
  "pausing paused resuming resumed" ] || fail "history: $(jq -c '[.[] | .event]' <<<"$OUT")"
[ "$(jq -r '[.[] | select(.event == "paused")][0].details | "\(.how) \(.memory)"' <<<"$OUT")" = \
  "sigstop true" ] || fail "the paused entry's details: $OUT"
jq -e '[.[] | select(.event == "resumed")][0].details.paused_for' <<<"$OUT" >/dev/null ||
  fail "the resumed entry has no paused_for"
[ "$(jq -r 'select(.subject == "'"$ID"'") | .type' "$WORK/events.jsonl" | grep -c 'sandbox\.\(pausing\|paused\|resuming\|resumed\)$')" = 4 ] ||
  fail "CloudEvents: $(jq -r .type "$WORK/events.jsonl" | tr '\n' ' ')"
expect_code 0 sbx ledger verify

# Several at once: each its own outcome, exit 6 when some failed, 3 for the one unknown.
expect_code 0 sbx create --profile plain --name second --quiet
expect_code 6 sbx pause second nosuch -o json
[ "$(jq -r '[.[] | .error != null] | join(" ")' <<<"$OUT")" = "false true" ] || fail "$OUT"
expect_code 6 sbx resume second nosuch
expect_code 3 sbx resume nosuch

# resume: {on_exec: true}: exec resumes it first.
expect_code 0 sbx create --profile on-exec --name auto --quiet
expect_code 0 sbx pause auto --quiet
expect_code 0 sbx exec auto -- echo hello
[ "$OUT" = hello ] || fail "exec with resume on exec: $OUT"
[ "$(sbx status auto -o json | jq -r .state)" = running ] || fail "on_exec did not resume"
expect_contains "$(sbx history auto -o json | jq -r '.[] | select(.event == "resuming") | .reason')" \
  "resume on exec"

# ttl.paused_max: the TTL stands still while paused; reap destroys it past paused_max.
SANDBOXER_PLAIN=$SANDBOXER
SANDBOXER="$SANDBOXER_TESTCLOCK"
stub_profile parked <<'EOF'
  latency: {}
EOF
sed -i 's/^ttl: .*/ttl: { default: 1h, max: 1d, paused_max: 2h }/' "$PROFILES/parked.yaml"
at() { local t=$1; shift; SANDBOXER_FAKE_NOW=$t sbx "$@"; }
expect_code 0 at 2026-12-02T10:00:00Z create --profile parked --name parked -o json
PARKED=$(jq -r .id <<<"$OUT")
expect_code 0 at 2026-12-02T10:20:00Z pause parked -o json
[ "$(jq -r '.[0].expires_at' <<<"$OUT")" = 2026-12-02T12:20:00Z ] || fail "paused deadline: $OUT"
expect_code 0 at 2026-12-02T11:00:00Z resume parked -o json
# 40 minutes of the running TTL were left at the pause: given back at the resume.
[ "$(jq -r '.[0].expires_at' <<<"$OUT")" = 2026-12-02T11:40:00Z ] || fail "resumed deadline: $OUT"
expect_code 0 at 2026-12-02T11:10:00Z pause parked --quiet
expect_code 0 at 2026-12-02T12:00:00Z reap -o json
[ "$(record "$PARKED" .state)" = paused ] || fail "reaped before paused_max"
expect_code 0 at 2026-12-02T13:11:00Z reap -o json
[ "$(record "$PARKED" .state)" = destroyed ] || fail "not reaped past paused_max: $OUT"
expect_contains "$(record "$PARKED" '.history[-1].reason')" "ttl.paused_max 2h"
SANDBOXER="$SANDBOXER_PLAIN"

# Pauses and resumes SIGKILLed at random moments: the ledger stays whole, and reap settles each
# to paused or running, the processes stopped exactly when paused.
stub_profile slow <<'EOF'
  latency: { pause: 300ms, resume: 300ms }
EOF
expect_code 0 sbx create --profile slow --name crashy -o json
CRASHY=$(jq -r .id <<<"$OUT")
CRASHY_FILES=$(record "$CRASHY" .info.path)
expect_code 0 sbx exec crashy -- sh -c 'printf intact > file.txt; (while :; do sleep 0.2; done) >/dev/null 2>&1 </dev/null & echo $! > loop.pid'
LOOP=$(cat "$CRASHY_FILES/loop.pid")
at_exit "kill -CONT $LOOP 2>/dev/null; kill $LOOP 2>/dev/null"
for round in $(seq 8); do
  verb=pause
  [ "$(record "$CRASHY" .state)" = paused ] && verb=resume
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" "$verb" crashy >/dev/null 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 5))$((RANDOM % 10))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  state=$(record "$CRASHY" .state) || fail "round $round: the ledger does not parse"
  case $state in running | paused | pausing | resuming) ;; *) fail "round $round: $state" ;; esac
  expect_code 0 sbx reap --stuck-after 0s
  state=$(record "$CRASHY" .state)
  case $state in running | paused) ;; *) fail "round $round: reap left it $state" ;; esac
  stopped=$([ "$(cut -d' ' -f3 "/proc/$LOOP/stat")" = T ] && echo paused || echo running)
  [ "$stopped" = "$state" ] || fail "round $round: recorded $state, the process is $stopped"
  [ "$(cat "$CRASHY_FILES/file.txt")" = intact ] || fail "round $round: the file changed"
done
expect_code 0 sbx ledger verify
expect_code 0 sbx destroy --all --yes
if alive "$LOOP" && [ "$(cut -d' ' -f3 "/proc/$LOOP/stat")" = T ]; then
  fail "destroy left a stopped process"
fi
