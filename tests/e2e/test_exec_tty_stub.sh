#!/usr/bin/env bash
# exec -t on a terminal: the local terminal is raw while the command runs and is restored after,
# also when the command fails or sandboxer fails. A pseudo-terminal from script(1) stands in for
# the user's; with the stub driver the command runs here on that same terminal, so it can show
# the mode it sees.
. "$(dirname "$0")/lib.sh"
command -v script >/dev/null || skip "script(1) is missing"
stub_profile dev <<<'  root: '"$WORK/backend"
expect_code 0 sbx create --profile dev --name t

cat >"$WORK/session.sh" <<EOF2
stty -g > "$WORK/before"
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec -i -t t -- sh -c 'stty -a > "$WORK/during"'
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec -i -t t -- sh -c 'exit 3'
echo "rc=\$?" > "$WORK/rc"
stty -g > "$WORK/after1"
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec -i -t no-such-sandbox -- true
stty -g > "$WORK/after2"
EOF2
script -qec "sh $WORK/session.sh" /dev/null </dev/null >/dev/null 2>&1 || true
[ -s "$WORK/before" ] || fail "the session did not run"
grep -q -- "-icanon" "$WORK/during" || fail "not raw during exec -t: $(cat "$WORK/during")"
grep -q -- "-echo " "$WORK/during" || fail "echo still on during exec -t"
[ "$(cat "$WORK/rc")" = rc=3 ] || fail "exit code under -t: $(cat "$WORK/rc")"
cmp -s "$WORK/before" "$WORK/after1" || fail "terminal not restored after exec -t"
cmp -s "$WORK/before" "$WORK/after2" || fail "terminal not restored after a failed exec -t"

# Without a local terminal -t still gives the command one, as `docker exec -t` does (issue 35):
# it sees a terminal, and its stderr comes with its stdout, as a terminal's does.
expect_code 4 sbx exec -t t -- sh -c 'test -t 0 && test -t 1 && echo out; echo err >&2; exit 4'
[ "$(tr -d '\r' <<<"$OUT")" = "$(printf 'out\nerr')" ] && [ -z "$ERR" ] ||
  fail "-t without a terminal: [$OUT] / [$ERR]"
# Without -t the streams stay apart and no terminal is made.
expect_code 0 sbx exec t -- sh -c 'test -t 1 || echo out; echo err >&2'
[ "$OUT" = out ] && [ "$ERR" = err ] || fail "without -t: $OUT / $ERR"
echo ok
