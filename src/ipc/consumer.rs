//! The consumer's side: opening exported blocks, each segment mapped once however
//! many of its blocks are open (an expandable segment's block: its own mappings),
//! and each hold marked in the producer's table.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use super::holders::{table_name, ClaimError, HolderTable, Process, HOLDERS};
use super::{chunks, ExportedBlock, Memory};
use crate::boundary::lock;
use crate::device;
use crate::driver::check;
use crate::error::{Error, Result, Status};

/// A segment of another process, mapped here.
struct Mapping {
    base: u64,
    /// Its bytes: a handle's block must lie within them.
    len: u64,
    device: i32,
    /// Blocks of it open here.
    blocks: u32,
    /// For an expandable segment's block, the mappings imported for it.
    imported: Option<chunks::Imported>,
}

/// What a mapping here is of: a segment (by its driver IPC handle), or the mappings
/// of one export of an expandable segment's block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MappingKey {
    Segment([u8; 64]),
    Export { producer: Process, slot: u32, generation: u64 },
}

impl MappingKey {
    fn of(block: &ExportedBlock) -> MappingKey {
        match block.memory {
            Memory::Segment(handle) => MappingKey::Segment(handle),
            Memory::Mappings { .. } => MappingKey::Export { producer: block.producer, slot: block.slot, generation: block.generation },
        }
    }
}

struct OpenBlock {
    segment: MappingKey,
    table: Arc<HolderTable>,
    producer: Process,
    slot: u32,
    generation: u64,
    /// Opens of the same handle not yet closed.
    opens: u32,
}

#[derive(Default)]
struct Consumer {
    mappings: HashMap<MappingKey, Mapping>,
    /// By address here.
    blocks: HashMap<u64, OpenBlock>,
    tables: HashMap<Process, Arc<HolderTable>>,
    devices: HashMap<[u8; 16], i32>,
}

static CONSUMER: Mutex<Option<Consumer>> = Mutex::new(None);

impl Consumer {
    fn device(&mut self, uuid: &[u8; 16]) -> Result<i32> {
        if let Some(&d) = self.devices.get(uuid) {
            return Ok(d);
        }
        // A handle names a device by the bytes it carries: one this process cannot
        // see is a field it cannot trust, as the header lists.
        let d = device::by_uuid(uuid).map_err(|e| match e.status {
            Status::GPURT_ERROR_NO_DEVICE => Error::invalid_handle(format!("{}: a forged handle, or one of a device hidden from this process", e.message)),
            _ => e,
        })?;
        self.devices.insert(*uuid, d);
        Ok(d)
    }

    fn table(&mut self, producer: Process) -> Result<Arc<HolderTable>> {
        if let Some(table) = self.tables.get(&producer) {
            return Ok(table.clone());
        }
        let table = Arc::new(HolderTable::open(&table_name(producer))?);
        self.tables.insert(producer, table.clone());
        Ok(table)
    }

    /// Unmaps a table no open block uses.
    fn drop_table_if_unused(&mut self, producer: Process) {
        if self.tables.get(&producer).is_some_and(|t| Arc::strong_count(t) == 1) {
            self.tables.remove(&producer);
        }
    }

    /// Unmaps the memory `key` names once no block of it is open here.
    fn unmap_if_unused(&mut self, key: MappingKey) -> Result<()> {
        if self.mappings.get(&key).map_or(true, |m| m.blocks > 0) {
            return Ok(());
        }
        let Mapping { base, device, imported, .. } = self.mappings.remove(&key).expect("found above");
        device::with_device(device, || match &imported {
            Some(imported) => {
                chunks::unmap(imported);
                Ok(())
            }
            None => check(unsafe { sys::cuIpcCloseMemHandle(base) }, "cuIpcCloseMemHandle"),
        })
    }

    /// The address of the block's memory here, mapped on first use.
    fn map(&mut self, block: &ExportedBlock, device: i32) -> Result<&mut Mapping> {
        let entry = match self.mappings.entry(MappingKey::of(block)) {
            Entry::Occupied(mapped) => return Ok(mapped.into_mut()),
            Entry::Vacant(entry) => entry,
        };
        let mapping = match block.memory {
            Memory::Segment(segment) => device::with_device(device, || {
                let handle = sys::CUipcMemHandle { reserved: segment.map(|b| b as _) };
                let mut base = 0;
                let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
                check(unsafe { sys::cuIpcOpenMemHandle_v2(&mut base, handle, flags) }, "cuIpcOpenMemHandle")?;
                let (mut start, mut len) = (0, 0);
                if let Err(e) = check(unsafe { sys::cuMemGetAddressRange_v2(&mut start, &mut len, base) }, "cuMemGetAddressRange") {
                    unsafe { sys::cuIpcCloseMemHandle(base) };
                    return Err(e);
                }
                Ok(Mapping { base, len: len as u64, device, blocks: 0, imported: None })
            })?,
            Memory::Mappings { list_fd, count } => {
                let imported = chunks::import(device, block.producer, list_fd, count)?;
                Mapping { base: imported.base, len: imported.reserved, device, blocks: 0, imported: Some(imported) }
            }
        };
        Ok(entry.insert(mapping))
    }
}

