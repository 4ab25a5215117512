//! The producer's side: exporting live blocks, and keeping a freed block allocated
//! while a consumer still holds it.

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::driver::sys;

use super::holders::{remove_stale_tables, table_name, HolderTable, Process, SLOTS};
use super::{boot_id, chunks, ExportedBlock, Memory};
use crate::alloc::device as pools;
use crate::boundary::lock;
use crate::device;
use crate::driver::check;
use crate::error::{Error, Result, Status};

struct Export {
    slot: u32,
    generation: u64,
    size: u64,
    memory: Memory,
    offset: u64,
    /// An expandable segment's block: its mappings' descriptors, open while exported.
    _shared: Option<chunks::Shared>,
    /// Freed by this process, kept for its holders.
    freed: bool,
}

struct Producer {
    table: HolderTable,
    free_slots: Vec<u32>,
    next_slot: u32,
    /// Exported blocks by address.
    exports: HashMap<u64, Export>,
}

impl Producer {
    fn take_slot(&mut self) -> Result<u32> {
        if let Some(slot) = self.free_slots.pop() {
            return Ok(slot);
        }
        if self.next_slot == self.table.slots() {
            return Err(Error::new(
                Status::GPURT_ERROR_OUT_OF_MEMORY,
                format!("{} blocks are exported already, the most one process may have at once: free some", self.table.slots()),
            ));
        }
        self.next_slot += 1;
        Ok(self.next_slot - 1)
    }

    /// Drops the export of a block that no one holds.
    fn forget(&mut self, ptr: u64) {
        if let Some(export) = self.exports.remove(&ptr) {
            self.free_slots.push(export.slot);
            pools::keeping(false);
        }
    }

    fn is_held(&self, export: &Export) -> bool {
        self.table.live_holders(export.slot).unwrap_or(0) > 0
    }
}

static PRODUCER: Mutex<Option<Producer>> = Mutex::new(None);

extern "C" fn remove_table_at_exit() {
    if let Ok(me) = Process::current() {
        if let Ok(name) = std::ffi::CString::new(table_name(me)) {
            unsafe { libc::shm_unlink(name.as_ptr()) };
        }
    }
}

fn producer(slot: &mut Option<Producer>) -> Result<&mut Producer> {
    if slot.is_none() {
        remove_stale_tables();
        let table = HolderTable::create(&table_name(Process::current()?), SLOTS)?;
        unsafe { libc::atexit(remove_table_at_exit) };
        pools::install_keeper(keep, exported_in);
        *slot = Some(Producer { table, free_slots: Vec::new(), next_slot: 0, exports: HashMap::new() });
    }
    Ok(slot.as_mut().expect("made above"))
}

/// Exports the live block at `ptr` (exporting it again gives the same handle).
pub fn export(ptr: u64) -> Result<ExportedBlock> {
    let (boot, me) = (boot_id()?, Process::current()?);
    let (device, place) = pools::place(ptr)?;
    let device_uuid = device::uuid(device)?;
    let mut guard = lock(&PRODUCER);
    // Under the lock a sleep's export check takes after its pool refuses exports
    // (`mempool::device::sleep`): of an export and a sleep at once, one is refused.
    pools::require_awake(ptr)?;
    let producer = producer(&mut guard)?;
    let block = |e: &Export| ExportedBlock { boot, producer: me, device_uuid, memory: e.memory, offset: e.offset, size: e.size, slot: e.slot, generation: e.generation };
    if let Some(export) = producer.exports.get(&ptr) {
        return if export.freed { Err(freed_already(ptr)) } else { Ok(block(export)) };
    }
    let (memory, offset, shared) = match place.mappings.first() {
        Some(&(first, _)) => {
            let shared = chunks::share(device, &place.mappings)?;
            let (list_fd, count) = shared.list();
            (Memory::Mappings { list_fd, count }, ptr - first, Some(shared))
        }
        None => (Memory::Segment(segment_handle(device, place.segment)?), ptr - place.segment, None),
    };
    let slot = producer.take_slot()?;
    let generation = producer.table.export(slot)?;
    let export = Export { slot, generation, size: place.size, memory, offset, _shared: shared, freed: false };
    let exported = block(&export);
    producer.exports.insert(ptr, export);
    pools::keeping(true);
    Ok(exported)
}

/// An exported block (kept for its consumers or not) for which `inside` holds.
fn exported_in(inside: &dyn Fn(u64) -> bool) -> Option<u64> {
    let guard = lock(&PRODUCER);
    guard.as_ref()?.exports.keys().copied().find(|&ptr| inside(ptr))
}

/// The driver IPC handle of a `cuMemAlloc` segment.
fn segment_handle(device: i32, segment: u64) -> Result<[u8; 64]> {
    device::with_device(device, || {
        let mut handle = sys::CUipcMemHandle { reserved: [0; 64] };
        check(unsafe { sys::cuIpcGetMemHandle(&mut handle, segment) }, "cuIpcGetMemHandle").map_err(|e| {
            e.context("exporting a block needs a segment from cuMemAlloc (the default pool, or a pool over the driver upstream)")
        })?;
        Ok(handle.reserved.map(|b| b as u8))
    })
}

fn freed_already(ptr: u64) -> Error {
    Error::invalid_argument(format!("{ptr:#x} was freed already: it waits for the processes that opened it (gpurt_ipc_collect)"))
}

/// The allocator's keeper: a freed exported block is closed to new consumers, and
/// stays allocated while a consumer holds it.
fn keep(ptr: u64) -> Option<Result<()>> {
    let mut guard = lock(&PRODUCER);
    let producer = guard.as_mut()?;
    let export = producer.exports.get(&ptr)?;
    if export.freed {
        return Some(Err(freed_already(ptr)));
    }
    let _ = producer.table.close(export.slot, export.generation);
    if producer.is_held(export) {
        producer.exports.get_mut(&ptr).expect("found above").freed = true;
        return Some(Ok(()));
    }
    producer.forget(ptr);
    None
}

/// Frees the blocks this process freed that no consumer holds any more: each
/// consumer closed it or died.
pub fn collect() -> Result<()> {
    let released: Vec<u64> = {
        let mut guard = lock(&PRODUCER);
        let Some(producer) = guard.as_mut() else { return Ok(()) };
        let ready: Vec<u64> = producer.exports.iter().filter(|(_, e)| e.freed && !producer.is_held(e)).map(|(&ptr, _)| ptr).collect();
        ready.iter().for_each(|&ptr| producer.forget(ptr));
        ready
    };
    // Every block is freed, even after a failure; the first failure is the answer.
    let results: Vec<Result<()>> = released.into_iter().map(pools::free).collect();
    results.into_iter().collect()
}

/// Blocks this process freed that consumers still hold, and their bytes.
pub fn kept() -> (u64, u64) {
    let guard = lock(&PRODUCER);
    let kept = guard.iter().flat_map(|p| p.exports.values()).filter(|e| e.freed);
    kept.fold((0, 0), |(blocks, bytes), e| (blocks + 1, bytes + e.size))
}
