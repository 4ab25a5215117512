//! IPC memory: a block of gpurt's pools shared with another process (torch's
//! `share_memory_` of CUDA tensors and `ipc_collect`, cupy's `ipcGetMemHandle`).
//!
//! The producer exports a live block (`producer`): the handle names the block's
//! memory (a `cuMemAlloc` segment by its driver IPC handle; in an expandable
//! segment, the physical mappings it lies on, shared as file descriptors by
//! `chunks`), the block's offset and size in it, the device by UUID, and a slot of
//! the producer's holder table (`holders`). A consumer (`consumer`) maps each
//! segment once, or an expandable block's mappings, and marks its hold in the slot. The
//! producer's free of a block that a consumer holds keeps it allocated;
//! `gpurt_ipc_collect` frees it once every holder has closed it or died.
//!
//! Above `alloc` (which asks the producer, through its keeper hook, whether a freed
//! block must stay) and `device`; nothing below imports it.

pub mod chunks;
pub mod consumer;
pub mod ffi;
pub mod holders;
pub mod producer;

use holders::Process;

use crate::error::{Error, Result};

/// The bytes of a `gpurt_ipc_mem_handle_t`.
pub const GPURT_IPC_HANDLE_SIZE: usize = 256;

const MAGIC: [u8; 8] = *b"gpurtIPC";
const VERSION: u32 = 2;

/// What a handle says, in a fixed little-endian layout (any process of the same
/// boot reads it, whatever build of gpurt made it, as long as the version matches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedBlock {
    /// The boot of the machine that made it (`/proc/sys/kernel/random/boot_id`).
    pub boot: [u8; 16],
    pub producer: Process,
    pub device_uuid: [u8; 16],
    pub memory: Memory,
    /// The block's offset in its memory (the segment, or the first mapping).
    pub offset: u64,
    pub size: u64,
    pub slot: u32,
    pub generation: u64,
}

/// Where an exported block's memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// A `cuMemAlloc` segment, by its `cuIpcGetMemHandle`.
    Segment([u8; 64]),
    /// Mappings of an expandable segment: the producer's descriptor of their list
    /// (`chunks`), and how many.
    Mappings { list_fd: i32, count: u32 },
}

impl Memory {
    fn encode(&self) -> [u8; 65] {
        let mut bytes = [0; 65];
        match self {
            Memory::Segment(handle) => bytes[1..].copy_from_slice(handle),
            Memory::Mappings { list_fd, count } => {
                bytes[0] = 1;
                bytes[1..5].copy_from_slice(&list_fd.to_le_bytes());
                bytes[5..9].copy_from_slice(&count.to_le_bytes());
            }
        }
        bytes
    }

    fn decode(bytes: [u8; 65]) -> Result<Memory> {
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        match bytes[0] {
            0 => Ok(Memory::Segment(bytes[1..].try_into().expect("64 bytes"))),
            1 => Ok(Memory::Mappings { list_fd: word(1) as i32, count: word(5) }),
            kind => Err(Error::invalid_handle(format!("a gpurt IPC handle of an unknown kind of memory ({kind})"))),
        }
    }
}

/// Reads and writes fields in turn.
struct Cursor<'a> {
    bytes: &'a mut [u8],
    at: usize,
}

impl Cursor<'_> {
    fn put(&mut self, field: &[u8]) {
        self.bytes[self.at..self.at + field.len()].copy_from_slice(field);
        self.at += field.len();
    }
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let field = self.bytes[self.at..self.at + N].try_into().expect("N bytes");
        self.at += N;
        field
    }
}

impl ExportedBlock {
    pub fn encode(&self) -> [u8; GPURT_IPC_HANDLE_SIZE] {
        let mut bytes = [0; GPURT_IPC_HANDLE_SIZE];
        let mut c = Cursor { bytes: &mut bytes, at: 0 };
        c.put(&MAGIC);
        c.put(&VERSION.to_le_bytes());
        c.put(&self.boot);
        c.put(&self.producer.pid.to_le_bytes());
        c.put(&self.producer.start.to_le_bytes());
        c.put(&self.device_uuid);
        c.put(&self.memory.encode());
        c.put(&self.offset.to_le_bytes());
        c.put(&self.size.to_le_bytes());
        c.put(&self.slot.to_le_bytes());
        c.put(&self.generation.to_le_bytes());
        bytes
    }

