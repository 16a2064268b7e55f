#!/usr/bin/env bash
# exec -t against a real Docker Engine, on a pseudo-terminal from python's pty module standing in
# for the user's: the command's terminal gets the local terminal's size (33x111) when the exec
# starts, and the new size (44x132) when the local terminal is resized while it runs (SIGWINCH).
# Also -t without a local terminal, and exec -u (issue 35).
. "$(dirname "$0")/lib.sh"
require_docker
command -v python3 >/dev/null || skip "python3 is missing"

cat >"$PROFILES/tty.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m }
docker: { image: sandboxer/busybox:local, command: [sleep, infinity], pull: never, stop_timeout: 0s }
EOF2
CID=""
cleanup() {
  [ -z "$CID" ] || docker rm -f "$CID" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
expect_code 0 sbx create --profile tty -o json
ID=$(jq -r .id <<<"$OUT")
CID=$(jq -r .backend_id <<<"$OUT")

# On API 1.41 the exec's terminal is 0x0 until the engine takes the first resize, a few ms after
# the process starts: the command waits (5 s at most) for a size, prints it, then waits (10 s at
# most) for it to change and prints it again.
cat >"$WORK/sizes.sh" <<'EOF2'
i=0
while s=$(stty size 2>/dev/null); [ -z "$s" ] || [ "$s" = "0 0" ]; do
  i=$((i + 1)); [ $i -lt 50 ] || break; sleep 0.1
done
echo "first=$s"
i=0
while [ "$(stty size)" = "$s" ]; do i=$((i + 1)); [ $i -lt 100 ] || break; sleep 0.1; done
echo "then=$(stty size)"
EOF2

PTY_RUN="$SANDBOXER_SOURCE_DIR/tests/e2e/run_on_pty.py"

sbx_argv=("$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES")
/usr/bin/python3 "$PTY_RUN" "$WORK/t.out" "${sbx_argv[@]}" exec -t "$ID" -- sh -c "$(cat "$WORK/sizes.sh")"
grep -qx "first=33 111" "$WORK/t.out" || fail "exec -t: initial size not forwarded: $(cat "$WORK/t.out")"
grep -qx "then=44 132" "$WORK/t.out" || fail "exec -t: resize not forwarded: $(cat "$WORK/t.out")"
grep -qx "exit=0" "$WORK/t.out" || fail "exec -t: exit code: $(cat "$WORK/t.out")"

# The same with stdin attached (-i -t), and the command's exit code still comes back.
/usr/bin/python3 "$PTY_RUN" "$WORK/it.out" "${sbx_argv[@]}" exec -i -t "$ID" -- \
  sh -c "$(cat "$WORK/sizes.sh"); exit 7"
grep -qx "first=33 111" "$WORK/it.out" || fail "exec -i -t: initial size: $(cat "$WORK/it.out")"
grep -qx "then=44 132" "$WORK/it.out" || fail "exec -i -t: resize: $(cat "$WORK/it.out")"
grep -qx "exit=7" "$WORK/it.out" || fail "exec -i -t: exit code: $(cat "$WORK/it.out")"

# Without a local terminal (CI), -t still allocates one in the container, as docker exec -t does
# (issue 35): the command sees a terminal and its stderr arrives with its stdout.
expect_code 3 sbx exec -t "$ID" -- sh -c 'test -t 1 && echo on-a-tty; echo err >&2; exit 3'
[ "$(tr -d '\r' <<<"$OUT")" = "$(printf 'on-a-tty\nerr')" ] && [ -z "$ERR" ] ||
  fail "exec -t without a local terminal: [$OUT] / [$ERR]"

# exec -u: the exec's User, by uid and by name (issue 35).
expect_code 0 sbx exec -u 65534 "$ID" -- id -u
[ "$OUT" = 65534 ] || fail "exec -u 65534: $OUT"
expect_code 0 sbx exec -u nobody "$ID" -- id -un
[ "$OUT" = nobody ] || fail "exec -u nobody: $OUT"
[ "$(record "$ID" '.history[-1].details.exec.user')" = nobody ] || fail "the user is not in the history"

# On a terminal, a long step shows a progress line that names the sandbox (not a container id) and
# is erased before the command prints its result (issue 35): the progress text is followed at once
# by the erase-line sequence.
/usr/bin/python3 "$PTY_RUN" "$WORK/snap.out" "${sbx_argv[@]}" snapshot "$ID" --name on-pty
grep -qx "exit=0" "$WORK/snap.out" || fail "snapshot on a terminal: $(cat "$WORK/snap.out")"
grep -q "commit $ID to [^"$'\e'"]*"$'\e'"\[K" "$WORK/snap.out" ||
  fail "no erased progress line naming $ID: $(cat -v "$WORK/snap.out")"
expect_code 0 sbx snapshots rm "$ID:on-pty"

expect_code 0 sbx destroy "$ID"
CID=""
echo ok
