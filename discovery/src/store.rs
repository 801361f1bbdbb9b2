//! The RocksDB store of validated advertisements, their tag index, sequence numbers and known
//! peers. This documentation is the layout's specification.
//!
//! Every method is synchronous and may block on disk I/O: call it from `spawn_blocking` or a
//! dedicated thread, never from the swarm task or an async worker. [`Store`] is a cheap `Clone`
//! (an `Arc`) and is `Send + Sync`.
//!
//! # Column families (layout 2)
//! | CF           | key                                        | value                            |
//! |--------------|--------------------------------------------|----------------------------------|
//! | `default`    | `schema`                                   | layout version (u64 BE), 2       |
//! | `adverts`    | DID                                        | advert record (below)            |
//! | `tags`       | tag ‖ `0x00` ‖ `!issued_at` (u64 BE) ‖ DID | `expires_at` (u64 BE) ‖ filter   |
//! | `tag_counts` | tag                                        | adverts with the tag (u64 BE)    |
//! | `expiry`     | `expires_at` (u64 BE) ‖ DID                | empty                            |
//! | `seqs`       | DID                                        | highest seq ‖ prune time (BE)    |
//! | `seq_expiry` | prune time (u64 BE) ‖ DID                  | empty                            |
//! | `own_seq`    | DID                                        | last [`Store::next_own_seq`]     |
//! | `usage`      | `t` / `p` ‖ peer id                        | bytes / bytes ‖ adverts (BE)     |
//! | `peers`      | `r` ‖ peer id / `t` ‖ last seen (BE) ‖ id  | peer record / empty              |
//!
//! Every advert has one `tags` entry per tag plus one under the empty tag (prefix `0x00`), the
//! list of all adverts. Within a tag the keys sort newest `issued_at` first (the bitwise NOT makes
//! big timestamps small), then by DID. An index value is 24 bytes whatever the tag set: the
//! advert's `expires_at` and a 128-bit filter of its tags (two bits per tag, from the tag's
//! SHA-256). [`Store::find`] walks the list of the queried tag with the smallest count in
//! `tag_counts`, skips entries that are expired or whose filter lacks a bit of the query's,
//! reads the record of the others and checks the tags exactly, stopping after `limit` hits. A
//! query costs `limit` steps plus the entries it skips, at worst the length of the rarest
//! queried tag's list, never the size of the store; the filter's false positives (~1.5 % per
//! missing tag for an advert of 8 tags) cost one record read each. The counts are a planning
//! hint only: results do not depend on them. `expiry` and `seq_expiry` let
//! [`Store::sweep_expired`] visit only what is due. Tags cannot contain control characters and
//! DIDs cannot contain NUL; both are checked before anything is written, so `0x00` is an
//! unambiguous separator.
//!
//! # Records
//! An advert record is `0x01` (format version) ‖ seq ‖ issued_at ‖ expires_at (u64 BE each) ‖ tag
//! count (u8) ‖ per tag: length (u8) ‖ UTF-8 ‖ peer id length (u16 BE) ‖ UTF-8 ‖ advert length
//! (u32 BE) ‖ the advertisement bytes exactly as received. The DID is the key. A peer record is
//! `0x01` ‖ last seen (u64 BE) ‖ address count (u8) ‖ per address a length (u16 BE) and UTF-8.
//! Any other version, a short or long record, or invalid UTF-8 is [`StoreError::Corrupt`].
//!
//! # Bounds on what others can make us store
//! Outsiders can mint DIDs for free and sign valid adverts with them, so validity bounds
//! nothing. [`Limits`] (defaults documented there) bounds what adverts from other nodes
//! ([`Store::put`]) may take; the node's own adverts ([`Store::put_own`], which the network
//! layer calls from `Client::publish`) are counted but never refused, so that a flood never
//! stops the node announcing its agents.
//! - **Total**: the logical bytes of every advert (record, index entries, expiry entry, each
//!   with [`ENTRY_OVERHEAD`]) and of every seq kept (its two entries) are summed in `usage`,
//!   in the same atomic batch as the change. An advert from a DID not stored, or any other put
//!   that grows the total past [`Limits::max_total_bytes`], is refused with
//!   [`Refusal::StoreFull`]; an update that does not grow the total passes a full store.
//!   Nothing accepted is evicted to make room: a node that silently dropped agents it had
//!   indexed would answer discovery queries wrongly, with no one the wiser; refusing the
//!   newcomer is visible (a counted refusal, and the advert comes again by gossip later).
//!   Room comes back when adverts expire and are swept.
//! - **Per publishing peer**: the bytes of the adverts naming a `peerId` (the node hosting the
//!   agents, signed into the advert by the DID's key) are capped at
//!   [`Limits::max_peer_bytes`] ([`Refusal::PeerQuota`]). This is the advert's publisher, not
//!   the gossip peer that relayed it: every honest node relays everyone's adverts, and charging
//!   relays would refuse honest traffic from our best-connected neighbours (relays are rate
//!   limited per connection in the network layer instead). The claim is not authenticated by
//!   the peer: an attacker can name a victim's peer id and use up its quota, which refuses the
//!   victim's *new* agents on this node until the attacker's adverts expire, a subset of what
//!   filling the total does anyway; the quota keeps one claimed publisher from taking the whole
//!   store.
//! - **Per DID**: one DID has one advert; its bytes are capped at [`Limits::max_did_bytes`]
//!   ([`Refusal::DidQuota`]).
//! - **Free disk**: while the store's file system has less than [`Limits::min_free_bytes`]
//!   available (`statvfs`, read at most once a second), every put from others is refused
//!   ([`Refusal::DiskLow`]), before RocksDB could fail with ENOSPC: the margin is left for the
//!   node's own adverts, compactions and the sweep's deletions (which also write).
//!
//! A refusal writes nothing, is counted ([`Store::usage`]) and is returned as
//! [`StoreError::Refused`], which the network layer turns into a gossipsub Ignore (the sender
//! broke no rule). The directory holds about the logical total, up to twice it while a
//! compaction rewrites data, plus the write-ahead log (an eighth of the cap, 2 to 64 MiB) and
//! RocksDB's own logs (2 MiB).
//!
//! Further bounds: [`MAX_FIND_LIMIT`] results per query, [`MAX_PEERS`] peers (the least recently
//! seen are dropped), [`MAX_ADVERT_BYTES`] per advert. RocksDB memory is kept small: an 8 MiB
//! block cache holding data, index and filter blocks, 4 MiB memtables, 16 MiB of memtables in
//! total, no compression.
//!
//! # Seqs and their pruning
//! A seq entry is what refuses a replay of an older advert after the DID's advert expired and
//! was swept, and across restarts. It is kept only as long as a replay could be valid. An advert
//! is valid only while `now < expires_at <= issued_at + max_ttl`, and honest signers issue
//! increasing seqs at increasing `issued_at`: every advert of a DID with seq `<= S` was issued
//! no later than the one with seq `S`, and none is valid after `issued_at(S) + max_ttl`. With
//! [`Limits::replay_window`] = `max_ttl + max_skew` (the skew covers our own clock stepping
//! back), the entry stores the prune time `issued_at + replay_window` (never lowered by a later
//! advert), and the sweep deletes it once that time has passed and no advert of the DID is
//! stored (one still stored, possible only for an advert outside validation's bounds, moves
//! the prune time to after its expiry). A replay then fails validation as expired. A signer
//! who issues a lower seq with a later `issued_at` can only roll back its own adverts.
//!
//! # Known peers
//! `peers` remembers up to [`MAX_PEERS`] peers with their addresses; the network layer calls
//! [`Store::put_peer`] when it learns a peer's addresses and [`Store::peers`] (most recently
//! seen first) at start to redial them without bootstrap nodes.
//!
//! # Earlier layouts
//! Layout 1 (no `schema` key) had whole tag sets in index values, seqs without prune times, a
//! `did_docs` table (written, never read) and no usage. [`Store::open`] opens it with every
//! column family it lists (RocksDB refuses otherwise), drops `did_docs`, rewrites index values
//! and seqs (prune time: the stored advert's `issued_at` + window, or now + window for a DID
//! whose advert is gone), counts the usage from the records, and writes the version last: an
//! interrupted migration runs again. A store of a newer layout is refused
//! ([`StoreError::NewerSchema`]).
//!
//! # Consistency and durability
//! One mutex serializes every read-check-write of `adverts`, `tags`, `tag_counts`, `expiry`,
//! `seqs`, `seq_expiry`, `own_seq` and `usage`; each change is one atomic `WriteBatch`. Reads
//! run against a RocksDB snapshot and do not take the lock. Advert writes go to the write-ahead
//! log without fsync (an advert lost in a power cut comes back by gossip);
//! [`Store::next_own_seq`] syncs before it returns.
//!
//! Point reads ([`Store::get`], [`Store::seq`], and [`Store::put`] reading the seq) report bad
//! bytes as [`StoreError::Corrupt`]. Bulk reads ([`Store::find`], [`Store::peers`]) skip a
//! corrupt entry with a warning so that one bad record does not hide all others;
//! [`Store::put`] overwrites a corrupt advert record and [`Store::sweep_expired`] deletes one
//! whose expiry has passed (a corrupt record's bytes cannot be known and stay counted: a leak
//! only disk damage can cause, bounded by the damaged records).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options,
    ReadOptions, WriteBatch, WriteOptions, DB,
};
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use crate::advert::Validated;
use crate::tags::{MAX_TAGS, MAX_TAG_LEN};

/// Most adverts one [`Store::find`] returns, whatever `limit` asks.
pub const MAX_FIND_LIMIT: usize = 1000;
/// Most peers kept by [`Store::put_peer`]; the least recently seen are dropped.
pub const MAX_PEERS: usize = 1000;
/// Most addresses kept per peer; further ones are ignored.
pub const MAX_PEER_ADDRS: usize = 32;
/// Longest peer address accepted, in bytes.
pub const MAX_ADDR_LEN: usize = 1024;
/// Longest peer id accepted, in bytes.
pub const MAX_PEER_ID_LEN: usize = 128;
/// Largest advertisement stored, in bytes.
pub const MAX_ADVERT_BYTES: usize = 256 * 1024;
/// Bytes charged per RocksDB entry on top of its key and value: the internal key trailer
/// (8 bytes), length varints, and the entry's share of index and filter blocks. An estimate
/// that errs high, so that the logical total is not below what the files hold.
pub const ENTRY_OVERHEAD: u64 = 32;

/// Expired adverts (or prunable seqs) deleted per write batch (and per hold of the write lock)
/// by a sweep or a migration.
const SWEEP_BATCH: usize = 1024;
const BLOCK_CACHE_BYTES: usize = 8 << 20;
const WRITE_BUFFER_BYTES: usize = 4 << 20;
const TOTAL_WRITE_BUFFER_BYTES: usize = 16 << 20;
/// The write-ahead log is kept below an eighth of the byte cap (a small store on a small disk
/// must not hold 64 MiB of log), between 2 MiB (a few large adverts per flush) and 64 MiB.
const MIN_TOTAL_WAL_BYTES: u64 = 2 << 20;
const MAX_TOTAL_WAL_BYTES: u64 = 64 << 20;
/// How long a free-disk reading is trusted: one `statvfs` per second at most, not one per put.
const DISK_PROBE_TTL: Duration = Duration::from_secs(1);
const RECORD_VERSION: u8 = 1;
/// Layout version, under [`SCHEMA_KEY`] in the default column family. Version 1 (no key) had
/// whole tag sets in index values, seqs without prune times, a `did_docs` column family and no
/// usage accounting; [`Store::open`] migrates it.
const SCHEMA_VERSION: u64 = 2;
const SCHEMA_KEY: &[u8] = b"schema";
/// Bytes of the tag-set filter in each index value (128 bits).
const TAG_FILTER_BYTES: usize = 16;
/// An index value: `expires_at` and the tag-set filter.
const INDEX_VALUE_LEN: usize = 8 + TAG_FILTER_BYTES;

const CF_ADVERTS: &str = "adverts";
const CF_TAGS: &str = "tags";
const CF_EXPIRY: &str = "expiry";
const CF_SEQS: &str = "seqs";
const CF_SEQ_EXPIRY: &str = "seq_expiry";
const CF_OWN_SEQ: &str = "own_seq";
const CF_PEERS: &str = "peers";
const CF_TAG_COUNTS: &str = "tag_counts";
const CF_USAGE: &str = "usage";
const COLUMN_FAMILIES: [&str; 10] = [
    rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
    CF_ADVERTS,
    CF_TAGS,
    CF_EXPIRY,
    CF_SEQS,
    CF_SEQ_EXPIRY,
    CF_OWN_SEQ,
    CF_PEERS,
    CF_TAG_COUNTS,
    CF_USAGE,
];
/// Column families of earlier layouts, dropped on open: `did_docs` was written, never read.
const OBSOLETE_COLUMN_FAMILIES: [&str; 1] = ["did_docs"];

/// Key prefixes inside the bounded `peers` table.
const RECORD_PREFIX: u8 = b'r';
const TIME_PREFIX: u8 = b't';
/// Keys in `usage`: the total, and per publishing peer.
const USAGE_TOTAL_KEY: &[u8] = b"t";
const USAGE_PEER_PREFIX: u8 = b'p';

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
        if a.growth > 0 && a.total.saturating_add(a.growth.unsigned_abs()) > self.max_total_bytes
        {
            return Err(Refusal::StoreFull);
        }
        if a.peer_growth > 0
            && a.peer_bytes.saturating_add(a.peer_growth.unsigned_abs()) > self.max_peer_bytes
        {
            return Err(Refusal::PeerQuota);
        }
        Ok(())
    }

    fn max_total_wal_bytes(&self) -> u64 {
        (self.max_total_bytes / 8).clamp(MIN_TOTAL_WAL_BYTES, MAX_TOTAL_WAL_BYTES)
    }
}

