//! Random numbers on the GPU (torch.cuda's generators, cupy.random): a default
//! generator per device and generators users create, each a Philox4x32-10 stream
//! named by its seed, and a counter offset (in Philox blocks of four words) that
//! each fill advances by the blocks it used. `philox.rs` is the generator and the
//! maps to each distribution, on the host; `kernels.rs` the same on the GPU.
//!
//! A fill captured in a graph reads its base offset from device memory (the
//! generator's `cell`): a replay hook of the graph writes the generator's offset
//! there, on the launch stream, before each replay, and advances the offset by what
//! the graph draws, so each replay draws new numbers (PyTorch's scheme).

pub mod ffi;
pub mod kernels;
pub mod philox;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys;

use crate::alloc::capture::alloc_beside_capture;
use crate::alloc::pool::SegmentSource;
use crate::alloc::upstream::DriverSource;
use crate::boundary::lock;
use crate::device::{self, per_device, PerDeviceOnce};
use crate::driver::check;
use crate::dtype::gpurt_dtype_t;
use crate::error::{Error, Result};
use crate::handle::{Handle, Kind, Registry};
use kernels::{Distribution, Draw, Fill};

/// The seed every default generator starts from: torch's default CUDA seed
/// (`default_rng_seed_val`), so a program that never seeds draws the same numbers on
/// every run, as under PyTorch.
pub const GPURT_RNG_DEFAULT_SEED: u64 = 67_280_421_310_721;

/// A generator's state as bytes a caller keeps: the seed and the counter offset.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct gpurt_rng_state_t {
    /// The generator's seed.
    pub seed: u64,
    /// Philox blocks (128 bits each) drawn so far.
    pub offset: u64,
}

struct State {
    seed: u64,
    offset: u64,
    /// The seed set last (`gpurt_rng_initial_seed`).
    initial_seed: u64,
    /// Device memory holding a graph replay's base offset (0: not made yet).
    cell: u64,
}

pub struct Generator {
    device: i32,
    state: Mutex<State>,
}

/// The replay cell: one u64.
const CELL_BYTES: u64 = 8;

impl Generator {
    fn new(device: i32, seed: u64) -> Generator {
        Generator { device, state: Mutex::new(State { seed, offset: 0, initial_seed: seed, cell: 0 }) }
    }
}

impl Drop for Generator {
    /// A destroyed generator's cell goes back once no graph's replay hook holds it.
    fn drop(&mut self) {
        let cell = lock(&self.state).cell;
        if cell != 0 {
            DriverSource::new(self.device).release(cell, CELL_BYTES);
        }
    }
}

static DEFAULTS: PerDeviceOnce<Arc<Generator>> = OnceLock::new();
static CREATED: Registry<Generator> = Registry::new(Kind::Generator);

/// `ordinal`'s default generator.
fn default_generator(ordinal: i32) -> Result<Arc<Generator>> {
    let d = device::resolve(ordinal)?;
    let all = DEFAULTS.get_or_init(|| per_device(OnceLock::new));
    Ok(all[d as usize].get_or_init(|| Arc::new(Generator::new(d, GPURT_RNG_DEFAULT_SEED))).clone())
}

/// The generator a handle names; `None`: the current device's default.
fn generator(handle: Option<Handle>) -> Result<Arc<Generator>> {
    match handle {
        None => default_generator(device::current()?),
        Some(h) => CREATED.get(h),
    }
}

pub fn create(ordinal: i32, seed: u64) -> Result<Handle> {
    CREATED.insert(Generator::new(device::resolve(ordinal)?, seed))
}

pub fn destroy(handle: Handle) -> Result<()> {
    CREATED.remove(handle)
}

fn seed_generator(generator: &Generator, seed: u64) {
    let mut state = lock(&generator.state);
    (state.seed, state.offset, state.initial_seed) = (seed, 0, seed);
}

/// `torch.cuda.manual_seed(seed)` for `ordinal`'s default generator.
pub fn manual_seed(ordinal: i32, seed: u64) -> Result<()> {
    seed_generator(&*default_generator(ordinal)?, seed);
    Ok(())
}

/// `torch.cuda.manual_seed_all(seed)`: every device's default generator.
pub fn manual_seed_all(seed: u64) -> Result<()> {
    (0..device::count()?).try_for_each(|d| manual_seed(d, seed))
}

/// Seeds `ordinal`'s default generator from the operating system's entropy and
/// gives the seed (`torch.cuda.seed()`).
pub fn seed_randomly(ordinal: i32) -> Result<u64> {
    let generator = default_generator(ordinal)?;
    let mut seed = 0u64;
    let read = unsafe { libc::getrandom((&mut seed as *mut u64).cast(), 8, 0) };
    if read != 8 {
        return Err(Error::new(crate::error::Status::GPURT_ERROR_INTERNAL, "getrandom gave no seed"));
    }
    seed_generator(&generator, seed);
    Ok(seed)
}

pub fn initial_seed(ordinal: i32) -> Result<u64> {
    Ok(lock(&default_generator(ordinal)?.state).initial_seed)
}

pub fn get_state(handle: Option<Handle>) -> Result<gpurt_rng_state_t> {
    let generator = generator(handle)?;
    let state = lock(&generator.state);
    Ok(gpurt_rng_state_t { seed: state.seed, offset: state.offset })
}

