# llama-server's idle sleep on models of several shapes (issue #69 item 3), a lease of
# its own: both builds at once, then each model of LLAMA_SLEEP_MODELS (default: the
# dense, GQA, mixture-of-experts and Hugging Face-converted models) asleep in both
# builds and modes, with gpurt's account of what its sleeping process holds.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/llama_sleep.sh
set -u
for mode in unpatched gpurt; do
    PART=llama ONLY="^llama-build-$mode\$" bash run.sh > "$OUT/llama-build-$mode.txt" 2>&1 &
done
wait
LLAMA_SLEEP_MODELS=${LLAMA_SLEEP_MODELS:-dense,gqa,moe,hf} LLAMA_SLEEP_CYCLES=${LLAMA_SLEEP_CYCLES:-10} \
    PART=llama ONLY='^llama-(models|server-sleep)$' bash run.sh
