#!/usr/bin/env bash
# The vm-packer driver on a real QEMU (TCG) and the tiny image built with Packer
# (scripts/build-tiny-vm.sh): create until exec works, exec (output, exit codes, stdin, env,
# workdir, a terminal), logs (the serial console: --tail, -o json, -f until the VM stops), a
# memory checkpoint that a restore resumes (a process started before it still runs, a file
# written before it is there), a SIGKILLed `run` whose VM reap stops after the lease, destroy
# leaving no QEMU, overlay or socket.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
tiny_vm_profile vm
DATA="$STATE/drivers/vm-packer"
# Whatever happens, no VM of this test outlives it.
at_exit 'for f in "$DATA"/vms/*/qemu.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; true'

qemu_of() { pgrep -f -- "-name $1 " || true; }

expect_code 0 sbx create --profile vm --name one -o json
ID=$(jq -r .id <<<"$OUT")
[ -n "$(qemu_of "$ID")" ] || fail "no QEMU runs for $ID"
[ "$(record "$ID" .spec.image_sha256)" = "$(sha256sum <"$(record "$ID" .spec.image)" | cut -d' ' -f1)" ] ||
  fail "the spec does not record the image's hash"
# accel: auto takes KVM only where /dev/kvm opens and the CPU advertises vmx or svm, and says why.
if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then want_accel=kvm; else want_accel=tcg; fi
[ "$(record "$ID" .info.accel)" = "$want_accel" ] || fail "accel, expected $want_accel: $(record "$ID" .info)"
expect_contains "$(record "$ID" .info.accel_reason)" "${want_accel^^}"

# exec: a real kernel, output apart, exit codes, env, workdir, stdin, a missing program.
expect_code 0 sbx exec one -- uname -r
expect_contains "$OUT" "cloud-amd64"
expect_code 5 sbx exec -e K=v one -- sh -c 'echo "out $K"; echo err >&2; exit 5'
[ "$OUT" = "out v" ] && [ "$ERR" = err ] || fail "exec: $OUT / $ERR"
expect_code 0 sbx exec -w /tmp one -- pwd
[ "$OUT" = /tmp ] || fail "workdir: $OUT"
OUT=$(printf 'a\nb\n' | sbx exec -i one -- cat) || fail "exec -i"
[ "$OUT" = $'a\nb' ] || fail "stdin: $OUT"
# More stdin than the agent holds for a command that reads it late (4 MiB, agent.cpp): the
# agent stops reading the host's frames until the command catches up, and nothing is lost.
OUT=$(head -c 6291456 /dev/zero | sbx exec -i one -- sh -c 'sleep 2; wc -c') || fail "exec -i 6 MiB"
[ "$(tr -d ' ' <<<"$OUT")" = 6291456 ] || fail "exec -i of 6 MiB delivered $OUT bytes"
expect_code 127 sbx exec one -- no-such-program
/usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/run_on_pty.py" "$WORK/tty.out" \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec -t one -- \
  sh -c 'test -t 0 && echo "first=$(stty size)"; sleep 1; echo "then=$(stty size)"; exit 3'
grep -qx "first=33 111" "$WORK/tty.out" || fail "exec -t size: $(cat "$WORK/tty.out")"
grep -qx "then=44 132" "$WORK/tty.out" || fail "exec -t resize: $(cat "$WORK/tty.out")"
grep -qx "exit=3" "$WORK/tty.out" || fail "exec -t exit: $(cat "$WORK/tty.out")"

# logs: the serial console, from the guest's boot on; lines of stream console, no time, no \r.
expect_code 0 sbx logs one
expect_contains "$OUT" "sandboxer-init: agent starting"
[[ "$OUT" != *$'\r'* ]] || fail "logs kept the console's carriage returns: $(od -c <<<"$OUT" | tail -3)"
# Nothing on the console has a time: --since keeps every line.
expect_code 0 sbx logs --since 2099-01-01T00:00:00Z one
expect_contains "$OUT" "sandboxer-init: agent starting"
# What the guest writes to /dev/console comes back; --tail 1 is its last line.
expect_code 0 sbx exec one -- sh -c 'echo console-marker-1 >/dev/console'
for _ in $(seq 50); do
  expect_code 0 sbx logs --tail 1 one
  [ "$OUT" = console-marker-1 ] && break
  sleep 0.1
done
[ "$OUT" = console-marker-1 ] || fail "logs --tail 1: $OUT"
expect_code 0 sbx logs --tail 1 -o json one
jq -e '. == {time: null, stream: "console", line: "console-marker-1"}' <<<"$OUT" >/dev/null ||
  fail "logs --tail 1 -o json: $OUT"
