#!/usr/bin/env bash
# Prints the path of a Go toolchain new enough for tests/kube/go.mod, for
# build-kube.sh and device-plugin/kubelet-api.sh; progress goes to stderr.
# Uses `go` from PATH or /usr/local/go/bin when it is new enough for the
# go.mod. Otherwise installs Debian's golang-go and, as Debian 12's Go (1.19)
# predates GOTOOLCHAIN, fetches the Go toolchain module
# golang.org/toolchain@v0.0.1-go<ver>.linux-<arch> through the module proxy,
# the same module that GOTOOLCHAIN=go<ver> downloads on a newer Go; with
# GPUSHARE_FIND_GO_NO_INSTALL set it installs nothing and fails instead.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "find-go: $*" >&2; }
go_min="$(awk '$1 == "go" {print $2}' "$here/go.mod")"
# The toolchain fetched when the machine has no usable Go.
go_fallback="${GPUSHARE_KUBE_GO_TOOLCHAIN:-go1.26.8}"
if [ -z "$go_min" ]; then
  log "cannot read the Go version from $here/go.mod"; exit 1
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
    if [ -n "${GPUSHARE_FIND_GO_NO_INSTALL:-}" ]; then
      log "no Go >= $go_min, and GPUSHARE_FIND_GO_NO_INSTALL forbids installing one"; exit 1
    fi
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

find_go || fetch_go_toolchain
