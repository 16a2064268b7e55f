#!/usr/bin/env bash
# External drivers: where sandboxer finds them, what `sandboxer drivers` says about them, and how a
# driver that misbehaves (dies, speaks another protocol, writes logs on stdout, hangs) is reported.
# The example driver examples/python/sandboxer-driver-pydir runs the whole lifecycle.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "python3 is missing"
DRIVERS="$SANDBOXER_SOURCE_DIR/tests/data/drivers"
EXAMPLE="$SANDBOXER_SOURCE_DIR/examples/python"
export XDG_CONFIG_HOME="$WORK/config"
export SANDBOXER_DRIVER_PATH="$DRIVERS:$EXAMPLE"

cat >"$PROFILES/pd.yaml" <<EOF2
driver: pydir
labels: { team: e2e }
pydir: { root: $WORK/backend }
EOF2

# The listing: built-in drivers first, then each external one with its path and capabilities, or
# the reason its handshake failed.
expect_code 0 sbx drivers -o json
[ "$(jq -r '.[] | select(.name == "pydir") | .path' <<<"$OUT")" = "$EXAMPLE/sandboxer-driver-pydir" ] \
  || fail "pydir is not listed with its path: $OUT"
[ "$(jq -c '.[] | select(.name == "pydir") | .capabilities' <<<"$OUT")" \
  = '{"copy":false,"copy_owner":false,"exec":true,"exec_user":false,"list_by_label":true,"logs":false,"native_ttl":true,"ports":false,"snapshot":true}' ] || fail "pydir's capabilities: $OUT"
[ "$(jq '[.[] | select(.name == "stub")] | length' <<<"$OUT")" = 1 ] || fail "stub listed twice: $OUT"
[ "$(jq -r '.[] | select(.name == "stub") | .builtin' <<<"$OUT")" = true ] || fail "stub is not the built-in one"
expect_contains "$(jq -r '.[] | select(.name == "dies") | .error' <<<"$OUT")" "no DIES_URL set"
expect_contains "$(jq -r '.[] | select(.name == "future") | .error' <<<"$OUT")" "speaks protocol 2, this sandboxer speaks 1"
expect_contains "$(jq -r '.[] | select(.name == "garbage") | .error' <<<"$OUT")" "not a JSON object"
expect_code 0 sbx drivers
expect_contains "$OUT" "handshake failed"

# A built-in driver wins over an external one of the same name: the external stub never runs.
export STUB_SHADOW_MARKER="$WORK/external-stub-ran"
stub_profile st </dev/null
expect_code 0 sbx create --profile st -o json
[ ! -e "$STUB_SHADOW_MARKER" ] || fail "the external sandboxer-driver-stub ran"

# The whole lifecycle through the example driver.
expect_code 0 sbx create --profile pd --name one -o json
ID=$(jq -r .id <<<"$OUT")
BID=$(jq -r .backend_id <<<"$OUT")
[ -d "$WORK/backend/sandboxes/$BID/fs" ] || fail "no backend directory for $BID"
expect_code 3 sbx exec one -- sh -c 'printf out; printf err >&2; exit 3'
[ "$OUT" = out ] && [ "$ERR" = err ] || fail "exec streams: '$OUT' '$ERR'"
OUT=$(printf 'through stdin' | sbx exec -i one -- cat) || fail "exec -i failed"
[ "$OUT" = "through stdin" ] || fail "stdin: $OUT"
expect_code 127 sbx exec one -- no-such-program
expect_contains "$ERR" "no-such-program: command not found in the sandbox"
expect_code 0 sbx snapshot one --name base -o json
expect_code 0 sbx restore one:base --name two -o json
expect_code 0 sbx destroy one two
[ ! -d "$WORK/backend/sandboxes/$BID" ] || fail "destroy left $BID"
[ "$(record "$ID" .state)" = destroyed ] || fail "the record is $(record "$ID" .state)"

