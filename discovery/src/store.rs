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

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Env,
    LogLevel, Options, ReadOptions, WriteBatch, WriteBufferManager, WriteOptions, DB,
};
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use crate::advert::Validated;
use crate::tags::{MAX_TAGS, MAX_TAG_LEN};

/// Most adverts one [`Store::find`] returns, whatever `limit` asks.
pub const MAX_FIND_LIMIT: usize = 1000;
/// Most index entries one [`Store::matches`] returns, whatever `cap` asks: the most a node
/// ranks for one query (about 4 MiB of DIDs and times; past it the newest are ranked).
pub const MAX_MATCHES: usize = 50_000;
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
/// Memtables grow in blocks of this size. RocksDB's default is an eighth of the write buffer
/// (512 KiB here), allocated by every column family that is written to at all: ten families
/// then hold 5 MiB for a few KiB of adverts. 64 KiB blocks cost nothing measurable for our
/// small writes.
const ARENA_BLOCK_BYTES: usize = 64 << 10;

/// What to give a shared memtable budget ([`Memory::shared`]) per store that shares it.
///
/// RocksDB charges a memtable's arena blocks to the budget as they are allocated, and every
/// column family written to holds at least one ([`ARENA_BLOCK_BYTES`]): a store that has taken a
/// few adverts is charged up to ten blocks, 640 KiB, while it holds a few KiB. Below that per
/// store, once most stores have been written the budget is always full and every write flushes a
/// memtable: a table file and a new write-ahead log each time, the flush thread busy, and at
/// 1 000 stores in one process the file descriptors ran out after 12 advertisements
/// (docs/BENCHMARKS.md, "Memtables flushed without end"). The budget counts blocks allocated,
/// not memory touched: a larger one costs no resident memory until it is written.
pub const SHARED_MEMTABLE_BYTES_PER_STORE: usize = 1 << 20;

/// The memory RocksDB may use for one store or for several: a block cache (data, index and
/// filter blocks) and a budget for all memtables. [`Memory::default`] is one store's own: 8 MiB
/// of cache, 16 MiB of memtables. Stores opened with one [`Memory`] (the simulator's hundreds of
/// nodes in one process) share its cache and its budget, so that the process holds one budget,
/// not one per store.
///
/// Stores that share a [`Memory`] are also opened lean: what RocksDB holds per database that
/// hundreds of small stores in one process need not (measured with heaptrack, docs/BENCHMARKS.md
/// "Where the memory goes"): an info log at warning level that does not roll (a rolling log keeps
/// a copy of its header, the options of every column family, ~110 KiB, to write it again at each
/// roll), a table cache of one shard instead of 64, and no statistics dumped or kept in memory.
#[derive(Clone)]
pub struct Memory {
    cache: Cache,
    /// Shared memtable budget; `None`: the store's own, [`TOTAL_WRITE_BUFFER_BYTES`].
    buffers: Option<WriteBufferManager>,
    /// RocksDB's in-memory file system (see [`Memory::files_in_memory`]); `None`: the disk.
    env: Option<Env>,
}

impl Default for Memory {
    fn default() -> Self {
        Memory {
            cache: Cache::new_lru_cache(BLOCK_CACHE_BYTES),
            buffers: None,
            env: None,
        }
    }
}

/// The buffer of each file RocksDB appends to (the write-ahead log, the manifest, the info log).
/// RocksDB starts each at 64 KiB; our writes are a few KiB, and a larger one is appended in
/// pieces.
const WRITABLE_FILE_BUFFER_BYTES: u64 = 16 << 10;

impl Memory {
    /// One budget for every store opened with it: `cache_bytes` of block cache and
    /// `memtable_bytes` of memtables in total (past it, the store being written flushes).
    pub fn shared(cache_bytes: usize, memtable_bytes: usize) -> Self {
        Memory {
            cache: Cache::new_lru_cache(cache_bytes),
            buffers: Some(WriteBufferManager::new_write_buffer_manager(
                memtable_bytes,
                false,
            )),
            env: None,
        }
    }

