//! Tests of the store: real RocksDB files in temporary directories.

use super::*;
use rocksdb::Options;

use super::codec::{parse_index_value, tag_filter, tag_key, INDEX_VALUE_LEN};
use super::families::{CF_USAGE, COLUMN_FAMILIES};
use super::migration::SCHEMA_KEY;
use super::usage::{decode_usage, USAGE_PEER_PREFIX, USAGE_TOTAL_KEY};

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

/// Default limits but no disk watermark: a test must not depend on the machine's disk.
fn test_limits() -> Limits {
    Limits {
        min_free_bytes: 0,
        ..Limits::default()
    }
}

fn open() -> (tempfile::TempDir, Store) {
    open_with(test_limits())
}

fn open_with(limits: Limits) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open_with(&dir.path().join("db"), limits).expect("open");
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
    let parse = |query: &[&str]| parse_index_value(&value, &tag_filter(query.iter().copied()));
    assert_eq!(parse(&["alpha", "gamma"]), Ok((99, true)));
    assert_eq!(parse(&["beta"]), Ok((99, true)));
    assert_eq!(parse(&[]), Ok((99, true)));
    assert_eq!(parse(&["alpha", "delta"]), Ok((99, false)));
    assert_eq!(parse(&["alph"]), Ok((99, false)));
    let mask = tag_filter(["beta"]);
    assert!(parse_index_value(&value[..value.len() - 1], &mask).is_err());
    assert!(parse_index_value(&[&value[..], &[0]].concat(), &mask).is_err());
    // Small whatever the tag set: 24 bytes, not a copy of up to 32 tags of 64 bytes.
    assert_eq!(value.len(), INDEX_VALUE_LEN);
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

/// The logical bytes recounted from what is on disk: every advert record with its index
/// entries, every seq; and per peer. What the usage must equal.
fn recount(store: &Store) -> (u64, BTreeMap<String, (u64, u64)>) {
    let mut total = 0;
    let mut peers: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let db = &store.inner.db;
    let mut it = db.raw_iterator_cf(store.cf(CF_ADVERTS).unwrap());
    it.seek_to_first();
    while let Some((key, value)) = it.item() {
        let did = std::str::from_utf8(key).unwrap();
        let record = Record::decode(value).unwrap();
        let bytes = record.stored_footprint(did);
        total += bytes;
        let peer = peers.entry(record.peer_id.clone()).or_default();
        *peer = (peer.0 + bytes, peer.1 + 1);
        it.next();
    }
    let mut it = db.raw_iterator_cf(store.cf(CF_SEQS).unwrap());
    it.seek_to_first();
    while let Some(key) = it.key() {
        total += seq_footprint(std::str::from_utf8(key).unwrap());
        it.next();
    }
    (total, peers)
}

/// The usage counters agree with a recount, in memory and on disk.
fn assert_usage_consistent(store: &Store) {
    let (total, peers) = recount(store);
    assert_eq!(store.usage().bytes, total, "usage total");
    assert_eq!(
        store
            .read_u64(CF_USAGE, USAGE_TOTAL_KEY)
            .unwrap()
            .unwrap_or(0),
        total
    );
    let mut stored = BTreeMap::new();
    let db = &store.inner.db;
    let mut it = db.raw_iterator_cf(store.cf(CF_USAGE).unwrap());
    it.seek([USAGE_PEER_PREFIX]);
    while let Some((key, value)) = it.item().filter(|(k, _)| k[0] == USAGE_PEER_PREFIX) {
        let peer = std::str::from_utf8(&key[1..]).unwrap().to_owned();
        stored.insert(peer, decode_usage(value).unwrap());
        it.next();
    }
    assert_eq!(stored, peers, "per-peer usage");
}

fn from_peer(mut v: Validated, peer: &str) -> Validated {
    v.peer_id = peer.into();
    v
}

fn big(did: &str, seq: u64, issued_at: u64, expires_at: u64, size: usize) -> Validated {
    let mut v = advert(did, seq, issued_at, expires_at, &["t"]);
    v.bytes = vec![b'x'; size];
    v
}

fn refusal(r: Result<PutOutcome, StoreError>) -> Option<Refusal> {
    match r {
        Err(StoreError::Refused { reason, .. }) => Some(reason),
        _ => None,
    }
}

