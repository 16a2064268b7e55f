#!/usr/bin/env bash
# `sandboxer logs` on the stub driver (its console file) and on an external driver: what a
# command wrote on the sandbox's console comes back, --tail and -o json shape it, -f follows until
# the sandbox is destroyed; a driver without the capability is refused with exit 4; the conformance
# kit's logs check passes on both sides.
. "$(dirname "$0")/lib.sh"
stub_profile box </dev/null

expect_code 0 sbx create --profile box -o json
ID=$(jq -r .id <<<"$OUT")
# The stub's console starts with its own stamped line; a command writes to it like a main process.
expect_code 0 sbx exec "$ID" -- sh -c 'printf "first\nsecond\n" >>"$SANDBOXER_CONSOLE"'
HISTORY=$(record "$ID" '.history | length')

expect_code 0 sbx logs "$ID"
[ "$OUT" = $'stub sandbox '"$ID"$' started\nfirst\nsecond' ] || fail "logs: $OUT"
expect_code 0 sbx logs --tail 1 "$ID"
[ "$OUT" = "second" ] || fail "logs --tail 1: $OUT"
expect_code 0 sbx logs --tail 0 "$ID"
[ -z "$OUT" ] || fail "logs --tail 0: $OUT"
expect_code 0 sbx logs -o json "$ID"
jq -e -s '.[0].stream == "stdout" and (.[0].time | test("Z$")) and .[1] == {time: null, stream: "console", line: "first"}' \
  <<<"$OUT" >/dev/null || fail "logs -o json: $OUT"
expect_code 0 sbx logs -o yaml --tail 1 "$ID"
[ "$OUT" = '- {"line":"second","stream":"console","time":null}' ] || fail "logs -o yaml: $OUT"
# A line stamped before --since goes; unstamped ones stay (nothing says they are older).
expect_code 0 sbx logs --since 2099-01-01T00:00:00Z "$ID"
[ "$OUT" = $'first\nsecond' ] || fail "logs --since: $OUT"
# Read-only: the record did not change.
[ "$(record "$ID" '.history | length')" -eq "$HISTORY" ] || fail "logs wrote history"

# -f prints what comes, and ends when the sandbox is destroyed.
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" logs -f --tail 0 "$ID" >"$WORK/follow" &
FOLLOW=$!
sleep 0.5
sbx exec "$ID" -- sh -c 'echo later >>"$SANDBOXER_CONSOLE"' >/dev/null
for _ in $(seq 50); do grep -q later "$WORK/follow" && break; sleep 0.1; done
grep -q later "$WORK/follow" || fail "logs -f did not show a new line: $(cat "$WORK/follow")"
alive "$FOLLOW" || fail "logs -f ended before the sandbox did"
expect_code 0 sbx destroy "$ID"
for _ in $(seq 50); do alive "$FOLLOW" || break; sleep 0.1; done
alive "$FOLLOW" && { kill "$FOLLOW"; fail "logs -f still runs after the sandbox was destroyed"; }
wait "$FOLLOW" || fail "logs -f exited $?"
[ "$(cat "$WORK/follow")" = "later" ] || fail "logs -f --tail 0: $(cat "$WORK/follow")"

# Ctrl-C ends a follow with 130.
expect_code 0 sbx create --profile box -o json
ID=$(jq -r .id <<<"$OUT")
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" logs -f "$ID" >/dev/null 2>&1 &
FOLLOW=$!
sleep 0.5
kill -INT "$FOLLOW"
rc=0; wait "$FOLLOW" || rc=$?
[ "$rc" -eq 130 ] || fail "logs -f after SIGINT exited $rc"

# The same stub behind the driver protocol: its logs come over `output` notifications.
if [ -n "${SANDBOXER_STUB_EXTERNAL:-}" ]; then
  mkdir -p "$WORK/bin"
  ln -s "$SANDBOXER_STUB_EXTERNAL" "$WORK/bin/sandboxer-driver-stub-external"
  export SANDBOXER_DRIVER_PATH="$WORK/bin"
  printf 'driver: stub-external\nstub-external: { root: %s }\n' "$WORK/stubx" >"$PROFILES/ext.yaml"
  expect_code 0 sbx create --profile ext -o json
  XID=$(jq -r .id <<<"$OUT")
  expect_code 0 sbx exec "$XID" -- sh -c 'echo over-the-pipe >>"$SANDBOXER_CONSOLE"'
  expect_code 0 sbx logs --tail 1 -o json "$XID"
  jq -e '.line == "over-the-pipe" and .stream == "console"' <<<"$OUT" >/dev/null || fail "external logs: $OUT"
  expect_code 0 sbx drivers test --profile ext -o json
  jq -e '.checks[] | select(.name == "logs") | .result == "pass"' <<<"$OUT" >/dev/null \
    || fail "the kit's logs check on the external stub: $OUT"
  expect_code 0 sbx destroy "$XID"
fi

# A driver without logs (the Python example): refused before any call, exit 4, and the kit's
# check says so.
export SANDBOXER_DRIVER_PATH="$SANDBOXER_SOURCE_DIR/examples/python${SANDBOXER_DRIVER_PATH:+:$SANDBOXER_DRIVER_PATH}"
printf 'driver: pydir\npydir: { root: %s }\n' "$WORK/pydir" >"$PROFILES/py.yaml"
expect_code 0 sbx create --profile py -o json
PID_=$(jq -r .id <<<"$OUT")
expect_code 4 sbx logs "$PID_"
expect_contains "$ERR" "logs is not supported by driver pydir"
expect_code 0 sbx destroy "$PID_"

# The kit's logs check on the built-in stub.
expect_code 0 sbx drivers test --profile box -o json
jq -e '.checks[] | select(.name == "logs") | .result == "pass"' <<<"$OUT" >/dev/null \
  || fail "the kit's logs check on stub: $OUT"
echo "ok"
