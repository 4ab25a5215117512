# PyTorch workloads on side streams without CUDA graphs (gpu/side_streams.py): the NVML
# peak and output checksum on PyTorch's allocator (default and expandable) and on two
# gpurt libraries alternately, the bundle's and lib-old/libgpurt.so.0's (the library
# before a placement change), two seeds each.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/side_streams.sh
set -u
python3 -m pip install -q --no-index --find-links wheels --target pydeps gpurt > /dev/null 2>&1
run() {  # run LIB ALLOC WORKLOAD SEED
    PYTHONPATH=$PWD/pydeps GPURT_LIBRARY=$1 python3 src/side_streams.py "$1" "$2" "$3" "$4" 2>&1 | tail -1
}
for seed in ${SIDE_STREAM_SEEDS:-31 32}; do
    for workload in prefetch overlap; do
        run "$PWD/lib/libgpurt.so.0" native $workload $seed
        run "$PWD/lib/libgpurt.so.0" native-expandable $workload $seed
        for lib in old new old new; do
            d=$PWD/lib; [ $lib = old ] && d=$PWD/lib-old
            echo "$lib: $(run "$d/libgpurt.so.0" gpurt $workload $seed)"
        done
    done
done
