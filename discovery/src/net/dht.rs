//! Kademlia provider records: our own kept apart from everyone else's, and the records other
//! peers ask us to hold admitted by quota and expired by us.
//!
//! Why: in libp2p's `MemoryStore` inbound ADD_PROVIDER records and our own count against the
//! same `max_provided_keys`, and a key's provider list, once full of others, silently drops our
//! own record. One peer announcing a few thousand keys filled the store, and from then on the
//! node's own `start_providing` failed until restart. Inbound records also never expired unless
//! somebody looked their key up.
//!
//! - [`ProviderStore`] wraps a `MemoryStore` for inbound records and keeps the records we provide
//!   in a map of their own, bounded by [`MAX_OWN_KEYS`]: nothing another peer sends can take
//!   their room.
//! - [`ProviderQuota`] decides which inbound records the swarm task puts into the store
//!   (Kademlia runs with `StoreInserts::FilterBoth`): at most so many keys per providing peer
//!   and in total, each until its expiry, after which [`ProviderQuota::expire`] hands it back
//!   for removal.

use std::borrow::Cow;
use std::collections::{hash_map, HashMap};
use std::iter;
use std::time::{Duration, Instant};

use libp2p::kad::store::{self, MemoryStore, MemoryStoreConfig, RecordStore};
use libp2p::kad::{ProviderRecord, Record, RecordKey};
use libp2p::PeerId;

/// Most keys this node provides itself. A node announces each tag of each of its agents (one
/// shard key per tag); 4096 is 128 agents with 32 tags each.
pub(crate) const MAX_OWN_KEYS: usize = 4096;
/// Most addresses kept of an inbound provider record (the remote chooses them; they are only
/// dial hints handed on to whoever asks for the key).
pub(crate) const MAX_RECORD_ADDRS: usize = 4;
/// Longest address kept in an inbound provider record, bytes.
pub(crate) const MAX_RECORD_ADDR_LEN: usize = 256;

/// Provider records: ours apart, everyone else's in a `MemoryStore` sized for the inbound
/// quota. Value records (PUT_VALUE) are not used by agentnet; inbound ones are never admitted.
pub(crate) struct ProviderStore {
    local: PeerId,
    own: HashMap<RecordKey, ProviderRecord>,
    inbound: MemoryStore,
}

impl ProviderStore {
    /// A store for `local`, holding at most `inbound_keys` keys of other peers' records.
    pub(crate) fn new(local: PeerId, inbound_keys: usize) -> Self {
        Self {
            local,
            own: HashMap::new(),
            inbound: MemoryStore::with_config(
                local,
                MemoryStoreConfig {
                    max_provided_keys: inbound_keys.max(1),
                    // Values are not used: the little room there is for ones Kademlia's own
                    // queries cache.
                    max_records: 64,
                    ..Default::default()
                },
            ),
        }
    }
}

type OwnIter<'a> = iter::Map<
    hash_map::Values<'a, RecordKey, ProviderRecord>,
    fn(&'a ProviderRecord) -> Cow<'a, ProviderRecord>,
>;

impl RecordStore for ProviderStore {
    type RecordsIter<'a> = <MemoryStore as RecordStore>::RecordsIter<'a>;
    type ProvidedIter<'a> = OwnIter<'a>;

    fn get(&self, k: &RecordKey) -> Option<Cow<'_, Record>> {
        self.inbound.get(k)
    }

    fn put(&mut self, r: Record) -> store::Result<()> {
        self.inbound.put(r)
    }

    fn remove(&mut self, k: &RecordKey) {
        self.inbound.remove(k)
    }

    fn records(&self) -> Self::RecordsIter<'_> {
        self.inbound.records()
    }

    fn add_provider(&mut self, record: ProviderRecord) -> store::Result<()> {
        if record.provider != self.local {
            return self.inbound.add_provider(record);
        }
        if self.own.len() >= MAX_OWN_KEYS && !self.own.contains_key(&record.key) {
            return Err(store::Error::MaxProvidedKeys);
        }
        self.own.insert(record.key.clone(), record);
        Ok(())
    }

    fn providers(&self, key: &RecordKey) -> Vec<ProviderRecord> {
        let mut all: Vec<ProviderRecord> = self.own.get(key).cloned().into_iter().collect();
        all.extend(self.inbound.providers(key));
        all
    }

    fn provided(&self) -> Self::ProvidedIter<'_> {
        self.own.values().map(Cow::Borrowed)
    }

    fn remove_provider(&mut self, k: &RecordKey, p: &PeerId) {
        if *p == self.local {
            self.own.remove(k);
        } else {
            self.inbound.remove_provider(k, p);
        }
    }
}

