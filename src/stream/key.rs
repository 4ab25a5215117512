//! Stream keys: how the allocators and the sanitizer name a stream. A native
//! stream is its own key, but the legacy default stream has two spellings, and the
//! per-thread default stream is one value naming a different stream on every thread.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{NATIVE_LEGACY as LEGACY, NATIVE_PER_THREAD as PER_THREAD};

static NEXT_PER_THREAD_KEY: AtomicU64 = AtomicU64::new(3);

thread_local! {
    /// This thread's key for its per-thread default stream (see `stream_key`).
    static PER_THREAD_KEY: u64 = NEXT_PER_THREAD_KEY.fetch_add(2, Ordering::Relaxed);
}

/// The allocator's key for a native stream. The legacy default stream is 0 to the
/// runtime and `CU_STREAM_LEGACY` to the driver: both are key 1. The per-thread
/// default stream is one value but a different stream on every thread, so each
/// thread has its own key for it: an odd number above 1, which no stream handle (an
/// aligned pointer) can be. Without this, a block freed on one thread's per-thread
/// stream went at once to another's while work queued on the first still used it.
#[inline(always)]
pub(crate) fn stream_key(native: u64) -> u64 {
    match native {
        0 => LEGACY,
        PER_THREAD => PER_THREAD_KEY.with(|key| *key),
        _ => native,
    }
}

/// The native stream to ask about or record on for a stream key, from this thread:
/// this thread's per-thread stream for its own key; for another thread's, the legacy
/// default stream, which is ordered after all work queued so far on every blocking
/// stream (per-thread default streams included), so a marker there covers it.
#[inline]
pub(crate) fn native_stream_of(key: u64) -> u64 {
    if key & 1 == 0 || key == LEGACY {
        key
    } else if PER_THREAD_KEY.with(|own| *own == key) {
        PER_THREAD
    } else {
        LEGACY
    }
}

/// A native stream of `device` as the sanitizer names it (its kind, when known).
#[inline]
pub(crate) fn sanitizer_ref(device: i32, native: u64, kind: Option<crate::sanitizer::StreamKind>) -> crate::sanitizer::StreamRef {
    crate::sanitizer::StreamRef { id: crate::sanitizer::StreamId { device, key: stream_key(native) }, native, kind }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_has_its_own_key_for_its_per_thread_stream() {
        assert_eq!((stream_key(0), stream_key(LEGACY)), (LEGACY, LEGACY));
        let created = 0x7f00_1234_5670;
        assert_eq!((stream_key(created), native_stream_of(created)), (created, created));
        let mine = stream_key(PER_THREAD);
        assert!(mine % 2 == 1 && mine > LEGACY && stream_key(PER_THREAD) == mine);
        assert_eq!(native_stream_of(mine), PER_THREAD);
        let (theirs, mine_seen_there) = std::thread::spawn(move || (stream_key(PER_THREAD), native_stream_of(mine))).join().unwrap();
        assert_ne!(theirs, mine);
        assert_eq!(mine_seen_there, LEGACY, "another thread's per-thread stream is covered by the legacy stream");
        assert_eq!(native_stream_of(theirs), LEGACY);
    }
}
