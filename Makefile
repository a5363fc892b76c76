# kiln: the two commands a newcomer needs are `make run` and `make test`.
# CMake does the real work; this file installs what is missing and drives it.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD ?= build
MODEL ?= models/kiln-tiny
HOST ?= 127.0.0.1
PORT ?= 8080

.PHONY: all kiln deps run test test-unit test-asan cuda test-cuda clean bench-fixtures

all: kiln

kiln: $(BUILD)/Makefile
	@cmake --build $(BUILD) -j$(JOBS)

$(BUILD)/Makefile: CMakeLists.txt
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

deps:
	@bash scripts/deps.sh

# Serves the bundled model (OpenAI and Anthropic APIs) until Ctrl-C.
run: deps kiln
	./$(BUILD)/kiln serve $(MODEL) --host $(HOST) --port $(PORT)

# Every test, then every test again under ASan+UBSan.
test: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	@bash scripts/test-setup.sh
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	@$(MAKE) --no-print-directory test-asan

test-asan:
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j$(JOBS)

cuda:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# The CUDA tests (need a GPU; run from the repository root for the fixtures): every
# kernel against the CPU reference, then every fixture on the CUDA backend, then the hybrid
# fixtures in ragged batches, chunked prefill, snapshots and graphs over growing contexts, then
# real-shape synths against the CPU backend (test_cuda_shapes), then device sampling.
test-cuda: cuda
	./$(BUILD)/test_cuda_kernels
	./$(BUILD)/test_cuda_parity
	./$(BUILD)/test_cuda_hybrid
	./$(BUILD)/test_cuda_shapes
	./$(BUILD)/test_cuda_sample

clean:
	rm -rf $(BUILD) build-asan
