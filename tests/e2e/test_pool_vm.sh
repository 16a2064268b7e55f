#!/usr/bin/env bash
# Warm pools on vm-packer, a real QEMU (TCG) and the tiny image (docs/pools.md): the first member
# boots and leaves a memory checkpoint, the others are restored from it (no boot); a claim hands
# over a running VM whose exec works, and what one claimed member writes is not in another; reap
# recycles members past max_age (the test clock) and refills from the checkpoint; destroy leaves
# no QEMU.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip "jq is missing"
cd "$WORK"
tiny_vm_profile warm
printf 'pool: { size: 2, max_age: 1h }\n' >>"$PROFILES/warm.yaml"
DATA="$STATE/drivers/vm-packer"
at_exit 'for f in "$DATA"/vms/*/qemu.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; true'
qemus() { ls "$DATA"/vms/*/qemu.pid 2>/dev/null | while read -r f; do alive "$(cat "$f")" && echo x; done | wc -l; }
pooled() { ledger_jq -r '[.sandboxes[] | select(.state == "pooled")] | sort_by(.created_at) | .[].id'; }

# One at a time here: two TCG guests booting side by side on two cores is what this avoids.
expect_code 0 sbx pool fill --profile warm --parallel 1 -o json
[ "$(jq -r '.[0] | "\(.made) \(.errors | length)"' <<<"$OUT")" = "2 0" ] || fail "pool fill: $OUT"
MEMBERS=($(pooled))
[ "${#MEMBERS[@]}" = 2 ] || fail "members: ${MEMBERS[*]}"
[ "$(record "${MEMBERS[0]}" '"\(.info.restored_memory) \(.info.pool_checkpoint)"')" = "false null" ] ||
  fail "the first member should boot: $(record "${MEMBERS[0]}" .info)"
CHECKPOINT=$(record "${MEMBERS[1]}" .info.pool_checkpoint)
[ "$(record "${MEMBERS[1]}" .info.restored_memory)" = true ] && [ "$CHECKPOINT" != null ] ||
  fail "the second member should be restored from a checkpoint: $(record "${MEMBERS[1]}" .info)"
[ -f "$DATA/pool-checkpoints/$CHECKPOINT/disk.qcow2" ] || fail "no checkpoint in $DATA/pool-checkpoints"
[ "$(qemus)" = 2 ] || fail "QEMUs running: $(qemus)"

# Claims: the restored member is a VM of its own.
expect_code 0 sbx create --profile warm --name a -o json
[ "$(jq -r .id <<<"$OUT")" = "${MEMBERS[0]}" ] || fail "the claim: $OUT"
expect_code 0 sbx exec a -- sh -c 'echo from-a > /root/mark; cat /root/mark'
[ "$OUT" = from-a ] || fail "exec in a: $OUT"
expect_code 0 sbx create --profile warm --name b -o json
[ "$(jq -r .id <<<"$OUT")" = "${MEMBERS[1]}" ] || fail "the second claim: $OUT"
[ "$(record "${MEMBERS[1]}" '[.history[].event] | join(" ")')" = "created pooled claimed" ] ||
  fail "history: $(record "${MEMBERS[1]}" '[.history[].event]')"
expect_code 0 sbx exec b -- sh -c 'cat /root/mark 2>/dev/null || echo none'
[ "$OUT" = none ] || fail "b sees a's file: $OUT"

# reap refills from the checkpoint; a member past max_age is replaced.
SANDBOXER=$SANDBOXER_TESTCLOCK
at() { local t=$1; shift; SANDBOXER_FAKE_NOW=$t sbx "$@"; }
NOW=$(date -u +%Y-%m-%dT%H:%M:%SZ)
expect_code 0 at "$NOW" reap --parallel 1 -o json
[ "$(jq -r .filled <<<"$OUT")" = 2 ] || fail "reap's refill: $OUT"
for id in $(pooled); do
  [ "$(record "$id" .info.pool_checkpoint)" = "$CHECKPOINT" ] || fail "$id not from the checkpoint"
done
LATER=$(date -u -d '+61 minutes' +%Y-%m-%dT%H:%M:%SZ)
expect_code 0 at "$LATER" reap --parallel 1 -o json
[ "$(jq -r '"\([.items[] | select(.state == "pooled" and .outcome == "destroyed")] | length) \(.filled)"' \
  <<<"$OUT")" = "2 2" ] || fail "max_age recycling: $OUT"

expect_code 0 sbx ledger verify
expect_code 0 sbx destroy --all --yes
[ "$(qemus)" = 0 ] || fail "QEMU left after destroy"
