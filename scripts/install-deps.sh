#!/usr/bin/env bash
# Installs what sandboxer builds and tests with, from Debian 12's packages only.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev
  clang libclang-rt-14-dev
  libssl-dev
  jq python3 python3-yaml python3-jsonschema curl util-linux bsdutils procps openssl ca-certificates
  openssh-client openssh-server docker-compose
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  qemu-system-x86 qemu-utils seabios packer busybox-static e2fsprogs dropbear-bin iproute2
  libpq-dev postgresql
)
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