#[test]
fn admission_policy_decides_from_sizes_alone() {
    let limits = Limits {
        max_total_bytes: 1000,
        max_peer_bytes: 400,
        max_did_bytes: 300,
        min_free_bytes: 50,
        replay_window: 10,
    };
    let base = Admission {
        own: false,
        did_bytes: 200,
        growth: 200,
        total: 500,
        peer_growth: 200,
        peer_bytes: 100,
        free_disk: Some(1000),
    };
    assert_eq!(limits.admit(&base), Ok(()));
    let refused = |a: Admission| limits.admit(&a).err();
    assert_eq!(
        refused(Admission { total: 801, ..base }),
        Some(Refusal::StoreFull)
    );
    assert_eq!(refused(Admission { total: 800, ..base }), None);
    assert_eq!(
        refused(Admission {
            peer_bytes: 201,
            ..base
        }),
        Some(Refusal::PeerQuota)
    );
    assert_eq!(
        refused(Admission {
            did_bytes: 301,
            ..base
        }),
        Some(Refusal::DidQuota)
    );
    assert_eq!(
        refused(Admission {
            free_disk: Some(49),
            ..base
        }),
        Some(Refusal::DiskLow)
    );
    // Unknown free space: only the byte caps hold.
    assert_eq!(
        refused(Admission {
            free_disk: None,
            ..base
        }),
        None
    );
    // A full store and a full peer still take updates that do not grow them.
    let shrink = Admission {
        growth: -10,
        peer_growth: 0,
        total: 5000,
        peer_bytes: 5000,
        ..base
    };
    assert_eq!(refused(shrink), None);
    // Own adverts pass everything.
    let own = Admission {
        own: true,
        did_bytes: 10_000,
        total: 10_000,
        peer_bytes: 10_000,
        free_disk: Some(0),
        ..base
    };
    assert_eq!(refused(own), None);
}

