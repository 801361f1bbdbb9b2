//! The sweep: expired adverts and their index entries, then the seqs past their replay window
//! (see "Seqs and their pruning" in the [store documentation](super)), a batch at a time.

use std::collections::BTreeMap;

use rocksdb::{ReadOptions, WriteBatch};
use tracing::{debug, warn};

use super::codec::{expiry_key, seq_footprint, split_time_key, SeqEntry};
use super::families::{CF_ADVERTS, CF_EXPIRY, CF_SEQS, CF_SEQ_EXPIRY, CF_TAGS};
use super::{corrupt, lock, saturating_sub, Store, StoreError, SWEEP_BATCH};

impl Store {
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
        let mut gone = Vec::new();
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
            gone.push(did.to_owned());
            released = released.saturating_add(seq_footprint(did));
            pruned += 1;
        }
        // Forgotten before the write: a DID that comes back is first seen again.
        self.inner.first_seen.forget(&gone);
        self.write_releasing(batch, released, || format!("pruning seqs due at {now}"))?;
        Ok((pruned, due.len() >= SWEEP_BATCH))
    }
}
