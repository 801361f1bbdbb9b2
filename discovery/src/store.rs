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
//! block cache holding data, index and filter blocks, 4 MiB memtables grown 64 KiB at a time,
//! 16 MiB of memtables in total, no compression; stores opened with one [`Memory`] share one
//! cache and one memtable budget ([`Store::open_shared`]).
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
//!
//! # Files
//! - this file: [`Store`], its errors, opening, [`Store::put`] and the other point reads and
//!   writes;
//! - `codec`: the encodings of records, seqs entries, index keys and values;
//! - `families`: the column families, how the database is opened ([`Memory`]), and the families
//!   callers own ([`Family`]);
//! - `index`: the tag-index queries ([`Store::find`], [`Store::matches`]);
//! - `limits`: what the store accepts from others ([`Limits`]);
//! - `migration`: the layout version and the migration from layout 1;
//! - `peers`: the known peers;
//! - `sweep`: the deletion of expired adverts and of seqs past their replay window;
//! - `usage`: the bytes charged, in total and per publishing peer.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rocksdb::{ColumnFamily, ReadOptions, WriteBatch, WriteOptions, DB};
use tracing::{debug, warn};

use crate::advert::Validated;
use crate::tags::{MAX_TAGS, MAX_TAG_LEN};

mod codec;
mod families;
mod index;
mod limits;
mod migration;
mod peers;
mod sweep;
mod usage;

pub use codec::ENTRY_OVERHEAD;
use codec::{decode_u64, expiry_key, prefix_end, seq_footprint, Record, SeqEntry};
pub use families::{Family, FamilyOp, Memory, LOCK_FILE, SHARED_MEMTABLE_BYTES_PER_STORE};
use families::{CF_ADVERTS, CF_EXPIRY, CF_OWN_SEQ, CF_SEQS, CF_SEQ_EXPIRY, CF_TAGS};
pub use index::{Match, MAX_FIND_LIMIT, MAX_MATCHES};
use limits::DiskProbe;
pub use limits::{Admission, Limits, Refusal, Refusals, Usage};
use migration::SCHEMA_VERSION;
pub use peers::{MAX_ADDR_LEN, MAX_PEERS, MAX_PEER_ADDRS};
use usage::add_signed;

/// Longest peer id accepted, in bytes.
pub const MAX_PEER_ID_LEN: usize = 128;

/// Largest advertisement stored, in bytes.
pub const MAX_ADVERT_BYTES: usize = 256 * 1024;

/// Expired adverts (or prunable seqs) deleted per write batch (and per hold of the write lock)
/// by a sweep or a migration.
const SWEEP_BATCH: usize = 1024;

/// The write-ahead log is kept below an eighth of the byte cap (a small store on a small disk
/// must not hold 64 MiB of log), between 2 MiB (a few large adverts per flush) and 64 MiB.
const MIN_TOTAL_WAL_BYTES: u64 = 2 << 20;
const MAX_TOTAL_WAL_BYTES: u64 = 64 << 20;

/// How long a free-disk reading is trusted: one `statvfs` per second at most, not one per put.
const DISK_PROBE_TTL: Duration = Duration::from_secs(1);

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
    /// Another [`Store`] holds the directory, in this process or another: a node is running
    /// on it.
    #[error("store at {} is in use by another process (or another store in this one)", path.display())]
    Locked {
        /// The store's directory.
        path: PathBuf,
    },
    /// The store's lock file could not be opened or locked.
    #[error("locking store at {}: {source}", path.display())]
    Lock {
        /// The lock file.
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
    /// The directory's lock ([`lock_dir`]), released when the last handle goes (after `db`).
    _lock: Option<std::fs::File>,
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
    /// When each DID was first seen, as its seq says ([`index::FirstSeen`]).
    first_seen: index::FirstSeen,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Who offers an advert to [`Store::put`]: the node itself is never refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Own,
    Other,
}

