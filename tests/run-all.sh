#!/usr/bin/env bash
# Runs every test that runs without a GPU (the GPU tests report themselves skipped,
# with the reason, unless GPURT_REQUIRE_GPU=1):
#   1. cargo test: unit tests, C-ABI misuse, no-driver behaviour, the stale-header
#      check and the C99 / C++17 header compile, the GPU suite (skipped here); then
#      clippy on every target, warnings as errors (skipped, saying so, where the
#      toolchain has no clippy);
#   2. CMake: build + install to a prefix; the ABI check (abi/check.sh: symbol
#      versions, abidiff against the baseline, and its self-test); a find_package consumer building the
#      C ABI test as C and C++ against gpurt::gpurt and gpurt::gpurt_static, and the
#      C++ header's tests;
#   3. the GPT-2 engine's CMake project (host tests); add_subdirectory(gpurt) consumer;
#   4. pkg-config consumer; the same install moved to a second prefix, used through
#      pkg-config and find_package from there (the package is relocatable); the
#      packages (tests/packages.sh: CPack's .debs installed into /usr with dpkg and
#      removed, the .tar.gz, a Conan 2 recipe); the reference manual (tests/docs.sh:
#      Doxygen with every warning an error, and its self-test); ggml on gpurt's CPU
#      parts (tests/ggml.sh: the patch applies, ggml's CPU build, the changed CUDA
#      files compiled with nvcc from PyPI); llama.cpp on gpurt's (tests/llama.sh: both
#      patches apply, the CPU build of llama-server, its idle sleep in both modes on a
#      small model written offline); the GPU machine's scripts (tests/gpu_scripts.sh:
#      they parse, and gpu/plans/ together run every step of gpu/run.sh);
#   5. the C ABI test, the fault-injection sweep, the C++ header's tests, the
#      process-event tests (fork, exit, dlclose), IPC memory between two processes,
#      the cudaMallocAsync backend, TunableOp
#      and the benchmarks against
#      tests/stub-driver (a stand-in libcuda);
#   5b. the README's code blocks compiled and run, the links of README.md and docs/
#      checked (tests/readme.sh);
#   6. Python: `pip install .` into a fresh venv, then pytest without a driver and
#      on the stand-in driver.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v c++ >/dev/null || missing+=(g++)
command -v clang++ >/dev/null || missing+=(clang)
command -v python3 >/dev/null || missing+=(python3)
command -v go >/dev/null || missing+=(golang-go)
command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
[ -f /usr/share/java/jna.jar ] || missing+=(libjna-java)
[ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
command -v valgrind >/dev/null || missing+=(valgrind)
command -v abidiff >/dev/null || missing+=(abigail-tools)
command -v doxygen >/dev/null || missing+=(doxygen)
command -v objdump >/dev/null || missing+=(binutils)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
# The memory snapshot viewer is tested in a real browser.
command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || missing+=(chromium-headless-shell)
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
fi

echo "== cargo test"
cargo test
echo "== clippy"
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --all-targets -- -D warnings
else
  echo "clippy: skipped (this toolchain has no clippy: rustup component add clippy)"
fi
echo "== benchmarks build (they run on the GPU machine: gpu/bundle.sh)"
cargo bench --no-run

work=$root/target/cmake-tests
rm -rf "$work/gpurt" "$work/prefix" "$work/consumer" "$work/subdirectory" "$work/pkg-config"
cargo_dir=$work/cargo   # shared by the CMake builds so cargo builds the library once

echo "== CMake build and install"
cmake -S . -B "$work/gpurt" -DCMAKE_INSTALL_PREFIX="$work/prefix" -DGPURT_CARGO_TARGET_DIR="$cargo_dir" >/dev/null
cmake --build "$work/gpurt"
cmake --install "$work/gpurt" >/dev/null
"$work/prefix/bin/gpurt-info"
"$work/prefix/bin/gpurt-info" --memory   # no driver: says so and exits 0
for example in "$work"/gpurt/example-*; do "$example"; done   # no driver here: each says so and exits 0

echo "== ABI: every export under GPURT_0, abidiff against abi/gpurt.abi, and the check's self-test"
abi/check.sh "$work/prefix/lib/libgpurt.so.0"
abi/check.sh --self-test

echo "== find_package consumer (C and C++, shared and static)"
cmake -S tests/consumer -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer"
(cd "$work/consumer" && ctest --output-on-failure)

echo "== the GPT-2 engine's own CMake project on the installed prefix: its host tests (the engine needs CUDA: GPU suite)"
cmake -S examples-cpp/gpt2 -B "$work/gpt2" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/gpt2"
(cd "$work/gpt2" && ctest --output-on-failure)

echo "== add_subdirectory consumer"
cmake -S tests/subdirectory -B "$work/subdirectory" -DGPURT_CARGO_TARGET_DIR="$cargo_dir" >/dev/null
cmake --build "$work/subdirectory"
(cd "$work/subdirectory" && ctest --output-on-failure)

echo "== pkg-config consumer"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
mkdir -p "$work/pkg-config"
# shellcheck disable=SC2046
cc -std=c99 -Wall -Wextra -pedantic -Werror tests/c/abi_test.c $(pkg-config --cflags --libs gpurt) \
   -Wl,-rpath,"$(pkg-config --variable=libdir gpurt)" -o "$work/pkg-config/abi_test"
"$work/pkg-config/abi_test"

echo "== relocated install: cmake --install --prefix elsewhere; pkg-config and find_package from there"
relocated=$work/relocated
rm -rf "$relocated" "$work/consumer-relocated"
cmake --install "$work/gpurt" --prefix "$relocated" >/dev/null
libdir=$(PKG_CONFIG_PATH="$relocated/lib/pkgconfig" pkg-config --variable=libdir gpurt)
[ "$(cd "$libdir" && pwd -P)" = "$(cd "$relocated/lib" && pwd -P)" ] || { echo "gpurt.pc names $libdir, not the relocated prefix"; exit 1; }
# shellcheck disable=SC2046
cc -std=c99 -Wall -Wextra -pedantic -Werror tests/c/abi_test.c $(PKG_CONFIG_PATH="$relocated/lib/pkgconfig" pkg-config --cflags --libs gpurt) \
   -Wl,-rpath,"$libdir" -o "$relocated/abi_test"
"$relocated/abi_test"
cmake -S tests/consumer -B "$work/consumer-relocated" -DCMAKE_PREFIX_PATH="$relocated" >/dev/null
cmake --build "$work/consumer-relocated"
grep -q "$relocated/include" "$work/consumer-relocated/CMakeFiles/abi_c_gpurt.dir/flags.make" || { echo "find_package did not use the relocated prefix"; exit 1; }
(cd "$work/consumer-relocated" && ctest --output-on-failure)

bash tests/packages.sh "$work" "$cargo_dir"
bash tests/docs.sh "$work" "$cargo_dir"
bash tests/ggml.sh "$work"
bash tests/llama.sh "$work"
cuda_include=$work/ggml/cuda/nvidia/cu13/include   # CUDA's headers, which tests/ggml.sh took from PyPI
echo "== the GPU machine's scripts (parse; the two plans run every step of gpu/run.sh; its driver programs compile)"
bash tests/gpu_scripts.sh "$cuda_include"

echo "== stub driver: the C ABI test on the GPU-present paths, and gpurt's own cost per call"
stub=$work/stub-driver
mkdir -p "$stub"
cc -O2 -shared -fPIC tests/stub-driver/stub_cuda.c -o "$stub/libcuda.so.1"
LD_LIBRARY_PATH=$stub "$work/pkg-config/abi_test"
LD_LIBRARY_PATH=$stub "$work/gpurt/example-allocator-stats" >/dev/null   # the stub moves no data: the others check bytes
LD_LIBRARY_PATH=$stub "$work/prefix/bin/gpurt-info" --memory | grep -q "unattributed (context, other libraries)"

echo "== README: its code blocks compiled and run, the links of README.md and docs/ checked"
bash tests/readme.sh "$work/prefix" "$stub" "$work"

echo "== run-time compilation on the stand-in NVRTC (tests/stub-driver/stub_nvrtc.c): the C ABI test again, and an elementwise call's cost"
nvrtc=$stub/nvrtc   # a directory of its own: the other tests run without NVRTC
mkdir -p "$nvrtc"
cc -O2 -Wall -Wextra -Werror -shared -fPIC tests/stub-driver/stub_nvrtc.c -o "$nvrtc/libnvrtc.so.13"
LD_LIBRARY_PATH=$stub:$nvrtc "$work/pkg-config/abi_test"
cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror tests/c/elementwise_cost.c $(pkg-config --cflags --libs gpurt) \
   -Wl,-rpath,"$(pkg-config --variable=libdir gpurt)" -o "$nvrtc/elementwise_cost"
# Instructions per call (callgrind counts repeat exactly): two call counts of each kind.
per_call() {  # per_call PROGRAM KIND
    local counts=() n
    for n in 200 400; do
        LD_LIBRARY_PATH=$stub:$nvrtc valgrind -q --tool=callgrind --callgrind-out-file="$nvrtc/callgrind.$2.$n" "$1" "$2" "$n"
        counts+=("$(sed -n 's/^summary: //p' "$nvrtc/callgrind.$2.$n")")
    done
    echo $(( (counts[1] - counts[0]) / 200 ))
}
elementwise=$(per_call "$nvrtc/elementwise_cost" elementwise) launch=$(per_call "$nvrtc/elementwise_cost" launch)
echo "instructions a call: elementwise on a repeated expression $elementwise, gpurt_launch_kernel $launch (+$((elementwise - launch)))"
# A ceiling well above today's +1 551, far below the +4 455 before the last-call memo.
(( elementwise - launch <= 2500 )) || { echo "an elementwise call costs $((elementwise - launch)) instructions more than a launch: over 2 500"; exit 1; }
# A discarded sleep and wake: gpurt's own instructions over the driver calls that cycle
# needs (the stand-in driver's are counted in both). A ceiling above today's ~19 000,
# which is ~6 us: on the GPU the driver's calls of a cycle take 0.5-36 ms, so gpurt's wake
# stays within 1.01 x its floor.
cc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$cuda_include" tests/c/sleep_cost.c $(pkg-config --cflags --libs gpurt) \
   -Wl,-rpath,"$(pkg-config --variable=libdir gpurt)" -L"$stub" -l:libcuda.so.1 -o "$nvrtc/sleep_cost"
sleep_cycle=$(per_call "$nvrtc/sleep_cost" gpurt) raw_cycle=$(per_call "$nvrtc/sleep_cost" raw)
echo "instructions a discarded sleep and wake: gpurt $sleep_cycle, the same driver calls made directly $raw_cycle (+$((sleep_cycle - raw_cycle)))"
(( sleep_cycle - raw_cycle <= 20000 )) || { echo "a discarded sleep and wake costs $((sleep_cycle - raw_cycle)) instructions over its driver calls: over 20 000"; exit 1; }

echo "== fault injection: every driver call of a mixed workload failed in turn (stub driver)"
cc -std=c99 -Wall -Wextra -pedantic -Werror tests/c/fault_test.c $(pkg-config --cflags --libs gpurt) \
   -Wl,-rpath,"$(pkg-config --variable=libdir gpurt)" -ldl -lpthread -o "$stub/fault_test"
LD_LIBRARY_PATH=$stub "$stub/fault_test"

echo "== the C++ header: g++ and clang++, C++17 and C++20, with and without exceptions (stub driver)"
for cxx in g++ clang++; do
  for std in 17 20; do
    for t in hpp_test no_exceptions_test; do
      flags=""; [ $t = no_exceptions_test ] && flags=-fno-exceptions
      # shellcheck disable=SC2046
      $cxx -std=c++$std $flags -Wall -Wextra -pedantic -Werror tests/cpp/$t.cpp $(pkg-config --cflags --libs gpurt) \
         -Wl,-rpath,"$(pkg-config --variable=libdir gpurt)" -o "$stub/$t-$cxx-$std"
      LD_LIBRARY_PATH=$stub "$stub/$t-$cxx-$std"
    done
  done
done

echo "== process events: fork after init, exit with live objects, dlclose (stub driver)"
cc -std=c99 -Wall -Wextra -pedantic -Werror tests/c/process_test.c $(pkg-config --cflags --libs gpurt) \
   -Wl,-rpath,"$(pkg-config --variable=libdir gpurt)" -lpthread -o "$stub/process_test"
cc -std=c99 -Wall -Wextra -pedantic -Werror tests/c/dlclose_test.c -ldl -o "$stub/dlclose_test"
LD_LIBRARY_PATH=$stub "$stub/process_test"

# stub_c_test NAME DESCRIPTION [ARGUMENT]: builds tests/c/NAME.c against the
# installed gpurt (pkg-config) and runs it on the stub driver, with ARGUMENT.
stub_c_test() {
  local name=$1 what=$2 dir=${3:-}
  [ -z "$what" ] || echo "== $what"
  cc -std=c99 -Wall -Wextra -pedantic -Werror "tests/c/$name.c" $(pkg-config --cflags --libs gpurt) \
     -Wl,-rpath,"$(pkg-config --variable=libdir gpurt)" -lpthread -ldl -o "$stub/$name"
  LD_LIBRARY_PATH=$stub "$stub/$name" $dir
}
stub_c_test ipc_test "IPC memory between two processes: export, open, free while held, collect, SIGKILL (stub driver)"
echo "== IPC again with two devices that can access each other: device 1's expandable block opened for device 0 (stub driver)"
STUB_CUDA_DEVICES=2 LD_LIBRARY_PATH=$stub "$stub/ipc_test"
stub_c_test sleep_test "pools that sleep and wake: offload, discard, the refusals, an export racing a sleep, captures (stub driver: statuses and figures; bytes in the GPU suite)"
stub_c_test sleep_storm "sleep under a storm: 8 threads allocating and freeing in three pools while they sleep and wake (stub driver, 5 s; bytes and NVML in the GPU suite)" "5 8"
stub_c_test batch_test "batched copies: misuse refused with nothing queued, 10 000 copies both ways on a stream (the driver's batch call) and the legacy stream (the loop) (stub driver; bytes in the GPU suite)"
stub_c_test green_test "green contexts: misuse refused with nothing made, SM counts rounded, disjoint splits, a green stream through the allocator, copies, events and a graph, every driver object given back (stub driver; bytes and SM shares in the GPU suite)"
stub_c_test graph_nodes_test "conditional and event nodes: misuse refused, bodies captured on the same stream handle (its native stream the body's meanwhile, allocations from the capture's pool), nesting, IF/else, WHILE, SWITCH (stub driver: statuses; loops and data in the GPU suite)"
stub_c_test shared_capture_test "shared captures: misuse refused, a graph's temporaries taken from the stream's pool in stream order (reused after the capture, grown in a global-mode capture, a conditional body's too), the pool kept mapped and undestroyable while the graph or an exec lives, everything back after (stub driver; bytes in the GPU suite)"
stub_c_test vbuffer_test "growable virtual buffers: misuse refused with nothing changed, growth at the same address, mapped bytes in the statistics and under the memory fraction, whole mappings unmapped, every byte given back (stub driver; bytes in the GPU suite)"
stub_c_test memory_report_test "the memory report: misuse refused with nothing written, each figure gpurt makes moved by exactly what was made and back, the local memory of a grown stack given back by a device sleep (stub driver; NVML's figure of the process in the GPU suite)"
mkdir -p "$stub/share"
stub_c_test share_test "a share group of processes on one device (the stub's shared device): a member's cache given on another's request, an offer of nothing kept, a process outside refused, members joined through GPURT_ALLOC_CONF=share:NAME, the out-of-memory message naming what the group gave, the API's misuse (stub driver)" "$stub/share"
stub_c_test backend_test "backend:cudaMallocAsync: the driver's pool behind the default pools (stub driver)"
stub_c_test foreign_capture_test "captures begun outside gpurt: a private pool per capture or the thread's bound pool, never the shared cache; kept until the driver's graph and execs are gone (user objects), then given back; 100 cycles, refused user objects (stub driver; bytes in the GPU suite)"
stub_c_test no_vmm_test "expandable segments on a device without virtual memory management: whole segments, a pool's own request refused (stub driver)"
stub_c_test tunable_test "TunableOp: concurrent first runs tune once, the results file, a second process (stub driver)"
stub_c_test sanitizer_test "stream sanitizer: each happens-before rule, graphs, misuse, 8 ordered threads (stub driver)"
stub_c_test gds_test "GPUDirect Storage calls: round trips, short and removed files, misuse (stub driver: statuses only)"
stub_c_test comm_test "communicators without NCCL: every comm call says NCCL is missing (stub driver; collectives run in the GPU suite)"
stub_c_test comm_ranks_test "collectives over several GPUs and processes (reports itself skipped on the stub's one device; runs in the GPU suite on 2 GPUs)"
echo "== math-library handles: without the libraries, then on stand-in cuBLAS and cuBLASLt (tests/stub-driver/stub_mathlib.c)"
stub_c_test blas_test "" missing
mathlib=$stub/mathlib   # a directory of its own: the other tests run without cuBLAS
mkdir -p "$mathlib"
cc -O2 -Wall -Wextra -Werror -shared -fPIC tests/stub-driver/stub_mathlib.c -o "$mathlib/libcublas.so.13"
cp "$mathlib/libcublas.so.13" "$mathlib/libcublasLt.so.13"
LD_LIBRARY_PATH=$stub:$mathlib "$stub/blas_test"
stub_c_test comm_helpers_test "torch.cuda.comm's helpers: misuse, outputs and their accounting, a copy failing half way (stub driver; the data checks run in the GPU suite)"
echo "== memory history and snapshots: misuse, a workload ending out of memory, JSON / pickle / HTML; the viewer in headless Chromium (stub driver)"
snapshots=$stub/snapshots
mkdir -p "$snapshots"
stub_c_test memory_history_test "" "$snapshots"
python3 tests/snapshot/check.py "$snapshots" --browser
stub_c_test nvtx_test "NVTX: no tool attached; then every call through a recording tool that NVTX_INJECTION64_PATH loads, as Nsight's are"
cc -O2 -Wall -Wextra -Werror -shared -fPIC -Ithird_party tests/nvtx/record_injection.c -o "$stub/librecord_nvtx.so"
NVTX_INJECTION64_PATH=$stub/librecord_nvtx.so GPURT_NVTX_RECORD=$stub/nvtx.rec LD_LIBRARY_PATH=$stub "$stub/nvtx_test" "$stub/nvtx.rec"
echo "== soak: 8 threads of mixed calls, final invariants (stub driver; 60 s with byte checks in the GPU suite)"
cc -std=c99 -O2 -Wall -Wextra -pedantic -Werror tests/c/soak.c $(pkg-config --cflags --libs gpurt) \
   -Wl,-rpath,"$(pkg-config --variable=libdir gpurt)" -lpthread -o "$stub/soak"
LD_LIBRARY_PATH=$stub "$stub/soak" 3 8
LD_LIBRARY_PATH=$stub "$stub/dlclose_test" "$(pkg-config --variable=libdir gpurt)/libgpurt.so.0"
LD_LIBRARY_PATH=$stub GPURT_LIB="$cargo_dir/release/libgpurt.so" cargo bench --bench streams_events --bench alloc --bench sanitizer --bench nvtx

echo "== Go (bindings/go, cgo through pkg-config): go vet, then the tests without a driver and on the stub driver"
(
  cd bindings/go
  export CGO_LDFLAGS="-Wl,-rpath,$(pkg-config --variable=libdir gpurt)" GOFLAGS=-count=1
  export GOCACHE="${GOCACHE:-$work/go-cache}" GOPATH="${GOPATH:-$work/go-path}"   # where HOME is unset too
  go vet ./...
  go test -c -o "$stub/gpurt-go.test" .
  "$stub/gpurt-go.test" -test.v
  LD_LIBRARY_PATH=$stub "$stub/gpurt-go.test" -test.v
  LD_LIBRARY_PATH=$stub "$stub/gpurt-go.test" -test.run '^$' -test.bench AllocFree -test.benchtime 100000x
)

echo "== Java (bindings/java, JNA from Debian's libjna-java): javac, then the tests without a driver and on the stub driver"
java_classes=$work/java-classes
rm -rf "$java_classes"
javac -Xlint:all -Werror -cp /usr/share/java/jna.jar -d "$java_classes" $(find bindings/java/src -name '*.java')
java_run=(java -cp "$java_classes:/usr/share/java/jna.jar" -Djna.library.path="$(pkg-config --variable=libdir gpurt)" org.gpurt.GpurtTest)
"${java_run[@]}"
LD_LIBRARY_PATH=$stub "${java_run[@]}"
LD_LIBRARY_PATH=$stub "${java_run[@]:0:4}" org.gpurt.AllocFreeBench   # beside the Go benchmark's C loop above

echo "== Python: pip install . into a venv (the wheel builds libgpurt through CMake), pytest without a driver and on the stub"
venv=$work/python-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q ".[test]" -C cmake.define.GPURT_CARGO_TARGET_DIR="$cargo_dir"
# From outside the source tree, so that the installed package is the one tested.
(cd "$work" && "$venv/bin/python" -m pytest -q -rs "$root/tests/python")
(cd "$work" && LD_LIBRARY_PATH=$stub "$venv/bin/python" -m pytest -q "$root/tests/python")

echo "== nightly tools: Miri, ThreadSanitizer, cargo-fuzz (each installed where missing)"
bash tests/nightly.sh

echo "all tests passed"
