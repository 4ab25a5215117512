"""PyTorch and CuPy running on gpurt's allocator, checked against their own.

    python3 alloc_frameworks.py LIB torch-native OUT   # reference, PyTorch's allocator
    python3 alloc_frameworks.py LIB torch-gpurt OUT    # same model on gpurt; compares
    python3 alloc_frameworks.py LIB cupy               # CuPy, both allocators in one process

With GPURT_ALLOC_CONF=backend:cudaMallocAsync, gpurt's default pools are the
driver's stream-ordered pool: torch-gpurt then checks that backend the same way.

PyTorch's allocator can be swapped only before CUDA starts, hence two processes.
"""
import ctypes
import os
import sys

lib_path, mode = sys.argv[1], sys.argv[2]
gpurt = ctypes.CDLL(lib_path)


def gpurt_allocated():
    allocated, reserved = ctypes.c_uint64(), ctypes.c_uint64()
    status = gpurt.gpurt_memory_usage(0, ctypes.byref(allocated), None, ctypes.byref(reserved), None)
    assert status == 0, status
    return allocated.value, reserved.value


def torch_run(out_path, use_gpurt):
    import torch

    if use_gpurt:
        alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "gpurt_torch_alloc", "gpurt_torch_free")
        torch.cuda.memory.change_current_allocator(alloc)
    torch.manual_seed(1234)
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(1024, 256),
        torch.nn.GELU(), torch.nn.Linear(256, 10),
    ).cuda()
    x = torch.randn(64, 3, 64, 64, generator=torch.Generator().manual_seed(99)).cuda()
    with torch.no_grad():
        for _ in range(3):  # several steps: memory is freed and reused in between
            y = model(x)
    torch.cuda.synchronize()
    if use_gpurt:
        allocated, reserved = gpurt_allocated()
        backend = ctypes.c_char_p()
        assert gpurt.gpurt_allocator_backend(ctypes.byref(backend)) == 0
        wanted = "cudaMallocAsync" if "backend:cudaMallocAsync" in os.environ.get("GPURT_ALLOC_CONF", "") else "native"
        assert backend.value.decode() == wanted, (backend.value, wanted)
        print(f"torch on gpurt ({wanted} backend): gpurt holds {allocated} bytes allocated, {reserved} reserved")
        assert allocated > 0, "PyTorch's tensors did not come from gpurt"
        ref = torch.load(out_path)
        diff = (y.cpu() - ref).abs().max().item()
        print(f"torch: max |gpurt - native| = {diff}")
        assert torch.equal(y.cpu(), ref), "results differ from PyTorch's own allocator"
        print("torch-gpurt: ok")
    else:
        torch.save(y.cpu(), out_path)
        print("torch-native: reference saved")


def cupy_run():
    import cupy

    def compute():
        rng = cupy.random.default_rng(7)
        a = rng.standard_normal((1024, 1024), dtype=cupy.float64)
        b = rng.standard_normal((1024, 1024), dtype=cupy.float64)
        c = a @ b + cupy.sin(a)
        parts = [cupy.cumsum(c[i::7], axis=0) for i in range(7)]  # many temporaries
        return cupy.asnumpy(cupy.concatenate(parts).sum(axis=1))

    native = compute()
    malloc = ctypes.cast(gpurt.gpurt_cupy_malloc, ctypes.c_void_p).value
    free = ctypes.cast(gpurt.gpurt_cupy_free, ctypes.c_void_p).value
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.cuda.set_allocator(cupy.cuda.memory.CFunctionAllocator(0, malloc, free, None).malloc)
    before, _ = gpurt_allocated()
    ours = compute()
    keep = cupy.ones(1 << 20)  # a live CuPy array must be gpurt memory
    during, reserved = gpurt_allocated()
    print(f"cupy on gpurt: allocated {before} -> {during} bytes with an 8 MiB array live, {reserved} reserved")
    assert during >= before + 8 * (1 << 20), "CuPy's arrays did not come from gpurt"
    del keep
    assert (native == ours).all(), f"max diff {abs(native - ours).max()}"
    print("cupy-gpurt: ok")


if mode == "torch-native":
    torch_run(sys.argv[3], False)
elif mode == "torch-gpurt":
    torch_run(sys.argv[3], True)
elif mode == "cupy":
    cupy_run()
else:
    sys.exit(f"unknown mode {mode}")
