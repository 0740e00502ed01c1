#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler and kubectl from the Kubernetes release
# pinned in tests/kube/go.mod, through the Go module proxy, and caches them
# outside the source tree so that `make clean` keeps them:
#
#   ${GPUSHARE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare}/kube-<k8s>-<go>/
#
# Prints that directory on stdout (and nothing else); progress goes to stderr.
# A warm cache costs a `go version` and three file checks. A cold build takes
# minutes and ~2 GB of memory; it runs under `nice` with GOFLAGS=-p=2.
#
# Go: uses `go` from PATH or /usr/local/go/bin when it is new enough for the
# go.mod. Otherwise installs Debian's golang-go and, as Debian 12's Go (1.19)
# predates GOTOOLCHAIN, fetches the Go toolchain module
# golang.org/toolchain@v0.0.1-go<ver>.linux-<arch> through the module proxy,
# the same module that GOTOOLCHAIN=go<ver> downloads on a newer Go.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "build-kube: $*" >&2; }

k8s_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go.mod")"
go_min="$(awk '$1 == "go" {print $2}' "$here/go.mod")"
# The toolchain fetched when the machine has no usable Go.
go_fallback="${GPUSHARE_KUBE_GO_TOOLCHAIN:-go1.25.5}"
if [ -z "$k8s_version" ] || [ -z "$go_min" ]; then
  log "cannot read the Kubernetes or Go version from $here/go.mod"; exit 1
fi

# version_ge A B: A >= B for dotted versions (1.25.0 style).
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }

find_go() {
  local candidate v
  for candidate in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go; do
    [ -n "$candidate" ] && [ -x "$candidate" ] || continue
    v="$(GOTOOLCHAIN=local "$candidate" env GOVERSION 2>/dev/null || true)"
    v="${v#go}"
    if [ -n "$v" ] && version_ge "$v" "$go_min"; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

fetch_go_toolchain() {
  # Debian's Go, used only to download the toolchain module.
  if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/lib/go/bin/go ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
      log "no Go >= $go_min and no apt-get; install Go $go_min or newer"; exit 1
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    log "installing Debian's golang-go to fetch the Go toolchain module"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends golang-go >/dev/null
  fi
  local bootstrap arch mod dir
  bootstrap="$(command -v go 2>/dev/null || echo /usr/lib/go/bin/go)"
  arch="$(GOTOOLCHAIN=local "$bootstrap" env GOARCH)"
  mod="golang.org/toolchain@v0.0.1-${go_fallback}.linux-${arch}"
  log "fetching $mod through the module proxy"
  # Outside any module: an old Go cannot read this folder's go.mod.
  dir="$(cd / && GOTOOLCHAIN=local GO111MODULE=on "$bootstrap" mod download -json "$mod" |
         sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  if [ -z "$dir" ] || [ ! -f "$dir/bin/go" ]; then
    log "download of $mod failed"; exit 1
  fi
  # Module zips carry no file modes; the toolchain's programs need them.
  chmod -R u+w "$dir"
  chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*
  echo "$dir/bin/go"
}

go_bin="$(find_go || fetch_go_toolchain)"
export GOTOOLCHAIN=local
go_version="$("$go_bin" env GOVERSION)"

cache_root="${GPUSHARE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare}"
out="$cache_root/kube-${k8s_version}-${go_version}"
programs=(kube-apiserver kube-scheduler kubectl)

complete=1
for p in "${programs[@]}"; do [ -x "$out/$p" ] || complete=0; done
if [ "$complete" -eq 1 ]; then
  log "cached: $out"
  echo "$out"
  exit 0
fi

mkdir -p "$out"
# kubectl refuses a server whose version it cannot parse, and kube-apiserver
# reports what these variables hold, so set them as the release build does.
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
commit="$(cd "$here" && "$go_bin" mod download -json "k8s.io/kubernetes@$k8s_version" |
          sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)",*$/\1/p' | head -1)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitCommit=${commit:-unknown} -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

log "building ${programs[*]} $k8s_version with $go_version into $out (minutes on a cold machine)"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
for p in "${programs[@]}"; do
  (cd "$here" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -p=${GPUSHARE_KUBE_GO_JOBS:-2}" \
     nice -n 10 "$go_bin" build -trimpath -ldflags "$ldflags" -o "$tmp/$p" "k8s.io/kubernetes/cmd/$p")
  log "  $p built ($(( $(date +%s) - start )) s so far)"
done
# Move into place only once all three exist, so an interrupted build is redone.
for p in "${programs[@]}"; do mv -f "$tmp/$p" "$out/$p"; done
log "built in $(( $(date +%s) - start )) s"
echo "$out"