/// Free space on the store's file system, read at most once per [`DISK_PROBE_TTL`].
struct DiskProbe {
    path: PathBuf,
    last: Mutex<Option<(Instant, Option<u64>)>>,
}

impl DiskProbe {
    /// Free bytes available to us, `None` if `statvfs` fails (then only the byte caps hold; the
    /// failure is logged once per reading).
    fn free_bytes(&self, now: Instant) -> Option<u64> {
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

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store's directory could not be created.
    #[error("creating store directory {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// RocksDB failed; `context` says what was being done.
    #[error("{context}: {source}")]
    Db {
        /// What was being done, with what.
        context: String,
        /// RocksDB's error.
        #[source]
        source: rocksdb::Error,
    },
    /// Bytes read from disk are not what this module writes.
    #[error("corrupt entry in column family {cf}, key {key}: {reason}")]
    Corrupt {
        /// The column family.
        cf: &'static str,
        /// The key, printable (non-ASCII bytes escaped), cut to 200 characters.
        key: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Input the store refuses because it would not round-trip or would break the index.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidInput {
        /// Which input: "DID", "tag", "peer id", …
        what: &'static str,
        /// The offending value, cut to 100 characters.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A column family that [`Store::open`] creates is missing (a bug).
    #[error("column family {0} missing")]
    MissingColumnFamily(&'static str),
    /// The own sequence counter of a DID reached `u64::MAX`.
    #[error("allocating a sequence number for {did}: exhausted")]
    SeqExhausted {
        /// The DID.
        did: String,
    },
    /// An advert from another node was not stored: a cap or the disk watermark (see
    /// [`Limits`]). Counted in [`Usage::refused`]; the caller ignores the advert, it does not
    /// penalize the sender.
    #[error("advert of {did} refused: {reason}")]
    Refused {
        /// The advert's DID, cut to 100 characters.
        did: String,
        /// Which limit.
        reason: Refusal,
    },
    /// The store was written by a newer version with a layout this one does not know.
    #[error("store layout version {found} is newer than {SCHEMA_VERSION}")]
    NewerSchema {
        /// The version found.
        found: u64,
    },
}

/// What [`Store::put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// No advert was stored for the DID (never, or it expired and was swept); now this one is.
    Inserted,
    /// The DID's stored advert was replaced.
    Updated {
        /// The highest seq stored before this one.
        previous_seq: u64,
    },
    /// Refused: the seq is not greater than the highest ever stored for the DID. Nothing changed.
    Stale {
        /// The highest seq stored for the DID.
        stored_seq: u64,
    },
}

/// An advert as stored: the validated advertisement, read back.
pub type StoredAdvert = Validated;

/// The RocksDB store. See the [module documentation](self).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    db: DB,
    path: PathBuf,
    limits: Limits,
    disk: DiskProbe,
    /// Serializes every read-check-write of adverts, tags, expiry, seqs, seq_expiry, own_seq,
    /// tag_counts and usage.
    write: Mutex<()>,
    /// Adverts stored (expired ones included until swept).
    adverts: AtomicUsize,
    /// The logical bytes charged (the `usage` total), written under the write lock.
    bytes: AtomicU64,
    /// Entries in `peers`; the lock serializes its writes.
    peers: Mutex<usize>,
    refused: [AtomicU64; 4],
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// A seqs entry: the highest seq stored for a DID, and when it may be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SeqEntry {
    seq: u64,
    /// Unix seconds from which no advert of the DID with seq <= `seq` can be valid; 0 when
    /// unknown (an 8-byte entry of layout 1, which a migration rewrites).
    prune_at: u64,
}

impl SeqEntry {
    fn encode(&self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..].copy_from_slice(&self.prune_at.to_be_bytes());
        out
    }

    fn decode(value: &[u8]) -> Option<SeqEntry> {
        match value.len() {
            8 => Some(SeqEntry {
                seq: decode_u64(value)?,
                prune_at: 0,
            }),
            16 => Some(SeqEntry {
                seq: decode_u64(&value[..8])?,
                prune_at: decode_u64(&value[8..])?,
            }),
            _ => None,
        }
    }
}

/// Who offers an advert to [`Store::put`]: the node itself is never refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Own,
    Other,
}

/// A bounded table: `peers`.
#[derive(Clone, Copy)]
struct Table {
    cf: &'static str,
    cap: usize,
}

const PEERS: Table = Table {
    cf: CF_PEERS,
    cap: MAX_PEERS,
};

