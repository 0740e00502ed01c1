#!/usr/bin/env bash
# The end-to-end stages on other Kubernetes releases than the one pinned in
# tests/kube/go.mod (make test runs that one): for each release, a copy of
# this tree (tracked and untracked files, no build folders) pointed at it by
# scripts/set-kube-version.sh, then in it
#   50-kube               gpushare-extender behind that kube-scheduler, and the
#                         Helm chart through that kube-apiserver
#   51-scheduler-plugin   kube-scheduler of that release built with GpuShare
#   52-node               the device plugin behind that release's kubelet
# against the C++ build of $BUILD (built once, shared). Each release's
# programs are built once and cached (tests/kube/build-kube.sh,
# scheduler-plugin/build.sh), so a warm rerun costs the tests only.
#
#   make test-kube-matrix                         # KUBE_VERSIONS="v1.35.4 v1.36.3"
#   KUBE_VERSIONS=v1.36.3 scripts/kube-matrix.sh
#   STAGES="50-kube" scripts/kube-matrix.sh       # a subset of the stages
#
# Prints one line per release and stage, and fails when any failed; each
# stage's output is in $MATRIX_LOGS (default build/kube-matrix/).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD:-build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
versions=${KUBE_VERSIONS:-v1.35.4 v1.36.3}
stages=${STAGES:-50-kube 51-scheduler-plugin 52-node}
logs=${MATRIX_LOGS:-$build/kube-matrix}
mkdir -p "$logs"

cmake -S . -B "$build" -G Ninja -DGPUSHARE_WERROR=ON -DGPUSHARE_BUILD_DEVICE_PLUGIN=ON >/dev/null
cmake --build "$build" --target gpushare-extender kubectl-inspect-gpushare gpushare-device-plugin \
  nvml_stub gpushare_c
# The chart is rendered by the pinned Helm, a client of every supported release.
export GPUSHARE_HELM
GPUSHARE_HELM="$(tests/kube/build-kube.sh helm)/helm"

work=$(mktemp -d "${TMPDIR:-/tmp}/kube-matrix.XXXXXX")
trap 'rm -rf "$work"' EXIT
results=()
status=0
for v in $versions; do
  tree="$work/$v"
  mkdir -p "$tree"
  git ls-files -co --exclude-standard -z | tar c --null -T - | tar x -C "$tree"
  if ! "$tree/scripts/set-kube-version.sh" "$v" > "$logs/$v-set-version.log" 2>&1; then
    results+=("$v set-kube-version FAILED ($logs/$v-set-version.log)"); status=1; continue
  fi
  for s in $stages; do
    start=$(date +%s)
    if (cd "$tree" && BUILD="$build" GPUSHARE_KUBE_VENV="$build/venv-kube" \
          bash "scripts/test.d/$s.sh") > "$logs/$v-$s.log" 2>&1; then
      r="passed"
    else
      r="FAILED"; status=1
    fi
    summary=$(grep -E "^=+ .*(passed|failed|skipped|error).* in [0-9.]+s" "$logs/$v-$s.log" | tail -1 | tr -d '=' | xargs || true)
    results+=("$v $s $r in $(( $(date +%s) - start )) s${summary:+: $summary} ($logs/$v-$s.log)")
    echo "kube-matrix: ${results[-1]}"
  done
done
echo
printf 'kube-matrix: %s\n' "${results[@]}"
exit $status
