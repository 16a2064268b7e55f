#!/usr/bin/env bash
# Operator conventions of issue 35, with the stub driver: `wait`, `destroy --all/--label` with
# --dry-run and --yes, the ls/ps/rm aliases, exec -u (refused by a driver that cannot), exec -t
# without a terminal, a did-you-mean for option typos, exec on a sandbox that is not running
# (exit 10), a taken name (exit 10, no "Try --help"), --force and --forget apart, a lock whose
# holder is gone, and event names alike in `events list` and `events list --pending`.
. "$(dirname "$0")/lib.sh"
stub_profile dev <<<"  root: $WORK/backend"
stub_profile broken <<EOF2
  root: $WORK/backend
  fail: { create: always }
EOF2
stub_profile slow <<EOF2
  root: $WORK/backend
  latency: { create: 2s }
EOF2

# complete WORD...: what TAB offers after WORD... (the last word is the one being completed).
complete() { SANDBOXER_STATE_DIR="$STATE" SANDBOXER_PROFILES="$PROFILES" "$SANDBOXER" __complete "$@"; }

# 3. Aliases: ls and ps are list, rm is destroy; --help and the man page name them, completion
# completes their options and offers them for a word that begins no command.
A=$(sbx create --profile dev --name a --label team=red --quiet)
for alias in ls ps; do
  expect_code 0 sbx "$alias" -q
  [ "$OUT" = "$A" ] || fail "$alias is not list: $OUT"
done
expect_code 0 sbx --help
expect_contains "$OUT" "list, ls, ps"
expect_contains "$OUT" "destroy, rm"
expect_code 0 sbx man
expect_contains "$OUT" 'Aliases: \fBls\fR, \fBps\fR'
expect_code 0 complete rm --dr
expect_contains "$OUT" "--dry-run"
expect_code 0 complete rm
expect_contains "$OUT" "rm	alias of destroy"
expect_code 0 complete l
! grep -q "^ls" <<<"$OUT" || fail "an alias offered beside the commands it shadows: $OUT"
expect_code 0 complete wait "$A" --for ""
expect_contains "$OUT" "running	"
expect_contains "$OUT" "gone	"

# 6. An option typo: said with the closest option, exit 2, not CLI11's words.
expect_code 2 sbx create --profle dev
expect_contains "$ERR" "unknown option --profle for create; did you mean --profile?"
! grep -qi "not expected\|is required" <<<"$ERR" || fail "CLI11's raw words: $ERR"
expect_code 2 sbx destroy --dryrun --all
expect_contains "$ERR" "did you mean --dry-run?"
expect_code 2 sbx list --lables team=red
expect_contains "$ERR" "did you mean --label?"
expect_code 2 sbx ledger verify --hed x
expect_contains "$ERR" "unknown option --hed for ledger verify; did you mean --head?"
expect_contains "$ERR" "Try 'sandboxer ledger verify --help'."
# A mistyped global option before the command: its value is not taken for an unknown command.
expect_code 2 "$SANDBOXER" --stat-dir "$STATE" list
expect_contains "$ERR" "unknown option --stat-dir; did you mean --state-dir?"

# 9. A taken name is a conflict (10), and an error that is no parse error has no "Try --help".
expect_code 10 sbx create --profile dev --name a
expect_contains "$ERR" "the name \"a\" is taken by $A"
! grep -q "Try '" <<<"$ERR" || fail "a conflict ends with a --help hint: $ERR"
expect_code 2 sbx create --profile dev --ttl 3x
! grep -q "Try '" <<<"$ERR" || fail "a bad value ends with a --help hint: $ERR"

# 7. exec on a sandbox that is not running: exit 10, saying its state and what to do.
expect_code 4 sbx create --profile broken --name b
F=$(sbx list -a --state failed -q)
expect_code 10 sbx exec "$F" -- true
expect_contains "$ERR" "sandbox $F is failed, not running"
expect_contains "$ERR" "injected failure"
expect_code 10 sbx exec b -- true

# 4. exec -u: the stub runs commands as the invoking user only, so it refuses before any call
# (exit 4, naming the driver); the refusal is no history entry of a command that ran.
before=$(record "$A" '.history | length')
expect_code 4 sbx exec -u 65534 "$A" -- id -u
expect_contains "$ERR" "exec -u 65534 is not supported by driver stub"
[ "$(record "$A" '.history | length')" = "$before" ] || fail "a refused exec -u was recorded"
expect_code 0 sbx drivers -o json
[ "$(jq -r '.[] | select(.name == "stub") | .capabilities.exec_user' <<<"$OUT")" = false ] ||
  fail "stub claims exec_user: $OUT"

# 5. exec -t without a terminal still gives the command one (docker exec -t): one stream.
expect_code 0 sbx exec -t "$A" -- sh -c 'test -t 1 && echo out-on-a-tty; echo err >&2'
expect_contains "$OUT" "out-on-a-tty"
expect_contains "$OUT" "err"
[ -z "$ERR" ] || fail "-t kept stderr apart: $ERR"
expect_code 0 sbx exec "$A" -- sh -c 'test -t 1 || echo no-tty'
[ "$OUT" = no-tty ] || fail "a terminal without -t: $OUT"

# 1. wait: running (the record and the backend), gone, a timeout (11), never (10), no such (3).
expect_code 0 sbx wait a --for running -o json
[ "$(jq -r '[.id, .met, .state, .backend_state] | join(" ")' <<<"$OUT")" = "$A true running running" ] ||
  fail "wait --for running: $OUT"
