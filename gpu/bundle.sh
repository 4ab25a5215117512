#!/usr/bin/env bash
# Builds everything the GPU machine must run (it has no Rust toolchain) into
# gpu-bundle/: the release library, the GPU test binaries, the benchmarks, the C and
# CUDA sources, the Python wheel with its tests, and run.sh. Then: `bash gpu-bundle/run.sh` there.
# BASELINE_REF=<commit> adds that commit's library (gpu-bundle/baseline/) for run.sh's BASELINE_LIB.
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
rm -rf "$out"
mkdir -p "$out/lib" "$out/include" "$out/src" "$out/tests" "$out/benches"

version=$(sed -n 's/^version = "\([0-9.]*\)"/\1/p' Cargo.toml | head -n 1)
soname=libgpurt.so.${version%%.*}
cargo build --release --lib
cp target/release/libgpurt.a "$out/lib/"
cp target/release/libgpurt.so "$out/lib/$soname"
ln -s "$soname" "$out/lib/libgpurt.so"
cp include/gpurt.h include/gpurt.hpp include/gpurt_rmm.hpp "$out/include/"
cp examples-c/gpurt-info.c tests/c/abi_test.c tests/c/process_test.c tests/c/ipc_test.c tests/c/sleep_test.c tests/c/sleep_storm.c tests/c/backend_test.c tests/c/foreign_capture_test.c tests/c/memory_report_test.c tests/c/tunable_test.c tests/c/sanitizer_test.c tests/c/gds_test.c tests/c/comm_test.c tests/c/comm_ranks_test.c tests/c/comm_helpers_test.c tests/c/blas_test.c gpu/blas_gpu_test.c gpu/blas_bench.c gpu/sleep_bench.c gpu/pin_bench.c gpu/batch_bench.c tests/c/batch_test.c tests/c/green_test.c tests/c/vbuffer_test.c gpu/vbuffer_bench.c tests/c/graph_nodes_test.c tests/c/shared_capture_test.c gpu/green_bench.c tests/c/memory_history_test.c tests/snapshot/check.py tests/c/nvtx_test.c tests/nvtx/ncu_kernels.c tests/nvtx/ncu_filter.sh tests/c/check.h tests/c/dlclose_test.c tests/c/soak.c tests/cpp/check.hpp tests/cpp/hpp_test.cpp tests/cpp/no_exceptions_test.cpp tests/cpp/rmm_test.cpp gpu/interop.cu gpu/compare_props.py gpu/compare_telemetry.py gpu/alloc_frameworks.py gpu/sleep_torch.py gpu/share_torch.py gpu/torch_graphs.py gpu/side_streams.py gpu/dropin_peak.py gpu/dropin_orders.py gpu/visible_devices.py gpu/record_traces.py gpu/families.py gpu/scenarios.py gpu/trace_replay.cpp "$out/src/"
cp examples-c/*.c examples-c/*.h examples-cpp/*.cpp "$out/src/"
cp gpu/run.sh "$out/run.sh"
cp gpu/detached.sh "$out/detached.sh"
cp -r gpu/plans "$out/plans"
cp -r gpu/traces "$out/traces"
# The GPT-2 engine: its sources and CMake project, the reference script, nlohmann/json
# (Debian's nlohmann-json3-dev; the GPU machine may lack it), and the CMake package
# files, so that find_package(gpurt) takes the bundle for an installed prefix.
mkdir -p "$out/src/gpt2" "$out/json" "$out/lib/cmake/gpurt"
cp examples-cpp/gpt2/*.cpp examples-cpp/gpt2/*.hpp examples-cpp/gpt2/CMakeLists.txt "$out/src/gpt2/"
cp gpu/gpt2_reference.py "$out/src/"
# ggml on gpurt (integrations/ggml): the patch, its build script, ggml's source and the comparison.
mkdir -p "$out/integrations" "$out/ggml"
cp -r integrations/ggml integrations/cmake_build.sh "$out/integrations/"
cp ../shared/third_party/ggml-d99724f.tar.gz "$out/ggml/"
cp gpu/ggml_compare.py gpu/ggml_gpt2.py tests/nvtx/record_injection.c "$out/src/"
# llama.cpp on gpurt (integrations/llama.cpp): its patch, build script and model maker, and
# llama.cpp's source without what a build does not read (12 MB, as xz).
cp -r integrations/llama.cpp "$out/integrations/"
cp gpu/llama.py gpu/llama_share.py "$out/src/"
mkdir -p "$out/llama"
tar xzf ../shared/third_party/llama.cpp-5de25a74.tar.gz -C target --exclude=llama.cpp/docs --exclude=llama.cpp/media --exclude=llama.cpp/.github
tar cJf "$out/llama/llama.cpp.tar.xz" -C target llama.cpp
rm -rf target/llama.cpp
cp -r third_party/nvtx3 "$out/include/"   # the recording NVTX tool's headers
cp -r /usr/include/nlohmann "$out/json/"
cmake -S . -B target/bundle-cmake -DGPURT_CARGO_TARGET_DIR="$PWD/target" >/dev/null   # configuring writes the package files
cp target/bundle-cmake/gpurtConfig.cmake target/bundle-cmake/gpurtConfigVersion.cmake "$out/lib/cmake/gpurt/"
ln -sf "$soname" "$out/lib/libgpurt.so.$version"
cp -r tests/python "$out/pytests"

# RMM's C++ headers and library (librmm-cu13 and its logger), for the RMM adaptor's test.
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.12 \
    -d "$out/rmm" librmm-cu13 "rapids-logger==0.3.*"

# torch_memory_saver, the anchor sleep and wake are measured beside (pip install --no-deps there).
python3 -m pip download -q --no-deps -d "$out/tms" torch_memory_saver==0.0.10

# The Python package as a wheel, and what its tests need that the GPU machine may
# lack (it reaches no package index): cffi and pytest for the CPython versions it
# may have.
python3 -m pip wheel -q --no-deps -w "$out/wheels" . -C cmake.define.GPURT_CARGO_TARGET_DIR="$PWD/target"
for python_version in 3.10 3.11 3.12 3.13; do
    python3 -m pip download -q --only-binary=:all: --platform manylinux2014_x86_64 --python-version "$python_version" \
        -d "$out/wheels" cffi pytest
done

# Test and benchmark executables, as cargo reports them.
executables() {  # executables KIND CARGO-ARGS...: name and path of each built target of KIND
    local kind=$1; shift
    cargo "$@" --message-format=json-render-diagnostics |
        python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and sys.argv[1] in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])' "$kind"
}
executables test test --release --no-run --test gpu | while read -r name exe; do cp "$exe" "$out/tests/$name"; done
if ls benches/*.rs >/dev/null 2>&1; then
    executables bench bench --no-run | while read -r name exe; do cp "$exe" "$out/benches/$name"; done
fi
# The Go package's test binary (the GPU machine has no Go toolchain), linked against
# the bundle's library through a pkg-config file that names it.
if command -v go >/dev/null; then
    mkdir -p "$out/go" "$out/pkgconfig"
    printf "Name: gpurt\nDescription: gpurt\nVersion: $version\nCflags: -I%s\nLibs: -L%s -lgpurt\n" "$PWD/include" "$PWD/$out/lib" > "$out/pkgconfig/gpurt.pc"
    (cd bindings/go && PKG_CONFIG_PATH="$PWD/../../$out/pkgconfig" CGO_LDFLAGS='-Wl,-rpath,$ORIGIN/../lib' go test -c -ldflags='-s -w' -o "../../$out/go/gpurt-go.test" .)
else
    echo "bundle: no Go toolchain here; the Go tests are left out"
fi
# An earlier commit's library beside this one (BASELINE_REF=<commit>): run.sh's
# BASELINE_LIB=baseline/libgpurt.so.0 alternates its allocator benchmark with this one's.
if [ -n "${BASELINE_REF:-}" ]; then
    baseline_tree=$(mktemp -d)
    git worktree add -q --detach "$baseline_tree" "$BASELINE_REF"
    (cd "$baseline_tree" && cargo build -q --release --lib --target-dir "$OLDPWD/target/baseline")
    git worktree remove --force "$baseline_tree"
    mkdir -p "$out/baseline"
    cp target/baseline/release/libgpurt.so "$out/baseline/$soname"
fi
strip "$out"/tests/* "$out"/benches/* "$out"/baseline/* 2>/dev/null || true
strip -g "$out/lib/libgpurt.a"
gzip "$out/lib/libgpurt.a"   # a third of its size: the tree that travels is capped at 64 MiB
du -sh "$out"
