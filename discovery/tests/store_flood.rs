//! The advert store under a disk flood, on a real, small file system: a 16 MiB tmpfs flooded
//! with 18 MiB of large, validly signed adverts from freshly minted did:key DIDs, published
//! under several peer ids. The byte cap and the per-peer quota hold (logically and in the
//! directory's size), no write hits ENOSPC, the node's own publishing goes on throughout, the
//! free-disk watermark refuses others' adverts (not the node's own) when the disk is nearly
//! full, and after the flood expires one sweep makes room again, without a restart.
//!
//! Mounting needs root and a private mount namespace, and a multithreaded test cannot unshare
//! itself: the test re-executes its own binary under `unshare --mount` with the tmpfs mounted,
//! and an environment variable telling the child to run the flood. Without root or `unshare`
//! it is skipped with the reason printed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agentnet_did::{card, Did, DidUrl, Resolver, SecretKey};
use agentnet_discovery::advert::{self, Draft, Validated, Validator};
use agentnet_discovery::net::unix_now;
use agentnet_discovery::store::{Limits, PutOutcome, Refusal, Store, StoreError};
use serde_json::json;

const CHILD_ENV: &str = "AGENTNET_STORE_FLOOD_DIR";
const TEST_NAME: &str = "a_flood_of_large_valid_adverts_holds_on_a_small_tmpfs";
/// The file system: smaller than the flood.
const TMPFS_BYTES: u64 = 16 << 20;
/// The store's caps.
const CAP: u64 = 4 << 20;
const PEER_QUOTA: u64 = 3 << 19;
const MIN_FREE: u64 = 2 << 20;
/// 300 adverts of ~60 KiB: 18 MiB, more than the file system holds. (Signing and validating
/// one takes ~0.3 s in a debug build: the flood is made on two threads before it is stored.)
const FLOOD_ADVERTS: u64 = 300;
const DESCRIPTION_BYTES: usize = 58 * 1024;
/// The flood's lifetime, seconds.
const FLOOD_TTL: u64 = 600;
/// One own advert every this many flood adverts.
const OWN_EVERY: u64 = 25;
/// Bound on the directory: twice the cap (a compaction holds its input and output at once),
/// the write-ahead log (2 MiB at this cap), RocksDB's own logs and manifest.
const DIR_BOUND: u64 = 2 * CAP + (4 << 20);

#[test]
fn a_flood_of_large_valid_adverts_holds_on_a_small_tmpfs() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        flood(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    if let Some(reason) = cannot_mount(dir.path()) {
        eprintln!("skipped: cannot mount a tmpfs in a private mount namespace: {reason}");
        return;
    }
    let exe = std::env::current_exe().expect("own executable");
    let script = format!(
        "mount -t tmpfs -o size={TMPFS_BYTES} tmpfs \"$0\" && \
         exec \"$1\" --exact {TEST_NAME} --nocapture --test-threads=1"
    );
    let status = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(dir.path())
        .arg(exe)
        .env(CHILD_ENV, dir.path())
        .status()
        .expect("running unshare");
    assert!(status.success(), "the flood run failed: {status}");
}

/// Why a tmpfs cannot be mounted here, if it cannot.
fn cannot_mount(dir: &Path) -> Option<String> {
    let probe = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs -o size=1m tmpfs \"$0\" && umount \"$0\"",
        ])
        .arg(dir)
        .output();
    match probe {
        Err(e) => Some(format!("unshare: {e}")),
        Ok(out) if !out.status.success() => Some(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(_) => None,
    }
}

struct Agent {
    key: SecretKey,
    did: Did,
    kid: DidUrl,
}

impl Agent {
    /// A freshly minted did:key agent, distinct per `n`.
    fn new(n: u64) -> Self {
        let mut seed = [0x5a; 32];
        seed[..8].copy_from_slice(&n.to_le_bytes());
        let key = SecretKey::from_seed(&seed);
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        Agent { key, did, kid }
    }

