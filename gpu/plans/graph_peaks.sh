# The 20 shared-pool CUDA graph captures' NVML peak (torch_graphs.py peak20) on PyTorch's
# allocator and on two gpurt libraries alternately, two rounds: the bundle's and the one
# put at lib-old/libgpurt.so.0 (the library before a placement change), over six blocks,
# batch orders and warm-up streams (docs/performance.md, "PyTorch's own CUDA graphs on
# gpurt"); then the checks that exercise the allocator's streams and graphs.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/graph_peaks.sh
set -u
python3 -m pip install -q --no-index --find-links wheels --target pydeps gpurt pytest > /dev/null 2>&1
peak() {  # peak LIB ALLOC BLOCK ORDER WARM
    local out
    out=$(TORCH_GRAPHS_WARM=$5 PYTHONPATH=$PWD/pydeps GPURT_LIBRARY=$1 python3 src/torch_graphs.py "$1" peak20 "$2" "$3" "$4" 2>&1)
    echo "$out" > "$OUT/peak20-$2-$3-$4-$5-$(basename $(dirname $1)).log"
    echo "$(echo "$out" | grep -o 'peak20 [0-9.]*') fails=$(echo "$out" | grep -c '^FAIL')"
}
for round in 1 2; do
  for v in "transformer down each" "transformer down one" "mlp down each" "transformer up each" "mlp up each" "mlp down one"; do
    set -- $v
    line="round $round $1 $2 $3:"
    line="$line native $(peak $PWD/lib/libgpurt.so.0 native $1 $2 $3)"
    [ $round = 1 ] && line="$line | native-expandable $(peak $PWD/lib/libgpurt.so.0 native-expandable $1 $2 $3)"
    line="$line | old $(peak $PWD/lib-old/libgpurt.so.0 gpurt $1 $2 $3)"
    line="$line | new $(peak $PWD/lib/libgpurt.so.0 gpurt $1 $2 $3)"
    echo "$line"
  done
done
echo "== checks"
ONLY='^(build-sleep-test|build-sleep-storm|build-foreign-capture-test|build-shared-capture-test|build-vbuffer-test|sleep-test|sleep-storm|vbuffer-test|shared-capture-test|foreign-capture-test|memcheck-foreign-capture-test|python-install|python-tests|sleep-torch-proof|torch-graphs-.*|share-torch|rust-.*)$' bash run.sh 2>&1 | grep -E "^(PASS|FAIL)|^gpu:" | tail -60
grep -h "peak20\|cycles:" $OUT/torch-graphs*.log 2>/dev/null | head
