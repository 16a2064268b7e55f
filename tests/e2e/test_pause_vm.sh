#!/usr/bin/env bash
# pause and resume of a vm-packer sandbox on a real QEMU (TCG) and the tiny image (docs/pause.md):
# a memory checkpoint into the overlay, then no QEMU at all while paused (no RAM held); resume
# loads it and a process started before the pause counts on, a file written before is there; a
# pause without memory (a profile's pause: {memory: false}) keeps the synced files and cold-boots;
# a VM whose directory is removed while paused cannot be resumed (exit 3); destroy leaves nothing.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
tiny_vm_profile vm
DATA="$STATE/drivers/vm-packer"
at_exit 'for f in "$DATA"/vms/*/qemu.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; true'
qemu_of() { pgrep -f -- "-name $1 " || true; }

expect_code 0 sbx create --profile vm --name vm -o json
ID=$(jq -r .id <<<"$OUT")
expect_code 0 sbx exec vm -- sh -c \
  'echo kept > /root/note; (i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo $i > /tmp/ticks.new; mv /tmp/ticks.new /tmp/ticks; sleep 0.2; done) >/dev/null 2>&1 </dev/null &'
sleep 1
expect_code 0 sbx pause vm -o json
[ "$(jq -r '.[0] | "\(.state) \(.how) \(.memory)"' <<<"$OUT")" = "paused checkpoint true" ] ||
  fail "pause: $OUT"
[ -z "$(qemu_of "$ID")" ] || fail "QEMU still runs for the paused $ID: $(qemu_of "$ID")"
expect_code 0 sbx status vm
expect_contains "$OUT" "checkpoint"
expect_code 10 sbx exec vm -- true
expect_code 0 sbx resume vm
[ -n "$(qemu_of "$ID")" ] || fail "no QEMU after the resume"
expect_code 0 sbx exec vm -- cat /tmp/ticks
BEFORE=$OUT
sleep 1
expect_code 0 sbx exec vm -- cat /tmp/ticks /root/note
[ "$(head -1 <<<"$OUT")" -gt "$BEFORE" ] || fail "the process did not survive: $BEFORE then $OUT"
[ "$(tail -1 <<<"$OUT")" = kept ] || fail "the file: $OUT"

# Files only: synced, kept across a cold boot.
sed -i '1i pause: { memory: false }' "$PROFILES/vm.yaml"
expect_code 0 sbx create --profile vm --name cold -o json
COLD=$(jq -r .id <<<"$OUT")
expect_code 0 sbx exec cold -- sh -c 'echo on-disk > /root/file'
expect_code 0 sbx pause cold -o json
[ "$(jq -r '.[0] | "\(.how) \(.memory)"' <<<"$OUT")" = "stop false" ] || fail "pause: $OUT"
[ -z "$(qemu_of "$COLD")" ] || fail "QEMU still runs for $COLD"
expect_code 0 sbx resume cold
expect_code 0 sbx exec cold -- cat /root/file
[ "$OUT" = on-disk ] || fail "the file after a cold boot: $OUT"

# Gone while paused: exit 3, the record stays paused; destroy closes it.
expect_code 0 sbx pause cold --quiet
rm -rf "${DATA:?}/vms/$COLD"
expect_code 3 sbx resume cold
expect_contains "$ERR" "vanished while it was paused"
expect_code 0 sbx destroy vm cold
[ -z "$(qemu_of "$ID")$(qemu_of "$COLD")" ] || fail "QEMU left after destroy"
