"""Random numbers on the GPU (torch.cuda's manual_seed / get_rng_state, cupy.random):
Philox4x32-10 generators whose draws depend only on the seed, the offset and each
element's index. Fills write into DeviceBuffers (their dtype) on their stream."""
from ._handle import Handle, ordinal
from ._native import check, fetch, ffi, lib
from .errors import InvalidHandleError

_DTYPES = {"<f4": lib.GPURT_DTYPE_F32, "<f8": lib.GPURT_DTYPE_F64, "<f2": lib.GPURT_DTYPE_F16,
           "<i4": lib.GPURT_DTYPE_I32, "<i8": lib.GPURT_DTYPE_I64}


class Generator(Handle):
    """A generator of its own on `device`, seeded with `seed` (torch.Generator("cuda"))."""

    _destroy = "gpurt_generator_destroy"

    def __init__(self, seed=lib.GPURT_RNG_DEFAULT_SEED, device=None):
        super().__init__(fetch("gpurt_generator_t", lib.gpurt_generator_create, ordinal(device), int(seed)))


def _generator(generator):
    """The C handle of a generator (NULL: the default one); a closed one is refused."""
    if generator is None:
        return ffi.NULL
    if generator.handle == ffi.NULL:
        raise InvalidHandleError(lib.GPURT_ERROR_INVALID_HANDLE, "GPURT_ERROR_INVALID_HANDLE", "this Generator was destroyed")
    return generator.handle


def manual_seed(seed, device=None):
    check(lib.gpurt_rng_manual_seed(ordinal(device), int(seed)))


def manual_seed_all(seed):
    check(lib.gpurt_rng_manual_seed_all(int(seed)))


def seed(device=None):
    """Seeds the default generator from the system's entropy; gives the seed."""
    return fetch("uint64_t", lib.gpurt_rng_seed, ordinal(device))


def initial_seed(device=None):
    return fetch("uint64_t", lib.gpurt_rng_initial_seed, ordinal(device))


def get_rng_state(generator=None):
    """(seed, offset) of a generator (default: the current device's)."""
    state = ffi.new("gpurt_rng_state_t*")
    check(lib.gpurt_rng_get_state(_generator(generator), state))
    return state.seed, state.offset


def set_rng_state(state, generator=None):
    seed_value, offset = state
    check(lib.gpurt_rng_set_state(_generator(generator), ffi.new("gpurt_rng_state_t*", {"seed": seed_value, "offset": offset})))


def _fill(c_function, buffer, *args, generator=None):
    dtype = _DTYPES.get(buffer.typestr)
    if dtype is None:
        raise TypeError(f"random fills write {sorted(_DTYPES)}, not {buffer.typestr}")
    count = buffer.nbytes // int(buffer.typestr[2:])
    check(c_function(_generator(generator), ffi.cast("void*", buffer.ptr), count, dtype, *args, buffer.stream.handle))
    return buffer


def uniform_(buffer, generator=None):
    """Uniform numbers in [0, 1) into a float buffer."""
    return _fill(lib.gpurt_random_uniform, buffer, generator=generator)


def normal_(buffer, mean=0.0, std=1.0, generator=None):
    return _fill(lib.gpurt_random_normal, buffer, float(mean), float(std), generator=generator)


def random_(buffer, low, high, generator=None):
    """Integers in [low, high) into an int32 or int64 buffer."""
    return _fill(lib.gpurt_random_integers, buffer, int(low), int(high), generator=generator)


def bernoulli_(buffer, p=0.5, generator=None):
    return _fill(lib.gpurt_random_bernoulli, buffer, float(p), generator=generator)


def randperm_(buffer, generator=None):
    """A random permutation of [0, len) into an int32 or int64 buffer (torch.randperm)."""
    return _fill(lib.gpurt_random_permutation, buffer, generator=generator)
