#!/usr/bin/env bash
# Builds kube-apiserver, which store/kubestore's tests run against, from Go
# modules at a pinned version into a cache directory outside the repository,
# and only when it is missing there. Debian has no apiserver package and
# setup-envtest downloads binaries, so the build is the one way that needs
# nothing but Go and its module proxy.
#
# Usage: scripts/kube-apiserver.sh        (prints the binary's path)
#
# The binary goes to $LEASEHOLD_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/leasehold)/kube-apiserver-$KUBE_VERSION/,
# which storetest/testserver's KubeAPIServerPath reads too; keep the two in step.
# If LEASEHOLD_KUBE_APISERVER is set, the binary it names is used and nothing
# is built (an error when it names no executable, as in the tests).
#
# Cost, measured on 2 cores: about 45 s of module downloads (about 550 MB of
# module cache) and a cold build of about 6 minutes at 2.3 GB peak memory; with
# a warm Go build cache, about 11 s. When the binary is there: well under 1 s.
set -euo pipefail

# KUBE_VERSION is the pinned k8s.io/kubernetes release (v1.36.3 needs go 1.26).
# Its staging modules (k8s.io/api, client-go, apiserver...) are published as
# v0.X.Y for release v1.X.Y; STAGING_VERSION is derived from it.
KUBE_VERSION=v1.36.3
STAGING_VERSION=v0.${KUBE_VERSION#v1.}

. "$(dirname "$0")/gobuild.sh"
gobuild_start kube-apiserver "$KUBE_VERSION" LEASEHOLD_KUBE_APISERVER "cold: about 6 minutes and 2.3 GB of memory"

# k8s.io/kubernetes replaces each staging module with ./staging/src/k8s.io/...,
# which a module dependency cannot use; point each at its published version.
gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[ -f "$gomod" ] || { echo "kube-apiserver.sh: no go.mod for k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }
args=(-require="k8s.io/kubernetes@$KUBE_VERSION")
while read -r mod; do
  # k8s.io/sample-cli-plugin is not needed by the apiserver and not on the proxy.
  [ "$mod" = k8s.io/sample-cli-plugin ] && continue
  args+=(-replace="$mod=$mod@$STAGING_VERSION")
done < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod")
[ ${#args[@]} -gt 10 ] || { echo "kube-apiserver.sh: found too few staging replaces in $gomod" >&2; exit 1; }
go mod edit "${args[@]}"

gobuild_finish k8s.io/kubernetes/cmd/kube-apiserver
