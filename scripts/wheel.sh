#!/usr/bin/env bash
# `make wheel`: an sdist, and from it a wheel that needs nothing but pip.
#
# The extension links Abseil from the system (Debian's shared libabsl_*);
# `auditwheel repair` copies every library outside the manylinux policy's
# allowed set (libc, libm, libstdc++, libgcc_s, ...) into gpushare.libs/ in
# the wheel, points the extension's RPATH there (patchelf), and tags the
# wheel with the oldest manylinux policy its symbol versions allow. The wheel
# is built from the sdist (python -m build does sdist, then wheel from it),
# so a working wheel also shows that the sdist builds.
#
# Output: $GPUSHARE_WHEEL_DIST (default dist/): gpushare-*.tar.gz and the
# repaired gpushare-*-manylinux_*.whl; the unrepaired wheel stays in
# $GPUSHARE_WHEEL_BUILD_DIR/raw (default build-wheel/raw). The build tools
# (build, scikit-build-core, pybind11, auditwheel, patchelf) come from PyPI
# into $GPUSHARE_WHEEL_BUILD_DIR/tools.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build="${GPUSHARE_WHEEL_BUILD_DIR:-$root/build-wheel}"
dist="${GPUSHARE_WHEEL_DIST:-$root/dist}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
case "$dist" in /*) ;; *) dist="$root/$dist" ;; esac
tools="$build/tools"
log="$build/build.log"
mkdir -p "$build"
rm -rf "$build/raw" "$dist"
mkdir -p "$build/raw" "$dist"

if [ ! -x "$tools/bin/auditwheel" ]; then
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check build \
    "scikit-build-core>=0.10" "pybind11>=2.10" auditwheel patchelf
fi
export PATH="$tools/bin:$PATH"  # auditwheel runs the patchelf it installed
# Two compilers at a time unless told otherwise (CI machines are small).
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

echo "sdist and wheel (log: $log)"
# --no-isolation: the backend from $tools, not a fresh download per build.
if ! nice "$tools/bin/python" -m build --no-isolation --outdir "$build/raw" \
      -C cmake.define.GPUSHARE_WERROR=ON . >"$log" 2>&1; then
  grep -E "error|Error|ERROR" "$log" | head -n 40 >&2 || true
  echo "---- last lines of $log ----" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
cp "$build/raw"/gpushare-*.tar.gz "$dist/"
"$tools/bin/auditwheel" repair --wheel-dir "$dist" "$build/raw"/gpushare-*.whl >>"$log" 2>&1 || {
  tail -n 20 "$log" >&2
  exit 1
}
"$tools/bin/auditwheel" show "$dist"/gpushare-*.whl
ls -l "$dist"
