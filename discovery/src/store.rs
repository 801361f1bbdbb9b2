//! The RocksDB store of validated advertisements, their tag index, sequence numbers, known peers
//! and cached DID documents.
//!
//! Every method is synchronous and may block on disk I/O: call it from `spawn_blocking` or a
//! dedicated thread, never from the swarm task or an async worker. [`Store`] is a cheap `Clone`
//! (an `Arc`) and is `Send + Sync`.
//!
//! # Column families
//! | CF           | key                                        | value                            |
//! |--------------|--------------------------------------------|----------------------------------|
//! | `adverts`    | DID                                        | advert record (below)            |
//! | `tags`       | tag ‖ `0x00` ‖ `!issued_at` (u64 BE) ‖ DID | index value (below)              |
//! | `tag_counts` | tag                                        | adverts with the tag (u64 BE)    |
//! | `expiry`     | `expires_at` (u64 BE) ‖ DID                | empty                            |
//! | `seqs`       | DID                                        | highest seq ever stored (u64 BE) |
//! | `own_seq`    | DID                                        | last [`Store::next_own_seq`]     |
//! | `peers`      | `r` ‖ peer id / `t` ‖ last seen (BE) ‖ id  | peer record / empty              |
//! | `did_docs`   | `r` ‖ DID / `t` ‖ fetched at (BE) ‖ DID    | document record / empty          |
//!
//! Every advert has one `tags` entry per tag plus one under the empty tag (prefix `0x00`), the
//! list of all adverts. Within a tag the keys sort newest `issued_at` first (the bitwise NOT makes
//! big timestamps small), then by DID. The index value is `expires_at` (u64 BE) ‖ tag count (u8) ‖
//! per tag: length (u8) ‖ UTF-8 — the advert's whole tag set. [`Store::find`] walks the list of
//! the queried tag with the smallest count in `tag_counts` and checks expiry and the other tags
//! from the index values, stopping after `limit` hits; it reads only the records it returns. A
//! query costs `limit` steps plus the entries it skips (expired ones, and those lacking another
//! queried tag), at worst the length of the rarest queried tag's list, never the size of the
//! store. The counts are a planning hint only: results do not depend on them. `expiry` lets
//! [`Store::sweep_expired`] visit only what has expired. Tags cannot contain control characters
//! and DIDs cannot contain NUL; both are checked before anything is written, so `0x00` is an
//! unambiguous separator.
//!
//! # Records
//! An advert record is `0x01` (format version) ‖ seq ‖ issued_at ‖ expires_at (u64 BE each) ‖ tag
//! count (u8) ‖ per tag: length (u8) ‖ UTF-8 ‖ peer id length (u16 BE) ‖ UTF-8 ‖ advert length
//! (u32 BE) ‖ the advertisement bytes exactly as received. The DID is the key. Peer and DID
//! document records are `0x01` ‖ timestamp (u64 BE) ‖ payload; a peer's payload is an address
//! count (u8) and per address a length (u16 BE) and UTF-8. Any other version, a short or long
//! record, or invalid UTF-8 is [`StoreError::Corrupt`].
//!
//! # Consistency and durability
//! One mutex serializes every read-check-write of `adverts`, `tags`, `tag_counts`, `expiry`,
//! `seqs` and `own_seq`; each change is one atomic `WriteBatch`. Reads run against a RocksDB snapshot and do
//! not take the lock. Sequence numbers are never deleted, so a replay of an old advertisement stays
//! [`PutOutcome::Stale`] after its DID's advert expired, was swept, and across restarts. Advert
//! writes go to the write-ahead log without fsync (an advert lost in a power cut comes back by
//! gossip); [`Store::next_own_seq`] syncs before it returns.
//!
//! Point reads ([`Store::get`], [`Store::seq`], [`Store::did_doc`], and [`Store::put`] reading the
//! seq) report bad bytes as [`StoreError::Corrupt`]. Bulk reads ([`Store::find`],
//! [`Store::peers`]) skip a corrupt entry with a warning so that one bad record does not hide all
//! others; [`Store::put`] overwrites a corrupt advert record and [`Store::sweep_expired`] deletes
//! one whose expiry has passed.
//!
//! # Bounds
//! [`MAX_FIND_LIMIT`] results per query, [`MAX_PEERS`] peers, [`MAX_DID_DOCS`] cached DID
//! documents (the oldest are dropped), [`MAX_ADVERT_BYTES`] per advert, [`MAX_DID_DOC_BYTES`] per
//! document. RocksDB memory is kept small: an 8 MiB block cache holding data, index and filter
//! blocks, 4 MiB memtables, 16 MiB of memtables in total, no compression. What is not bounded:
//! one `seqs` entry (the DID and 8 bytes) per DID ever stored, kept on purpose.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options,
    ReadOptions, WriteBatch, WriteOptions, DB,
};
use tracing::warn;

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
/// Most DID documents cached; the least recently fetched are dropped.
pub const MAX_DID_DOCS: usize = 2048;
/// Largest DID document cached, in bytes.
pub const MAX_DID_DOC_BYTES: usize = 256 * 1024;

