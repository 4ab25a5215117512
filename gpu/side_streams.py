"""PyTorch workloads that allocate on side streams without CUDA graphs, for the
allocator's side-stream placement (docs/performance.md, "PyTorch's own CUDA graphs on
gpurt"): each prints its process's NVML peak and a checksum of its outputs.

    python3 side_streams.py LIB ALLOC WORKLOAD SEED     ALLOC: native | native-expandable | gpurt
        prefetch: a copy stream uploads 300 batches of seeded random lengths (16 x 64-512
            tokens x 1024, 4-32 MiB) into tensors it allocates; the main stream runs a
            Transformer block on each (record_stream), as a data loader's prefetch does.
        overlap: two streams each run a block (a Transformer, an MLP) on batches of seeded
            random sizes at once, 200 rounds, each stream's memory in its own pool.
"""
import random
import sys

import torch_graphs as tg  # beside this script: setup, block, process_mib, peak_sampler


def prefetch(torch, rng):
    model, main, copy = tg.block(torch), torch.cuda.current_stream(), torch.cuda.Stream()
    host = torch.randn(16, 512, 1024, generator=torch.Generator().manual_seed(rng.randrange(2**31))).pin_memory()
    total = torch.zeros((), device="cuda", dtype=torch.float64)
    with torch.no_grad():
        for _ in range(300):
            tokens = rng.randrange(64, 513)
            with torch.cuda.stream(copy):
                x = host[:, :tokens].to("cuda", non_blocking=True)
            main.wait_stream(copy)
            x.record_stream(main)
            total += model(x).double().sum()
            del x
    return total


def overlap(torch, rng):
    blocks = [tg.block(torch), tg.block(torch, kind="mlp")]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    totals = [torch.zeros((), device="cuda", dtype=torch.float64) for _ in blocks]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad():
        for _ in range(200):
            for model, stream, total in zip(blocks, streams, totals):
                batch, tokens = rng.randrange(1, 17), rng.randrange(32, 257)
                with torch.cuda.stream(stream):
                    x = torch.randn(batch, tokens, 1024, device="cuda")
                    total += model(x).double().sum()
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    return totals[0] + totals[1]


def main():
    lib, alloc, workload, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    torch, _ = tg.setup(lib, alloc)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    torch.ones(1, device="cuda")  # the context, before the peak is watched
    peak = tg.peak_sampler()
    total = {"prefetch": prefetch, "overlap": overlap}[workload](torch, rng)
    torch.cuda.synchronize()
    print(f"{workload} seed {seed} on {alloc}: NVML peak {max(peak.stop(), tg.process_mib()):.0f} MiB, checksum {total.item():.6e}", flush=True)


if __name__ == "__main__":
    main()
