#!/usr/bin/env bash
# The installed layout (issue 14.18): `cmake --install` into a temporary prefix, then the README's
# tour run from / with only that prefix on PATH. The default profile, the docs and the man page
# must be where an installed sandboxer and `man` look for them.
source "$(dirname "$0")/lib.sh"
require_docker
command -v cmake >/dev/null || skip "cmake is missing"

PREFIX="$WORK/prefix"
install_into "$PREFIX"
[ -x "$PREFIX/bin/sandboxer" ] || fail "no binary installed"
[ -f "$PREFIX/share/sandboxer/profiles/default.yaml" ] || fail "no default profile installed"
[ -f "$PREFIX/share/sandboxer/profiles/compose/stack.yml" ] ||
  fail "compose-remote.yaml's compose file is not installed"
[ ! -e "$PREFIX/share/sandboxer/profiles/images" ] || fail "a VM image built in the tree was installed"
[ -f "$PREFIX/share/doc/sandboxer/README.md" ] || fail "no README installed"
[ -f "$PREFIX/share/doc/sandboxer/exit-codes.md" ] || fail "no docs installed"
[ -f "$PREFIX/share/man/man1/sandboxer.1" ] || fail "no man page installed"
# The man page is the one the binary makes from its command definitions.
"$PREFIX/bin/sandboxer" man | cmp -s - "$PREFIX/share/man/man1/sandboxer.1" ||
  fail "the installed man page differs from 'sandboxer man'"
if command -v man >/dev/null; then
  MANPATH="$PREFIX/share/man" man -P cat sandboxer 2>/dev/null | grep -q "reap" ||
    fail "man sandboxer does not show the page"
fi

HOME_DIR="$WORK/home"
mkdir -p "$HOME_DIR"
# As a new user would: from /, nothing of the source tree on hand, only the installed prefix.
installed() {
  (cd / && env -i PATH="$PREFIX/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME="$HOME_DIR" \
    ${DOCKER_HOST:+DOCKER_HOST="$DOCKER_HOST"} sandboxer "$@")
}
cleanup() {
  docker ps -aq --filter "label=sandboxer.ledger=$(jq -r .ledger_id "$HOME_DIR/.local/state/sandboxer/ledger.json" 2>/dev/null)" |
    xargs -r docker rm -f >/dev/null 2>&1 || true
  local ids
  ids=$(jq -r '.sandboxes[].id' "$HOME_DIR/.local/state/sandboxer/ledger.json" 2>/dev/null || true)
  for id in $ids; do
    docker images --format '{{.Repository}}:{{.Tag}}' | grep -F "$id" | xargs -r docker rmi -f \
      >/dev/null 2>&1 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

expect_code 0 installed profiles list
expect_contains "$OUT" "$PREFIX/share/sandboxer/profiles/default.yaml"
# The README's tour, command by command, as written.
TOUR=$(sed -n 's/^    \$ \(sandboxer .*\)$/\1/p' "$SANDBOXER_SOURCE_DIR/README.md" | sed 's/ *#.*$//')
[ "$(wc -l <<<"$TOUR")" -ge 8 ] || fail "README tour not found: $TOUR"
while IFS= read -r line; do
  declare -a words="($line)" # the README's quoting, as a shell reads it
  expect_code 0 installed "${words[@]:1}"
done <<<"$TOUR"
# What the tour left: both sandboxes destroyed, and every step in the history.
expect_code 0 installed history scratch -o json
expect_contains "$OUT" '"destroyed"'
expect_code 0 installed list -q
[ -z "$OUT" ] || fail "the tour left sandboxes behind: $OUT"
echo ok