/// Expired adverts deleted per write batch (and per hold of the write lock) by a sweep.
const SWEEP_BATCH: usize = 1024;
const BLOCK_CACHE_BYTES: usize = 8 << 20;
const WRITE_BUFFER_BYTES: usize = 4 << 20;
const TOTAL_WRITE_BUFFER_BYTES: usize = 16 << 20;
const MAX_TOTAL_WAL_BYTES: u64 = 64 << 20;
const RECORD_VERSION: u8 = 1;

const CF_ADVERTS: &str = "adverts";
const CF_TAGS: &str = "tags";
const CF_EXPIRY: &str = "expiry";
const CF_SEQS: &str = "seqs";
const CF_OWN_SEQ: &str = "own_seq";
const CF_DID_DOCS: &str = "did_docs";
const CF_PEERS: &str = "peers";
const CF_TAG_COUNTS: &str = "tag_counts";
const COLUMN_FAMILIES: [&str; 9] = [
    rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
    CF_ADVERTS,
    CF_TAGS,
    CF_EXPIRY,
    CF_SEQS,
    CF_OWN_SEQ,
    CF_DID_DOCS,
    CF_PEERS,
    CF_TAG_COUNTS,
];

/// Key prefixes inside the bounded tables (`peers`, `did_docs`).
const RECORD_PREFIX: u8 = b'r';
const TIME_PREFIX: u8 = b't';

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
    /// Serializes every read-check-write of adverts, tags, expiry, seqs and own_seq.
    write: Mutex<()>,
    /// Adverts stored (expired ones included until swept).
    adverts: AtomicUsize,
    /// Entries in `peers`; the lock serializes its writes.
    peers: Mutex<usize>,
    /// Entries in `did_docs`; the lock serializes its writes.
    did_docs: Mutex<usize>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// A bounded table: `peers` or `did_docs`.
#[derive(Clone, Copy)]
struct Table {
    cf: &'static str,
    cap: usize,
}

const PEERS: Table = Table {
    cf: CF_PEERS,
    cap: MAX_PEERS,
};
const DID_DOCS: Table = Table {
    cf: CF_DID_DOCS,
    cap: MAX_DID_DOCS,
};

