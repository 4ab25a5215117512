# llama.cpp unpatched and on gpurt (run.sh's PART=llama), a lease of its own: both
# builds at once (host cores), then each one's architecture tests, the greedy tokens of
# every model, the server's idle sleep, two GPUs where the machine has them and
# llama-bench, with the machine to itself; last, both builds' op tests side by side, then
# their ctest tests that need no download.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/llama.sh
set -u
side_by_side() {  # side_by_side STEP-PREFIX: that step of both builds at once
    for mode in unpatched gpurt; do
        PART=llama ONLY="^$1-$mode\$" bash run.sh > "$OUT/$1-$mode.txt" 2>&1 &
    done
    wait
}
side_by_side llama-build
PART=llama SKIP='^llama-(build-.*|test-backend-ops-.*|compare-ops|ctest-.*|compare-ctest)$' bash run.sh
side_by_side llama-test-backend-ops
PART=llama ONLY='^llama-compare-ops$' bash run.sh
side_by_side llama-ctest
PART=llama ONLY='^llama-compare-ctest$' bash run.sh
