# Sourced by scripts/kube-apiserver.sh and scripts/etcd.sh: what their builds
# of a server from Go modules into the cache share. Not run by itself.
#
# gobuild_start NAME VERSION OVERRIDE WHAT prints the binary's path and exits
# the script when it is there: $OVERRIDE (the name of an environment variable)
# if set (an error when it names no executable), else $LEASEHOLD_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/leasehold)/NAME-VERSION/NAME, which
# storetest/testserver reads too. Otherwise it says it builds (WHAT says how
# long that takes) and leaves the script in a throwaway module outside any
# workspace, so that the repository's go.work and go.mod files neither see
# nor change the build, with dir and bin set and the module removed on exit.
gobuild_start() {
  local name=$1 version=$2 override=${!3:-} what=$4
  if [ -n "$override" ]; then
    # As the tests take it: a variable naming no binary is an error, not
    # a reason to build another.
    [ -f "$override" ] && [ -x "$override" ] || { echo "$name: \$$3 is $override, not an executable file" >&2; exit 1; }
    echo "$override"
    exit 0
  fi
  local cache=${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}
  case $cache in
  /*) ;;
  *) echo "$name: the cache directory $cache is not an absolute path (\$LEASEHOLD_CACHE, \$XDG_CACHE_HOME)" >&2; exit 1 ;;
  esac
  dir=$cache/$name-$version
  bin=$dir/$name
  if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
  fi
  command -v go >/dev/null 2>&1 || { echo "$name: go is not on PATH" >&2; exit 1; }
  gobuild_began=$(date +%s)
  echo "building $name $version into $dir ($what)" >&2
  gobuild_work=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-$name.XXXXXX")
  gobuild_tmp=
  trap 'rm -rf "$gobuild_work" ${gobuild_tmp:+"$gobuild_tmp"}' EXIT
  mkdir -p "$dir"
  cd "$gobuild_work"
  export GOWORK=off GOFLAGS=-mod=mod
  go mod init "leasehold.invalid/$name-build" >/dev/null 2>&1
}

# gobuild_finish PACKAGE [CHECK...] builds PACKAGE to a temporary name in the
# target directory, runs CHECK with that binary's path appended (when given),
# and renames it to $bin: a binary at $bin is always a whole one, even if the
# build is interrupted. It prints the binary's path.
gobuild_finish() {
  local pkg=$1
  shift
  gobuild_tmp=$(mktemp "$dir/.$(basename "$bin").XXXXXX")
  go build -trimpath -o "$gobuild_tmp" "$pkg"
  chmod 0755 "$gobuild_tmp"
  if [ $# -gt 0 ]; then
    "$@" "$gobuild_tmp"
  fi
  mv -f "$gobuild_tmp" "$bin"
  gobuild_tmp=
  echo "built $bin in $(( $(date +%s) - gobuild_began )) s" >&2
  echo "$bin"
}
