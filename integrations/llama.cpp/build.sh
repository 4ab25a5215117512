#!/usr/bin/env bash
# Unpacks llama.cpp (the tarball of commit 5de25a74), applies ggml's patch inside its
# ggml/ and llama-gpurt.patch at its root, and builds it.
#
#   integrations/llama.cpp/build.sh TARBALL DIR gpurt|off|unpatched [CMAKE_ARGS...]
#
# gpurt:     ggml's CUDA backend on gpurt (-DGGML_CUDA=ON -DGGML_CUDA_GPURT=ON, gpurt found
#            with find_package: pass -DCMAKE_PREFIX_PATH=<gpurt's prefix>);
# off:       patched, the option off (what the patched llama.cpp builds by default);
# unpatched: llama.cpp as it is, for comparisons.
# The source goes to DIR/llama.cpp, the build to DIR/build. Offline: the web UI is
# neither built nor downloaded, no OpenSSL. Other CMake arguments pass through
# (-DGGML_CUDA=OFF for a CPU build, -DCMAKE_CUDA_ARCHITECTURES=90, ...); TARGETS (a
# space-separated list) builds only those targets.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tarball=$1 dir=$2 mode=$3
shift 3
case "$mode" in
  gpurt) options=(-DGGML_CUDA=ON -DGGML_CUDA_GPURT=ON) ;;
  off) options=(-DGGML_CUDA=ON -DGGML_CUDA_GPURT=OFF) ;;
  unpatched) options=(-DGGML_CUDA=ON) ;;
  *) echo "usage: $0 TARBALL DIR gpurt|off|unpatched [CMAKE_ARGS...]"; exit 2 ;;
esac
if [ ! -f "$dir/llama.cpp/CMakeLists.txt" ]; then
  mkdir -p "$dir"
  tar xf "$tarball" -C "$dir"
  if [ "$mode" != unpatched ]; then
    (cd "$dir/llama.cpp/ggml" && patch -p1 --quiet < "$here/../ggml/ggml-gpurt.patch")
    (cd "$dir/llama.cpp" && patch -p1 --quiet < "$here/llama-gpurt.patch")
  fi
fi
cmake -S "$dir/llama.cpp" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=ON \
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
      "${options[@]}" "$@" >"$dir/configure.log" || { cat "$dir/configure.log"; exit 1; }
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir/build" -j "$(nproc)" "${targets[@]}" >"$dir/build.log" 2>&1 || { tail -n 60 "$dir/build.log"; exit 1; }
echo "llama.cpp ($mode) built in $dir/build"
