# llama.cpp unpatched and on gpurt (run.sh's PART=llama), a lease of its own: both
# builds at once (host cores), then each one's architecture tests, the greedy tokens of
# every model, the server's idle sleep and llama-bench, with the machine to itself.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/llama.sh
set -u
for mode in unpatched gpurt; do
    PART=llama ONLY="^llama-build-$mode\$" bash run.sh > "$OUT/llama-build-$mode.txt" 2>&1 &
done
wait
PART=llama SKIP='^llama-build-' bash run.sh
