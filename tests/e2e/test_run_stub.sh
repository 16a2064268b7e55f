#!/usr/bin/env bash
# `sandboxer run` on the stub (docs/run.md): the command's own exit status, stdin, copies in and
# out (out whatever the status), --keep-on-failure, -o json, the evidence file checked by the
# checker of docs/evidence.md, signals, and SIGKILL at each phase: after the lease and one reap,
# nothing is left in the backend and the ledger says why.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip "jq is missing"
PY=/usr/bin/python3
BACKEND="$WORK/backend"
stub_profile default <<EOF2
  root: $BACKEND
EOF2
# sandboxes_left: the backend's sandboxes (the stub's root), one per line.
sandboxes_left() { ls "$BACKEND/sandboxes" 2>/dev/null | grep -v '^\.' || true; }
live() { sbx list -o json | jq -r '.[].id'; }

# The command's status is run's; nothing is left.
expect_code 3 sbx run -- sh -c 'echo out; echo err >&2; exit 3'
[ "$OUT" = out ] || fail "stdout: $OUT"
expect_contains "$ERR" err
[ -z "$(sandboxes_left)" ] || fail "run left $(sandboxes_left)"
[ -z "$(live)" ] || fail "run left a live record: $(live)"
expect_code 127 sbx run -- no-such-program-here
expect_code 0 sbx run -i -- wc -l < <(printf 'a\nb\n')
[ "$(tr -d ' ' <<<"$OUT")" = 2 ] || fail "stdin: $OUT"

# Copies in, then out whatever the status; each is a files.copied entry; the evidence file passes
# the checker.
mkdir -p "$WORK/src" && printf 'input\n' >"$WORK/src/in.txt"
expect_code 1 sbx run -o json --cp-in "$WORK/src:/work" --cp-out "/work/out:$WORK/out" -w /work \
  --evidence "$WORK/evidence.json" -- sh -c 'mkdir out; tr a-z A-Z <in.txt >out/up.txt; exit 1'
DOC=$OUT
[ "$(cat "$WORK/out/up.txt")" = INPUT ] || fail "copy-out after a failed command: $(ls -R "$WORK")"
[ "$(jq -r '"\(.exit_code) \(.copies | length) \(.destroyed) \(.kept) \(.failed_phase)"' <<<"$DOC")" = \
  "1 2 true false null" ] || fail "run -o json: $DOC"
jq -e '.phases | (.create >= 0) and (.cp_in >= 0) and (.exec >= 0) and (.cp_out >= 0) and (.destroy >= 0)' \
  <<<"$DOC" >/dev/null || fail "phases: $DOC"
ID=$(jq -r .id <<<"$DOC")
sed -n '/^```python$/,/^```$/p' "$SANDBOXER_SOURCE_DIR/docs/evidence.md" | sed '1d;$d' >"$WORK/check.py"
[ "$("$PY" "$WORK/check.py" "$WORK/evidence.json")" = ok ] || fail "the checker refuses run's evidence"
[ "$(jq -r .evidence.sha256 <<<"$DOC")" = "$(sha256sum "$WORK/evidence.json" | cut -d' ' -f1)" ] ||
  fail "the document's evidence digest is not the file's"
[ "$(jq '[.copies[] | .direction] | join(",")' -r "$WORK/evidence.json")" = "in,out" ] ||
  fail "the evidence lacks the copies: $(jq .copies "$WORK/evidence.json")"
EVENTS=$(sbx history "$ID" -o json | jq -r '[.[].event] | join(" ")')
expect_contains "$EVENTS" "files.copied exec.started exec.finished files.copied destroying lease.ended destroyed"
# -o json carries the command's output, not stdout.
expect_code 0 sbx run -o json -- sh -c 'printf "a\001b"; echo oops >&2'
[ "$(jq -r .stdout.text <<<"$OUT")" = "$(printf 'a\001b')" ] || fail "stdout in the document: $OUT"
[ "$(jq -r .stderr.text <<<"$OUT")" = oops ] || fail "stderr in the document: $OUT"

