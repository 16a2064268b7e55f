#!/usr/bin/env bash
# The vm-packer driver's other exec path and its network: `network: restricted` (QEMU user
# networking with restrict=on) and `exec: { via: ssh }` through a forwarded loopback port, on the
# tiny image's dropbear with the image's throwaway key. Forwards listen on 127.0.0.1 only, the
# guest reaches nothing outside, `ports` reach a guest server, exec keeps its meaning (streams,
# exit codes, quoting, stdin, env, workdir, a terminal and its resize), and a checkpoint restores.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
tiny_vm_profile vm "network: restricted" "ports: [8080]" \
  "exec: { via: ssh, identity_file: ${SANDBOXER_TINY_VM_DIR:?}/ssh/id_ed25519 }"
# The profile's own ports: (docs/ports.md) beside the driver's vm.ports.
printf 'ports: [9090, "5353/udp"]\n' >>"$PROFILES/vm.yaml"
DATA="$STATE/drivers/vm-packer"
at_exit 'for f in "$DATA"/vms/*/qemu.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; true'
qemu_of() { pgrep -f -- "-name $1 " || true; }

expect_code 0 sbx create --profile vm --name one -o json
ID=$(jq -r .id <<<"$OUT")
SSH_AT=$(record "$ID" '.info.ports["22"]')
WEB_AT=$(record "$ID" '.info.ports["8080"]')
[[ "$SSH_AT" == 127.0.0.1:* && "$WEB_AT" == 127.0.0.1:* ]] || fail "forwards: $(record "$ID" .info)"
# Every exposed port, both kinds, is in the record and `port`; the ssh forward is not one.
expect_code 0 sbx port one
[[ "$OUT" == *"8080/tcp -> $WEB_AT"* && "$OUT" == *"9090/tcp -> 127.0.0.1:"* && "$OUT" == *"5353/udp -> 127.0.0.1:"* ]] ||
  fail "port one: $OUT"
[ "$(wc -l <<<"$OUT")" = 3 ] || fail "port one lists $(wc -l <<<"$OUT") ports: $OUT"
expect_code 0 sbx port one 9090
OWN_AT=$OUT
[[ "$OWN_AT" == 127.0.0.1:* ]] || fail "port one 9090: $OWN_AT"
[ "$(record "$ID" '[.history[] | select(.event == "ports.exposed") | .details.ports[].port] | sort | join(",")')" = \
  "5353,8080,9090" ] || fail "the ports.exposed entry: $(record "$ID" .history)"
QEMU=$(qemu_of "$ID")
[ -n "$QEMU" ] || fail "no QEMU runs for $ID"
# QEMU listens on exactly the TCP forwards, and only on loopback; the UDP one is bound there too.
LISTENS=$(ss -Hltnp | grep "pid=$QEMU," | awk '{print $4}' | sort)
[ "$LISTENS" = "$(printf '%s\n' "$SSH_AT" "$WEB_AT" "$OWN_AT" | sort)" ] || fail "QEMU listens on: $LISTENS"
[ "$(ss -Hlunp | grep "pid=$QEMU," | awk '{print $4}')" = "$(sbx port one 5353/udp)" ] ||
  fail "QEMU's UDP forward: $(ss -Hlunp | grep "pid=$QEMU,")"

# exec over ssh means what it means over the agent.
expect_code 5 sbx exec -e K=v one -- sh -c 'echo "out $K"; echo err >&2; exit 5'
[ "$OUT" = "out v" ] && [ "$ERR" = err ] || fail "exec: $OUT / $ERR"
expect_code 0 sbx exec one -- printf '%s|' "a b" "it's" '$HOME' ';' '*' ''
[ "$OUT" = "a b|it's|\$HOME|;|*||" ] || fail "the guest's shell re-split the words: $OUT"
expect_code 0 sbx exec -w /tmp one -- pwd
[ "$OUT" = /tmp ] || fail "workdir: $OUT"
OUT=$(printf 'a\nb\n' | sbx exec -i one -- cat) || fail "exec -i"
[ "$OUT" = $'a\nb' ] || fail "stdin: $OUT"
expect_code 127 sbx exec one -- no-such-program
# -it: ssh's stdin is the terminal, so its size and each resize reach the guest's terminal.
/usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/run_on_pty.py" "$WORK/tty.out" \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec -it one -- \
  sh -c 'test -t 0 && echo "first=$(stty size)"; sleep 1; echo "then=$(stty size)"; exit 3'
