#!/usr/bin/env bash
# Installs what sandboxer builds and tests with, from Debian 12's packages only.
# Usage: scripts/install-deps.sh [build | all]
#   build: what configuring and building the binary needs (scripts/demo.sh: the main job)
#   all (the default): also what the tests run: the sanitizer and fuzz compilers, QEMU and
#   Packer, PostgreSQL, sshd and compose, and the tools the end-to-end tests call (zsh and fish:
#   tests/e2e/test_completion.sh drives each shell's completion)
set -euo pipefail
build=(
  build-essential cmake ninja-build pkg-config git
  libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev
  libssl-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libpq-dev
  jq ca-certificates
)
tests=(
  clang libclang-rt-14-dev
  python3 python3-yaml python3-jsonschema curl util-linux bsdutils procps openssl
  openssh-client openssh-server docker-compose
  qemu-system-x86 qemu-utils seabios packer busybox-static e2fsprogs dropbear-bin iproute2
  postgresql
  zsh fish man-db
)
case "${1:-all}" in
build) packages=("${build[@]}") ;;
all) packages=("${build[@]}" "${tests[@]}") ;;
*)
  echo "usage: $0 [build | all]" >&2
  exit 2
  ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
