//! The network's admission policies as plain structs: they take `now` where time matters and
//! return decisions; the swarm task only applies them. Each is unit-tested here, without a swarm.
//!
//! - [`SlotCounts`] / [`ResolveSlots`]: validations that must fetch a DID document hold a slot
//!   of a small pool, at most a few per peer, instead of a general validation permit.
//! - [`FetchLimiter`]: inbound fetch requests in flight per peer and in total, and per peer per
//!   window.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libp2p::PeerId;

/// Counts of slots in use, in total and per key (a peer). An entry exists only while its key
/// holds a slot, so the map never has more than `total` entries.
#[derive(Debug)]
pub(crate) struct SlotCounts<K> {
    total: usize,
    per_key: usize,
    in_use: usize,
    by_key: HashMap<K, usize>,
}

impl<K: Hash + Eq + Clone> SlotCounts<K> {
    /// At most `total` slots, at most `per_key` of them held by one key (both at least 1).
    pub(crate) fn new(total: usize, per_key: usize) -> Self {
        Self {
            total: total.max(1),
            per_key: per_key.max(1),
            in_use: 0,
            by_key: HashMap::new(),
        }
    }

    /// Take a slot for `key`: false if the pool or the key's share is used up.
    pub(crate) fn take(&mut self, key: &K) -> bool {
        if self.in_use >= self.total {
            return false;
        }
        let held = self.by_key.get(key).copied().unwrap_or(0);
        if held >= self.per_key {
            return false;
        }
        self.by_key.insert(key.clone(), held + 1);
        self.in_use += 1;
        true
    }

    /// Give back a slot `key` took.
    pub(crate) fn release(&mut self, key: &K) {
        match self.by_key.get_mut(key) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.by_key.remove(key);
            }
            None => return,
        }
        self.in_use = self.in_use.saturating_sub(1);
    }

    /// Slots in use.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.in_use
    }

    /// Slots `key` holds.
    pub(crate) fn held_by(&self, key: &K) -> usize {
        self.by_key.get(key).copied().unwrap_or(0)
    }
}

/// The resolution pool shared by a node's validation tasks: a [`SlotCounts`] behind a mutex,
/// handing out [`ResolveSlot`] guards that give the slot back when dropped (whether the
/// validation finished, failed or was cancelled at shutdown).
#[derive(Debug, Clone)]
pub(crate) struct ResolveSlots {
    counts: Arc<Mutex<SlotCounts<PeerId>>>,
}