impl Store {
    /// Open the store at `path`, creating the directory and column families if missing.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(path).map_err(|source| StoreError::CreateDir {
            path: path.to_owned(),
            source,
        })?;
        let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let mut opts = cf_options(&cache);
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_db_write_buffer_size(TOTAL_WRITE_BUFFER_BYTES);
        opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
        opts.set_max_open_files(256);
        opts.set_max_background_jobs(2);
        opts.set_keep_log_file_num(2);
        opts.set_max_log_file_size(1 << 20);
        let cfs = COLUMN_FAMILIES
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, cf_options(&cache)));
        let db = DB::open_cf_descriptors(&opts, path, cfs).map_err(|source| StoreError::Db {
            context: format!("opening store at {}", path.display()),
            source,
        })?;
        let store = Store {
            inner: Arc::new(Inner {
                db,
                path: path.to_owned(),
                write: Mutex::new(()),
                adverts: AtomicUsize::new(0),
                peers: Mutex::new(0),
                did_docs: Mutex::new(0),
            }),
        };
        let adverts = store.count_prefix(CF_EXPIRY, &[])?;
        store.inner.adverts.store(adverts, Ordering::Relaxed);
        *lock(&store.inner.peers) = store.count_prefix(CF_PEERS, &[TIME_PREFIX])?;
        *lock(&store.inner.did_docs) = store.count_prefix(CF_DID_DOCS, &[TIME_PREFIX])?;
        Ok(store)
    }

    /// Store a validated advert, replacing the DID's previous one and its tag index entries in
    /// one atomic batch. [`PutOutcome::Stale`] (and nothing written) when `v.seq` is not greater
    /// than the highest seq ever stored for the DID.
    pub fn put(&self, v: &Validated) -> Result<PutOutcome, StoreError> {
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
        let (adverts, tags_cf, expiry, seqs) = (
            self.cf(CF_ADVERTS)?,
            self.cf(CF_TAGS)?,
            self.cf(CF_EXPIRY)?,
            self.cf(CF_SEQS)?,
        );

        let _guard = lock(&self.inner.write);
        let stored_seq = self.read_u64(CF_SEQS, v.did.as_bytes())?;
        if let Some(stored_seq) = stored_seq {
            if v.seq <= stored_seq {
                return Ok(PutOutcome::Stale { stored_seq });
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
        let mut batch = WriteBatch::default();
        let mut deltas = BTreeMap::new();
        if let Some(Some(old)) = &old {
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
        batch.put_cf(seqs, v.did.as_bytes(), v.seq.to_be_bytes());
        self.inner
            .db
            .write(batch)
            .map_err(|source| StoreError::Db {
                context: format!("storing advert of {} seq {}", v.did, v.seq),
                source,
            })?;
        Ok(match old {
            None => {
                self.inner.adverts.fetch_add(1, Ordering::Relaxed);
                PutOutcome::Inserted
            }
            Some(old) => PutOutcome::Updated {
                previous_seq: stored_seq.or(old.map(|o| o.seq)).unwrap_or_default(),
            },
        })
    }

    /// The highest seq ever stored for `did`, kept after its advert expired and was swept.
    pub fn seq(&self, did: &str) -> Result<Option<u64>, StoreError> {
        check_did(did)?;
        self.read_u64(CF_SEQS, did.as_bytes())
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
        // checked against the tag set in each index value, the expiry too, so only the adverts
        // returned are read.
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
                    let (expires_at, has_all) = parse_index_value(value, &query)?;
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
                        // An index entry left behind by a corrupt record that was overwritten.
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

    /// Delete adverts with `expires_at <= now` and their index entries, one atomic batch of up to
    /// 1024 at a time (the write lock is released between batches). Sequence numbers stay.
    /// Returns how many adverts were deleted.
    pub fn sweep_expired(&self, now: u64) -> Result<usize, StoreError> {
        let (adverts, tags_cf, expiry) =
            (self.cf(CF_ADVERTS)?, self.cf(CF_TAGS)?, self.cf(CF_EXPIRY)?);
        let db_err = |source| StoreError::Db {
            context: format!("sweeping adverts expired at {now}"),
            source,
        };
        let mut total = 0;
        loop {
            let _guard = lock(&self.inner.write);
            let mut due = Vec::new();
            {
                let mut ro = ReadOptions::default();
                if let Some(end) = now.checked_add(1) {
                    ro.set_iterate_upper_bound(end.to_be_bytes());
                }
                let mut it = self.inner.db.raw_iterator_cf_opt(expiry, ro);
                it.seek_to_first();
                while let Some(key) = it.key() {
                    if due.len() >= SWEEP_BATCH {
                        break;
                    }
                    due.push(key.to_vec());
                    it.next();
                }
                it.status().map_err(db_err)?;
            }
            let mut batch = WriteBatch::default();
            let mut deltas = BTreeMap::new();
            let mut swept = 0;
            for key in &due {
                batch.delete_cf(expiry, key);
                let Some((expires_at, did)) = decode_u64(key.get(..8).unwrap_or_default())
                    .zip(key.get(8..).and_then(|d| std::str::from_utf8(d).ok()))
                else {
                    warn!(error = %corrupt(CF_EXPIRY, key, "bad key"), "deleting bad expiry entry");
                    continue;
                };
                match self.read_record(did) {
                    Ok(Some(record)) if record.expires_at == expires_at => {
                        record.delete_index(&mut batch, tags_cf, expiry, did);
                        batch.delete_cf(adverts, did.as_bytes());
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
            if !due.is_empty() {
                self.adjust_tag_counts(&mut batch, &deltas)?;
                self.inner.db.write(batch).map_err(db_err)?;
            }
            saturating_sub(&self.inner.adverts, swept);
            total += swept;
            if due.len() < SWEEP_BATCH {
                return Ok(total);
            }
        }
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
            .max(self.read_u64(CF_SEQS, did.as_bytes())?)
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

    /// Cache a DID document fetched at `fetched_at`. At most [`MAX_DID_DOCS`] are kept: adding
    /// one more drops the least recently fetched.
    pub fn put_did_doc(&self, did: &str, json: &[u8], fetched_at: u64) -> Result<(), StoreError> {
        check_did(did)?;
        if json.len() > MAX_DID_DOC_BYTES {
            return Err(invalid(
                "DID document of",
                did,
                "larger than MAX_DID_DOC_BYTES",
            ));
        }
        self.table_put(DID_DOCS, &self.inner.did_docs, did, fetched_at, json)
    }

    /// The cached DID document, `None` if absent or fetched more than `max_age` seconds before
    /// `now`.
    pub fn did_doc(
        &self,
        did: &str,
        max_age: u64,
        now: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        check_did(did)?;
        let cf = self.cf(CF_DID_DOCS)?;
        let key = [&[RECORD_PREFIX][..], did.as_bytes()].concat();
        let Some(value) =
            self.inner
                .db
                .get_pinned_cf(cf, &key)
                .map_err(|source| StoreError::Db {
                    context: format!("reading DID document of {did}"),
                    source,
                })?
        else {
            return Ok(None);
        };
        let (fetched_at, json) =
            decode_timed(&value).map_err(|reason| corrupt(CF_DID_DOCS, &key, reason))?;
        Ok((now.saturating_sub(fetched_at) <= max_age).then(|| json.to_vec()))
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
        let tags_len: usize = self.tags.iter().map(|t| 1 + t.len()).sum();
        let mut out = Vec::with_capacity(
            1 + 24 + 1 + tags_len + 2 + self.peer_id.len() + 4 + self.bytes.len(),
        );
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

    /// `expires_at` ‖ tag count ‖ per tag: length ‖ UTF-8.
    fn index_value(&self) -> Vec<u8> {
        let tags_len: usize = self.tags.iter().map(|t| 1 + t.len()).sum();
        let mut value = Vec::with_capacity(9 + tags_len);
        value.extend_from_slice(&self.expires_at.to_be_bytes());
        value.push(self.tags.len() as u8);
        for tag in &self.tags {
            value.push(tag.len() as u8);
            value.extend_from_slice(tag.as_bytes());
        }
        value
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

/// A tag index value's `expires_at`, and whether its tag set holds every tag of `query` (at most
/// [`MAX_TAGS`], deduplicated).
fn parse_index_value(value: &[u8], query: &[&str]) -> Result<(u64, bool), &'static str> {
    let mut r = Reader(value);
    let expires_at = r.u64()?;
    let mut matched: u64 = 0;
    for _ in 0..r.u8()? {
        let len = r.u8()?;
        let tag = r.take(len.into())?;
        if let Some(i) = query.iter().position(|q| q.as_bytes() == tag) {
            matched |= 1 << i;
        }
    }
    if !r.0.is_empty() {
        return Err("trailing bytes");
    }
    Ok((expires_at, matched.count_ones() as usize == query.len()))
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

    fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("db")).expect("open");
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
    fn did_doc_cache_honours_max_age() {
        let (_dir, store) = open();
        let did = "did:web:example.com";
        assert_eq!(store.did_doc(did, 60, 1000).unwrap(), None);
        store.put_did_doc(did, b"{\"id\":1}", 1000).unwrap();
        assert_eq!(
            store.did_doc(did, 60, 1060).unwrap().as_deref(),
            Some(&b"{\"id\":1}"[..])
        );
        assert_eq!(store.did_doc(did, 60, 1061).unwrap(), None);
        store.put_did_doc(did, b"{\"id\":2}", 1100).unwrap();
        assert_eq!(
            store.did_doc(did, 60, 1130).unwrap().as_deref(),
            Some(&b"{\"id\":2}"[..])
        );
        assert_eq!(*lock(&store.inner.did_docs), 1);
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
        assert_eq!(
            parse_index_value(&value, &["alpha", "gamma"]),
            Ok((99, true))
        );
        assert_eq!(parse_index_value(&value, &["beta"]), Ok((99, true)));
        assert_eq!(parse_index_value(&value, &[]), Ok((99, true)));
        assert_eq!(
            parse_index_value(&value, &["alpha", "delta"]),
            Ok((99, false))
        );
        assert_eq!(parse_index_value(&value, &["alph"]), Ok((99, false)));
        assert!(parse_index_value(&value[..value.len() - 1], &["beta"]).is_err());
        assert!(parse_index_value(&[value.clone(), vec![0]].concat(), &["beta"]).is_err());
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

    mod model {
        use super::*;
        use proptest::prelude::*;

        const TAGS: [&str; 4] = ["a", "b", "c", "d"];

        #[derive(Debug, Clone)]
        enum Op {
            Put {
                did: u8,
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
                4 => (0u8..4, 1u64..12, 0u64..100, 1u64..80, proptest::collection::btree_set(0usize..4, 0..4))
                    .prop_map(|(did, seq, issued_at, ttl, tags)| Op::Put {
                        did,
                        seq,
                        issued_at,
                        ttl,
                        tags: tags.into_iter().collect(),
                    }),
                1 => (0u64..180).prop_map(|now| Op::Sweep { now }),
            ]
        }

        #[derive(Default)]
        struct Model {
            /// DID → (highest seq, stored advert).
            dids: BTreeMap<String, (u64, Option<Validated>)>,
        }

        impl Model {
            fn put(&mut self, v: &Validated) -> PutOutcome {
                let entry = self.dids.entry(v.did.clone()).or_insert((0, None));
                if entry.0 >= v.seq {
                    return PutOutcome::Stale {
                        stored_seq: entry.0,
                    };
                }
                let outcome = match entry.1 {
                    None => PutOutcome::Inserted,
                    Some(_) => PutOutcome::Updated {
                        previous_seq: entry.0,
                    },
                };
                *entry = (v.seq, Some(v.clone()));
                outcome
            }

            fn sweep(&mut self, now: u64) -> usize {
                let mut n = 0;
                for (_, advert) in self.dids.values_mut() {
                    if advert.as_ref().is_some_and(|a| a.expires_at <= now) {
                        *advert = None;
                        n += 1;
                    }
                }
                n
            }

            fn find(&self, query: &[String], now: u64) -> Vec<(String, u64)> {
                let mut live: Vec<&Validated> = self
                    .dids
                    .values()
                    .filter_map(|(_, a)| a.as_ref())
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
                let stored = self.dids.values().filter_map(|(_, a)| a.as_ref());
                stored.filter(|a| a.tags.iter().any(|t| t == tag)).count() as u64
            }

            fn len(&self) -> usize {
                self.dids.values().filter(|(_, a)| a.is_some()).count()
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

            #[test]
            fn find_returns_exactly_the_live_matching_adverts(
                ops in proptest::collection::vec(op(), 1..40),
                probe in 0u64..180,
            ) {
                let (_dir, store) = open();
                let mut model = Model::default();
                for op in &ops {
                    match op {
                        Op::Put { did, seq, issued_at, ttl, tags } => {
                            let tags: Vec<&str> = tags.iter().map(|&i| TAGS[i]).collect();
                            let v = advert(&format!("did:key:{did}"), *seq, *issued_at, issued_at + ttl, &tags);
                            prop_assert_eq!(store.put(&v).unwrap(), model.put(&v));
                        }
                        Op::Sweep { now } => {
                            prop_assert_eq!(store.sweep_expired(*now).unwrap(), model.sweep(*now));
                        }
                    }
                    prop_assert_eq!(store.len().unwrap(), model.len());
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
                for (did, (seq, _)) in &model.dids {
                    prop_assert_eq!(store.seq(did).unwrap(), Some(*seq));
                }
            }
        }
    }
}
