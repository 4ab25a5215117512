//! TunableOp (PyTorch's): an operation with several implementations, each timed
//! once per problem signature on first use; the fastest is used from then on and
//! written to a results file, so later processes skip the tuning. `tuner.rs` makes
//! the choice, `results.rs` keeps the file; here are the ops, the GPU timing and the
//! per-device results.
//!
//! Environment (read once): `GPURT_TUNABLEOP_ENABLED` (default 1; 0: always the
//! first candidate), `GPURT_TUNABLEOP_TUNING` (default 1; 0: recorded choices only,
//! else the first candidate), `GPURT_TUNABLEOP_FILENAME` (default
//! `gpurt_tunableop_results%d.csv`, `%d` the device ordinal; empty: no file),
//! `GPURT_TUNABLEOP_MAX_TUNING_DURATION_MS` (per candidate, default 30),
//! `GPURT_TUNABLEOP_MAX_TUNING_ITERATIONS` (default 100).

pub mod ffi;
pub mod results;
pub mod tuner;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys;

use crate::boundary::lock;
use crate::driver::check;
use crate::error::{Error, Result, Status};
use crate::handle::{Handle, Kind, Registry};
use crate::stream::ffi::gpurt_stream_t;
use results::{Choice, Choices, Validators};
use tuner::{Bench, Budget};

/// Enqueues a candidate's work on `stream` for `args`; returns a `gpurt_status_t`
/// value (an int here: a C caller may return any int, and an unknown one is an error).
pub type CandidateFn = unsafe extern "C" fn(args: *mut libc::c_void, stream: gpurt_stream_t, context: *mut libc::c_void) -> libc::c_int;
/// Whether candidate `candidate`'s result for `args` is acceptable (nonzero: yes);
/// called after its first run, with the stream synchronised.
pub type ValidatorFn = unsafe extern "C" fn(args: *mut libc::c_void, candidate: libc::c_int, context: *mut libc::c_void) -> libc::c_int;

enum Work {
    Callback { f: CandidateFn, context: usize },
    /// A kernel launched with `args` as its parameter array.
    Kernel { kernel: Handle, shape: crate::kernel::LaunchShape },
}

struct Candidate {
    name: String,
    work: Work,
}

pub struct TunableOp {
    name: String,
    candidates: Mutex<Vec<Arc<Candidate>>>,
    validator: Mutex<Option<(ValidatorFn, usize)>>,
    /// (device, signature) to the chosen candidate.
    chosen: Mutex<HashMap<(i32, String), usize>>,
    /// Held while a signature is tuned, so that concurrent first runs tune once.
    tuning: Mutex<()>,
    tunings: AtomicU64,
}

struct Config {
    enabled: bool,
    tuning: bool,
    filename: String,
    budget: Budget,
}

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let var = |name: &str| std::env::var(format!("GPURT_TUNABLEOP_{name}")).ok();
        let flag = |name: &str| var(name).map_or(true, |v| v != "0");
        // An environment value is untrusted text: out of bounds, the default is used.
        fn bounded<T>(name: &str, text: Option<String>, parse: fn(&str) -> Option<T>, default: T) -> T {
            let Some(text) = text else { return default };
            parse(&text).unwrap_or_else(|| {
                crate::log::log(crate::log::Level::Warn, &format!("GPURT_TUNABLEOP_{name}={text:?} is out of bounds; the default is used"));
                default
            })
        }
        Config {
            enabled: flag("ENABLED"),
            tuning: flag("TUNING"),
            filename: var("FILENAME").unwrap_or_else(|| "gpurt_tunableop_results%d.csv".into()),
            budget: Budget {
                duration_ms: bounded("MAX_TUNING_DURATION_MS", var("MAX_TUNING_DURATION_MS"), tuner::parse_duration_ms, 30.0),
                max_iterations: bounded("MAX_TUNING_ITERATIONS", var("MAX_TUNING_ITERATIONS"), tuner::parse_iterations, 100),
            },
        }
    })
}

static OPS: Registry<TunableOp> = Registry::new(Kind::TunableOp);

fn op(handle: Handle) -> Result<Arc<TunableOp>> {
    OPS.get(handle)
}

pub fn create(name: &str) -> Result<Handle> {
    results::check_field("name", name)?;
    let op = TunableOp {
        name: name.to_string(),
        candidates: Mutex::new(Vec::new()),
        validator: Mutex::new(None),
        chosen: Mutex::new(HashMap::new()),
        tuning: Mutex::new(()),
        tunings: AtomicU64::new(0),
    };
    OPS.insert(op)
}

