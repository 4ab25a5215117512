#!/usr/bin/env bash
# ggml's CUDA backend on gpurt (integrations/ggml), the parts that run without a GPU:
#   1. the patch applies cleanly to ggml d99724f (../shared/third_party);
#   2. ggml's CPU build with the patched CMake passes, and its op tests run on the CPU;
#   3. the files the patch changes compile with NVIDIA's CUDA compiler and headers from
#      PyPI (nvcc, crt, nvvm, cccl, the runtime's and cuBLAS's headers), with gpurt
#      (GGML_USE_GPURT) and without.
# The GPU parts (both builds, test-backend-ops side by side) run from gpu/run.sh.
# usage: tests/ggml.sh WORK_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$1/ggml
tarball=$root/../shared/third_party/ggml-d99724f.tar.gz
[ -f "$tarball" ] || { echo "tests/ggml.sh: $tarball missing (the shared folder beside the checkout)"; exit 1; }
rm -rf "$work/check" "$work/cpu"
mkdir -p "$work/check"

echo "== ggml: the patch applies to ggml d99724f"
tar xzf "$tarball" -C "$work/check"
(cd "$work/check/ggml" && patch -p1 --dry-run --quiet < "$root/integrations/ggml/ggml-gpurt.patch" && patch -p1 --quiet < "$root/integrations/ggml/ggml-gpurt.patch")
echo "applies cleanly: $(grep -c '^+++ ' integrations/ggml/ggml-gpurt.patch) files"

echo "== ggml: the CPU build with the patched CMake, and its op tests on the CPU"
integrations/ggml/build.sh "$tarball" "$work/cpu" off -DGGML_CUDA=OFF -DGGML_BUILD_EXAMPLES=OFF
"$work/cpu/build/bin/test-backend-ops" test -b CPU -o ADD 2>&1 | tail -n 2

echo "== ggml: the changed CUDA files compile with nvcc and CUDA headers from PyPI, with and without gpurt"
cuda=$work/cuda
if [ ! -x "$cuda/nvidia/cu13/bin/nvcc" ]; then
  rm -rf "$cuda" "$work/wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
      -d "$work/wheels" nvidia-cuda-nvcc==13.5.37 nvidia-cuda-crt==13.5.37 nvidia-nvvm==13.5.37 \
      nvidia-cuda-runtime==13.5.37 nvidia-cuda-cccl==13.3.5.0.6 nvidia-cublas==13.10.0.20
  mkdir -p "$cuda"
  for wheel in "$work"/wheels/*.whl; do
    case "$wheel" in
      *nvidia_cublas*) unzip -q -o "$wheel" 'nvidia/cu13/include/*' -d "$cuda" ;;   # the headers: the libraries are not linked here
      *) unzip -q -o "$wheel" -d "$cuda" ;;
    esac
  done
fi
nvcc=$cuda/nvidia/cu13/bin/nvcc
src=$work/check/ggml
for variant in plain gpurt; do
  defines=(-DGGML_CUDA_USE_GRAPHS -DGGML_CUDA_PEER_MAX_BATCH_SIZE=128)
  [ $variant = gpurt ] && defines+=(-DGGML_USE_GPURT)
  for file in ggml-cuda.cu argmax.cu; do
    "$nvcc" -std=c++17 -arch=sm_90 -O0 "${defines[@]}" -I"$src/include" -I"$src/src" -I"$src/src/ggml-cuda" -I"$root/include" \
        -c "$src/src/ggml-cuda/$file" -o "$work/check/$variant-${file%.cu}.o"
  done
  echo "$variant: ggml-cuda.cu and argmax.cu (common.cuh) compile with $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
done
