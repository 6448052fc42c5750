#!/usr/bin/env bash
# Makes sure the servers the tests run against are installed, from Debian's
# packages. Usage: ensure-deps.sh COMMAND=PACKAGE ...
# A command counts as installed when it is on PATH or, for PostgreSQL, whose
# server binaries Debian keeps off PATH, in /usr/lib/postgresql/*/bin.
# As root it installs what is missing; otherwise it names the package and fails.
set -euo pipefail

have() {
  command -v "$1" >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/$1" >/dev/null
}

missing=()
for pair in "$@"; do
  cmd=${pair%%=*} pkg=${pair#*=}
  have "$cmd" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${missing[*]} — install the Debian package(s): sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} from Debian packages" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
