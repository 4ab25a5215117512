# The GPU suite in two leases, first part: every pass/fail check (run.sh's PART=checks)
# while ggml's two builds are made beside them (host cores only, ~8 minutes); then, with
# the machine to itself, ggml's GPT-2 examples (tokens, speed, peak), and ggml's op tests
# of both builds side by side (each checks the GPU against ggml's CPU backend).
#   bash gpu-bundle/detached.sh gpu-bundle/plans/checks.sh     (then plans/figures.sh)
set -u
export GGML_WORK=${GGML_WORK:-/tmp/gpurt-ggml-work}
[ -f lib/libgpurt.a ] || gunzip -k lib/libgpurt.a.gz   # once, before run.sh runs side by side
side_by_side() {  # side_by_side STEP-PREFIX: that step of both ggml builds at once
    for mode in unpatched gpurt; do
        ONLY="^$1-$mode\$" bash run.sh > "$OUT/$1-$mode.txt" 2>&1 &
    done
}
side_by_side ggml-build
PART=checks SKIP='^ggml-' bash run.sh
wait
ONLY='^(ggml-gpt2-.*|build-nvtx-record-tool)$' bash run.sh
side_by_side ggml-test-backend-ops
wait
ONLY='^ggml-(ctest-.*|compare.*)$' bash run.sh
