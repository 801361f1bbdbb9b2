//! Earlier layouts: the layout version under `schema`, and the migration of a layout-1 store
//! (see "Earlier layouts" in the [store documentation](super)).

use std::collections::BTreeMap;
use std::time::Instant;

use rocksdb::{WriteBatch, WriteOptions};
use tracing::{info, warn};

use super::codec::{decode_u64, expiry_key, seq_footprint, Record, SeqEntry};
use super::families::{CF_ADVERTS, CF_EXPIRY, CF_SEQS, CF_SEQ_EXPIRY, CF_TAGS, CF_USAGE};
use super::usage::{put_peer_usage, USAGE_TOTAL_KEY};
use super::{corrupt, lock, unix_now, Store, StoreError, SWEEP_BATCH};

/// Layout version, under [`SCHEMA_KEY`] in the default column family. Version 1 (no key) had
/// whole tag sets in index values, seqs without prune times, a `did_docs` column family and no
/// usage accounting; [`Store::open`] migrates it.
pub(super) const SCHEMA_VERSION: u64 = 2;
pub(super) const SCHEMA_KEY: &[u8] = b"schema";

impl Store {
    /// Bring a store just opened to the current layout: write the version in a database
    /// created just now (`fresh`), migrate one of layout 1, refuse one of a newer layout.
    pub(super) fn bring_to_layout(&self, fresh: bool) -> Result<(), StoreError> {
        match self.schema()? {
            Some(SCHEMA_VERSION) => {}
            Some(found) if found > SCHEMA_VERSION => return Err(StoreError::NewerSchema { found }),
            // A database created just now, or one of layout 1.
            _ if fresh => self.write_schema()?,
            _ => self.migrate_v1()?,
        }
        Ok(())
    }

    pub(super) fn schema(&self) -> Result<Option<u64>, StoreError> {
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
}
