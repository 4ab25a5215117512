use libc::{c_int, c_void};

use super::kernels::Distribution;
use super::gpurt_rng_state_t;
use crate::boundary::{self, in_ref, Out};
use crate::dtype::gpurt_dtype_t;
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// A random number generator: a Philox4x32-10 stream (its seed) and how far it was
/// drawn (its offset). NULL wherever a generator is taken: the default generator
/// of the current device (of the stream's device, for fills).
pub struct gpurt_generator_s {
    _opaque: [u8; 0],
}
/// The handle of a random number generator: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_generator_t = *mut gpurt_generator_s;

fn generator(g: gpurt_generator_t) -> Option<Handle> {
    (!g.is_null()).then(|| Handle::from_ptr(g))
}

/// Seeds `device`'s default generator and rewinds it (torch.cuda.manual_seed).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param seed the seed
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rng_manual_seed(device: c_int, seed: u64) -> gpurt_status_t {
    boundary::call("gpurt_rng_manual_seed", || super::manual_seed(device, seed))
}

/// Seeds every device's default generator (torch.cuda.manual_seed_all).
///
/// @param seed the seed
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rng_manual_seed_all(seed: u64) -> gpurt_status_t {
    boundary::call("gpurt_rng_manual_seed_all", || super::manual_seed_all(seed))
}

/// Seeds `device`'s default generator from the system's entropy and gives the seed
/// (torch.cuda.seed).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] seed receives the seed drawn; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rng_seed(device: c_int, seed: *mut u64) -> gpurt_status_t {
    boundary::call("gpurt_rng_seed", || {
        let out = Out::new(seed, "seed")?;
        out.write(super::seed_randomly(device)?);
        Ok(())
    })
}

/// The seed `device`'s default generator was given last (torch.cuda.initial_seed).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] seed receives the generator's last seed; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rng_initial_seed(device: c_int, seed: *mut u64) -> gpurt_status_t {
    boundary::call("gpurt_rng_initial_seed", || {
        let out = Out::new(seed, "seed")?;
        out.write(super::initial_seed(device)?);
        Ok(())
    })
}

/// A generator's seed and offset (torch's get_rng_state), to restore it later.
///
/// @param gen a generator from gpurt_generator_create, or NULL for the current device's default generator
/// @param[out] state receives its seed and offset; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `gen`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rng_get_state(gen: gpurt_generator_t, state: *mut gpurt_rng_state_t) -> gpurt_status_t {
    boundary::call("gpurt_rng_get_state", || {
        let out = Out::new(state, "state")?;
        out.write(super::get_state(generator(gen))?);
        Ok(())
    })
}

/// Restores a generator's seed and offset: its next draws continue exactly as
/// after gpurt_rng_get_state (torch's set_rng_state).
///
/// @param gen a generator from gpurt_generator_create, or NULL for the current device's default generator
/// @param state a state from gpurt_rng_get_state
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `state`; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `gen`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rng_set_state(gen: gpurt_generator_t, state: *const gpurt_rng_state_t) -> gpurt_status_t {
    boundary::call("gpurt_rng_set_state", || super::set_state(generator(gen), in_ref(state, "state")?))
}

/// A generator of its own on `device`, seeded with `seed` (torch.Generator("cuda")).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param seed the seed
/// @param[out] gen receives the new generator; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_generator_create(device: c_int, seed: u64, gen: *mut gpurt_generator_t) -> gpurt_status_t {
    boundary::call("gpurt_generator_create", || {
        let out = Out::new(gen, "gen")?;
        out.write(super::create(device, seed)?.to_ptr());
        Ok(())
    })
}

/// Destroys a generator.
/// @param gen a generator from gpurt_generator_create
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `gen`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_generator_destroy(gen: gpurt_generator_t) -> gpurt_status_t {
    boundary::call("gpurt_generator_destroy", || super::destroy(Handle::from_ptr(gen)))
}

fn fill(function: &'static str, gen: gpurt_generator_t, out: *mut c_void, n: usize, dtype: c_int, distribution: Distribution, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call(function, || {
        let dtype = gpurt_dtype_t::from_raw(dtype)?;
        super::fill(generator(gen), out as u64, n as u64, dtype, distribution, Handle::from_ptr(stream))
    })
}

