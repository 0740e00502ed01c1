# gpushare: the two commands of the quick start, and a few more.
#
#   make demo    install what is missing, build, run the demo
#   make test    install what is missing, build, run every test (C++ and Python):
#                scripts/test.sh, every stage below and those of scripts/test.d/;
#                about 58 minutes (docs/testing.md)
#   make check   the fast tier for the edit-test loop (scripts/check.sh): the
#                incremental build of build/, the C++ unit suite with
#                GPUSHARE_QUICK=1, and the Python unit suite against
#                build/bindings/python with the persistent venv build-check/venv.
#                `time make check` on AMD EPYC, 2 cores, 24 GiB, 2026-11-28:
#                47 s with nothing to rebuild (454 C++ tests, 497 Python tests),
#                1 min 11 s after editing one file of src/; cold (no build/, no
#                venv) about 19 min, nearly all of it the build of build/
#                (docs/testing.md#make-check)
#
# One stage of make test alone (each also runs inside make test):
#   make test-cpp          the C++ build of build/ and ctest (scripts/test-cpp.sh)
#   make test-sanitize     the same suite under ASan + UBSan in build-asan/, Debug,
#                          GPUSHARE_QUICK=1 (scripts/test-cpp.sh --sanitize)
#   make test-install      examples/consumer and the C ABI's test built against the
#                          installed library (builds build/ first;
#                          scripts/test.d/10-install.sh)
#   make test-python       pip install . into a fresh venv, the pytest suite, the
#                          quickstart (scripts/test.d/20-python.sh)
#   make test-python-asan  the Python suite against an ASan + UBSan build
#   make test-kube         the extender against a real kube-apiserver and kube-scheduler
#
# Others:
#   make deps    install the missing Debian packages (scripts/install-deps.sh);
#                every target but clean runs it first
#   make, make all, make build   configure and build $(BUILD) (default build/)
#   make bench   build in Release and run the benchmarks (JSON in build-bench/)
#   make bench-kube  pods/s through a real kube-scheduler: alone, with the GpuShare
#                plugin, with the extender (scripts/bench-kube.sh; ~20 minutes)
#   make images  the three programs' images (buildah; FROM_SOURCE=1 builds
#                deploy/Dockerfile); REGISTRY=... pushes them there for the
#                Helm chart (scripts/images.sh, docs/helm.md)
#   make wheel   an sdist and a manylinux wheel that needs only pip, in dist/
#   make fuzz    build the libFuzzer targets with clang and run each for
#                FUZZ_SECONDS (default 600); corpus growth in build-fuzz/
#   make clean   remove every build folder, .venv-test and dist/

BUILD    ?= build
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps build demo test check test-cpp test-sanitize test-install test-python bench bench-kube fuzz clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DGPUSHARE_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@$(BUILD)/examples/gpushare_demo

test: deps
	@scripts/test.sh

check: deps
	@scripts/check.sh

test-cpp: deps
	@scripts/test-cpp.sh

test-sanitize: deps
	@scripts/test-cpp.sh --sanitize

test-install: deps
	@scripts/test-cpp.sh --build-only
	@scripts/test.d/10-install.sh

test-python: deps
	@scripts/test.d/20-python.sh

bench: deps
	@scripts/bench.sh

bench-kube: deps
	@scripts/bench-kube.sh

fuzz: deps
	@scripts/fuzz.sh

clean:
	rm -rf build build-* .venv-test dist

.PHONY: test-kube
test-kube: deps
	@scripts/test.d/50-kube.sh

.PHONY: wheel
wheel: deps
	@scripts/wheel.sh

.PHONY: test-python-asan
test-python-asan: deps
	@scripts/test-python-asan.sh

.PHONY: images
images: deps
	@scripts/images.sh

# The end-to-end stages on Kubernetes 1.35 and 1.36 (make test runs 1.37):
# scripts/kube-matrix.sh; KUBE_VERSIONS="v1.35.4 v1.36.3" to choose.
.PHONY: test-kube-matrix
test-kube-matrix: deps
	@scripts/kube-matrix.sh
