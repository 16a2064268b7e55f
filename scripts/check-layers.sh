#!/usr/bin/env bash
# Fails when an #include runs back up the house (docs/architecture.md, "Rooms"): each folder may
# include only from the rooms below it.
#   include/sandboxer/  the public SDK: its own headers only
#   sdk/                the SDK's sources: sdk/ and include/
#   core/               the core: core/, sdk/, include/ (never a driver, pg/ or cli/)
#   pg/                 the PostgreSQL store: pg/, core/, sdk/
#   drivers/            each driver: drivers/, sdk/, include/ (never the core: a driver never
#                       knows the ledger)
#   cli/                the application: anything
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
# check ROOM ALLOWED-PREFIX...: every quoted include of a file under ROOM starts with an allowed
# prefix (generated headers, such as drivers' protobufs, name their own folders).
check() {
  local room=$1 pattern
  shift
  pattern="#include \"($(IFS='|'; echo "$*"))"
  while IFS= read -r line; do
    echo "check-layers: $line: runs back up (${room} may include only from: $*)" >&2
    status=1
  done < <(git ls-files "$room" | grep -E '\.(cpp|hpp|h)$' | xargs -r grep -Hn '^#include "' |
    grep -Ev ":[0-9]+:${pattern}" || true)
}
check include/ "sandboxer/"
check sdk/ "sdk/"
check core/ "core/" "sdk/"
check pg/ "pg/" "core/" "sdk/"
check drivers/ "drivers/" "sdk/" "modal_proto/"
[ "$status" -eq 0 ] && echo "check-layers: no include runs back up"
exit "$status"