# A `run` SIGKILLed while its command runs: after the lease, one reap removes its directory. (The
# example's commands run on this machine: the driver's own child outlives the kill, briefly.)
KILLED_SLEEP=5 killed_run_reaped pd killed
[ ! -d "$WORK/backend/sandboxes/$KILLED_BACKEND_ID" ] || fail "reap left the killed run's $KILLED_BACKEND_ID"

# Discovery order: $SANDBOXER_DRIVER_PATH, then $XDG_CONFIG_HOME/sandboxer/drivers, then $PATH.
mkdir -p "$WORK/first" "$WORK/config/sandboxer/drivers" "$WORK/bin"
printf '#!/bin/sh\nexit 1\n' >"$WORK/bin/sandboxer-driver-pydir"
chmod +x "$WORK/bin/sandboxer-driver-pydir"
ln -s "$EXAMPLE/sandboxer-driver-pydir" "$WORK/first/sandboxer-driver-pydir"
SANDBOXER_DRIVER_PATH="$WORK/first" PATH="$WORK/bin:$PATH" expect_code 0 sbx drivers -o json
[ "$(jq -r '.[] | select(.name == "pydir") | .path' <<<"$OUT")" = "$WORK/first/sandboxer-driver-pydir" ] \
  || fail "\$SANDBOXER_DRIVER_PATH does not come first: $OUT"
ln -s "$EXAMPLE/sandboxer-driver-pydir" "$WORK/config/sandboxer/drivers/sandboxer-driver-pydir"
SANDBOXER_DRIVER_PATH= PATH="$WORK/bin:$PATH" expect_code 0 sbx drivers -o json
[ "$(jq -r '.[] | select(.name == "pydir") | .path' <<<"$OUT")" \
  = "$WORK/config/sandboxer/drivers/sandboxer-driver-pydir" ] || fail "the config dir does not come before \$PATH: $OUT"
rm "$WORK/config/sandboxer/drivers/sandboxer-driver-pydir"
SANDBOXER_DRIVER_PATH= PATH="$EXAMPLE:$PATH" expect_code 0 sbx drivers -o json
[ "$(jq -r '.[] | select(.name == "pydir") | .path' <<<"$OUT")" = "$EXAMPLE/sandboxer-driver-pydir" ] \
  || fail "\$PATH is not searched: $OUT"

# Profile errors name the file, line and column, as for a built-in driver.
printf 'driver: pydir\npydir:\n  rot: /tmp\n' >"$PROFILES/typo.yaml"
expect_code 2 sbx profiles validate "$PROFILES/typo.yaml"
expect_contains "$ERR" "typo.yaml:3:8: driver.pydir.rot: unknown key \"rot\""
printf 'driver: pydri\n' >"$PROFILES/name.yaml"
expect_code 2 sbx create --profile name
expect_contains "$ERR" "unknown driver 'pydri', did you mean 'pydir'?"
printf 'driver: stub\npydir: { root: /tmp }\n' >"$PROFILES/other.yaml"
expect_code 2 sbx profiles validate "$PROFILES/other.yaml"
expect_contains "$ERR" "section \"pydir\" does not match driver \"stub\""

# Secrets reach the driver on its stdin only: never the ledger, the events, the log or its argv.
KEY="key-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s\n' "$KEY" >"$WORK/key"
export KEYED_KEY_FILE="$WORK/key"
cat >"$PROFILES/keyed.yaml" <<EOF2
driver: keyed
secrets: { api_key: { file: $WORK/key } }
events: [ { type: jsonl, path: $WORK/events.jsonl } ]
keyed: { root: $WORK/keyed }
EOF2
expect_code 0 sbx -v create --profile keyed -o json
KID=$(jq -r .id <<<"$OUT")
printf '%s\n%s\n' "$OUT" "$ERR" >"$WORK/output"
expect_code 0 sbx -v destroy "$KID"
printf '%s\n%s\n' "$OUT" "$ERR" >>"$WORK/output"
if grep -rqF "$KEY" "$STATE" "$WORK/events.jsonl" "$WORK/output"; then
  fail "the secret leaked: $(grep -rlF "$KEY" "$STATE" "$WORK/events.jsonl" "$WORK/output")"