    /// A signed advert with a large card, published by `peer_id`.
    fn advert(
        &self,
        peer_id: &str,
        seq: u64,
        issued_at: u64,
        ttl: u64,
        desc_bytes: usize,
    ) -> Vec<u8> {
        let card = json!({
            "name": "Flood", "description": "x".repeat(desc_bytes), "version": "1.0.0",
            "supportedInterfaces": [{"url": "https://agents.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "f", "name": "Flood", "description": "Floods.", "tags": ["flood", "spam"]}]
        });
        let signed = card::sign(&card, &self.key, &self.kid).expect("card signature");
        let ad = advert::sign(
            Draft {
                did: self.did.clone(),
                kid: self.kid.clone(),
                card: signed,
                peer_id: peer_id.into(),
                addrs: vec![],
                seq,
                issued_at,
                expires_at: issued_at + ttl,
            },
            &self.key,
        );
        serde_json::to_vec(&ad).expect("advert JSON")
    }
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        total += if meta.is_dir() {
            dir_bytes(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// A real libp2p peer id (validation parses it), one per `n`.
fn pid(n: u8) -> String {
    libp2p::identity::Keypair::ed25519_from_bytes([n; 32])
        .expect("32 bytes are an Ed25519 secret")
        .public()
        .to_peer_id()
        .to_string()
}

fn free_bytes(dir: &Path) -> u64 {
    let st = rustix::fs::statvfs(dir).expect("statvfs");
    st.f_bavail * st.f_frsize
}

/// The child: runs on the tmpfs mounted at `dir`.
fn flood(dir: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let validator = Validator::new(
        Resolver::new(Default::default()).expect("resolver"),
        advert::Limits::default(),
    );
    let validate = |bytes: &[u8], now: u64| -> Validated {
        rt.block_on(validator.validate(bytes, None, now))
            .expect("a valid advert")
    };
    let limits = Limits {
        max_total_bytes: CAP,
        max_peer_bytes: PEER_QUOTA,
        min_free_bytes: MIN_FREE,
        ..Limits::default()
    };
    let store = Store::open_with(&dir.join("store"), limits.clone()).expect("open");
    let now = unix_now();
    let own = Agent::new(u64::MAX);
    let own_peer = &pid(1);
    let mut own_seq = 0;
    let mut publish_own = |at: u64| {
        own_seq += 1;
        let v = validate(&own.advert(own_peer, own_seq, at, 7 * 24 * 3600, 4096), at);
        match store.put_own(&v) {
            Ok(PutOutcome::Inserted | PutOutcome::Updated { .. }) => {}
            other => panic!("own advert seq {own_seq}: {other:?}"),
        }
    };

    // The flood: half of it under one peer id, the rest spread over three.
    let peer = |i: u64| match i % 2 {
        0 => pid(2),
        _ => pid(3 + ((i / 2) % 3) as u8),
    };
    let mut refused: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut accepted = 0;
    let mut max_dir = 0;
    let flooded: Vec<(Vec<u8>, Validated)> = std::thread::scope(|s| {
        let make = |first: u64| {
            let (validate, peer) = (&validate, &peer);
            s.spawn(move || {
                (first..FLOOD_ADVERTS)
                    .step_by(2)
                    .map(|i| {
                        let bytes =
                            Agent::new(i).advert(&peer(i), 1, now, FLOOD_TTL, DESCRIPTION_BYTES);
                        let v = validate(&bytes, now);
                        (bytes, v)
                    })
                    .collect::<Vec<_>>()
            })
        };
        let (even, odd) = (make(0), make(1));
        let (even, odd) = (even.join().expect("signer"), odd.join().expect("signer"));
        even.into_iter()
            .zip(odd)
            .flat_map(|(a, b)| [a, b])
            .collect()
    });
    for (i, (_, v)) in (0..).zip(&flooded) {
        match store.put(v) {
            Ok(PutOutcome::Inserted) => accepted += 1,
            Err(StoreError::Refused { reason, .. }) => {
                *refused.entry(reason.reason()).or_default() += 1
            }
            // A write failing with ENOSPC, or anything else, ends the test here.
            other => panic!("flood advert {i}: {other:?}"),
        }
        if i % OWN_EVERY == 0 {
            publish_own(now);
        }
        let usage = store.usage();
        // Own adverts are outside the cap: one DID of ~5 KiB here.
        assert!(usage.bytes <= CAP + 16 * 1024, "{usage:?} over the cap");
        max_dir = max_dir.max(dir_bytes(&dir.join("store")));
        assert!(max_dir <= DIR_BOUND, "directory at {max_dir} bytes");
    }
    let (heavy_bytes, _) = store.peer_usage(&pid(2)).expect("peer usage");
    eprintln!(
        "flood: {accepted} of {FLOOD_ADVERTS} accepted, refused {refused:?}, usage {:?}, \
         heavy peer {heavy_bytes} bytes, directory at most {max_dir} bytes, {} bytes free",
        store.usage(),
        free_bytes(dir)
    );
    assert!(refused
        .get(Refusal::StoreFull.reason())
        .is_some_and(|&n| n > 0));
    assert!(refused
        .get(Refusal::PeerQuota.reason())
        .is_some_and(|&n| n > 0));
    assert!(heavy_bytes <= PEER_QUOTA);
    assert!(accepted > 0);
    let usage = store.usage();
    assert_eq!(
        usage.refused.store_full + usage.refused.peer_quota,
        FLOOD_ADVERTS - accepted
    );

    // The disk nearly full (a ballast file leaves less than the watermark): others' adverts
    // are refused before RocksDB could hit ENOSPC; our own still go. The store reads the free
    // space at most once a second: wait that out.
    let ballast = dir.join("ballast");
    let fill = free_bytes(dir).saturating_sub(MIN_FREE / 2);
    std::fs::write(&ballast, vec![0u8; fill as usize]).expect("ballast");
    std::thread::sleep(Duration::from_millis(1100));
    let update = Agent::new(1).advert(&peer(1), 2, now, FLOOD_TTL, 100);
    match store.put(&validate(&update, now)) {
        Err(StoreError::Refused {
            reason: Refusal::DiskLow,
            ..
        }) => {}
        other => panic!("with {} bytes free: {other:?}", free_bytes(dir)),
    }
    publish_own(now);
    std::fs::remove_file(&ballast).expect("removing ballast");
    std::thread::sleep(Duration::from_millis(1100));
    // Room on disk again: a shrinking update of a stored DID passes a full store.
    let shrink = Agent::new(1).advert(&peer(1), 3, now, FLOOD_TTL, 100);
    match store.put(&validate(&shrink, now)) {
        Ok(PutOutcome::Updated { previous_seq: 1 }) => {}
        other => panic!("shrinking update: {other:?}"),
    }

    // The flood expires; one sweep (the node's periodic one, here at the flood's expiry) makes
    // room, and a new DID is accepted without a restart. Replays of the flood stay stale.
    let later = now + FLOOD_TTL;
    let swept = store.sweep_expired(later).expect("sweep");
    assert_eq!(swept as u64, accepted);
    let after = store.usage();
    assert!(after.bytes < CAP / 4, "{after:?} after the sweep");
    let fresh = Agent::new(1_000_000).advert(&pid(9), 1, later, 3600, DESCRIPTION_BYTES);
    assert_eq!(
        store
            .put(&validate(&fresh, later))
            .expect("accepted after the sweep"),
        PutOutcome::Inserted
    );
    let replay = validate(&flooded[0].0, now);
    assert!(matches!(
        store.put(&replay),
        Ok(PutOutcome::Stale { stored_seq: 1 })
    ));
    publish_own(later);

    // Past the replay window no seq of the flood is kept: the usage is what is live.
    let end = later + limits.replay_window + 7 * 24 * 3600 + 1;
    store.sweep_expired(end).expect("final sweep");
    let usage = store.usage();
    assert_eq!((usage.bytes, usage.adverts), (0, 0), "{usage:?}");
    eprintln!("recovered: {after:?} after the first sweep; directory at most {max_dir} bytes");
}
