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
source "$here/../cmake_build.sh"
tarball=$1 dir=$2 mode=$3
shift 3
mode_options "$mode" || { echo "usage: $0 TARBALL DIR gpurt|off|unpatched [CMAKE_ARGS...]"; exit 2; }
if [ ! -f "$dir/llama.cpp/CMakeLists.txt" ]; then
  mkdir -p "$dir"
  tar xf "$tarball" -C "$dir"
  if [ "$mode" != unpatched ]; then
    (cd "$dir/llama.cpp/ggml" && patch -p1 --quiet < "$here/../ggml/ggml-gpurt.patch")
    (cd "$dir/llama.cpp" && patch -p1 --quiet < "$here/llama-gpurt.patch")
  fi
fi
configure_and_build "$dir/llama.cpp" "$dir" -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF "${options[@]}" "$@"
echo "llama.cpp ($mode) built in $dir/build"
