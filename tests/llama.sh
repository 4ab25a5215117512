#!/usr/bin/env bash
# llama.cpp on gpurt (integrations/llama.cpp), the parts that run without a GPU:
#   1. ggml's patch applies inside llama.cpp 5de25a74's ggml/ (../shared/third_party), and
#      llama-gpurt.patch at its root;
#   2. llama.cpp's CPU build with the patched CMake passes (llama-server, llama-completion);
#   3. the patched server sleeps when idle in both modes on the CPU (where no backend can
#      keep the model asleep, --sleep-mode offload unloads it), says so in /health and
#      /props, and gives the same greedy tokens after every wake, on a small Llama model
#      written offline (make_model.py, the shipped vocabulary).
# ggml-cuda.cu, which both patches share, is compiled with nvcc by tests/ggml.sh; the GPU
# parts (both CUDA builds side by side) run from gpu/run.sh's PART=llama.
# usage: tests/llama.sh WORK_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$1/llama
tarball=$root/../shared/third_party/llama.cpp-5de25a74.tar.gz
[ -f "$tarball" ] || { echo "tests/llama.sh: $tarball missing (the shared folder beside the checkout)"; exit 1; }
mkdir -p "$work"

echo "== llama.cpp: the patches apply to llama.cpp 5de25a74"
rm -rf "$work/check"
mkdir -p "$work/check"
tar xzf "$tarball" -C "$work/check"
(cd "$work/check/llama.cpp/ggml" && patch -p1 --dry-run --quiet < "$root/integrations/ggml/ggml-gpurt.patch")
(cd "$work/check/llama.cpp" && patch -p1 --dry-run --quiet < "$root/integrations/llama.cpp/llama-gpurt.patch")
echo "apply cleanly: ggml's $(grep -c '^+++ ' integrations/ggml/ggml-gpurt.patch) files, llama.cpp's $(grep -c '^+++ ' integrations/llama.cpp/llama-gpurt.patch)"
rm -rf "$work/check"

echo "== llama.cpp: the CPU build with the patched CMake"
rm -rf "$work/cpu/build"
TARGETS="llama-server llama-completion" integrations/llama.cpp/build.sh "$tarball" "$work/cpu" off -DGGML_CUDA=OFF -DGGML_NATIVE=OFF
"$work/cpu/build/bin/llama-server" --help | grep -q -- "--sleep-mode" || { echo "llama-server lacks --sleep-mode"; exit 1; }

echo "== llama.cpp: the server's idle sleep on the CPU, both modes"
venv=$work/venv
[ -x "$venv/bin/python" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q numpy pyyaml; }
model=$work/tiny.gguf
[ -f "$model" ] || "$venv/bin/python" integrations/llama.cpp/make_model.py "$work/cpu/llama.cpp" "$model" \
    --dim 256 --layers 2 --ff 512 --heads 4 --kv-heads 2
"$venv/bin/python" gpu/llama.py server-check "$work/cpu/build/bin" "$model"