impl Store {
    /// Open the store at `path` with the default [`Limits`]. See [`open_with`](Self::open_with).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, Limits::default())
    }

    /// Open the store at `path`, creating the directory and column families if missing, and
    /// migrating a store of an earlier layout (see the module documentation).
    pub fn open_with(path: &Path, limits: Limits) -> Result<Self, StoreError> {
        std::fs::create_dir_all(path).map_err(|source| StoreError::CreateDir {
            path: path.to_owned(),
            source,
        })?;
        let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let mut opts = cf_options(&cache);
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_db_write_buffer_size(TOTAL_WRITE_BUFFER_BYTES);
        opts.set_max_total_wal_size(limits.max_total_wal_bytes());
        opts.set_max_open_files(256);
        opts.set_max_background_jobs(2);
        opts.set_keep_log_file_num(2);
        opts.set_max_log_file_size(1 << 20);
        // RocksDB opens a database only with every column family it has listed: those of
        // earlier layouts too, which are then dropped.
        let existing = DB::list_cf(&opts, path).ok();
        let mut names: Vec<String> = COLUMN_FAMILIES.iter().map(|n| n.to_string()).collect();
        for name in existing.iter().flatten() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        let cfs = names
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(name, cf_options(&cache)));
        let db_err = |context: String| move |source| StoreError::Db { context, source };
        let mut db = DB::open_cf_descriptors(&opts, path, cfs)
            .map_err(db_err(format!("opening store at {}", path.display())))?;
        for name in &names[COLUMN_FAMILIES.len()..] {
            if OBSOLETE_COLUMN_FAMILIES.contains(&name.as_str()) {
                info!(cf = %name, "dropping column family of an earlier layout");
                db.drop_cf(name)
                    .map_err(db_err(format!("dropping column family {name}")))?;
            } else {
                warn!(cf = %name, "unknown column family left in place");
            }
        }
        let store = Store {
            inner: Arc::new(Inner {
                db,
                path: path.to_owned(),
                disk: DiskProbe {
                    path: path.to_owned(),
                    last: Mutex::new(None),
                },
                limits,
                write: Mutex::new(()),
                adverts: AtomicUsize::new(0),
                bytes: AtomicU64::new(0),
                peers: Mutex::new(0),
                refused: Default::default(),
            }),
        };
        let fresh = existing.is_none();
        match store.schema()? {
            Some(SCHEMA_VERSION) => {}
            Some(found) if found > SCHEMA_VERSION => return Err(StoreError::NewerSchema { found }),
            // A database created just now, or one of layout 1.
            _ if fresh => store.write_schema()?,
            _ => store.migrate_v1()?,
        }
        let adverts = store.count_prefix(CF_EXPIRY, &[])?;
        store.inner.adverts.store(adverts, Ordering::Relaxed);
        let bytes = store.read_u64(CF_USAGE, USAGE_TOTAL_KEY)?.unwrap_or(0);
        store.inner.bytes.store(bytes, Ordering::Relaxed);
        *lock(&store.inner.peers) = store.count_prefix(CF_PEERS, &[TIME_PREFIX])?;
        Ok(store)
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Bytes charged, adverts stored, refusals counted.
    pub fn usage(&self) -> Usage {
        let r = |i: usize| self.inner.refused[i].load(Ordering::Relaxed);
        Usage {
            bytes: self.inner.bytes.load(Ordering::Relaxed),
            adverts: self.inner.adverts.load(Ordering::Relaxed),
            refused: Refusals {
                store_full: r(0),
                peer_quota: r(1),
                did_quota: r(2),
                disk_low: r(3),
            },
        }
    }

    /// Bytes and adverts charged to a publishing peer id (the adverts' `peerId`).
    pub fn peer_usage(&self, peer_id: &str) -> Result<(u64, u64), StoreError> {
        self.read_peer_usage(peer_id)
    }

    /// Store a validated advert from another node, replacing the DID's previous one and its tag
    /// index entries in one atomic batch. [`PutOutcome::Stale`] (and nothing written) when
    /// `v.seq` is not greater than the highest seq stored for the DID;
    /// [`StoreError::Refused`] (nothing written, counted) when a [`Limits`] cap or the disk
    /// watermark stands in the way.
    pub fn put(&self, v: &Validated) -> Result<PutOutcome, StoreError> {
        self.put_from(v, Origin::Other)
    }

    /// Store an advert this node signed itself (its own publishing and re-announcing): as
    /// [`put`](Self::put), counted in the usage, but never refused by a cap or the watermark,
    /// so that the node keeps announcing its agents while others fill the store.
    pub fn put_own(&self, v: &Validated) -> Result<PutOutcome, StoreError> {
        self.put_from(v, Origin::Own)
    }

    fn put_from(&self, v: &Validated, origin: Origin) -> Result<PutOutcome, StoreError> {
        check_did(&v.did)?;
        if v.tags.len() > MAX_TAGS {
            return Err(invalid(
                "tag list",
                &v.tags.join(","),
                "more than MAX_TAGS tags",
            ));
        }
        for tag in &v.tags {
            check_tag(tag)?;
        }
        if v.peer_id.len() > MAX_PEER_ID_LEN {
            return Err(invalid(
                "peer id",
                &v.peer_id,
                "longer than MAX_PEER_ID_LEN",
            ));
        }
        if v.bytes.len() > MAX_ADVERT_BYTES {
            return Err(invalid("advert", &v.did, "larger than MAX_ADVERT_BYTES"));
        }
        let mut tags = v.tags.clone();
        tags.sort_unstable();
        tags.dedup();
        let new = Record {
            seq: v.seq,
            issued_at: v.issued_at,
            expires_at: v.expires_at,
            tags,
            peer_id: v.peer_id.clone(),
            bytes: v.bytes.clone(),
        };
        let encoded = new.encode();
        let new_bytes = new.footprint(&v.did, encoded.len());
        let (adverts, tags_cf, expiry, seqs, seq_expiry) = (
            self.cf(CF_ADVERTS)?,
            self.cf(CF_TAGS)?,
            self.cf(CF_EXPIRY)?,
            self.cf(CF_SEQS)?,
            self.cf(CF_SEQ_EXPIRY)?,
        );
        // Read before the lock: a statvfs at most once a second, never under the write lock.
        let free_disk = match origin {
            Origin::Own => None,
            Origin::Other => self.inner.disk.free_bytes(Instant::now()),
        };

        let _guard = lock(&self.inner.write);
        let stored = self.read_seq(&v.did)?;
        if let Some(stored) = stored {
            if v.seq <= stored.seq {
                return Ok(PutOutcome::Stale {
                    stored_seq: stored.seq,
                });
            }
        }
        let old = match self.read_record(&v.did) {
            Ok(old) => old.map(Some),
            Err(error @ StoreError::Corrupt { .. }) => {
                warn!(%error, did = %v.did, "overwriting corrupt advert record");
                Some(None)
            }
            Err(e) => return Err(e),
        };
        if let Some(Some(old)) = &old {
            // The seqs entry should never be below the record; if it is, trust the record.
            if v.seq <= old.seq {
                return Ok(PutOutcome::Stale {
                    stored_seq: old.seq,
                });
            }
        }
        let old_record = old.as_ref().and_then(Option::as_ref);
        let old_bytes = old_record.map_or(0, |o| o.stored_footprint(&v.did));
        let seq_bytes = if stored.is_none() {
            seq_footprint(&v.did)
        } else {
            0
        };
        let growth = i128::from(new_bytes) + i128::from(seq_bytes) - i128::from(old_bytes);
        let growth = i64::try_from(growth).unwrap_or(i64::MAX);
        // The publishing peer's share: all of the new advert if the peer changed.
        let same_peer = old_record.is_some_and(|o| o.peer_id == v.peer_id);
        let peer_growth = if same_peer {
            new_bytes as i64 - old_bytes as i64
        } else {
            new_bytes as i64
        };
        let (peer_bytes, peer_adverts) = self.read_peer_usage(&v.peer_id)?;
        let total = self.inner.bytes.load(Ordering::Relaxed);
        let admission = Admission {
            own: origin == Origin::Own,
            did_bytes: new_bytes,
            growth,
            total,
            peer_growth,
            peer_bytes,
            free_disk,
        };
        if let Err(reason) = self.inner.limits.admit(&admission) {
            self.inner.refused[reason as usize].fetch_add(1, Ordering::Relaxed);
            debug!(did = %v.did, peer = %v.peer_id, %reason, ?admission, "advert refused");
            return Err(StoreError::Refused {
                did: v.did.chars().take(100).collect(),
                reason,
            });
        }

        let mut batch = WriteBatch::default();
        let mut deltas = BTreeMap::new();
        if let Some(old) = old_record {
            old.delete_index(&mut batch, tags_cf, expiry, &v.did);
            for tag in &old.tags {
                *deltas.entry(tag.clone()).or_default() -= 1;
            }
        }
        for tag in &new.tags {
            *deltas.entry(tag.clone()).or_default() += 1;
        }
        self.adjust_tag_counts(&mut batch, &deltas)?;
        batch.put_cf(adverts, v.did.as_bytes(), encoded);
        new.put_index(&mut batch, tags_cf, expiry, &v.did);
        // Prune time: no advert of seq <= v.seq can be valid after it (module doc, "Seqs").
        let prune_at = v
            .issued_at
            .saturating_add(self.inner.limits.replay_window)
            .max(stored.map_or(0, |s| s.prune_at));
        if let Some(stored) = stored {
            batch.delete_cf(seq_expiry, expiry_key(stored.prune_at, &v.did));
        }
        batch.put_cf(
            seqs,
            v.did.as_bytes(),
            SeqEntry {
                seq: v.seq,
                prune_at,
            }
            .encode(),
        );
        batch.put_cf(seq_expiry, expiry_key(prune_at, &v.did), b"");
        // Usage: the total, the new peer's share, and the old peer's if it changed.
        let new_total = add_signed(total, growth);
        let mut peer_deltas = BTreeMap::new();
        if let Some(old) = old_record.filter(|_| !same_peer) {
            peer_deltas.insert(old.peer_id.clone(), (-(old_bytes as i64), -1));
        }
        let new_count = i64::from(!same_peer);
        self.put_usage(
            &mut batch,
            new_total,
            &v.peer_id,
            (add_signed(peer_bytes, peer_growth), add_signed(peer_adverts, new_count)),
        )?;
        self.adjust_peer_usage(&mut batch, &peer_deltas)?;
        self.inner
            .db
            .write(batch)
            .map_err(|source| StoreError::Db {
                context: format!("storing advert of {} seq {}", v.did, v.seq),
                source,
            })?;
        self.inner.bytes.store(new_total, Ordering::Relaxed);
        Ok(match old {
            None => {
                self.inner.adverts.fetch_add(1, Ordering::Relaxed);
                PutOutcome::Inserted
            }
            Some(old) => PutOutcome::Updated {
                previous_seq: stored
                    .map(|s| s.seq)
                    .or(old.map(|o| o.seq))
                    .unwrap_or_default(),
            },
        })
    }

    /// The highest seq ever stored for `did`, kept after its advert expired and was swept.
    pub fn seq(&self, did: &str) -> Result<Option<u64>, StoreError> {
        check_did(did)?;
        Ok(self.read_seq(did)?.map(|s| s.seq))
    }

    /// The DID's advert, `None` if there is none or it expired (`expires_at <= now`).
    pub fn get(&self, did: &str, now: u64) -> Result<Option<StoredAdvert>, StoreError> {
        check_did(did)?;
        Ok(self
            .read_record(did)?
            .filter(|r| r.expires_at > now)
            .map(|r| r.into_stored(did.to_owned())))
    }

    /// Live adverts carrying every one of `tags` (already normalized; none means all adverts),
    /// newest `issued_at` first (ties by DID), at most `limit` (and [`MAX_FIND_LIMIT`]).
    pub fn find(
        &self,
        tags: &[String],
        limit: usize,
        now: u64,
    ) -> Result<Vec<StoredAdvert>, StoreError> {
        if tags.len() > MAX_TAGS {
            return Err(invalid(
                "tag query",
                &tags.join(","),
                "more than MAX_TAGS tags",
            ));
        }
        for tag in tags {
            check_tag(tag)?;
        }
        let limit = limit.min(MAX_FIND_LIMIT);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut query: Vec<&str> = tags.iter().map(String::as_str).collect();
        query.sort_unstable();
        query.dedup();
        let (tags_cf, adverts) = (self.cf(CF_TAGS)?, self.cf(CF_ADVERTS)?);
        let db_err = |source| StoreError::Db {
            context: format!("finding adverts tagged {}", query.join(",")),
            source,
        };
        // Walk the list of the rarest queried tag (of all adverts if none); the other tags are
        // checked against the tag-set filter in each index value, the expiry too, so only the
        // adverts returned (and the filter's rare false positives) are read.
        let mask = tag_filter(query.iter().copied());
        let driver = query
            .iter()
            .copied()
            .min_by_key(|tag| self.tag_count(tag))
            .unwrap_or("");
        let prefix = tag_prefix(driver);
        let snapshot = self.inner.db.snapshot();
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(prefix_end(&prefix));
        let mut it = snapshot.raw_iterator_cf_opt(tags_cf, ro);
        it.seek(&prefix);
        let mut found = Vec::new();
        while let Some((key, value)) = it.item() {
            let entry = key
                .strip_prefix(&prefix[..])
                .filter(|suffix| suffix.len() > 8)
                .ok_or("bad key")
                .and_then(|suffix| {
                    let did = std::str::from_utf8(&suffix[8..]).map_err(|_| "DID not UTF-8")?;
                    let issued_at = !decode_u64(&suffix[..8]).ok_or("bad key")?;
                    let (expires_at, has_all) = parse_index_value(value, &mask)?;
                    Ok((did, issued_at, expires_at > now && has_all))
                });
            match entry {
                Ok((did, issued_at, true)) => {
                    let record = snapshot
                        .get_pinned_cf_opt(adverts, did.as_bytes(), ReadOptions::default())
                        .map_err(db_err)?
                        .map(|bytes| {
                            Record::decode(&bytes)
                                .map_err(|r| corrupt(CF_ADVERTS, did.as_bytes(), r))
                        })
                        .transpose();
                    match record {
                        Ok(Some(r))
                            if r.issued_at == issued_at
                                && r.expires_at > now
                                && query.iter().all(|t| r.tags.iter().any(|rt| rt == t)) =>
                        {
                            found.push(r.into_stored(did.to_owned()));
                            if found.len() >= limit {
                                break;
                            }
                        }
                        // A false positive of the tag filter, or an index entry left behind
                        // by a corrupt record that was overwritten.
                        Ok(_) => {}
                        Err(error) => warn!(%error, "skipping corrupt advert in find"),
                    }
                }
                Ok(_) => {}
                Err(reason) => {
                    warn!(error = %corrupt(CF_TAGS, key, reason), "skipping corrupt index entry")
                }
            }
            it.next();
        }
        it.status().map_err(db_err)?;
        Ok(found)
    }

    /// Delete adverts with `expires_at <= now` and their index entries, then the seqs whose
    /// prune time has come (no advert of theirs can still be valid; see the module doc), one
    /// atomic batch of up to 1024 at a time (the write lock is released between batches). Their
    /// bytes are released from the usage. Returns how many adverts were deleted.
    pub fn sweep_expired(&self, now: u64) -> Result<usize, StoreError> {
        let mut total = 0;
        loop {
            let (swept, more) = self.sweep_batch(now)?;
            total += swept;
            if !more {
                break;
            }
        }
        let mut pruned = 0;
        loop {
            let (n, more) = self.prune_seqs_batch(now)?;
            pruned += n;
            if !more {
                break;
            }
        }
        if pruned > 0 {
            debug!(pruned, "sequence numbers past their replay window pruned");
        }
        Ok(total)
    }

    /// Keys of `cf` up to `end` (inclusive: `end ‖ …`), at most [`SWEEP_BATCH`].
    fn due_keys(&self, cf_name: &'static str, end: u64) -> Result<Vec<Vec<u8>>, StoreError> {
        let cf = self.cf(cf_name)?;
        let mut ro = ReadOptions::default();
        if let Some(end) = end.checked_add(1) {
            ro.set_iterate_upper_bound(end.to_be_bytes());
        }
        let mut it = self.inner.db.raw_iterator_cf_opt(cf, ro);
        it.seek_to_first();
        let mut due = Vec::new();
        while let Some(key) = it.key() {
            if due.len() >= SWEEP_BATCH {
                break;
            }
            due.push(key.to_vec());
            it.next();
        }
        it.status().map_err(|source| StoreError::Db {
            context: format!("listing {cf_name} due at {end}"),
            source,
        })?;
        Ok(due)
    }

    /// One batch of expired adverts: how many were deleted, and whether more may be due.
    fn sweep_batch(&self, now: u64) -> Result<(usize, bool), StoreError> {
        let (adverts, tags_cf, expiry) =
            (self.cf(CF_ADVERTS)?, self.cf(CF_TAGS)?, self.cf(CF_EXPIRY)?);
        let _guard = lock(&self.inner.write);
        let due = self.due_keys(CF_EXPIRY, now)?;
        if due.is_empty() {
            return Ok((0, false));
        }
        let mut batch = WriteBatch::default();
        let mut deltas = BTreeMap::new();
        let mut peer_deltas: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        let mut released = 0u64;
        let mut swept = 0;
        for key in &due {
            batch.delete_cf(expiry, key);
            let Some((expires_at, did)) = split_time_key(key) else {
                warn!(error = %corrupt(CF_EXPIRY, key, "bad key"), "deleting bad expiry entry");
                continue;
            };
            match self.read_record(did) {
                Ok(Some(record)) if record.expires_at == expires_at => {
                    record.delete_index(&mut batch, tags_cf, expiry, did);
                    batch.delete_cf(adverts, did.as_bytes());
                    let bytes = record.stored_footprint(did);
                    released = released.saturating_add(bytes);
                    let peer = peer_deltas.entry(record.peer_id.clone()).or_default();
                    *peer = (peer.0 - bytes as i64, peer.1 - 1);
                    for tag in record.tags {
                        *deltas.entry(tag).or_default() -= 1;
                    }
                    swept += 1;
                }
                // Superseded by a newer advert, or already gone.
                Ok(_) => {}
                Err(error @ StoreError::Corrupt { .. }) => {
                    warn!(%error, %did, "deleting corrupt expired advert");
                    batch.delete_cf(adverts, did.as_bytes());
                    swept += 1;
                }
                Err(e) => return Err(e),
            }
        }
        self.adjust_tag_counts(&mut batch, &deltas)?;
        self.adjust_peer_usage(&mut batch, &peer_deltas)?;
        let new_total = self.inner.bytes.load(Ordering::Relaxed).saturating_sub(released);
        self.cf(CF_USAGE)
            .map(|usage| batch.put_cf(usage, USAGE_TOTAL_KEY, new_total.to_be_bytes()))?;
        self.inner
            .db
            .write(batch)
            .map_err(|source| StoreError::Db {
                context: format!("sweeping adverts expired at {now}"),
                source,
            })?;
        self.inner.bytes.store(new_total, Ordering::Relaxed);
        saturating_sub(&self.inner.adverts, swept);
        Ok((swept, due.len() >= SWEEP_BATCH))
    }

    /// One batch of seqs due for pruning: how many were deleted, and whether more may be due.
    fn prune_seqs_batch(&self, now: u64) -> Result<(usize, bool), StoreError> {
        let (seqs, seq_expiry) = (self.cf(CF_SEQS)?, self.cf(CF_SEQ_EXPIRY)?);
        let _guard = lock(&self.inner.write);
        let due = self.due_keys(CF_SEQ_EXPIRY, now)?;
        if due.is_empty() {
            return Ok((0, false));
        }
        let mut batch = WriteBatch::default();
        let mut released = 0u64;
        let mut pruned = 0;
        for key in &due {
            batch.delete_cf(seq_expiry, key);
            let Some((prune_at, did)) = split_time_key(key) else {
                warn!(error = %corrupt(CF_SEQ_EXPIRY, key, "bad key"), "deleting bad entry");
                continue;
            };
            let entry = match self.read_seq(did) {
                Ok(Some(entry)) if entry.prune_at == prune_at => entry,
                // Superseded by a later prune time, or already gone.
                Ok(_) => continue,
                Err(error @ StoreError::Corrupt { .. }) => {
                    warn!(%error, %did, "leaving corrupt seq in place");
                    continue;
                }
                Err(e) => return Err(e),
            };
            // An advert still stored keeps its seq (it cannot be past the prune time if it
            // passed validation; own adverts or a lowered window may be): look again later.
            let record = match self.read_record(did) {
                Ok(record) => record.map(|r| r.expires_at),
                Err(StoreError::Corrupt { .. }) => Some(now),
                Err(e) => return Err(e),
            };
            if let Some(expires_at) = record {
                let later = expires_at
                    .max(now)
                    .saturating_add(self.inner.limits.replay_window)
                    .max(now.saturating_add(1));
                let entry = SeqEntry {
                    prune_at: later,
                    ..entry
                };
                batch.put_cf(seqs, did.as_bytes(), entry.encode());
                batch.put_cf(seq_expiry, expiry_key(later, did), b"");
                continue;
            }
            batch.delete_cf(seqs, did.as_bytes());
            released = released.saturating_add(seq_footprint(did));
            pruned += 1;
        }
        let new_total = self.inner.bytes.load(Ordering::Relaxed).saturating_sub(released);
        self.cf(CF_USAGE)
            .map(|usage| batch.put_cf(usage, USAGE_TOTAL_KEY, new_total.to_be_bytes()))?;
        self.inner
            .db
            .write(batch)
            .map_err(|source| StoreError::Db {
                context: format!("pruning seqs due at {now}"),
                source,
            })?;
        self.inner.bytes.store(new_total, Ordering::Relaxed);
        Ok((pruned, due.len() >= SWEEP_BATCH))
    }

    /// Write the memtables to disk and sync the write-ahead log: after this returns, everything
    /// stored so far survives a power cut. Called on clean shutdown.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.inner
            .db
            .flush_wal(true)
            .and_then(|_| self.inner.db.flush())
            .map_err(|source| StoreError::Db {
                context: format!("flushing {}", self.inner.path.display()),
                source,
            })
    }

    /// Adverts stored. Approximate in one way: expired adverts count until
    /// [`sweep_expired`](Self::sweep_expired) deletes them.
    pub fn len(&self) -> Result<usize, StoreError> {
        Ok(self.inner.adverts.load(Ordering::Relaxed))
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// A seq for our own next advert of `did`: greater than any seq stored for the DID and than
    /// any value returned before, persisted (fsynced) before it is returned.
    pub fn next_own_seq(&self, did: &str) -> Result<u64, StoreError> {
        check_did(did)?;
        let own_seq = self.cf(CF_OWN_SEQ)?;
        let _guard = lock(&self.inner.write);
        let last = self
            .read_u64(CF_OWN_SEQ, did.as_bytes())?
            .max(self.read_seq(did)?.map(|s| s.seq))
            .unwrap_or(0);
        let next = last
            .checked_add(1)
            .ok_or_else(|| StoreError::SeqExhausted {
                did: did.to_owned(),
            })?;
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.inner
            .db
            .put_cf_opt(own_seq, did.as_bytes(), next.to_be_bytes(), &wo)
            .map_err(|source| StoreError::Db {
                context: format!("persisting own seq {next} of {did}"),
                source,
            })?;
        Ok(next)
    }

    /// Remember a peer's addresses (the first [`MAX_PEER_ADDRS`]) as seen at `now`. At most
    /// [`MAX_PEERS`] are kept: adding one more drops the least recently seen.
    pub fn put_peer(&self, peer_id: &str, addrs: &[String], now: u64) -> Result<(), StoreError> {
        if peer_id.is_empty() || peer_id.len() > MAX_PEER_ID_LEN {
            return Err(invalid(
                "peer id",
                peer_id,
                "empty or longer than MAX_PEER_ID_LEN",
            ));
        }
        let addrs = &addrs[..addrs.len().min(MAX_PEER_ADDRS)];
        let mut payload = vec![addrs.len() as u8];
        for addr in addrs {
            if addr.len() > MAX_ADDR_LEN {
                return Err(invalid("peer address", addr, "longer than MAX_ADDR_LEN"));
            }
            payload.extend_from_slice(&(addr.len() as u16).to_be_bytes());
            payload.extend_from_slice(addr.as_bytes());
        }
        self.table_put(PEERS, &self.inner.peers, peer_id, now, &payload)
    }

    /// Known peers, most recently seen first: (peer id, addresses, last seen).
    pub fn peers(&self) -> Result<Vec<(String, Vec<String>, u64)>, StoreError> {
        let cf = self.cf(CF_PEERS)?;
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound([RECORD_PREFIX + 1]);
        let mut it = self.inner.db.raw_iterator_cf_opt(cf, ro);
        it.seek([RECORD_PREFIX]);
        let mut peers = Vec::new();
        while let Some((key, value)) = it.item() {
            match decode_peer(key, value) {
                Ok(peer) => peers.push(peer),
                Err(error) => warn!(%error, "skipping corrupt peer record"),
            }
            it.next();
        }
        it.status().map_err(|source| StoreError::Db {
            context: "listing peers".into(),
            source,
        })?;
        peers.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        Ok(peers)
    }

    // ---- helpers ----

    fn cf(&self, name: &'static str) -> Result<&ColumnFamily, StoreError> {
        self.inner
            .db
            .cf_handle(name)
            .ok_or(StoreError::MissingColumnFamily(name))
    }

    fn read_u64(&self, cf_name: &'static str, key: &[u8]) -> Result<Option<u64>, StoreError> {
        let cf = self.cf(cf_name)?;
        let value = self
            .inner
            .db
            .get_pinned_cf(cf, key)
            .map_err(|source| StoreError::Db {
                context: format!("reading {cf_name} of {}", printable(key)),
                source,
            })?;
        value
            .map(|v| decode_u64(&v).ok_or_else(|| corrupt(cf_name, key, "not a u64")))
            .transpose()
    }

    fn read_seq(&self, did: &str) -> Result<Option<SeqEntry>, StoreError> {
        let cf = self.cf(CF_SEQS)?;
        let value = self
            .inner
            .db
            .get_pinned_cf(cf, did.as_bytes())
            .map_err(|source| StoreError::Db {
                context: format!("reading seq of {did}"),
                source,
            })?;
        value
            .map(|v| {
                SeqEntry::decode(&v).ok_or_else(|| corrupt(CF_SEQS, did.as_bytes(), "bad seq"))
            })
            .transpose()
    }

    /// (bytes, adverts) charged to `peer_id`; a corrupt entry reads as zero (with a warning).
    fn read_peer_usage(&self, peer_id: &str) -> Result<(u64, u64), StoreError> {
        let cf = self.cf(CF_USAGE)?;
        let key = peer_usage_key(peer_id);
        let value = self
            .inner
            .db
            .get_pinned_cf(cf, &key)
            .map_err(|source| StoreError::Db {
                context: format!("reading usage of peer {peer_id}"),
                source,
            })?;
        let Some(value) = value else {
            return Ok((0, 0));
        };
        match decode_usage(&value) {
            Some(usage) => Ok(usage),
            None => {
                warn!(error = %corrupt(CF_USAGE, &key, "bad usage"), "resetting peer usage");
                Ok((0, 0))
            }
        }
    }

    /// Put the total and one peer's usage in `batch` (deleting the peer's entry at zero
    /// adverts). Caller holds the write lock.
    fn put_usage(
        &self,
        batch: &mut WriteBatch,
        total: u64,
        peer_id: &str,
        usage: (u64, u64),
    ) -> Result<(), StoreError> {
        let cf = self.cf(CF_USAGE)?;
        batch.put_cf(cf, USAGE_TOTAL_KEY, total.to_be_bytes());
        put_peer_usage(batch, cf, peer_id, usage);
        Ok(())
    }

    /// Add (bytes, adverts) deltas to peers' usage, in `batch`. Caller holds the write lock.
    fn adjust_peer_usage(
        &self,
        batch: &mut WriteBatch,
        deltas: &BTreeMap<String, (i64, i64)>,
    ) -> Result<(), StoreError> {
        let cf = self.cf(CF_USAGE)?;
        for (peer_id, &(bytes, adverts)) in deltas {
            let (old_bytes, old_adverts) = self.read_peer_usage(peer_id)?;
            let usage = (add_signed(old_bytes, bytes), add_signed(old_adverts, adverts));
            put_peer_usage(batch, cf, peer_id, usage);
        }
        Ok(())
    }

    fn schema(&self) -> Result<Option<u64>, StoreError> {
        let value = self
            .inner
            .db
            .get_pinned(SCHEMA_KEY)
            .map_err(|source| StoreError::Db {
                context: "reading the layout version".into(),
                source,
            })?;
        value
            .map(|v| decode_u64(&v).ok_or_else(|| corrupt("default", SCHEMA_KEY, "not a u64")))
            .transpose()
    }

    fn write_schema(&self) -> Result<(), StoreError> {
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.inner
            .db
            .put_opt(SCHEMA_KEY, SCHEMA_VERSION.to_be_bytes(), &wo)
            .map_err(|source| StoreError::Db {
                context: "writing the layout version".into(),
                source,
            })
    }

    /// Bring a layout-1 store to layout 2: index values become (expiry, tag filter), seqs get
    /// their prune time (`issued_at + replay_window` of the stored advert, or
    /// `now + replay_window` when it is gone: when it was issued is not known), usage is
    /// counted from the records. Idempotent: an interrupted migration runs again from the start
    /// on the next open; the layout version is written last.
    fn migrate_v1(&self) -> Result<(), StoreError> {
        let started = Instant::now();
        let now = unix_now();
        let window = self.inner.limits.replay_window;
        let (adverts_cf, tags_cf, expiry, seqs_cf, seq_expiry, usage) = (
            self.cf(CF_ADVERTS)?,
            self.cf(CF_TAGS)?,
            self.cf(CF_EXPIRY)?,
            self.cf(CF_SEQS)?,
            self.cf(CF_SEQ_EXPIRY)?,
            self.cf(CF_USAGE)?,
        );
        let db_err = |source| StoreError::Db {
            context: "migrating the store from layout 1".into(),
            source,
        };
        let _guard = lock(&self.inner.write);
        let mut total = 0u64;
        let mut peers: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut batch = WriteBatch::default();
        let mut in_batch = 0;
        let mut adverts = 0usize;
        let mut it = self.inner.db.raw_iterator_cf(adverts_cf);
        it.seek_to_first();
        while let Some((key, value)) = it.item() {
            let record = std::str::from_utf8(key)
                .map_err(|_| "DID not UTF-8")
                .and_then(|did| Ok((did, Record::decode(value)?)));
            match record {
                Ok((did, record)) => {
                    // Same keys, new values.
                    record.put_index(&mut batch, tags_cf, expiry, did);
                    let bytes = record.stored_footprint(did);
                    total = total.saturating_add(bytes);
                    let peer = peers.entry(record.peer_id.clone()).or_default();
                    *peer = (peer.0.saturating_add(bytes), peer.1 + 1);
                    adverts += 1;
                    in_batch += 1;
                }
                Err(reason) => {
                    warn!(error = %corrupt(CF_ADVERTS, key, reason), "corrupt advert not migrated")
                }
            }
            if in_batch >= SWEEP_BATCH {
                self.inner
                    .db
                    .write(std::mem::take(&mut batch))
                    .map_err(db_err)?;
                in_batch = 0;
            }
            it.next();
        }
        it.status().map_err(db_err)?;
        drop(it);
        let mut it = self.inner.db.raw_iterator_cf(seqs_cf);
        it.seek_to_first();
        let mut seqs = 0usize;
        while let Some((key, value)) = it.item() {
            let entry = std::str::from_utf8(key).ok().zip(SeqEntry::decode(value));
            let Some((did, mut entry)) = entry else {
                warn!(error = %corrupt(CF_SEQS, key, "bad seq"), "corrupt seq not migrated");
                it.next();
                continue;
            };
            if entry.prune_at == 0 {
                let issued_at = self.read_record(did).ok().flatten().map(|r| r.issued_at);
                entry.prune_at = issued_at.unwrap_or(now).saturating_add(window);
                batch.put_cf(seqs_cf, key, entry.encode());
            }
            batch.put_cf(seq_expiry, expiry_key(entry.prune_at, did), b"");
            total = total.saturating_add(seq_footprint(did));
            seqs += 1;
            in_batch += 1;
            if in_batch >= SWEEP_BATCH {
                self.inner
                    .db
                    .write(std::mem::take(&mut batch))
                    .map_err(db_err)?;
                in_batch = 0;
            }
            it.next();
        }
        it.status().map_err(db_err)?;
        drop(it);
        // Usage from scratch (an interrupted run may have left some), then the version.
        let mut it = self.inner.db.raw_iterator_cf(usage);
        it.seek_to_first();
        while let Some(key) = it.key() {
            batch.delete_cf(usage, key);
            it.next();
        }
        it.status().map_err(db_err)?;
        drop(it);
        for (peer_id, &usage_of_peer) in &peers {
            put_peer_usage(&mut batch, usage, peer_id, usage_of_peer);
        }
        batch.put_cf(usage, USAGE_TOTAL_KEY, total.to_be_bytes());
        batch.put(SCHEMA_KEY, SCHEMA_VERSION.to_be_bytes());
        self.inner.db.write(batch).map_err(db_err)?;
        self.inner.db.flush_wal(true).map_err(db_err)?;
        info!(
            adverts,
            seqs,
            bytes = total,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "store migrated to layout {SCHEMA_VERSION}"
        );
        Ok(())
    }

    fn read_record(&self, did: &str) -> Result<Option<Record>, StoreError> {
        let cf = self.cf(CF_ADVERTS)?;
        let value = self
            .inner
            .db
            .get_pinned_cf(cf, did.as_bytes())
            .map_err(|source| StoreError::Db {
                context: format!("reading advert of {did}"),
                source,
            })?;
        value
            .map(|v| Record::decode(&v).map_err(|r| corrupt(CF_ADVERTS, did.as_bytes(), r)))
            .transpose()
    }

    /// How many stored adverts carry `tag` (expired ones until swept): a hint for choosing the
    /// list `find` walks, never needed for a correct answer. `u64::MAX` when unreadable.
    fn tag_count(&self, tag: &str) -> u64 {
        match self.read_u64(CF_TAG_COUNTS, tag.as_bytes()) {
            Ok(count) => count.unwrap_or(0),
            Err(error) => {
                warn!(%error, "unreadable tag count");
                u64::MAX
            }
        }
    }

    /// Add the per-tag `deltas` to the tag counts, in `batch`. Caller holds the write lock.
    fn adjust_tag_counts(
        &self,
        batch: &mut WriteBatch,
        deltas: &BTreeMap<String, i64>,
    ) -> Result<(), StoreError> {
        let cf = self.cf(CF_TAG_COUNTS)?;
        for (tag, &delta) in deltas.iter().filter(|(_, d)| **d != 0) {
            let count = match self.read_u64(CF_TAG_COUNTS, tag.as_bytes()) {
                Ok(count) => count.unwrap_or(0),
                Err(error @ StoreError::Corrupt { .. }) => {
                    warn!(%error, "resetting corrupt tag count");
                    0
                }
                Err(e) => return Err(e),
            };
            match count.saturating_add_signed(delta) {
                0 => batch.delete_cf(cf, tag.as_bytes()),
                n => batch.put_cf(cf, tag.as_bytes(), n.to_be_bytes()),
            }
        }
        Ok(())
    }

    fn count_prefix(&self, cf_name: &'static str, prefix: &[u8]) -> Result<usize, StoreError> {
        let cf = self.cf(cf_name)?;
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        if !prefix.is_empty() {
            ro.set_iterate_upper_bound(prefix_end(prefix));
        }
        let mut it = self.inner.db.raw_iterator_cf_opt(cf, ro);
        it.seek(prefix);
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next();
        }
        it.status().map_err(|source| StoreError::Db {
            context: format!("counting entries of {cf_name}"),
            source,
        })?;
        Ok(n)
    }

    /// Insert or refresh `id` in a bounded table, evicting the oldest entries beyond its cap.
    fn table_put(
        &self,
        table: Table,
        count: &Mutex<usize>,
        id: &str,
        ts: u64,
        payload: &[u8],
    ) -> Result<(), StoreError> {
        let cf = self.cf(table.cf)?;
        let db_err = |source| StoreError::Db {
            context: format!("storing {id} in {}", table.cf),
            source,
        };
        let record_key = [&[RECORD_PREFIX][..], id.as_bytes()].concat();
        let mut value = Vec::with_capacity(9 + payload.len());
        value.push(RECORD_VERSION);
        value.extend_from_slice(&ts.to_be_bytes());
        value.extend_from_slice(payload);

        let mut count = lock(count);
        let old_ts = match self
            .inner
            .db
            .get_pinned_cf(cf, &record_key)
            .map_err(db_err)?
        {
            None => None,
            Some(old) => match decode_timed(&old) {
                Ok((old_ts, _)) => Some(Some(old_ts)),
                Err(reason) => {
                    let error = corrupt(table.cf, &record_key, reason);
                    warn!(%error, "overwriting corrupt record");
                    Some(None)
                }
            },
        };
        let mut batch = WriteBatch::default();
        let mut new_count = *count;
        if old_ts.is_none() {
            new_count += 1;
            // Evict the least recently seen until the new entry fits.
            let mut ro = ReadOptions::default();
            ro.set_iterate_upper_bound([TIME_PREFIX + 1]);
            let mut it = self.inner.db.raw_iterator_cf_opt(cf, ro);
            it.seek([TIME_PREFIX]);
            while new_count > table.cap {
                let Some(key) = it.key() else { break };
                batch.delete_cf(cf, key);
                let entry = key.get(1..9).and_then(decode_u64).zip(key.get(9..));
                if let Some((evict_ts, evict_id)) = entry {
                    if evict_id != id.as_bytes() {
                        let evict_key = [&[RECORD_PREFIX][..], evict_id].concat();
                        let current = self
                            .inner
                            .db
                            .get_pinned_cf(cf, &evict_key)
                            .map_err(db_err)?;
                        let current_ts = current.as_deref().map(decode_timed);
                        // Only the record this time entry belongs to; a corrupt one goes too.
                        if matches!(current_ts, Some(Ok((t, _))) if t == evict_ts)
                            || matches!(current_ts, Some(Err(_)))
                        {
                            batch.delete_cf(cf, &evict_key);
                            new_count -= 1;
                        }
                    }
                }
                it.next();
            }
            it.status().map_err(db_err)?;
        } else if let Some(Some(old_ts)) = old_ts {
            batch.delete_cf(cf, time_key(old_ts, id));
        }
        batch.put_cf(cf, &record_key, value);
        batch.put_cf(cf, time_key(ts, id), b"");
        self.inner.db.write(batch).map_err(db_err)?;
        *count = new_count;
        Ok(())
    }
}