pub fn destroy(handle: Handle) -> Result<()> {
    OPS.remove(handle)
}

fn add(handle: Handle, name: &str, work: Work) -> Result<()> {
    results::check_field("candidate name", name)?;
    let op = op(handle)?;
    let mut candidates = lock(&op.candidates);
    if candidates.iter().any(|c| c.name == name) {
        return Err(Error::invalid_argument(format!("the TunableOp {} has a candidate named {name:?} already", op.name)));
    }
    candidates.push(Arc::new(Candidate { name: name.to_string(), work }));
    Ok(())
}

pub fn add_callback(handle: Handle, name: &str, f: CandidateFn, context: usize) -> Result<()> {
    add(handle, name, Work::Callback { f, context })
}

pub fn add_kernel(handle: Handle, name: &str, kernel: Handle, shape: crate::kernel::LaunchShape) -> Result<()> {
    shape.validate()?;
    crate::kernel::kernel_device(kernel)?;
    add(handle, name, Work::Kernel { kernel, shape })
}

pub fn set_validator(handle: Handle, validator: Option<(ValidatorFn, usize)>) -> Result<()> {
    *lock(&op(handle)?.validator) = validator;
    Ok(())
}

impl Candidate {
    fn run(&self, args: usize, stream: Handle) -> Result<()> {
        match self.work {
            Work::Callback { f, context } => {
                let status = unsafe { f(args as *mut libc::c_void, stream.to_ptr(), context as *mut libc::c_void) };
                match Status::from_raw(status) {
                    Some(Status::GPURT_SUCCESS) => Ok(()),
                    Some(other) => Err(Error::new(other, format!("candidate {} returned {}", self.name, other.description().to_string_lossy()))),
                    None => Err(Error::invalid_argument(format!("candidate {} returned the unknown status {status}", self.name))),
                }
            }
            // SAFETY: the caller's contract for `args` is cuLaunchKernel's (gpurt_tunable_op_run).
            Work::Kernel { kernel, shape } => unsafe { crate::kernel::launch(kernel, &shape, stream, args as *mut *mut libc::c_void) },
        }
    }
}

/// Timing on the GPU: runs on the caller's stream, measured with events.
struct GpuBench<'a> {
    candidates: &'a [Arc<Candidate>],
    validator: Option<(ValidatorFn, usize)>,
    args: usize,
    stream: Handle,
    native: sys::CUstream,
}

impl Bench for GpuBench<'_> {
    fn candidates(&self) -> usize {
        self.candidates.len()
    }
    fn name(&self, c: usize) -> String {
        self.candidates[c].name.clone()
    }
    fn run(&self, c: usize) -> Result<()> {
        self.candidates[c].run(self.args, self.stream)
    }
    fn valid(&self, c: usize) -> Result<bool> {
        let Some((validator, context)) = self.validator else { return Ok(true) };
        check(unsafe { sys::cuStreamSynchronize(self.native) }, "cuStreamSynchronize")?;
        Ok(unsafe { validator(self.args as *mut libc::c_void, c as libc::c_int, context as *mut libc::c_void) } != 0)
    }
    fn time(&self, c: usize, iterations: u32) -> Result<f64> {
        let (mut start, mut end) = (std::ptr::null_mut(), std::ptr::null_mut());
        check(unsafe { sys::cuEventCreate(&mut start, 0) }, "cuEventCreate")?;
        let timed = (|| {
            check(unsafe { sys::cuEventCreate(&mut end, 0) }, "cuEventCreate")?;
            check(unsafe { sys::cuEventRecord(start, self.native) }, "cuEventRecord")?;
            (0..iterations).try_for_each(|_| self.run(c))?;
            check(unsafe { sys::cuEventRecord(end, self.native) }, "cuEventRecord")?;
            check(unsafe { sys::cuEventSynchronize(end) }, "cuEventSynchronize")?;
            let mut ms = 0f32;
            check(unsafe { sys::cuEventElapsedTime(&mut ms, start, end) }, "cuEventElapsedTime")?;
            Ok(ms as f64 / iterations as f64)
        })();
        unsafe {
            sys::cuEventDestroy_v2(start);
            if !end.is_null() {
                sys::cuEventDestroy_v2(end);
            }
        }
        timed
    }
}

/// One device's recorded choices, read from its file on first use.
struct DeviceResults {
    path: Option<String>,
    validators: Validators,
    choices: Choices,
}

static RESULTS: Mutex<Option<HashMap<i32, DeviceResults>>> = Mutex::new(None);