pub fn set_state(handle: Option<Handle>, new: &gpurt_rng_state_t) -> Result<()> {
    let generator = generator(handle)?;
    let mut state = lock(&generator.state);
    (state.seed, state.offset) = (new.seed, new.offset);
    Ok(())
}

/// A generator's draws inside one capture: its replay hook.
struct CapturedDraws {
    generator: Arc<Generator>,
    capture: u64,
    /// Philox blocks the capture's fills draw, each from its own offset past the base.
    blocks: Mutex<u64>,
}

/// Per (capture, generator address), its draws so far.
type CapturedByKey = HashMap<(u64, usize), Arc<CapturedDraws>>;
static CAPTURED: Mutex<Option<CapturedByKey>> = Mutex::new(None);

impl crate::graph::ReplayHook for CapturedDraws {
    fn before_replay(&self, native_stream: u64, device: i32) -> Result<()> {
        let blocks = *lock(&self.blocks);
        let mut state = lock(&self.generator.state);
        let base = state.offset;
        let stream = native_stream as sys::CUstream;
        device::with_device(device, || {
            check(unsafe { sys::cuMemsetD32Async(state.cell, base as u32, 1, stream) }, "cuMemsetD32Async")?;
            check(unsafe { sys::cuMemsetD32Async(state.cell + 4, (base >> 32) as u32, 1, stream) }, "cuMemsetD32Async")
        })?;
        state.offset += blocks;
        Ok(())
    }
    fn capture_ended(&self) {
        lock(&CAPTURED).as_mut().map(|c| c.remove(&(self.capture, Arc::as_ptr(&self.generator) as usize)));
    }
}

/// The generator's replay cell, made on first use (outside the capture's graph).
fn replay_cell(generator: &Generator, state: &mut State) -> Result<u64> {
    if state.cell == 0 {
        state.cell = alloc_beside_capture(&DriverSource::new(generator.device), CELL_BYTES)?;
    }
    Ok(state.cell)
}

/// Fills `n` values of `dtype` at `out` from `distribution` on `stream`, drawing
/// from `handle`'s generator (`None`: the stream's device's default). The generator
/// advances only when the fill was enqueued.
pub fn fill(handle: Option<Handle>, out: u64, n: u64, dtype: gpurt_dtype_t, distribution: Distribution, stream: Handle) -> Result<()> {
    distribution.check(dtype)?;
    let s = crate::stream::get(stream)?;
    // The handles are checked before an empty fill returns: a forged or destroyed
    // generator is an error whatever the count.
    let generator = match handle {
        None => default_generator(s.device())?,
        Some(_) => generator(handle)?,
    };
    if generator.device != s.device() {
        return Err(Error::invalid_argument(format!("the generator is on device {}, the stream on device {}", generator.device, s.device())));
    }
    if n == 0 {
        return Ok(());
    }
    if out == 0 {
        return Err(Error::invalid_argument("out is NULL"));
    }
    crate::alloc::device::require_awake(out)?;
    if distribution == Distribution::Permutation && dtype == gpurt_dtype_t::GPURT_DTYPE_I32 && n > i32::MAX as u64 + 1 {
        return Err(Error::invalid_argument(format!("a permutation of {n} indices needs dtype I64")));
    }
    let bytes = crate::boundary::checked_bytes(n, dtype.size(), "n")?;
    crate::boundary::check_range(out, bytes, "n")?;
    if out % dtype.size() != 0 {
        return Err(Error::invalid_argument(format!("out {out:#x} is not aligned to its {}-byte elements", dtype.size())));
    }
    let fill = Fill { distribution, dtype, out, n };
    let blocks = distribution.blocks(dtype, n);
    crate::sanitizer::access(s, out, bytes, crate::sanitizer::Access::Write, "gpurt_rng fill");
    let capture = device::with_device(s.device(), || crate::stream::native_capture_info(s.raw as u64))?;
    if capture.status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
        return fill_in_capture(generator, capture.id, &fill, blocks, stream);
    }
    let mut state = lock(&generator.state);
    kernels::launch(&fill, Draw { seed: state.seed, offset: state.offset, cell: 0 }, stream)?;
    state.offset += blocks;
    Ok(())
}

/// A fill inside a capture: its offset is the generator's at each replay (read from
/// the cell) plus the blocks this capture's earlier fills draw.
fn fill_in_capture(generator: Arc<Generator>, capture: u64, fill: &Fill, blocks: u64, stream: Handle) -> Result<()> {
    let key = (capture, Arc::as_ptr(&generator) as usize);
    let (draws, new) = {
        let mut captured = lock(&CAPTURED);
        let captured = captured.get_or_insert_with(HashMap::new);
        match captured.get(&key) {
            Some(draws) => (draws.clone(), false),
            None => {
                let draws = Arc::new(CapturedDraws { generator: generator.clone(), capture, blocks: Mutex::new(0) });
                captured.insert(key, draws.clone());
                (draws, true)
            }
        }
    };
    let (seed, cell) = {
        let mut state = lock(&generator.state);
        (state.seed, replay_cell(&generator, &mut state)?)
    };
    let mut drawn = lock(&draws.blocks);
    if let Err(e) = kernels::launch(fill, Draw { seed, offset: *drawn, cell }, stream) {
        if new {
            lock(&CAPTURED).as_mut().map(|c| c.remove(&key));
        }
        return Err(e);
    }
    *drawn += blocks;
    drop(drawn);
    if new {
        crate::graph::add_replay_hook(capture, draws);
    }
    Ok(())
}
