//! The node's database: one RocksDB in `<data-dir>/store`, the discovery store's ([`Store`]),
//! with a column family for each room that keeps state. This file lists them all, with the
//! module that owns each and documents its keys; it opens them, and it holds what their layouts
//! share: big-endian counters and "the largest first" rank keys.
//!
//! | column family | owner | holds |
//! |---|---|---|
//! | the store's own (`adverts`, `tags`, `expiry`, `peers`, …) | `agentnet_discovery::store` | adverts, their index, known peers |
//! | [`TASKS`], [`TASK_INDEX`] | [`crate::hosted::tasks`] | the hosted agents' A2A tasks, their indexes and counters |
//! | [`PUBLISHED`] | [`crate::network::publisher`] | what `agentnet publish` asked for, re-announced at start |
//! | [`AUDIT`], [`AUDIT_INDEX`] | [`crate::audit`] | the hash-chained log of verified receipts (appended only); its head, receipt index and counters |
//! | [`PINS`] | [`crate::trust::pins`] | the operator's card and tool pins |
//! | [`ENDORSEMENTS`] | [`crate::trust::endorsements`] | endorsements heard, per issuer and per peer |
//!
//! Each room bounds what it writes (per source, per owner and in total) with counters kept in
//! its own family, written in the same atomic batch as what they count ([`counter_op`],
//! [`read_counter`]); the sources holding the most are found through [`rank_key`]s.

use std::path::Path;

use agentnet_discovery::store::{Family, FamilyOp, Limits, Store, StoreError};

/// The store's directory inside the data directory.
pub const STORE_DIR: &str = "store";

/// The hosted agents' task records ([`crate::hosted::tasks`]).
pub const TASKS: &str = "a2a_tasks";
/// The tasks' indexes and counters ([`crate::hosted::tasks`]).
pub const TASK_INDEX: &str = "a2a_index";
/// Kept publications, keyed by DID ([`crate::network::publisher`]).
pub const PUBLISHED: &str = "published";
/// The audit log's entries, append-only ([`crate::audit`]).
pub const AUDIT: &str = "audit_log";
/// The audit log's head, receipt index and counters ([`crate::audit`]).
pub const AUDIT_INDEX: &str = "audit_index";
/// Card and tool pins ([`crate::trust::pins`]).
pub const PINS: &str = "card_pins";
/// Endorsements ([`crate::trust::endorsements`]).
pub const ENDORSEMENTS: &str = "endorsements";

/// Every column family the node keeps beside the discovery store's own.
pub const FAMILIES: [&str; 7] = [
    TASKS,
    TASK_INDEX,
    PUBLISHED,
    AUDIT,
    AUDIT_INDEX,
    PINS,
    ENDORSEMENTS,
];

/// Open (or create) the node's database in `dir` (a `<data-dir>/store`) with every family.
/// Blocking. A store another process (or another [`Store`] of this one) holds is refused with
/// [`StoreError::Locked`]: a node is running on it.
pub fn open(dir: &Path, limits: Limits) -> Result<Store, StoreError> {
    Store::open_with_families(dir, limits, &FAMILIES)
}

/// The u64 big-endian at the start of `bytes`, if there are 8 bytes.
pub fn u64_at(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// The counter at `key` in `family` (0 if absent or shorter than 8 bytes).
pub fn read_counter(family: &Family, key: &[u8]) -> Result<u64, StoreError> {
    Ok(family.get(key)?.as_deref().and_then(u64_at).unwrap_or(0))
}

/// The op that sets the counter at `key` to `n`: deleted at 0, so that a counter of nothing
/// takes no room.
pub fn counter_op(key: Vec<u8>, n: u64) -> FamilyOp {
    if n == 0 {
        FamilyOp::Delete(key)
    } else {
        FamilyOp::Put(key, n.to_be_bytes().to_vec())
    }
}

/// `prefix ‖ (u64::MAX − n) ‖ id`: a forward scan of `prefix` meets the ids holding the most
/// first, which is where a full share makes room.
pub fn rank_key(prefix: &[u8], n: u64, id: &[u8]) -> Vec<u8> {
    [prefix, &(u64::MAX - n).to_be_bytes(), id].concat()
}

/// The count in a [`rank_key`] (`None` if it is too short).
pub fn rank_of(key: &[u8], prefix_len: usize) -> Option<u64> {
    u64_at(key.get(prefix_len..)?).map(|v| u64::MAX - v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip_and_zero_is_no_entry() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir.path().join(STORE_DIR), Limits::default()).unwrap();
        let f = store.family(PINS).unwrap();
        assert_eq!(read_counter(&f, b"c").unwrap(), 0);
        f.write(vec![counter_op(b"c".to_vec(), 7)]).unwrap();
        assert_eq!(read_counter(&f, b"c").unwrap(), 7);
        f.write(vec![counter_op(b"c".to_vec(), 0)]).unwrap();
        assert_eq!(f.get(b"c").unwrap(), None);
    }

    #[test]
    fn rank_keys_sort_the_largest_first() {
        let small = rank_key(b"w", 3, b"a");
        let large = rank_key(b"w", 300, b"b");
        assert!(large < small);
        assert_eq!(rank_of(&large, 1), Some(300));
        assert_eq!(rank_of(b"w", 1), None);
    }

    #[test]
    fn every_family_opens_and_a_second_open_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STORE_DIR);
        let store = open(&path, Limits::default()).unwrap();
        for name in FAMILIES {
            store.family(name).unwrap();
        }
        assert!(matches!(
            open(&path, Limits::default()),
            Err(StoreError::Locked { .. })
        ));
    }
}
