use libc::{c_char, c_int, c_void};

use crate::boundary::{self, in_str, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::kernel::ffi::{gpurt_kernel_t, gpurt_launch_config_t};
use crate::stream::ffi::gpurt_stream_t;

/// An operation with several implementations, timed per problem signature on
/// first use (PyTorch's TunableOp).
pub struct gpurt_tunable_op_s {
    _opaque: [u8; 0],
}
/// The handle of a TunableOp: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_tunable_op_t = *mut gpurt_tunable_op_s;

/// A candidate implementation: enqueues the op's work for `args` on `stream` and
/// returns a gpurt_status_t value (GPURT_SUCCESS, or the error that passes it over).
/// It may run several times for one gpurt_tunable_op_run (while tuning), so the op
/// must be safe to repeat.
pub type gpurt_tunable_candidate_fn = Option<unsafe extern "C" fn(args: *mut c_void, stream: gpurt_stream_t, context: *mut c_void) -> c_int>;

/// Checks candidate number `candidate`'s result for `args` after its first run
/// (the stream synchronised): nonzero accepts it.
pub type gpurt_tunable_validator_fn = Option<unsafe extern "C" fn(args: *mut c_void, candidate: c_int, context: *mut c_void) -> c_int>;

fn op(op: gpurt_tunable_op_t) -> Handle {
    Handle::from_ptr(op)
}

/// A new op named `name` (no commas or line breaks: it is a field of the results file).
///
/// @param name the op's name: no commas or line breaks
/// @param[out] op receives the new op; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a NULL or malformed `name`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_tunable_op_create(name: *const c_char, op: *mut gpurt_tunable_op_t) -> gpurt_status_t {
    boundary::call("gpurt_tunable_op_create", || {
        let out = Out::new(op, "op")?;
        out.write(super::create(in_str(name, "name")?)?.to_ptr());
        Ok(())
    })
}

/// Destroys an op.
/// @param op an op from gpurt_tunable_op_create
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `op`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_tunable_op_destroy(op: gpurt_tunable_op_t) -> gpurt_status_t {
    boundary::call("gpurt_tunable_op_destroy", || super::destroy(self::op(op)))
}

/// Adds a candidate that `run` enqueues (with `context` as its last argument). The
/// first candidate added is the op's default: it runs where tuning is off and no
/// choice is recorded.
///
/// @param op an op from gpurt_tunable_op_create
/// @param name the candidate's name: no commas or line breaks
/// @param run `int run(void *args, gpurt_stream_t stream, void *context)`: enqueues the candidate's work and returns a gpurt_status_t
/// @param context passed to `run`
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `op`; GPURT_ERROR_INVALID_ARGUMENT for a NULL `run`, or a NULL, malformed or repeated `name`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_tunable_op_add_callback(op: gpurt_tunable_op_t, name: *const c_char, run: gpurt_tunable_candidate_fn, context: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_tunable_op_add_callback", || {
        let run = run.ok_or_else(|| crate::Error::invalid_argument("argument `run` is NULL"))?;
        super::add_callback(self::op(op), in_str(name, "name")?, run, context as usize)
    })
}

/// Adds a candidate that launches `kernel` with `config`'s grid, block and shared
/// memory (its stream is ignored: the op's run gives one), the run's `args` being
/// the kernel's parameter array (the cuLaunchKernel convention).
///
/// @param op an op from gpurt_tunable_op_create
/// @param name the candidate's name
/// @param kernel the kernel to launch
/// @param config its grid, block and shared memory (the stream is ignored)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `op` or `kernel`; GPURT_ERROR_INVALID_ARGUMENT for a NULL `config`, or a NULL, malformed or repeated `name`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_tunable_op_add_kernel(op: gpurt_tunable_op_t, name: *const c_char, kernel: gpurt_kernel_t, config: *const gpurt_launch_config_t) -> gpurt_status_t {
    boundary::call("gpurt_tunable_op_add_kernel", || {
        let (shape, _stream) = crate::kernel::ffi::launch_shape(config)?;
        super::add_kernel(self::op(op), in_str(name, "name")?, Handle::from_ptr(kernel), shape)
    })
}

/// Sets (or, with NULL, clears) the check each candidate's result must pass while
/// tuning; a rejected candidate is never chosen.
///
/// @param op an op from gpurt_tunable_op_create
/// @param validator `int validator(void *args, int candidate, void *context)`; NULL clears it
/// @param context passed to `validator`
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `op`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_tunable_op_set_validator(op: gpurt_tunable_op_t, validator: gpurt_tunable_validator_fn, context: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_tunable_op_set_validator", || super::set_validator(self::op(op), validator.map(|v| (v, context as usize))))
}

/// Runs the op for the problem `signature` (its shape, dtypes...: no commas or line
/// breaks) with `args` on `stream`. A signature's first run on a device times every
/// candidate and keeps the fastest (written to the results file), unless a choice
/// is recorded; during a stream capture no tuning happens (the first candidate
/// runs). Concurrent first runs of one signature tune once.
///
/// @param op an op from gpurt_tunable_op_create
/// @param signature the problem's description: no commas or line breaks
/// @param args passed to the candidate
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `op` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL or malformed `signature`, or an op without candidates; the candidate's own status; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueues the chosen candidate on `stream`. A signature's first run, tuning, times every candidate: it synchronises `stream` (a synchronising call) and writes the results file. During a capture no tuning happens.
#[no_mangle]
pub extern "C" fn gpurt_tunable_op_run(op: gpurt_tunable_op_t, signature: *const c_char, args: *mut c_void, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_tunable_op_run", || super::run(self::op(op), in_str(signature, "signature")?, args as usize, Handle::from_ptr(stream)))
}

/// The name of the candidate chosen for `signature` on `device` (an empty string
/// while none is), up to `capacity` bytes with its NUL, and how many signatures the
/// op has tuned in this process (either output may be NULL).
///
/// @param op an op from gpurt_tunable_op_create
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param signature the problem
/// @param name receives the chosen candidate's name (empty while none is); may be NULL
/// @param capacity bytes `name` holds
/// @param[out] tunings receives how many signatures the op has tuned in this process; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `op`; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_INVALID_ARGUMENT for a NULL `signature`, or a name longer than `capacity`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_tunable_op_choice(
    op: gpurt_tunable_op_t,
    device: c_int,
    signature: *const c_char,
    name: *mut c_char,
    capacity: usize,
    tunings: *mut u64,
) -> gpurt_status_t {
    boundary::call("gpurt_tunable_op_choice", || {
        let (chosen, tuned) = super::choice(self::op(op), device, in_str(signature, "signature")?)?;
        if !name.is_null() {
            boundary::write_c_string(name, capacity, &chosen.unwrap_or_default());
        }
        boundary::write_optional([(tunings, tuned)]);
        Ok(())
    })
}
