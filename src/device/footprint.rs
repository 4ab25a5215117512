//! Device memory the driver hands out inside gpurt's calls to other libraries and to
//! itself — math-library handles, loaded modules, NCCL communicators — which no gpurt
//! pool holds, so only the drop in the device's free memory (`cuMemGetInfo`) across
//! the creation shows it. Summed per device for the memory report. Another process or
//! thread allocating at the same moment is counted too: the driver's figure, not an
//! exact one.

use std::sync::{Mutex, OnceLock};

use crate::error::Result;

/// What a footprint was made by.
#[derive(Debug, Clone, Copy)]
pub enum Footprint {
    MathHandles = 0,
    Modules = 1,
    Communicators = 2,
}

static FOOTPRINTS: OnceLock<Box<[Mutex<[u64; 3]>]>> = OnceLock::new();

fn slot(device: i32) -> Option<&'static Mutex<[u64; 3]>> {
    FOOTPRINTS.get_or_init(|| super::per_device(|| Mutex::new([0; 3]))).get(device as usize)
}

/// Runs `create`, which makes `what` on each of `devices` (resolved ordinals), and
/// adds each device's drop in free memory across it to that device's footprint of
/// `what`. A device whose free memory cannot be read counts nothing.
pub fn measured<R>(devices: &[i32], what: Footprint, create: impl FnOnce() -> Result<R>) -> Result<R> {
    measured_each(devices, what, create).map(|(made, _)| made)
}

/// `measured`, with the bytes counted for each device, for `given_back` when what was
/// made is destroyed.
pub fn measured_each<R>(devices: &[i32], what: Footprint, create: impl FnOnce() -> Result<R>) -> Result<(R, Vec<u64>)> {
    let free = || devices.iter().map(|&d| super::mem_get_info(d).ok().map(|(free, _)| free as u64)).collect::<Vec<_>>();
    let before = free();
    let made = create()?;
    let mut counted = vec![0; devices.len()];
    for (((&d, before), after), counted) in devices.iter().zip(before).zip(free()).zip(&mut counted) {
        if let (Some(before), Some(after), Some(slot)) = (before, after, slot(d)) {
            *counted = before.saturating_sub(after);
            crate::boundary::lock(slot)[what as usize] += *counted;
        }
    }
    Ok((made, counted))
}

/// Takes `bytes` that `measured_each` counted off `device`'s footprint of `what`.
pub fn given_back(device: i32, what: Footprint, bytes: u64) {
    if let Some(slot) = slot(device) {
        let mut footprints = crate::boundary::lock(slot);
        footprints[what as usize] = footprints[what as usize].saturating_sub(bytes);
    }
}

/// The bytes `what` took on `device` (a resolved ordinal) so far, as measured.
pub fn of(device: i32, what: Footprint) -> u64 {
    slot(device).map_or(0, |slot| crate::boundary::lock(slot)[what as usize])
}
