# llama.cpp unpatched and on gpurt (run.sh's PART=llama), a lease of its own: both
# builds at once (host cores); then, with the machine to itself, each one's
# architecture tests, the greedy tokens of every model, two GPUs where the machine has
# them and the server's idle sleep; both builds' op tests and their ctest tests that
# need no download, side by side; last llama-bench and the 9.5 GiB model's sleep, the
# first to go when a lease runs short.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/llama.sh
# (LLAMA_SLEEP_CYCLES, LLAMA_BENCH_ROUNDS: run.sh's; LLAMA_OPS=0: without the op tests)
set -u
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
side_by_side() {  # side_by_side STEP-PREFIX: that step of both builds at once, each on a GPU of its own where there are two
    local gpu=0 visible
    for mode in unpatched gpurt; do
        visible=()
        [ "$gpus" -ge 2 ] && visible=(CUDA_VISIBLE_DEVICES=$gpu)
        env "${visible[@]}" PART=llama ONLY="^$1-$mode\$" bash run.sh > "$OUT/$1-$mode.txt" 2>&1 &
        gpu=$((gpu + 1))
    done
    wait
}
side_by_side llama-build
PART=llama ONLY='^llama-(archs-.*|models|completion|split|server-sleep|share)$' bash run.sh
if [[ ${LLAMA_OPS:-1} == 1 ]]; then  # LLAMA_OPS=0 leaves the op tests out (13 min side by side)
    side_by_side llama-test-backend-ops
    PART=llama ONLY='^llama-compare-ops$' bash run.sh
fi
side_by_side llama-ctest
PART=llama ONLY='^llama-(compare-ctest|bench|server-sleep-big)$' bash run.sh
