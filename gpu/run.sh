#!/usr/bin/env bash
# Runs on the GPU machine, from inside the bundle: builds the C/C++/CUDA programs
# against the bundled library, runs every GPU check with GPURT_REQUIRE_GPU=1, and
# prints a pass/fail summary last. Logs go to $OUT (or ./logs).
set -uo pipefail
cd "$(dirname "$0")"
export GPURT_REQUIRE_GPU=1
logs=${OUT:-$PWD/logs}
mkdir -p "$logs" bin
lib=$PWD/lib
results=()

# The steps that measure (speed, peak memory) or run the engines' long comparisons, which
# want the machine to themselves: PART=figures runs them, with the builds and installs they
# need; PART=checks runs the rest. Each part fits one lease of a machine held at most 30
# minutes (gpu/plans/).
figures='^(build-(batch-bench|green-bench|vbuffer-bench|pin-bench|sleep-bench|blas-bench|gpt2|nvtx-record-tool|trace-replay)|batch-bench|green-bench|vbuffer-bench|pin-bench|sleep-bench|blas-bench|gpt2-.*|memcheck-gpt2.*|go-bench|dropin-.*|sleep-torch-saver|sleep-torch-live|share-torch|bench-.*|record-traces|trace-replay.*|record-dropin-sequence|record-dropin-b-.*|keep-dropin-sequence|ggml-gpt2-.*)$'
setup='^(python-install|tms-install)$'

step() {  # step NAME COMMAND...: runs, logs, records PASS/FAIL (only names matching $ONLY and not $SKIP, if set, and in $PART)
    local name=$1; shift
    [[ -n ${ONLY:-} && ! $name =~ $ONLY ]] && return 0
    [[ -n ${SKIP:-} && $name =~ $SKIP ]] && return 0
    [[ ${PART:-} == figures && ! $name =~ $figures && ! $name =~ $setup ]] && return 0
    [[ ${PART:-} == checks && $name =~ $figures ]] && return 0
    [[ -n ${PART:-} && ($name =~ ^llama- && $PART != llama || ! $name =~ ^llama- && $PART == llama) ]] && return 0
    # LIST=1: names the steps, runs none; LIST=commands: each name and its command, quoted
    [[ -n ${LIST:-} ]] && { if [[ $LIST == commands ]]; then printf '%s\t%s\n' "$name" "${*@Q}"; else echo "$name"; fi; return 0; }
    echo "=== $name"
    local start=$SECONDS
    if "$@" >"$logs/$name.log" 2>&1; then
        results+=("PASS  $name ($((SECONDS - start)) s)")
    else
        results+=("FAIL  $name (exit $?, $((SECONDS - start)) s)")
    fi
    tail -n 25 "$logs/$name.log"
}

if [[ -z ${LIST:-} ]]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    # cuFile's configuration for the GDS test in cuFile mode and the raw cuFile side of the
    # GDS benchmark: its compatibility mode allowed (the lent machines have no nvidia-fs).
    echo '{ "properties": { "allow_compat_mode": true } }' > cufile.json
    export CUFILE_ENV_PATH_JSON=$PWD/cufile.json
    echo "nvidia-fs: $(cat /proc/driver/nvidia-fs/version 2>/dev/null || echo absent)"
    echo "NVRTC: $(ls /usr/local/cuda/lib64/libnvrtc.so.* 2>/dev/null | head -1) (gpurt also looks on the loader path and in \$CUDA_HOME)"
