//! The column families and how the database is opened: their names, RocksDB's options and the
//! memory it may use ([`Memory`]), the directory's lock, and the column families that callers
//! own ([`Family`]).

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, Env, LogLevel, Options,
    ReadOptions, WriteBatch, WriteBufferManager, DB,
};
use tracing::{info, warn};

use super::limits::{DiskProbe, Limits};
use super::peers::TIME_PREFIX;
use super::usage::USAGE_TOTAL_KEY;
use super::{invalid, lock, Inner, Store, StoreError};

/// The column families of the layout (see "Column families" in the [store
/// documentation](super)).
pub(super) const CF_ADVERTS: &str = "adverts";
pub(super) const CF_TAGS: &str = "tags";
pub(super) const CF_EXPIRY: &str = "expiry";
pub(super) const CF_SEQS: &str = "seqs";
pub(super) const CF_SEQ_EXPIRY: &str = "seq_expiry";
pub(super) const CF_OWN_SEQ: &str = "own_seq";
pub(super) const CF_PEERS: &str = "peers";
pub(super) const CF_TAG_COUNTS: &str = "tag_counts";
pub(super) const CF_USAGE: &str = "usage";
pub(super) const COLUMN_FAMILIES: [&str; 10] = [
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

/// RocksDB's memory for one store of its own ([`Memory::default`]): block cache, one
/// memtable, all memtables.
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

impl Store {
    pub(super) fn open_in(
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
                first_seen: Default::default(),
            }),
        };
        store.bring_to_layout(existing.is_none())?;
        let adverts = store.count_prefix(CF_EXPIRY, &[])?;
        store.inner.adverts.store(adverts, Ordering::Relaxed);
        let bytes = store.read_u64(CF_USAGE, USAGE_TOTAL_KEY)?.unwrap_or(0);
        store.inner.bytes.store(bytes, Ordering::Relaxed);
        *lock(&store.inner.peers) = store.count_prefix(CF_PEERS, &[TIME_PREFIX])?;
        Ok(store)
    }

    /// A column family opened by [`open_with_families`](Self::open_with_families).
    pub fn family(&self, name: &'static str) -> Result<Family, StoreError> {
        self.cf(name)?;
        Ok(Family {
            store: self.clone(),
            name,
        })
    }
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