grep -qx "first=33 111" "$WORK/tty.out" || fail "exec -it size: $(cat "$WORK/tty.out")"
grep -qx "then=44 132" "$WORK/tty.out" || fail "exec -it resize: $(cat "$WORK/tty.out")"
grep -qx "exit=3" "$WORK/tty.out" || fail "exec -it exit: $(cat "$WORK/tty.out")"
# -t alone: a terminal of the local size (set when the command starts).
/usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/run_on_pty.py" "$WORK/tty.out" \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec -t one -- \
  sh -c 'test -t 1 && echo "size=$(stty size)"'
grep -qx "size=33 111" "$WORK/tty.out" || fail "exec -t size: $(cat "$WORK/tty.out")"

# `ports`: a server in the guest answers on its forward, the driver's and the profile's alike.
# page_at HOST:PORT: the guest's page there, tried for up to 5 s.
page_at() {
  local body=""
  for _ in $(seq 50); do
    body=$(curl -s -m 2 "http://$1/index.html") && break
    sleep 0.1
  done
  printf '%s' "$body"
}
expect_code 0 sbx exec one -- sh -c 'mkdir -p /www && echo from-the-guest >/www/index.html && httpd -p 8080 -h /www'
BODY=$(page_at "$WEB_AT")
[ "$BODY" = from-the-guest ] || fail "the forward of port 8080 did not reach the guest: $BODY"
expect_code 0 sbx exec one -- httpd -p 9090 -h /www
BODY=$(page_at "$OWN_AT")
[ "$BODY" = from-the-guest ] || fail "ports: 9090 did not reach the guest at $OWN_AT: $BODY"

# restrict=on: the guest cannot open a connection to the host (or anywhere) through QEMU.
PORT=$(free_port)
/usr/bin/python3 -m http.server --bind 127.0.0.1 "$PORT" >"$WORK/host-web.log" 2>&1 &
HOST_WEB=$!
at_exit "kill $HOST_WEB 2>/dev/null"
for _ in $(seq 50); do curl -s -m 1 "http://127.0.0.1:$PORT/ready" >/dev/null && break; sleep 0.1; done
expect_code 0 sbx exec one -- sh -c "wget -q -T 3 -O - http://10.0.2.2:$PORT/from-the-guest >/dev/null 2>&1; echo \$?"
[ "$OUT" != 0 ] || fail "the restricted guest reached the host's port $PORT"
! grep -q "from-the-guest" "$WORK/host-web.log" || fail "the host's server saw the guest: $(cat "$WORK/host-web.log")"

# A checkpoint restores over ssh: the process before it still runs, new forwards are chosen.
expect_code 0 sbx exec one -- sh -c 'sleep 100000 >/dev/null 2>&1 & echo $! >/root/bg.pid'
expect_code 0 sbx snapshot one --name cp1
expect_code 0 sbx restore one:cp1 --name two -o json
TWO=$(jq -r .id <<<"$OUT")
[ "$(record "$TWO" '.info.ports["22"]')" != "$SSH_AT" ] || fail "the restore reused the forward"
expect_code 0 sbx exec two -- sh -c 'kill -0 "$(cat /root/bg.pid)" && echo alive'
[ "$OUT" = alive ] || fail "restore over ssh: $OUT / $ERR"

# Destroy leaves no QEMU, no VM directory and no listener.
expect_code 0 sbx destroy one two
[ -z "$(qemu_of "$ID")$(qemu_of "$TWO")" ] || fail "a QEMU is left"
[ -z "$(ls "$DATA/vms" 2>/dev/null)" ] || fail "VM directories left: $(ls "$DATA/vms")"
! ss -Hltn | grep -qF "$SSH_AT" || fail "$SSH_AT still listens"
echo "ok"
