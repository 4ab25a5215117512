//! Growable virtual buffers: an address range reserved once, with physical memory
//! mapped and unmapped in it on demand (cuda.core's `VirtualMemoryResource`, kvcached,
//! vAttention): a KV cache grows with its context at a fixed address instead of being
//! allocated for the longest. Mapped bytes are the device's: they count in its
//! statistics and under its per-process memory fraction, as the default pool's
//! segments do, and peers granted access reach them. A device sleep
//! (`gpurt_device_sleep`) puts them to sleep with its pools: their memory goes back,
//! their contents to host memory with an offload, and a wake maps them again at the
//! same addresses.

pub mod ffi;

use std::sync::{Arc, Mutex, Once};

use crate::alloc::device::allocator;
use crate::alloc::mempool::sleep::{add_device_sleepers, Sleeper};
use crate::alloc::pool::{HostStaging, SegmentSource, StagedRange};
use crate::boundary::lock;
use crate::device;
use crate::error::{Error, Result, Status};
use crate::handle::{Handle, Kind, Registry};

/// A reserved range and what is mapped in it.
struct VBuffer {
    device: i32,
    base: u64,
    /// Bytes reserved: `max_bytes` rounded up to the granularity.
    size: u64,
    granularity: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Mapped ranges as (offset, bytes), by offset; each is one driver mapping (kept
    /// while asleep: a wake maps them again).
    mapped: Vec<(u64, u64)>,
    asleep: Option<Asleep>,
}

/// A vbuffer put to sleep by a device sleep: its mode, and with an offload its bytes.
struct Asleep {
    offload: bool,
    host: Option<HostStaging>,
}

static VBUFFERS: Registry<VBuffer> = Registry::new(Kind::VBuffer);

/// Reserves `max_bytes` (rounded up to the device's mapping granularity) of addresses
/// on device `ordinal`; nothing is mapped.
pub fn create(ordinal: i32, max_bytes: u64) -> Result<Handle> {
    let a = allocator(ordinal)?;
    let source = a.source();
    if max_bytes == 0 {
        return Err(Error::invalid_argument("max_bytes 0: a vbuffer reserves at least one granule"));
    }
    if !source.can_map() {
        return Err(Error::not_supported(format!(
            "device {} has no virtual memory management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED): it cannot map memory into a reserved range",
            source.device()
        )));
    }
    let granularity = source.map_granularity();
    let size = max_bytes
        .checked_next_multiple_of(granularity)
        .filter(|&s| s <= 1 << 48)
        .ok_or_else(|| Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, format!("max_bytes {max_bytes} is past what a device can address")))?;
    static SLEEPS_WITH_ITS_DEVICE: Once = Once::new();
    SLEEPS_WITH_ITS_DEVICE.call_once(|| add_device_sleepers(of_device));
    let base = source.reserve_addresses(size)?;
    VBUFFERS
        .insert(VBuffer { device: source.device(), base, size, granularity, state: Mutex::default() })
        .inspect_err(|_| source.free_addresses(base, size))
}

/// The vbuffers of `device`, for its sleep.
fn of_device(device: i32) -> Vec<(Arc<dyn Sleeper>, String)> {
    let all = VBUFFERS.all().into_iter().filter(|vb| vb.device == device);
    all.map(|vb| {
        let name = format!("the vbuffer at {:#x}", vb.base);
        (vb as Arc<dyn Sleeper>, name)
    })
    .collect()
}

/// (base address, granularity, reserved bytes).
pub fn layout(handle: Handle) -> Result<(u64, u64, u64)> {
    let vb = VBUFFERS.get(handle)?;
    Ok((vb.base, vb.granularity, vb.size))
}

pub fn mapped_bytes(handle: Handle) -> Result<u64> {
    Ok(VBUFFERS.get(handle)?.mapped())
}

/// Bytes mapped in the vbuffers of `device`.
pub fn mapped_on(device: i32) -> u64 {
    VBUFFERS.all().iter().filter(|vb| vb.device == device).map(|vb| vb.mapped()).sum()
}

impl VBuffer {
    /// Bytes mapped (none while asleep).
    fn mapped(&self) -> u64 {
        let state = lock(&self.state);
        if state.asleep.is_some() { 0 } else { state.mapped.iter().map(|&(_, bytes)| bytes).sum() }
    }

