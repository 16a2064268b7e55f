#!/usr/bin/env bash
# Issue 13: names and labels are validated (no newlines, escapes, bidi marks, 10 KB values,
# id-shaped names or paths), a table never prints control characters raw, and -o yaml reads back
# (by a YAML 1.1 reader, the strictest about `yes`, `on`, `0x10`) exactly as -o json.
. "$(dirname "$0")/lib.sh"
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import yaml' 2>/dev/null ||
  skip "Debian's python3-yaml is missing"

stub_profile box <<<"  root: $WORK/backend"

for name in $'two\nlines' $'esc\e[31m' "sbx-abcdefghijkl" "../up" ".hidden" "-flag" \
  "$(printf 'x%.0s' $(seq 64))" $'rtl\u202eevil' "sp ace"; do
  expect_code 2 sbx create --profile box --name "$name"
  expect_contains "$ERR" "invalid name"
done
expect_code 2 sbx create --profile box --label $'k=two\nlines'
expect_contains "$ERR" "control characters"
expect_code 2 sbx create --profile box --label "k=$(head -c 10240 /dev/zero | tr '\0' a)"
expect_contains "$ERR" "at most 256 bytes"
expect_code 2 sbx create --profile box --label $'k=a\u202eb'
expect_code 2 sbx create --profile box --label "bad key=v"
expect_contains "$ERR" "invalid key"
# In a profile, with its location.
printf 'driver: stub\nlabels:\n  note: "a\\u202eb"\nstub: { root: %s }\n' "$WORK/backend" \
  >"$PROFILES/badlabel.yaml"
expect_code 2 sbx create --profile badlabel
expect_contains "$ERR" "badlabel.yaml:3:"
[ ! -e "$STATE/ledger.json" ] || [ "$(ledger_jq '.sandboxes | length')" = 0 ] ||
  fail "a refused create left a record"

# Fine names and tricky label values.
args=()
for value in yes no on off y n null '~' 0x10 012 1e3 '' ':' '- x' '#' ' lead' 'trail ' \
  true 2026-12-02 '1:20' '.inf' 'a: b' '@x' 'ünï'; do
  args+=(--label "k$((${#args[@]} / 2))=$value")
done
expect_code 0 sbx create --profile box --name web-1.test_x "${args[@]}" --quiet
# Both at one instant (the test clock), so that time-derived fields (seconds_left) agree.
NOW=$(date -u +%Y-%m-%dT%H:%M:%SZ)
SANDBOXER=$SANDBOXER_TESTCLOCK SANDBOXER_FAKE_NOW=$NOW expect_code 0 sbx list -o json
echo "$OUT" >"$WORK/list.json"
SANDBOXER=$SANDBOXER_TESTCLOCK SANDBOXER_FAKE_NOW=$NOW expect_code 0 sbx list -o yaml
echo "$OUT" >"$WORK/list.yaml"
/usr/bin/python3 - "$WORK/list.json" "$WORK/list.yaml" <<'PY' || fail "-o yaml does not say what -o json says"
import json, sys, yaml
with open(sys.argv[1]) as f:
    from_json = json.load(f)
with open(sys.argv[2]) as f:
    from_yaml = yaml.safe_load(f)
if from_json != from_yaml:
    for a, b in zip(from_json, from_yaml):
        for key in a:
            if a[key] != b.get(key):
                print("differs at", key, repr(a[key]), repr(b.get(key)))
    sys.exit(1)
PY

# An old record with control characters in its name (written before these checks): the table
# escapes them, one line per record.
jq '.sandboxes[0].name = "evil\u001b[2J\nforged-row\u202e"' "$STATE/ledger.json" >"$WORK/edited"
cp "$WORK/edited" "$STATE/ledger.json"
expect_code 0 sbx list
case "$OUT" in *$'\e'*) fail "raw ESC in the table: $OUT" ;; esac
[ "$(printf '%s\n' "$OUT" | wc -l)" = 2 ] || fail "a name forged a row: $OUT"
expect_contains "$OUT" 'evil\x1b[2J\nforged-row\u202e'
echo ok