/// What the store holds for a DID before a put: its seqs entry and its advert record.
struct Prior {
    /// The DID's seqs entry, if it has one.
    seq: Option<SeqEntry>,
    /// The DID's advert record: `None` if none is stored, `Some(None)` if the stored one is
    /// corrupt (the put overwrites it).
    record: Option<Option<Record>>,
}

impl Prior {
    /// The stored record, if there is one and it could be read.
    fn record(&self) -> Option<&Record> {
        self.record.as_ref().and_then(Option::as_ref)
    }

    /// What a put over this did, once written.
    fn outcome(self) -> PutOutcome {
        match self.record {
            None => PutOutcome::Inserted,
            Some(old) => PutOutcome::Updated {
                previous_seq: self
                    .seq
                    .map(|s| s.seq)
                    .or(old.map(|o| o.seq))
                    .unwrap_or_default(),
            },
        }
    }
}

/// What a put changes in the bytes charged, in total and to the publishing peer, and the
/// figures the [`Limits`] judge it by.
struct Charge {
    /// The new advert's logical bytes.
    new_bytes: u64,
    /// The replaced advert's logical bytes (0: none, or a corrupt one).
    old_bytes: u64,
    /// The change of the total: the new advert and a new seq entry, less the replaced advert.
    growth: i64,
    /// Whether the replaced advert named the same publishing peer.
    same_peer: bool,
    /// The change of the publishing peer's bytes: all of the new advert if the peer changed.
    peer_growth: i64,
    /// The publishing peer's (bytes, adverts) before the put.
    peer_usage: (u64, u64),
    /// The total before the put.
    total: u64,
}