/// An advert record as stored in `adverts` (the DID is the key).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    seq: u64,
    issued_at: u64,
    expires_at: u64,
    tags: Vec<String>,
    peer_id: String,
    bytes: Vec<u8>,
}

impl Record {
    /// Callers have checked the bounds: at most 32 tags of 64 bytes, a peer id of 128 bytes,
    /// 256 KiB of advert, so the length prefixes cannot overflow.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(RECORD_VERSION);
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.issued_at.to_be_bytes());
        out.extend_from_slice(&self.expires_at.to_be_bytes());
        out.push(self.tags.len() as u8);
        for tag in &self.tags {
            out.push(tag.len() as u8);
            out.extend_from_slice(tag.as_bytes());
        }
        out.extend_from_slice(&(self.peer_id.len() as u16).to_be_bytes());
        out.extend_from_slice(self.peer_id.as_bytes());
        out.extend_from_slice(&(self.bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.bytes);
        out
    }

    fn decode(data: &[u8]) -> Result<Self, &'static str> {
        let mut r = Reader(data);
        if r.u8()? != RECORD_VERSION {
            return Err("unknown record version");
        }
        let (seq, issued_at, expires_at) = (r.u64()?, r.u64()?, r.u64()?);
        let count = r.u8()?;
        let mut tags = Vec::with_capacity(count.into());
        for _ in 0..count {
            let len = r.u8()?;
            tags.push(r.str(len.into())?);
        }
        let len = r.u16()?;
        let peer_id = r.str(len.into())?;
        let len = r.u32()?;
        let bytes = r.take(len as usize)?.to_vec();
        if !r.0.is_empty() {
            return Err("trailing bytes");
        }
        Ok(Record {
            seq,
            issued_at,
            expires_at,
            tags,
            peer_id,
            bytes,
        })
    }

    fn put_index(
        &self,
        batch: &mut WriteBatch,
        tags: &ColumnFamily,
        expiry: &ColumnFamily,
        did: &str,
    ) {
        let value = self.index_value();
        batch.put_cf(tags, tag_key("", self.issued_at, did), &value);
        for tag in &self.tags {
            batch.put_cf(tags, tag_key(tag, self.issued_at, did), &value);
        }
        batch.put_cf(expiry, expiry_key(self.expires_at, did), b"");
    }

    /// `expires_at` ‖ the tag-set filter.
    fn index_value(&self) -> [u8; INDEX_VALUE_LEN] {
        let mut value = [0; INDEX_VALUE_LEN];
        value[..8].copy_from_slice(&self.expires_at.to_be_bytes());
        value[8..].copy_from_slice(&tag_filter(self.tags.iter().map(String::as_str)));
        value
    }

    /// The logical bytes of this advert (read back) under `did`.
    fn stored_footprint(&self, did: &str) -> u64 {
        self.footprint(did, self.encoded_len())
    }

    /// The logical bytes of this advert under `did` with an encoded record of `record_len`:
    /// the record, one index entry per tag and one in the list of all, the expiry entry, each
    /// with [`ENTRY_OVERHEAD`].
    fn footprint(&self, did: &str, record_len: usize) -> u64 {
        let did = did.len() as u64;
        let index_entry = |tag_len: usize| tag_len as u64 + 1 + 8 + did + INDEX_VALUE_LEN as u64;
        let index: u64 = std::iter::once(0)
            .chain(self.tags.iter().map(String::len))
            .map(|len| index_entry(len) + ENTRY_OVERHEAD)
            .sum();
        (did + record_len as u64 + ENTRY_OVERHEAD) + index + (8 + did + ENTRY_OVERHEAD)
    }

    fn encoded_len(&self) -> usize {
        let tags_len: usize = self.tags.iter().map(|t| 1 + t.len()).sum();
        1 + 24 + 1 + tags_len + 2 + self.peer_id.len() + 4 + self.bytes.len()
    }

    fn delete_index(
        &self,
        batch: &mut WriteBatch,
        tags: &ColumnFamily,
        expiry: &ColumnFamily,
        did: &str,
    ) {
        batch.delete_cf(tags, tag_key("", self.issued_at, did));
        for tag in &self.tags {
            batch.delete_cf(tags, tag_key(tag, self.issued_at, did));
        }
        batch.delete_cf(expiry, expiry_key(self.expires_at, did));
    }

    fn into_stored(self, did: String) -> StoredAdvert {
        StoredAdvert {
            did,
            seq: self.seq,
            issued_at: self.issued_at,
            expires_at: self.expires_at,
            tags: self.tags,
            peer_id: self.peer_id,
            bytes: self.bytes,
        }
    }
}

