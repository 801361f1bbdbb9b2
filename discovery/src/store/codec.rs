//! The encodings of keys and values: advert records, seqs entries, the tag index's keys and
//! values, `u64 BE ‖ DID` time keys, and the logical bytes each costs. The [store
//! documentation](super) is their specification.

use rocksdb::{ColumnFamily, WriteBatch};
use sha2::{Digest, Sha256};

use super::StoredAdvert;
use crate::advert::Validated;

/// Bytes charged per RocksDB entry on top of its key and value: the internal key trailer
/// (8 bytes), length varints, and the entry's share of index and filter blocks. An estimate
/// that errs high, so that the logical total is not below what the files hold.
pub const ENTRY_OVERHEAD: u64 = 32;

/// The format version of advert records and of peer records.
pub(super) const RECORD_VERSION: u8 = 1;

/// Bytes of the tag-set filter in each index value (128 bits).
pub(super) const TAG_FILTER_BYTES: usize = 16;

/// An index value: `expires_at` and the tag-set filter.
pub(super) const INDEX_VALUE_LEN: usize = 8 + TAG_FILTER_BYTES;

/// A seqs entry: the highest seq stored for a DID, and when it may be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SeqEntry {
    pub(super) seq: u64,
    /// Unix seconds from which no advert of the DID with seq <= `seq` can be valid; 0 when
    /// unknown (an 8-byte entry of layout 1, which a migration rewrites).
    pub(super) prune_at: u64,
    /// Unix seconds, by this node's clock, when the node first stored an advert of the DID
    /// (kept while the seq is: across republications and restarts); 0 when the entry was
    /// written before the node recorded it (a 16-byte entry), which ranks as the oldest.
    pub(super) first_seen: u64,
}

impl SeqEntry {
    pub(super) fn encode(&self) -> [u8; 24] {
        let mut out = [0; 24];
        out[..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..16].copy_from_slice(&self.prune_at.to_be_bytes());
        out[16..].copy_from_slice(&self.first_seen.to_be_bytes());
        out
    }

    pub(super) fn decode(value: &[u8]) -> Option<SeqEntry> {
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

/// An advert record as stored in `adverts` (the DID is the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) seq: u64,
    pub(super) issued_at: u64,
    pub(super) expires_at: u64,
    pub(super) tags: Vec<String>,
    pub(super) peer_id: String,
    pub(super) bytes: Vec<u8>,
}

impl Record {
    /// The record of a validated advert: its tags sorted, without repeats.
    pub(super) fn of(v: &Validated) -> Self {
        let mut tags = v.tags.clone();
        tags.sort_unstable();
        tags.dedup();
        Record {
            seq: v.seq,
            issued_at: v.issued_at,
            expires_at: v.expires_at,
            tags,
            peer_id: v.peer_id.clone(),
            bytes: v.bytes.clone(),
        }
    }

    /// Callers have checked the bounds: at most 32 tags of 64 bytes, a peer id of 128 bytes,
    /// 256 KiB of advert, so the length prefixes cannot overflow.
    pub(super) fn encode(&self) -> Vec<u8> {
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

    pub(super) fn decode(data: &[u8]) -> Result<Self, &'static str> {
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

    pub(super) fn put_index(
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
    pub(super) fn index_value(&self) -> [u8; INDEX_VALUE_LEN] {
        let mut value = [0; INDEX_VALUE_LEN];
        value[..8].copy_from_slice(&self.expires_at.to_be_bytes());
        value[8..].copy_from_slice(&tag_filter(self.tags.iter().map(String::as_str)));
        value
    }

    /// The logical bytes of this advert (read back) under `did`.
    pub(super) fn stored_footprint(&self, did: &str) -> u64 {
        self.footprint(did, self.encoded_len())
    }

    /// The logical bytes of this advert under `did` with an encoded record of `record_len`:
    /// the record, one index entry per tag and one in the list of all, the expiry entry, each
    /// with [`ENTRY_OVERHEAD`].
    pub(super) fn footprint(&self, did: &str, record_len: usize) -> u64 {
        let did = did.len() as u64;
        let index_entry = |tag_len: usize| tag_len as u64 + 1 + 8 + did + INDEX_VALUE_LEN as u64;
        let index: u64 = std::iter::once(0)
            .chain(self.tags.iter().map(String::len))
            .map(|len| index_entry(len) + ENTRY_OVERHEAD)
            .sum();
        (did + record_len as u64 + ENTRY_OVERHEAD) + index + (8 + did + ENTRY_OVERHEAD)
    }

    pub(super) fn encoded_len(&self) -> usize {
        let tags_len: usize = self.tags.iter().map(|t| 1 + t.len()).sum();
        1 + 24 + 1 + tags_len + 2 + self.peer_id.len() + 4 + self.bytes.len()
    }

    pub(super) fn delete_index(
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

    pub(super) fn into_stored(self, did: String) -> StoredAdvert {
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
pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("truncated");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub(super) fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    pub(super) fn u32(&mut self) -> Result<u32, &'static str> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(super) fn u64(&mut self) -> Result<u64, &'static str> {
        decode_u64(self.take(8)?).ok_or("truncated")
    }
    pub(super) fn str(&mut self, n: usize) -> Result<String, &'static str> {
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| "not UTF-8")
    }
}

pub(super) fn decode_u64(b: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(b).ok().map(u64::from_be_bytes)
}

/// `tag ‖ 0x00`; the empty tag is the list of all adverts.
pub(super) fn tag_prefix(tag: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(tag.len() + 1);
    key.extend_from_slice(tag.as_bytes());
    key.push(0);
    key
}

pub(super) fn tag_key(tag: &str, issued_at: u64, did: &str) -> Vec<u8> {
    let mut key = tag_prefix(tag);
    key.extend_from_slice(&(!issued_at).to_be_bytes());
    key.extend_from_slice(did.as_bytes());
    key
}

/// The tag-set filter of `tags`: 128 bits, two set per tag, at positions taken from the tag's
/// SHA-256 (stable across versions and machines, as it is stored). With 8 tags about 12 % of
/// the bits are set, so a tag the advert lacks passes with probability ~1.5 %; with 32 tags,
/// ~16 %. A pass is confirmed against the record.
pub(super) fn tag_filter<'a>(tags: impl IntoIterator<Item = &'a str>) -> [u8; TAG_FILTER_BYTES] {
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
pub(super) fn parse_index_value(
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
pub(super) fn seq_footprint(did: &str) -> u64 {
    // A seq entry of 24 bytes (an entry of 16 written before `first_seen`, released as 24:
    // the total then reads at most 8 bytes per such entry low, once).
    let did = did.len() as u64;
    (did + 24 + ENTRY_OVERHEAD) + (8 + did + ENTRY_OVERHEAD)
}

/// A `u64 BE ‖ DID` key of `expiry` or `seq_expiry`.
pub(super) fn split_time_key(key: &[u8]) -> Option<(u64, &str)> {
    let time = decode_u64(key.get(..8)?)?;
    let did = std::str::from_utf8(key.get(8..)?).ok()?;
    Some((time, did))
}

pub(super) fn expiry_key(expires_at: u64, did: &str) -> Vec<u8> {
    [&expires_at.to_be_bytes()[..], did.as_bytes()].concat()
}

/// The smallest key greater than every key starting with `prefix` (whose last byte is below
/// 0xff, true of every prefix used here).
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last = last.saturating_add(1);
    }
    end
}
