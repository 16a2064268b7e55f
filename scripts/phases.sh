# Phase timing for scripts/test.sh (sourced): each phase's start and wall time, the slowest tests
# of each preset read from CTest's output, and one table at the end of every run, failed or not,
# so that a slower run shows where from the table alone (docs/testing.md: the budget).
#
#   phase NAME CMD...       runs CMD in the foreground as phase NAME
#   phase_start NAME CMD... runs CMD in the background (its output in $PHASE_LOGS/NAME.log)
#   phase_wait NAME         waits for it; its log's tail on stderr and exit 1 if it failed
#   phase_tests PRESET LOG  records LOG (CTest's output) for the slowest-tests table
#   phase_exit              the EXIT trap: ends unfinished background phases, prints the table

PHASE_T0=${PHASE_T0:-$(date +%s)}
PHASE_LOGS=${PHASE_LOGS:-build-logs}
PHASE_BUDGET_S=$((35 * 60))  # CI's budget; 90 minutes is the hard limit
PHASE_TEST_LIMIT_S=300       # no single test may take longer (docs/testing.md)
mkdir -p "$PHASE_LOGS"
PHASE_NAMES=()
declare -A PHASE_BEGIN=() PHASE_END=() PHASE_PID=() PHASE_RC=()
PHASE_TEST_LOGS=()

phase_begin_() {
  PHASE_NAMES+=("$1")
  PHASE_BEGIN[$1]=$(date +%s)
}

phase() {
  local name=$1 rc=0
  shift
  phase_begin_ "$name"
  echo "test.sh: == $name =="
  "$@" || rc=$?
  PHASE_END[$name]=$(date +%s)
  PHASE_RC[$name]=$rc
  return "$rc"
}

phase_start() {
  local name=$1
  shift
  phase_begin_ "$name"
  echo "test.sh: == $name (in the background, at low priority: $PHASE_LOGS/${name// /-}.log) =="
  # Its own end time is written by the phase itself: a phase that ends early is not charged
  # for the time until someone waits for it.
  rm -f "$PHASE_LOGS/${name// /-}.end"
  # A process group of its own, its streams away from ours: a run that fails ends it
  # (phase_kill_unfinished) and nothing that reads our output waits for it.
  set -m
  (
    rc=0
    renice -n 19 -p "$BASHPID" >/dev/null
    "$@" >"$PHASE_LOGS/${name// /-}.log" 2>&1 || rc=$?
    date +%s >"$PHASE_LOGS/${name// /-}.end"
    exit "$rc"
  ) </dev/null >/dev/null 2>&1 &
  PHASE_PID[$name]=$!
  set +m
}

# Ends the background phases nobody waited for (the run failed before): their builds would go on
# compiling after we are gone. One that had finished is waited for, so the table has its result.
phase_kill_unfinished() {
  local name
  for name in "${!PHASE_PID[@]}"; do
    [ -z "${PHASE_RC[$name]:-}" ] || continue
    if [ -f "$PHASE_LOGS/${name// /-}.end" ]; then
      PHASE_RC[$name]=0
      wait "${PHASE_PID[$name]}" 2>/dev/null || PHASE_RC[$name]=$?
      PHASE_END[$name]=$(cat "$PHASE_LOGS/${name// /-}.end")
    else
      kill -TERM -- "-${PHASE_PID[$name]}" 2>/dev/null || true
      PHASE_RC[$name]="ended: the run failed"
    fi
  done
}

# The EXIT trap of test.sh: the table, the run's own exit code kept.
phase_exit() {
  local rc=$?
  set +e
  phase_kill_unfinished
  phase_table
  exit "$rc"
}

phase_wait() {
  local name=$1 rc=0 file=$PHASE_LOGS/${1// /-}
  wait "${PHASE_PID[$name]}" || rc=$?
  PHASE_END[$name]=$(cat "$file.end" 2>/dev/null || date +%s)
  PHASE_RC[$name]=$rc
  if [ "$rc" -ne 0 ]; then
    echo "test.sh: phase '$name' failed (exit $rc); the end of $file.log:" >&2
    tail -60 "$file.log" >&2
    return "$rc"
  fi
}

phase_tests() { PHASE_TEST_LOGS+=("$1:$2"); }

# Each test of LOG (CTest's output) as "SECONDS NAME", one per line: the time is the word before
# "sec", the name the word after "#N:".
phase_test_times_() {
  awk '/Test +#[0-9]+: / && / sec/ {
         for (i = NF; i > 0; i--) if ($i == "sec") { t = $(i-1); break }
         for (j = 1; j <= NF; j++) if ($j ~ /^#[0-9]+:$/) { name = $(j+1); break }
         print t, name }' "$1"
}

# The tests of LOG that took more than the limit, one per line.
phase_slow_tests() {
  phase_test_times_ "$1" | awk -v limit="$PHASE_TEST_LIMIT_S" '$1 + 0 > limit { print $2 ": " $1 " s" }'
}

phase_clock_() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

phase_table() {
  local now name begin end rc total
  now=$(date +%s)
  total=$((now - PHASE_T0))
  echo
  echo "test.sh: where the time went (budget $(phase_clock_ $PHASE_BUDGET_S), hard limit 90:00)"
  printf '  %-22s %8s %8s  %s\n' phase start wall result
  for name in "${PHASE_NAMES[@]}"; do
    begin=${PHASE_BEGIN[$name]}
    end=${PHASE_END[$name]:-$now}
    rc=${PHASE_RC[$name]:-unfinished}
    [ "$rc" = 0 ] && rc=ok
    case $rc in unfinished | ok | ended*) ;; *) rc="exit $rc" ;; esac
    printf '  %-22s %8s %8s  %s\n' "$name" "+$(phase_clock_ $((begin - PHASE_T0)))" \
      "$(phase_clock_ $((end - begin)))" "$rc"
  done
  printf '  %-22s %8s %8s  %s\n' total "" "$(phase_clock_ "$total")" \
    "$([ "$total" -le "$PHASE_BUDGET_S" ] && echo "within budget" || echo "OVER THE 35:00 BUDGET")"
  local entry preset log
  for entry in "${PHASE_TEST_LOGS[@]}"; do
    preset=${entry%%:*}
    log=${entry#*:}
    [ -f "$log" ] || continue
    echo "  the 10 slowest tests of preset $preset:"
    phase_test_times_ "$log" | sort -rn | awk 'NR <= 10 { printf "%10.1f s  %s\n", $1, $2 }'
  done
}