#[test]
fn the_byte_cap_refuses_new_dids_counts_them_and_keeps_own_publishing() {
    // The attacker: adverts of 10 KiB from fresh DIDs, spread over many peer ids so that
    // no per-peer quota stops them, until the cap does.
    let limits = Limits {
        max_total_bytes: 200 << 10,
        ..test_limits()
    };
    let (_dir, store) = open_with(limits.clone());
    let mut accepted = 0;
    let mut refused = 0;
    for i in 0..40 {
        let v = from_peer(
            big(&format!("did:key:flood{i:03}"), 1, 10, 100, 10 << 10),
            &format!("peer{i}"),
        );
        match store.put(&v) {
            Ok(PutOutcome::Inserted) => accepted += 1,
            Err(StoreError::Refused {
                reason: Refusal::StoreFull,
                did,
            }) => {
                assert_eq!(did, v.did);
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
        assert!(store.usage().bytes <= limits.max_total_bytes);
    }
    assert!(
        accepted >= 15 && refused >= 15,
        "{accepted} accepted, {refused} refused"
    );
    assert_eq!(store.usage().refused.store_full, refused);
    assert_eq!(store.len().unwrap(), accepted as usize);
    // Nothing of a refused advert was written, not even its seq.
    assert_eq!(store.seq("did:key:flood039").unwrap(), None);
    assert_usage_consistent(&store);

    // An update of a stored DID that does not grow passes the full store; one that grows
    // does not.
    let same = from_peer(big("did:key:flood000", 2, 11, 100, 10 << 10), "peer0");
    assert_eq!(
        store.put(&same).unwrap(),
        PutOutcome::Updated { previous_seq: 1 }
    );
    let grown = from_peer(big("did:key:flood000", 3, 12, 100, 40 << 10), "peer0");
    assert_eq!(refusal(store.put(&grown)), Some(Refusal::StoreFull));
    assert_eq!(store.seq("did:key:flood000").unwrap(), Some(2));

    // Our own adverts still go in, past the cap, and are counted.
    let own = big("did:key:me", 1, 10, 1000, 30 << 10);
    assert_eq!(store.put_own(&own).unwrap(), PutOutcome::Inserted);
    assert!(store.usage().bytes > limits.max_total_bytes);
    assert_usage_consistent(&store);

    // The flood expires; after the sweep there is room again.
    assert_eq!(store.sweep_expired(100).unwrap(), accepted as usize);
    let late = from_peer(big("did:key:late", 1, 150, 500, 10 << 10), "peer0");
    assert_eq!(store.put(&late).unwrap(), PutOutcome::Inserted);
    assert_usage_consistent(&store);
}

#[test]
fn the_peer_quota_stops_one_publisher_and_not_the_others() {
    let limits = Limits {
        max_peer_bytes: 100 << 10,
        ..test_limits()
    };
    let (_dir, store) = open_with(limits.clone());
    let mut refused = 0;
    for i in 0..30 {
        let v = from_peer(
            big(&format!("did:key:heavy{i:02}"), 1, 10, 100, 10 << 10),
            "heavy",
        );
        match refusal(store.put(&v)) {
            None => {}
            Some(Refusal::PeerQuota) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(refused >= 15, "{refused}");
    assert!(store.peer_usage("heavy").unwrap().0 <= limits.max_peer_bytes);
    assert_eq!(store.usage().refused.peer_quota, refused);
    // Another publisher is not affected.
    let other = from_peer(big("did:key:light", 1, 10, 100, 10 << 10), "light");
    assert_eq!(store.put(&other).unwrap(), PutOutcome::Inserted);
    // A DID moving from the heavy peer to another one frees the heavy peer's share.
    let before = store.peer_usage("heavy").unwrap();
    let moved = from_peer(big("did:key:heavy00", 2, 11, 100, 10 << 10), "light");
    assert_eq!(
        store.put(&moved).unwrap(),
        PutOutcome::Updated { previous_seq: 1 }
    );
    let after = store.peer_usage("heavy").unwrap();
    assert!(
        after.0 < before.0 && after.1 == before.1 - 1,
        "{before:?} -> {after:?}"
    );
    assert_eq!(store.peer_usage("light").unwrap().1, 2);
    assert_usage_consistent(&store);
    store.sweep_expired(100).unwrap();
    assert_eq!(store.peer_usage("heavy").unwrap(), (0, 0));
    assert_usage_consistent(&store);
}

#[test]
fn the_did_quota_refuses_an_oversized_advert() {
    let (_dir, store) = open_with(Limits {
        max_did_bytes: 4096,
        ..test_limits()
    });
    let v = big("did:key:fat", 1, 10, 100, 5000);
    assert_eq!(refusal(store.put(&v)), Some(Refusal::DidQuota));
    assert_eq!(store.usage().refused.did_quota, 1);
    assert_eq!(
        store.put(&big("did:key:thin", 1, 10, 100, 1000)).unwrap(),
        PutOutcome::Inserted
    );
    assert_eq!(store.put_own(&v).unwrap(), PutOutcome::Inserted);
}

#[test]
fn the_disk_watermark_refuses_others_but_not_own_adverts() {
    // More free space asked than any disk has: the watermark is always crossed.
    let (_dir, store) = open_with(Limits {
        min_free_bytes: u64::MAX,
        ..test_limits()
    });
    let v = advert("did:key:other", 1, 10, 100, &["t"]);
    assert_eq!(refusal(store.put(&v)), Some(Refusal::DiskLow));
    assert_eq!(store.usage().refused.disk_low, 1);
    assert_eq!(store.seq("did:key:other").unwrap(), None);
    let own = advert("did:key:me", 1, 10, 100, &["t"]);
    assert_eq!(store.put_own(&own).unwrap(), PutOutcome::Inserted);
    assert_eq!(
        dids(&store.find(&tags(&["t"]), 10, 50).unwrap()),
        ["did:key:me"]
    );
}

#[test]
fn the_disk_probe_reads_at_most_once_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe");
    std::fs::create_dir(&path).unwrap();
    let probe = DiskProbe {
        path: path.clone(),
        last: Mutex::new(None),
    };
    let t0 = Instant::now();
    assert!(probe.free_bytes(t0).is_some());
    // The directory is gone: a fresh reading would fail; within the second the cached
    // reading is returned.
    std::fs::remove_dir(&path).unwrap();
    assert!(probe.free_bytes(t0 + Duration::from_millis(999)).is_some());
    assert_eq!(probe.free_bytes(t0 + DISK_PROBE_TTL), None);
}

#[test]
fn seqs_are_pruned_once_no_advert_could_be_replayed() {
    let (_dir, store) = open_with(Limits {
        replay_window: 1000,
        ..test_limits()
    });
    let did = "did:key:p";
    store.put(&advert(did, 5, 100, 600, &["t"])).unwrap();
    assert!(store.usage().bytes > 0);
    // The advert expires and is swept; its seq stays while a replay could still be valid.
    assert_eq!(store.sweep_expired(600).unwrap(), 1);
    assert_eq!(store.sweep_expired(1099).unwrap(), 0);
    assert_eq!(store.seq(did).unwrap(), Some(5));
    assert_eq!(
        store.put(&advert(did, 4, 90, 1090, &["t"])).unwrap(),
        PutOutcome::Stale { stored_seq: 5 }
    );
    assert_eq!(store.usage().bytes, seq_footprint(did));
    assert_usage_consistent(&store);
    // At issued_at + window no advert with that seq or lower is valid: the seq goes.
    store.sweep_expired(1100).unwrap();
    assert_eq!(store.seq(did).unwrap(), None);
    assert_eq!(store.usage().bytes, 0);
    assert_eq!(index_entries(&store, did), 0);
    assert_usage_consistent(&store);
    // A later advert of the DID starts afresh.
    assert_eq!(
        store.put(&advert(did, 1, 1200, 1300, &["t"])).unwrap(),
        PutOutcome::Inserted
    );

    // An advert still stored when its seq falls due (outside validation's bounds, e.g. a
    // lowered window) keeps its seq, rescheduled.
    store
        .put_own(&advert("did:key:long", 1, 0, 5000, &[]))
        .unwrap();
    store.sweep_expired(1001).unwrap();
    assert_eq!(store.seq("did:key:long").unwrap(), Some(1));
    store.sweep_expired(5000).unwrap();
    assert_eq!(store.seq("did:key:long").unwrap(), Some(1));
    store.sweep_expired(6000).unwrap();
    assert_eq!(store.seq("did:key:long").unwrap(), None);
    assert_usage_consistent(&store);
}

#[test]
fn usage_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let usage;
    {
        let store = Store::open_with(&path, test_limits()).unwrap();
        store
            .put(&from_peer(advert("did:key:a", 1, 10, 100, &["t"]), "p1"))
            .unwrap();
        store
            .put(&from_peer(advert("did:key:b", 1, 10, 200, &["t"]), "p2"))
            .unwrap();
        store.sweep_expired(100).unwrap();
        usage = store.usage();
    }
    let store = Store::open_with(&path, test_limits()).unwrap();
    assert_eq!(
        store.usage(),
        Usage {
            refused: Refusals::default(),
            ..usage
        }
    );
    assert_eq!(store.peer_usage("p1").unwrap(), (0, 0));
    assert_eq!(store.peer_usage("p2").unwrap().1, 1);
    assert_usage_consistent(&store);
}

/// The index value of layout 1: `expires_at` ‖ tag count ‖ per tag: length ‖ UTF-8.
fn v1_index_value(record: &Record) -> Vec<u8> {
    let mut value = record.expires_at.to_be_bytes().to_vec();
    value.push(record.tags.len() as u8);
    for tag in &record.tags {
        value.push(tag.len() as u8);
        value.extend_from_slice(tag.as_bytes());
    }
    value
}

#[test]
fn a_store_of_layout_1_opens_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    // Layout 1, written by hand: its column families (with did_docs), whole tag sets in
    // index values, 8-byte seqs, no usage, no version.
    {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let cfs = [
            "default",
            "adverts",
            "tags",
            "expiry",
            "seqs",
            "own_seq",
            "did_docs",
            "peers",
            "tag_counts",
        ];
        let db = DB::open_cf(&opts, &path, cfs).unwrap();
        let cf = |name| db.cf_handle(name).unwrap();
        let now = unix_now();
        for (did, tags, peer) in [
            ("did:key:a", vec!["x".to_string(), "y".into()], "p1"),
            ("did:key:b", vec!["y".to_string()], "p2"),
        ] {
            let record = Record {
                seq: 3,
                issued_at: now - 10,
                expires_at: now + 1000,
                tags: tags.clone(),
                peer_id: peer.into(),
                bytes: b"{}".to_vec(),
            };
            db.put_cf(cf("adverts"), did, record.encode()).unwrap();
            let value = v1_index_value(&record);
            db.put_cf(cf("tags"), tag_key("", record.issued_at, did), &value)
                .unwrap();
            for tag in &tags {
                db.put_cf(cf("tags"), tag_key(tag, record.issued_at, did), &value)
                    .unwrap();
                let count = db
                    .get_cf(cf("tag_counts"), tag)
                    .unwrap()
                    .map_or(0, |v| decode_u64(&v).unwrap());
                db.put_cf(cf("tag_counts"), tag, (count + 1).to_be_bytes())
                    .unwrap();
            }
            db.put_cf(cf("expiry"), expiry_key(record.expires_at, did), b"")
                .unwrap();
            db.put_cf(cf("seqs"), did, 3u64.to_be_bytes()).unwrap();
        }
        db.put_cf(cf("seqs"), "did:key:gone", 7u64.to_be_bytes())
            .unwrap();
        db.put_cf(cf("did_docs"), "rdid:web:x", b"\x01").unwrap();
    }
    let store = Store::open_with(&path, test_limits()).unwrap();
    assert_eq!(
        dids(&store.find(&tags(&["x", "y"]), 10, unix_now()).unwrap()),
        ["did:key:a"]
    );
    assert_eq!(store.find(&tags(&["y"]), 10, unix_now()).unwrap().len(), 2);
    assert_eq!(store.seq("did:key:gone").unwrap(), Some(7));
    assert_eq!(store.len().unwrap(), 2);
    assert_usage_consistent(&store);
    assert_eq!(store.peer_usage("p1").unwrap().1, 1);
    assert_eq!(store.schema().unwrap(), Some(SCHEMA_VERSION));
    drop(store);
    let cfs = DB::list_cf(&Options::default(), &path).unwrap();
    assert!(!cfs.iter().any(|cf| cf == "did_docs"), "{cfs:?}");
    // Opened again: nothing to migrate, same answers; seqs are pruned in time.
    let store = Store::open_with(&path, test_limits()).unwrap();
    assert_usage_consistent(&store);
    store
        .sweep_expired(unix_now() + 1000 + store.limits().replay_window)
        .unwrap();
    assert_eq!(store.seq("did:key:gone").unwrap(), None);
    assert_eq!(store.usage().bytes, 0);
}

#[test]
fn a_store_of_a_newer_layout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let store = Store::open(&path).unwrap();
        store.inner.db.put(SCHEMA_KEY, 3u64.to_be_bytes()).unwrap();
    }
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::NewerSchema { found: 3 })
    ));
}