    /// Stores opened with the result keep their files in RocksDB's in-memory file system
    /// (its `MemEnv`): the same database, write-ahead log, flushes and compactions, but no file
    /// on disk (the store's directory is made, and stays empty) and no file descriptor, and
    /// nothing left when the process exits. For simulations only: under Shadow one process
    /// holds every simulated node's open files under one limit, and a store on disk holds 15
    /// (its lock, info log, manifest, write-ahead log, and a handle on its directory per
    /// column family), so 1 000 nodes would need 15 000 (docs/SIMULATION.md). A node that must
    /// keep what it accepted never uses this.
    pub fn files_in_memory(mut self) -> Result<Self, StoreError> {
        let env = Env::mem_env().map_err(|source| StoreError::Db {
            context: "making RocksDB's in-memory file system".into(),
            source,
        })?;
        self.env = Some(env);
        Ok(self)
    }
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("shared_buffers", &self.buffers.is_some())
            .field("files_in_memory", &self.env.is_some())
            .finish_non_exhaustive()
    }
}
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

mod limits;
use limits::DiskProbe;
pub use limits::{Admission, Limits, Refusal, Refusals, Usage};

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

/// A live advert as the tag index knows it ([`Store::matches`]): enough to rank it, without
/// reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// The agent's DID.
    pub did: String,
    /// When its advert was issued (the signer's claim), Unix seconds.
    pub issued_at: u64,
    /// When this node first stored an advert of the DID, Unix seconds by its own clock (0:
    /// before the node recorded it). A DID minted now is never older than one already known.
    pub first_seen: u64,
}

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
    /// Unix seconds, by this node's clock, when the node first stored an advert of the DID
    /// (kept while the seq is: across republications and restarts); 0 when the entry was
    /// written before the node recorded it (a 16-byte entry), which ranks as the oldest.
    first_seen: u64,
}

impl SeqEntry {
    fn encode(&self) -> [u8; 24] {
        let mut out = [0; 24];
        out[..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..16].copy_from_slice(&self.prune_at.to_be_bytes());
        out[16..].copy_from_slice(&self.first_seen.to_be_bytes());
        out
    }