    /// Checks that `[offset, offset + bytes)` is granule-aligned, not empty and inside.
    fn check_range(&self, offset: u64, bytes: u64) -> Result<()> {
        let g = self.granularity;
        if bytes == 0 || offset % g != 0 || bytes % g != 0 {
            return Err(Error::invalid_argument(format!(
                "offset {offset} and bytes {bytes} must be non-zero multiples of the granularity, {g} bytes (gpurt_vbuffer_granularity)"
            )));
        }
        if offset.checked_add(bytes).map_or(true, |end| end > self.size) {
            return Err(Error::invalid_argument(format!("[{offset}, {offset} + {bytes}) is past the vbuffer's {} bytes", self.size)));
        }
        Ok(())
    }

    /// The state, unless a device sleep holds the vbuffer.
    fn awake(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        let state = lock(&self.state);
        if state.asleep.is_some() {
            return Err(Error::invalid_argument(format!(
                "device {} sleeps (gpurt_device_sleep), and its vbuffers with it: wake it first",
                self.device
            )));
        }
        Ok(state)
    }

    /// The mapped ranges as (address, bytes).
    fn ranges(&self, state: &State) -> Vec<(u64, u64)> {
        state.mapped.iter().map(|&(o, b)| (self.base + o, b)).collect()
    }
}

impl Sleeper for VBuffer {
    fn holds(&self, addr: u64) -> bool {
        self.base <= addr && addr < self.base + self.size
    }
    /// Waits for the device, copies the mapped bytes to host memory with `offload`,
    /// then unmaps them.
    fn sleep(&self, offload: bool, admit: &dyn Fn() -> Result<()>) -> Result<()> {
        admit()?;
        let mut state = self.awake()?;
        let a = allocator(self.device)?;
        device::synchronize(self.device)?;
        let ranges = self.ranges(&state);
        let staged = StagedRange::packed(ranges.iter().copied());
        let host = match offload && !ranges.is_empty() {
            true => {
                let mut host = a.source().host_staging(ranges.iter().map(|r| r.1).sum())?;
                a.source().offload(&staged, &mut host)?;
                Some(host)
            }
            false => None,
        };
        for (i, &(addr, bytes)) in ranges.iter().enumerate() {
            if let Err(e) = a.unmap_outside(addr, bytes) {
                // Mapped again, so that the vbuffer is as it was.
                remap(a, &ranges[..i]).and_then(|()| host.as_ref().map_or(Ok(()), |h| a.source().restore(&staged[..i], h)))?;
                return Err(e);
            }
        }
        state.asleep = Some(Asleep { offload, host });
        Ok(())
    }
    /// Maps every range again, at its address, and copies its bytes back.
    fn wake(&self) -> Result<()> {
        let mut state = lock(&self.state);
        let Some(asleep) = &state.asleep else { return Ok(()) };
        let a = allocator(self.device)?;
        let ranges = self.ranges(&state);
        remap(a, &ranges)?;
        if let Some(host) = &asleep.host {
            a.source().restore(&StagedRange::packed(ranges), host)?;
        }
        state.asleep = None;
        Ok(())
    }
    fn sleep_mode(&self) -> Option<bool> {
        lock(&self.state).asleep.as_ref().map(|a| a.offload)
    }
    fn refuses_allocations(&self) -> bool {
        lock(&self.state).asleep.is_some()
    }
}

/// Maps `ranges` (address, bytes), each whole; on a failure unmaps those it mapped.
fn remap(a: &crate::alloc::caching::CachingAllocator<crate::alloc::upstream::DriverSource>, ranges: &[(u64, u64)]) -> Result<()> {
    for (i, &(addr, bytes)) in ranges.iter().enumerate() {
        if let Err(e) = a.map_outside(addr, bytes) {
            ranges[..i].iter().for_each(|&(addr, bytes)| drop(a.unmap_outside(addr, bytes)));
            return Err(e);
        }
    }
    Ok(())
}

/// Maps `bytes` of new physical memory at `offset`; refused (nothing changes) for a
/// range not aligned to the granularity, past the end, or overlapping what is mapped.
pub fn map(handle: Handle, offset: u64, bytes: u64) -> Result<()> {
    let vb = VBUFFERS.get(handle)?;
    vb.check_range(offset, bytes)?;
    let mut state = vb.awake()?;
    if let Some(&(o, b)) = state.mapped.iter().find(|&&(o, b)| o < offset + bytes && offset < o + b) {
        return Err(Error::invalid_argument(format!("[{offset}, {offset} + {bytes}) overlaps the mapped [{o}, {o} + {b}): unmap it first")));
    }
    allocator(vb.device)?.map_outside(vb.base + offset, bytes)?;
    let at = state.mapped.partition_point(|&(o, _)| o < offset);
    state.mapped.insert(at, (offset, bytes));
    Ok(())
}

