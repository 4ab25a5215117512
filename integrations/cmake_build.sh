# Sourced by integrations/*/build.sh: what each build mode passes to CMake, and the
# configure and build of a source tree, their logs kept beside the build.

# mode_options MODE: sets `options` for gpurt (ggml's CUDA backend on gpurt), off (patched,
# the option off) or unpatched; fails for any other mode.
mode_options() {
  case "$1" in
    gpurt) options=(-DGGML_CUDA=ON -DGGML_CUDA_GPURT=ON) ;;
    off) options=(-DGGML_CUDA=ON -DGGML_CUDA_GPURT=OFF) ;;
    unpatched) options=(-DGGML_CUDA=ON) ;;
    *) return 1 ;;
  esac
}

# configure_and_build SOURCE DIR CMAKE_ARGS...: a Release build into DIR/build, logs in
# DIR/configure.log and DIR/build.log (shown on failure); TARGETS (space-separated)
# builds only those targets.
configure_and_build() {
  local source=$1 dir=$2 targets=() t
  shift 2
  cmake -S "$source" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir/configure.log" || { cat "$dir/configure.log"; return 1; }
  for t in ${TARGETS:-}; do targets+=(--target "$t"); done
  cmake --build "$dir/build" -j "$(nproc)" "${targets[@]}" >"$dir/build.log" 2>&1 || { tail -n 60 "$dir/build.log"; return 1; }
}
