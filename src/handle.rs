//! Generational handles: what C callers hold instead of pointers.
//!
//! A handle is a 64-bit value `kind:8 | generation:32 | index:24`, passed through
//! C as an opaque pointer and never dereferenced. A lookup checks the kind and the
//! slot's generation, so NULL, destroyed, double-destroyed and wrong-kind handles
//! are reported as invalid instead of touching freed memory.
//!
//! Lookups are lock-free (a seqlock read of two atomic words: plain loads on
//! x86-64); creation and destruction take a mutex, as they are rare next to use.

use std::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::boundary::lock;
use crate::error::{Error, Result};

const INDEX_BITS: u32 = 24;
const CHUNK_BITS: u32 = 10;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;
/// Under Miri a few chunks: every access to the chunk array retags all of it, and
/// 2^14 pointers made each lookup cost milliseconds there.
const MAX_CHUNKS: usize = if cfg!(miri) { 8 } else { 1 << (INDEX_BITS - CHUNK_BITS) };

/// Which table a handle belongs to; part of every handle's bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Device = 1,
    Stream = 2,
    Event = 3,
    PinnedPool = 4,
    Module = 5,
    Kernel = 6,
    Program = 7,
    Graph = 8,
    GraphExec = 9,
    MemPool = 11,
    Generator = 12,
    TunableOp = 13,
    GdsFile = 14,
    Comm = 15,
    NvtxDomain = 16,
    GreenContext = 17,
    VBuffer = 18,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Stream => "stream",
            Kind::Event => "event",
            Kind::PinnedPool => "pinned pool",
            Kind::Module => "module",
            Kind::Kernel => "kernel",
            Kind::Program => "program",
            Kind::Graph => "graph",
            Kind::GraphExec => "graph exec",
            Kind::MemPool => "memory pool",
            Kind::Generator => "generator",
            Kind::TunableOp => "TunableOp",
            Kind::GdsFile => "GDS file",
            Kind::Comm => "communicator",
            Kind::NvtxDomain => "NVTX domain",
            Kind::GreenContext => "green context",
            Kind::VBuffer => "vbuffer",
        }
    }
    fn from_bits(bits: u8) -> Option<Kind> {
        [
            Kind::Device,
            Kind::Stream,
            Kind::Event,
            Kind::PinnedPool,
            Kind::Module,
            Kind::Kernel,
            Kind::Program,
            Kind::Graph,
            Kind::GraphExec,
            Kind::MemPool,
            Kind::Generator,
            Kind::TunableOp,
            Kind::GdsFile,
            Kind::Comm,
            Kind::NvtxDomain,
            Kind::GreenContext,
            Kind::VBuffer,
        ].into_iter().find(|k| *k as u8 == bits)
    }
}

/// A packed handle value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle(pub u64);

impl Handle {
    pub fn new(kind: Kind, generation: u32, index: u32) -> Handle {
        debug_assert!(index < (1 << INDEX_BITS));
        Handle(((kind as u64) << 56) | ((generation as u64) << INDEX_BITS) | index as u64)
    }
    pub fn kind_bits(self) -> u8 {
        (self.0 >> 56) as u8
    }
    pub fn generation(self) -> u32 {
        (self.0 >> INDEX_BITS) as u32
    }
    pub fn index(self) -> u32 {
        (self.0 & ((1 << INDEX_BITS) - 1)) as u32
    }
    pub fn from_ptr<T>(ptr: *mut T) -> Handle {
        Handle(ptr as usize as u64)
    }
    pub fn to_ptr<T>(self) -> *mut T {
        self.0 as usize as *mut T
    }

    /// Checks the kind bits; reports NULL and wrong-kind handles clearly.
    #[inline]
    pub fn expect_kind(self, kind: Kind) -> Result<Handle> {
        if self.kind_bits() == kind as u8 {
            return Ok(self);
        }
        Err(self.kind_error(kind))
    }

    #[cold]
    fn kind_error(self, kind: Kind) -> Error {
        if self.0 == 0 {
            return Error::invalid_handle(format!("{} handle is NULL", kind.name()));
        }
        match Kind::from_bits(self.kind_bits()) {
            Some(other) => Error::invalid_handle(format!("expected a {} handle, got a {} handle", kind.name(), other.name())),
            None => Error::invalid_handle(format!("{:#x} is not a gpurt {} handle", self.0, kind.name())),
        }
    }
}

/// What a slot stores: two words, so that a lookup is a lock-free copy.
pub trait Packed: Copy {
    fn pack(self) -> [u64; 2];
    fn unpack(words: [u64; 2]) -> Self;
}

