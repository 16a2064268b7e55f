#!/usr/bin/env bash
# Puts Debian 12's curl source package, with Debian's patches applied, in .deps/curl. CMake builds
# an HTTP-only static libcurl from it (cmake/static_curl.cmake): Debian's own libcurl packages link
# every protocol curl knows, and loading the ~30 libraries that pulls in costs 5-10 ms at every
# command that talks HTTP (docs/architecture.md).
#
# It uses a private apt source list, state and cache under .deps/apt, so the system's apt
# configuration and cache are left as they are. Run again, it fetches the source only when Debian
# has a newer version (a security fix). Without network it keeps what is there, or says so and
# exits 0: the build then falls back to opening the system's libcurl at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$PWD/.deps
apt_dir=$deps/apt
logs=$deps/logs
mkdir -p "$apt_dir/lists/partial" "$apt_dir/sources" "$apt_dir/cache" "$logs"
# The system's own Debian mirror when it names one (a local mirror or proxy may be the only way
# out), else deb.debian.org; SANDBOXER_DEBIAN_MIRROR overrides both.
system_mirror=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
  grep -v '^[[:space:]]*#' | grep -oE '(https?|file)://[^ ]*/debian/?( |$)' | head -n 1 | tr -d ' ' || true)
mirror=${SANDBOXER_DEBIAN_MIRROR:-${system_mirror:-http://deb.debian.org/debian}}
cat >"$apt_dir/sources/debian-src.sources" <<EOF
Types: deb-src
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_options=(-q -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/sources"
             -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")
[ "$(id -u)" -ne 0 ] || apt_options+=(-o APT::Sandbox::User=root)

have=""
[ -f "$deps/curl/include/curl/curl.h" ] && [ -f "$deps/curl.version" ] && have=$(cat "$deps/curl.version")
give_up() {
  if [ -n "$have" ]; then
    echo "fetch-curl-source: $1; keeping curl $have in $deps/curl" >&2
  else
    echo "fetch-curl-source: $1; the build will open the system's libcurl at run time instead" >&2
  fi
  exit 0
}

# apt-get update exits 0 when an index could not be fetched (it only warns), and 100 when none
# could: either way, what counts is whether the index (fresh, or from an earlier run) knows curl.
timeout 120 apt-get "${apt_options[@]}" update >"$logs/apt-update.log" 2>&1 || true
newest=$({ apt-cache "${apt_options[@]}" showsrc curl 2>/dev/null || true; } |
  awk '/^Version:/ {print $2}' | sort -V | tail -n 1)
[ -n "$newest" ] ||
  give_up "Debian's source index for curl could not be fetched (see $logs/apt-update.log)"
if [ "$have" = "$newest" ]; then
  exit 0
fi

download=$deps/download
rm -rf "$download" && mkdir -p "$download"
(cd "$download" && timeout 300 apt-get "${apt_options[@]}" source --download-only "curl=$newest") \
  >"$logs/apt-source.log" 2>&1 || give_up "apt-get source curl failed (see $logs/apt-source.log)"
rm -rf "$deps/curl.new"
# apt-get has checked the files against the signed index already.
dpkg-source --no-check -x "$download"/curl_*.dsc "$deps/curl.new" >"$logs/dpkg-source.log" 2>&1 ||
  give_up "dpkg-source could not unpack curl $newest (see $logs/dpkg-source.log)"
# dpkg-source leaves a copy of the upstream tarball beside what it unpacked.
rm -rf "$deps/curl" "$download" "$deps"/curl_*.orig.tar.* && mv "$deps/curl.new" "$deps/curl"
echo "$newest" >"$deps/curl.version"
echo "fetch-curl-source: curl $newest (Debian's source, patches applied) unpacked in $deps/curl"