/// What the choices of `device` were measured on.
fn validators(device: i32) -> Result<Validators> {
    let props = crate::device::properties(device)?;
    let entries = [
        ("GPURT_VERSION", env!("CARGO_PKG_VERSION").to_string()),
        ("DRIVER_VERSION", crate::driver::driver_version()?.to_string()),
        ("DEVICE_NAME", props.name().replace(',', " ")),
        ("COMPUTE_CAPABILITY", format!("{}.{}", props.major, props.minor)),
    ];
    Ok(entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn with_results<T>(device: i32, f: impl FnOnce(&mut DeviceResults) -> T) -> Result<T> {
    let mut all = lock(&RESULTS);
    let all = all.get_or_insert_with(HashMap::new);
    let results = match all.entry(device) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(load_results(device)?),
    };
    Ok(f(results))
}

/// `device`'s results file, read where it exists and was measured on this device,
/// driver and gpurt (else ignored, with a log line).
fn load_results(device: i32) -> Result<DeviceResults> {
    let filename = &config().filename;
    let path = (!filename.is_empty()).then(|| filename.replace("%d", &device.to_string()));
    let validators = validators(device)?;
    let mut choices = Choices::new();
    if let Some((path, text)) = path.as_ref().and_then(|p| Some((p, std::fs::read_to_string(p).ok()?))) {
        match results::parse(&text, &validators) {
            Ok(read) => {
                read.skipped.iter().for_each(|line| crate::log::log(crate::log::Level::Warn, &format!("TunableOp results {path}: {line}")));
                choices = read.choices;
            }
            Err(why) => crate::log::log(crate::log::Level::Warn, &format!("TunableOp results {path} ignored: {why}")),
        }
    }
    Ok(DeviceResults { path, validators, choices })
}

/// Runs `handle`'s op for the problem `signature` on `stream`, choosing its
/// candidate as the module notes say.
pub fn run(handle: Handle, signature: &str, args: usize, stream: Handle) -> Result<()> {
    results::check_field("signature", signature)?;
    let op = op(handle)?;
    let s = crate::stream::get(stream)?;
    let candidates: Vec<Arc<Candidate>> = lock(&op.candidates).clone();
    if candidates.is_empty() {
        return Err(Error::invalid_argument(format!("the TunableOp {} has no candidates", op.name)));
    }
    let device = s.device();
    let key = (device, signature.to_string());
    let known = |op: &TunableOp| lock(&op.chosen).get(&key).copied();
    if let Some(c) = known(&op).filter(|&c| c < candidates.len()) {
        return candidates[c].run(args, stream);
    }
    let config = config();
    if !config.enabled {
        return candidates[0].run(args, stream);
    }
    let recorded = with_results(device, |r| r.choices.get(&(op.name.clone(), signature.to_string())).map(|c| c.candidate.clone()))?;
    if let Some(c) = recorded.and_then(|name| candidates.iter().position(|c| c.name == name)) {
        lock(&op.chosen).insert(key, c);
        return candidates[c].run(args, stream);
    }
    let capturing = crate::device::with_device(device, || crate::stream::native_capture_info(s.raw as u64))?.status
        != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    if !config.tuning || capturing {
        if capturing {
            crate::log::log(crate::log::Level::Info, &format!("TunableOp {} {signature}: not tuned during a capture; the first candidate runs", op.name));
        }
        return candidates[0].run(args, stream);
    }
    let _tuning = lock(&op.tuning);
    if let Some(c) = known(&op) {
        return candidates[c].run(args, stream);
    }
    let bench = GpuBench { candidates: &candidates, validator: *lock(&op.validator), args, stream, native: s.raw as sys::CUstream };
    let (chosen, micros) = crate::device::with_device(device, || tuner::tune(&bench, config.budget))?;
    op.tunings.fetch_add(1, Ordering::Relaxed);
    lock(&op.chosen).insert(key, chosen);
    with_results(device, |r| {
        r.choices.insert((op.name.clone(), signature.to_string()), Choice { candidate: candidates[chosen].name.clone(), micros });
        r.path.as_ref().map(|path| results::write_atomically(path, &results::render(&r.validators, &r.choices)))
    })?
    .transpose()?;
    candidates[chosen].run(args, stream)
}

/// The candidate chosen for `signature` on `device` (`None`: none yet), and how
/// many signatures this op has tuned in this process.
pub fn choice(handle: Handle, device: i32, signature: &str) -> Result<(Option<String>, u64)> {
    let op = op(handle)?;
    let chosen = lock(&op.chosen).get(&(device, signature.to_string())).copied();
    let name = chosen.and_then(|c| lock(&op.candidates).get(c).map(|c| c.name.clone()));
    Ok((name, op.tunings.load(Ordering::Relaxed)))
}