/// A single word (an index into a caller's registry).
impl Packed for u64 {
    fn pack(self) -> [u64; 2] {
        [self, 0]
    }
    fn unpack(words: [u64; 2]) -> Self {
        words[0]
    }
}

/// A driver object and the device whose context holds it: what the module, kernel,
/// graph and exec tables store.
#[derive(Clone, Copy)]
pub struct DeviceObject {
    pub raw: usize,
    pub device: i32,
}

impl Packed for DeviceObject {
    fn pack(self) -> [u64; 2] {
        [self.raw as u64, self.device as u64]
    }
    fn unpack(w: [u64; 2]) -> Self {
        DeviceObject { raw: w[0] as usize, device: w[1] as i32 }
    }
}

struct Slot {
    /// Odd while the slot holds a live object; bumped on insert and on remove.
    generation: AtomicU32,
    words: [AtomicU64; 2],
}

/// A table of objects of one kind addressed by generational handles.
pub struct HandleTable<T: Packed> {
    kind: Kind,
    chunks: [AtomicPtr<Slot>; MAX_CHUNKS],
    free: Mutex<FreeList>,
    _marker: std::marker::PhantomData<T>,
}

struct FreeList {
    indices: Vec<u32>,
    next_unused: u32,
}

impl<T: Packed> HandleTable<T> {
    pub const fn new(kind: Kind) -> Self {
        HandleTable {
            kind,
            chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CHUNKS],
            free: Mutex::new(FreeList { indices: Vec::new(), next_unused: 0 }),
            _marker: std::marker::PhantomData,
        }
    }

    fn slot(&self, index: u32) -> Option<&Slot> {
        let chunk = self.chunks.get((index >> CHUNK_BITS) as usize)?.load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: chunks are allocated once, CHUNK_LEN slots long, and never freed.
        Some(unsafe { &*chunk.add(index as usize & (CHUNK_LEN - 1)) })
    }

    fn slot_or_grow(&self, index: u32) -> &Slot {
        let cell = &self.chunks[(index >> CHUNK_BITS) as usize];
        if cell.load(Ordering::Acquire).is_null() {
            // Called with the free-list lock held, so no other thread grows this chunk.
            let chunk: Box<[Slot]> = (0..CHUNK_LEN)
                .map(|_| Slot { generation: AtomicU32::new(0), words: [AtomicU64::new(0), AtomicU64::new(0)] })
                .collect();
            cell.store(Box::leak(chunk).as_mut_ptr(), Ordering::Release);
        }
        self.slot(index).expect("chunk just allocated")
    }

    /// Stores `value` and returns its new handle.
    pub fn insert(&self, value: T) -> Result<Handle> {
        let mut free = lock(&self.free);
        let index = match free.indices.pop() {
            Some(i) => i,
            None if (free.next_unused as usize) < MAX_CHUNKS * CHUNK_LEN => {
                free.next_unused += 1;
                free.next_unused - 1
            }
            None => {
                return Err(Error::new(
                    crate::error::Status::GPURT_ERROR_OUT_OF_MEMORY,
                    format!("too many live {} handles ({})", self.kind.name(), MAX_CHUNKS * CHUNK_LEN),
                ))
            }
        };
        let slot = self.slot_or_grow(index);
        let words = value.pack();
        slot.words[0].store(words[0], Ordering::Relaxed);
        slot.words[1].store(words[1], Ordering::Relaxed);
        // The slot is free (even) here; odd publishes the words to readers.
        let generation = slot.generation.load(Ordering::Relaxed).wrapping_add(1);
        slot.generation.store(generation, Ordering::Release);
        Ok(Handle::new(self.kind, generation, index))
    }

    /// The value behind a live handle.
    #[inline]
    pub fn get(&self, handle: Handle) -> Result<T> {
        let handle = handle.expect_kind(self.kind)?;
        if let Some(slot) = self.slot(handle.index()) {
            // Seqlock read: the words count only if the generation is unchanged around them.
            let before = slot.generation.load(Ordering::Acquire);
            let words = [slot.words[0].load(Ordering::Relaxed), slot.words[1].load(Ordering::Relaxed)];
            fence(Ordering::Acquire);
            let after = slot.generation.load(Ordering::Relaxed);
            if before == handle.generation() && after == before {
                return Ok(T::unpack(words));
            }
        }
        Err(self.stale(handle))
    }

    /// Removes a live handle and returns its value; a second remove is an error.
    pub fn remove(&self, handle: Handle) -> Result<T> {
        let handle = handle.expect_kind(self.kind)?;
        let mut free = lock(&self.free);
        let slot = self.slot(handle.index()).ok_or_else(|| self.stale(handle))?;
        let generation = slot.generation.load(Ordering::Relaxed);
        if generation != handle.generation() {
            return Err(self.stale(handle));
        }
        let value = T::unpack([slot.words[0].load(Ordering::Relaxed), slot.words[1].load(Ordering::Relaxed)]);
        slot.generation.store(generation.wrapping_add(1), Ordering::Relaxed);
        // Order the retirement before any later rewrite of the words (seqlock writer side).
        fence(Ordering::Release);
        free.indices.push(handle.index());
        Ok(value)
    }

    /// Like `remove`, but the slot is not freed: the caller keeps its index and its
    /// stored words, and alone may `revive` it. Pools use this to hand the same
    /// object out again under a new handle without touching the shared free list.
    pub fn retire(&self, handle: Handle) -> Result<(u32, T)> {
        let handle = handle.expect_kind(self.kind)?;
        let slot = self.slot(handle.index()).ok_or_else(|| self.stale(handle))?;
        let live = handle.generation();
        // compare_exchange: of two racing retires (a caller's double destroy) one wins.
        slot.generation
            .compare_exchange(live, live.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed)
            .map_err(|_| self.stale(handle))?;
        let value = T::unpack([slot.words[0].load(Ordering::Relaxed), slot.words[1].load(Ordering::Relaxed)]);
        Ok((handle.index(), value))
    }

    /// Makes a retired slot live again with its stored value, under a new generation.
    /// Only the owner of the retired index (see `retire`) may call this.
    pub fn revive(&self, index: u32) -> (Handle, T) {
        let slot = self.slot(index).expect("a retired slot exists");
        let value = T::unpack([slot.words[0].load(Ordering::Relaxed), slot.words[1].load(Ordering::Relaxed)]);
        let generation = slot.generation.load(Ordering::Relaxed).wrapping_add(1);
        debug_assert!(generation % 2 == 1, "revive of a slot that was not retired");
        slot.generation.store(generation, Ordering::Release);
        (Handle::new(self.kind, generation, index), value)
    }

    /// Number of live handles (for tests and statistics).
    pub fn live_count(&self) -> usize {
        let free = lock(&self.free);
        free.next_unused as usize - free.indices.len()
    }

    #[cold]
    fn stale(&self, handle: Handle) -> Error {
        Error::invalid_handle(format!(
            "{} handle {:#x} was destroyed or never created",
            self.kind.name(),
            handle.0
        ))
    }
}