/// What [`ProviderQuota::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A new record: store it.
    New,
    /// A record we hold, refreshed: store it again (its expiry moved).
    Refresh,
    /// The providing peer holds its quota of keys.
    PeerFull,
    /// The inbound total is reached.
    Full,
}

impl Admission {
    /// Whether the record goes into the store.
    pub(crate) fn admitted(self) -> bool {
        matches!(self, Admission::New | Admission::Refresh)
    }
}

/// The ledger of inbound provider records: which peer provides which keys until when.
#[derive(Debug)]
pub(crate) struct ProviderQuota {
    per_peer: usize,
    total: usize,
    held: usize,
    by_peer: HashMap<PeerId, HashMap<RecordKey, Instant>>,
}

impl ProviderQuota {
    /// At most `per_peer` keys per providing peer, `total` in all.
    pub(crate) fn new(per_peer: usize, total: usize) -> Self {
        Self {
            per_peer: per_peer.max(1),
            total: total.max(1),
            held: 0,
            by_peer: HashMap::new(),
        }
    }

    /// Whether `peer` may provide `key` until `expires` (the record's expiry; `ttl` from `now`
    /// when the record has none).
    pub(crate) fn admit(
        &mut self,
        peer: PeerId,
        key: &RecordKey,
        expires: Option<Instant>,
        ttl: Duration,
        now: Instant,
    ) -> Admission {
        // Never longer than our own ttl, whatever the record says.
        let until = expires.unwrap_or(now + ttl).min(now + ttl);
        if let Some(keys) = self.by_peer.get_mut(&peer) {
            if let Some(e) = keys.get_mut(key) {
                *e = until;
                return Admission::Refresh;
            }
            if keys.len() >= self.per_peer {
                return Admission::PeerFull;
            }
        }
        if self.held >= self.total {
            return Admission::Full;
        }
        self.by_peer
            .entry(peer)
            .or_default()
            .insert(key.clone(), until);
        self.held += 1;
        Admission::New
    }

    /// Forget `peer`'s record of `key` (it could not be stored after all).
    pub(crate) fn forget(&mut self, peer: &PeerId, key: &RecordKey) {
        if let Some(keys) = self.by_peer.get_mut(peer) {
            if keys.remove(key).is_some() {
                self.held -= 1;
            }
            if keys.is_empty() {
                self.by_peer.remove(peer);
            }
        }
    }

    /// Forget every record expired at `now` and return them, for removal from the store.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<(RecordKey, PeerId)> {
        let mut gone = Vec::new();
        self.by_peer.retain(|peer, keys| {
            keys.retain(|key, until| {
                let keep = *until > now;
                if !keep {
                    gone.push((key.clone(), *peer));
                }
                keep
            });
            !keys.is_empty()
        });
        self.held -= gone.len().min(self.held);
        gone
    }

    /// Inbound records held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