mod model {
    use super::*;
    use proptest::prelude::*;

    const TAGS: [&str; 4] = ["a", "b", "c", "d"];
    /// Lifetimes are below it, as validation guarantees (`max_ttl` + skew).
    const WINDOW: u64 = 80;

    #[derive(Debug, Clone)]
    enum Op {
        Put {
            did: u8,
            peer: u8,
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
            4 => (0u8..4, 0u8..2, 1u64..12, 0u64..100, 1u64..WINDOW, proptest::collection::btree_set(0usize..4, 0..4))
                .prop_map(|(did, peer, seq, issued_at, ttl, tags)| Op::Put {
                    did,
                    peer,
                    seq,
                    issued_at,
                    ttl,
                    tags: tags.into_iter().collect(),
                }),
            1 => (0u64..300).prop_map(|now| Op::Sweep { now }),
        ]
    }

    #[derive(Default)]
    struct Model {
        /// DID → (highest seq, its prune time, stored advert); pruned DIDs are absent.
        dids: BTreeMap<String, (u64, u64, Option<Validated>)>,
    }

    impl Model {
        fn put(&mut self, v: &Validated) -> PutOutcome {
            let entry = self.dids.entry(v.did.clone()).or_insert((0, 0, None));
            if entry.0 >= v.seq {
                return PutOutcome::Stale {
                    stored_seq: entry.0,
                };
            }
            let outcome = match entry.2 {
                None => PutOutcome::Inserted,
                Some(_) => PutOutcome::Updated {
                    previous_seq: entry.0,
                },
            };
            *entry = (v.seq, entry.1.max(v.issued_at + WINDOW), Some(v.clone()));
            outcome
        }

