#!/usr/bin/env bash
# The vm-packer driver when the VM misbehaves: a guest that never becomes ready (a clear error
# within ready_timeout, nothing left running), QEMU killed from outside (status says so, destroy
# and reap clean up), and QEMU refusing its arguments.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
DATA="$STATE/drivers/vm-packer"
at_exit 'for f in "$DATA"/vms/*/qemu.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; true'
qemu_of() { pgrep -f -- "-name $1 " || true; }

# A guest whose init never starts the agent (a shell on the console): exit 4 within the timeout,
# the serial log's last words in the message, no QEMU and no VM directory left.
tiny_vm_profile stuck "ready_timeout: 6s"
sed -i 's|rdinit=/init"|rdinit=/bin/sh"|' "$PROFILES/stuck.yaml"
START=$(date +%s)
expect_code 4 sbx create --profile stuck --name stuck
ELAPSED=$(($(date +%s) - START))
[ "$ELAPSED" -lt 30 ] || fail "a stuck guest took ${ELAPSED}s to fail (ready_timeout 6s)"
expect_contains "$ERR" "did not become ready within 6s"
STUCK=$(ledger_jq -r '.sandboxes[] | select(.name == "stuck") | .id')
[ "$(record "$STUCK" .state)" = failed ] || fail "stuck: $(record "$STUCK" .state)"
[ -z "$(qemu_of "$STUCK")" ] || fail "the stuck guest's QEMU still runs"
[ -z "$(ls "$DATA/vms" 2>/dev/null)" ] || fail "VM directories left: $(ls "$DATA/vms")"

# A guest whose CPU never runs (QEMU started with -S, as an accelerator that cannot run the kernel
# leaves it): the timeout says the serial log is empty, the guest never started, and under what.
printf '#!/bin/sh\nexec qemu-system-x86_64 "$@" -S\n' >"$WORK/frozen-qemu"
chmod +x "$WORK/frozen-qemu"
tiny_vm_profile frozen "ready_timeout: 3s" "accel: tcg" "qemu: $WORK/frozen-qemu"
expect_code 4 sbx create --profile frozen --name frozen
expect_contains "$ERR" "its serial log is empty: the guest never started under TCG"
[ -z "$(ls "$DATA/vms" 2>/dev/null)" ] || fail "VM directories left: $(ls "$DATA/vms")"

# A kernel that panics at once: the VM stops while booting, said at once (not at the timeout).
tiny_vm_profile panics "ready_timeout: 2m"
sed -i 's|rdinit=/init"|rdinit=/no/such/init"|' "$PROFILES/panics.yaml"
START=$(date +%s)
expect_code 4 sbx create --profile panics --name panics
[ $(($(date +%s) - START)) -lt 60 ] || fail "a panicking guest was waited for until the timeout"
expect_contains "$ERR" "the VM stopped while booting"

# QEMU killed from outside: status says the VM is stopped, destroy cleans up what is left.
tiny_vm_profile vm
expect_code 0 sbx create --profile vm --name victim -o json
VICTIM=$(jq -r .id <<<"$OUT")
kill -9 "$(qemu_of "$VICTIM")"
sleep 0.5
expect_code 0 sbx status victim -o json
[ "$(jq -r .backend.state <<<"$OUT")" = stopped ] || fail "status after kill: $OUT"
expect_code 4 sbx exec victim -- true
expect_contains "$ERR" "is not running"
expect_code 0 sbx destroy victim
[ ! -e "$DATA/vms/$VICTIM" ] || fail "the dead VM's directory is left"

# The same, left to reap once it expires.
expect_code 0 sbx create --profile vm --name expiring --ttl 5s -o json
EXPIRING=$(jq -r .id <<<"$OUT")
kill -9 "$(qemu_of "$EXPIRING")"
sleep 6
expect_code 0 sbx reap --skew 0s
[ "$(record "$EXPIRING" .state)" = destroyed ] || fail "reap: $(record "$EXPIRING" .state)"
[ ! -e "$DATA/vms/$EXPIRING" ] || fail "reap left the dead VM's directory"

# QEMU refusing its arguments: its own words, exit 4, nothing left.
tiny_vm_profile badmem
sed -i 's/^  memory: 256m$/  memory: 1t/' "$PROFILES/badmem.yaml"
expect_code 4 sbx create --profile badmem --name badmem
expect_contains "$ERR" "QEMU refused to start the VM: qemu-system-x86_64: cannot set up guest memory"
[ -z "$(ls "$DATA/vms" 2>/dev/null)" ] || fail "VM directories left: $(ls "$DATA/vms")"

# accel: kvm where /dev/kvm cannot be used: a profile mistake (exit 2) naming the device. Where
# it opens but the CPU advertises no hardware virtualization (kvm-pvm), a stock kernel may never
# start: the timeout then says so and names KVM.
tiny_vm_profile kvm "accel: kvm" "ready_timeout: 20s"
if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
  expect_code 0 sbx create --profile kvm --name kvm
  expect_code 0 sbx destroy kvm
elif [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
  rc=0
  sbx create --profile kvm --name kvm >/dev/null 2>"$WORK/kvm.err" || rc=$?
  case $rc in
  0) expect_code 0 sbx destroy kvm ;;
  # Either the guest never starts (the timeout names KVM), or QEMU itself gives up at start (a
  # PVM host refusing an MSR): exit 4 with QEMU's own words.
  4) grep -qE "under KVM|QEMU refused to start the VM" "$WORK/kvm.err" ||
    fail "accel: kvm on a KVM without vmx/svm: $(cat "$WORK/kvm.err")" ;;
  *) fail "accel: kvm on a KVM without vmx/svm: exit $rc ($(cat "$WORK/kvm.err"))" ;;
  esac
else
  expect_code 2 sbx create --profile kvm --name kvm
  expect_contains "$ERR" "/dev/kvm cannot be opened"
  [ -z "$(ls "$DATA/vms" 2>/dev/null)" ] || fail "VM directories left: $(ls "$DATA/vms")"
fi
echo ok
