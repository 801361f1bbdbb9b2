//! What the store accepts from other nodes: the caps, the admission policy (plain data in, a
//! decision out) and the free-disk probe. See the [store documentation](super).

use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use tracing::warn;

use super::{lock, DISK_PROBE_TTL, MAX_TOTAL_WAL_BYTES, MIN_TOTAL_WAL_BYTES};

/// What the store accepts from others. Adverts the node signs itself ([`Store::put_own`]) are
/// counted but never refused. Defaults suit a node with a few GiB of disk; a node that indexes
/// a large network raises `max_total_bytes` and `max_peer_bytes` together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Cap on the logical bytes stored (adverts, their index entries, and the seqs kept for
    /// replay protection). Default 512 MiB: 250 000 adverts of 2 KiB.
    pub max_total_bytes: u64,
    /// Cap on the bytes of the adverts naming one publishing `peerId`. Default 64 MiB, an
    /// eighth of the total: one node hosting 30 000 agents, and no single claimed publisher
    /// can take the whole store.
    pub max_peer_bytes: u64,
    /// Cap on the bytes of one DID's advert with its index entries. Default 96 KiB: the
    /// largest advert validation lets through (64 KiB) with every tag indexed.
    pub max_did_bytes: u64,
    /// Others' adverts are refused while the store's file system has less free space than
    /// this. Default 256 MiB: room for compactions, the write-ahead log, the node's own
    /// publishing and the sweep's deletions, with a second of a full-speed flood (the reading
    /// is cached for a second) on top.
    pub min_free_bytes: u64,
    /// Seconds after an advert's `issued_at` past which no advertisement of the DID with that
    /// seq or lower can still be valid: the validator's longest lifetime plus its clock skew.
    /// The seq is deleted then. Default: [`crate::advert::Limits`]' `max_ttl + max_skew`.
    pub replay_window: u64,
}

impl Default for Limits {
    fn default() -> Self {
        let advert = crate::advert::Limits::default();
        Limits {
            max_total_bytes: 512 << 20,
            max_peer_bytes: 64 << 20,
            max_did_bytes: 96 << 10,
            min_free_bytes: 256 << 20,
            replay_window: advert.max_ttl.saturating_add(advert.max_skew),
        }
    }
}

/// Why the store refused an advert from another node. Nothing was written; the advert may be
/// offered again later (gossipsub: Ignore, not Reject: the sender broke no rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// The advert would take the store past [`Limits::max_total_bytes`].
    StoreFull,
    /// Its publishing peer's adverts would pass [`Limits::max_peer_bytes`].
    PeerQuota,
    /// The DID's advert alone is larger than [`Limits::max_did_bytes`].
    DidQuota,
    /// The file system has less than [`Limits::min_free_bytes`] free.
    DiskLow,
}

impl Refusal {
    /// A short name for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::StoreFull => "store_full",
            Refusal::PeerQuota => "peer_quota",
            Refusal::DidQuota => "did_quota",
            Refusal::DiskLow => "disk_low",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// Refusals counted since the store was opened, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    /// [`Refusal::StoreFull`].
    pub store_full: u64,
    /// [`Refusal::PeerQuota`].
    pub peer_quota: u64,
    /// [`Refusal::DidQuota`].
    pub did_quota: u64,
    /// [`Refusal::DiskLow`].
    pub disk_low: u64,
}

/// What the store holds, for the admin API and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Logical bytes charged against [`Limits::max_total_bytes`].
    pub bytes: u64,
    /// Adverts stored (expired ones until swept).
    pub adverts: usize,
    /// Refusals since open.
    pub refused: Refusals,
}

/// One put as the admission policy sees it: sizes before and after, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The node signed this advert itself: never refused.
    pub own: bool,
    /// The new advert's bytes (record and index entries).
    pub did_bytes: u64,
    /// How much the store total changes (new advert and a new seq, minus the old advert).
    pub growth: i64,
    /// The store total before.
    pub total: u64,
    /// How much the publishing peer's bytes change.
    pub peer_growth: i64,
    /// The publishing peer's bytes before.
    pub peer_bytes: u64,
    /// Free bytes on the store's file system, if known.
    pub free_disk: Option<u64>,
}

impl Limits {
    /// The admission decision for one put. Updates that do not grow the total (or the peer's
    /// share) pass a full store; nothing from others passes a nearly full disk.
    pub fn admit(&self, a: &Admission) -> Result<(), Refusal> {
        if a.own {
            return Ok(());
        }
        if a.did_bytes > self.max_did_bytes {
            return Err(Refusal::DidQuota);
        }
        if a.free_disk.is_some_and(|free| free < self.min_free_bytes) {
            return Err(Refusal::DiskLow);
        }
        if a.growth > 0 && a.total.saturating_add(a.growth.unsigned_abs()) > self.max_total_bytes {
            return Err(Refusal::StoreFull);
        }
        if a.peer_growth > 0
            && a.peer_bytes.saturating_add(a.peer_growth.unsigned_abs()) > self.max_peer_bytes
        {
            return Err(Refusal::PeerQuota);
        }
        Ok(())
    }

    pub(super) fn max_total_wal_bytes(&self) -> u64 {
        (self.max_total_bytes / 8).clamp(MIN_TOTAL_WAL_BYTES, MAX_TOTAL_WAL_BYTES)
    }
}

/// Free space on the store's file system, read at most once per [`DISK_PROBE_TTL`].
pub(super) struct DiskProbe {
    pub(super) path: PathBuf,
    pub(super) last: Mutex<Option<(Instant, Option<u64>)>>,
}

impl DiskProbe {
    /// Free bytes available to us, `None` if `statvfs` fails (then only the byte caps hold; the
    /// failure is logged once per reading).
    pub(super) fn free_bytes(&self, now: Instant) -> Option<u64> {
        let mut last = lock(&self.last);
        if let Some((at, free)) = *last {
            if now.saturating_duration_since(at) < DISK_PROBE_TTL {
                return free;
            }
        }
        let free = match rustix::fs::statvfs(&self.path) {
            Ok(st) => Some(st.f_bavail.saturating_mul(st.f_frsize)),
            Err(error) => {
                warn!(%error, path = %self.path.display(), "reading free disk space");
                None
            }
        };
        *last = Some((now, free));
        free
    }
}