/// A cursor over bytes read from disk; every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("truncated");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, &'static str> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, &'static str> {
        decode_u64(self.take(8)?).ok_or("truncated")
    }
    fn str(&mut self, n: usize) -> Result<String, &'static str> {
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| "not UTF-8")
    }
}

fn decode_u64(b: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(b).ok().map(u64::from_be_bytes)
}

/// A bounded table's record: version, timestamp, payload.
fn decode_timed(data: &[u8]) -> Result<(u64, &[u8]), &'static str> {
    let mut r = Reader(data);
    if r.u8()? != RECORD_VERSION {
        return Err("unknown record version");
    }
    Ok((r.u64()?, r.0))
}

fn decode_peer(key: &[u8], value: &[u8]) -> Result<(String, Vec<String>, u64), StoreError> {
    let bad = |reason| corrupt(CF_PEERS, key, reason);
    let id = key
        .get(1..)
        .and_then(|id| std::str::from_utf8(id).ok())
        .ok_or_else(|| bad("peer id not UTF-8"))?;
    let (seen, payload) = decode_timed(value).map_err(bad)?;
    let mut r = Reader(payload);
    let count = r.u8().map_err(bad)?;
    let mut addrs = Vec::with_capacity(count.into());
    for _ in 0..count {
        let len = r.u16().map_err(bad)?;
        addrs.push(r.str(len.into()).map_err(bad)?);
    }
    if !r.0.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok((id.to_owned(), addrs, seen))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn peer_usage_key(peer_id: &str) -> Vec<u8> {
    [&[USAGE_PEER_PREFIX][..], peer_id.as_bytes()].concat()
}

/// A peer's usage value: bytes (u64 BE) ‖ adverts (u64 BE).
fn decode_usage(value: &[u8]) -> Option<(u64, u64)> {
    Some((decode_u64(value.get(..8)?)?, decode_u64(value.get(8..)?)?))
}

/// Put a peer's usage in `batch`, deleting the entry when it has no advert left.
fn put_peer_usage(batch: &mut WriteBatch, cf: &ColumnFamily, peer_id: &str, usage: (u64, u64)) {
    let key = peer_usage_key(peer_id);
    match usage {
        (_, 0) => batch.delete_cf(cf, key),
        (bytes, adverts) => {
            batch.put_cf(cf, key, [bytes.to_be_bytes(), adverts.to_be_bytes()].concat())
        }
    }
}

/// `tag ‖ 0x00`; the empty tag is the list of all adverts.
fn tag_prefix(tag: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(tag.len() + 1);
    key.extend_from_slice(tag.as_bytes());
    key.push(0);
    key
}

fn tag_key(tag: &str, issued_at: u64, did: &str) -> Vec<u8> {
    let mut key = tag_prefix(tag);
    key.extend_from_slice(&(!issued_at).to_be_bytes());
    key.extend_from_slice(did.as_bytes());
    key
}

/// The tag-set filter of `tags`: 128 bits, two set per tag, at positions taken from the tag's
/// SHA-256 (stable across versions and machines, as it is stored). With 8 tags about 12 % of
/// the bits are set, so a tag the advert lacks passes with probability ~1.5 %; with 32 tags,
/// ~16 %. A pass is confirmed against the record.
fn tag_filter<'a>(tags: impl IntoIterator<Item = &'a str>) -> [u8; TAG_FILTER_BYTES] {
    let mut filter = [0u8; TAG_FILTER_BYTES];
    for tag in tags {
        let hash = Sha256::digest(tag.as_bytes());
        for &byte in &hash[..2] {
            let bit = usize::from(byte & 0x7f);
            filter[bit / 8] |= 1 << (bit % 8);
        }
    }
    filter
}

/// A tag index value's `expires_at`, and whether its tag-set filter holds every bit of `mask`
/// (the filter of the query): if not, the advert lacks a queried tag.
fn parse_index_value(
    value: &[u8],
    mask: &[u8; TAG_FILTER_BYTES],
) -> Result<(u64, bool), &'static str> {
    if value.len() != INDEX_VALUE_LEN {
        return Err("index value of the wrong length");
    }
    let expires_at = decode_u64(&value[..8]).ok_or("bad index value")?;
    let has_all = value[8..].iter().zip(mask).all(|(v, m)| v & m == *m);
    Ok((expires_at, has_all))
}

/// The logical bytes of a DID's seqs entry and its seq_expiry entry.
fn seq_footprint(did: &str) -> u64 {
    let did = did.len() as u64;
    (did + 16 + ENTRY_OVERHEAD) + (8 + did + ENTRY_OVERHEAD)
}

/// `value + delta`, saturating at 0 and `u64::MAX`.
fn add_signed(value: u64, delta: i64) -> u64 {
    value.saturating_add_signed(delta)
}

/// A `u64 BE ‖ DID` key of `expiry` or `seq_expiry`.
fn split_time_key(key: &[u8]) -> Option<(u64, &str)> {
    let time = decode_u64(key.get(..8)?)?;
    let did = std::str::from_utf8(key.get(8..)?).ok()?;
    Some((time, did))
}

fn expiry_key(expires_at: u64, did: &str) -> Vec<u8> {
    [&expires_at.to_be_bytes()[..], did.as_bytes()].concat()
}

fn time_key(ts: u64, id: &str) -> Vec<u8> {
    [&[TIME_PREFIX][..], &ts.to_be_bytes()[..], id.as_bytes()].concat()
}

/// The smallest key greater than every key starting with `prefix` (whose last byte is below
/// 0xff, true of every prefix used here).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last = last.saturating_add(1);
    }
    end
}

fn cf_options(cache: &Cache) -> Options {
    let mut block = BlockBasedOptions::default();
    block.set_block_cache(cache);
    block.set_bloom_filter(10.0, false);
    block.set_cache_index_and_filter_blocks(true);
    block.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&block);
    opts.set_compression_type(DBCompressionType::None);
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES);
    opts.set_max_write_buffer_number(2);
    opts
}

fn check_did(did: &str) -> Result<(), StoreError> {
    if did.is_empty() || did.len() > agentnet_did::id::MAX_DID_LEN {
        return Err(invalid("DID", did, "empty or longer than MAX_DID_LEN"));
    }
    if did.contains('\0') {
        return Err(invalid("DID", did, "contains NUL"));
    }
    Ok(())
}

fn check_tag(tag: &str) -> Result<(), StoreError> {
    if tag.is_empty() || tag.len() > MAX_TAG_LEN {
        return Err(invalid("tag", tag, "empty or longer than MAX_TAG_LEN"));
    }
    if tag.chars().any(char::is_control) {
        return Err(invalid("tag", tag, "contains a control character"));
    }
    Ok(())
}

fn invalid(what: &'static str, value: &str, reason: &'static str) -> StoreError {
    StoreError::InvalidInput {
        what,
        value: value.chars().take(100).collect(),
        reason,
    }
}

fn corrupt(cf: &'static str, key: &[u8], reason: &'static str) -> StoreError {
    StoreError::Corrupt {
        cf,
        key: printable(key),
        reason,
    }
}

fn printable(key: &[u8]) -> String {
    key.escape_ascii().to_string().chars().take(200).collect()
}

