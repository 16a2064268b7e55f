#!/usr/bin/env bash
# `sandboxer run` against a real Docker Engine (docs/run.md): exit codes, stdin, a terminal,
# copies in and out, --keep-on-failure, the evidence file checked by docs/evidence.md's checker,
# a command that ignores SIGTERM (--stop-timeout), and a SIGKILLed run whose container the lease and one reap remove.
. "$(dirname "$0")/lib.sh"
require_docker
PY=/usr/bin/python3
cat >"$PROFILES/box.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m }
labels: { team: e2e-run }
docker: { image: sandboxer/busybox:local, command: [sleep, infinity], pull: never, stop_timeout: 0s }
EOF2
containers() { docker ps -aq --filter label=team=e2e-run; }
cleanup() {
  containers | xargs -r docker rm -f >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

expect_code 42 sbx run --profile box -- sh -c 'echo out; echo err >&2; exit 42'
[ "$OUT" = out ] || fail "stdout: $OUT"
expect_contains "$ERR" err
expect_code 127 sbx run --profile box -- no-such-program
expect_code 0 sbx run --profile box -u 65534 -e K=v -w /tmp -- sh -c 'echo "$(id -u) $K $PWD"'
[ "$OUT" = "65534 v /tmp" ] || fail "-u, -e, -w: $OUT"
OUT=$(printf 'a\nb\nc\n' | sbx run --profile box -i -- wc -l)
[ "$(tr -d ' ' <<<"$OUT")" = 3 ] || fail "stdin: $OUT"
# -t: the command has a terminal, of the local one's size.
/usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/run_on_pty.py" "$WORK/pty.out" \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" run --profile box -t -- sh -c 'tty; exit 3'
expect_contains "$(cat "$WORK/pty.out")" "/dev/pts/"
expect_contains "$(cat "$WORK/pty.out")" "exit=3"
[ -z "$(containers)" ] || fail "runs left containers: $(containers)"

# Copies in and out (out although the command failed), the evidence, the document.
mkdir -p "$WORK/src" && head -c 100000 /dev/urandom >"$WORK/src/blob" && printf 'x\n' >"$WORK/src/x"
expect_code 1 sbx run --profile box -o json --cp-in "$WORK/src:/work" -w /work \
  --cp-out "/work/out:$WORK/out" --evidence "$WORK/evidence.json" -- \
  sh -c 'mkdir out && sha256sum blob >out/sum && exit 1'
DOC=$OUT
[ "$(cut -d' ' -f1 "$WORK/out/sum")" = "$(sha256sum "$WORK/src/blob" | cut -d' ' -f1)" ] ||
  fail "the blob in the container differs"
[ "$(jq -r '"\(.exit_code) \(.driver) \(.destroyed) \([.copies[].via] | join(","))"' <<<"$DOC")" = \
  "1 docker true native,native" ] || fail "run -o json: $DOC"
sed -n '/^```python$/,/^```$/p' "$SANDBOXER_SOURCE_DIR/docs/evidence.md" | sed '1d;$d' >"$WORK/check.py"
[ "$("$PY" "$WORK/check.py" "$WORK/evidence.json")" = ok ] || fail "the checker refuses run's evidence"
[ -z "$(containers)" ] || fail "run left containers: $(containers)"

# --keep-on-failure: the container stays, and the way to reach it is printed.
expect_code 2 sbx run --profile box --keep-on-failure --name kept -- sh -c 'exit 2'
expect_contains "$ERR" "sandboxer exec sbx-"
[ -n "$(containers)" ] || fail "--keep-on-failure kept no container"
expect_code 0 sbx exec kept -- true
expect_code 0 sbx destroy kept

# SIGTERM to a command that ignores it: --stop-timeout later, run copies out what there is,
# destroys the container (which ends the command) and exits 143.
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" run --profile box --stop-timeout 1s \
  --cp-out "/work/o:$WORK/stubborn" -- \
  sh -c 'trap "" TERM INT; mkdir -p /work/o; echo kept > /work/o/f; echo started; sleep 120' \
  >"$WORK/term.out" 2>"$WORK/term.err" &
PID=$!
for _ in $(seq 200); do grep -q started "$WORK/term.out" && break; sleep 0.05; done
grep -q started "$WORK/term.out" || fail "the stubborn command never started: $(cat "$WORK/term.err")"
kill -TERM "$PID"
rc=0
for _ in $(seq 300); do alive "$PID" || break; sleep 0.1; done
alive "$PID" && fail "run still waits 30 s after SIGTERM with --stop-timeout 1s"
wait "$PID" || rc=$?
[ "$rc" = 143 ] || fail "run after SIGTERM past --stop-timeout: exit $rc ($(cat "$WORK/term.err"))"
expect_contains "$(cat "$WORK/term.err")" "had not ended 1s after the signal"
[ "$(cat "$WORK/stubborn/f" 2>/dev/null)" = kept ] || fail "no copy-out past --stop-timeout: $(cat "$WORK/term.err")"
[ -z "$(containers)" ] || fail "run past --stop-timeout left $(containers)"

# SIGKILL while the command runs: after the lease, one reap removes the container.
killed_run_reaped box killed
[ -z "$(containers)" ] || fail "reap left the killed run's container: $(containers)"
echo ok
