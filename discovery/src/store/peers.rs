//! Known peers: the bounded `peers` table, its records and the eviction of the least recently
//! seen (see "Known peers" in the [store documentation](super)).

use std::sync::Mutex;

use rocksdb::{ReadOptions, WriteBatch};
use tracing::warn;

use super::codec::{decode_u64, Reader, RECORD_VERSION};
use super::families::CF_PEERS;
use super::{corrupt, invalid, lock, Store, StoreError, MAX_PEER_ID_LEN};

/// Most peers kept by [`Store::put_peer`]; the least recently seen are dropped.
pub const MAX_PEERS: usize = 1000;

/// Most addresses kept per peer; further ones are ignored.
pub const MAX_PEER_ADDRS: usize = 32;

/// Longest peer address accepted, in bytes.
pub const MAX_ADDR_LEN: usize = 1024;

/// Key prefixes inside the bounded `peers` table.
const RECORD_PREFIX: u8 = b'r';
pub(super) const TIME_PREFIX: u8 = b't';

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

fn time_key(ts: u64, id: &str) -> Vec<u8> {
    [&[TIME_PREFIX][..], &ts.to_be_bytes()[..], id.as_bytes()].concat()
}
