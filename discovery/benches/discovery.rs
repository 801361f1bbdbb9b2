//! Discovery hot paths: validating an advertisement (next to a bare Ed25519 `verify_strict` by
//! the same key, measured in the same run, so the figure can be given as a ratio) and finding
//! adverts by tag in a store of 100 000.
//!
//! `cargo bench -p agentnet-discovery --bench discovery`
//!
//! Criterion reports means and medians; the setup also prints to stderr the validate/verify
//! ratio from its own interleaved timing and the p50/p99/max of 10 000 finds, since the store's
//! target is a tail latency.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentnet_did::{card, Resolver, SecretKey};
use agentnet_discovery::advert::{self, Draft, Limits, Validated, Validator};
use agentnet_discovery::net::unix_now;
use agentnet_discovery::store::{self, Store};
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;

/// Adverts in the store benchmarks.
const STORE_ADVERTS: usize = 100_000;
/// Tag vocabulary of the store benchmarks.
const VOCABULARY: usize = 200;
/// Tags per advert.
const TAGS_PER_ADVERT: usize = 3;
/// Results asked of each find.
const FIND_LIMIT: usize = 20;

/// A ~1 KiB Agent Card (before its signature), like the simulation's.
fn sample_card() -> serde_json::Value {
    json!({
        "name": "Translator", "description": "Translates text between 40 languages. ".repeat(12), "version": "1.2.0",
        "supportedInterfaces": [
            {"url": "https://agents.example/a2a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "provider": {"organization": "Example Org", "url": "https://example.org"},
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [
            {"id": "translate", "name": "Translate", "description": "Translate text.", "tags": ["translation", "language"], "examples": ["Translate 'hello' to French"]}
        ]
    })
}

/// xorshift64*, seeded: the same store and queries on every run.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Tags `skill-0` … `skill-199` with Zipf(1) weights: `skill-0` is on about a sixth of draws.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Self {
        let mut acc = 0.0;
        Zipf {
            cumulative: (1..=n)
                .map(|k| {
                    acc += 1.0 / k as f64;
                    acc
                })
                .collect(),
        }
    }

    fn draw(&self, rng: &mut Rng, n: usize) -> Vec<String> {
        let total = self.cumulative[self.cumulative.len() - 1];
        let mut out: Vec<String> = Vec::with_capacity(n);
        while out.len() < n {
            let x = rng.unit() * total;
            let tag = format!("skill-{}", self.cumulative.partition_point(|c| *c < x));
            if !out.contains(&tag) {
                out.push(tag);
            }
        }
        out.sort();
        out
    }
}

fn validation(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let key = SecretKey::from_seed(&[42; 32]);
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    let pk = key.public();
    let msg = [7u8; 200];
    let sig = ed25519_dalek::Signature::from_bytes(&key.sign(&msg));

    let now = unix_now();
    let signed = card::sign(&sample_card(), &key, &kid).unwrap();
    let ad = advert::sign(
        Draft {
            did: did.clone(),
            kid: kid.clone(),
            card: signed,
            peer_id: "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN".into(),
            addrs: vec!["/ip4/203.0.113.7/tcp/4001".into()],
            seq: 1,
            issued_at: now,
            expires_at: now + 3600,
        },
        &key,
    );
    let bytes = serde_json::to_vec(&ad).unwrap();
    let validator = Validator::new(
        Resolver::new(Default::default()).unwrap(),
        Limits::default(),
    );
    rt.block_on(validator.validate(&bytes, None, now)).unwrap();

    // Our own interleaved timing, for the ratio (criterion's figures are printed below it).
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        for _ in 0..2000 {
            f();
        }
        start.elapsed() / 2000
    };
    // What a node runs per gossiped advertisement, all on one thread: the cheap checks, the key
    // lookup (offline for did:key: the future is ready at once), both signatures. The node runs
    // the last step on a blocking thread together with its store read and write.
    let sync_validate = |bytes: &[u8]| {
        let pre = validator.precheck(bytes, None, now).unwrap();
        let keys = futures::FutureExt::now_or_never(validator.keys(&pre))
            .expect("did:key needs no I/O")
            .unwrap();
        advert::verify(pre, &keys, bytes.to_vec()).unwrap()
    };
    let (mut verify, mut validate, mut inline) = (Duration::MAX, Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        verify = verify.min(time(&mut || {
            pk.verify_strict(black_box(&msg), black_box(&sig)).unwrap()
        }));
        validate = validate.min(time(&mut || {
            rt.block_on(validator.validate(black_box(&bytes), None, now))
                .unwrap();
        }));
        inline = inline.min(time(&mut || {
            black_box(sync_validate(black_box(&bytes)));
        }));
    }
    let per_advert_inline = verify.as_secs_f64() / inline.as_secs_f64();
    eprintln!(
        "validate inline (the node's path, no thread hop): {:.1} µs; throughput ratio per \
         advert {:.2}, per signature {:.2}",
        inline.as_secs_f64() * 1e6,
        per_advert_inline,
        2.0 * per_advert_inline
    );
    let per_advert = verify.as_secs_f64() / validate.as_secs_f64();
    eprintln!(
        "validate: advert {} bytes; best of 5 x 2000: verify_strict {:.1} µs, validate {:.1} µs; \
         throughput ratio per advert {:.2}, per signature (2 per advert) {:.2}",
        bytes.len(),
        verify.as_secs_f64() * 1e6,
        validate.as_secs_f64() * 1e6,
        per_advert,
        2.0 * per_advert
    );

    c.bench_function("baseline/ed25519_verify_strict", |b| {
        b.iter(|| pk.verify_strict(black_box(&msg), black_box(&sig)).unwrap())
    });
    c.bench_function("validate/advertisement_inline", |b| {
        b.iter(|| sync_validate(black_box(&bytes)))
    });
    c.bench_function("validate/advertisement", |b| {
        b.iter(|| {
            rt.block_on(validator.validate(black_box(&bytes), None, now))
                .unwrap()
        })
    });
    // Where the rest goes: the card check alone (JCS of the card + one verify), and the hop to
    // a blocking thread that `validate` makes for its signature checks.
    let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let card_key = agentnet_did::PublicKey::Ed25519(pk);
    c.bench_function("validate/card_verify_with_key", |b| {
        b.iter(|| card::verify_with_key(black_box(&parsed["card"]), &did, &card_key).unwrap())
    });
    c.bench_function("baseline/spawn_blocking_hop", |b| {
        b.iter(|| {
            rt.block_on(async { tokio::task::spawn_blocking(|| black_box(1)).await })
                .unwrap()
        })
    });
    // The synchronous part alone (size, JSON, times): what runs before the blocking hop.
    c.bench_function("validate/precheck", |b| {
        b.iter(|| validator.precheck(black_box(&bytes), None, now).unwrap())
    });
}