fi
printf 'wrong\n' >"$WORK/wrong"
sed "s|$WORK/key|$WORK/wrong|" "$PROFILES/keyed.yaml" >"$PROFILES/keyed-wrong.yaml"
expect_code 4 sbx create --profile keyed-wrong
expect_contains "$ERR" "keyed: api_key refused"

# A driver that does not answer meets the call's deadline; the record says so.
printf 'driver: hangs\n' >"$PROFILES/hangs.yaml"
# 3 s: the handshake (a python start) must fit in it on a loaded machine.
SANDBOXER_DRIVER_TIMEOUT=3 expect_code 4 sbx create --profile hangs -o json
expect_contains "$ERR" "did not answer create within 3 s"
expect_contains "$ERR" "create received; sleeping"
[ "$(jq -r .state <<<"$OUT")" = failed ] || fail "the hung create is recorded as: $OUT"

# A driver that never answers its handshake: validating its profile is a backend failure (4), not
# an invalid profile (2). (Its own directory: every listing would wait for it.)
mkdir -p "$WORK/mute"
printf '#!/bin/sh\nexec sleep 3600\n' >"$WORK/mute/sandboxer-driver-mute"
chmod +x "$WORK/mute/sandboxer-driver-mute"
printf 'driver: mute\n' >"$PROFILES/mute.yaml"
SANDBOXER_DRIVER_PATH="$WORK/mute:$SANDBOXER_DRIVER_PATH" SANDBOXER_DRIVER_TIMEOUT=2 \
  expect_code 4 sbx profiles validate "$PROFILES/mute.yaml"
expect_contains "$ERR" "mute"
SANDBOXER_DRIVER_PATH="$WORK/mute:$SANDBOXER_DRIVER_PATH" SANDBOXER_DRIVER_TIMEOUT=2 \
  expect_code 2 sbx profiles validate "$PROFILES/mute.yaml" "$PROFILES/typo.yaml"

# A driver's answer cannot break the ledger (issue 34.2): each hostile create fails with a backend
# error naming the driver, what it made is destroyed, and every later command still reads the
# ledger.
printf '%s\n' "tok-$(head -c 9 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$WORK/token"
cat >"$PROFILES/hostile.yaml" <<EOF2
driver: hostile
secrets: { token: { file: $WORK/token } }
hostile: { root: $WORK/hostile }
EOF2
for mode in deep300 deep100k huge; do
  HOSTILE_MODE=$mode expect_code 4 sbx create --profile hostile -o json
  case $mode in
    deep*) expect_contains "$ERR" "wrote a line nested deeper than 72 levels"
           expect_contains "$ERR" "removed the 1 backend resource(s) it had made" ;;
    huge) expect_contains "$ERR" "driver hostile: create answered an info that cannot be kept"
          expect_contains "$ERR" "was destroyed" ;;
  esac
  [ "$(jq -r .state <<<"$OUT")" = failed ] || fail "$mode: the record is: $OUT"
  [ -z "$(ls "$WORK/hostile/sandboxes")" ] || fail "$mode: left $(ls "$WORK/hostile/sandboxes")"
  expect_code 0 sbx list -o json
  expect_code 0 sbx ledger verify
done
HOSTILE_MODE=badid expect_code 4 sbx create --profile hostile -o json
expect_contains "$ERR" "a backend id that cannot be kept: it holds a control character"
expect_contains "$ERR" "reap --orphans"
expect_code 0 sbx reap --orphans
[ -z "$(ls "$WORK/hostile/sandboxes")" ] || fail "reap --orphans left $(ls "$WORK/hostile/sandboxes")"
# A secret the driver was handed and echoes back in info is masked before anything keeps it.
HOSTILE_MODE=secret expect_code 0 sbx create --profile hostile -o json
HID=$(jq -r .id <<<"$OUT")
[ "$(record "$HID" .info.kept)" = yes ] || fail "the info lost its other fields"
[ "$(record "$HID" .info.token)" = "***" ] || fail "the echoed secret is not masked"
if grep -rqF "$(cat "$WORK/token")" "$STATE" <<<"$OUT"; then
  fail "the secret the driver echoed was kept: $(grep -rlF "$(cat "$WORK/token")" "$STATE")"