# --keep-on-failure keeps a failed run's sandbox, with its TTL back; a successful one goes.
expect_code 0 sbx run --keep-on-failure -- true
[ -z "$(live)" ] || fail "--keep-on-failure kept a successful run"
expect_code 5 sbx run --keep-on-failure --name kept -- sh -c 'exit 5'
expect_contains "$ERR" "kept sbx-"
expect_contains "$ERR" "sandboxer destroy sbx-"
expect_code 0 sbx status kept -o json
[ "$(jq -r '.state + " " + (.lease | tostring)' <<<"$OUT")" = "running null" ] ||
  fail "the kept sandbox: $OUT"
expect_code 0 sbx destroy kept

# docs/run.md's Python snippet for agents, as it is written there: a run with files in and out.
mkdir -p "$WORK/agent/src" && printf 'from the agent\n' >"$WORK/agent/src/in.txt"
{
  sed -n '/^```python$/,/^```$/p' "$SANDBOXER_SOURCE_DIR/docs/run.md" | sed '1d;$d'
  cat <<'EOF2'
code, out, err = run_in_sandbox(["sh", "-c", "mkdir out && cp in.txt out/copy; echo done; exit 4"],
                                inputs="src")
assert (code, out, err) == (4, "done\n", ""), (code, out, err)
assert open("out/copy").read() == "from the agent\n"
try:
    run_in_sandbox(["true"], inputs="no-such-dir")
except RuntimeError as e:
    assert "no-such-dir" in str(e), e
else:
    raise AssertionError("a missing input did not raise")
print("agent ok")
EOF2
} >"$WORK/agent/agent.py"
AGENT_OUT=$(cd "$WORK/agent" && PATH="$(dirname "$SANDBOXER"):$PATH" SANDBOXER_STATE_DIR="$STATE" \
  SANDBOXER_PROFILES="$PROFILES" "$PY" agent.py 2>&1) || fail "docs/run.md's Python snippet: $AGENT_OUT"
[ "$AGENT_OUT" = "agent ok" ] || fail "docs/run.md's Python snippet: $AGENT_OUT"
[ -s "$WORK/agent/evidence.json" ] || fail "the snippet's run wrote no evidence"
[ -z "$(sandboxes_left)" ] || fail "the snippet's runs left $(sandboxes_left)"

# Bad input, before anything is made.
expect_code 2 sbx run --cp-in nocolon -- true
expect_code 2 sbx run --keep --keep-on-failure -- true
expect_code 2 sbx run --lease 0s -- true
expect_code 3 sbx run --profile no-such-profile -- true
[ -z "$(sandboxes_left)" ] || fail "bad input left $(sandboxes_left)"

# Ctrl-C: the command gets it, the copy-out still runs, the sandbox goes, exit 130. (The stub's
# commands run on this machine, in the sandbox's directory, which is its /: relative paths only.)
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" run --cp-out "/t:$WORK/int-out" -- \
  sh -c 'trap "echo trapped > t; exit 9" INT; echo started; while :; do sleep 0.1; done' \
  >"$WORK/int.out" 2>"$WORK/int.err" &
PID=$!
for _ in $(seq 200); do grep -q started "$WORK/int.out" && break; sleep 0.05; done
kill -INT "$PID"
rc=0
wait "$PID" || rc=$?
[ "$rc" = 130 ] || fail "run after SIGINT: exit $rc ($(cat "$WORK/int.err"))"
[ "$(cat "$WORK/int-out" 2>/dev/null)" = trapped ] || fail "no copy-out after SIGINT: $(cat "$WORK/int.err")"
[ -z "$(sandboxes_left)" ] || fail "an interrupted run left $(sandboxes_left)"
INT_ID=$(ledger_jq '[.sandboxes[] | select(any(.history[]; .reason == "run interrupted by SIGINT"))][0].id')
[ "$(record "$INT_ID" '[.history[] | select(.event == "exec.finished")][0].details.exec.interrupted')" = SIGINT ] ||
  fail "the history does not say the command was interrupted: $(record "$INT_ID" .history)"

