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
# LEASEHOLD_ETCD is set, the binary it names is used and nothing is built (an
# error when it names no executable, as in the tests).
#
# Cost, measured on 2 cores: a cold build of about 50 s after the module
# downloads; when the binary is there, well under 1 s.
set -euo pipefail

# ETCD_VERSION is the pinned etcd release: the version of
# go.etcd.io/etcd/client/v3 in store/etcdstore/go.mod.
ETCD_VERSION=v3.6.16

. "$(dirname "$0")/gobuild.sh"
gobuild_start etcd "$ETCD_VERSION" LEASEHOLD_ETCD "cold: about a minute"

# The server module replaces its sibling modules with local paths, which a
# dependency cannot use, so each is required at the same release, and the
# main package is etcd's own two lines.
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
  "go.etcd.io/etcd/pkg/v3@$ETCD_VERSION" && go mod tidy; } >"$gobuild_work/modules.log" 2>&1; then
  cat "$gobuild_work/modules.log" >&2
  exit 1
fi

# is_release BIN fails unless BIN is etcd $ETCD_VERSION.
is_release() {
  local out
  out=$("$1" --version)
  [[ $out == *"etcd Version: ${ETCD_VERSION#v}"$'\n'* ]] || { echo "etcd.sh: the build is not etcd $ETCD_VERSION: $out" >&2; exit 1; }
}
gobuild_finish . is_release