# -f: new lines as they come, a line without its newline (a prompt) after a quiet second; it runs
# until the VM stops (destroy, below).
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" logs -f --tail 0 one >"$WORK/follow" 2>&1 &
FOLLOW=$!
sleep 0.5
expect_code 0 sbx exec one -- sh -c 'echo console-marker-2 >/dev/console; printf "prompt> " >/dev/console'
for _ in $(seq 50); do grep -q '^prompt> $' "$WORK/follow" && break; sleep 0.1; done
[ "$(cat "$WORK/follow")" = $'console-marker-2\nprompt> ' ] || fail "logs -f: $(cat "$WORK/follow")"
alive "$FOLLOW" || fail "logs -f ended while the VM runs"
# Ctrl-C ends a follow with 130.
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" logs -f one >/dev/null 2>&1 &
INTERRUPTED=$!
sleep 0.5
kill -INT "$INTERRUPTED"
rc=0; wait "$INTERRUPTED" || rc=$?
[ "$rc" -eq 130 ] || fail "logs -f after SIGINT exited $rc"

# A checkpoint of the running VM: restore resumes it where it was.
expect_code 0 sbx exec one -- sh -c 'sleep 100000 >/dev/null 2>&1 & echo $! >/root/bg.pid; echo kept >/root/file'
expect_code 0 sbx snapshot one --name cp1 -o json
SIZE=$(jq -r .size_bytes <<<"$OUT")
CP=$(jq -r .id <<<"$OUT")
[ "$SIZE" -gt 0 ] || fail "snapshot size: $OUT"
expect_code 0 sbx exec one -- sh -c 'echo later >/root/later'
expect_code 0 sbx restore one:cp1 --name two -o json
TWO=$(jq -r .id <<<"$OUT")
expect_code 0 sbx exec two -- sh -c 'kill -0 "$(cat /root/bg.pid)" && cat /root/file && ls /root'
expect_contains "$OUT" "kept"
[[ "$OUT" != *later* ]] || fail "the restore has what came after the checkpoint: $OUT"

# --disk-only: the disk as the guest left it (synced first); a restore boots it afresh.
expect_code 0 sbx exec one -- sh -c 'echo on-disk >/root/disk-file'
expect_code 0 sbx snapshot one --name disk1 --disk-only -o json
DISK_SNAP=$(jq -r .id <<<"$OUT")
# The checkpoint's disk carries the VM's state (an internal snapshot); the disk-only one none.
qemu-img snapshot -l "$DATA/snapshots/$CP/disk.qcow2" | grep -q "$CP" || fail "no VM state in $CP"
[ -z "$(qemu-img snapshot -l "$DATA/snapshots/$DISK_SNAP/disk.qcow2")" ] ||
  fail "VM state in the disk-only snapshot"
[ "$(record "$ID" '.history[-1].details.disk_only')" = true ] || fail "history: $(record "$ID" '.history[-1]')"
expect_code 0 sbx restore one:disk1 --name three -o json
THREE=$(jq -r .id <<<"$OUT")
expect_code 0 sbx exec three -- sh -c 'cat /root/disk-file; kill -0 "$(cat /root/bg.pid)" 2>/dev/null && echo still-running || echo booted-afresh'
[ "$OUT" = $'on-disk\nbooted-afresh' ] || fail "disk-only restore: $OUT"

# A `run` SIGKILLed while its command runs: after the lease, one reap stops its QEMU.
killed_run_reaped vm killed
[ -z "$(qemu_of "$KILLED_ID")" ] || fail "reap left the killed run's QEMU"

# destroy: no QEMU, no overlay, no socket; a second destroy is fine.
expect_code 0 sbx destroy one two three
[ -z "$(qemu_of "$ID")$(qemu_of "$TWO")$(qemu_of "$THREE")" ] || fail "QEMU still runs"
# The follow of one's console ended with its QEMU, exit 0.
for _ in $(seq 50); do alive "$FOLLOW" || break; sleep 0.1; done
alive "$FOLLOW" && { kill "$FOLLOW"; fail "logs -f still runs after the VM was destroyed"; }
wait "$FOLLOW" || fail "logs -f exited $?: $(cat "$WORK/follow")"
expect_code 3 sbx logs one
[ -z "$(ls "$DATA/vms")" ] || fail "VM directories left: $(ls "$DATA/vms")"
expect_code 0 sbx destroy one
echo ok
