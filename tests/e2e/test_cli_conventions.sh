#!/usr/bin/env bash
# The conventions of issue 14 (points 9-17) as an operator, a script and cron see them.
source "$(dirname "$0")/lib.sh"

stub_profile dev <<<"  root: $WORK/backend"
stub_profile broken <<EOF2
  root: $WORK/backend
  fail: { create: always }
EOF2
stub_profile sticky <<EOF2
  root: $WORK/backend
  fail: { destroy: always }
EOF2

# 14. Unknown commands, help, -V, completion, man, examples.
expect_code 2 sbx crate
expect_contains "$ERR" 'unknown command "crate"; did you mean create?'
expect_code 2 sbx delete
expect_contains "$ERR" "did you mean destroy?"
for command in create destroy list status exec wait snapshot snapshots restore extend reap history \
  events profiles drivers version completion man; do
  expect_code 0 sbx help "$command"
  expect_contains "$OUT" "Examples:"
  expect_contains "$OUT" "sandboxer $command"
done
expect_code 0 sbx -V
expect_contains "$OUT" "commit: "
expect_contains "$OUT" "drivers: "
expect_contains "$OUT" "libcurl"
expect_code 0 sbx completion bash
# The script asks the binary (`COMP_WORDS[0]`) for the candidates (test_completion.sh: the rest).
COMPLETED=$(bash -c 'source /dev/stdin; COMP_WORDS=("$SANDBOXER" cre); COMP_CWORD=1; _sandboxer;
  echo "${COMPREPLY[*]}"' <<<"$OUT")
[ "$COMPLETED" = create ] || fail "bash completion of 'cre': $COMPLETED"
COMPLETED=$(bash -c 'source /dev/stdin; COMP_WORDS=("$SANDBOXER" destroy --forg); COMP_CWORD=2;
  _sandboxer; echo "${COMPREPLY[*]}"' <<<"$OUT")
[ "$COMPLETED" = --forget ] || fail "bash completion of 'destroy --forg': $COMPLETED"
expect_code 0 sbx completion zsh
expect_contains "$OUT" "compdef _sandboxer sandboxer"
expect_code 0 sbx completion fish
expect_contains "$OUT" "complete -c sandboxer -f -a '(__sandboxer_complete)'"
expect_code 2 sbx completion tcsh
expect_code 0 sbx man
expect_contains "$OUT" ".TH SANDBOXER 1"
expect_contains "$OUT" ".SS destroy"
expect_contains "$OUT" '\fB\-\-force\fR'

# 17. One clear line per error.
expect_code 2 sbx destroy
expect_contains "$ERR" "destroy: missing <ids>"
! grep -q "is required" <<<"$ERR" || fail "CLI11's raw words: $ERR"
ID=$(sbx create --profile dev --quiet)
expect_code 2 sbx exec "$ID" ls -la
expect_contains "$ERR" "put -- before the command"
touch "$WORK/a-file"
expect_code 2 "$SANDBOXER" --state-dir "$WORK/a-file" list
expect_contains "$ERR" "is not a directory"
SANDBOXER_CONFIG="$WORK/nope.yaml" expect_code 2 sbx list
expect_contains "$ERR" "SANDBOXER_CONFIG names $WORK/nope.yaml, which does not exist"
expect_code 4 sbx create --profile broken
[ "$(grep -c "injected failure" <<<"$ERR")" = 1 ] || fail "create's error said more than once: $ERR"
BROKEN=$(ledger_jq '.sandboxes[] | select(.profile.name == "broken") | .id')

# 13. A state dir that does not exist is said so; no fallback to /tmp without HOME.
expect_code 0 "$SANDBOXER" --state-dir "$WORK/none" list
expect_contains "$ERR" "state dir $WORK/none does not exist"
passwd_home=$(getent passwd "$(id -u)" | cut -d: -f6)
if [ -n "$passwd_home" ] && [ "$passwd_home" != / ]; then
  OUT=$(env -u HOME -u XDG_STATE_HOME -u SANDBOXER_STATE_DIR "$SANDBOXER" status sbx-none000000 2>&1 || true)
  expect_contains "$OUT" "$passwd_home/.local/state/sandboxer"
fi

# 15. list: ids only with -q, filters, wide, no headers; failed records are history.
OTHER=$(sbx create --profile dev --quiet --name other --label team=blue)
expect_code 0 sbx list -q
[ "$(sort <<<"$OUT")" = "$(printf '%s\n' "$ID" "$OTHER" | sort)" ] || fail "list -q: $OUT"
expect_code 0 sbx list -a -q
expect_contains "$OUT" "$BROKEN"
expect_code 0 sbx list -q --label team=blue
[ "$OUT" = "$OTHER" ] || fail "--label: $OUT"
expect_code 0 sbx list -q --name other --driver stub --profile dev
[ "$OUT" = "$OTHER" ] || fail "--name/--driver/--profile: $OUT"
expect_code 0 sbx list -q --profile nothing-of-the-kind
[ -z "$OUT" ] || fail "--profile filter: $OUT"
expect_code 0 sbx list --no-headers
! grep -q "^ID " <<<"$OUT" || fail "--no-headers: $OUT"
expect_code 0 sbx list -o wide
expect_contains "$OUT" "BACKEND ID"
expect_contains "$OUT" "team=blue"
expect_code 0 sbx snapshot "$ID" --name s1 --quiet
expect_code 0 sbx snapshots
grep -Eq ' [0-9.]+ (B|KiB|MiB) ' <<<"$OUT" || fail "snapshot size not in human units: $OUT"

# 16. destroy --forget closes a record whose backend fails (--force alone does not: it only
# skips the grace, issue 35); --timeout is the stop's grace.
BROKEN=$(sbx create --profile sticky --quiet)
expect_code 4 sbx destroy "$BROKEN"
[ "$(grep -c "injected failure" <<<"$ERR")" = 1 ] || fail "destroy's error said more than once: $ERR"
expect_code 4 sbx destroy --force "$BROKEN"
[ "$(record "$BROKEN" .state)" = running ] || fail "--force alone closed the record"
expect_code 0 sbx destroy --forget "$BROKEN"
[ "$(record "$BROKEN" .state)" = destroyed ] || fail "--forget did not close the record"
[ "$(record "$BROKEN" .history[-1].details.forgotten)" = true ] || fail "--forget not in the history"
expect_code 0 sbx destroy --timeout 1s "$OTHER"
expect_code 2 sbx destroy --timeout soon "$ID"

# 12. A jsonl sink in a directory that does not exist: made (0700), nothing to warn about.
printf 'events:\n  - { type: jsonl, path: %s }\n' "$WORK/new/dir/events.jsonl" >"$WORK/config.yaml"
export SANDBOXER_CONFIG="$WORK/config.yaml"
expect_code 0 sbx list
! grep -q "warn" <<<"$ERR" || fail "list warned: $ERR"
expect_code 0 sbx extend "$ID" --by 1m --quiet
[ -s "$WORK/new/dir/events.jsonl" ] || fail "no event in the new jsonl file"
[ "$(stat -c %a "$WORK/new/dir")" = 700 ] || fail "the sink's directory is not 0700"
expect_code 0 sbx events flush
unset SANDBOXER_CONFIG

# 9. cron: timestamps off a terminal, --no-wait is news, the lock hint names a real option.
expect_code 0 sbx -v reap --dry-run
grep -Eq '^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z sandboxer: ' <<<"$ERR" ||
  fail "no RFC 3339 timestamps: $ERR"
flock "$STATE/reap.lock" sleep 8 &  # long enough for two slow (ASan) runs below
holder=$!
for _ in $(seq 100); do flock -n "$STATE/reap.lock" true || break; sleep 0.05; done
expect_code 5 sbx reap --no-wait
expect_contains "$ERR" "info: another reaper holds"
! grep -q "error" <<<"$ERR" || fail "--no-wait logged an error: $ERR"
expect_code 5 sbx reap --wait 1s
expect_contains "$ERR" "raise reap --wait"
wait "$holder"

# 10. A plan keeps the skew it was made with, and its items say why they are destroyed.
SANDBOXER="$SANDBOXER_TESTCLOCK"
at() { local t=$1; shift; SANDBOXER_FAKE_NOW=$t sbx "$@"; }
EXP=$(at 2026-12-02T10:00:00Z create --profile dev --ttl 10m --quiet)
at 2026-12-02T10:10:05Z reap --dry-run --skew 0s -o json >"$WORK/plan.json"
[ "$(jq -r '.skew' "$WORK/plan.json")" = 0s ] || fail "the plan does not keep its skew"
SANDBOXER_FAKE_NOW=2026-12-02T10:10:06Z expect_code 0 sbx reap --plan "$WORK/plan.json" -o json
[ "$(jq -r --arg id "$EXP" '.items[] | select(.id == $id) | .outcome' <<<"$OUT")" = destroyed ] ||
  fail "the plan's item was not destroyed: $OUT"
expect_contains "$ERR" "destroyed (destroy: ttl expired at 2026-12-02T10:10:00Z)"

# 11. reap --orphans asks only the backends the ledger used, and those --profile names: example
# profiles lying in the profiles directory cost no connection and no warning.
printf 'driver: nosuchdriver\n' >"$PROFILES/alien.yaml"
printf 'driver: e2b\nsecrets: { api_key: { env: SANDBOXER_TEST_UNSET_KEY } }\ne2b: { template: base }\n' \
  >"$PROFILES/keyless.yaml"
coproc LISTENER { exec /usr/bin/python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    open(sys.argv[1], "a").write("connection\n")
    c.close()' "$WORK/connections"; }
read -r PORT <&"${LISTENER[0]}"
printf 'services: { app: { image: x } }\n' >"$PROFILES/stack.yml"
printf 'driver: compose-ssh\ncompose-ssh: { host: 127.0.0.1, port: %s, user: nobody, compose_file: stack.yml, service: app, connect_timeout: 2s }\n' \
  "$PORT" >"$PROFILES/remote.yaml"
expect_code 0 sbx reap --orphans --dry-run
expect_code 0 sbx reap --orphans
for name in alien keyless remote; do
  ! grep -q "$name" <<<"$ERR" || fail "reap --orphans read the unused profile $name: $ERR"
done
[ ! -e "$WORK/connections" ] || fail "reap --orphans connected to a host only an unused profile names"
expect_code 2 sbx reap --orphans --profile alien
expect_code 2 sbx reap --orphans --profile keyless
expect_contains "$ERR" "SANDBOXER_TEST_UNSET_KEY"
expect_code 2 sbx reap --profile dev
expect_code 6 sbx reap --orphans --profile remote
[ "$(wc -l <"$WORK/connections")" -ge 1 ] || fail "reap --orphans --profile remote did not ask its host"
kill "$LISTENER_PID"
rm "$PROFILES/alien.yaml" "$PROFILES/keyless.yaml" "$PROFILES/remote.yaml" "$PROFILES/stack.yml"

# 17. DOCKER_HOST at a server that is not a Docker Engine: a backend error (4), said so.
coproc WEB { exec /usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/canned_http.py" 404 \
  text/html '<html>404 Not Found</html>'; }
read -r PORT <&"${WEB[0]}"
printf 'driver: docker\ndocker: { image: sandboxer/busybox:local, pull: never }\n' >"$PROFILES/dock.yaml"
DOCKER_HOST="tcp://127.0.0.1:$PORT" expect_code 4 sbx create --profile dock
expect_contains "$ERR" "is not a Docker Engine API"
[ "$(wc -l <<<"$ERR")" = 1 ] || fail "a web server at DOCKER_HOST: more than one line: $ERR"
case "$ERR" in *"<html"* | *"could not be removed"*) fail "a web server at DOCKER_HOST: $ERR" ;; esac
kill "$WEB_PID"
echo ok
