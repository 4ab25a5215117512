#!/usr/bin/env bash
# Unpacks ggml (the tarball of commit d99724f), applies ggml-gpurt.patch, and builds it.
#
#   integrations/ggml/build.sh TARBALL DIR gpurt|off|unpatched [CMAKE_ARGS...]
#
# gpurt:     ggml's CUDA backend on gpurt (-DGGML_CUDA=ON -DGGML_CUDA_GPURT=ON, gpurt found
#            with find_package: pass -DCMAKE_PREFIX_PATH=<gpurt's prefix>);
# off:       patched, the option off (what the patched ggml builds by default);
# unpatched: ggml as it is, for comparisons.
# The source goes to DIR/ggml, the build to DIR/build. Other CMake arguments pass
# through (-DGGML_CUDA=OFF for a CPU build, -DCMAKE_CUDA_ARCHITECTURES=90, ...).
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
if [ ! -f "$dir/ggml/CMakeLists.txt" ]; then
  mkdir -p "$dir"
  tar xzf "$tarball" -C "$dir"
  [ "$mode" = unpatched ] || (cd "$dir/ggml" && patch -p1 --quiet < "$here/ggml-gpurt.patch")
fi
cmake -S "$dir/ggml" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=ON \
      "${options[@]}" "$@" >"$dir/configure.log" || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir/build" -j "$(nproc)" >"$dir/build.log" 2>&1 || { tail -n 60 "$dir/build.log"; exit 1; }
echo "ggml ($mode) built in $dir/build"
