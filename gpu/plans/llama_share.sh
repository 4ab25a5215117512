# Two llama-servers taking turns on one GPU in a share group (issue #70 item 4), a lease
# of its own: both builds at once (or unpacked from LLAMA_UNPACK, parts a llama_sleep.sh
# lease packed with LLAMA_PACK), the models, then gpu/llama_share.py. Only llama-server is
# built, without flash attention's kernels (gpurt's build alone: 267 s on the H200 machine,
# against 618 s for both full builds at once): the tokens compared are each build's own,
# alone and in the group.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/llama_share.sh
set -u
export LLAMA_TARGETS=${LLAMA_TARGETS:-llama-server} LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:--DGGML_CUDA_FA=OFF}
builds=${LLAMA_SHARE_BUILDS:-unpatched gpurt}
for mode in $builds; do
    if [ -n "${LLAMA_UNPACK:-}" ] && ls "$LLAMA_UNPACK"/llama-$mode-bin.txz.* >/dev/null 2>&1; then
        mkdir -p "${LLAMA_WORK:-/tmp/gpurt-llama-work}/$mode/build"
        cat "$LLAMA_UNPACK"/llama-$mode-bin.txz.* | xz -d | tar xf - -C "${LLAMA_WORK:-/tmp/gpurt-llama-work}/$mode/build" &
    else
        PART=llama ONLY="^llama-build-$mode\$" bash run.sh > "$OUT/llama-build-$mode.txt" 2>&1 &
    fi
done
wait
PART=llama ONLY='^llama-(models|share)$' bash run.sh
