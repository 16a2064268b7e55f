#!/usr/bin/env bash
# The store conformance suite (store_conformance.sh) on the local files, the default ledger: the
# behaviour of `history`, `evidence`, `ledger verify` and -o json that the PostgreSQL store must
# reproduce (test_store_conformance_pg.sh diffs its outputs against this store's). The scenario
# runs twice here, on two fresh ledgers, and the normalized outputs must match: proof that the
# normalization masks everything that varies from run to run, so that a difference between the
# stores is a difference of the stores. Then a history edited by hand, once in a journal segment
# (a closed record) and once in ledger.json (a live one), and what only the local store says.
SANDBOXER=${SANDBOXER_TESTCLOCK:?set SANDBOXER_TESTCLOCK to the sandboxer-testclock binary (CTest does)}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/store_conformance.sh"
unset SANDBOXER_LEDGER # the local files, whatever the caller's environment says

on_store() { "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" "$@"; }
STORE_WHERE=$STATE/ledger.json

# tamper_history ID: upper-cases the first letter of history[1].reason of record ID where the
# local store keeps it: in ledger.json (resident records; rewritten whole, as a hand edit with jq
# would), or in its line of a journal segment (edited in place, the same length: the committed
# offset stays right).
tamper_history() {
  local id=$1 edit='.history[1].reason |= (.[0:1] | ascii_upcase) + .[1:]' segment n old new
  if jq -e --arg id "$id" '.sandboxes | any(.id == $id)' "$STATE/ledger.json" >/dev/null; then
    jq -c --arg id "$id" "(.sandboxes[] | select(.id == \$id)) |= ($edit)" "$STATE/ledger.json" \
      >"$WORK/tampered.json"
    cp "$WORK/tampered.json" "$STATE/ledger.json"
    return
  fi
  segment=$(grep -l "^{\"id\":\"$id\"" "$STATE"/journal/segment-*.jsonl | tail -n 1)
  [ -n "$segment" ] || fail "tamper_history: $id is in neither ledger.json nor the journal"
  n=$(grep -n "^{\"id\":\"$id\"" "$segment" | tail -n 1 | cut -d: -f1)
  old=$(sed -n "${n}p" "$segment")
  new=$(jq -c "$edit" <<<"$old")
  [ "$(printf '%s' "$old" | wc -c)" = "$(printf '%s' "$new" | wc -c)" ] ||
    fail "tamper_history: jq rewrote the journal line to another length"
  { head -n "$((n - 1))" "$segment"; printf '%s\n' "$new"; tail -n "+$((n + 1))" "$segment"; } \
    >"$WORK/segment.tampered"
  cp "$WORK/segment.tampered" "$segment"
}

conformance_scenario "$WORK/json"

# The same scenario on a second fresh ledger normalizes to the same files.
STATE=$WORK/state-again
STORE_WHERE=$STATE/ledger.json
conformance_scenario "$WORK/json-again"
compare_normalized "$WORK/json" "$WORK/json-again"

# Where the local store keeps what the scenario made: destroyed sandboxes that still hold a
# snapshot stay in ledger.json, the other closed ones went to the journal.
for id in "$AGENT" "$TWIN1"; do
  jq -e --arg id "$id" '.sandboxes | any(.id == $id)' "$STATE/ledger.json" >/dev/null ||
    fail "a destroyed sandbox with a snapshot left ledger.json"
done
for id in "$GONE" "$BROKEN" "$SHORT" "$IDEM" "$TWIN2"; do
  grep -q "^{\"id\":\"$id\"" "$STATE"/journal/segment-*.jsonl || fail "$id is not in the journal"
done

# What only the local store says.
expect_code 0 on_store status
expect_contains "$OUT" "ledger:     local files $STATE/ledger.json"
expect_contains "$OUT" "local files $STATE/ledger.json (schema 4): 5 resident record(s); journal 1 segment(s)"
expect_code 0 on_store status -o json
[ "$(jq -r .location <<<"$OUT")" = "$STATE/ledger.json" ] || fail "status -o json: $OUT"
expect_code 0 on_store list
# HOST is a shared ledger's column (docs/fleet.md).
case "$(head -n 1 <<<"$OUT")" in *HOST*) fail "a local ledger's list has a HOST column: $OUT" ;; esac

conformance_tamper
# verify locates each problem in its file: the journal line (at its byte), or ledger.json.
GONE_AT=$(grep -b "^{\"id\":\"$GONE\"" "$STATE/journal/segment-000001.jsonl" | cut -d: -f1)
where() { jq -r --arg id "$1" '.problems[] | select(.sandbox == $id) | .where' <<<"$VERIFY_JSON"; }
[ "$(where "$GONE")" = "$STATE/journal/segment-000001.jsonl at byte $GONE_AT" ] ||
  fail "verify locates $GONE at $(where "$GONE"), not at its line (byte $GONE_AT)"
[ "$(where "$COPY")" = "$STATE/ledger.json" ] || fail "verify locates $COPY at $(where "$COPY")"
echo "ok: store conformance on the local files"
