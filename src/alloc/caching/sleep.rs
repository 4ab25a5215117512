//! Sleep and wake of a whole allocator: every shard's memory unmapped and mapped back
//! (the pool's part: `pool::sleep`), in steps that hold the shards' locks only to
//! decide and to commit. The device's synchronisation and the copies run without them,
//! so that statistics, `is_asleep` and frees of the pool's blocks go on meanwhile,
//! also from a host function the device is running.
//!
//! From a sleep's start, allocations are refused (`asleep`) and so are exports and
//! copies of the pool's memory (`holds_asleep`); a shard made while it sleeps starts
//! asleep (`shards::shard_for`, under `streams`, which the sleep and the wake hold
//! while they go over the shards, so that none is missed or left asleep).

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::shards::ShardState;
use super::{is_oom, CachingAllocator, StreamMap, ASLEEP};
use crate::alloc::pool::{asleep_error, SegmentSource, SleepCopy, Staged, WakeWork};
use crate::alloc::reclaim;
use crate::boundary::lock;
use crate::error::{Error, Result};

pub(super) const SLEEP_NONE: u8 = 0;
const SLEEP_DISCARD: u8 = 1;
const SLEEP_OFFLOAD: u8 = 2;

/// Why allocations are refused (`CachingAllocator::refusing`): they are not; the
/// owner's sleep; a sleep another process asked for.
pub(super) const SERVING: u8 = 0;
const REFUSING_OWNER: u8 = 1;
const REFUSING_ON_REQUEST: u8 = 2;