fi
step build-gpurt-info cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/gpurt-info.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/gpurt-info
step build-abi-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/abi_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/abi_test
[ -f lib/libgpurt.a ] || gunzip -k lib/libgpurt.a.gz
step build-abi-test-static c++ -std=c++17 -O2 -Wall -Wextra -pedantic -Werror -Iinclude -x c++ src/abi_test.c -x none lib/libgpurt.a -lpthread -ldl -lm -lrt -lutil -lgcc_s -o bin/abi_test_static
step build-process-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/process_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -lpthread -o bin/process_test
step build-ipc-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/ipc_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/ipc_test
step build-sleep-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/sleep_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -ldl -lpthread -o bin/sleep_test
step build-sleep-storm cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/sleep_storm.c -Llib -lgpurt -Wl,-rpath,"$lib" -lpthread -o bin/sleep_storm
step build-memory-report-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/memory_report_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/memory_report_test
step build-foreign-capture-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/foreign_capture_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -ldl -lpthread -o bin/foreign_capture_test
step build-backend-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/backend_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/backend_test
step build-tunable-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/tunable_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -lpthread -o bin/tunable_test
step build-sanitizer-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/sanitizer_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -lpthread -o bin/sanitizer_test
step build-gds-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/gds_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/gds_test
step build-comm-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/comm_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/comm_test
step build-comm-ranks-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/comm_ranks_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/comm_ranks_test
step build-comm-helpers-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/comm_helpers_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -ldl -o bin/comm_helpers_test
# The math-library handles: logic (the C ABI test CI runs on stand-ins), exact GEMMs and the benchmark against CUDA's cuBLAS.
cublas_flags=(-I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcublasLt -lcublas -Wl,-rpath,/usr/local/cuda/lib64)
step build-blas-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/blas_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -lpthread -ldl -o bin/blas_test
step build-blas-gpu-test cc -std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude src/blas_gpu_test.c -Llib -lgpurt -Wl,-rpath,"$lib" "${cublas_flags[@]}" -lpthread -o bin/blas_gpu_test
step build-graph-nodes-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/graph_nodes_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/graph_nodes_test
step build-shared-capture-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/shared_capture_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/shared_capture_test
step build-vbuffer-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/vbuffer_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -ldl -o bin/vbuffer_test
step build-vbuffer-bench cc -std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude -I/usr/local/cuda/include src/vbuffer_bench.c -Llib -lgpurt -Wl,-rpath,"$lib" -lcuda -o bin/vbuffer_bench
step build-green-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/green_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -ldl -o bin/green_test
step build-green-bench cc -std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude src/green_bench.c -Llib -lgpurt -Wl,-rpath,"$lib" "${cublas_flags[@]}" -o bin/green_bench
step build-blas-bench cc -std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude src/blas_bench.c -Llib -lgpurt -Wl,-rpath,"$lib" "${cublas_flags[@]}" -o bin/blas_bench
step build-memory-history-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/memory_history_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/memory_history_test
step build-nvtx-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/nvtx_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/nvtx_test
step build-ncu-kernels cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/ncu_kernels.c -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/ncu_kernels
step build-soak cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/soak.c -Llib -lgpurt -Wl,-rpath,"$lib" -lpthread -o bin/soak
step build-dlclose-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror src/dlclose_test.c -ldl -o bin/dlclose_test
step build-hpp-test c++ -std=c++17 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/hpp_test.cpp -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/hpp_test
step build-no-exceptions-test c++ -std=c++20 -fno-exceptions -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/no_exceptions_test.cpp -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/no_exceptions_test
step build-interop nvcc -std=c++17 -O2 -Iinclude src/interop.cu -Llib -lgpurt -Xlinker -rpath -Xlinker "$lib" -o bin/interop
# The RMM adaptor against the carried librmm wheel (headers, CCCL and librmm.so).
for wheel in rmm/*.whl; do python3 -m zipfile -e "$wheel" rmm/ >/dev/null; done
rmm_flags=(-isystem rmm/librmm/include/rapids -isystem rmm/librmm/include -isystem rmm/rapids_logger/include
           -isystem /usr/local/cuda/include -Lrmm/librmm/lib64 -lrmm -Lrmm/rapids_logger/lib64 -lrapids_logger
           -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,"$PWD/rmm/librmm/lib64:$PWD/rmm/rapids_logger/lib64:/usr/local/cuda/lib64")
step build-rmm-test c++ -std=c++20 -O2 -Wall -Wextra -Werror -Iinclude src/rmm_test.cpp -Llib -lgpurt -Wl,-rpath,"$lib" "${rmm_flags[@]}" -o bin/rmm_test
step gpurt-info bin/gpurt-info
step abi-test bin/abi_test
step abi-test-static bin/abi_test_static
step process-test bin/process_test
step ipc-test bin/ipc_test
step sleep-test bin/sleep_test
# Threads allocating, freeing and checking bytes in the default pool and two user pools
# while they sleep and wake; NVML's figures against the pools' at the end.
step sleep-storm bin/sleep_storm "${STORM_SECONDS:-30}" 8
# Sleep and wake against raw driver copies and mappings of the same bytes (issue #44's targets).
step build-batch-test cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/batch_test.c -Llib -lgpurt -Wl,-rpath,"$lib" -ldl -o bin/batch_test
step batch-test bin/batch_test
step green-test bin/green_test
step vbuffer-test bin/vbuffer_test
step graph-nodes-test bin/graph_nodes_test
step shared-capture-test bin/shared_capture_test
step build-batch-bench cc -std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude -I/usr/local/cuda/include src/batch_bench.c -Llib -lgpurt -Wl,-rpath,"$lib" -lcuda -o bin/batch_bench
step batch-bench bin/batch_bench
step build-pin-bench cc -std=gnu11 -O2 -Wall -Wextra -Werror -I/usr/local/cuda/include src/pin_bench.c -lcuda -lpthread -o bin/pin_bench
step pin-bench bin/pin_bench 8 8 3
step build-sleep-bench cc -std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude -I/usr/local/cuda/include src/sleep_bench.c -Llib -lgpurt -Wl,-rpath,"$lib" -lcuda -o bin/sleep_bench
step sleep-bench bin/sleep_bench "${SLEEP_BENCH_GIB:-8}" 5
step backend-test bin/backend_test
step foreign-capture-test bin/foreign_capture_test
step memory-report-test bin/memory_report_test
step tunable-test bin/tunable_test
step sanitizer-test bin/sanitizer_test
step gds-test bin/gds_test
step comm-test bin/comm_test
step comm-ranks-test timeout 400 bin/comm_ranks_test
step comm-helpers-test bin/comm_helpers_test
step blas-test bin/blas_test
step blas-gpu-test bin/blas_gpu_test
step blas-bench bin/blas_bench
step green-bench bin/green_bench
step vbuffer-bench bin/vbuffer_bench
# An engine on gpurt: GPT-2 built by its own CMake project with find_package(gpurt) on
# this bundle, against weights and PyTorch's outputs made here (docs/integrations.md, "An engine on gpurt").
step build-gpt2 bash -c "cmake -S src/gpt2 -B build-gpt2 -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$PWD -DGPT2_JSON_INCLUDE=$PWD/json && cmake --build build-gpt2 -j 8"
step gpt2-host-test build-gpt2/gpt2_host_test build-gpt2
step gpt2-reference python3 src/gpt2_reference.py make gpt2-data
step gpt2-fp32 build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts.txt 128 --tokens gpt2-data/fp32_tokens.txt --logits gpt2-data/fp32_logits.f32
step gpt2-compare-fp32 python3 src/gpt2_reference.py compare gpt2-data gpt2-data/fp32_tokens.txt gpt2-data/fp32_logits.f32
# One prompt alone: the engine's fused GEMV path (more prompts take cuBLAS's).
step gpt2-prompt0 bash -c "head -n 1 gpt2-data/prompts.txt > gpt2-data/prompt0.txt"
step gpt2-fp32-one build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompt0.txt 128 --tokens gpt2-data/one_tokens.txt --logits gpt2-data/one_logits.f32
step gpt2-compare-fp32-one python3 src/gpt2_reference.py compare gpt2-data gpt2-data/one_tokens.txt gpt2-data/one_logits.f32 ref 0
step gpt2-fp16-one build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompt0.txt 128 --fp16 --tokens gpt2-data/one_tokens16.txt
step gpt2-compare-fp16-one python3 src/gpt2_reference.py compare16 gpt2-data gpt2-data/one_tokens16.txt 0
step gpt2-ragged build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts_ragged.txt 128 --tokens gpt2-data/ragged_mine.txt --logits gpt2-data/ragged_mine.f32
step gpt2-compare-ragged python3 src/gpt2_reference.py compare gpt2-data gpt2-data/ragged_mine.txt gpt2-data/ragged_mine.f32 ragged
step gpt2-fp16 build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts.txt 128 --fp16 --tokens gpt2-data/fp16_tokens.txt
step gpt2-compare-fp16 python3 src/gpt2_reference.py compare16 gpt2-data gpt2-data/fp16_tokens.txt
step gpt2-fp32-eager build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts.txt 128 --no-graphs --tokens gpt2-data/eager_tokens.txt
step gpt2-eager-same-tokens cmp gpt2-data/eager_tokens.txt gpt2-data/fp32_tokens.txt
step gpt2-tunable build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts.txt 128 --tunable --tokens gpt2-data/tunable_tokens.txt --logits gpt2-data/tunable_logits.f32 --snapshot gpt2-data/gpt2.pickle
step gpt2-compare-tunable python3 src/gpt2_reference.py compare gpt2-data gpt2-data/tunable_tokens.txt gpt2-data/tunable_logits.f32
step gpt2-snapshot python3 -c "import pickle, sys; s = pickle.load(open('gpt2-data/gpt2.pickle', 'rb')); n = sum(len(g['blocks']) for g in s['segments']); print(len(s['segments']), 'segments,', n, 'blocks'); sys.exit(0 if n else 1)"
step gpt2-topk-seed7 build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts.txt 128 --top-k 40 --seed 7 --tokens gpt2-data/topk7.txt --logits gpt2-data/topk7.f32
step gpt2-topk-seed7-again build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts.txt 128 --top-k 40 --seed 7 --tokens gpt2-data/topk7b.txt
step gpt2-topk-seed8 build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts.txt 128 --top-k 40 --seed 8 --tokens gpt2-data/topk8.txt
step gpt2-topk-check python3 src/gpt2_reference.py topk 40 gpt2-data/topk7.txt gpt2-data/topk7.f32 gpt2-data/topk7b.txt gpt2-data/topk8.txt
# Speed at batch 1 and 16 (128-token prompts, 256 new tokens) beside transformers' eager
# generate, a static KV cache in CUDA graphs, and that under torch.compile.
step gpt2-speed-torch python3 src/gpt2_reference.py speed gpt2-data
step gpt2-first-token-torch-b1 python3 src/gpt2_reference.py first gpt2-data gpt2-data/prompts_b1.txt
step gpt2-first-token-torch-b16 python3 src/gpt2_reference.py first gpt2-data gpt2-data/prompts_b16.txt
for batch in 1 16; do
    for flags in "" "--no-pdl" "--no-graphs" "--fp16" "--fp16 --no-pdl" "--no-fused" "--fp16 --no-fused"; do
        [[ $batch != 1 && $flags == *--no-fused* ]] && continue  # the fused GEMV serves one prompt
        step "gpt2-speed-b$batch${flags// /}" build-gpt2/gpt2 gpt2-data/gpt2.safetensors "gpt2-data/prompts_b$batch.txt" 256 $flags
    done
done
# ggml's CUDA backend unpatched and on gpurt (integrations/ggml, docs/integrations.md "ggml on
# gpurt"): ggml's own op tests on CUDA0 against its CPU backend, side by side.
ggml_work=${GGML_WORK:-/tmp/gpurt-ggml-work}   # outside the bundle: kept between calls while the machine is warm
ggml_build() {  # ggml_build MODE
    integrations/ggml/build.sh ggml/ggml-d99724f.tar.gz "$ggml_work/$1" "$1" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PWD"
}
backend_ops() {  # backend_ops WORK MODE: test-backend-ops's log kept beside the build; failures are for ggml_compare.py to judge
    "$1/$2/build/bin/test-backend-ops" test -b CUDA0 > "$1/$2-ops.txt" 2>&1
    grep -E "tests passed|Backend CUDA0" "$1/$2-ops.txt"
}
ggml_ctest() {  # ggml_ctest MODE: ggml's other tests (test-backend-ops runs above, in full)
    (cd "$ggml_work/$1/build" && ctest -E test-backend-ops --output-on-failure > "$ggml_work/$1-ctest.txt" 2>&1)
    grep -E "tests passed|Passed|Failed|Not Run" "$ggml_work/$1-ctest.txt"
}
for mode in unpatched gpurt; do
    step "ggml-build-$mode" ggml_build $mode
    step "ggml-test-backend-ops-$mode" backend_ops "$ggml_work" $mode
    step "ggml-ctest-$mode" ggml_ctest $mode
done
step ggml-compare python3 src/ggml_compare.py "$ggml_work/unpatched-ops.txt" "$ggml_work/gpurt-ops.txt"
step ggml-compare-ctest diff <(grep -E "Test +#" "$ggml_work/unpatched-ctest.txt" | sed 's/ *[0-9.]* sec$//') \
                             <(grep -E "Test +#" "$ggml_work/gpurt-ctest.txt" | sed 's/ *[0-9.]* sec$//')
# ggml's GPT-2 examples: tokens, speed and peak memory alternated, then gpurt's
# snapshot, NVTX and sanitizer over a run.
step ggml-gpt2-make python3 src/ggml_gpt2.py make "$ggml_work/gpt2" "$ggml_work/unpatched/ggml"
step ggml-gpt2-run python3 src/ggml_gpt2.py run "$ggml_work/gpt2" "${GGML_GPT2_REPS:-15}" unpatched="$ggml_work/unpatched/build/bin" \
    gpurt="$ggml_work/gpurt/build/bin"
step build-nvtx-record-tool cc -O2 -shared -fPIC -Iinclude src/record_injection.c -o bin/librecord_nvtx.so
step ggml-gpt2-extras python3 src/ggml_gpt2.py extras "$ggml_work/gpt2" "$ggml_work/gpurt/build/bin" "$PWD/bin/librecord_nvtx.so" "$logs"

# llama.cpp unpatched and on gpurt (integrations/llama.cpp, docs/integrations.md "llama.cpp on gpurt"),
# PART=llama: both builds, then greedy tokens, the server's idle sleep, llama-bench.
llama_work=${LLAMA_WORK:-/tmp/gpurt-llama-work}   # outside the bundle: kept between calls while the machine is warm
llama_targets=${LLAMA_TARGETS:-"llama-server llama-completion llama-bench test-backend-ops test-llama-archs"}
llama_build() {  # llama_build MODE (LLAMA_CMAKE_ARGS: more CMake arguments, split on spaces)
    # shellcheck disable=SC2086
    TARGETS=$llama_targets integrations/llama.cpp/build.sh llama/llama.cpp.tar.xz "$llama_work/$1" "$1" \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PWD" ${LLAMA_CMAKE_ARGS:-}
}
llama_archs() {  # llama_archs MODE: every architecture llama.cpp knows, CUDA against the CPU
    "$llama_work/$1/build/bin/test-llama-archs" -s 42 > "$llama_work/$1-archs.txt" 2>&1
    local rc=$?
    tail -n 5 "$llama_work/$1-archs.txt"
    return $rc
}
llama_ctest() {  # llama_ctest MODE: llama.cpp's ctest tests that need no download (the op and architecture tests run in full above)
    local build="$llama_work/$1/build"
    if [ -f "$build/tests/Makefile" ]; then make -C "$build/tests" -j "$(nproc)"; else ninja -C "$build" tests/all; fi \
        > "$llama_work/$1-tests-build.log" 2>&1 || { tail -n 40 "$llama_work/$1-tests-build.log"; return 1; }
    # Tests that download: test-arg-parser (ggml.ai), and the tokenizer tests whose
    # vocabulary the tarball lacks (its models/ has their .inp and .out only).
    local missing
    missing=$(cd "$build/../llama.cpp/models" && for inp in ggml-vocab-*.gguf.inp; do [ -f "${inp%.inp}" ] || printf '|test-tokenizer-0-%s' "$(basename "$inp" .gguf.inp | sed 's/^ggml-vocab-//')"; done)
    (cd "$build" && ctest -L main -E "^(test-backend-ops|test-llama-archs|test-thread-safety|test-download-model|test-arg-parser$missing)\$" \
        --output-on-failure > "$llama_work/$1-ctest.txt" 2>&1)
    local rc=$?
    grep -E "tests passed|Failed|Not Run" "$llama_work/$1-ctest.txt" | tail -n 30
    return $rc
}
llama_bins() {  # the builds there are (a lease may build one alone)
    local m
    for m in unpatched gpurt; do [ -x "$llama_work/$m/build/bin/llama-server" ] && printf '%s ' "$m=$llama_work/$m/build/bin"; done
}
llama_src() {  # a llama.cpp source tree (convert_hf_to_gguf.py is the same in both): a build's, else the bundle's (builds unpacked from LLAMA_UNPACK have none)
    local m
    for m in unpatched gpurt; do [ -d "$llama_work/$m/llama.cpp" ] && { echo "$llama_work/$m/llama.cpp"; return; }; done
    [ -d "$llama_work/src/llama.cpp" ] || { mkdir -p "$llama_work/src" && tar xf llama/llama.cpp.tar.xz -C "$llama_work/src"; }
    echo "$llama_work/src/llama.cpp"
}
for mode in unpatched gpurt; do
    step "llama-build-$mode" llama_build $mode
    step "llama-archs-$mode" llama_archs $mode
    step "llama-test-backend-ops-$mode" backend_ops "$llama_work" $mode
    step "llama-ctest-$mode" llama_ctest $mode
done
step llama-compare-ctest diff <(grep -E "Test +#" "$llama_work/unpatched-ctest.txt" | sed 's/ *[0-9.]* sec$//') \
                              <(grep -E "Test +#" "$llama_work/gpurt-ctest.txt" | sed 's/ *[0-9.]* sec$//')
step llama-compare-ops python3 src/ggml_compare.py "$llama_work/unpatched-ops.txt" "$llama_work/gpurt-ops.txt"
step llama-archs-compare diff <(grep '^|' "$llama_work/unpatched-archs.txt") <(grep '^|' "$llama_work/gpurt-archs.txt")
step llama-models python3 src/llama.py models "$llama_work/models" "$(llama_src)"
step llama-completion python3 src/llama.py completion "$llama_work/models" $(llama_bins)
step llama-server-sleep python3 src/llama.py server "$llama_work/models" "${LLAMA_SLEEP_CYCLES:-100}" $(llama_bins)
# Two servers whose models do not fit together take turns in a share group (issue #70 item 4).
step llama-share python3 src/llama_share.py "$llama_work/models" $(llama_bins)
# Two GPUs (a 2-GPU machine only: nvidia-h100-x2): -sm layer / row, and the sleep of both devices.
step llama-split python3 src/llama.py split "$llama_work/models" $(llama_bins)
step llama-bench python3 src/llama.py bench "$llama_work/models" "${LLAMA_BENCH_ROUNDS:-8}" $(llama_bins)
step llama-server-sleep-big python3 src/llama.py big "$llama_work/models" "$llama_work/unpatched/llama.cpp" "$llama_work/gpurt/build/bin"

# The Go package on the GPU (built by bundle.sh with go test -c): exact round trips, then its call cost beside C's.
step go-tests go/gpurt-go.test -test.v
step go-bench go/gpurt-go.test -test.run '^$' -test.bench AllocFree -test.benchtime 200000x -test.count 5
mkdir -p "$logs/snapshots"
step memory-history-test bin/memory_history_test "$logs/snapshots"
# PyTorch's own tools read gpurt's pickle (this machine has no browser: the viewer's
# headless-browser test runs in the README's test command).
step snapshot-torch-viz python3 src/check.py "$logs/snapshots" --torch
step nvtx-test bin/nvtx_test
# Nsight Compute as the NVTX tool: it profiles exactly the kernels inside a named range.
step nvtx-ncu-filter bash src/ncu_filter.sh bin/ncu_kernels
step gds-test-cufile env GPURT_GDS_MODE=cufile bin/gds_test
step dlclose-test bin/dlclose_test "$lib/libgpurt.so.0"
step hpp-test bin/hpp_test
step no-exceptions-test bin/no_exceptions_test
step interop bin/interop
step rmm-test bin/rmm_test
step compare-props python3 src/compare_props.py bin/gpurt-info
step compare-telemetry python3 src/compare_telemetry.py bin/gpurt-info
step gpurt-info-watch bin/gpurt-info --watch 2
step gpurt-info-memory bin/gpurt-info --memory
step torch-native python3 src/alloc_frameworks.py "$lib/libgpurt.so.0" torch-native "$logs/torch_ref.pt"
step torch-on-gpurt python3 src/alloc_frameworks.py "$lib/libgpurt.so.0" torch-gpurt "$logs/torch_ref.pt"
step torch-on-gpurt-async env GPURT_ALLOC_CONF=backend:cudaMallocAsync python3 src/alloc_frameworks.py "$lib/libgpurt.so.0" torch-gpurt "$logs/torch_ref.pt"
step cupy-on-gpurt python3 src/alloc_frameworks.py "$lib/libgpurt.so.0" cupy
# Peak memory of GPT-2 generation and ResNet-50 training, PyTorch on gpurt against
# PyTorch's allocator, each with and without expandable segments (native first: it
# saves the results the gpurt runs must equal).
for expandable in False True; do
    for run in 1 2; do  # twice: is the workload deterministic on PyTorch's own allocator?
        step "dropin-peak-torch-expandable-$expandable-$run" env PYTORCH_CUDA_ALLOC_CONF="expandable_segments:$expandable" GPURT_ALLOC_CONF= \
            python3 src/dropin_peak.py "$lib/libgpurt.so.0" native "$logs/dropin"
    done
    step "dropin-peak-gpurt-expandable-$expandable" env GPURT_ALLOC_CONF="expandable_segments:$expandable" PYTORCH_CUDA_ALLOC_CONF= \
        python3 src/dropin_peak.py "$lib/libgpurt.so.0" gpurt "$logs/dropin"
done
step dropin-peak-table python3 src/dropin_peak.py "$lib/libgpurt.so.0" table "$logs/dropin"
# Every order of the two workloads, with and without empty_cache, two sizes: NVML's peak.
step dropin-orders python3 src/dropin_orders.py "$lib/libgpurt.so.0" "$logs/dropin-orders"
# The same without empty_cache between the models: what each keeps cached serves the next.
# Whether a workload is deterministic on PyTorch's own allocator, its two runs above say.
mkdir -p "$logs/dropin-kept" && cp "$logs/dropin/native-repeat-expandable-True.json" "$logs/dropin-kept/" 2>/dev/null
step dropin-peak-kept-torch-expandable env DROPIN_EMPTY_CACHE=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True GPURT_ALLOC_CONF= \
    python3 src/dropin_peak.py "$lib/libgpurt.so.0" native "$logs/dropin-kept"
step dropin-peak-kept-gpurt-expandable env DROPIN_EMPTY_CACHE=0 GPURT_ALLOC_CONF=expandable_segments:True PYTORCH_CUDA_ALLOC_CONF= \
    python3 src/dropin_peak.py "$lib/libgpurt.so.0" gpurt "$logs/dropin-kept"
step dropin-peak-kept-table python3 src/dropin_peak.py "$lib/libgpurt.so.0" table "$logs/dropin-kept"
# ResNet-50 alone, in a process of its own, on PyTorch's and gpurt's expandable segments.
step dropin-peak-alone-torch-expandable env DROPIN_WORKLOADS=resnet50_train PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True GPURT_ALLOC_CONF= \
    python3 src/dropin_peak.py "$lib/libgpurt.so.0" native "$logs/dropin-alone"
step dropin-peak-alone-gpurt-expandable env DROPIN_WORKLOADS=resnet50_train GPURT_ALLOC_CONF=expandable_segments:True PYTORCH_CUDA_ALLOC_CONF= \
    python3 src/dropin_peak.py "$lib/libgpurt.so.0" gpurt "$logs/dropin-alone"
# Seeded random scenarios of five model families (#69): gpurt's peak against PyTorch's
# expandable segments and default, new seeds each run (SCENARIOS=N of them, or SCENARIO_SEEDS);
# the traces of those above +0.5 % recorded after, for tests/traces/main.rs.
step dropin-scenarios env SCENARIO_RECORD=1 python3 src/scenarios.py "$lib/libgpurt.so.0" "$logs/dropin-scenarios" ${SCENARIO_SEEDS:-}
# The Python package from its wheel, with the carried cffi and pytest, beside the
# machine's PyTorch and CuPy.
step python-install python3 -m pip install -q --no-index --find-links wheels --target pydeps gpurt pytest
step python-tests env PYTHONPATH="$PWD/pydeps" python3 -m pytest -q -rs -p no:cacheprovider pytests
# Sleep and wake under PyTorch: GPT-2's weights and KV cache in two sleeping pools
# (tokens, a CUDA graph across sleep, 100 cycles), and torch_memory_saver beside gpurt.
step sleep-torch-proof env PYTHONPATH="$PWD/pydeps" python3 src/sleep_torch.py "$lib/libgpurt.so.0" proof
step tms-install python3 -m pip install -q --no-deps --target tms-site tms/torch_memory_saver-*.whl
step sleep-torch-device env PYTHONPATH="$PWD/pydeps" python3 src/sleep_torch.py "$lib/libgpurt.so.0" device
# PyTorch's own CUDA graphs on gpurt (#68): each run on PyTorch's allocator and on gpurt,
# the outputs compared bit for bit; torch.compile's reduce-overhead (graph trees off on
# gpurt; their refusal reported); graphs through a device sleep; the MemPool route.
torch_graphs=(env PYTHONPATH="$PWD/pydeps" python3 src/torch_graphs.py "$lib/libgpurt.so.0")
mkdir -p "$logs/torch-graphs"
for alloc in native native-expandable gpurt; do
    step "torch-graphs-$alloc" "${torch_graphs[@]}" run $alloc "$logs/torch-graphs"
    step "torch-graphs-$alloc-warm-each" env TORCH_GRAPHS_WARM=each "${torch_graphs[@]}" run $alloc "$logs/torch-graphs"
done
step torch-graphs-compile-native "${torch_graphs[@]}" compile native on "$logs/torch-graphs"
step torch-graphs-compile-native-no-trees "${torch_graphs[@]}" compile native off "$logs/torch-graphs"
step torch-graphs-compile-gpurt "${torch_graphs[@]}" compile gpurt off "$logs/torch-graphs"
step torch-graphs-compile-trees-gpurt "${torch_graphs[@]}" compile gpurt on "$logs/torch-graphs"
step torch-graphs-compare "${torch_graphs[@]}" compare "$logs/torch-graphs"
step torch-graphs-sleep "${torch_graphs[@]}" sleep
step torch-graphs-mempool "${torch_graphs[@]}" mempool
step sleep-torch-live env PYTHONPATH="$PWD/pydeps" python3 src/sleep_torch.py "$lib/libgpurt.so.0" live 5
# Two PyTorch processes in a share group taking turns on a GPU made small (issue #70 item 5).
step share-torch env PYTHONPATH="$PWD/pydeps" GPURT_LIBRARY="$lib/libgpurt.so.0" python3 src/share_torch.py 24 3
step sleep-torch-saver env PYTHONPATH="$PWD/pydeps" python3 src/sleep_torch.py "$lib/libgpurt.so.0" saver "$PWD/tms-site" \
    "${SLEEP_BENCH_GIB:-8}" 4 3
# gpurt's device 0 is the machine's second GPU under CUDA_VISIBLE_DEVICES=1 (2 GPUs or more).
step visible-devices env CUDA_VISIBLE_DEVICES=1 PYTHONPATH="$PWD/pydeps" python3 src/visible_devices.py
for example in stream-overlap allocator-stats pinned-upload graph-replay rtc-kernel; do
    step "build-example-$example" cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror -Iinclude "src/$example.c" -Llib -lgpurt -Wl,-rpath,"$lib" -lm -o "bin/$example"
    step "example-$example" "bin/$example"
done
step build-example-saxpy c++ -std=c++17 -O2 -Wall -Wextra -pedantic -Werror -Iinclude src/saxpy.cpp -Llib -lgpurt -Wl,-rpath,"$lib" -o bin/saxpy
step example-saxpy bin/saxpy
for t in tests/*; do
    step "rust-$(basename "$t")" "$t" --test-threads=1
done
# 8 threads x 60 s of mixed calls with exact data checks and final invariants.
step soak bin/soak "${SOAK_SECONDS:-60}" 8
# compute-sanitizer over the C tests and the Rust GPU suite: zero errors. The suites
# make deliberate bad calls (out of memory, invalid handles), so API errors are not
# reported; memory, race, sync and init errors are.
sanitize() {  # sanitize TOOL COMMAND...
    local tool=$1; shift
    compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 99 "$@"
}
step memcheck-abi-test sanitize memcheck bin/abi_test
step memcheck-sleep-test sanitize memcheck bin/sleep_test
step memcheck-sleep-storm sanitize memcheck bin/sleep_storm 10 4
step memcheck-batch-test sanitize memcheck bin/batch_test
step memcheck-foreign-capture-test sanitize memcheck bin/foreign_capture_test
step racecheck-abi-test sanitize racecheck bin/abi_test
step synccheck-abi-test sanitize synccheck bin/abi_test
step initcheck-abi-test sanitize initcheck bin/abi_test
step memcheck-process-test sanitize memcheck --target-processes all bin/process_test
step memcheck-soak sanitize memcheck bin/soak 10 4
step memcheck-blas-gpu-test sanitize memcheck bin/blas_gpu_test
step memcheck-gpt2 sanitize memcheck build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompts.txt 4
step memcheck-gpt2-one sanitize memcheck build-gpt2/gpt2 gpt2-data/gpt2.safetensors gpt2-data/prompt0.txt 4
for t in tests/*; do
    step "memcheck-rust-$(basename "$t")" sanitize memcheck "$t" --test-threads=1
    step "synccheck-rust-$(basename "$t")" sanitize synccheck "$t" --test-threads=1
done
for b in benches/*; do
    [[ -e $b && $b != benches/alloc ]] && step "bench-$(basename "$b")" "$b"
done
# The allocator benchmark three times, each round beside whole segments
# (expandable_segments:False) and, where BASELINE_LIB names an earlier build of the
# library, beside that build: alternated, so that the host's slow spells fall on all.
for round in 1 2 3; do
    step "bench-alloc-$round" benches/alloc
    step "bench-alloc-whole-segments-$round" env GPURT_ALLOC_CONF=expandable_segments:False benches/alloc
    [ -n "${BASELINE_LIB:-}" ] && step "bench-alloc-baseline-$round" env GPURT_LIB="$BASELINE_LIB" benches/alloc
done
# Allocation traces of PyTorch models, replayed through gpurt beside the driver's
# pool, PyTorch's allocator and RMM's pool (docs/performance.md, "Trace replay").
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
step record-traces python3 src/record_traces.py recorded-traces
# Unpacked only when steps run: LIST=1 (tests/gpu_scripts.sh, in the source tree) writes nothing.
[[ -n ${LIST:-} ]] || { mkdir -p plain-traces && for t in traces/*.trace.gz; do gunzip -c "$t" > "plain-traces/$(basename "$t" .gz)"; done; }
step build-trace-replay c++ -std=c++20 -O2 -Wall -Werror -DWITH_TORCH -DWITH_RMM -Iinclude -isystem "$torch_dir/include" \
    src/trace_replay.cpp -Llib -lgpurt -Wl,-rpath,"$lib" -L"$torch_dir/lib" -lc10_cuda -lc10 -Wl,-rpath,"$torch_dir/lib" \
    "${rmm_flags[@]}" -lcuda -o bin/trace_replay
step trace-replay env LD_LIBRARY_PATH="$PWD/rmm/rapids_logger/lib64" bin/trace_replay "${TRACE_REPS:-5}" plain-traces/*.trace
# A server's second model in the pool its first left, nothing released between, beside
# PyTorch's expandable segments: every ordered pair of the recorded traces, and the drop-in
# workload (GPT-2, then ResNet-50) recorded here (its trace kept in the logs for host replay).
step record-dropin-sequence env DROPIN_EMPTY_CACHE=0 python3 src/dropin_peak.py "$lib/libgpurt.so.0" record recorded-traces
step keep-dropin-sequence cp recorded-traces/dropin_sequence.trace "$logs/"
step trace-replay-then env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True LD_LIBRARY_PATH="$PWD/rmm/rapids_logger/lib64" \
    bin/trace_replay 1 --then plain-traces/*.trace
step trace-replay-dropin-sequence env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    LD_LIBRARY_PATH="$PWD/rmm/rapids_logger/lib64" bin/trace_replay 3 recorded-traces/dropin_sequence.trace
# The drop-in workloads at dropin_orders.py's second sizes (GPT-2 32 prompts of 64, ResNet-50
# at batch 96), each recorded alone into the logs: gpu/traces/dropin-b, which tests/traces/main.rs
# plays in every order.
for workload in gpt2_generate resnet50_train; do
    step "record-dropin-b-$workload" env DROPIN_WORKLOADS=$workload DROPIN_GPT2=32,64,192 DROPIN_RESNET_BATCH=96 \
        python3 src/dropin_peak.py "$lib/libgpurt.so.0" record "$logs/traces-b/$workload"
done

[[ -n ${LIST:-} ]] && exit 0
echo
echo "===== gpurt GPU summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
printf '%s\n' "${results[@]}"
pass=$(printf '%s\n' "${results[@]}" | grep -c '^PASS')
fail=$(printf '%s\n' "${results[@]}" | grep -c '^FAIL')
echo "gpu: $pass passed, $fail failed"
[ "$fail" = 0 ]
