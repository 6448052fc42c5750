#!/usr/bin/env bash
# Builds the etcd server, at the release of the etcd client that
# store/etcdstore uses, from Go modules into a cache directory outside the
# repository, and only when it is missing there. Debian packages etcd 3.4,
# which its project no longer supports; users run 3.5 and 3.6, where a
# transaction costs the server less (docs/design.md §9), so the tests, the
# drills and the benchmarks run against this build when it is there, and
# against the etcd on PATH otherwise.
#
# Usage: scripts/etcd.sh        (prints the binary's path)
#
# The binary goes to $LEASEHOLD_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/leasehold)/etcd-$ETCD_VERSION/, which
# storetest/testserver's EtcdPath reads too; keep the two in step. If
# LEASEHOLD_ETCD names an existing binary, that one is used and nothing is
# built.
#
# Cost, measured on 2 cores: a cold build of about 50 s after the module
# downloads; when the binary is there, well under 1 s.
set -euo pipefail

# ETCD_VERSION is the pinned etcd release: the version of
# go.etcd.io/etcd/client/v3 in store/etcdstore/go.mod.
ETCD_VERSION=v3.6.16

if [ -n "${LEASEHOLD_ETCD:-}" ] && [ -x "$LEASEHOLD_ETCD" ]; then
  echo "$LEASEHOLD_ETCD"
  exit 0
fi

cache=${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}
dir=$cache/etcd-$ETCD_VERSION
bin=$dir/etcd
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null 2>&1 || { echo "etcd.sh: go is not on PATH" >&2; exit 1; }
start=$(date +%s)
echo "building etcd $ETCD_VERSION into $dir" >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-etcd.XXXXXX")
tmp=
trap 'rm -rf "$work" ${tmp:+"$tmp"}' EXIT
mkdir -p "$dir"
cd "$work"
# A throwaway module outside any workspace: the repository's go.work and
# go.mod files must not see (or be changed by) this build. The server module
# replaces its sibling modules with local paths, which a dependency cannot
# use, so each is required at the same release, and the main package is
# etcd's own two lines.
export GOWORK=off GOFLAGS=-mod=mod
go mod init leasehold.invalid/etcd-build >/dev/null 2>&1
cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
if ! { go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "go.etcd.io/etcd/api/v3@$ETCD_VERSION" \
  "go.etcd.io/etcd/client/v3@$ETCD_VERSION" "go.etcd.io/etcd/client/pkg/v3@$ETCD_VERSION" \
  "go.etcd.io/etcd/pkg/v3@$ETCD_VERSION" && go mod tidy; } >"$work/modules.log" 2>&1; then
  cat "$work/modules.log" >&2
  exit 1
fi

# Build to a temporary name in the target directory, then rename: a binary at
# $bin is always a whole one, even if this build is interrupted.
tmp=$(mktemp "$dir/.etcd.XXXXXX")
go build -trimpath -o "$tmp" .
chmod 0755 "$tmp"
"$tmp" --version | grep -q "etcd Version: ${ETCD_VERSION#v}" || { echo "etcd.sh: the build is not etcd $ETCD_VERSION" >&2; exit 1; }
mv -f "$tmp" "$bin"
tmp=
echo "built $bin in $(( $(date +%s) - start )) s" >&2
echo "$bin"