/// The block's address in `mapping`. A handle is another process's bytes
/// (SECURITY.md): its block must lie within the memory it names.
fn address_in(mapping: &Mapping, block: &ExportedBlock) -> Result<u64> {
    match block.offset.checked_add(block.size) {
        Some(end) if block.size > 0 && end <= mapping.len => Ok(mapping.base + block.offset),
        _ => Err(Error::invalid_handle(format!(
            "the handle's block ({} bytes at offset {}) does not lie within the {} bytes of memory it names: not an exported block's handle",
            block.size, block.offset, mapping.len
        ))),
    }
}

/// Opens an exported block: its address in this process.
pub fn open(block: &ExportedBlock) -> Result<u64> {
    let me = Process::current()?;
    if block.producer == me {
        return Err(Error::invalid_argument("this process exported the block: use its own pointer (a handle opens in another process)"));
    }
    let mut guard = lock(&CONSUMER);
    let consumer = guard.get_or_insert_with(Consumer::default);
    let device = consumer.device(&block.device_uuid)?;
    if let Some(mapping) = consumer.mappings.get(&MappingKey::of(block)) {
        if mapping.device != device {
            return Err(Error::invalid_handle(format!("the handle names device {device}, where its memory is open on device {}: a forged handle", mapping.device)));
        }
        let ptr = address_in(mapping, block)?;
        if let Some(open) = consumer.blocks.get_mut(&ptr) {
            if (open.producer, open.slot, open.generation) != (block.producer, block.slot, block.generation) {
                return Err(Error::invalid_handle("a stale IPC handle: another export of this block is open here"));
            }
            open.opens += 1;
            return Ok(ptr);
        }
    }
    let table = consumer.table(block.producer)?;
    let claimed = table.claim(block.slot, block.generation, me)?;
    if let Err(refused) = claimed {
        drop(table);
        consumer.drop_table_if_unused(block.producer);
        return Err(match refused {
            ClaimError::Closed => Error::invalid_handle("the block was freed by the process that exported it"),
            ClaimError::Full => Error::not_supported(format!("{HOLDERS} processes hold the block already, the most one block may have")),
        });
    }
    let ptr = match consumer.map(block, device).and_then(|mapping| address_in(mapping, block)) {
        Ok(ptr) => ptr,
        Err(e) => {
            let _ = table.release(block.slot, me);
            drop(table);
            consumer.drop_table_if_unused(block.producer);
            consumer.unmap_if_unused(MappingKey::of(block))?;
            return Err(e);
        }
    };
    consumer.mappings.get_mut(&MappingKey::of(block)).expect("mapped above").blocks += 1;
    let open = OpenBlock { segment: MappingKey::of(block), table, producer: block.producer, slot: block.slot, generation: block.generation, opens: 1 };
    consumer.blocks.insert(ptr, open);
    Ok(ptr)
}

/// Closes a block opened here. The last close of it waits for the work queued on its
/// device (the producer may reuse the block once it is closed), drops this
/// process's hold, and unmaps the segment once no block of it is open.
pub fn close(ptr: u64) -> Result<()> {
    let not_open = || Error::invalid_argument(format!("{ptr:#x} is not open here (not from gpurt_ipc_open_mem_handle, or closed)"));
    let mut guard = lock(&CONSUMER);
    let consumer = guard.as_mut().ok_or_else(not_open)?;
    let open = consumer.blocks.get_mut(&ptr).ok_or_else(not_open)?;
    if open.opens > 1 {
        open.opens -= 1;
        return Ok(());
    }
    let mapping = &consumer.mappings[&open.segment];
    device::synchronize(mapping.device)?;
    let open = consumer.blocks.remove(&ptr).expect("found above");
    let _ = open.table.release(open.slot, Process::current()?);
    drop(open.table);
    consumer.drop_table_if_unused(open.producer);
    consumer.mappings.get_mut(&open.segment).expect("open blocks keep their mapping").blocks -= 1;
    consumer.unmap_if_unused(open.segment)
}
