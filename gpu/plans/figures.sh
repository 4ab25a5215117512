# The GPU suite in two leases, second part: the measurements (run.sh's PART=figures:
# benchmarks beside the raw driver, the GPT-2 engine's speed, drop-in peaks, trace
# replay), with the machine to itself; the allocator's first (sleep and wake, the
# allocator benchmark, drop-in peaks, trace replay), so that a lease that ends early
# loses the least of them. BASELINE_LIB, a path in the bundle to an earlier build of
# the library, puts that build's allocator benchmark beside this one's.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/figures.sh
set -u
allocator='^(build-sleep-bench|sleep-bench|python-install|tms-install|sleep-torch-saver|dropin-.*|bench-alloc.*|record-traces|build-trace-replay|trace-replay.*|record-dropin-sequence|keep-dropin-sequence)$'
PART=figures ONLY="$allocator" bash run.sh
PART=figures SKIP="^ggml-|$allocator" bash run.sh
