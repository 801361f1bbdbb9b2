//! Identity hot paths, each next to a bare Ed25519 `verify_strict` of the same key measured in
//! the same run, so the figures in docs/BENCHMARKS.md can be given as ratios.
//!
//! `cargo bench -p agentnet-did`

use std::hint::black_box;

use agentnet_did::httpsig::{self, Verifier, VerifyOptions};
use agentnet_did::{card, didkey, wba, Did, DidUrl, Resolver, SecretKey};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::json;

fn sample_card() -> serde_json::Value {
    json!({
        "name": "Translator", "description": "Translates text between 40 languages.", "version": "1.2.0",
        "supportedInterfaces": [
            {"url": "https://agents.example/a2a/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "https://agents.example/a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "provider": {"organization": "Example Org", "url": "https://example.org"},
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [
            {"id": "translate", "name": "Translate", "description": "Translate text.", "tags": ["translation", "language"], "examples": ["Translate 'hello' to French"]},
            {"id": "detect", "name": "Detect language", "description": "Detect the language of a text.", "tags": ["language"]}
        ]
    })
}

fn benches(c: &mut Criterion) {
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
    c.bench_function("baseline/ed25519_verify_strict", |b| {
        b.iter(|| pk.verify_strict(black_box(&msg), black_box(&sig)).unwrap())
    });
    // The same verification by ed25519-dalek 2 (libp2p's, on curve25519-dalek 4), whose fastest
    // backend on stable Rust is AVX2: what the IFMA backend of 5 (.cargo/config.toml) saves.
    let pk2 = ed25519_dalek_2::VerifyingKey::from_bytes(pk.as_bytes()).unwrap();
    let sig2 = ed25519_dalek_2::Signature::from_bytes(&key.sign(&msg));
    c.bench_function("baseline/ed25519_verify_strict_dalek2_avx2", |b| {
        b.iter(|| {
            pk2.verify_strict(black_box(&msg), black_box(&sig2))
                .unwrap()
        })
    });

    // The batch lever (docs/PROTOCOL.md "Batch verification"): n signatures of 32 signers, per
    // batch; divide by n for the cost of one.
    let signers: Vec<SecretKey> = (0..32u8).map(|i| SecretKey::from_seed(&[i; 32])).collect();
    for n in [4usize, 16, 64] {
        let msgs: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("request {i} {}", "x".repeat(200)).into_bytes())
            .collect();
        let sigs: Vec<ed25519_dalek::Signature> = (0..n)
            .map(|i| ed25519_dalek::Signature::from_bytes(&signers[i % 32].sign(&msgs[i])))
            .collect();
        let keys: Vec<_> = (0..n).map(|i| signers[i % 32].public()).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();
        c.bench_function(&format!("batch/verify_{n}_alone"), |b| {
            b.iter(|| {
                for i in 0..n {
                    keys[i].verify_strict(refs[i], &sigs[i]).unwrap();
                }
            })
        });
        c.bench_function(&format!("batch/verify_{n}_together"), |b| {
            b.iter(|| ed25519_dalek::verify_batch(black_box(&refs), &sigs, &keys).unwrap())
        });
    }

    let did_str = did.to_string();
    c.bench_function("did_key/resolve", |b| {
        b.iter(|| {
            let d = Did::parse(black_box(&did_str)).unwrap();
            didkey::resolve(&d, Default::default()).unwrap()
        })
    });

    let resolver = Resolver::new(Default::default()).unwrap();
    let card_v = sample_card();
    c.bench_function("card/sign", |b| {
        b.iter(|| card::sign(black_box(&card_v), &key, &kid).unwrap())
    });
    let signed = card::sign(&card_v, &key, &kid).unwrap();
    c.bench_function("card/verify_did_key", |b| {
        b.iter(|| {
            rt.block_on(card::verify(
                black_box(&signed),
                card::KeySource::Did(&resolver),
            ))
            .unwrap()
        })
    });

    // RFC 9421 with a did:wba signer whose document is pinned (no network in benchmarks).
    let wba_did = wba::did_for("agents.example", None, &["bench"], &pk).unwrap();
    let doc = wba::document_for(&wba_did, &key, "2026-01-01T00:00:00Z");
    let keyid = DidUrl::parse(&format!("{wba_did}#key-1")).unwrap();
    let r2 = Resolver::new(Default::default()).unwrap();
    r2.pin(doc).unwrap();
    let verifier = Verifier::new(
        r2,
        VerifyOptions {
            replay_capacity: 10_000_000,
            ..Default::default()
        },
    );
    let url = "https://peer.example:8443/a2a/v1?x=1";
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"user","parts":[{"text":"hello"}]}}}"#;
    let now = 1_800_000_000;
    c.bench_function("rfc9421/sign", |b| {
        b.iter(|| {
            httpsig::sign(
                &key,
                &keyid,
                "POST",
                url,
                black_box(body),
                now,
                "0123456789abcdef0123456789abcdef",
            )
            .unwrap()
        })
    });
    let mut n = 0u64;
    c.bench_function("rfc9421/verify", |b| {
        b.iter_batched(
            || {
                n += 1;
                let h = httpsig::sign(&key, &keyid, "POST", url, body, now, &format!("{n:032x}"))
                    .unwrap();
                let mut map = http::HeaderMap::new();
                h.apply(&mut map);
                map
            },
            |map| {
                rt.block_on(verifier.verify("POST", url, &map, body, now))
                    .unwrap()
            },
            BatchSize::SmallInput,
        )
    });

    // Delegation (issue 18): a 3-link chain principal → a → b → caller, as an agent checks it
    // for the caller: every link's shape, parent, attenuation, times and binding ("check"),
    // and with it the three eddsa-jcs-2022 proofs ("verify"; issuers are did:key, documents
    // from the resolver's cache); "check" alone is what a chain costs once its links are
    // remembered as verified (node/src/hosted/authority.rs).
    use agentnet_did::delegation::{self, Capability, Chain, Grant, Request, Target};
    let people: Vec<SecretKey> = (1..=4u8).map(|i| SecretKey::from_seed(&[i; 32])).collect();
    let kids: Vec<DidUrl> = people
        .iter()
        .map(|k| {
            let d = k.did_key();
            d.with_fragment(d.method_specific_id())
        })
        .collect();
    let mut chain: Option<serde_json::Value> = None;
    for i in 0..3 {
        let cap = Capability {
            ops: vec!["send".into(), "get".into()],
            skills: Some(vec!["books".into()]),
            depth: 2 - i as u32,
            ..Default::default()
        };
        let now = delegation::now();
        let grant = Grant {
            audience: kids[i + 1].did(),
            capability: &cap,
            valid_from: now - 60,
            valid_until: now + 3600,
        };
        chain = Some(delegation::issue(&people[i], &kids[i], &grant, chain.as_ref()).unwrap());
    }
    let chain = chain.unwrap();
    let caller = kids[3].did().to_string();
    let skills = vec!["books".to_string()];
    let principals = vec![kids[0].did().to_string()];
    let req = Request {
        principals: Some(&principals),
        caller: &caller,
        target: Target {
            agent: "did:key:z6MkAgent",
            skills: &skills,
            op: "send",
        },
        now: delegation::now(),
    };
    c.bench_function("delegation/check_3_links", |b| {
        b.iter(|| {
            let parsed = Chain::parse(black_box(&chain)).unwrap();
            parsed.check(&req).unwrap()
        })
    });
    // The same with the links parsed before (node/src/hosted/authority.rs parses with a memo).
    let memo = delegation::Memo::default();
    Chain::parse_with(&chain, Some(&memo)).unwrap();
    c.bench_function("delegation/check_3_links_memo", |b| {
        b.iter(|| {
            let parsed = Chain::parse_with(black_box(&chain), Some(&memo)).unwrap();
            parsed.check(&req).unwrap()
        })
    });
    // What a receipt pays to name the chain: its RFC 8785 bytes hashed, or the memo's.
    c.bench_function("delegation/chain_digest", |b| {
        b.iter(|| delegation::digest(black_box(&chain)))
    });
    c.bench_function("delegation/chain_digest_memo", |b| {
        b.iter(|| memo.digest(black_box(&chain)))
    });
    c.bench_function("delegation/verify_3_links", |b| {
        b.iter(|| {
            rt.block_on(delegation::verify(black_box(&chain), &req, &resolver))
                .unwrap()
        })
    });

    // A task receipt (issue 18) as a caller checks it: the kid's did:key document from the
    // resolver's cache, the JWS, the payload's RFC 8785 bytes, the task, agent and caller.
    use agentnet_did::receipt::{self, Expected, Receipt};
    let r = Receipt {
        v: receipt::VERSION,
        task_id: "3f0c2a4e-8f4b-4d0e-9f55-1b2c3d4e5f60".into(),
        context_id: "6a7b8c9d-0e1f-4a2b-8c3d-4e5f6a7b8c9d".into(),
        agent: did.to_string(),
        caller: Some(caller.clone()),
        delegation: Some(delegation::digest(&chain)),
        messages: vec![receipt::digest(b"message")],
        artifacts: vec![receipt::digest(b"artifact")],
        state: "TASK_STATE_COMPLETED".into(),
        created: "2026-12-01T19:00:00Z".into(),
        ended: "2026-12-01T19:00:01Z".into(),
        sub_receipts: vec![],
    };
    let jws = receipt::sign(&r, &key, &kid);
    let expect = Expected {
        task_id: &r.task_id,
        agent: &r.agent,
        caller: r.caller.as_deref(),
        message: r.messages.first().map(String::as_str),
    };
    c.bench_function("receipt/verify", |b| {
        b.iter(|| {
            rt.block_on(receipt::verify(black_box(&jws), &resolver, &expect))
                .unwrap()
        })
    });
}

criterion_group!(name = did; config = Criterion::default().sample_size(50); targets = benches);
criterion_main!(did);
