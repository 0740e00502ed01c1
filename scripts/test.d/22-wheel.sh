#!/usr/bin/env bash
# The wheel a user without the C++ development packages installs: build the
# sdist and from it the repaired manylinux wheel (scripts/wheel.sh, `make
# wheel`), check it with `auditwheel show`, install it into a fresh virtual
# environment and run the Python suite where the system's Abseil and Boost
# shared libraries cannot be found.
#
# Hiding them: a private mount namespace (`unshare --user --map-root-user
# --mount`, which needs no privileges) in which an empty file is bind-mounted
# over every libabsl_* and libboost_* in the loader's directories; a library
# that needed one fails to load ("file too short"). The same namespace first
# checks that the unrepaired extension does fail there, so a hiding that
# stopped working cannot pass unnoticed. Nothing outside the namespace
# changes.
#
# Cost: 8 to 9.5 minutes on the 2-core development machine while three other
# builds ran (load average about 10): the build of the library and the
# extension from the sdist about 5 of them, the PyPI installs (warm pip cache)
# about 1, the Python suite 45-50 s.
#
# Environment: GPUSHARE_WHEEL_BUILD_DIR (default build-wheel) and
# GPUSHARE_WHEEL_DIST (default build-wheel/dist here, so that the stage
# leaves dist/ alone).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build="${GPUSHARE_WHEEL_BUILD_DIR:-$root/build-wheel}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
export GPUSHARE_WHEEL_BUILD_DIR="$build"
export GPUSHARE_WHEEL_DIST="${GPUSHARE_WHEEL_DIST:-$build/dist}"
dist="$GPUSHARE_WHEEL_DIST"

if ! unshare --user --map-root-user --mount true 2>/dev/null; then
  echo "22-wheel: cannot create a user and mount namespace (unshare); on Debian" \
       "set kernel.unprivileged_userns_clone=1 or run as root" >&2
  exit 1
fi

mkdir -p "$build"
scripts/wheel.sh >"$build/wheel.log" 2>&1 || { cat "$build/wheel.log" >&2; exit 1; }
# auditwheel wraps its lines: one line of words to search.
show=$(tr -s ' \n' '  ' <"$build/wheel.log")
wheel=$(ls "$dist"/gpushare-*manylinux*.whl)
echo "wheel: $(basename "$wheel")"
# `auditwheel show` on the repaired wheel: a manylinux tag, and no library
# left to bundle.
if ! grep -q 'consistent with the following platform tag: "manylinux_' <<<"$show"; then
  echo "22-wheel: auditwheel show gives no manylinux tag:" >&2
  echo "$show" >&2
  exit 1
fi
if grep -q "external shared libraries are required" <<<"$show"; then
  echo "22-wheel: the wheel still needs libraries from outside it:" >&2
  echo "$show" >&2
  exit 1
fi
ls "$dist"/gpushare-*.tar.gz >/dev/null

venv="$build/venv"
rm -rf "$venv"
python3 -m venv "$venv"
py="$venv/bin/python"
# The tools of the Python suite (as in 20-python.sh), then the wheel alone:
# --no-index, so that nothing is built from source.
"$py" -m pip install -q --disable-pip-version-check pytest nbclient nbformat ipykernel mypy \
  pandas matplotlib tqdm "dask[distributed]"
"$py" -m pip install -q --disable-pip-version-check --no-index "$wheel"

# The unrepaired extension, for the check that hiding works.
raw="$build/raw-extension"
rm -rf "$raw"
mkdir -p "$raw"
"$py" -m zipfile -e "$build"/raw/gpushare-*.whl "$raw"

mkdir -p "$build/run"
cd "$build/run"
cat >"$build/run/hidden.sh" <<'SH'
set -euo pipefail
py=$1 root=$2 raw=$3
empty="$PWD/empty"
: >"$empty"
hidden=0
seen=" "
for dir in /usr/lib/x86_64-linux-gnu /usr/lib /lib/x86_64-linux-gnu /usr/local/lib; do
  [ -d "$dir" ] || continue
  real=$(readlink -f "$dir")  # /lib is /usr/lib on a merged-/usr system
  case "$seen" in *" $real "*) continue ;; esac
  seen="$seen$real "
  for lib in "$dir"/libabsl_*.so* "$dir"/libboost_*.so*; do
    [ -e "$lib" ] || continue
    mount --bind "$empty" "$lib"
    hidden=$((hidden + 1))
  done
done
echo "hid $hidden Abseil and Boost shared libraries"
[ "$hidden" -gt 0 ] || { echo "22-wheel: no Abseil library found to hide" >&2; exit 1; }
# The unrepaired extension must fail to load here.
if "$py" -c "import ctypes, glob, sys; ctypes.CDLL(glob.glob(sys.argv[1] + '/gpushare/_core*.so')[0])" \
     "$raw" 2>/dev/null; then
  echo "22-wheel: the unrepaired extension loads without the system's Abseil: hiding failed" >&2
  exit 1
fi
"$py" - <<'PY'
import sys
import gpushare
if not gpushare.__file__.startswith(sys.prefix):
    sys.exit(f"22-wheel: gpushare was imported from {gpushare.__file__}, not from {sys.prefix}")
print("gpushare", gpushare.__version__, "from", gpushare.__file__)
PY
"$py" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests"
SH
set +e
unshare --user --map-root-user --mount bash "$build/run/hidden.sh" "$py" "$root" "$raw"
rc=$?
set -e
[ "$rc" -eq 0 ] || exit "$rc"
echo "the wheel passed the Python suite without the system's Abseil and Boost"
