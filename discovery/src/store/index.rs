//! Queries of the tag index: [`Store::find`], [`Store::matches`], [`Store::match_of`], the walk
//! of the rarest queried tag's list they share, and the tag counts that choose it (see "Column
//! families" in the [store documentation](super)).

use std::collections::BTreeMap;

use rocksdb::{ReadOptions, WriteBatch, DB};
use tracing::warn;

use super::codec::{
    decode_u64, parse_index_value, prefix_end, tag_filter, tag_prefix, Record, SeqEntry,
};
use super::families::{CF_ADVERTS, CF_SEQS, CF_TAGS, CF_TAG_COUNTS};
use super::{check_did, check_tag, corrupt, invalid, Store, StoreError, StoredAdvert};
use crate::tags::MAX_TAGS;

/// Most adverts one [`Store::find`] returns, whatever `limit` asks.
pub const MAX_FIND_LIMIT: usize = 1000;

/// Most index entries one [`Store::matches`] returns, whatever `cap` asks: the most a node
/// ranks for one query (about 4 MiB of DIDs and times; past it the newest are ranked).
pub const MAX_MATCHES: usize = 50_000;

/// Most DIDs whose first sighting [`FirstSeen`] remembers; past them it starts again.
pub(super) const MAX_FIRST_SEEN: usize = 65_536;

/// When each DID was first seen ([`SeqEntry::first_seen`]), remembered for the ranking of
/// [`Store::matches`], which otherwise reads every match's seq (a discovery ranks every match;
/// the reads were a third of a `discover_agents`' CPU). A DID's first sighting does not change
/// while its seq is kept; the prune that deletes a seq forgets the DID first, and a sighting
/// read across a prune is not kept ([`FirstSeen::epoch`]). Keyed by a keyed hash of the DID (a
/// publisher cannot make two of its DIDs collide): 16 bytes an entry, at most
/// [`MAX_FIRST_SEEN`].
#[derive(Default)]
pub(super) struct FirstSeen {
    hasher: std::collections::hash_map::RandomState,
    map: std::sync::Mutex<std::collections::HashMap<u64, u64>>,
    epoch: std::sync::atomic::AtomicU64,
}

impl FirstSeen {
    fn key(&self, did: &str) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(did)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, u64>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current epoch, to pass to [`FirstSeen::learn`].
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Set the first sighting of every match it knows; the indices of those it does not.
    fn fill(&self, found: &mut [Match]) -> Vec<usize> {
        let map = self.lock();
        found
            .iter_mut()
            .enumerate()
            .filter_map(|(i, m)| match map.get(&self.key(&m.did)) {
                Some(&t) => {
                    m.first_seen = t;
                    None
                }
                None => Some(i),
            })
            .collect()
    }

    /// Remember sightings read from the seqs, unless a prune ran since `epoch`.
    fn learn(&self, epoch: u64, seen: &[(&str, u64)]) {
        if seen.is_empty() {
            return;
        }
        let mut map = self.lock();
        if self.epoch() != epoch {
            return;
        }
        if map.len() + seen.len() > MAX_FIRST_SEEN {
            map.clear();
        }
        for (did, t) in seen.iter().take(MAX_FIRST_SEEN) {
            map.insert(self.key(did), *t);
        }
    }

    /// Forget `dids`, whose seqs are being deleted.
    pub(super) fn forget(&self, dids: &[String]) {
        if dids.is_empty() {
            return;
        }
        let mut map = self.lock();
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        for did in dids {
            map.remove(&self.key(did));
        }
    }
}

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

impl Store {
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
        // When each was first seen: remembered, or from the seqs in one batched read.
        let memo = &self.inner.first_seen;
        let epoch = memo.epoch();
        let unknown = memo.fill(&mut found);
        let seen = snapshot.multi_get_cf(unknown.iter().map(|&i| (seqs, found[i].did.as_bytes())));
        let mut learned = Vec::with_capacity(unknown.len());
        for (&i, value) in unknown.iter().zip(seen) {
            let m = &mut found[i];
            match value {
                Ok(Some(v)) => match SeqEntry::decode(&v) {
                    Some(e) => {
                        m.first_seen = e.first_seen;
                        learned.push(i);
                    }
                    None => {
                        warn!(error = %corrupt(CF_SEQS, m.did.as_bytes(), "bad seq"), "ranking as oldest")
                    }
                },
                Ok(None) => {}
                Err(source) => return Err(db_err(source)),
            }
        }
        let learned: Vec<(&str, u64)> = learned
            .into_iter()
            .map(|i| (found[i].did.as_str(), found[i].first_seen))
            .collect();
        memo.learn(epoch, &learned);
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
    pub(super) fn tag_count(&self, tag: &str) -> u64 {
        match self.read_u64(CF_TAG_COUNTS, tag.as_bytes()) {
            Ok(count) => count.unwrap_or(0),
            Err(error) => {
                warn!(%error, "unreadable tag count");
                u64::MAX
            }
        }
    }

    /// Add the per-tag `deltas` to the tag counts, in `batch`. Caller holds the write lock.
    pub(super) fn adjust_tag_counts(
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
}

/// A tag query sorted and without repeats.
fn sorted_query(tags: &[String]) -> Vec<&str> {
    let mut query: Vec<&str> = tags.iter().map(String::as_str).collect();
    query.sort_unstable();
    query.dedup();
    query
}
