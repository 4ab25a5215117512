# The GPU suite in two leases, second part: the measurements (run.sh's PART=figures:
# benchmarks beside the raw driver, the GPT-2 engine's speed, drop-in peaks, trace
# replay), with the machine to itself. BASELINE_LIB, a path in the bundle to an earlier
# build of the library, puts that build's allocator benchmark beside this one's.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/figures.sh
set -u
PART=figures SKIP='^ggml-' bash run.sh