    /// The handle's fields, checked to be a gpurt handle of this version and boot.
    pub fn decode(bytes: &[u8; GPURT_IPC_HANDLE_SIZE]) -> Result<ExportedBlock> {
        let mut copy = *bytes;
        let mut c = Cursor { bytes: &mut copy, at: 0 };
        if c.take::<8>() != MAGIC {
            return Err(Error::invalid_handle("not a gpurt IPC memory handle (it does not begin with gpurt's mark)"));
        }
        let version = u32::from_le_bytes(c.take());
        if version != VERSION {
            return Err(Error::invalid_handle(format!("a gpurt IPC handle of version {version}; this gpurt reads version {VERSION}")));
        }
        let block = ExportedBlock {
            boot: c.take(),
            producer: Process { pid: u32::from_le_bytes(c.take()), start: u64::from_le_bytes(c.take()) },
            device_uuid: c.take(),
            memory: Memory::decode(c.take())?,
            offset: u64::from_le_bytes(c.take()),
            size: u64::from_le_bytes(c.take()),
            slot: u32::from_le_bytes(c.take()),
            generation: u64::from_le_bytes(c.take()),
        };
        if block.boot != boot_id()? {
            return Err(Error::invalid_handle(
                "the IPC handle was made on another machine or before this machine's last boot: it opens only where it was made",
            ));
        }
        Ok(block)
    }
}

/// This boot's identity, read once.
pub fn boot_id() -> Result<[u8; 16]> {
    static BOOT: std::sync::OnceLock<Option<[u8; 16]>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let hex: String = text.trim().chars().filter(|c| *c != '-').collect();
        let mut id = [0; 16];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(id)
    })
    .ok_or_else(|| Error::new(crate::error::Status::GPURT_ERROR_NOT_SUPPORTED, "IPC needs /proc/sys/kernel/random/boot_id"))
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    fn block() -> ExportedBlock {
        ExportedBlock {
            boot: boot_id().unwrap(),
            producer: Process { pid: 4242, start: 987_654_321 },
            device_uuid: [7; 16],
            memory: Memory::Segment(std::array::from_fn(|i| i as u8)),
            offset: 3 << 20,
            size: 12345,
            slot: 65535,
            generation: u64::MAX >> 1,
        }
    }

    #[test]
    fn a_handle_reads_back_what_was_written() {
        let b = block();
        assert_eq!(ExportedBlock::decode(&b.encode()).unwrap(), b);
        let mapped = ExportedBlock { memory: Memory::Mappings { list_fd: 1023, count: 70_000 }, ..block() };
        assert_eq!(ExportedBlock::decode(&mapped.encode()).unwrap(), mapped);
        let mut unknown = mapped.encode();
        unknown[56] = 7; // the memory's kind, after mark, version, boot, process and device
        assert!(ExportedBlock::decode(&unknown).unwrap_err().to_string().contains("unknown kind of memory (7)"));
    }

    #[test]
    fn foreign_bytes_old_versions_and_other_boots_are_refused() {
        let b = block();
        let mut bytes = b.encode();
        bytes[0] ^= 1;
        assert!(ExportedBlock::decode(&bytes).unwrap_err().to_string().contains("not a gpurt IPC memory handle"));
        let mut bytes = b.encode();
        bytes[8] = 9;
        assert!(ExportedBlock::decode(&bytes).unwrap_err().to_string().contains("version 9"));
        let mut other_boot = b.clone();
        other_boot.boot[3] ^= 0xff;
        let e = ExportedBlock::decode(&other_boot.encode()).unwrap_err();
        assert_eq!(e.status, crate::error::Status::GPURT_ERROR_INVALID_HANDLE);
        assert!(e.to_string().contains("another machine or before this machine's last boot"));
        assert!(ExportedBlock::decode(&[0; GPURT_IPC_HANDLE_SIZE]).is_err());
    }
}
