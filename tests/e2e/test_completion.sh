#!/usr/bin/env bash
# Shell completion as a person at a terminal gets it (issue 35.2), in bash, zsh and fish: values,
# never a stray `-`; ids, names and snapshots from the ledger; profiles from the search path;
# nested commands and their options. And the man page: flags without a value, named values, the
# nested commands' options, an ENVIRONMENT section, no warning from man.
source "$(dirname "$0")/lib.sh"

command -v zsh >/dev/null || skip "zsh is missing (scripts/install-deps.sh installs it)"
command -v fish >/dev/null || skip "fish is missing (scripts/install-deps.sh installs it)"
command -v man >/dev/null || skip "man (man-db) is missing"

# The shells run `sandboxer` from PATH, with this test's ledger and profiles from the environment.
mkdir -p "$WORK/bin" "$WORK/cfg"
ln -s "$SANDBOXER" "$WORK/bin/sandboxer"
export PATH="$WORK/bin:$PATH" XDG_CONFIG_HOME="$WORK/cfg"
export SANDBOXER_STATE_DIR="$STATE" SANDBOXER_PROFILES="$PROFILES"
cd "$WORK"

stub_profile dev <<<"  root: $WORK/backend"
stub_profile ci <<<"  root: $WORK/backend"
WEB=$(sandboxer create --profile dev --name web --quiet)
sandboxer snapshot web --name s1 --quiet >/dev/null
sandboxer create --profile dev --name old --quiet >/dev/null
sandboxer destroy old --quiet >/dev/null

sandboxer completion bash >"$WORK/completion.bash"