// The library's tables are statics and never dropped; a table that is (in tests)
// gives its chunks back. Dropping needs ownership, so no reader is left.
/// Objects behind handles of one kind, shared (`Arc`) with the calls using them: a
/// handle stays valid until `remove`, and a call that got the object keeps it alive
/// past a concurrent removal.
pub struct Registry<T> {
    handles: HandleTable<u64>,
    objects: Mutex<Option<std::collections::HashMap<u64, std::sync::Arc<T>>>>,
    next_id: AtomicU64,
}

impl<T> Registry<T> {
    pub const fn new(kind: Kind) -> Self {
        Registry { handles: HandleTable::new(kind), objects: Mutex::new(None), next_id: AtomicU64::new(1) }
    }

    pub fn insert(&self, object: T) -> Result<Handle> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.objects).get_or_insert_with(Default::default).insert(id, std::sync::Arc::new(object));
        self.handles.insert(id).inspect_err(|_| {
            lock(&self.objects).as_mut().map(|o| o.remove(&id));
        })
    }

    pub fn get(&self, handle: Handle) -> Result<std::sync::Arc<T>> {
        let id = self.handles.get(handle)?;
        lock(&self.objects).as_ref().and_then(|o| o.get(&id).cloned()).ok_or_else(|| Error::invalid_handle("the object was destroyed"))
    }

    /// Every live object.
    pub fn all(&self) -> Vec<std::sync::Arc<T>> {
        lock(&self.objects).as_ref().map(|o| o.values().cloned().collect()).unwrap_or_default()
    }

    pub fn remove(&self, handle: Handle) -> Result<()> {
        let id = self.handles.remove(handle)?;
        lock(&self.objects).as_mut().map(|o| o.remove(&id));
        Ok(())
    }
}

