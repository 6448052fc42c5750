#!/usr/bin/env bash
# Releases every published module at VERSION: rewrites the requirements
# between the project's modules (and go.work's replacements) to VERSION,
# commits, and tags v1.2.3, store/redisstore/v1.2.3, … at that commit. It
# refuses a bad VERSION, a dirty work tree and an existing tag; it never pushes.
# Usage: scripts/release.sh [--dry-run] VERSION
# The logic is in scripts/release (Go), which make release-check also uses.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/release" ./scripts/release
"$tmp/release" tag "$@"
