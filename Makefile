# Entry points for a fresh Debian 12 machine. Every target that needs binaries first runs
# scripts/bootstrap, which installs missing packages and (re)builds incrementally.
#
#   make demo | test | bench | build | clean | format | fuzz | fuzz-long
#   SAN=1 make test      ASan+UBSan build in build-san (clang; the fuzz targets share it),
#                        the suite without the real-model tests (CTEST_ARGS= runs them too)
#   make fuzz            every libFuzzer target 20 s on its corpus (build-san)
#   make fuzz-long       the campaign: 10^6 executions per target (figures: docs/reliability.md)
#   BUILD_DIR=dir make   another build directory

SAN ?= 0
ifeq ($(SAN),1)
BUILD_DIR ?= build-san
else
BUILD_DIR ?= build
endif

CTEST_JOBS ?= 2
CTEST_TIMEOUT ?= 600

# Sanitizer reports with a stack trace, and leaks inside system libraries suppressed; harmless in
# a normal build.
export UBSAN_OPTIONS ?= print_stacktrace=1
export LSAN_OPTIONS ?= suppressions=$(CURDIR)/tests/lsan.supp

.PHONY: all build demo test bench clean format fuzz fuzz-long

all: build

build:
	SAN=$(SAN) BUILD_DIR=$(BUILD_DIR) scripts/bootstrap

# The demo builds only the programs it runs (no test suite), so a newcomer sees a result sooner.
demo:
	SAN=$(SAN) BUILD_DIR=$(BUILD_DIR) BUILD_TARGETS="loomd loomc" scripts/bootstrap
	scripts/demo $(BUILD_DIR)

# The sanitizer suite leaves out the tests labelled `model` (tests/CMakeLists.txt says why).
ifeq ($(SAN),1)
CTEST_ARGS ?= -LE model
else
CTEST_ARGS ?=
endif

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(CTEST_JOBS) --timeout $(CTEST_TIMEOUT) $(CTEST_ARGS)

bench: build
	$(BUILD_DIR)/bench/loom_bench_runtime
	$(BUILD_DIR)/bench/loom_bench_kernels
	$(BUILD_DIR)/bench/loom_bench_executor --models "$$(scripts/fetch-models | tail -n 1)"
	bench/realesrgan.sh $(BUILD_DIR)

fuzz:
	scripts/fuzz 20

fuzz-long:
	scripts/fuzz long 1000000

clean:
	rm -rf build build-san $(BUILD_DIR)

# Every C++ file in the repository, in the style of .clang-format.
format:
	git ls-files -z '*.cpp' '*.hpp' | xargs -0 -r clang-format -i