impl ResolveSlots {
    pub(crate) fn new(total: usize, per_peer: usize) -> Self {
        Self {
            counts: Arc::new(Mutex::new(SlotCounts::new(total, per_peer))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SlotCounts<PeerId>> {
        // The counts stay consistent even if a holder panicked: every change is one statement.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a validation on behalf of `peer`, or `None` if none is free for it.
    pub(crate) fn try_take(&self, peer: PeerId) -> Option<ResolveSlot> {
        self.lock().take(&peer).then(|| ResolveSlot {
            slots: self.clone(),
            peer,
        })
    }

    /// Slots in use.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.lock().in_use()
    }
}

/// A held resolution slot; dropping it gives it back.
#[derive(Debug)]
pub(crate) struct ResolveSlot {
    slots: ResolveSlots,
    peer: PeerId,
}

impl Drop for ResolveSlot {
    fn drop(&mut self) {
        self.slots.lock().release(&self.peer);
    }
}

/// Why an inbound fetch request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FetchRefusal {
    /// The peer already has its share of requests in flight.
    PeerBusy,
    /// The node has its total of requests in flight.
    Busy,
    /// The peer used up its requests for this window.
    PeerRate,
}

/// Inbound fetch requests: at most `per_peer` in flight per peer and `total` in all, at most
/// `per_window` started per peer per `window`. A request that gets past it is answered; the
/// rest are refused before any store read.
#[derive(Debug)]
pub(crate) struct FetchLimiter {
    in_flight: SlotCounts<PeerId>,
    per_window: u32,
    window: Duration,
    /// Per peer: start of its window, requests started in it. Entries whose window ended are
    /// dropped when the map reaches `max_peers`; a new peer beyond that is refused.
    windows: HashMap<PeerId, (Instant, u32)>,
    max_peers: usize,
}

impl FetchLimiter {
    pub(crate) fn new(
        total: usize,
        per_peer: usize,
        per_window: u32,
        window: Duration,
        max_peers: usize,
    ) -> Self {
        Self {
            in_flight: SlotCounts::new(total, per_peer),
            per_window: per_window.max(1),
            window,
            windows: HashMap::new(),
            max_peers: max_peers.max(1),
        }
    }

    /// Admit a request from `peer` at `now`; [`FetchLimiter::finish`] must follow an `Ok`.
    pub(crate) fn start(&mut self, peer: PeerId, now: Instant) -> Result<(), FetchRefusal> {
        if !self.windows.contains_key(&peer) && self.windows.len() >= self.max_peers {
            let window = self.window;
            self.windows
                .retain(|_, (start, _)| now.saturating_duration_since(*start) < window);
            if self.windows.len() >= self.max_peers {
                return Err(FetchRefusal::Busy);
            }
        }
        let entry = self.windows.entry(peer).or_insert((now, 0));
        if now.saturating_duration_since(entry.0) >= self.window {
            *entry = (now, 0);
        }
        if entry.1 >= self.per_window {
            return Err(FetchRefusal::PeerRate);
        }
        if self.in_flight.held_by(&peer) >= self.in_flight.per_key {
            return Err(FetchRefusal::PeerBusy);
        }
        if !self.in_flight.take(&peer) {
            return Err(FetchRefusal::Busy);
        }
        entry.1 += 1;
        Ok(())
    }

    /// A request admitted for `peer` was answered (or its answer failed).
    pub(crate) fn finish(&mut self, peer: &PeerId) {
        self.in_flight.release(peer);
    }

    /// Requests in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.in_use()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> PeerId {
        PeerId::random()
    }

    #[test]
    fn slots_bound_each_key_and_the_total() {
        let mut s = SlotCounts::new(3, 2);
        let (a, b, c) = (1u8, 2u8, 3u8);
        assert!(s.take(&a));
        assert!(s.take(&a));
        assert!(!s.take(&a), "a third slot for one key");
        assert!(s.take(&b));
        assert!(!s.take(&c), "over the total");
        s.release(&a);
        assert!(s.take(&c));
        assert_eq!(s.in_use(), 3);
        // Releasing what was never taken changes nothing.
        s.release(&9);
        assert_eq!(s.in_use(), 3);
        for k in [a, b, c] {
            s.release(&k);
        }
        assert_eq!(s.in_use(), 0);
        assert!(s.by_key.is_empty(), "no entry outlives its slots");
    }

    #[test]
    fn resolve_slot_guards_give_back_on_drop() {
        let slots = ResolveSlots::new(4, 2);
        let p = peer();
        let g1 = slots.try_take(p).unwrap();
        let _g2 = slots.try_take(p).unwrap();
        assert!(slots.try_take(p).is_none());
        let q = peer();
        let _g3 = slots.try_take(q).unwrap();
        drop(g1);
        let _g4 = slots.try_take(p).expect("given back");
        assert_eq!(slots.in_use(), 3);
    }

    #[test]
    fn fetch_limiter_in_flight_per_peer_and_total() {
        let now = Instant::now();
        let mut l = FetchLimiter::new(5, 2, 100, Duration::from_secs(10), 64);
        let (a, b, c) = (peer(), peer(), peer());
        assert_eq!(l.start(a, now), Ok(()));
        assert_eq!(l.start(a, now), Ok(()));
        assert_eq!(l.start(a, now), Err(FetchRefusal::PeerBusy));
        assert_eq!(l.start(b, now), Ok(()));
        assert_eq!(l.start(b, now), Ok(()));
        assert_eq!(l.start(c, now), Ok(()));
        assert_eq!(l.start(c, now), Err(FetchRefusal::Busy));
        l.finish(&a);
        assert_eq!(l.start(c, now), Ok(()));
        assert_eq!(l.in_flight(), 5);
    }

    #[test]
    fn fetch_limiter_rate_per_window() {
        let t0 = Instant::now();
        let mut l = FetchLimiter::new(100, 100, 3, Duration::from_secs(10), 64);
        let a = peer();
        for _ in 0..3 {
            assert_eq!(l.start(a, t0), Ok(()));
            l.finish(&a);
        }
        assert_eq!(
            l.start(a, t0 + Duration::from_secs(9)),
            Err(FetchRefusal::PeerRate)
        );
        // A refused request does not count: the next window starts fresh.
        assert_eq!(l.start(a, t0 + Duration::from_secs(10)), Ok(()));
    }

    #[test]
    fn fetch_limiter_tracks_a_bounded_number_of_peers() {
        let t0 = Instant::now();
        let mut l = FetchLimiter::new(1000, 10, 10, Duration::from_secs(10), 4);
        for _ in 0..4 {
            let p = peer();
            assert_eq!(l.start(p, t0), Ok(()));
            l.finish(&p);
        }
        assert_eq!(l.start(peer(), t0), Err(FetchRefusal::Busy));
        assert_eq!(l.windows.len(), 4);
        // Once their windows end, the old entries make room.
        assert_eq!(l.start(peer(), t0 + Duration::from_secs(10)), Ok(()));
        assert_eq!(l.windows.len(), 1);
    }
}