/// Fills `n` values of `dtype` (F32, F64, F16, BF16) at `out` (device memory
/// aligned to its elements) with uniform numbers in [0, 1), in `stream`'s order.
/// Values depend only on the generator's seed and offset and the element's index;
/// the generator advances by ceil(n / 4) blocks (ceil(n / 2) for F64). Inside a
/// graph capture, each replay draws new numbers (the generator advances per replay).
///
/// @param gen a generator from gpurt_generator_create, or NULL for the current device's default generator
/// @param out device memory of `n` values, aligned to their type
/// @param n how many values; 0 does nothing
/// @param dtype GPURT_DTYPE_F32, F64, F16 or BF16
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `out` with `n` > 0, misaligned memory, an unsupported dtype or bad bounds; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `gen` or a bad `stream`; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. In a capture, each replay draws new numbers. The first fill of a dtype compiles its kernel (NVRTC).
#[no_mangle]
pub extern "C" fn gpurt_random_uniform(gen: gpurt_generator_t, out: *mut c_void, n: usize, dtype: c_int, stream: gpurt_stream_t) -> gpurt_status_t {
    fill("gpurt_random_uniform", gen, out, n, dtype, Distribution::Uniform, stream)
}

/// As gpurt_random_uniform, with normal numbers of `mean` and `std` (Box-Muller).
///
/// @param gen a generator from gpurt_generator_create, or NULL for the current device's default generator
/// @param out device memory of `n` values, aligned to their type
/// @param n how many values; 0 does nothing
/// @param dtype GPURT_DTYPE_F32, F64, F16 or BF16
/// @param mean the mean
/// @param std the standard deviation (not negative)
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `out` with `n` > 0, misaligned memory, an unsupported dtype or bad bounds; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `gen` or a bad `stream`; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. In a capture, each replay draws new numbers. The first fill of a dtype compiles its kernel (NVRTC).
#[no_mangle]
pub extern "C" fn gpurt_random_normal(
    gen: gpurt_generator_t,
    out: *mut c_void,
    n: usize,
    dtype: c_int,
    mean: f64,
    std: f64,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    fill("gpurt_random_normal", gen, out, n, dtype, Distribution::Normal { mean, std }, stream)
}

/// Random integers in [low, high) into I32 or I64 values (torch's random_(low,
/// high)); ranges above 2^32 draw 64 bits per value.
///
/// @param gen a generator from gpurt_generator_create, or NULL for the current device's default generator
/// @param out device memory of `n` values, aligned to their type
/// @param n how many values; 0 does nothing
/// @param dtype GPURT_DTYPE_I32 or I64
/// @param low the smallest value
/// @param high one past the largest (greater than `low`)
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `out` with `n` > 0, misaligned memory, an unsupported dtype or bad bounds; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `gen` or a bad `stream`; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. In a capture, each replay draws new numbers. The first fill of a dtype compiles its kernel (NVRTC).
#[no_mangle]
pub extern "C" fn gpurt_random_integers(
    gen: gpurt_generator_t,
    out: *mut c_void,
    n: usize,
    dtype: c_int,
    low: i64,
    high: i64,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    let range = if high > low { high.wrapping_sub(low) as u64 } else { 0 };
    fill("gpurt_random_integers", gen, out, n, dtype, Distribution::Integers { low, range }, stream)
}

/// 1 with probability `p`, else 0, into values of any dtype (torch's bernoulli_(p)).
///
/// @param gen a generator from gpurt_generator_create, or NULL for the current device's default generator
/// @param out device memory of `n` values, aligned to their type
/// @param n how many values; 0 does nothing
/// @param dtype any gpurt_dtype_t
/// @param p the probability of 1, in [0, 1]
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `out` with `n` > 0, misaligned memory, an unsupported dtype or bad bounds; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `gen` or a bad `stream`; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. In a capture, each replay draws new numbers. The first fill of a dtype compiles its kernel (NVRTC).
#[no_mangle]
pub extern "C" fn gpurt_random_bernoulli(gen: gpurt_generator_t, out: *mut c_void, n: usize, dtype: c_int, p: f64, stream: gpurt_stream_t) -> gpurt_status_t {
    fill("gpurt_random_bernoulli", gen, out, n, dtype, Distribution::Bernoulli { p }, stream)
}

/// A random permutation of [0, n) into I32 or I64 values (torch.randperm): index i
/// gets the image of i under a Feistel bijection keyed by the generator's seed and
/// offset (Philox rounds, cycle-walked into [0, n)), so each value is computed on
/// its own; the generator advances by one block per call.
///
/// @param gen a generator from gpurt_generator_create, or NULL for the current device's default generator
/// @param out device memory of `n` values
/// @param n the permutation's length; 0 does nothing
/// @param dtype GPURT_DTYPE_I32 or I64 (I32 needs `n` ≤ 2^31)
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `out` with `n` > 0, misaligned memory, an unsupported dtype or bad bounds; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `gen` or a bad `stream`; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. In a capture, each replay draws new numbers. The first fill of a dtype compiles its kernel (NVRTC).
#[no_mangle]
pub extern "C" fn gpurt_random_permutation(gen: gpurt_generator_t, out: *mut c_void, n: usize, dtype: c_int, stream: gpurt_stream_t) -> gpurt_status_t {
    fill("gpurt_random_permutation", gen, out, n, dtype, Distribution::Permutation, stream)
}
