"""PyTorch on gpurt's allocator: `gpurt.torch.use_as_allocator()` before PyTorch
allocates any CUDA memory, and every tensor's memory comes from gpurt."""
from ._native import library_path


def use_as_allocator():
    """Makes gpurt PyTorch's CUDA allocator (through CUDAPluggableAllocator); call it
    before the first CUDA tensor. Returns the allocator object."""
    import torch

    allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path, "gpurt_torch_alloc", "gpurt_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)
    return allocator