/// A store of [`STORE_ADVERTS`] adverts, written straight with `Store::put`.
fn filled_store(dir: &std::path::Path, zipf: &Zipf) -> Store {
    // Every advert names the same publishing peer: lift the per-peer quota to the total (the
    // default total of 512 MiB holds the 100 000 adverts, ~190 MiB).
    let limits = store::Limits {
        max_peer_bytes: store::Limits::default().max_total_bytes,
        min_free_bytes: 0,
        ..store::Limits::default()
    };
    let store = Store::open_with(&dir.join("store"), limits).unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let now = unix_now();
    // ~1.5 KiB, the size of a real advertisement with a 1 KiB card; find returns these bytes.
    let body = vec![b'x'; 1536];
    let start = Instant::now();
    for i in 0..STORE_ADVERTS {
        let v = Validated {
            did: format!("did:key:z6MkBench{i:010}"),
            seq: 1,
            issued_at: now - i as u64,
            expires_at: now + 7 * 24 * 3600,
            tags: zipf.draw(&mut rng, TAGS_PER_ADVERT),
            peer_id: "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN".into(),
            bytes: body.clone(),
        };
        store.put(&v).unwrap();
    }
    eprintln!(
        "store: {STORE_ADVERTS} adverts written in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    store
}

/// This thread's time on a CPU and waiting for one (run queue), from `/proc/thread-self/schedstat`.
fn schedstat() -> Option<(Duration, Duration)> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((
        Duration::from_nanos(f.next()??),
        Duration::from_nanos(f.next()??),
    ))
}

/// p50, p99 and max of 10 000 finds over `queries`, to stderr, with the time this thread spent
/// waiting for a CPU meanwhile (on a loaded machine, preemption is what makes the tail).
fn tail(name: &str, store: &Store, queries: &[Vec<String>], now: u64) {
    let mut t: Vec<Duration> = Vec::with_capacity(10_000);
    let mut found = 0;
    let before = schedstat();
    for q in queries.iter().cycle().take(10_000) {
        let start = Instant::now();
        found += store.find(q, FIND_LIMIT, now).unwrap().len();
        t.push(start.elapsed());
    }
    let after = schedstat();
    let total: Duration = t.iter().sum();
    t.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let waited = match (before, after) {
        (Some(b), Some(a)) => format!(
            "; of {:.0} ms, {:.0} ms on CPU, {:.0} ms waiting for one",
            total.as_secs_f64() * 1e3,
            (a.0 - b.0).as_secs_f64() * 1e3,
            (a.1 - b.1).as_secs_f64() * 1e3
        ),
        _ => String::new(),
    };
    eprintln!(
        "{name}: 10 000 finds, p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs, {:.1} results per \
         find{waited}; load {}",
        us(t[t.len() / 2]),
        us(t[t.len() * 99 / 100]),
        us(t[t.len() - 1]),
        found as f64 / 10_000.0,
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    );
}

fn store(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let zipf = Zipf::new(VOCABULARY);
    let store = filled_store(dir.path(), &zipf);
    let now = unix_now();
    // Queries drawn with the same skew as the data: popular tags are asked for most.
    let mut rng = Rng(0x0bad_cafe_f00d_0001);
    let one: Vec<Vec<String>> = (0..1024).map(|_| zipf.draw(&mut rng, 1)).collect();
    let two: Vec<Vec<String>> = (0..1024).map(|_| zipf.draw(&mut rng, 2)).collect();
    // Let RocksDB finish flushing and compacting what the fill wrote, then measure twice: the
    // first pass starts with a cold block cache.
    std::thread::sleep(Duration::from_secs(3));
    for pass in ["cold", "warm"] {
        eprintln!("store: tail latency, {pass} pass");
        tail("store/find_one_tag_100k", &store, &one, now);
        tail("store/find_two_tags_100k", &store, &two, now);
    }

    for (name, queries) in [
        ("store/find_one_tag_100k", &one),
        ("store/find_two_tags_100k", &two),
    ] {
        let mut i = 0;
        c.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                store.find(black_box(&queries[i]), FIND_LIMIT, now).unwrap()
            })
        });
    }
}

criterion_group!(benches, validation, store);
criterion_main!(benches);
