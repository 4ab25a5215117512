# PyTorch workloads on side streams without CUDA graphs (gpu/side_streams.py): the NVML
# peak and output checksum on PyTorch's allocator (default and expandable) and on gpurt,
# for each seed of SIDE_STREAM_SEEDS (default: 31 32). The checksums must agree.
#   bash gpu-bundle/detached.sh gpu-bundle/plans/side_streams.sh
set -u
python3 -m pip install -q --no-index --find-links wheels --target pydeps gpurt > /dev/null 2>&1
for seed in ${SIDE_STREAM_SEEDS:-31 32}; do
    for workload in prefetch overlap; do
        for alloc in native native-expandable gpurt; do
            PYTHONPATH=$PWD/pydeps GPURT_LIBRARY=$PWD/lib/libgpurt.so.0 \
                python3 src/side_streams.py "$PWD/lib/libgpurt.so.0" $alloc $workload $seed 2>&1 | tail -1
        done
    done
done