        fn sweep(&mut self, now: u64) -> usize {
            let mut n = 0;
            for (_, _, advert) in self.dids.values_mut() {
                if advert.as_ref().is_some_and(|a| a.expires_at <= now) {
                    *advert = None;
                    n += 1;
                }
            }
            self.dids
                .retain(|_, (_, prune_at, advert)| advert.is_some() || *prune_at > now);
            n
        }

        fn find(&self, query: &[String], now: u64) -> Vec<(String, u64)> {
            let mut live: Vec<&Validated> = self
                .dids
                .values()
                .filter_map(|(_, _, a)| a.as_ref())
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
            let stored = self.dids.values().filter_map(|(_, _, a)| a.as_ref());
            stored.filter(|a| a.tags.iter().any(|t| t == tag)).count() as u64
        }

        fn len(&self) -> usize {
            self.dids.values().filter(|(_, _, a)| a.is_some()).count()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        #[test]
        fn find_returns_exactly_the_live_matching_adverts(
            ops in proptest::collection::vec(op(), 1..40),
            probe in 0u64..180,
        ) {
            let (_dir, store) = open_with(Limits { replay_window: WINDOW, ..test_limits() });
            let mut model = Model::default();
            for op in &ops {
                match op {
                    Op::Put { did, peer, seq, issued_at, ttl, tags } => {
                        let tags: Vec<&str> = tags.iter().map(|&i| TAGS[i]).collect();
                        let v = advert(&format!("did:key:{did}"), *seq, *issued_at, issued_at + ttl, &tags);
                        let v = from_peer(v, &format!("peer{peer}"));
                        prop_assert_eq!(store.put(&v).unwrap(), model.put(&v));
                    }
                    Op::Sweep { now } => {
                        prop_assert_eq!(store.sweep_expired(*now).unwrap(), model.sweep(*now));
                    }
                }
                prop_assert_eq!(store.len().unwrap(), model.len());
                assert_usage_consistent(&store);
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
            for did in 0..4 {
                let did = format!("did:key:{did}");
                let seq = model.dids.get(&did).map(|(seq, ..)| *seq);
                prop_assert_eq!(store.seq(&did).unwrap(), seq);
            }
        }
    }
}

#[test]
fn remove_deletes_one_advert_and_its_index_but_keeps_its_seq() {
    let (_dir, store) = open();
    store
        .put_own(&advert("did:key:a", 5, 100, 1_000, &["x", "y"]))
        .unwrap();
    store
        .put(&advert("did:key:b", 1, 100, 1_000, &["x"]))
        .unwrap();
    assert!(store.remove("did:key:a").unwrap());
    assert!(store.get("did:key:a", 200).unwrap().is_none());
    assert_eq!(index_entries(&store, "did:key:a"), 0);
    assert_eq!(
        dids(&store.find(&tags(&["x"]), 10, 200).unwrap()),
        ["did:key:b"]
    );
    assert_eq!(store.len().unwrap(), 1);
    assert_usage_consistent(&store);
    // The seq stays: a replay of the removed advert is stale, the next own seq above it.
    assert!(matches!(
        store.put(&advert("did:key:a", 5, 100, 1_000, &["x"])),
        Ok(PutOutcome::Stale { .. })
    ));
    assert!(store.next_own_seq("did:key:a").unwrap() > 5);
    // Nothing left to remove.
    assert!(!store.remove("did:key:a").unwrap());
    assert!(store.remove("did:\0").is_err());
}

/// Stores that share one memory budget (the simulator's nodes) keep their own data: a memtable
/// budget far below what they write makes them flush, and each still reads back all its adverts
/// and none of the other's, before and after reopening.
#[test]
fn stores_sharing_one_memory_budget_keep_their_own_adverts() {
    let memory = Memory::shared(1 << 20, 256 << 10);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let n = 400;
    let did = |s: usize, i: usize| format!("did:key:store{s}-{i}");
    {
        let stores: Vec<Store> = dirs
            .iter()
            .map(|d| Store::open_shared(d.path(), test_limits(), &memory).unwrap())
            .collect();
        for i in 0..n {
            for (s, store) in stores.iter().enumerate() {
                let mut v = advert(&did(s, i), 1, 100, 1000, &["shared"]);
                v.bytes = vec![b'x'; 2048];
                assert_eq!(store.put(&v).unwrap(), PutOutcome::Inserted);
            }
        }
        for (s, store) in stores.iter().enumerate() {
            assert_eq!(store.len().unwrap(), n);
            assert!(store.get(&did(s, n - 1), 500).unwrap().is_some());
            assert_eq!(store.get(&did(1 - s, 0), 500).unwrap(), None);
        }
    }
    for (s, d) in dirs.iter().enumerate() {
        let store = Store::open_shared(d.path(), test_limits(), &memory).unwrap();
        assert_eq!(store.len().unwrap(), n);
        assert_eq!(store.seq(&did(s, 0)).unwrap(), Some(1));
    }
}

/// The options a store is opened with, from the OPTIONS file RocksDB writes beside it.
fn written_options(dir: &std::path::Path) -> String {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("OPTIONS-"))
        })
        .collect();
    files.sort();
    std::fs::read_to_string(files.last().expect("an OPTIONS file")).unwrap()
}