/// The mappings that make up exactly `[offset, offset + bytes)`, as indices into
/// `mapped`; an error names a part not mapped or a mapping only partly inside.
fn whole_mappings(mapped: &[(u64, u64)], offset: u64, bytes: u64) -> Result<std::ops::Range<usize>> {
    let end = offset + bytes;
    let first = mapped.partition_point(|&(o, b)| o + b <= offset);
    let (mut at, mut i) = (offset, first);
    while at < end {
        match mapped.get(i) {
            Some(&(o, _)) if o > at => {
                return Err(Error::invalid_argument(format!("[{at}, {}) within [{offset}, {end}) is not mapped", o.min(end))))
            }
            Some(&(o, b)) if o < at || o + b > end => {
                return Err(Error::invalid_argument(format!(
                    "[{offset}, {end}) cuts the mapping [{o}, {}): unmap whole mappings, as they were mapped",
                    o + b
                )))
            }
            Some(&(_, b)) => {
                at += b;
                i += 1;
            }
            None => return Err(Error::invalid_argument(format!("[{at}, {end}) within [{offset}, {end}) is not mapped"))),
        }
    }
    Ok(first..i)
}

/// Unmaps `[offset, offset + bytes)`, which must be whole mappings, once the work
/// queued on `stream` before this call is done (the call waits for it).
pub fn unmap(handle: Handle, offset: u64, bytes: u64, stream: Handle) -> Result<()> {
    let vb = VBUFFERS.get(handle)?;
    vb.check_range(offset, bytes)?;
    crate::stream::get(stream)?;
    let mut state = vb.awake()?;
    let range = whole_mappings(&state.mapped, offset, bytes)?;
    crate::stream::synchronize(stream)?;
    let a = allocator(vb.device)?;
    // One mapping at a time, each forgotten once unmapped: a failure leaves the rest
    // mapped and listed.
    for _ in range.clone() {
        let (o, b) = state.mapped[range.start];
        a.unmap_outside(vb.base + o, b)?;
        state.mapped.remove(range.start);
    }
    Ok(())
}

/// Waits for the device, unmaps everything and gives the addresses back (asleep,
/// nothing is mapped, and its bytes are dropped). With nothing mapped no work can use
/// it, so there is no wait: a device-wide one invalidates the captures under way.
pub fn destroy(handle: Handle) -> Result<()> {
    let vb = VBUFFERS.get(handle)?;
    let mapped = {
        let state = lock(&vb.state);
        state.asleep.is_none() && !state.mapped.is_empty()
    };
    if mapped {
        device::synchronize(vb.device)?;
    }
    let a = allocator(vb.device)?;
    let mut state = lock(&vb.state);
    if state.asleep.take().is_some() {
        state.mapped.clear();
    }
    while let Some(&(o, b)) = state.mapped.last() {
        a.unmap_outside(vb.base + o, b)?;
        state.mapped.pop();
    }
    VBUFFERS.remove(handle)?;
    a.source().free_addresses(vb.base, vb.size);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 2 << 20;

    #[test]
    fn unmapping_takes_whole_mappings_only() {
        let mapped = [(0, G), (G, 2 * G), (4 * G, G)];
        assert_eq!(whole_mappings(&mapped, 0, 3 * G).unwrap(), 0..2);
        assert_eq!(whole_mappings(&mapped, G, 2 * G).unwrap(), 1..2);
        assert_eq!(whole_mappings(&mapped, 4 * G, G).unwrap(), 2..3);
        assert!(whole_mappings(&mapped, 0, 2 * G).unwrap_err().message.contains("cuts the mapping"));
        assert!(whole_mappings(&mapped, 2 * G, G).unwrap_err().message.contains("cuts the mapping"));
        assert!(whole_mappings(&mapped, 3 * G, G).unwrap_err().message.contains("not mapped"));
        assert!(whole_mappings(&mapped, 0, 5 * G).unwrap_err().message.contains("not mapped"));
        assert!(whole_mappings(&[], 0, G).unwrap_err().message.contains("not mapped"));
    }
}