/// Every shard locked, with its index, and the stream map with them (no shard is made
/// while these are held).
type Locked<'a, S> = (MutexGuard<'a, StreamMap>, Vec<(u32, MutexGuard<'a, ShardState<S>>)>);

/// How a sleep failed: the allocator wholly awake, or (its undoing failed too) asleep
/// in part.
enum Failed {
    Awake(Error),
    PartlyAsleep(Error),
}

impl<S: SegmentSource> CachingAllocator<S> {
    /// Puts every shard to sleep: allocations refused, `admit` asked (the caller's own
    /// refusals, seen by anything that checks `holds_asleep` after it), the device's
    /// work waited for, then each shard decides what to copy (`Pool::begin_sleep`),
    /// the live bytes are copied to host memory with `offload`, and each shard unmaps
    /// its memory. Frees go on throughout. A failure leaves the allocator wholly
    /// awake, as it was (see `Pool::commit_sleep` for a failed unmap).
    pub fn sleep(&self, offload: bool, admit: impl FnOnce() -> Result<()>) -> Result<()> {
        self.sleep_as(offload, admit, false)
    }

    /// A sleep another process asked for (a share group's, `crate::share`): as
    /// `sleep`, but the pool's next allocation wakes it (`malloc_asleep`) instead of
    /// being refused, so that its owner finds it as it left it.
    pub fn sleep_on_request(&self, offload: bool, admit: impl FnOnce() -> Result<()>) -> Result<()> {
        self.sleep_as(offload, admit, true)
    }

    fn sleep_as(&self, offload: bool, admit: impl FnOnce() -> Result<()>, on_request: bool) -> Result<()> {
        let _one = lock(&self.transition);
        if self.sleep_mode().is_some() {
            return Err(Error::invalid_argument("the memory pool is already asleep"));
        }
        // Refused as a sleep on request, an allocation made meanwhile waits for the
        // sleep and wakes the pool.
        self.set_refusing(&lock(&self.streams), if on_request { REFUSING_ON_REQUEST } else { REFUSING_OWNER });
        let mode = if offload { SLEEP_OFFLOAD } else { SLEEP_DISCARD };
        match self.fall_asleep(offload, admit) {
            Ok(()) => {
                self.sleep_mode.store(mode, Ordering::SeqCst);
                Ok(())
            }
            Err(Failed::Awake(e)) => {
                // Shards made meanwhile started asleep with nothing to unmap.
                let (streams, mut shards) = self.lock_all();
                for (_, state) in shards.iter_mut().filter(|(_, state)| state.pool.is_asleep()) {
                    state.pool.commit_wake(None);
                }
                self.flush(&mut shards);
                self.set_refusing(&streams, SERVING);
                Err(e)
            }
            Err(Failed::PartlyAsleep(e)) => {
                self.sleep_mode.store(mode, Ordering::SeqCst);
                Err(e.context("the pool could not be woken after its sleep failed: it is asleep in part, and a wake maps what is unmapped"))
            }
        }
    }

    fn fall_asleep(&self, offload: bool, admit: impl FnOnce() -> Result<()>) -> std::result::Result<(), Failed> {
        admit().and_then(|()| self.shared.source.synchronize()).map_err(Failed::Awake)?;
        let mut copies = Vec::new();
        {
            let (_streams, mut shards) = self.lock_all();
            for (index, state) in shards.iter_mut().filter(|(_, state)| !state.pool.is_asleep()) {
                match state.pool.begin_sleep(offload) {
                    Ok(copy) => copies.push((*index, copy)),
                    Err(e) => {
                        drop((_streams, shards));
                        return Err(Failed::Awake(self.cancel_sleep(copies, e)));
                    }
                }
            }
            self.flush(&mut shards);
        }
        for (_, copy) in copies.iter_mut().filter(|_| offload) {
            if let Err(e) = self.offload(copy) {
                return Err(Failed::Awake(self.cancel_sleep(copies, e)));
            }
        }
        let (_streams, mut shards) = self.lock_all();
        let mut result = Ok(());
        let mut slept = Vec::new();
        for (index, state) in &mut shards {
            let Some(at) = copies.iter().position(|(i, _)| i == index) else { continue };
            let (_, copy) = copies.swap_remove(at);
            if result.is_err() {
                state.pool.cancel_sleep(copy.staging);
            } else if let Err(e) = state.pool.commit_sleep(copy.staging) {
                result = Err(e);
            } else {
                slept.push(*index);
            }
        }
        if let Err(e) = result {
            // The shards asleep already wake under their locks.
            let mut partly = None;
            for (_, state) in shards.iter_mut().filter(|(i, _)| slept.contains(i)) {
                if let Err(again) = state.pool.wake_here() {
                    partly = Some(again);
                }
            }
            self.flush(&mut shards);
            return Err(match partly {
                None => Failed::Awake(e),
                Some(again) => Failed::PartlyAsleep(again.context(&e.to_string())),
            });
        }
        self.flush(&mut shards);
        Ok(())
    }

    /// Copies a shard's live bytes that its host memory does not hold already into
    /// it: its kept memory if they fit there, else new memory of their size.
    fn offload(&self, copy: &mut SleepCopy) -> Result<()> {
        if copy.ranges.is_empty() {
            return Ok(());
        }
        let mut staging = match copy.staging.take() {
            Some(kept) => kept,
            None => Staged::new(copy.bytes, self.shared.source.host_staging(copy.bytes)?),
        };
        let copied = self.shared.source.offload(&copy.ranges, &mut staging.memory);
        copy.staging = Some(staging);
        copied
    }

    /// Undoes the shards' `begin_sleep` after `e`; their host memory is kept.
    fn cancel_sleep(&self, copies: Vec<(u32, SleepCopy)>, e: Error) -> Error {
        let (_streams, mut shards) = self.lock_all();
        for (index, copy) in copies {
            if let Some((_, state)) = shards.iter_mut().find(|(i, _)| *i == index) {
                state.pool.cancel_sleep(copy.staging);
            }
        }
        self.flush(&mut shards);
        e
    }

    /// Wakes every sleeping shard: the memory mapped again at its addresses and what
    /// was offloaded copied back, without the shards' locks, then each counts it. A
    /// failure unmaps what the wake mapped, so that the allocator stays wholly asleep,
    /// its host memory kept, and the call may be retried.
    pub fn wake(&self) -> Result<()> {
        self.wake_unless(Self::not_asleep)
    }

    /// A wake asked for while the allocator is awake: an error.
    fn not_asleep(&self) -> Option<Result<()>> {
        self.sleep_mode().is_none().then(|| Err(Error::invalid_argument("the memory pool is not asleep")))
    }

    /// A wake for a use of the allocator (`wake_for_use`): nothing to do where it is
    /// awake (woken meanwhile, or its sleep failed), refused where its owner put it to
    /// sleep.
    fn awake_or_owners(&self) -> Option<Result<()>> {
        match self.sleep_mode() {
            None => Some(Ok(())),
            Some(_) if self.refusing.load(Ordering::SeqCst) != REFUSING_ON_REQUEST => Some(Err(asleep_error())),
            Some(_) => None,
        }
    }

    /// `wake`, unless `settled`, asked under the transition lock (no sleep or wake half
    /// done), answers for it.
    fn wake_unless(&self, settled: fn(&Self) -> Option<Result<()>>) -> Result<()> {
        let _one = lock(&self.transition);
        if let Some(answer) = settled(self) {
            return answer;
        }
        let mut works: Vec<(u32, WakeWork)> = {
            let (_streams, mut shards) = self.lock_all();
            shards.iter_mut().filter_map(|(index, state)| Some((*index, state.pool.begin_wake()?))).collect()
        };
        for i in 0..works.len() {
            let work = &works[i].1;
            let woken = self.shared.map_and_restore(&work.mappings, &work.ranges, work.staging.as_ref());
            if let Err(e) = woken {
                for (_, done) in &works[..i] {
                    self.shared.unmap_again(&done.mappings);
                }
                let (_streams, mut shards) = self.lock_all();
                for (index, state) in &mut shards {
                    if let Some(at) = works.iter().position(|(i, _)| i == index) {
                        state.pool.abort_wake(works[at].1.staging.take());
                    }
                }
                return Err(e);
            }
        }
        let (_streams, mut shards) = self.lock_all();
        for (index, state) in &mut shards {
            let staging = works.iter_mut().find(|(i, _)| i == index).and_then(|(_, w)| w.staging.take());
            state.pool.commit_wake(staging);
        }
        self.flush(&mut shards);
        self.sleep_mode.store(SLEEP_NONE, Ordering::SeqCst);
        self.set_refusing(&_streams, SERVING);
        Ok(())
    }

    /// `wake`, and where the device refuses the memory, other processes asked for it
    /// (`reclaim`, as an allocation asks) and the wake tried once more.
    pub fn wake_asking(&self) -> Result<()> {
        self.wake_asking_unless(Self::not_asleep)
    }

    fn wake_asking_unless(&self, settled: fn(&Self) -> Option<Result<()>>) -> Result<()> {
        let asleep = self.stats().asleep_bytes.max(0) as u64;
        let cause = match self.wake_unless(settled) {
            Err(e) if is_oom(&e) => e,
            done => return done,
        };
        // No lock is held here: the asking may wait while this process serves others.
        match reclaim::ask_others(self.shared.source.history_device(), asleep) {
            Some(asked) if asked.given_back => self.wake_unless(settled).map_err(|e| e.context(&asked.account)),
            Some(asked) => Err(cause.context(&asked.account)),
            None => Err(cause),
        }
    }

    /// Gives back what the allocator holds while another process's request keeps it
    /// asleep, without waking it (a pool being destroyed, with no live block): every
    /// shard's addresses and offloaded copies go, and it is awake and empty. Refused,
    /// changing nothing, while its owner put it to sleep or a shard holds a live block.
    pub fn release_asleep(&self) -> Result<()> {
        let _one = lock(&self.transition);
        if self.sleep_mode().is_none() {
            return Ok(());
        }
        if self.refusing.load(Ordering::SeqCst) != REFUSING_ON_REQUEST {
            return Err(asleep_error());
        }
        let (streams, mut shards) = self.lock_all();
        if shards.iter_mut().any(|(_, state)| state.pool.holds_live_blocks()) {
            self.flush(&mut shards);
            return Err(Error::invalid_argument("the pool holds live blocks: only a wake gives its memory back"));
        }
        for (_, state) in &mut shards {
            state.pool.release_asleep();
        }
        self.flush(&mut shards);
        self.sleep_mode.store(SLEEP_NONE, Ordering::SeqCst);
        self.set_refusing(&streams, SERVING);
        Ok(())
    }

    /// An allocation while the pool sleeps or falls asleep (`wake_for_use`). A sleep on
    /// request that begins before the allocation is served is waited for and undone in
    /// turn: each round needs a new sleep, so the rounds end.
    #[cold]
    pub(super) fn malloc_asleep(&self, size: u64, stream: u64) -> Result<u64> {
        loop {
            self.wake_for_use()?;
            match self.malloc_awake(size, stream) {
                Err(_) if self.refuses_allocations() => continue,
                done => return done,
            }
        }
    }

    /// Work is about to use the allocator's memory without allocating from it (an
    /// engine's kernels on its weights): counted as a use (`activity`), so that a share
    /// group finds it busy, and where another process's request put it to sleep, it
    /// wakes first. Refused while its owner put it to sleep.
    ///
    /// A sleep on request checks the activity after it starts refusing allocations
    /// (`sleep_as`) and a touch checks for a sleep after it counted itself: of the two,
    /// one sees the other, so the sleep is refused or the touch waits and wakes.
    pub fn touch(&self) -> Result<()> {
        self.touches.fetch_add(1, Ordering::SeqCst);
        if !self.refuses_allocations() {
            return Ok(());
        }
        self.wake_for_use()
    }

    /// What a use of the allocator while it sleeps or falls asleep needs: refused at
    /// once, without waiting, where its owner put it to sleep; else the pool wakes (or
    /// waits for the sleep under way, and wakes it).
    fn wake_for_use(&self) -> Result<()> {
        if self.refusing.load(Ordering::SeqCst) == REFUSING_OWNER {
            return Err(asleep_error());
        }
        self.wake_asking_unless(Self::awake_or_owners)
            .map_err(|e| if is_oom(&e) { e.context("waking the pool a share group's request put to sleep") } else { e })
    }

    /// Its count of allocations, frees and `touch`es so far: any use changes it.
    pub fn activity(&self) -> u64 {
        let s = self.stats().allocation.all;
        (s.allocated as u64).wrapping_add(s.freed as u64).wrapping_add(self.touches.load(Ordering::SeqCst))
    }

    /// Whether the allocator sleeps, and how: `Some(offload)`. A sleep in progress is
    /// not yet one (its allocations are refused all the same).
    pub fn sleep_mode(&self) -> Option<bool> {
        match self.sleep_mode.load(Ordering::SeqCst) {
            SLEEP_NONE => None,
            mode => Some(mode == SLEEP_OFFLOAD),
        }
    }

    /// Whether it sleeps, falls asleep or wakes: allocations are refused.
    pub fn refuses_allocations(&self) -> bool {
        self.refusing.load(Ordering::SeqCst) != SERVING
    }

    /// Whether `addr` lies in this allocator's memory while it sleeps or falls asleep.
    pub fn holds_asleep(&self, addr: u64) -> bool {
        self.refuses_allocations() && self.may_hold(addr) && self.holds(addr)
    }

    /// Starts refusing allocations (`REFUSING_*`) or ends it (`SERVING`), with the
    /// stream map locked (see the module notes), and counts the allocator among those
    /// asleep (`ASLEEP`) meanwhile.
    fn set_refusing(&self, _streams: &MutexGuard<'_, StreamMap>, to: u8) {
        match (self.refusing.swap(to, Ordering::SeqCst) == SERVING, to == SERVING) {
            (true, false) => ASLEEP.fetch_add(1, Ordering::SeqCst),
            (false, true) => ASLEEP.fetch_sub(1, Ordering::SeqCst),
            _ => 0,
        };
    }

    /// The stream map and every shard locked, in index order.
    /// Makes, ahead of a sleep, the host memory each shard's offload would need for
    /// what it holds now (and an eighth more, for growth), so that the next sleep copies
    /// at once: a first offload otherwise spends most of its time making that memory.
    /// Shards keeping enough already are left alone. The bytes made, in all.
    pub fn prepare_sleep(&self) -> Result<u64> {
        let _one = lock(&self.transition);
        if self.sleep_mode().is_some() {
            return Err(Error::invalid_argument("the memory pool is asleep: it prepares for a sleep while awake"));
        }
        let needs: Vec<(u32, u64)> = {
            let (_streams, shards) = self.lock_all();
            shards
                .iter()
                .filter_map(|(i, state)| state.pool.offload_needs().map(|need| (*i, need)))
                .filter(|&(_, (live, kept))| live > kept)
                .map(|(i, (live, _))| (i, (live + live / 8).next_multiple_of(2 << 20)))
                .collect()
        };
        let mut made = 0;
        for (index, bytes) in needs {
            let staging = Staged::new(bytes, self.shared.source.host_staging(bytes)?);
            let (kept, to_free) = {
                let (_streams, mut shards) = self.lock_all();
                let offered = match shards.iter_mut().find(|(i, _)| *i == index) {
                    Some((_, state)) => state.pool.offer_host_copy(staging),
                    None => (false, Some(staging)),
                };
                self.flush(&mut shards);
                offered
            };
            drop(to_free);
            made += if kept { bytes } else { 0 };
        }
        Ok(made)
    }

    fn lock_all(&self) -> Locked<'_, S> {
        let streams = lock(&self.streams);
        let shards = self.shards.iter().enumerate().filter_map(|(i, shard)| Some((i as u32, lock(&shard.get()?.state)))).collect();
        (streams, shards)
    }

    fn flush(&self, shards: &mut [(u32, MutexGuard<'_, ShardState<S>>)]) {
        for (_, state) in shards {
            state.flush(&self.totals);
        }
    }
}