/// Stores sharing a [`Memory`] (the simulator's hundreds) are opened lean: an info log that
/// does not roll (a rolling log keeps its header, every column family's options, in memory),
/// at warning level, a table cache of one shard, no statistics kept; every store's files are
/// appended through 16 KiB buffers. A store of its own (a node's) keeps its rolling log.
#[test]
fn shared_stores_are_opened_lean_and_a_nodes_own_store_keeps_its_rolling_log() {
    let memory = Memory::shared(1 << 20, 256 << 10);
    let (shared, own) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    drop(Store::open_shared(shared.path(), test_limits(), &memory).unwrap());
    drop(Store::open_with(own.path(), test_limits()).unwrap());
    let lean = written_options(shared.path());
    for line in [
        "max_log_file_size=0",
        "info_log_level=WARN_LEVEL",
        "table_cache_numshardbits=0",
        "stats_dump_period_sec=0",
        "stats_persist_period_sec=0",
        "writable_file_max_buffer_size=16384",
    ] {
        assert!(lean.lines().any(|l| l.trim() == line), "{line} in\n{lean}");
    }
    let node = written_options(own.path());
    for line in [
        "max_log_file_size=1048576",
        "writable_file_max_buffer_size=16384",
    ] {
        assert!(node.lines().any(|l| l.trim() == line), "{line} in\n{node}");
    }
    assert!(!node
        .lines()
        .any(|l| l.trim() == "info_log_level=WARN_LEVEL"));
}