impl<T: Packed> Drop for HandleTable<T> {
    fn drop(&mut self) {
        for cell in &mut self.chunks {
            let chunk = *cell.get_mut();
            if !chunk.is_null() {
                // SAFETY: `slot_or_grow` made this pointer with Box::leak of a CHUNK_LEN slice.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(chunk, CHUNK_LEN)) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_objects_outlive_their_removal_only_where_held() {
        static REGISTRY: Registry<String> = Registry::new(Kind::Generator);
        let a = REGISTRY.insert("a".into()).unwrap();
        let held = REGISTRY.get(a).unwrap();
        REGISTRY.remove(a).unwrap();
        assert_eq!(*held, "a", "a caller's reference stays valid");
        assert!(REGISTRY.get(a).is_err() && REGISTRY.remove(a).is_err(), "the handle is stale");
        let b = REGISTRY.insert("b".into()).unwrap();
        assert_ne!(a, b);
        assert_eq!(*REGISTRY.get(b).unwrap(), "b");
    }
    use crate::error::Status;

    impl Packed for (u64, u64) {
        fn pack(self) -> [u64; 2] {
            [self.0, self.1]
        }
        fn unpack(w: [u64; 2]) -> Self {
            (w[0], w[1])
        }
    }

    #[test]
    fn lifecycle_and_misuse() {
        let table = HandleTable::<(u64, u64)>::new(Kind::Stream);
        let a = table.insert((1, 2)).unwrap();
        assert_eq!(table.get(a).unwrap(), (1, 2));
        assert_eq!(table.remove(a).unwrap(), (1, 2));
        // use after destroy and double destroy
        assert_eq!(table.get(a).unwrap_err().status, Status::GPURT_ERROR_INVALID_HANDLE);
        assert_eq!(table.remove(a).unwrap_err().status, Status::GPURT_ERROR_INVALID_HANDLE);
        // the slot is reused, but the stale handle stays stale
        let b = table.insert((3, 4)).unwrap();
        assert_eq!(b.index(), a.index());
        assert_ne!(b, a);
        assert!(table.get(a).is_err());
        assert_eq!(table.get(b).unwrap(), (3, 4));
        // NULL and wrong kind
        let err = table.get(Handle(0)).unwrap_err();
        assert!(err.message.contains("NULL"), "{}", err.message);
        let event = Handle::new(Kind::Event, b.generation(), b.index());
        let err = table.get(event).unwrap_err();
        assert!(err.message.contains("expected a stream handle, got a event handle"), "{}", err.message);
        let garbage = Handle(0xdead_beef_0000_1234);
        assert_eq!(table.get(garbage).unwrap_err().status, Status::GPURT_ERROR_INVALID_HANDLE);
        // an index past any allocated chunk
        let far = Handle::new(Kind::Stream, 1, (1 << INDEX_BITS) - 1);
        assert!(table.get(far).is_err());
        assert_eq!(table.live_count(), 1);
    }

    #[test]
    fn grows_past_one_chunk() {
        let table = HandleTable::<(u64, u64)>::new(Kind::Event);
        let handles: Vec<_> = (0..3 * CHUNK_LEN as u64).map(|i| table.insert((i, !i)).unwrap()).collect();
        for (i, h) in handles.iter().enumerate() {
            assert_eq!(table.get(*h).unwrap(), (i as u64, !(i as u64)));
        }
        assert_eq!(table.live_count(), 3 * CHUNK_LEN);
    }

    #[test]
    fn retire_and_revive_reuse_the_slot_under_new_handles() {
        let table = HandleTable::<(u64, u64)>::new(Kind::Event);
        let a = table.insert((10, 20)).unwrap();
        let (index, value) = table.retire(a).unwrap();
        assert_eq!(value, (10, 20));
        assert!(table.get(a).is_err());
        assert!(table.retire(a).is_err(), "double retire is refused");
        assert!(table.remove(a).is_err());
        let (b, value) = table.revive(index);
        assert_eq!((b.index(), value), (a.index(), (10, 20)));
        assert_ne!(a, b);
        assert_eq!(table.get(b).unwrap(), (10, 20));
        // A retired slot never reaches the free list: a new insert takes another slot.
        let (_, _) = table.retire(b).unwrap();
        let c = table.insert((1, 1)).unwrap();
        assert_ne!(c.index(), index);
    }

    /// Readers racing with writers never see a value torn between two objects, and a
    /// handle that was live when read returns exactly its own value.
    #[test]
    fn concurrent_insert_remove_get() {
        let table = std::sync::Arc::new(HandleTable::<(u64, u64)>::new(Kind::Stream));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let table = table.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..crate::test_iterations(20_000) {
                        let v = (t << 32 | i, !(t << 32 | i));
                        mine.push((table.insert(v).unwrap(), v));
                        if i % 3 == 0 {
                            let (h, v) = mine.swap_remove((i as usize * 7) % mine.len());
                            assert_eq!(table.remove(h).unwrap(), v);
                            assert!(table.get(h).is_err());
                        }
                        if let Some(&(h, v)) = mine.get((i as usize * 13) % mine.len().max(1)) {
                            assert_eq!(table.get(h).unwrap(), v);
                        }
                    }
                    for (h, v) in mine {
                        assert_eq!(table.remove(h).unwrap(), v);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(table.live_count(), 0);
    }
}
