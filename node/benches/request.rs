//! What one A2A request costs the node without HTTP and without wrk, so that a regression shows
//! in `cargo bench` before it shows in a load test (docs/BENCHMARKS.md, "A2A"):
//! - `engine/send_open`: a blocking `SendMessage` to the echo agent by an anonymous caller, as
//!   the node runs it: the engine, the node's task store on a real RocksDB (admit, one batch
//!   with the record, its index entries and its charges), the seal;
//! - `engine/send_receipt`: the same message asking for a signed receipt (as `agentnet call`
//!   does): the difference is the receipt;
//! - `receipt/seal`: signing the receipt of such a task alone (digests of its messages and
//!   artifacts, JCS, Ed25519);
//! - `store/admit_insert`: admitting and writing such a task alone.
//!
//! The RFC 9421 verification of a signed request is `cargo bench -p agentnet-did` (`rfc9421/verify`).
//!
//! `cargo bench -p agentnet-node --bench request`

use std::sync::Arc;

use agentnet_a2a::auth::{Caller, Owner, Source};
use agentnet_a2a::engine::{Engine, Limits};
use agentnet_a2a::samples::Echo;
use agentnet_a2a::store::TaskStore;
use agentnet_a2a::types::{Message, Part, Role, SendMessageRequest, Task};
use agentnet_did::SecretKey;
use agentnet_node::hosted::receipts::Sealer;
use agentnet_node::hosted::tasks::{open_dir, Retention};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

fn message(n: u64, receipt: bool) -> SendMessageRequest {
    let mut m = Message::new(Role::User, vec![Part::text("hello".to_string())]);
    m.message_id = format!("m-{n}");
    if receipt {
        m.extensions = Some(vec![agentnet_did::receipt::EXTENSION.to_owned()]);
    }
    SendMessageRequest {
        message: m,
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

/// Bounds no benchmark reaches (as scripts/bench_a2a_compare.sh sets them).
fn unbounded() -> Retention {
    Retention {
        max_tasks: u64::MAX / 4,
        max_per_owner: u64::MAX / 4,
        max_per_source: u64::MAX / 4,
        max_bytes: u64::MAX / 4,
        max_owner_bytes: u64::MAX / 4,
        max_source_bytes: u64::MAX / 4,
        min_free_bytes: 0,
        new_per_second_per_source: 0,
        ..Retention::default()
    }
}

fn request(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (_store, db) = open_dir(dir.path(), unbounded()).unwrap();
    let key = SecretKey::from_seed(&[7; 32]);
    let sealer = Arc::new(Sealer::new(&key, Default::default()));
    let tasks = db.agent("echo").sealed({
        let sealer = sealer.clone();
        Arc::new(move |caller: Option<&str>, t: &mut Task| sealer.seal(caller, t))
    });
    let engine = Engine::new(Arc::new(Echo), Arc::new(tasks.clone()), Limits::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let source = Source::V4(std::net::Ipv4Addr::LOCALHOST);
    let caller = Caller::new(Owner::Anonymous(source), source);
    let mut n = 0u64;
    let mut g = c.benchmark_group("a2a");
    for (name, receipt) in [("engine/send_open", false), ("engine/send_receipt", true)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                let r = rt.block_on(engine.send_message(&caller, message(n, receipt)));
                assert!(r.is_ok(), "{r:?}");
            })
        });
    }

    // One completed echo task that asked for a receipt, as the engine writes it.
    let done = match rt
        .block_on(engine.send_message(&caller, message(0, true)))
        .unwrap()
    {
        agentnet_a2a::types::SendMessageResponse::Task(t) => t,
        other => panic!("{other:?}"),
    };
    let mut unsigned = done.clone();
    if let Some(m) = unsigned.metadata.as_mut() {
        m.remove(agentnet_did::receipt::METADATA_KEY);
    }
    g.bench_function("receipt/seal", |b| {
        b.iter_batched(
            || unsigned.clone(),
            |mut t| {
                sealer.seal(None, &mut t);
                t
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("store/admit_insert", |b| {
        b.iter_batched(
            || {
                n += 1;
                let mut t = done.clone();
                t.id = format!("t-{n}");
                t
            },
            |t| {
                tasks.admit(&caller).unwrap();
                tasks.insert(&caller, &t).unwrap();
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(name = benches; config = Criterion::default().sample_size(30); targets = request);
criterion_main!(benches);