/// Lock a mutex whose data stays consistent even if a holder panicked (the guarded state is
/// only written after a successful RocksDB write).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn saturating_sub(counter: &AtomicUsize, n: usize) {
    // The closure always returns Some, so this cannot fail.
    let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
        Some(c.saturating_sub(n))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advert(did: &str, seq: u64, issued_at: u64, expires_at: u64, tags: &[&str]) -> Validated {
        let mut tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        tags.sort();
        tags.dedup();
        Validated {
            did: did.into(),
            seq,
            issued_at,
            expires_at,
            tags,
            peer_id: "12D3KooWpeer".into(),
            bytes: format!("{{\"did\":\"{did}\",\"seq\":{seq}}}").into_bytes(),
        }
    }

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|t| t.to_string()).collect()
    }

    fn dids(found: &[StoredAdvert]) -> Vec<&str> {
        found.iter().map(|a| a.did.as_str()).collect()
    }

    /// Default limits but no disk watermark: a test must not depend on the machine's disk.
    fn test_limits() -> Limits {
        Limits {
            min_free_bytes: 0,
            ..Limits::default()
        }
    }

    fn open() -> (tempfile::TempDir, Store) {
        open_with(test_limits())
    }

    fn open_with(limits: Limits) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_with(&dir.path().join("db"), limits).expect("open");
        (dir, store)
    }

    /// Every key in the `tags` and `expiry` column families that mentions `did`.
    fn index_entries(store: &Store, did: &str) -> usize {
        let mut n = 0;
        for cf in [CF_TAGS, CF_EXPIRY] {
            let mut it = store.inner.db.raw_iterator_cf(store.cf(cf).unwrap());
            it.seek_to_first();
            while let Some(key) = it.key() {
                n += usize::from(key.ends_with(did.as_bytes()));
                it.next();
            }
        }
        n
    }

    #[test]
    fn store_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Store>();
    }

    #[test]
    fn put_get_find_round_trip() {
        let (_dir, store) = open();
        let a = advert("did:key:a", 1, 100, 1000, &["translation", "french"]);
        let b = advert("did:key:b", 1, 300, 1000, &["translation"]);
        let c = advert(
            "did:key:c",
            1,
            200,
            1000,
            &["translation", "french", "legal"],
        );
        for v in [&a, &b, &c] {
            assert_eq!(store.put(v).unwrap(), PutOutcome::Inserted);
        }
        assert_eq!(store.len().unwrap(), 3);

        let got = store.get("did:key:a", 500).unwrap().expect("stored");
        assert_eq!(
            got,
            StoredAdvert {
                did: a.did.clone(),
                seq: 1,
                issued_at: 100,
                expires_at: 1000,
                tags: a.tags.clone(),
                peer_id: a.peer_id.clone(),
                bytes: a.bytes.clone(),
            }
        );
        assert_eq!(store.get("did:key:nobody", 500).unwrap(), None);
        assert_eq!(store.seq("did:key:a").unwrap(), Some(1));
        assert_eq!(store.seq("did:key:nobody").unwrap(), None);

        // Ranking: newest issued_at first.
        let found = store.find(&tags(&["translation"]), 10, 500).unwrap();
        assert_eq!(dids(&found), ["did:key:b", "did:key:c", "did:key:a"]);
        assert_eq!(found[1], store.get("did:key:c", 500).unwrap().unwrap());
        // All tags must match, in any order, duplicates ignored.
        let found = store
            .find(&tags(&["french", "translation"]), 10, 500)
            .unwrap();
        assert_eq!(dids(&found), ["did:key:c", "did:key:a"]);
        let found = store
            .find(&tags(&["legal", "translation", "legal"]), 10, 500)
            .unwrap();
        assert_eq!(dids(&found), ["did:key:c"]);
        assert!(store
            .find(&tags(&["legal", "cooking"]), 10, 500)
            .unwrap()
            .is_empty());
        assert!(store.find(&tags(&["cooking"]), 10, 500).unwrap().is_empty());
        // No tags: every live advert.
        let found = store.find(&[], 10, 500).unwrap();
        assert_eq!(dids(&found), ["did:key:b", "did:key:c", "did:key:a"]);
        // Limit.
        let found = store.find(&tags(&["translation"]), 2, 500).unwrap();
        assert_eq!(dids(&found), ["did:key:b", "did:key:c"]);
        assert!(store
            .find(&tags(&["translation"]), 0, 500)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn higher_seq_replaces_card_and_tag_index() {
        let (_dir, store) = open();
        let did = "did:key:z";
        assert_eq!(
            store.put(&advert(did, 5, 100, 1000, &["a", "b"])).unwrap(),
            PutOutcome::Inserted
        );
        let newer = advert(did, 7, 150, 1000, &["b", "c"]);
        assert_eq!(
            store.put(&newer).unwrap(),
            PutOutcome::Updated { previous_seq: 5 }
        );
        assert!(store.find(&tags(&["a"]), 10, 500).unwrap().is_empty());
        assert_eq!(dids(&store.find(&tags(&["b"]), 10, 500).unwrap()), [did]);
        assert_eq!(dids(&store.find(&tags(&["c"]), 10, 500).unwrap()), [did]);
        assert_eq!(store.get(did, 500).unwrap().unwrap().bytes, newer.bytes);
        assert_eq!(store.len().unwrap(), 1);
        // One all-list entry, two tags, one expiry entry: the old ones are gone.
        assert_eq!(index_entries(&store, did), 4);

        for seq in [7, 6, 1] {
            let older = advert(did, seq, 900, 2000, &["a"]);
            assert_eq!(
                store.put(&older).unwrap(),
                PutOutcome::Stale { stored_seq: 7 }
            );
        }
        let got = store.get(did, 500).unwrap().unwrap();
        assert_eq!((got.seq, got.issued_at, got.bytes), (7, 150, newer.bytes));
        assert!(store.find(&tags(&["a"]), 10, 500).unwrap().is_empty());
        assert_eq!(store.seq(did).unwrap(), Some(7));
        assert_eq!(index_entries(&store, did), 4);
    }

    #[test]
    fn expired_adverts_are_hidden_swept_and_replays_stay_stale() {
        let (_dir, store) = open();
        store
            .put(&advert("did:key:old", 3, 10, 100, &["x"]))
            .unwrap();
        store
            .put(&advert("did:key:new", 1, 20, 200, &["x"]))
            .unwrap();
        assert!(store.get("did:key:old", 99).unwrap().is_some());
        assert_eq!(store.get("did:key:old", 100).unwrap(), None);
        assert_eq!(
            dids(&store.find(&tags(&["x"]), 10, 150).unwrap()),
            ["did:key:new"]
        );
        assert_eq!(dids(&store.find(&[], 10, 150).unwrap()), ["did:key:new"]);

        assert_eq!(store.sweep_expired(99).unwrap(), 0);
        assert_eq!(store.sweep_expired(150).unwrap(), 1);
        assert_eq!(store.len().unwrap(), 1);
        assert_eq!(index_entries(&store, "did:key:old"), 0);
        assert!(store
            .inner
            .db
            .get_cf(store.cf(CF_ADVERTS).unwrap(), "did:key:old")
            .unwrap()
            .is_none());
        assert_eq!(index_entries(&store, "did:key:new"), 3);
        // Even at a time where it would be live, the swept advert is gone.
        assert_eq!(store.get("did:key:old", 50).unwrap(), None);
        assert!(store
            .find(&tags(&["x"]), 10, 50)
            .unwrap()
            .iter()
            .all(|a| a.did != "did:key:old"));

        // Replay protection survives the sweep.
        assert_eq!(store.seq("did:key:old").unwrap(), Some(3));
        let replay = advert("did:key:old", 3, 10, 100, &["x"]);
        assert_eq!(
            store.put(&replay).unwrap(),
            PutOutcome::Stale { stored_seq: 3 }
        );
        assert_eq!(store.get("did:key:old", 50).unwrap(), None);
        assert_eq!(
            store
                .put(&advert("did:key:old", 4, 300, 400, &["x"]))
                .unwrap(),
            PutOutcome::Inserted
        );
        assert_eq!(store.len().unwrap(), 2);
        assert_eq!(store.sweep_expired(1000).unwrap(), 2);
        assert_eq!(store.len().unwrap(), 0);
        assert!(store.find(&[], 10, 0).unwrap().is_empty());
    }

    #[test]
    fn state_survives_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let own = "did:key:me";
        let (first, second);
        {
            let store = Store::open(&path).unwrap();
            store
                .put(&advert("did:key:a", 9, 100, 1000, &["t"]))
                .unwrap();
            store.put(&advert(own, 40, 100, 150, &["t"])).unwrap();
            first = store.next_own_seq(own).unwrap();
            assert_eq!(first, 41);
            assert_eq!(store.next_own_seq("did:key:fresh").unwrap(), 1);
            store.sweep_expired(200).unwrap();
        }
        {
            let store = Store::open(&path).unwrap();
            assert_eq!(store.len().unwrap(), 1);
            assert_eq!(store.get("did:key:a", 500).unwrap().unwrap().seq, 9);
            assert_eq!(
                dids(&store.find(&tags(&["t"]), 10, 500).unwrap()),
                ["did:key:a"]
            );
            assert_eq!(store.seq("did:key:a").unwrap(), Some(9));
            assert_eq!(store.seq(own).unwrap(), Some(40));
            let replay = advert("did:key:a", 9, 100, 1000, &["t"]);
            assert_eq!(
                store.put(&replay).unwrap(),
                PutOutcome::Stale { stored_seq: 9 }
            );
            second = store.next_own_seq(own).unwrap();
            assert!(second > first, "{second} > {first}");
            assert_eq!(store.next_own_seq("did:key:fresh").unwrap(), 2);
            // Our own advert under the returned seq is accepted; the next seq is above it.
            assert_eq!(
                store.put(&advert(own, second, 300, 900, &["t"])).unwrap(),
                PutOutcome::Inserted
            );
        }
        let store = Store::open(&path).unwrap();
        let third = store.next_own_seq(own).unwrap();
        assert!(third > second, "{third} > {second}");
        assert_eq!(store.len().unwrap(), 2);
    }

    #[test]
    fn next_own_seq_is_above_gossiped_seqs() {
        let (_dir, store) = open();
        let own = "did:key:me";
        assert_eq!(store.next_own_seq(own).unwrap(), 1);
        // Another copy of our node published seq 50.
        store.put(&advert(own, 50, 1, 100, &[])).unwrap();
        assert_eq!(store.next_own_seq(own).unwrap(), 51);
        assert_eq!(store.next_own_seq(own).unwrap(), 52);
    }

    #[test]
    fn peers_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let addrs = vec!["/ip4/127.0.0.1/tcp/4001".to_string()];
        {
            let store = Store::open(&path).unwrap();
            for i in 0..MAX_PEERS as u64 + 5 {
                store
                    .put_peer(&format!("peer{i:05}"), &addrs, 1000 + i)
                    .unwrap();
            }
            // Refreshing a known peer neither grows the table nor evicts anyone.
            store.put_peer("peer01004", &addrs, 5000).unwrap();
            let peers = store.peers().unwrap();
            assert_eq!(peers.len(), MAX_PEERS);
            assert_eq!(peers[0], ("peer01004".into(), addrs.clone(), 5000));
            assert!(peers.iter().all(|(id, ..)| id.as_str() >= "peer00005"));
            assert!(peers.iter().any(|(id, ..)| id == "peer00005"));
        }
        // The count is rebuilt on open: still bounded.
        let store = Store::open(&path).unwrap();
        store.put_peer("late", &[], 6000).unwrap();
        let peers = store.peers().unwrap();
        assert_eq!(peers.len(), MAX_PEERS);
        assert!(peers.iter().all(|(id, ..)| id != "peer00005"));
        assert_eq!(peers[0], ("late".into(), vec![], 6000));
        // Addresses are capped.
        let many: Vec<String> = (0..100).map(|i| format!("/ip4/10.0.0.{i}/tcp/1")).collect();
        store.put_peer("late", &many, 6001).unwrap();
        assert_eq!(store.peers().unwrap()[0].1.len(), MAX_PEER_ADDRS);
        assert_eq!(store.peers().unwrap().len(), MAX_PEERS);
    }

    #[test]
    fn concurrent_puts_for_one_did_keep_the_max_and_report_truthfully() {
        let (_dir, store) = open();
        // Several rounds, one DID each, to give a race more chances to show.
        for round in 0..4 {
            let did = format!("did:key:race{round}");
            let start = Arc::new(std::sync::Barrier::new(8));
            let threads: Vec<_> = (0..8u64)
                .map(|t| {
                    let (store, start, did) = (store.clone(), start.clone(), did.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        // Thread t puts seqs t+1, t+9, … (interleaved with the other threads', no
                        // duplicates), odd threads in descending order.
                        let mut seqs: Vec<u64> = (0..50).map(|i| 1 + t + 8 * i).collect();
                        if t % 2 == 1 {
                            seqs.reverse();
                        }
                        seqs.into_iter()
                            .map(|seq| {
                                let tag = format!("t{}", seq % 3);
                                let v = advert(&did, seq, seq, 10_000, &[tag.as_str()]);
                                (seq, store.put(&v).unwrap())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut outcomes: Vec<(u64, PutOutcome)> = threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect();
            assert_eq!(outcomes.len(), 400);
            assert_eq!(store.seq(&did).unwrap(), Some(400));
            assert_eq!(store.get(&did, 0).unwrap().unwrap().seq, 400);
            assert_eq!(store.len().unwrap(), round + 1);
            // The all list, tag t1 (400 % 3), the expiry entry: no leftovers of other seqs.
            assert_eq!(index_entries(&store, &did), 3);
            assert_eq!(store.tag_count("t1"), round as u64 + 1);

            // Accepted puts form one chain: each replaced exactly the previously accepted seq.
            outcomes.sort_by_key(|(seq, _)| *seq);
            let mut last_accepted = None;
            for (seq, outcome) in outcomes {
                match (outcome, last_accepted) {
                    (PutOutcome::Inserted, None) => last_accepted = Some(seq),
                    (PutOutcome::Updated { previous_seq }, Some(prev)) => {
                        assert_eq!(previous_seq, prev, "seq {seq}");
                        last_accepted = Some(seq);
                    }
                    (PutOutcome::Stale { stored_seq }, _) => {
                        assert!(stored_seq >= seq, "seq {seq} stale against {stored_seq}")
                    }
                    (outcome, prev) => panic!("seq {seq}: {outcome:?} after {prev:?}"),
                }
            }
            assert_eq!(last_accepted, Some(400));
        }
        assert_eq!(store.tag_count("t0"), 0);
    }

    #[test]
    fn index_value_filters_by_expiry_and_tag_set() {
        let record = Record {
            seq: 1,
            issued_at: 5,
            expires_at: 99,
            tags: tags(&["alpha", "beta", "gamma"]),
            peer_id: "p".into(),
            bytes: vec![1, 2, 3],
        };
        let value = record.index_value();
        let parse = |query: &[&str]| parse_index_value(&value, &tag_filter(query.iter().copied()));
        assert_eq!(parse(&["alpha", "gamma"]), Ok((99, true)));
        assert_eq!(parse(&["beta"]), Ok((99, true)));
        assert_eq!(parse(&[]), Ok((99, true)));
        assert_eq!(parse(&["alpha", "delta"]), Ok((99, false)));
        assert_eq!(parse(&["alph"]), Ok((99, false)));
        let mask = tag_filter(["beta"]);
        assert!(parse_index_value(&value[..value.len() - 1], &mask).is_err());
        assert!(parse_index_value(&[&value[..], &[0]].concat(), &mask).is_err());
        // Small whatever the tag set: 24 bytes, not a copy of up to 32 tags of 64 bytes.
        assert_eq!(value.len(), INDEX_VALUE_LEN);
        assert_eq!(Record::decode(&record.encode()), Ok(record.clone()));
        let encoded = record.encode();
        for cut in 0..encoded.len() {
            assert!(Record::decode(&encoded[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn corrupt_records_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let store = Store::open(&path).unwrap();
            store
                .put(&advert("did:key:bad", 1, 100, 1000, &["t"]))
                .unwrap();
            store
                .put(&advert("did:key:good", 1, 50, 1000, &["t"]))
                .unwrap();
        }
        {
            let db = DB::open_cf(&Options::default(), &path, COLUMN_FAMILIES).unwrap();
            let adverts = db.cf_handle(CF_ADVERTS).unwrap();
            db.put_cf(adverts, "did:key:bad", b"\x01garbage").unwrap();
            let seqs = db.cf_handle(CF_SEQS).unwrap();
            db.put_cf(seqs, "did:key:badseq", b"xyz").unwrap();
        }
        let store = Store::open(&path).unwrap();
        match store.get("did:key:bad", 500) {
            Err(StoreError::Corrupt { cf, key, .. }) => {
                assert_eq!((cf, key.as_str()), (CF_ADVERTS, "did:key:bad"));
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // Bulk reads skip it; the good advert is still found.
        assert_eq!(
            dids(&store.find(&tags(&["t"]), 10, 500).unwrap()),
            ["did:key:good"]
        );
        // A corrupt seq refuses the put: replay protection cannot be checked.
        assert!(matches!(
            store.seq("did:key:badseq"),
            Err(StoreError::Corrupt { cf: CF_SEQS, .. })
        ));
        assert!(matches!(
            store.put(&advert("did:key:badseq", 1, 1, 1000, &[])),
            Err(StoreError::Corrupt { cf: CF_SEQS, .. })
        ));
        // A newer advert overwrites the corrupt record.
        assert_eq!(
            store
                .put(&advert("did:key:bad", 2, 200, 1000, &["t"]))
                .unwrap(),
            PutOutcome::Updated { previous_seq: 1 }
        );
        assert_eq!(store.get("did:key:bad", 500).unwrap().unwrap().seq, 2);
        assert_eq!(
            dids(&store.find(&tags(&["t"]), 10, 500).unwrap()),
            ["did:key:bad", "did:key:good"]
        );
    }

    #[test]
    fn input_that_would_break_keys_is_refused() {
        let (_dir, store) = open();
        let bad_did = advert("did:key:a\0b", 1, 1, 100, &["t"]);
        assert!(matches!(
            store.put(&bad_did),
            Err(StoreError::InvalidInput { what: "DID", .. })
        ));
        let mut bad_tag = advert("did:key:a", 1, 1, 100, &[]);
        bad_tag.tags = vec!["a\0b".into()];
        assert!(matches!(
            store.put(&bad_tag),
            Err(StoreError::InvalidInput { what: "tag", .. })
        ));
        assert!(matches!(
            store.find(&tags(&["a\nb"]), 10, 0),
            Err(StoreError::InvalidInput { what: "tag", .. })
        ));
        assert!(store.get("did:key:a\0", 0).is_err());
        assert_eq!(store.seq("did:key:a").unwrap(), None);
        assert_eq!(store.len().unwrap(), 0);
    }

    /// The logical bytes recounted from what is on disk: every advert record with its index
    /// entries, every seq; and per peer. What the usage must equal.
    fn recount(store: &Store) -> (u64, BTreeMap<String, (u64, u64)>) {
        let mut total = 0;
        let mut peers: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let db = &store.inner.db;
        let mut it = db.raw_iterator_cf(store.cf(CF_ADVERTS).unwrap());
        it.seek_to_first();
        while let Some((key, value)) = it.item() {
            let did = std::str::from_utf8(key).unwrap();
            let record = Record::decode(value).unwrap();
            let bytes = record.stored_footprint(did);
            total += bytes;
            let peer = peers.entry(record.peer_id.clone()).or_default();
            *peer = (peer.0 + bytes, peer.1 + 1);
            it.next();
        }
        let mut it = db.raw_iterator_cf(store.cf(CF_SEQS).unwrap());
        it.seek_to_first();
        while let Some(key) = it.key() {
            total += seq_footprint(std::str::from_utf8(key).unwrap());
            it.next();
        }
        (total, peers)
    }

    /// The usage counters agree with a recount, in memory and on disk.
    fn assert_usage_consistent(store: &Store) {
        let (total, peers) = recount(store);
        assert_eq!(store.usage().bytes, total, "usage total");
        assert_eq!(
            store.read_u64(CF_USAGE, USAGE_TOTAL_KEY).unwrap().unwrap_or(0),
            total
        );
        let mut stored = BTreeMap::new();
        let db = &store.inner.db;
        let mut it = db.raw_iterator_cf(store.cf(CF_USAGE).unwrap());
        it.seek([USAGE_PEER_PREFIX]);
        while let Some((key, value)) = it.item().filter(|(k, _)| k[0] == USAGE_PEER_PREFIX) {
            let peer = std::str::from_utf8(&key[1..]).unwrap().to_owned();
            stored.insert(peer, decode_usage(value).unwrap());
            it.next();
        }
        assert_eq!(stored, peers, "per-peer usage");
    }

    fn from_peer(mut v: Validated, peer: &str) -> Validated {
        v.peer_id = peer.into();
        v
    }

    fn big(did: &str, seq: u64, issued_at: u64, expires_at: u64, size: usize) -> Validated {
        let mut v = advert(did, seq, issued_at, expires_at, &["t"]);
        v.bytes = vec![b'x'; size];
        v
    }

    fn refusal(r: Result<PutOutcome, StoreError>) -> Option<Refusal> {
        match r {
            Err(StoreError::Refused { reason, .. }) => Some(reason),
            _ => None,
        }
    }

    #[test]
    fn admission_policy_decides_from_sizes_alone() {
        let limits = Limits {
            max_total_bytes: 1000,
            max_peer_bytes: 400,
            max_did_bytes: 300,
            min_free_bytes: 50,
            replay_window: 10,
        };
        let base = Admission {
            own: false,
            did_bytes: 200,
            growth: 200,
            total: 500,
            peer_growth: 200,
            peer_bytes: 100,
            free_disk: Some(1000),
        };
        assert_eq!(limits.admit(&base), Ok(()));
        let refused = |a: Admission| limits.admit(&a).err();
        assert_eq!(refused(Admission { total: 801, ..base }), Some(Refusal::StoreFull));
        assert_eq!(refused(Admission { total: 800, ..base }), None);
        assert_eq!(refused(Admission { peer_bytes: 201, ..base }), Some(Refusal::PeerQuota));
        assert_eq!(refused(Admission { did_bytes: 301, ..base }), Some(Refusal::DidQuota));
        assert_eq!(refused(Admission { free_disk: Some(49), ..base }), Some(Refusal::DiskLow));
        // Unknown free space: only the byte caps hold.
        assert_eq!(refused(Admission { free_disk: None, ..base }), None);
        // A full store and a full peer still take updates that do not grow them.
        let shrink = Admission {
            growth: -10,
            peer_growth: 0,
            total: 5000,
            peer_bytes: 5000,
            ..base
        };
        assert_eq!(refused(shrink), None);
        // Own adverts pass everything.
        let own = Admission {
            own: true,
            did_bytes: 10_000,
            total: 10_000,
            peer_bytes: 10_000,
            free_disk: Some(0),
            ..base
        };
        assert_eq!(refused(own), None);
    }

    #[test]
    fn the_byte_cap_refuses_new_dids_counts_them_and_keeps_own_publishing() {
        // The attacker: adverts of 10 KiB from fresh DIDs, spread over many peer ids so that
        // no per-peer quota stops them, until the cap does.
        let limits = Limits {
            max_total_bytes: 200 << 10,
            ..test_limits()
        };
        let (_dir, store) = open_with(limits.clone());
        let mut accepted = 0;
        let mut refused = 0;
        for i in 0..40 {
            let v = from_peer(big(&format!("did:key:flood{i:03}"), 1, 10, 100, 10 << 10), &format!("peer{i}"));
            match store.put(&v) {
                Ok(PutOutcome::Inserted) => accepted += 1,
                Err(StoreError::Refused { reason: Refusal::StoreFull, did }) => {
                    assert_eq!(did, v.did);
                    refused += 1;
                }
                other => panic!("{other:?}"),
            }
            assert!(store.usage().bytes <= limits.max_total_bytes);
        }
        assert!(accepted >= 15 && refused >= 15, "{accepted} accepted, {refused} refused");
        assert_eq!(store.usage().refused.store_full, refused);
        assert_eq!(store.len().unwrap(), accepted as usize);
        // Nothing of a refused advert was written, not even its seq.
        assert_eq!(store.seq("did:key:flood039").unwrap(), None);
        assert_usage_consistent(&store);

        // An update of a stored DID that does not grow passes the full store; one that grows
        // does not.
        let same = from_peer(big("did:key:flood000", 2, 11, 100, 10 << 10), "peer0");
        assert_eq!(store.put(&same).unwrap(), PutOutcome::Updated { previous_seq: 1 });
        let grown = from_peer(big("did:key:flood000", 3, 12, 100, 40 << 10), "peer0");
        assert_eq!(refusal(store.put(&grown)), Some(Refusal::StoreFull));
        assert_eq!(store.seq("did:key:flood000").unwrap(), Some(2));

        // Our own adverts still go in, past the cap, and are counted.
        let own = big("did:key:me", 1, 10, 1000, 30 << 10);
        assert_eq!(store.put_own(&own).unwrap(), PutOutcome::Inserted);
        assert!(store.usage().bytes > limits.max_total_bytes);
        assert_usage_consistent(&store);

        // The flood expires; after the sweep there is room again.
        assert_eq!(store.sweep_expired(100).unwrap(), accepted as usize);
        let late = from_peer(big("did:key:late", 1, 150, 500, 10 << 10), "peer0");
        assert_eq!(store.put(&late).unwrap(), PutOutcome::Inserted);
        assert_usage_consistent(&store);
    }

    #[test]
    fn the_peer_quota_stops_one_publisher_and_not_the_others() {
        let limits = Limits {
            max_peer_bytes: 100 << 10,
            ..test_limits()
        };
        let (_dir, store) = open_with(limits.clone());
        let mut refused = 0;
        for i in 0..30 {
            let v = from_peer(big(&format!("did:key:heavy{i:02}"), 1, 10, 100, 10 << 10), "heavy");
            match refusal(store.put(&v)) {
                None => {}
                Some(Refusal::PeerQuota) => refused += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!(refused >= 15, "{refused}");
        assert!(store.peer_usage("heavy").unwrap().0 <= limits.max_peer_bytes);
        assert_eq!(store.usage().refused.peer_quota, refused);
        // Another publisher is not affected.
        let other = from_peer(big("did:key:light", 1, 10, 100, 10 << 10), "light");
        assert_eq!(store.put(&other).unwrap(), PutOutcome::Inserted);
        // A DID moving from the heavy peer to another one frees the heavy peer's share.
        let before = store.peer_usage("heavy").unwrap();
        let moved = from_peer(big("did:key:heavy00", 2, 11, 100, 10 << 10), "light");
        assert_eq!(store.put(&moved).unwrap(), PutOutcome::Updated { previous_seq: 1 });
        let after = store.peer_usage("heavy").unwrap();
        assert!(after.0 < before.0 && after.1 == before.1 - 1, "{before:?} -> {after:?}");
        assert_eq!(store.peer_usage("light").unwrap().1, 2);
        assert_usage_consistent(&store);
        store.sweep_expired(100).unwrap();
        assert_eq!(store.peer_usage("heavy").unwrap(), (0, 0));
        assert_usage_consistent(&store);
    }

    #[test]
    fn the_did_quota_refuses_an_oversized_advert() {
        let (_dir, store) = open_with(Limits {
            max_did_bytes: 4096,
            ..test_limits()
        });
        let v = big("did:key:fat", 1, 10, 100, 5000);
        assert_eq!(refusal(store.put(&v)), Some(Refusal::DidQuota));
        assert_eq!(store.usage().refused.did_quota, 1);
        assert_eq!(store.put(&big("did:key:thin", 1, 10, 100, 1000)).unwrap(), PutOutcome::Inserted);
        assert_eq!(store.put_own(&v).unwrap(), PutOutcome::Inserted);
    }

    #[test]
    fn the_disk_watermark_refuses_others_but_not_own_adverts() {
        // More free space asked than any disk has: the watermark is always crossed.
        let (_dir, store) = open_with(Limits {
            min_free_bytes: u64::MAX,
            ..test_limits()
        });
        let v = advert("did:key:other", 1, 10, 100, &["t"]);
        assert_eq!(refusal(store.put(&v)), Some(Refusal::DiskLow));
        assert_eq!(store.usage().refused.disk_low, 1);
        assert_eq!(store.seq("did:key:other").unwrap(), None);
        let own = advert("did:key:me", 1, 10, 100, &["t"]);
        assert_eq!(store.put_own(&own).unwrap(), PutOutcome::Inserted);
        assert_eq!(dids(&store.find(&tags(&["t"]), 10, 50).unwrap()), ["did:key:me"]);
    }

    #[test]
    fn the_disk_probe_reads_at_most_once_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe");
        std::fs::create_dir(&path).unwrap();
        let probe = DiskProbe {
            path: path.clone(),
            last: Mutex::new(None),
        };
        let t0 = Instant::now();
        assert!(probe.free_bytes(t0).is_some());
        // The directory is gone: a fresh reading would fail; within the second the cached
        // reading is returned.
        std::fs::remove_dir(&path).unwrap();
        assert!(probe.free_bytes(t0 + Duration::from_millis(999)).is_some());
        assert_eq!(probe.free_bytes(t0 + DISK_PROBE_TTL), None);
    }

    #[test]
    fn seqs_are_pruned_once_no_advert_could_be_replayed() {
        let (_dir, store) = open_with(Limits {
            replay_window: 1000,
            ..test_limits()
        });
        let did = "did:key:p";
        store.put(&advert(did, 5, 100, 600, &["t"])).unwrap();
        assert!(store.usage().bytes > 0);
        // The advert expires and is swept; its seq stays while a replay could still be valid.
        assert_eq!(store.sweep_expired(600).unwrap(), 1);
        assert_eq!(store.sweep_expired(1099).unwrap(), 0);
        assert_eq!(store.seq(did).unwrap(), Some(5));
        assert_eq!(
            store.put(&advert(did, 4, 90, 1090, &["t"])).unwrap(),
            PutOutcome::Stale { stored_seq: 5 }
        );
        assert_eq!(store.usage().bytes, seq_footprint(did));
        assert_usage_consistent(&store);
        // At issued_at + window no advert with that seq or lower is valid: the seq goes.
        store.sweep_expired(1100).unwrap();
        assert_eq!(store.seq(did).unwrap(), None);
        assert_eq!(store.usage().bytes, 0);
        assert_eq!(index_entries(&store, did), 0);
        assert_usage_consistent(&store);
        // A later advert of the DID starts afresh.
        assert_eq!(
            store.put(&advert(did, 1, 1200, 1300, &["t"])).unwrap(),
            PutOutcome::Inserted
        );

        // An advert still stored when its seq falls due (outside validation's bounds, e.g. a
        // lowered window) keeps its seq, rescheduled.
        store.put_own(&advert("did:key:long", 1, 0, 5000, &[])).unwrap();
        store.sweep_expired(1001).unwrap();
        assert_eq!(store.seq("did:key:long").unwrap(), Some(1));
        store.sweep_expired(5000).unwrap();
        assert_eq!(store.seq("did:key:long").unwrap(), Some(1));
        store.sweep_expired(6000).unwrap();
        assert_eq!(store.seq("did:key:long").unwrap(), None);
        assert_usage_consistent(&store);
    }

    #[test]
    fn usage_survives_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let usage;
        {
            let store = Store::open_with(&path, test_limits()).unwrap();
            store.put(&from_peer(advert("did:key:a", 1, 10, 100, &["t"]), "p1")).unwrap();
            store.put(&from_peer(advert("did:key:b", 1, 10, 200, &["t"]), "p2")).unwrap();
            store.sweep_expired(100).unwrap();
            usage = store.usage();
        }
        let store = Store::open_with(&path, test_limits()).unwrap();
        assert_eq!(store.usage(), Usage { refused: Refusals::default(), ..usage });
        assert_eq!(store.peer_usage("p1").unwrap(), (0, 0));
        assert_eq!(store.peer_usage("p2").unwrap().1, 1);
        assert_usage_consistent(&store);
    }

    /// The index value of layout 1: `expires_at` ‖ tag count ‖ per tag: length ‖ UTF-8.
    fn v1_index_value(record: &Record) -> Vec<u8> {
        let mut value = record.expires_at.to_be_bytes().to_vec();
        value.push(record.tags.len() as u8);
        for tag in &record.tags {
            value.push(tag.len() as u8);
            value.extend_from_slice(tag.as_bytes());
        }
        value
    }

    #[test]
    fn a_store_of_layout_1_opens_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        // Layout 1, written by hand: its column families (with did_docs), whole tag sets in
        // index values, 8-byte seqs, no usage, no version.
        {
            let mut opts = Options::default();
            opts.create_if_missing(true);
            opts.create_missing_column_families(true);
            let cfs = [
                "default", "adverts", "tags", "expiry", "seqs", "own_seq", "did_docs", "peers",
                "tag_counts",
            ];
            let db = DB::open_cf(&opts, &path, cfs).unwrap();
            let cf = |name| db.cf_handle(name).unwrap();
            let now = unix_now();
            for (did, tags, peer) in [
                ("did:key:a", vec!["x".to_string(), "y".into()], "p1"),
                ("did:key:b", vec!["y".to_string()], "p2"),
            ] {
                let record = Record {
                    seq: 3,
                    issued_at: now - 10,
                    expires_at: now + 1000,
                    tags: tags.clone(),
                    peer_id: peer.into(),
                    bytes: b"{}".to_vec(),
                };
                db.put_cf(cf("adverts"), did, record.encode()).unwrap();
                let value = v1_index_value(&record);
                db.put_cf(cf("tags"), tag_key("", record.issued_at, did), &value).unwrap();
                for tag in &tags {
                    db.put_cf(cf("tags"), tag_key(tag, record.issued_at, did), &value).unwrap();
                    let count = db.get_cf(cf("tag_counts"), tag).unwrap().map_or(0, |v| decode_u64(&v).unwrap());
                    db.put_cf(cf("tag_counts"), tag, (count + 1).to_be_bytes()).unwrap();
                }
                db.put_cf(cf("expiry"), expiry_key(record.expires_at, did), b"").unwrap();
                db.put_cf(cf("seqs"), did, 3u64.to_be_bytes()).unwrap();
            }
            db.put_cf(cf("seqs"), "did:key:gone", 7u64.to_be_bytes()).unwrap();
            db.put_cf(cf("did_docs"), "rdid:web:x", b"\x01").unwrap();
        }
        let store = Store::open_with(&path, test_limits()).unwrap();
        assert_eq!(dids(&store.find(&tags(&["x", "y"]), 10, unix_now()).unwrap()), ["did:key:a"]);
        assert_eq!(store.find(&tags(&["y"]), 10, unix_now()).unwrap().len(), 2);
        assert_eq!(store.seq("did:key:gone").unwrap(), Some(7));
        assert_eq!(store.len().unwrap(), 2);
        assert_usage_consistent(&store);
        assert_eq!(store.peer_usage("p1").unwrap().1, 1);
        assert_eq!(store.schema().unwrap(), Some(SCHEMA_VERSION));
        drop(store);
        let cfs = DB::list_cf(&Options::default(), &path).unwrap();
        assert!(!cfs.iter().any(|cf| cf == "did_docs"), "{cfs:?}");
        // Opened again: nothing to migrate, same answers; seqs are pruned in time.
        let store = Store::open_with(&path, test_limits()).unwrap();
        assert_usage_consistent(&store);
        store.sweep_expired(unix_now() + 1000 + store.limits().replay_window).unwrap();
        assert_eq!(store.seq("did:key:gone").unwrap(), None);
        assert_eq!(store.usage().bytes, 0);
    }

    #[test]
    fn a_store_of_a_newer_layout_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let store = Store::open(&path).unwrap();
            store.inner.db.put(SCHEMA_KEY, 3u64.to_be_bytes()).unwrap();
        }
        assert!(matches!(
            Store::open(&path),
            Err(StoreError::NewerSchema { found: 3 })
        ));
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        const TAGS: [&str; 4] = ["a", "b", "c", "d"];
        /// Lifetimes are below it, as validation guarantees (`max_ttl` + skew).
        const WINDOW: u64 = 80;

        #[derive(Debug, Clone)]
        enum Op {
            Put {
                did: u8,
                peer: u8,
                seq: u64,
                issued_at: u64,
                ttl: u64,
                tags: Vec<usize>,
            },
            Sweep {
                now: u64,
            },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u8..4, 0u8..2, 1u64..12, 0u64..100, 1u64..WINDOW, proptest::collection::btree_set(0usize..4, 0..4))
                    .prop_map(|(did, peer, seq, issued_at, ttl, tags)| Op::Put {
                        did,
                        peer,
                        seq,
                        issued_at,
                        ttl,
                        tags: tags.into_iter().collect(),
                    }),
                1 => (0u64..300).prop_map(|now| Op::Sweep { now }),
            ]
        }

        #[derive(Default)]
        struct Model {
            /// DID → (highest seq, its prune time, stored advert); pruned DIDs are absent.
            dids: BTreeMap<String, (u64, u64, Option<Validated>)>,
        }

        impl Model {
            fn put(&mut self, v: &Validated) -> PutOutcome {
                let entry = self.dids.entry(v.did.clone()).or_insert((0, 0, None));
                if entry.0 >= v.seq {
                    return PutOutcome::Stale {
                        stored_seq: entry.0,
                    };
                }
                let outcome = match entry.2 {
                    None => PutOutcome::Inserted,
                    Some(_) => PutOutcome::Updated {
                        previous_seq: entry.0,
                    },
                };
                *entry = (v.seq, entry.1.max(v.issued_at + WINDOW), Some(v.clone()));
                outcome
            }

            fn sweep(&mut self, now: u64) -> usize {
                let mut n = 0;
                for (_, _, advert) in self.dids.values_mut() {
                    if advert.as_ref().is_some_and(|a| a.expires_at <= now) {
                        *advert = None;
                        n += 1;
                    }
                }
                self.dids
                    .retain(|_, (_, prune_at, advert)| advert.is_some() || *prune_at > now);
                n
            }

            fn find(&self, query: &[String], now: u64) -> Vec<(String, u64)> {
                let mut live: Vec<&Validated> = self
                    .dids
                    .values()
                    .filter_map(|(_, _, a)| a.as_ref())
                    .filter(|a| a.expires_at > now && query.iter().all(|t| a.tags.contains(t)))
                    .collect();
                live.sort_by(|x, y| {
                    y.issued_at
                        .cmp(&x.issued_at)
                        .then_with(|| x.did.cmp(&y.did))
                });
                live.iter().map(|a| (a.did.clone(), a.seq)).collect()
            }

            /// Stored adverts (expired ones until swept) carrying `tag`.
            fn count(&self, tag: &str) -> u64 {
                let stored = self.dids.values().filter_map(|(_, _, a)| a.as_ref());
                stored.filter(|a| a.tags.iter().any(|t| t == tag)).count() as u64
            }

            fn len(&self) -> usize {
                self.dids.values().filter(|(_, _, a)| a.is_some()).count()
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

            #[test]
            fn find_returns_exactly_the_live_matching_adverts(
                ops in proptest::collection::vec(op(), 1..40),
                probe in 0u64..180,
            ) {
                let (_dir, store) = open_with(Limits { replay_window: WINDOW, ..test_limits() });
                let mut model = Model::default();
                for op in &ops {
                    match op {
                        Op::Put { did, peer, seq, issued_at, ttl, tags } => {
                            let tags: Vec<&str> = tags.iter().map(|&i| TAGS[i]).collect();
                            let v = advert(&format!("did:key:{did}"), *seq, *issued_at, issued_at + ttl, &tags);
                            let v = from_peer(v, &format!("peer{peer}"));
                            prop_assert_eq!(store.put(&v).unwrap(), model.put(&v));
                        }
                        Op::Sweep { now } => {
                            prop_assert_eq!(store.sweep_expired(*now).unwrap(), model.sweep(*now));
                        }
                    }
                    prop_assert_eq!(store.len().unwrap(), model.len());
                    assert_usage_consistent(&store);
                    for tag in TAGS {
                        prop_assert_eq!(store.tag_count(tag), model.count(tag), "count of {}", tag);
                    }
                    for mask in 0..16usize {
                        let query: Vec<String> =
                            (0..4).filter(|i| mask & (1 << i) != 0).map(|i| TAGS[i].to_string()).collect();
                        let found: Vec<(String, u64)> = store
                            .find(&query, 100, probe)
                            .unwrap()
                            .into_iter()
                            .map(|a| (a.did, a.seq))
                            .collect();
                        prop_assert_eq!(found, model.find(&query, probe), "query {:?} at {}", query, probe);
                    }
                }
                for did in 0..4 {
                    let did = format!("did:key:{did}");
                    let seq = model.dids.get(&did).map(|(seq, ..)| *seq);
                    prop_assert_eq!(store.seq(&did).unwrap(), seq);
                }
            }
        }
    }
}
