# Sourced by the scripts that build Go against the C ABI (go/gpushare/test.sh,
# scheduler-plugin/build.sh and test.sh), after they set `root` (the
# repository) and a `log` function. From BUILD (a CMake build folder,
# default build, relative to the repository root) it finds libgpushare_c.so
# and its uninstalled pkg-config file, or exits naming the target to build;
# finds Go (tests/kube/find-go.sh); and exports what cgo needs. Sets build,
# lib_dir, pc_dir and go_bin.
build="${BUILD:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
lib_dir="$build/bindings/c"
pc_dir="$lib_dir/pkgconfig"
if [ ! -f "$pc_dir/gpushare_c.pc" ] || [ ! -e "$lib_dir/libgpushare_c.so" ]; then
  log "no $pc_dir/gpushare_c.pc or $lib_dir/libgpushare_c.so: build the gpushare_c target first"
  log "  cmake -S $root -B $build -G Ninja && ninja -C $build gpushare_c"
  exit 1
fi
go_bin="$("$root/tests/kube/find-go.sh")"
export GOTOOLCHAIN=local CGO_ENABLED=1
export GOFLAGS="${GOFLAGS:-} -p=${GPUSHARE_KUBE_GO_JOBS:-2}"
export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
