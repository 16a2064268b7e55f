#!/usr/bin/env bash
# Fails when a tracked C++ file is not formatted by the root .clang-format (with Debian 12's
# clang-format 14, which it installs if missing). `clang-format -i FILE...` fixes what it names.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  install=($SUDO apt-get install -y -q --no-install-recommends clang-format)
  "${install[@]}" || { $SUDO apt-get update -q && "${install[@]}"; }
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check-format: not a git checkout, nothing to check" >&2
  exit 0
fi
git ls-files -z '*.cpp' '*.hpp' '*.h' | xargs -0 clang-format --dry-run --Werror
echo "check-format: every C++ file follows .clang-format"
