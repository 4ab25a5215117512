# llama-server's idle sleep on models of several shapes (issue #69 item 3), a lease of
# its own: the builds of LLAMA_SLEEP_BUILDS (default: both) at once, then each model of
# LLAMA_SLEEP_MODELS (default: the dense, GQA, mixture-of-experts and Hugging
# Face-converted models) asleep in each build and mode, with gpurt's account of what its
# sleeping process holds; with LLAMA_BASELINE_LIB, gpurt's build on that library too.
# LLAMA_PACK=DIR packs the built binaries into DIR (15 MiB parts of an xz tarball, the
# size a file may have to come back from a lease), for a later lease to skip the build.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/llama_sleep.sh
set -u
builds=${LLAMA_SLEEP_BUILDS:-unpatched gpurt}
for mode in $builds; do
    PART=llama ONLY="^llama-build-$mode\$" bash run.sh > "$OUT/llama-build-$mode.txt" 2>&1 &
done
wait
if [ -n "${LLAMA_PACK:-}" ]; then
    for mode in $builds; do
        mkdir -p "$LLAMA_PACK"
        tar cf - -C "${LLAMA_WORK:-/tmp/gpurt-llama-work}/$mode/build" bin | xz -T0 -6 | split -b 15M - "$LLAMA_PACK/llama-$mode-bin.txz."
    done
    ls -la "$LLAMA_PACK"
fi
LLAMA_SLEEP_MODELS=${LLAMA_SLEEP_MODELS:-dense,gqa,moe,hf} LLAMA_SLEEP_CYCLES=${LLAMA_SLEEP_CYCLES:-10} \
    PART=llama ONLY='^llama-(models|server-sleep)$' bash run.sh
