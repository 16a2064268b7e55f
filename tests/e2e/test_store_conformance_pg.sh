#!/usr/bin/env bash
# The store conformance suite (store_conformance.sh) on PostgreSQL (a throwaway cluster), against
# the local files as the reference: docs/fleet.md says `ledger verify`, `history` and `evidence`
# work unchanged on the shared store. The same scenario runs on a fresh local ledger and on the
# database, each checked as it goes, and their normalized outputs (-o json of create, restore,
# destroy, reap, list, status, history, evidence, ledger verify, snapshots, events; the history,
# evidence, verify and status tables) must be identical. Then a history edited in the database
# (UPDATE of sandboxer.history, as an operator with write access could) must be reported by
# `ledger verify` and `evidence` (exit 8) exactly as an edit of the local files is; and what only
# the shared store says (status naming the URI and where the choice came from, list's HOST column,
# verify locating a problem by its row).
SANDBOXER=${SANDBOXER_TESTCLOCK:?set SANDBOXER_TESTCLOCK to the sandboxer-testclock binary (CTest does)}
. "$(dirname "$0")/lib.sh"
start_postgres
. "$(dirname "$0")/store_conformance.sh"
unset SANDBOXER_LEDGER

# The reference: the scenario on the local files.
on_store() { "$SANDBOXER" --state-dir "$WORK/state-local" --profiles-dir "$PROFILES" "$@"; }
STORE_WHERE=$WORK/state-local/ledger.json
STORE_STATE=$WORK/state-local # the state dir, written <state> in what is compared
conformance_scenario "$WORK/json-local"
unset STORE_STATE

# The same scenario on PostgreSQL: the same outputs, but for what the normalization masks.
on_store() { "$SANDBOXER" --ledger "$PG_URL" --state-dir "$STATE" --profiles-dir "$PROFILES" "$@"; }
STORE_WHERE=$PG_URL
conformance_scenario "$WORK/json-pg"
compare_normalized --unordered "$WORK/json-local" "$WORK/json-pg"

# It was the database that answered: the records are its rows, and no local ledger was written.
[ ! -e "$STATE/ledger.json" ] || fail "a --ledger postgresql:// run wrote $STATE/ledger.json"
[ "$(psql_at "select count(*) from sandboxer.sandboxes")" = 10 ] || fail "not 10 rows in sandboxer.sandboxes"
[ "$(psql_at "select count(*) from sandboxer.history")" = \
  "$(on_store ledger verify -o json | jq .entries)" ] || fail "history rows and verify's entries differ"
[ "$(psql_at "select ledger_id from sandboxer.ledger_meta")" = "$LEDGER_ID" ] || fail "ledger id"
[ "$(psql_at "select string_agg(id, ',' order by id) from sandboxer.sandboxes where state = 'running'")" = \
  "$(printf '%s\n' "$COPY" "$IDEM2" "$AGENT2" | sort | paste -sd,)" ] || fail "running rows"

# What only the shared store says.
expect_code 0 on_store status
expect_contains "$OUT" "ledger:     postgresql $PG_URL (from --ledger)"
expect_contains "$OUT" "schema version 5, 10 records (5 resident)"
expect_code 0 env SANDBOXER_LEDGER="$PG_URL" "$SANDBOXER" --state-dir "$STATE" status -o json
[ "$(jq -r .location <<<"$OUT")" = "$PG_URL" ] || fail "status -o json: $OUT"
expect_contains "$(jq -r .ledger <<<"$OUT")" "(from \$SANDBOXER_LEDGER)"
# The stub with a shared root is a remote backend: any machine may destroy it (docs/fleet.md).
expect_code 0 on_store list
expect_contains "$(head -n 1 <<<"$OUT")" HOST
[ "$(tail -n +2 <<<"$OUT" | awk '{print $NF}' | sort -u)" = any ] || fail "list HOST: $OUT"

# A history edited in the database, as a hand edit of the local files: the entry's text changed
# in place (the first letter of history[1].reason upper-cased), the chain not resealed.
tamper_history() {
  psql_at "update sandboxer.history
    set entry = overlay(entry::text placing upper(substr(entry::text, strpos(entry::text, '\"reason\":\"') + 10, 1))
                        from strpos(entry::text, '\"reason\":\"') + 10 for 1)::json
    where sandbox_id = '$1' and idx = 1"
  [ "$(psql_at "select entry->>'reason' from sandboxer.history where sandbox_id = '$1' and idx = 1")" != \
    "$(psql_at "select lower(entry->>'reason') from sandboxer.history where sandbox_id = '$1' and idx = 1")" ] ||
    fail "tamper_history: the update did not change $1's history[1]"
}
conformance_tamper
for id in "$GONE" "$COPY"; do
  [ "$(jq -r --arg id "$id" '.problems[] | select(.sandbox == $id) | .where' <<<"$VERIFY_JSON")" = \
    "$PG_URL sandboxes row $id" ] || fail "verify does not locate $id by its row: $VERIFY_JSON"
done

# Last, the same outputs in the same order: what `list --all -o json` and `events list -o json`
# print first and last is part of the behaviour a script sees (`jq '.[-1]'`).
order() { grep -E '^[0-9]+\.id = ' "$1/list-all.json" | cut -d'"' -f2 | paste -sd' '; }
[ "$(order "$WORK/json-local")" = "$(order "$WORK/json-pg")" ] ||
  echo "list --all -o json, in order: local files: $(order "$WORK/json-local"); PostgreSQL: $(order "$WORK/json-pg")" >&2
compare_normalized "$WORK/json-local" "$WORK/json-pg"
# usage reads the rows in keyset pages of 500: 1200 more closed copies of idem (9-21, 720 s
# running), all closed at the same instant, are each counted once across the pages and the ties.
usage_at() { SANDBOXER_FAKE_NOW=2026-12-02T12:30:00Z on_store usage --from 2026-12-02T12:00:00Z --to 2026-12-02T13:00:00Z -o json; }
expect_code 0 usage_at
BEFORE=$(jq -c '[.total.count, .total.running_seconds]' <<<"$OUT")
COPIES="(SELECT 'sbx-' || translate(lpad(g::text, 12, '0'), '0123456789', 'abcdefghij') AS id
  FROM generate_series(1, 1200) g) n"
psql_at "INSERT INTO sandboxer.sandboxes (id, name, state, driver, home_host, created_at,
    expires_at, last_time, resident, history_length, record)
  SELECT n.id, s.name, s.state, s.driver, s.home_host, s.created_at, s.expires_at, s.last_time,
    s.resident, s.history_length, jsonb_set(s.record::jsonb, '{id}', to_jsonb(n.id))::json
  FROM sandboxer.sandboxes s, $COPIES WHERE s.id = '$IDEM';
  INSERT INTO sandboxer.history (sandbox_id, idx, event_id, entry)
  SELECT n.id, h.idx, h.event_id, h.entry FROM sandboxer.history h, $COPIES
  WHERE h.sandbox_id = '$IDEM'" >/dev/null
expect_code 0 usage_at
[ "$(jq -c '[.total.count, .total.running_seconds]' <<<"$OUT")" = \
  "$(jq -c '[.[0] + 1200, .[1] + 1200 * 720]' <<<"$BEFORE")" ] ||
  fail "usage over 1200 more rows: $(jq -c .total <<<"$OUT"), before $BEFORE"
echo "ok: store conformance on PostgreSQL, the same as on the local files"