# bash_complete LINE: what bash's _sandboxer puts in COMPREPLY for LINE (the cursor at its end),
# one a line, sorted. COMP_WORDS is split as bash splits it: at blanks, and around = and :.
bash_complete() {
  local line=$1 token
  local -a words=()
  set -f
  for token in $line; do
    while [[ $token =~ ^([^=:]*)([=:]+)(.*)$ ]]; do
      [ -z "${BASH_REMATCH[1]}" ] || words+=("${BASH_REMATCH[1]}")
      words+=("${BASH_REMATCH[2]}")
      token=${BASH_REMATCH[3]}
    done
    [ -z "$token" ] || words+=("$token")
  done
  set +f
  [[ $line != *" " ]] || words+=("")
  SCRIPT=$WORK/completion.bash LINE=$line bash --norc --noprofile -c 'source "$SCRIPT"
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE=$LINE; COMP_POINT=${#LINE}
    _sandboxer; [ "${#COMPREPLY[@]}" = 0 ] || printf "%s\n" "${COMPREPLY[@]}"' _ "${words[@]}" |
    sort
}

# expect_bash LINE WANTED...: bash offers exactly WANTED for LINE.
expect_bash() {
  local line=$1 got want
  shift
  got=$(bash_complete "$line" | tr '\n' ' ')
  want=$( ([ $# = 0 ] || printf '%s\n' "$@") | sort | tr '\n' ' ')
  [ "$got" = "$want" ] || fail "bash, '$line<TAB>': got [$got], want [$want]"
}

# expect_bash_has LINE WORD...: bash offers at least each WORD for LINE.
expect_bash_has() {
  local line=$1 got word
  shift
  got=$(bash_complete "$line")
  for word in "$@"; do
    grep -qxF -- "$word" <<<"$got" || fail "bash, '$line<TAB>': no $word in: $got"
  done
}

expect_bash "sandboxer exec " "$WEB" web
expect_bash "sandboxer create --profile " ci dev
expect_bash "sandboxer profiles show " ci dev
expect_bash "sandboxer drivers test -p d" dev
expect_bash "sandboxer -o " table wide json yaml csv
expect_bash "sandboxer list -o j" json
expect_bash "sandboxer --state-dir $STATE list --state " creating running snapshotting destroying \
  destroyed failed expired orphaned paused pausing resuming pooled
expect_bash "sandboxer --state-dir $STATE l" list ledger logs
expect_bash "sandboxer snapshots rm web:" s1
expect_bash "sandboxer restore web:" s1
expect_bash "sandboxer reap --orphans=" report destroy
expect_bash "sandboxer completion " bash fish zsh
expect_bash "sandboxer list --all " # flags take no value, and list has no positional
expect_bash "sandboxer destroy --fo" --force --forget
expect_bash "sandboxer rm --forc" --force # an alias completes as its command
expect_bash "sandboxer r" reap restore resume run # aliases only where no command begins so
expect_bash "sandboxer rm" rm
expect_bash "sandboxer wait web --for " running gone
expect_bash "sandboxer snapshots r" rm
expect_bash "sandboxer help ext" extend
expect_bash "sandboxer exec web -- " # the command's words are not ours
expect_bash_has "sandboxer schema " profile ledger
expect_bash_has "sandboxer ledger verify --" --head --help --state-dir
expect_bash_has "sandboxer " create destroy help
case " $(bash_complete "sandboxer destroy " | tr '\n' ' ') " in
*" old "* | *" - "* | *" --"*) fail "destroy offers a destroyed sandbox or options: $(bash_complete "sandboxer destroy ")" ;;
esac
expect_bash "sandboxer destroy " "$WEB" web

# The real line editors, on a terminal: what TAB inserts.
cat >"$WORK/bashrc" <<'EOF2'
PS1='READY> '
source <(command sandboxer completion bash)
sandboxer() { echo "ARGS:$*"; }
EOF2
printf '%s\n' $'sandboxer exec w\t' $'sandboxer reap --orphans=d\t' \
  $'sandboxer snapshots rm web:\t' >"$WORK/bash-lines"
SCREEN=$(/usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/complete_on_pty.py" "$WORK/bash-lines" \
  bash --rcfile "$WORK/bashrc" --noprofile -i) || fail "bash on a terminal: $SCREEN"
for want in "ARGS:exec web" "ARGS:reap --orphans=destroy" "ARGS:snapshots rm web:s1"; do
  grep -qxF "$want" <<<"$SCREEN" || fail "bash on a terminal: no '$want' in: $SCREEN"
done

# zsh: sourced, and autoloaded from $fpath (the first TAB completes).
mkdir -p "$WORK/zsh" "$WORK/zsh-fpath/functions"
cat >"$WORK/zsh/.zshrc" <<'EOF2'
PS1='READY> '
autoload -U compinit && compinit -u -D
source <(command sandboxer completion zsh)
sandboxer() { print -r -- "ARGS:$*"; }
EOF2
printf '%s\n' $'sandboxer exec w\t' $'sandboxer -v ext\t' $'sandboxer -o j\t' \
  $'sandboxer ledger verify --hea\t' $'sandboxer \t\t' >"$WORK/zsh-lines"
SCREEN=$(ZDOTDIR="$WORK/zsh" /usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/complete_on_pty.py" \
  "$WORK/zsh-lines" zsh -d -i) || fail "zsh on a terminal: $SCREEN"
for want in "ARGS:exec web" "ARGS:-v extend" "ARGS:-o json" "ARGS:ledger verify --head"; do
  grep -qxF "$want" <<<"$SCREEN" || fail "zsh: no '$want' in: $SCREEN"
done
expect_contains "$SCREEN" "Move a sandbox's deadline"
sandboxer completion zsh >"$WORK/zsh-fpath/functions/_sandboxer"
cat >"$WORK/zsh-fpath/.zshrc" <<EOF2
PS1='READY> '
fpath=("$WORK/zsh-fpath/functions" \$fpath)
autoload -U compinit && compinit -u -D
sandboxer() { print -r -- "ARGS:\$*"; }
EOF2
printf '%s\n' $'sandboxer exec w\t' >"$WORK/zsh-lines"
SCREEN=$(ZDOTDIR="$WORK/zsh-fpath" /usr/bin/python3 \
  "$SANDBOXER_SOURCE_DIR/tests/e2e/complete_on_pty.py" "$WORK/zsh-lines" zsh -d -i) ||
  fail "zsh (autoloaded) on a terminal: $SCREEN"
grep -qxF "ARGS:exec web" <<<"$SCREEN" || fail "zsh, autoloaded: the first TAB: $SCREEN"

# fish completes without a terminal: `complete -C LINE` prints VALUE<TAB>DESCRIPTION lines.
fish_complete() {
  LINE=$1 fish --no-config -c 'source (command sandboxer completion fish | psub); complete -C "$LINE"' |
    cut -f1 | sort | tr '\n' ' '
}
expect_fish() {
  local line=$1 got want
  shift
  got=$(fish_complete "$line")
  want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
  [ "$got" = "$want" ] || fail "fish, '$line<TAB>': got [$got], want [$want]"
}
expect_fish "sandboxer exec w" web
expect_fish "sandboxer -v ext" extend
expect_fish "sandboxer -o j" json
expect_fish "sandboxer --state-dir /tmp l" list ledger logs
expect_fish "sandboxer profiles show " ci dev
expect_fish "sandboxer ledger verify --h" --head --help
expect_contains "$(LINE="sandboxer ext" fish --no-config -c \
  'source (command sandboxer completion fish | psub); complete -C "$LINE"')" \
  $'extend\tMove a sandbox\'s deadline'

# __complete itself: no state dir made, nothing logged, and a shared ledger answers no ids.
OUT=$(SANDBOXER_STATE_DIR="$WORK/none" sandboxer __complete -vv destroy "" 2>"$WORK/err")
[ ! -e "$WORK/none" ] || fail "__complete created the state dir"
[ ! -s "$WORK/err" ] || fail "__complete wrote to stderr: $(cat "$WORK/err")"
[ "$OUT" = ":none" ] || fail "__complete with no ledger: $OUT"
OUT=$(sandboxer __complete --ledger postgresql://127.0.0.1:1/none exec "" 2>&1)
[ "$OUT" = ":none" ] || fail "__complete with a shared ledger: $OUT"
OUT=$(sandboxer __complete --state-dir "")
[ "$OUT" = ":dirs" ] || fail "__complete --state-dir: $OUT"

# The man page.
MAN=$(sandboxer man)
! grep -qF 'help\fR \fIVALUE' <<<"$MAN" || fail "man: --help takes a VALUE"
! grep -qF '\fIVALUE' <<<"$MAN" || fail "man: an unnamed VALUE: $(grep -F '\fIVALUE' <<<"$MAN" | head -3)"
expect_contains "$MAN" '\fB\-\-ttl\fR \fIDURATION\fR'
expect_contains "$MAN" '\fB\-p\fR, \fB\-\-profile\fR \fIPROFILE\fR'
expect_contains "$MAN" '\fB\-\-orphans\fR[=\fIMODE\fR]'
expect_contains "$MAN" '\fB\-\-force\fR'$'\n'
expect_contains "$MAN" ".SH ENVIRONMENT"
expect_contains "$MAN" "DOCKER_HOST"
expect_contains "$MAN" '/etc/sandboxer/profiles, PREFIX/share/sandboxer/profiles'
LEDGER_SECTION=$(sed -n '/^\.SS ledger$/,/^\.SS /p' <<<"$MAN")
expect_contains "$LEDGER_SECTION" '\fB\-\-head\fR \fIHEAD\fR'
expect_contains "$(sed -n '/^\.SS snapshots$/,/^\.SS /p' <<<"$MAN")" \
  '\fBsandboxer snapshots rm\fR \fISNAPSHOT\fR'
expect_contains "$(sed -n '/^\.SS drivers$/,/^\.SS /p' <<<"$MAN")" '\fB\-\-profile\fR \fIPROFILE\fR'
WARNINGS=$(MANWIDTH=100 man --warnings -l - <<<"$MAN" 2>&1 >/dev/null)
[ -z "$WARNINGS" ] || fail "man --warnings: $WARNINGS"
echo "ok"
