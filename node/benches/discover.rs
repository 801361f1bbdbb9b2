//! The node's `discover` under a Sybil flood: 10 000 live adverts under one tag, each under its
//! own fresh did:key, one of them endorsed by the node. Measures what a discovery costs the
//! node once every match is ranked before the cut (issue 43, 1): the index walk
//! (`Store::matches`), the policy and ranking of all 10 000 (`directory::top`, which then reads
//! the best `limit`), and the flags and pins of the ten shown, as `GET /admin/v1/discover`
//! runs them (without the HTTP hop).
//!
//! `cargo bench -p agentnet-node --bench discover`
//!
//! The setup prints the p50/p99/max of 200 answers to stderr (the target is a bound on each
//! answer), then criterion's figures.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentnet_did::{card, SecretKey};
use agentnet_discovery::advert::{self, Draft, Validated};
use agentnet_discovery::net::unix_now;
use agentnet_discovery::store::{self, Store, MAX_MATCHES};
use agentnet_node::network::directory;
use agentnet_node::trust::endorsements::{Endorsements, CF_ENDORSEMENTS};
use agentnet_node::trust::pins::{Pins, CF_PINS};
use agentnet_node::trust::{Level, Policy};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

/// Adverts under the one tag.
const ADVERTS: u32 = 10_000;
/// What the caller asks for.
const LIMIT: usize = 10;
const TAG: &str = "books";

fn key(i: u32) -> SecretKey {
    let mut seed = [9u8; 32];
    seed[..4].copy_from_slice(&i.to_be_bytes());
    SecretKey::from_seed(&seed)
}

/// A signed advert of agent `i`, as gossip would bring it.
fn advert(i: u32, now: u64) -> Validated {
    let k = key(i);
    let did = k.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    let c = json!({
        "name": format!("Books {i}"), "description": "Finds any book, in any library.",
        "version": "1.0.0",
        "supportedInterfaces": [{"url": format!("https://books{i}.example/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "find", "name": "Find", "description": "Finds a book.", "tags": [TAG]}]
    });
    let ad = advert::sign(
        Draft {
            did: did.clone(),
            kid: kid.clone(),
            card: card::sign(&c, &k, &kid).unwrap(),
            peer_id: "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN".into(),
            addrs: vec![],
            seq: 1,
            issued_at: now - u64::from(ADVERTS - i),
            expires_at: now + 3600,
        },
        &k,
    );
    Validated {
        did: did.to_string(),
        seq: 1,
        issued_at: now - u64::from(ADVERTS - i),
        expires_at: now + 3600,
        tags: vec![TAG.into()],
        peer_id: ad.peer_id.clone(),
        bytes: serde_json::to_vec(&ad).unwrap(),
    }
}

fn discover(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let limits = store::Limits {
        min_free_bytes: 0,
        ..Default::default()
    };
    let db = Store::open_with_families(&dir.path().join("db"), limits, &[CF_PINS, CF_ENDORSEMENTS])
        .unwrap();
    let now = unix_now();
    for i in 0..ADVERTS {
        db.put(&advert(i, now)).unwrap();
    }
    // The node endorses agent 0, the oldest: it must come first whatever the flood.
    let node = key(u32::MAX);
    let endorsements = Endorsements::open(&db, vec![node.did_key().to_string()], 1).unwrap();
    let honest = key(0).did_key().to_string();
    let e = agentnet_did::endorsement::Endorsement::new(
        node.did_key().as_str(),
        &honest,
        vec![],
        now,
        now + 3600,
    );
    endorsements
        .accept(&agentnet_did::endorsement::sign(&e, &node), now)
        .unwrap()
        .unwrap();
    let pins = Pins::open(&db).unwrap();
    let rules = agentnet_node::trust::flags::builtin();
    let policy = Policy::new(&[], &[], None).unwrap();
    let tags = vec![TAG.to_string()];

    let answer = || {
        let (matches, _) = db.matches(&tags, MAX_MATCHES, now).unwrap();
        let shown: Vec<_> = directory::top(
            &db,
            matches,
            &tags,
            LIMIT,
            &policy,
            Some(&endorsements),
            now,
        )
        .into_iter()
        .map(|(a, judged)| {
            let card: serde_json::Value =
                serde_json::from_slice::<serde_json::Value>(&a.bytes).unwrap()["card"].clone();
            (
                a.did.clone(),
                judged.level,
                rules.card(&card),
                pins.observe(&a.did, &card, now),
            )
        })
        .collect();
        shown
    };
    let first = answer();
    assert_eq!(first.len(), LIMIT);
    assert_eq!(first[0].0, honest);
    assert_eq!(first[0].1, Level::Endorsed);

    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            black_box(answer());
            t.elapsed()
        })
        .collect();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "discover, {ADVERTS} matches under one tag, limit {LIMIT}: p50 {:.1} ms, p99 {:.1} ms, \
         max {:.1} ms (200 answers)",
        ms(times[100]),
        ms(times[198]),
        ms(times[199])
    );
    let (matches, _) = db.matches(&tags, MAX_MATCHES, now).unwrap();
    let t = Instant::now();
    for _ in 0..20 {
        black_box(db.matches(&tags, MAX_MATCHES, now).unwrap());
    }
    eprintln!(
        "  of which the index walk (Store::matches): {:.1} ms; ranking {} matches: {:.1} ms",
        ms(t.elapsed() / 20),
        matches.len(),
        {
            let t = Instant::now();
            for _ in 0..20 {
                black_box(directory::rank(
                    matches.clone(),
                    &policy,
                    Some(&endorsements),
                    &tags,
                    now,
                ));
            }
            ms(t.elapsed() / 20)
        }
    );

    let mut g = c.benchmark_group("discover");
    g.sample_size(20);
    g.bench_function("sybil_flood_10000_limit_10", |b| {
        b.iter(|| black_box(answer()))
    });
    g.finish();
}

criterion_group!(benches, discover);
criterion_main!(benches);