fi
expect_code 0 sbx destroy "$HID"

# A driver process is watched, not only its pipe (issue 34.5): one that exits leaving a child
# holding its stdout fails its call at once, and the child goes with it; one that floods stderr
# still meets its deadline. (Bounds far above the expected times: they catch a hang, not a
# slowdown.)
START=$SECONDS
HOSTILE_MODE=orphan expect_code 4 timeout -k 5 120 "$SANDBOXER" --state-dir "$STATE" \
  --profiles-dir "$PROFILES" create --profile hostile
expect_contains "$ERR" "exited before answering create (status 0; something it started still holds its stdout)"
[ $((SECONDS - START)) -lt 60 ] || fail "the exit was noticed after $((SECONDS - START)) s"
ORPHAN=$(cat "$WORK/hostile/orphan.pid")
for _ in $(seq 50); do alive "$ORPHAN" || break; sleep 0.1; done
! alive "$ORPHAN" || fail "the driver's child $ORPHAN outlived the failed call"
START=$SECONDS
HOSTILE_MODE=flood SANDBOXER_DRIVER_TIMEOUT=4 expect_code 4 timeout -k 5 120 "$SANDBOXER" \
  --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile hostile
expect_contains "$ERR" "did not answer create within 4 s"
[ $((SECONDS - START)) -lt 30 ] || fail "a stderr flood held the call $((SECONDS - START)) s past a 4 s deadline"
# The optional copy methods are declared in the handshake (docs/driver-protocol.md, "Copy"): the
# stub served by the SDK has them, pydir (above) does not.
if [ -n "${SANDBOXER_STUB_EXTERNAL:-}" ]; then
  mkdir -p "$WORK/sx"
  ln -s "$SANDBOXER_STUB_EXTERNAL" "$WORK/sx/sandboxer-driver-stub-external"
  SANDBOXER_DRIVER_PATH="$WORK/sx" expect_code 0 sbx drivers -o json
  [ "$(jq -c '.[] | select(.name == "stub-external") | .capabilities | [.copy, .copy_owner, .ports]' <<<"$OUT")" \
    = '[true,false,true]' ] || fail "stub-external's capabilities: $OUT"
  # ports: over the protocol (docs/driver-protocol.md): asked in create's params, answered in its
  # result, recorded and printed as any driver's; pydir does not declare them, so it is refused.
  P=$(free_port)
  printf 'driver: stub-external\nports: [%s, "%s/udp"]\nstub-external: { root: %s }\n' "$P" "$P" "$WORK/sx-root" \
    >"$PROFILES/sx-web.yaml"
  SANDBOXER_DRIVER_PATH="$WORK/sx" expect_code 0 sbx create --profile sx-web --name sxweb -o json
  [ "$(jq -c '[.ports[] | [.port, .protocol, .host, .host_port, .url]]' <<<"$OUT")" = \
    "[[$P,\"tcp\",\"127.0.0.1\",$P,\"tcp://127.0.0.1:$P\"],[$P,\"udp\",\"127.0.0.1\",$P,\"udp://127.0.0.1:$P\"]]" ] ||
    fail "ports over the protocol: $OUT"
  SANDBOXER_DRIVER_PATH="$WORK/sx" expect_code 0 sbx port sxweb "$P/udp"
  [ "$OUT" = "127.0.0.1:$P" ] || fail "port sxweb $P/udp: $OUT"
  SANDBOXER_DRIVER_PATH="$WORK/sx" expect_code 0 sbx destroy sxweb
  printf 'driver: pydir\nports: [8080]\npydir: { root: %s }\n' "$WORK/backend" >"$PROFILES/pd-web.yaml"
  expect_code 4 sbx create --profile pd-web
  expect_contains "$ERR" "which driver pydir does not support"
fi
echo "ok"