# A ledger locked for longer than a renewal's interval (another process holding it, a slow disk):
# the renewal waits for it and the lease holds; a reap right after finds nothing expired.
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" -o json run --lease 6s --name held \
  -- sleep 7 >"$WORK/held.out" 2>"$WORK/held.err" &
PID=$!
for _ in $(seq 200); do
  [ -n "$(ledger_jq '.sandboxes[] | select(.name == "held" and any(.history[]; .event == "exec.started")) | .id')" ] && break
  sleep 0.05
done
flock "$STATE/ledger.lock" sleep 4
expect_code 0 sbx reap --skew 0s
[ "$(ledger_jq '.sandboxes[] | select(.name == "held") | .state')" = running ] ||
  fail "reap took the held run's sandbox after the lock: $OUT"
rc=0
wait "$PID" || rc=$?
[ "$rc" = 0 ] || fail "the held run: exit $rc: $(cat "$WORK/held.err")"
[ "$(jq -r '"\(.lease.renewals > 0) \(.destroyed) \(.failed_phase)"' "$WORK/held.out")" = "true true null" ] ||
  fail "the held run's lease: $(cat "$WORK/held.out") $(cat "$WORK/held.err")"

# SIGKILL at each phase: the lease (2s) lapses, one reap collects what is left, and the ledger
# says why. Each phase is made slow by the stub's latency, so that the kill lands in it.
# killed_in PHASE LATENCY WAIT_FOR ARGS...: starts `run --lease 2s ARGS` on a stub whose latency
# is LATENCY, waits until WAIT_FOR (a function of the record's id) says it is in PHASE, SIGKILLs
# it, then reaps after the lease.
killed_in() {
  local phase=$1 latency=$2 wait_for=$3 pid id="" state
  shift 3
  stub_profile "slow-$phase" <<EOF2
  root: $BACKEND
  latency: { $latency }
EOF2
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" run --profile "slow-$phase" \
    --lease 2s --name "k-$phase" "$@" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 400); do
    id=$(ledger_jq --arg n "k-$phase" '.sandboxes[] | select(.name == $n) | .id' 2>/dev/null) || true
    [ -n "$id" ] && "$wait_for" "$id" && break
    sleep 0.05
  done
  [ -n "$id" ] || fail "run k-$phase never made its record"
  kill -KILL "$pid" || fail "run k-$phase ended before it could be killed in $phase"
  wait "$pid" 2>/dev/null || true
  sleep 2.5
  sbx reap --skew 0s --stuck-after 1s >/dev/null 2>&1 || true
  [ -z "$(sandboxes_left)" ] || fail "killed in $phase: left $(sandboxes_left)"
  state=$(record "$id" .state)
  [ "$state" = destroyed ] || [ "$state" = failed ] || fail "killed in $phase: the record is $state"
  echo "killed in $phase: $state, $(record "$id" '.history[-1].reason')"
}
has_event() { [ "$(record "$1" "[.history[].event] | index(\"$2\")")" != null ]; }
is_state() { [ "$(record "$1" .state)" = "$2" ]; }
creating() { is_state "$1" creating; }
running() { is_state "$1" running; }
exec_started() { has_event "$1" exec.started; }
exec_finished() { has_event "$1" exec.finished; }
destroying() { is_state "$1" destroying; }
killed_in create "ready: 30s" creating -- true
killed_in cp-in "copy: 30s" running --cp-in "$WORK/src:/work" -- true
killed_in exec "exec: 0s" exec_started -- sleep 30
killed_in cp-out "copy: 30s" exec_finished --cp-out "/o:$WORK/never" -- mkdir o
killed_in destroy "destroy: 3s" destroying -- true
LAPSED=$(ledger_jq '[.sandboxes[] | select(.name == "k-exec") | .history[] | select(.event == "lease.ended")][0]')
[ "$(jq -r .details.lease.how <<<"$LAPSED")" = lapsed ] || fail "no lapsed lease entry: $LAPSED"
echo ok
