//! Peer access. `cuCtxEnablePeerAccess` opens a device's `cuMemAlloc` memory to a
//! peer, but memory mapped by the VMM calls (expandable segments, imported IPC blocks
//! of them) is open only to the devices `cuMemSetAccess` names. So this module keeps,
//! per device, the peers granted access to its memory and the VMM ranges mapped on
//! it, and sets access on the side that changes: a new mapping opens to its device
//! and every peer, a new peer gets every mapping (as PyTorch's expandable segments
//! do). One lock orders the two, so a mapping made while a peer is granted misses
//! neither.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use cudarc::driver::sys::{self, CUmemAccess_flags as Flags};

use crate::boundary::lock;
use crate::driver::check;
use crate::error::Result;

/// Who may access whose memory, and the VMM ranges mapped on each device. Only
/// bookkeeping: the driver calls are the caller's, from what the methods return.
#[derive(Default)]
struct Peers {
    /// (owner, accessor): `accessor` may access `owner`'s memory.
    granted: BTreeSet<(i32, i32)>,
    /// (owner, start) -> size of each range mapped by the VMM calls.
    ranges: BTreeMap<(i32, u64), u64>,
}

impl Peers {
    /// The devices a new mapping on `owner` opens to: `owner`, then its peers.
    fn devices_for(&self, owner: i32) -> Vec<i32> {
        std::iter::once(owner).chain(self.granted.range((owner, i32::MIN)..=(owner, i32::MAX)).map(|&(_, a)| a)).collect()
    }

    /// The ranges mapped on `owner`, as (start, size).
    fn ranges_of(&self, owner: i32) -> Vec<(u64, u64)> {
        self.ranges.range((owner, 0)..=(owner, u64::MAX)).map(|(&(_, start), &size)| (start, size)).collect()
    }

    /// Forgets the ranges of `owner` that start within `[start, start + size)`.
    fn forget(&mut self, owner: i32, start: u64, size: u64) {
        let gone: Vec<_> = self.ranges.range((owner, start)..(owner, start.saturating_add(size))).map(|(&k, _)| k).collect();
        gone.iter().for_each(|k| {
            self.ranges.remove(k);
        });
    }
}

static PEERS: Mutex<Peers> = Mutex::new(Peers { granted: BTreeSet::new(), ranges: BTreeMap::new() });

fn access_desc(device: i32, flags: Flags) -> sys::CUmemAccessDesc {
    let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = device;
    desc.flags = flags;
    desc
}

/// Sets `flags` for each of `devices` on `[start, start + size)`.
fn set_access(start: u64, size: u64, devices: &[i32], flags: Flags) -> Result<()> {
    let descs: Vec<_> = devices.iter().map(|&d| access_desc(d, flags)).collect();
    // SAFETY: the range is mapped (the callers map it first); descs outlives the call.
    check(unsafe { sys::cuMemSetAccess(start, size as usize, descs.as_ptr(), descs.len()) }, "cuMemSetAccess")
}

/// Opens `[start, start + size)`, just mapped with `owner`'s memory, to `owner` and
/// to every peer granted access to it, and records it for peers granted later.
/// Call `unmapped` before unmapping it.
pub(crate) fn mapped(owner: i32, start: u64, size: u64) -> Result<()> {
    let mut peers = lock(&PEERS);
    set_access(start, size, &peers.devices_for(owner), Flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE)?;
    peers.ranges.insert((owner, start), size);
    Ok(())
}

/// Forgets the ranges of `owner` that `mapped` recorded within `[start, start + size)`.
pub(crate) fn unmapped(owner: i32, start: u64, size: u64) {
    lock(&PEERS).forget(owner, start, size);
}

/// Records that `accessor` may (`enable`) or may not access `owner`'s memory, and
/// sets that on every VMM range mapped on `owner`. A grant that fails part way is
/// taken back from the ranges it reached, so it leaves nothing half open.
pub(super) fn set_granted(owner: i32, accessor: i32, enable: bool) -> Result<()> {
    let mut peers = lock(&PEERS);
    let ranges = peers.ranges_of(owner);
    if !enable {
        peers.granted.remove(&(owner, accessor));
        // Every range is revoked even if one fails; the first failure is reported.
        let revoked: Vec<_> = ranges.iter().map(|&(start, size)| set_access(start, size, &[accessor], Flags::CU_MEM_ACCESS_FLAGS_PROT_NONE)).collect();
        return revoked.into_iter().collect();
    }
    if !peers.granted.insert((owner, accessor)) {
        return Ok(());
    }
    for (i, &(start, size)) in ranges.iter().enumerate() {
        if let Err(e) = set_access(start, size, &[accessor], Flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
            for &(start, size) in &ranges[..i] {
                let _ = set_access(start, size, &[accessor], Flags::CU_MEM_ACCESS_FLAGS_PROT_NONE);
            }
            peers.granted.remove(&(owner, accessor));
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Peers;

    #[test]
    fn a_mapping_opens_to_its_device_then_its_peers() {
        let mut p = Peers::default();
        assert_eq!(p.devices_for(1), vec![1]);
        p.granted.insert((1, 0));
        p.granted.insert((1, 3));
        p.granted.insert((2, 1));
        assert_eq!(p.devices_for(1), vec![1, 0, 3]);
        assert_eq!(p.devices_for(2), vec![2, 1]);
        assert_eq!(p.devices_for(0), vec![0]);
    }

    #[test]
    fn ranges_are_kept_per_owner_and_forgotten_by_start() {
        let mut p = Peers::default();
        for (owner, start, size) in [(0, 0x1000, 0x200), (0, 0x1200, 0x200), (0, 0x1400, 0x100), (1, 0x1200, 0x200)] {
            p.ranges.insert((owner, start), size);
        }
        assert_eq!(p.ranges_of(0), vec![(0x1000, 0x200), (0x1200, 0x200), (0x1400, 0x100)]);
        // An unmap of two whole mappings forgets those two, on that device only.
        p.forget(0, 0x1200, 0x300);
        assert_eq!(p.ranges_of(0), vec![(0x1000, 0x200)]);
        assert_eq!(p.ranges_of(1), vec![(0x1200, 0x200)]);
        p.forget(0, u64::MAX - 1, 0x10); // no overflow at the top of the address space
        p.forget(0, 0x1000, 0x200);
        assert!(p.ranges_of(0).is_empty());
    }
}
