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
# through (-DGGML_CUDA=OFF for a CPU build, -DCMAKE_CUDA_ARCHITECTURES=90, ...); TARGETS
# (a space-separated list) builds only those targets.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cmake_build.sh"
tarball=$1 dir=$2 mode=$3
shift 3
mode_options "$mode" || { echo "usage: $0 TARBALL DIR gpurt|off|unpatched [CMAKE_ARGS...]"; exit 2; }
if [ ! -f "$dir/ggml/CMakeLists.txt" ]; then
  mkdir -p "$dir"
  tar xzf "$tarball" -C "$dir"
  [ "$mode" = unpatched ] || (cd "$dir/ggml" && patch -p1 --quiet < "$here/ggml-gpurt.patch")
fi
configure_and_build "$dir/ggml" "$dir" -DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=ON "${options[@]}" "$@"
echo "ggml ($mode) built in $dir/build"
