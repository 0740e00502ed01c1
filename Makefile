# gpushare: the two commands of the quick start, and a few more.
#
#   make demo    install what is missing, build, run the demo
#   make test    install what is missing, build, run every test (C++ and Python)
#   make bench   build in Release and run the benchmarks (JSON in build-bench/)
#   make test-kube         the extender against a real kube-apiserver and kube-scheduler
#   make test-python-asan  the Python suite against an ASan + UBSan build
#   make wheel             an sdist and a manylinux wheel that needs only pip, in dist/
#   make fuzz              build the libFuzzer targets with clang and run each for
#                          FUZZ_SECONDS (default 600); corpus growth in build-fuzz/

BUILD    ?= build
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all deps build demo test test-cpp test-sanitize test-python test-install bench fuzz clean

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

bench: deps
	@scripts/bench.sh

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