before=$(record "$A" '.history | length')
expect_code 11 sbx wait a --for gone --timeout 1s -o json
expect_contains "$ERR" "is not gone after 1s (--timeout): it is running"
[ "$(jq -r .met <<<"$OUT")" = false ] || fail "a timed-out wait: $OUT"
[ "$(record "$A" '.history | length')" = "$before" ] || fail "wait wrote history"
expect_code 10 sbx wait "$F" --for running --timeout 5s
expect_contains "$ERR" "will never be running"
expect_code 0 sbx wait "$F" --for gone
expect_code 3 sbx wait sbx-aaaaaaaaaaaa --for gone
expect_code 2 sbx wait a --for dead
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile slow --name s \
  --quiet >/dev/null 2>&1 &
SLOW=$!
for _ in $(seq 100); do sbx list -q --name s 2>/dev/null | grep -q . && break; sleep 0.05; done
expect_code 0 sbx wait s --for running --timeout 30s
wait "$SLOW"
(sleep 1; sbx destroy s --quiet) &
expect_code 0 sbx wait s --for gone --timeout 30s
wait

# 2. destroy --label / --all: --dry-run lists, off a terminal --yes is needed (exit 2), labels all
# must match, and plain `destroy ID` needs no confirmation.
B=$(sbx create --profile dev --label team=blue --label tier=web --quiet)
C=$(sbx create --profile dev --label team=blue --label tier=db --quiet)
expect_code 0 sbx destroy --label team=blue --label tier=web --dry-run -o json
[ "$(jq -r '[.[].id] | join(" ")' <<<"$OUT")" = "$B" ] || fail "--label selection: $OUT"
[ "$(record "$B" .state)" = running ] || fail "--dry-run destroyed"
expect_code 2 sbx destroy --label team=blue </dev/null
expect_contains "$ERR" "destroy --label would destroy 2 sandbox(es) and there is no terminal to confirm on: add --yes"
[ "$(record "$B" .state)" = running ] || fail "a refused destroy --label destroyed"
expect_code 2 sbx destroy --all </dev/null
expect_code 2 sbx destroy --all "$A"
expect_code 0 sbx destroy --label team=blue --label tier=web --yes -q
[ "$(record "$B" .state) $(record "$C" .state)" = "destroyed running" ] || fail "--label --yes"
expect_code 0 sbx destroy --all --dry-run
expect_contains "$OUT" "$A"
expect_contains "$OUT" "$C"
expect_code 0 sbx rm "$C" </dev/null
[ "$(record "$C" .state)" = destroyed ] || fail "rm did not destroy"
# On a terminal the selection is listed and asked about: "n" destroys nothing (exit 7), "y" goes.
confirm_on_pty() {
  python3 - "$1" "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" destroy --all <<'PY'
import os, pty, sys, time
answer, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
text, deadline = b"", time.time() + 30
while b"[y/N]" not in text and time.time() < deadline:
    try:
        text += os.read(fd, 4096)
    except OSError:
        break
os.write(fd, answer.encode() + b"\n")
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    text += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.write(text.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
PY
}
expect_code 7 confirm_on_pty n
expect_contains "$OUT" "$A"
expect_contains "$OUT" "Destroy these 1 sandbox(es)? [y/N]"
[ "$(record "$A" .state)" = running ] || fail "an unconfirmed destroy --all destroyed"
expect_code 0 confirm_on_pty y
[ "$(record "$A" .state)" = destroyed ] || fail "a confirmed destroy --all left $A"
expect_code 0 sbx destroy --all --yes
expect_contains "$ERR" "nothing to do"

# 8. --force is no grace, --forget closes the record whatever the backend says: two options
# (test_cli_conventions.sh checks them against a failing backend).
expect_code 0 sbx help destroy
expect_contains "$OUT" "--force"
expect_contains "$OUT" "--forget"

# 10. A lock whose holder is gone: the message says so, and what holds it.
python3 - "$STATE/ledger.lock" <<'PY' &
import fcntl, os, subprocess, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
dead = subprocess.Popen(["true"]); dead.wait()
os.ftruncate(fd, 0); os.write(fd, b"pid %d sandboxer\nhost %s\n" % (dead.pid, os.uname().nodename.encode()))
open(sys.argv[1] + ".ready", "w").close()
time.sleep(30)
PY
HOLDER=$!
for _ in $(seq 100); do [ -e "$STATE/ledger.lock.ready" ] && break; sleep 0.05; done
expect_code 5 sbx --lock-timeout 0 create --profile dev
expect_contains "$ERR" "is gone: a process it started still has $STATE/ledger.lock open"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null || true

# 11. Event names: the same event is called the same in both listings.
printf 'events:\n  - { type: http, url: "http://127.0.0.1:9/events", retries: 0, timeout: 1s }\ndelivery: { wait: 10ms }\n' \
  >"$WORK/config.yaml"
export SANDBOXER_CONFIG="$WORK/config.yaml"
D=$(sbx create --profile dev --quiet 2>/dev/null)
sbx exec "$D" -- true 2>/dev/null
sbx events list --pending 2>/dev/null | awk -v d="$D" '$3 == d {print $4, $2}' | sort >"$WORK/pending"
sbx events list 2>/dev/null | awk -v d="$D" '$3 == d {print $4, $2}' | sort >"$WORK/all"
grep -q "exec.started" "$WORK/pending" || fail "no pending exec.started: $(cat "$WORK/pending")"
join "$WORK/pending" "$WORK/all" | awk '$2 != $3 {bad = 1; print} END {exit bad}' ||
  fail "event names differ between the listings"
echo ok
