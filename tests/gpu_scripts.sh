#!/usr/bin/env bash
# The GPU machine's scripts, checked where there is no GPU: they parse, and the two
# plans of gpu/plans/ (the suite in two leases, and llama.cpp's) together run every step of run.sh, each
# once but the builds and installs that both need; with CUDA_INCLUDE (CUDA's headers,
# as tests/ggml.sh takes them from PyPI), the programs that call the driver or cuBLAS
# directly compile as run.sh builds them (PyTorch's and RMM's parts left out).
# usage: tests/gpu_scripts.sh [CUDA_INCLUDE]
set -euo pipefail
cd "$(dirname "$0")/.."
for script in gpu/*.sh gpu/plans/*.sh integrations/*.sh integrations/*/*.sh; do bash -n "$script"; done
# The scenario runner draws its scenarios without a GPU, the same for the same seed.
[ "$(python3 gpu/scenarios.py - draw 1 2 3)" == "$(python3 gpu/scenarios.py - draw 1 2 3)" ]
python3 gpu/scenarios.py - draw 1 2 3 | grep -q '^3: .* -> '

# A copy laid out as the bundle is (one Rust test binary and two benchmarks stand for
# theirs), where run.sh only names the steps it would run (LIST=1), into $STEPS.
bundle=$(mktemp -d)
trap 'rm -rf "$bundle"' EXIT
mkdir -p "$bundle/tests" "$bundle/benches" "$bundle/lib" "$bundle/out" "$bundle/src"
touch "$bundle/tests/gpu" "$bundle/benches/alloc" "$bundle/benches/comm" "$bundle/lib/libgpurt.a"
cp gpu/run.sh "$bundle/real-run.sh"
cat > "$bundle/run.sh" <<'WRAPPER'
LIST=1 bash "$(dirname "$0")/real-run.sh" 2>/dev/null >> "$STEPS"
WRAPPER
export BASELINE_LIB=baseline/libgpurt.so.0
(cd "$bundle" && OUT="$bundle/out" STEPS="$bundle/all" bash run.sh)
for plan in checks figures llama; do
    (cd "$bundle" && OUT="$bundle/out" STEPS="$bundle/planned" bash "$OLDPWD/gpu/plans/$plan.sh")
done
all=$(sort "$bundle/all")
planned=$(sort "$bundle/planned")
missing=$(comm -23 <(echo "$all") <(echo "$planned" | uniq))
[ -z "$missing" ] || { echo "steps no plan runs:"; echo "$missing"; exit 1; }
twice=$(echo "$planned" | uniq -d | grep -Ev '^(build-.*|python-install|tms-install)$' || true)
[ -z "$twice" ] || { echo "steps both plans run:"; echo "$twice"; exit 1; }
for step in rust-gpu soak ggml-test-backend-ops-gpurt ggml-gpt2-run bench-alloc-baseline-3 gpt2-speed-torch trace-replay; do
    grep -qx "$step" <<<"$all" || { echo "run.sh no longer lists $step"; exit 1; }
done
echo "gpu scripts: the plans run all $(wc -l <<<"$all") steps of run.sh"

cuda_include=${1:-}
if [ -z "$cuda_include" ]; then
    echo "gpu scripts: the driver's programs not compiled (no CUDA headers given)"
    exit 0
fi
# run.sh's own build commands (LIST=commands), only checked: the bundle's layout (the
# sources in src/), PyTorch's and RMM's parts (-DWITH_*) left out.
cp gpu/sleep_bench.c gpu/pin_bench.c gpu/batch_bench.c gpu/blas_bench.c gpu/blas_gpu_test.c gpu/trace_replay.cpp tests/c/check.h "$bundle/src/"
cp -r include "$bundle/"
(cd "$bundle" && LIST=commands OUT="$bundle/out" bash real-run.sh 2>/dev/null) > "$bundle/commands"
for step in build-sleep-bench build-pin-bench build-batch-bench build-blas-bench build-blas-gpu-test build-trace-replay; do
    command=$(awk -F'\t' -v step="$step" '$1 == step { print $2 }' "$bundle/commands")
    [ -n "$command" ] || { echo "run.sh no longer lists $step"; exit 1; }
    eval "set -- $command"
    args=()
    for arg in "$@"; do [[ $arg == -DWITH_* ]] || args+=("$arg"); done
    (cd "$bundle" && "${args[@]}" -fsyntax-only -I"$cuda_include")
done
echo "gpu scripts: sleep_bench, pin_bench, batch_bench, blas_bench, blas_gpu_test and trace_replay compile as run.sh builds them"