/// Stores sharing a budget of [`SHARED_MEMTABLE_BYTES_PER_STORE`] each take their adverts
/// without a flush: every store keeps its one write-ahead log and writes no table file. (With a
/// quarter of that per store, this test sees the memtables switched and flushed.)
#[test]
fn stores_sharing_a_budget_sized_per_store_take_their_adverts_without_flushing() {
    const STORES: usize = 24;
    let memory = Memory::shared(1 << 20, STORES * SHARED_MEMTABLE_BYTES_PER_STORE);
    let dir = tempfile::tempdir().unwrap();
    let stores: Vec<Store> = (0..STORES)
        .map(|i| {
            Store::open_shared(&dir.path().join(i.to_string()), test_limits(), &memory).unwrap()
        })
        .collect();
    // Every store written, each advert to every column family a gossiped advert touches.
    for round in 0..20u64 {
        for (i, store) in stores.iter().enumerate() {
            let did = format!("did:key:s{i}r{round}");
            let tags = [format!("t{round}"), format!("u{i}")];
            let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
            store
                .put(&advert(&did, 1, 100, 4_000_000_000, &tags))
                .unwrap();
        }
    }
    // A memtable switch makes its new write-ahead log before the write returns; a flush that
    // follows writes a table file on a background thread: give it time to show.
    std::thread::sleep(std::time::Duration::from_millis(300));
    for i in 0..STORES {
        let names: Vec<String> = std::fs::read_dir(dir.path().join(i.to_string()))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let wals = names.iter().filter(|n| n.ends_with(".log")).count();
        let tables = names.iter().filter(|n| n.ends_with(".sst")).count();
        assert_eq!((wals, tables), (1, 0), "store {i}: {names:?}");
    }
}

#[test]
fn a_store_with_its_files_in_memory_works_and_leaves_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let memory = Memory::default().files_in_memory().unwrap();
    let store = Store::open_shared(&path, test_limits(), &memory).unwrap();
    assert_eq!(
        store
            .put(&advert("did:key:m", 5, 100, 1000, &["a"]))
            .unwrap(),
        PutOutcome::Inserted
    );
    // A replay is refused as on disk: the sequence numbers are kept there too.
    assert_ne!(
        store
            .put(&advert("did:key:m", 5, 100, 1000, &["a"]))
            .unwrap(),
        PutOutcome::Inserted
    );
    assert_eq!(store.get("did:key:m", 500).unwrap().unwrap().seq, 5);
    assert_eq!(store.len().unwrap(), 1);
    drop(store);
    // rust-rocksdb makes the directory on disk; nothing is written in it.
    assert_eq!(
        std::fs::read_dir(&path).unwrap().count(),
        0,
        "no file on disk"
    );
    // Reopened in the same file system (the same Memory), what was accepted is still there.
    let store = Store::open_shared(&path, test_limits(), &memory).unwrap();
    assert_eq!(store.get("did:key:m", 500).unwrap().unwrap().seq, 5);
}