    fn decode(value: &[u8]) -> Option<SeqEntry> {
        match value.len() {
            8 => Some(SeqEntry {
                seq: decode_u64(value)?,
                prune_at: 0,
                first_seen: 0,
            }),
            16 => Some(SeqEntry {
                seq: decode_u64(&value[..8])?,
                prune_at: decode_u64(&value[8..])?,
                first_seen: 0,
            }),
            24 => Some(SeqEntry {
                seq: decode_u64(&value[..8])?,
                prune_at: decode_u64(&value[8..16])?,
                first_seen: decode_u64(&value[16..])?,
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

    fn open_in(
        path: &Path,
        limits: Limits,
        families: &[&'static str],
        memory: &Memory,
    ) -> Result<Self, StoreError> {
        for name in families {
            if name.is_empty()
                || *name == "default"
                || COLUMN_FAMILIES.contains(name)
                || OBSOLETE_COLUMN_FAMILIES.contains(name)
            {
                return Err(invalid(
                    "column family",
                    name,
                    "empty or one of the store's own",
                ));
            }
        }
        // Made with files in memory too: rust-rocksdb makes it on disk in any case (empty).
        std::fs::create_dir_all(path).map_err(|source| StoreError::CreateDir {
            path: path.to_owned(),
            source,
        })?;
        // Files in memory (the simulator's) have no other opener to keep out.
        let dir_lock = match memory.env {
            None => Some(lock_dir(path)?),
            Some(_) => None,
        };
        let cache = &memory.cache;
        let mut opts = cf_options(cache);
        if let Some(env) = &memory.env {
            opts.set_env(env);
        }
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        match &memory.buffers {
            Some(shared) => opts.set_write_buffer_manager(shared),
            None => opts.set_db_write_buffer_size(TOTAL_WRITE_BUFFER_BYTES),
        }
        opts.set_max_total_wal_size(limits.max_total_wal_bytes());
        opts.set_max_open_files(256);
        opts.set_max_background_jobs(2);
        opts.set_keep_log_file_num(2);
        opts.set_writable_file_max_buffer_size(WRITABLE_FILE_BUFFER_BYTES);
        if memory.buffers.is_some() {
            // Lean (see [`Memory`]): a log that does not roll keeps no copy of its header; at
            // warning level it grows only by warnings and by that header at each open (the
            // last two logs are kept).
            opts.set_log_level(LogLevel::Warn);
            opts.set_max_log_file_size(0);
            opts.set_table_cache_num_shard_bits(0);
            opts.set_stats_dump_period_sec(0);
            opts.set_stats_persist_period_sec(0);
        } else {
            opts.set_max_log_file_size(1 << 20);
        }
        // RocksDB opens a database only with every column family it has listed: those of
        // earlier layouts too, which are then dropped.
        let existing = DB::list_cf(&opts, path).ok();
        let mut names: Vec<String> = COLUMN_FAMILIES.iter().map(|n| n.to_string()).collect();
        for name in families {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        let own = names.len();
        for name in existing.iter().flatten() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        let cfs = names
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(name, cf_options(cache)));
        let db_err = |context: String| move |source| StoreError::Db { context, source };
        let mut db = DB::open_cf_descriptors(&opts, path, cfs)
            .map_err(db_err(format!("opening store at {}", path.display())))?;
        for name in &names[own..] {
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
                _lock: dir_lock,
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

    /// Free bytes on the store's file system (the reading behind [`Limits::min_free_bytes`],
    /// cached for a second), `None` if it cannot be read. For callers that keep their own data
    /// in the store's families (the node's tasks) and honour the same watermark.
    pub fn free_disk_bytes(&self) -> Option<u64> {
        self.inner.disk.free_bytes(Instant::now())
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
                first_seen: stored.map_or_else(unix_now, |s| s.first_seen),
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
            (
                add_signed(peer_bytes, peer_growth),
                add_signed(peer_adverts, new_count),
            ),
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
        let (query, snapshot) = (sorted_query(tags), self.inner.db.snapshot());
        let adverts = self.cf(CF_ADVERTS)?;
        let mut found = Vec::new();
        self.walk_index(&snapshot, &query, now, "finding", |did, issued_at| {
            let record = snapshot
                .get_pinned_cf_opt(adverts, did.as_bytes(), ReadOptions::default())
                .map_err(|source| StoreError::Db {
                    context: format!("finding adverts tagged {}", query.join(",")),
                    source,
                })?
                .map(|bytes| {
                    Record::decode(&bytes).map_err(|r| corrupt(CF_ADVERTS, did.as_bytes(), r))
                })
                .transpose();
            match record {
                Ok(Some(r))
                    if r.issued_at == issued_at
                        && r.expires_at > now
                        && query.iter().all(|t| r.tags.iter().any(|rt| rt == t)) =>
                {
                    found.push(r.into_stored(did.to_owned()));
                }
                // A false positive of the tag filter, or an index entry left behind by a
                // corrupt record that was overwritten.
                Ok(_) => {}
                Err(error) => warn!(%error, "skipping corrupt advert in find"),
            }
            Ok(found.len() < limit)
        })?;
        Ok(found)
    }

    /// Every live advert carrying all of `tags` (already normalized, at least one), as the
    /// index alone knows it: no advert is read, so a query's whole answer can be ranked before
    /// any card is (the node's `discover`). Newest `issued_at` first, at most `cap` (and
    /// [`MAX_MATCHES`]); the second value says whether the cap cut the walk.
    ///
    /// The index's tag filter can let through an advert that lacks one of `tags` (rarely):
    /// [`Store::get`] the ones kept and check their tags before showing them.
    pub fn matches(
        &self,
        tags: &[String],
        cap: usize,
        now: u64,
    ) -> Result<(Vec<Match>, bool), StoreError> {
        if tags.is_empty() || tags.len() > MAX_TAGS {
            return Err(invalid(
                "tag query",
                &tags.join(","),
                "no tag, or more than MAX_TAGS tags",
            ));
        }
        for tag in tags {
            check_tag(tag)?;
        }
        let cap = cap.min(MAX_MATCHES);
        let (query, snapshot) = (sorted_query(tags), self.inner.db.snapshot());
        let seqs = self.cf(CF_SEQS)?;
        let db_err = |source| StoreError::Db {
            context: format!("matching adverts tagged {}", query.join(",")),
            source,
        };
        let mut found = Vec::new();
        let mut cut = false;
        self.walk_index(&snapshot, &query, now, "matching", |did, issued_at| {
            if found.len() >= cap {
                cut = true;
                return Ok(false);
            }
            found.push(Match {
                did: did.to_owned(),
                issued_at,
                first_seen: 0,
            });
            Ok(true)
        })?;
        // When each was first seen, from the seqs, in one batched read.
        let seen = snapshot.multi_get_cf(found.iter().map(|m| (seqs, m.did.as_bytes())));
        for (m, value) in found.iter_mut().zip(seen) {
            match value {
                Ok(Some(v)) => match SeqEntry::decode(&v) {
                    Some(e) => m.first_seen = e.first_seen,
                    None => {
                        warn!(error = %corrupt(CF_SEQS, m.did.as_bytes(), "bad seq"), "ranking as oldest")
                    }
                },
                Ok(None) => {}
                Err(source) => return Err(db_err(source)),
            }
        }
        Ok((found, cut))
    }

    /// `did` as [`Store::matches`] would list it for `tags` (normalized), read directly: for a
    /// DID the caller must rank whether or not the walk reached it (one the operator trusts,
    /// when more adverts match than [`MAX_MATCHES`]). `None` if it has no live advert carrying
    /// every one of `tags`.
    pub fn match_of(
        &self,
        did: &str,
        tags: &[String],
        now: u64,
    ) -> Result<Option<Match>, StoreError> {
        check_did(did)?;
        let Some(record) = self.read_record(did)? else {
            return Ok(None);
        };
        if record.expires_at <= now || !tags.iter().all(|t| record.tags.contains(t)) {
            return Ok(None);
        }
        let first_seen = self.read_seq(did)?.map_or(0, |s| s.first_seen);
        Ok(Some(Match {
            did: did.to_owned(),
            issued_at: record.issued_at,
            first_seen,
        }))
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
        self.write_releasing(batch, released, || {
            format!("sweeping adverts expired at {now}")
        })?;
        saturating_sub(&self.inner.adverts, swept);
        Ok((swept, due.len() >= SWEEP_BATCH))
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
        self.write_releasing(batch, released, || format!("pruning seqs due at {now}"))?;
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

    /// A column family opened by [`open_with_families`](Self::open_with_families).
    pub fn family(&self, name: &'static str) -> Result<Family, StoreError> {
        self.cf(name)?;
        Ok(Family {
            store: self.clone(),
            name,
        })
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

    /// Write `batch` with the usage total lowered by `released` bytes, then publish the new
    /// total. Caller holds the write lock; `context` names the work for the error.
    fn write_releasing(
        &self,
        mut batch: WriteBatch,
        released: u64,
        context: impl FnOnce() -> String,
    ) -> Result<(), StoreError> {
        let new_total = self
            .inner
            .bytes
            .load(Ordering::Relaxed)
            .saturating_sub(released);
        batch.put_cf(self.cf(CF_USAGE)?, USAGE_TOTAL_KEY, new_total.to_be_bytes());
        self.inner
            .db
            .write(batch)
            .map_err(|source| StoreError::Db {
                context: context(),
                source,
            })?;
        self.inner.bytes.store(new_total, Ordering::Relaxed);
        Ok(())
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
            let usage = (
                add_signed(old_bytes, bytes),
                add_signed(old_adverts, adverts),
            );
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

    /// During a migration: write `batch` once it holds [`SWEEP_BATCH`] changes.
    fn write_when_full(
        &self,
        batch: &mut WriteBatch,
        in_batch: &mut usize,
    ) -> Result<(), StoreError> {
        if *in_batch >= SWEEP_BATCH {
            self.inner
                .db
                .write(std::mem::take(batch))
                .map_err(|source| StoreError::Db {
                    context: "migrating the store from layout 1".into(),
                    source,
                })?;
            *in_batch = 0;
        }
        Ok(())
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
            self.write_when_full(&mut batch, &mut in_batch)?;
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
            self.write_when_full(&mut batch, &mut in_batch)?;
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

    /// Walk the tag index for `query` (sorted, deduplicated; empty: every advert), newest
    /// `issued_at` first, calling `visit(did, issued_at)` for each entry whose index value says
    /// it is live at `now` and carries every tag of `query` (by the tag-set filter: rarely a
    /// false positive), until `visit` answers `false`. The list walked is the rarest queried
    /// tag's, so only its entries are read; a corrupt entry is logged and skipped. `what` names
    /// the walk in errors ("finding", "matching").
    fn walk_index(
        &self,
        snapshot: &rocksdb::SnapshotWithThreadMode<'_, DB>,
        query: &[&str],
        now: u64,
        what: &str,
        mut visit: impl FnMut(&str, u64) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let tags_cf = self.cf(CF_TAGS)?;
        let mask = tag_filter(query.iter().copied());
        let driver = query
            .iter()
            .copied()
            .min_by_key(|tag| self.tag_count(tag))
            .unwrap_or("");
        let prefix = tag_prefix(driver);
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(prefix_end(&prefix));
        let mut it = snapshot.raw_iterator_cf_opt(tags_cf, ro);
        it.seek(&prefix);
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
                    if !visit(did, issued_at)? {
                        break;
                    }
                }
                Ok(_) => {}
                Err(reason) => {
                    warn!(error = %corrupt(CF_TAGS, key, reason), "skipping corrupt index entry")
                }
            }
            it.next();
        }
        it.status().map_err(|source| StoreError::Db {
            context: format!("{what} adverts tagged {}", query.join(",")),
            source,
        })
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
        batch.put_cf(tags, tag_key("", self.issued_at, did), value);
        for tag in &self.tags {
            batch.put_cf(tags, tag_key(tag, self.issued_at, did), value);
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
        (bytes, adverts) => batch.put_cf(
            cf,
            key,
            [bytes.to_be_bytes(), adverts.to_be_bytes()].concat(),
        ),
    }
}

/// A tag query sorted and without repeats.
fn sorted_query(tags: &[String]) -> Vec<&str> {
    let mut query: Vec<&str> = tags.iter().map(String::as_str).collect();
    query.sort_unstable();
    query.dedup();
    query
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
    // A seq entry of 24 bytes (an entry of 16 written before `first_seen`, released as 24:
    // the total then reads at most 8 bytes per such entry low, once).
    let did = did.len() as u64;
    (did + 24 + ENTRY_OVERHEAD) + (8 + did + ENTRY_OVERHEAD)
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

/// The file whose lock says a [`Store`] has the directory open.
pub const LOCK_FILE: &str = "agentnet.lock";

/// Take the directory for this store: a second open of it, by this process or another, fails
/// with [`StoreError::Locked`] before RocksDB is asked. RocksDB has its own lock, but says it is
/// held only in the text of an I/O error; an exclusive `flock` on a file of our own is typed.
fn lock_dir(path: &Path) -> Result<std::fs::File, StoreError> {
    let file_path = path.join(LOCK_FILE);
    let lock_err = |source| StoreError::Lock {
        path: file_path.clone(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&file_path)
        .map_err(lock_err)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(StoreError::Locked {
            path: path.to_owned(),
        }),
        Err(e) => Err(lock_err(e.into())),
    }
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
    opts.set_arena_block_size(ARENA_BLOCK_BYTES);
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
mod tests;

/// One write of a [`Family::write`] batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FamilyOp {
    /// Set `key` to `value`.
    Put(Vec<u8>, Vec<u8>),
    /// Delete `key`.
    Delete(Vec<u8>),
}

/// A caller-owned column family of the store's database (see
/// [`Store::open_with_families`]): raw keys and values, atomic batches, bounded range scans.
/// The layout inside is the caller's; this module never reads it. Blocking, like every store
/// method. Cheap to clone.
#[derive(Clone)]
pub struct Family {
    store: Store,
    name: &'static str,
}

impl fmt::Debug for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Family").field("name", &self.name).finish()
    }
}

impl Family {
    fn err(&self, what: &str) -> impl FnOnce(rocksdb::Error) -> StoreError {
        let context = format!("{what} in column family {}", self.name);
        move |source| StoreError::Db { context, source }
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let cf = self.store.cf(self.name)?;
        self.store
            .inner
            .db
            .get_cf(cf, key)
            .map_err(self.err("reading"))
    }

    /// Apply `ops` as one atomic batch (written to the WAL without fsync, like adverts).
    pub fn write(&self, ops: Vec<FamilyOp>) -> Result<(), StoreError> {
        Family::write_all(ops.into_iter().map(|op| (self, op)))
    }

    /// Apply writes to several families of one store as one atomic batch. Every family must
    /// belong to the same store (else [`StoreError::InvalidInput`]).
    pub fn write_all<'a>(
        ops: impl IntoIterator<Item = (&'a Family, FamilyOp)>,
    ) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let mut store: Option<&Store> = None;
        for (family, op) in ops {
            match store {
                None => store = Some(&family.store),
                Some(s) if Arc::ptr_eq(&s.inner, &family.store.inner) => {}
                Some(_) => {
                    return Err(invalid(
                        "column family",
                        family.name,
                        "of another store in one batch",
                    ))
                }
            }
            let cf = family.store.cf(family.name)?;
            match op {
                FamilyOp::Put(k, v) => batch.put_cf(cf, k, v),
                FamilyOp::Delete(k) => batch.delete_cf(cf, k),
            }
        }
        let Some(store) = store else {
            return Ok(());
        };
        store
            .inner
            .db
            .write(batch)
            .map_err(|source| StoreError::Db {
                context: "writing a batch of caller column families".into(),
                source,
            })
    }

    /// The entries with `start <= key < end` in key order, at most `limit` of them; `f` may
    /// stop the scan early by returning `false`.
    pub fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let cf = self.store.cf(self.name)?;
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(end.to_vec());
        let mut it = self.store.inner.db.raw_iterator_cf_opt(cf, ro);
        it.seek(start);
        let mut n = 0;
        while let Some((k, v)) = it.item() {
            if n >= limit || !f(k, v) {
                break;
            }
            n += 1;
            it.next();
        }
        it.status().map_err(self.err("scanning"))
    }
}

#[cfg(test)]
mod family_tests {
    use super::*;

    #[test]
    fn caller_families_persist_and_own_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["adverts", "default", "", "did_docs"] {
            assert!(matches!(
                Store::open_with_families(dir.path(), Limits::default(), &[bad]),
                Err(StoreError::InvalidInput { .. })
            ));
        }
        {
            let s = Store::open_with_families(dir.path(), Limits::default(), &["x_tasks"]).unwrap();
            let f = s.family("x_tasks").unwrap();
            f.write(vec![
                FamilyOp::Put(b"a1".to_vec(), b"one".to_vec()),
                FamilyOp::Put(b"a2".to_vec(), b"two".to_vec()),
                FamilyOp::Put(b"b1".to_vec(), b"three".to_vec()),
            ])
            .unwrap();
            f.write(vec![FamilyOp::Delete(b"a2".to_vec())]).unwrap();
            assert!(s.family("nope").is_err());
            s.flush().unwrap();
        }
        // Opened without the family, it is left in place; opened with it, the data is there.
        drop(Store::open(dir.path()).unwrap());
        let s = Store::open_with_families(dir.path(), Limits::default(), &["x_tasks"]).unwrap();
        let f = s.family("x_tasks").unwrap();
        assert_eq!(f.get(b"a1").unwrap().as_deref(), Some(&b"one"[..]));
        let mut seen = Vec::new();
        f.scan(b"a", b"b", 10, |k, _| {
            seen.push(k.to_vec());
            true
        })
        .unwrap();
        assert_eq!(seen, vec![b"a1".to_vec()]);
        let mut n = 0;
        f.scan(b"", b"\xff", 1, |_, _| {
            n += 1;
            true
        })
        .unwrap();
        assert_eq!(n, 1, "the limit bounds the scan");
    }
}
