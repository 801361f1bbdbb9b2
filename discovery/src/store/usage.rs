//! The usage accounting: the logical bytes charged in total and per publishing peer, kept in
//! `usage` in the same batch as each change (see "Bounds on what others can make us store" in
//! the [store documentation](super)).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use rocksdb::{ColumnFamily, WriteBatch};
use tracing::warn;

use super::codec::decode_u64;
use super::families::CF_USAGE;
use super::limits::{Refusals, Usage};
use super::{corrupt, Store, StoreError};

/// Keys in `usage`: the total, and per publishing peer.
pub(super) const USAGE_TOTAL_KEY: &[u8] = b"t";
pub(super) const USAGE_PEER_PREFIX: u8 = b'p';

impl Store {
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

    /// (bytes, adverts) charged to `peer_id`; a corrupt entry reads as zero (with a warning).
    pub(super) fn read_peer_usage(&self, peer_id: &str) -> Result<(u64, u64), StoreError> {
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
    pub(super) fn write_releasing(
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
    pub(super) fn put_usage(
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
    pub(super) fn adjust_peer_usage(
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
}

fn peer_usage_key(peer_id: &str) -> Vec<u8> {
    [&[USAGE_PEER_PREFIX][..], peer_id.as_bytes()].concat()
}

/// A peer's usage value: bytes (u64 BE) ‖ adverts (u64 BE).
pub(super) fn decode_usage(value: &[u8]) -> Option<(u64, u64)> {
    Some((decode_u64(value.get(..8)?)?, decode_u64(value.get(8..)?)?))
}

/// Put a peer's usage in `batch`, deleting the entry when it has no advert left.
pub(super) fn put_peer_usage(
    batch: &mut WriteBatch,
    cf: &ColumnFamily,
    peer_id: &str,
    usage: (u64, u64),
) {
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

/// `value + delta`, saturating at 0 and `u64::MAX`.
pub(super) fn add_signed(value: u64, delta: i64) -> u64 {
    value.saturating_add_signed(delta)
}