#[test]
fn matches_list_every_live_match_from_the_index_with_when_each_was_first_seen() {
    let (_dir, store) = open();
    let now = 1_000;
    // `old` is stored first; then `new`, newer by `issued_at`, a second later by the clock.
    store
        .put(&advert("did:key:old", 1, 100, 5_000, &["books"]))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    for v in [
        advert("did:key:new", 1, 900, 5_000, &["books", "french"]),
        advert("did:key:other", 1, 950, 5_000, &["music"]),
        advert("did:key:gone", 1, 10, 500, &["books"]),
    ] {
        store.put(&v).unwrap();
    }
    let (found, cut) = store.matches(&tags(&["books"]), 100, now).unwrap();
    assert!(!cut);
    let got: Vec<&str> = found.iter().map(|m| m.did.as_str()).collect();
    // Newest `issued_at` first, the expired one left out.
    assert_eq!(got, ["did:key:new", "did:key:old"]);
    let (old, new) = (&found[1], &found[0]);
    assert!(
        old.first_seen > 0 && new.first_seen > old.first_seen,
        "{found:?}"
    );
    assert_eq!((old.issued_at, new.issued_at), (100, 900));
    // Every tag must match.
    let (both, _) = store
        .matches(&tags(&["books", "french"]), 100, now)
        .unwrap();
    assert_eq!(both.len(), 1);
    assert_eq!(both[0].did, "did:key:new");
    // A republication keeps the first sighting.
    store
        .put(&advert("did:key:old", 2, 990, 5_000, &["books"]))
        .unwrap();
    let (again, _) = store.matches(&tags(&["books"]), 100, now).unwrap();
    assert_eq!(
        again[0].did, "did:key:old",
        "newest issued first: {again:?}"
    );
    assert_eq!(again[0].first_seen, old.first_seen);
    // The cap cuts the walk and says so.
    let (one, cut) = store.matches(&tags(&["books"]), 1, now).unwrap();
    assert_eq!((one.len(), cut), (1, true));
    // No tag is a refusal, not every advert.
    assert!(store.matches(&[], 10, now).is_err());
}

/// The ranking's memo of first sightings (`index::FirstSeen`) answers as the seqs do: a DID
/// ranked once keeps its sighting, and one whose seq was pruned (its advert gone past the
/// replay window) and that comes back is first seen again, not taken for the old one.
#[test]
fn a_dids_first_sighting_is_new_again_after_its_seq_was_pruned() {
    let (_dir, store) = open();
    let far = 10_000_000;
    store
        .put(&advert("did:key:back", 1, 100, 500, &["books"]))
        .unwrap();
    let (first, _) = store.matches(&tags(&["books"]), 10, 400).unwrap();
    let (again, _) = store.matches(&tags(&["books"]), 10, 400).unwrap();
    assert_eq!(first, again);
    assert!(first[0].first_seen > 0);
    store.sweep_expired(far).unwrap();
    assert_eq!(store.seq("did:key:back").unwrap(), None, "pruned");
    std::thread::sleep(Duration::from_millis(1100));
    store
        .put(&advert("did:key:back", 1, far, far + 500, &["books"]))
        .unwrap();
    let (back, _) = store.matches(&tags(&["books"]), 10, far + 1).unwrap();
    assert_eq!(
        back[0].first_seen,
        store.read_seq("did:key:back").unwrap().unwrap().first_seen
    );
    assert!(
        back[0].first_seen > first[0].first_seen,
        "{back:?} {first:?}"
    );
}

#[test]
fn a_seq_entry_written_before_first_sightings_reads_as_the_oldest() {
    let (_dir, store) = open();
    store
        .put(&advert("did:key:a", 1, 100, 5_000, &["books"]))
        .unwrap();
    // Rewrite the entry as the 16 bytes an earlier version wrote.
    let e = store.read_seq("did:key:a").unwrap().unwrap();
    let mut old = Vec::new();
    old.extend_from_slice(&e.seq.to_be_bytes());
    old.extend_from_slice(&e.prune_at.to_be_bytes());
    let cf = store.cf(CF_SEQS).unwrap();
    store.inner.db.put_cf(cf, b"did:key:a", &old).unwrap();
    let (found, _) = store.matches(&tags(&["books"]), 10, 1_000).unwrap();
    assert_eq!(found[0].first_seen, 0);
    assert_eq!(store.seq("did:key:a").unwrap(), Some(1));
    // The next advert of the DID keeps it the oldest.
    store
        .put(&advert("did:key:a", 2, 200, 5_000, &["books"]))
        .unwrap();
    let (found, _) = store.matches(&tags(&["books"]), 10, 1_000).unwrap();
    assert_eq!(found[0].first_seen, 0);
}

#[test]
fn a_store_open_elsewhere_is_refused_as_locked_until_it_closes() {
    let (dir, store) = open();
    let path = dir.path().join("db");
    match Store::open_with(&path, test_limits()) {
        Err(StoreError::Locked { path: p }) => assert_eq!(p, path),
        other => panic!("expected Locked, got {other:?}"),
    }
    // The same store's clones share one lock: only a new open is refused.
    let clone = store.clone();
    drop(store);
    assert!(matches!(
        Store::open_with(&path, test_limits()),
        Err(StoreError::Locked { .. })
    ));
    drop(clone);
    Store::open_with(&path, test_limits()).expect("opened once the last handle is gone");
}