impl Store {
    /// Open the store at `path` with the default [`Limits`]. See [`open_with`](Self::open_with).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, Limits::default())
    }

    /// Open the store at `path`, creating the directory and column families if missing, and
    /// migrating a store of an earlier layout (see the module documentation).
    pub fn open_with(path: &Path, limits: Limits) -> Result<Self, StoreError> {
        Self::open_with_families(path, limits, &[])
    }

    /// [`open_with`](Self::open_with), also opening (creating if missing) the column families
    /// `families`, which the caller owns and reaches through [`Store::family`]: so that other
    /// parts of the node (the A2A task store) keep their data in this one database. A name of
    /// this module's own layout, or an empty one, is refused.
    pub fn open_with_families(
        path: &Path,
        limits: Limits,
        families: &[&'static str],
    ) -> Result<Self, StoreError> {
        Self::open_in(path, limits, families, &Memory::default())
    }

    /// [`open_with`](Self::open_with) within the memory budget `memory` (see [`Memory`]).
    pub fn open_shared(path: &Path, limits: Limits, memory: &Memory) -> Result<Self, StoreError> {
        Self::open_in(path, limits, &[], memory)
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Free bytes on the store's file system (the reading behind [`Limits::min_free_bytes`],
    /// cached for a second), `None` if it cannot be read. For callers that keep their own data
    /// in the store's families (the node's tasks) and honour the same watermark.
    pub fn free_disk_bytes(&self) -> Option<u64> {
        self.inner.disk.free_bytes(Instant::now())
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

    /// [`put`](Self::put) and [`put_own`](Self::put_own): check the advert, read what the DID
    /// has under the write lock, admit the growth, then write record, index, seq and usage in
    /// one batch.
    fn put_from(&self, v: &Validated, origin: Origin) -> Result<PutOutcome, StoreError> {
        check_advert(v)?;
        let new = Record::of(v);
        let encoded = new.encode();
        let new_bytes = new.footprint(&v.did, encoded.len());
        // Read before the lock: a statvfs at most once a second, never under the write lock.
        let free_disk = match origin {
            Origin::Own => None,
            Origin::Other => self.inner.disk.free_bytes(Instant::now()),
        };

        let _guard = lock(&self.inner.write);
        let prior = match self.prior(v)? {
            ControlFlow::Continue(prior) => prior,
            ControlFlow::Break(stale) => return Ok(stale),
        };
        let charge = self.charge(v, &prior, new_bytes)?;
        self.admit(v, origin, &charge, free_disk)?;

        let mut batch = WriteBatch::default();
        self.replace_advert(&mut batch, v, &new, encoded, prior.record())?;
        self.advance_seq(&mut batch, v, prior.seq)?;
        let new_total = self.charge_usage(&mut batch, v, prior.record(), &charge)?;
        self.inner
            .db
            .write(batch)
            .map_err(|source| StoreError::Db {
                context: format!("storing advert of {} seq {}", v.did, v.seq),
                source,
            })?;
        self.inner.bytes.store(new_total, Ordering::Relaxed);
        if prior.record.is_none() {
            self.inner.adverts.fetch_add(1, Ordering::Relaxed);
        }
        Ok(prior.outcome())
    }

    /// The DID's seqs entry and advert record, read under the write lock; `Break` with
    /// [`PutOutcome::Stale`] when `v` is not newer than the seq (or than the record).
    fn prior(&self, v: &Validated) -> Result<ControlFlow<PutOutcome, Prior>, StoreError> {
        let stored = self.read_seq(&v.did)?;
        if let Some(stored) = stored {
            if v.seq <= stored.seq {
                return Ok(ControlFlow::Break(PutOutcome::Stale {
                    stored_seq: stored.seq,
                }));
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
                return Ok(ControlFlow::Break(PutOutcome::Stale {
                    stored_seq: old.seq,
                }));
            }
        }
        Ok(ControlFlow::Continue(Prior {
            seq: stored,
            record: old,
        }))
    }

    /// What putting `v` (of `new_bytes`) over `prior` charges, with the usage it is judged
    /// against.
    fn charge(&self, v: &Validated, prior: &Prior, new_bytes: u64) -> Result<Charge, StoreError> {
        let old_record = prior.record();
        let old_bytes = old_record.map_or(0, |o| o.stored_footprint(&v.did));
        let seq_bytes = if prior.seq.is_none() {
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
        let peer_usage = self.read_peer_usage(&v.peer_id)?;
        let total = self.inner.bytes.load(Ordering::Relaxed);
        Ok(Charge {
            new_bytes,
            old_bytes,
            growth,
            same_peer,
            peer_growth,
            peer_usage,
            total,
        })
    }

    /// Refuse `v` (counted, nothing written) when a [`Limits`] cap or the disk watermark says
    /// so; the node's own adverts pass.
    fn admit(
        &self,
        v: &Validated,
        origin: Origin,
        charge: &Charge,
        free_disk: Option<u64>,
    ) -> Result<(), StoreError> {
        let admission = Admission {
            own: origin == Origin::Own,
            did_bytes: charge.new_bytes,
            growth: charge.growth,
            total: charge.total,
            peer_growth: charge.peer_growth,
            peer_bytes: charge.peer_usage.0,
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
        Ok(())
    }

    /// Put `new` (encoded: `encoded`) and its index entries in `batch` in place of `old`'s,
    /// with the tag counts. Caller holds the write lock.
    fn replace_advert(
        &self,
        batch: &mut WriteBatch,
        v: &Validated,
        new: &Record,
        encoded: Vec<u8>,
        old: Option<&Record>,
    ) -> Result<(), StoreError> {
        let (adverts, tags_cf, expiry) =
            (self.cf(CF_ADVERTS)?, self.cf(CF_TAGS)?, self.cf(CF_EXPIRY)?);
        let mut deltas = BTreeMap::new();
        if let Some(old) = old {
            old.delete_index(batch, tags_cf, expiry, &v.did);
            for tag in &old.tags {
                *deltas.entry(tag.clone()).or_default() -= 1;
            }
        }
        for tag in &new.tags {
            *deltas.entry(tag.clone()).or_default() += 1;
        }
        self.adjust_tag_counts(batch, &deltas)?;
        batch.put_cf(adverts, v.did.as_bytes(), encoded);
        new.put_index(batch, tags_cf, expiry, &v.did);
        Ok(())
    }

    /// Put `v`'s seq in `batch` over the `stored` entry, with its prune time and the first
    /// sighting kept. Caller holds the write lock.
    fn advance_seq(
        &self,
        batch: &mut WriteBatch,
        v: &Validated,
        stored: Option<SeqEntry>,
    ) -> Result<(), StoreError> {
        let (seqs, seq_expiry) = (self.cf(CF_SEQS)?, self.cf(CF_SEQ_EXPIRY)?);
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
                first_seen: stored.map_or_else(unix_now, |s| s.first_seen),
            }
            .encode(),
        );
        batch.put_cf(seq_expiry, expiry_key(prune_at, &v.did), b"");
        Ok(())
    }

    /// Put the usage after the put in `batch`: the total, the new peer's share, and the old
    /// peer's if it changed. Returns the new total. Caller holds the write lock.
    fn charge_usage(
        &self,
        batch: &mut WriteBatch,
        v: &Validated,
        old: Option<&Record>,
        charge: &Charge,
    ) -> Result<u64, StoreError> {
        let new_total = add_signed(charge.total, charge.growth);
        let mut peer_deltas = BTreeMap::new();
        if let Some(old) = old.filter(|_| !charge.same_peer) {
            peer_deltas.insert(old.peer_id.clone(), (-(charge.old_bytes as i64), -1));
        }
        let new_count = i64::from(!charge.same_peer);
        let (peer_bytes, peer_adverts) = charge.peer_usage;
        self.put_usage(
            batch,
            new_total,
            &v.peer_id,
            (
                add_signed(peer_bytes, charge.peer_growth),
                add_signed(peer_adverts, new_count),
            ),
        )?;
        self.adjust_peer_usage(batch, &peer_deltas)?;
        Ok(new_total)
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

    /// Delete `did`'s advert and its index entries now, before it expires (the node stopped
    /// publishing it). Its seq stays, so that no older advert of the DID is taken again and
    /// the next own seq still goes above it. `false` if no advert was stored.
    pub fn remove(&self, did: &str) -> Result<bool, StoreError> {
        check_did(did)?;
        let (adverts, tags_cf, expiry) =
            (self.cf(CF_ADVERTS)?, self.cf(CF_TAGS)?, self.cf(CF_EXPIRY)?);
        let _guard = lock(&self.inner.write);
        let mut batch = WriteBatch::default();
        let mut released = 0u64;
        match self.read_record(did) {
            Ok(Some(record)) => {
                record.delete_index(&mut batch, tags_cf, expiry, did);
                batch.delete_cf(adverts, did.as_bytes());
                let bytes = record.stored_footprint(did);
                released = bytes;
                let mut deltas = BTreeMap::new();
                for tag in &record.tags {
                    *deltas.entry(tag.clone()).or_default() -= 1;
                }
                let mut peer_deltas: BTreeMap<String, (i64, i64)> = BTreeMap::new();
                peer_deltas.insert(record.peer_id.clone(), (-(bytes as i64), -1));
                self.adjust_tag_counts(&mut batch, &deltas)?;
                self.adjust_peer_usage(&mut batch, &peer_deltas)?;
            }
            Ok(None) => return Ok(false),
            Err(error @ StoreError::Corrupt { .. }) => {
                warn!(%error, %did, "deleting corrupt advert");
                batch.delete_cf(adverts, did.as_bytes());
            }
            Err(e) => return Err(e),
        }
        self.write_releasing(batch, released, || format!("removing the advert of {did}"))?;
        saturating_sub(&self.inner.adverts, 1);
        Ok(true)
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
}

/// Refuse an advert whose DID, tags, peer id or size would not round-trip or would break the
/// index, before anything is read or written.
fn check_advert(v: &Validated) -> Result<(), StoreError> {
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
    Ok(())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
mod tests;