/// An inbound record trimmed to what we keep of it: at most [`MAX_RECORD_ADDRS`] addresses of
/// at most [`MAX_RECORD_ADDR_LEN`] bytes.
pub(crate) fn trim_record(mut record: ProviderRecord) -> ProviderRecord {
    record
        .addresses
        .retain(|a| a.as_ref().len() <= MAX_RECORD_ADDR_LEN);
    record.addresses.truncate(MAX_RECORD_ADDRS);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> RecordKey {
        RecordKey::new(&i.to_be_bytes())
    }

    fn record(key: RecordKey, provider: PeerId) -> ProviderRecord {
        ProviderRecord {
            key,
            provider,
            expires: None,
            addresses: vec![],
        }
    }

    #[test]
    fn own_records_are_never_crowded_out() {
        let local = PeerId::random();
        let mut s = ProviderStore::new(local, 8);
        let sybils: Vec<PeerId> = (0..30).map(|_| PeerId::random()).collect();
        // Others fill the inbound keys, and one key's provider list, to the brim.
        for i in 0..8 {
            s.add_provider(record(key(i), sybils[0])).unwrap();
        }
        assert!(s.add_provider(record(key(100), sybils[0])).is_err());
        for p in &sybils {
            let _ = s.add_provider(record(key(0), *p));
        }
        // Our own still go in, on a crowded key and on new ones.
        s.add_provider(record(key(0), local)).unwrap();
        for i in 1000..1000 + MAX_OWN_KEYS as u32 - 1 {
            s.add_provider(record(key(i), local)).unwrap();
        }
        assert_eq!(s.provided().count(), MAX_OWN_KEYS);
        assert!(s.add_provider(record(key(100_000), local)).is_err());
        assert!(s.providers(&key(0)).iter().any(|r| r.provider == local));
        s.remove_provider(&key(0), &local);
        assert!(!s.providers(&key(0)).iter().any(|r| r.provider == local));
        assert!(!s.providers(&key(0)).is_empty(), "others' records stay");
    }

    #[test]
    fn quota_per_peer_and_total_and_expiry() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(100);
        let mut q = ProviderQuota::new(3, 5);
        let (a, b, c) = (PeerId::random(), PeerId::random(), PeerId::random());
        for i in 0..3 {
            assert_eq!(q.admit(a, &key(i), None, ttl, t0), Admission::New);
        }
        assert_eq!(q.admit(a, &key(3), None, ttl, t0), Admission::PeerFull);
        assert_eq!(q.admit(a, &key(0), None, ttl, t0), Admission::Refresh);
        assert_eq!(q.admit(b, &key(0), None, ttl, t0), Admission::New);
        // b's second record claims to live for ever: capped at our ttl.
        let forever = Some(t0 + Duration::from_secs(1_000_000));
        assert_eq!(q.admit(b, &key(1), forever, ttl, t0), Admission::New);
        assert_eq!(q.admit(c, &key(9), None, ttl, t0), Admission::Full);
        assert_eq!(q.held(), 5);

        // a refreshes key 2 later; everything else expires at t0 + ttl.
        let t1 = t0 + Duration::from_secs(50);
        assert_eq!(q.admit(a, &key(2), None, ttl, t1), Admission::Refresh);
        let mut gone = q.expire(t0 + ttl);
        gone.sort_by_key(|(k, _)| k.to_vec());
        assert_eq!(gone.len(), 4);
        assert_eq!(q.held(), 1);
        assert_eq!(q.admit(c, &key(9), None, ttl, t0 + ttl), Admission::New);
        assert_eq!(q.expire(t1 + ttl).len(), 1, "a's refreshed key");
        assert_eq!(q.expire(t0 + 2 * ttl).len(), 1, "c's key");
        assert_eq!(q.held(), 0);
        assert!(q.by_peer.is_empty());
    }

    #[test]
    fn records_are_trimmed() {
        let long: libp2p::Multiaddr = format!("/dns4/{}/tcp/1", "a".repeat(300)).parse().unwrap();
        let short: libp2p::Multiaddr = "/ip4/127.0.0.1/tcp/1".parse().unwrap();
        let mut r = record(key(1), PeerId::random());
        r.addresses = vec![long];
        r.addresses.extend(std::iter::repeat_n(short, 10));
        let r = trim_record(r);
        assert_eq!(r.addresses.len(), MAX_RECORD_ADDRS);
        assert!(r.addresses.iter().all(|a| a.as_ref().len() < 64));
    }
}
