//! Vector clocks: what each stream (and the host) knows to have finished, as the
//! last finished tick of every stream. Streams are numbered by slot, never reused,
//! so an old access's tick stays comparable after its stream is gone.

/// A point in one stream's order: the stream's slot and its tick there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Epoch {
    pub slot: usize,
    pub tick: u64,
}

/// For every stream slot, the last tick known to be finished (0: none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VectorClock(Vec<u64>);

impl VectorClock {
    pub fn get(&self, slot: usize) -> u64 {
        self.0.get(slot).copied().unwrap_or(0)
    }

    /// Advances `slot` by one tick and returns the new point.
    pub fn tick(&mut self, slot: usize) -> Epoch {
        if self.0.len() <= slot {
            self.0.resize(slot + 1, 0);
        }
        self.0[slot] += 1;
        Epoch { slot, tick: self.0[slot] }
    }

    /// Learns everything `other` knows (element-wise maximum).
    pub fn join(&mut self, other: &VectorClock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        self.0.iter_mut().zip(&other.0).for_each(|(mine, theirs)| *mine = (*mine).max(*theirs));
    }

    /// Whether the work at `epoch` is known finished before anything ordered after this clock.
    pub fn covers(&self, epoch: Epoch) -> bool {
        self.get(epoch.slot) >= epoch.tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_is_the_elementwise_maximum_and_covers_follows_it() {
        let (mut a, mut b) = (VectorClock::default(), VectorClock::default());
        let a1 = a.tick(0);
        let a2 = a.tick(0);
        let b1 = b.tick(3);
        assert!(!b.covers(a1) && !a.covers(b1));
        assert!(a.covers(a2) && a.covers(a1));
        b.join(&a);
        assert!(b.covers(a2) && b.covers(b1));
        assert_eq!((b.get(0), b.get(1), b.get(3), b.get(9)), (2, 0, 1, 0));
        a.join(&VectorClock::default());
        assert_eq!(a.get(0), 2, "joining an empty clock changes nothing");
    }
}
