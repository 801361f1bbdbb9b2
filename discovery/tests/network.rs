//! Many nodes in one process over libp2p's memory transport: gossip reaches everyone, a late
//! joiner finds agents through the DHT, updates replace old cards, adversarial gossip is
//! refused by the first node that sees it and never reaches a third, and a did:web agent's
//! advertisement is resolved from its document server and reaches every node.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentnet_did::{card, Did, DidUrl, Resolver, SecretKey};
use agentnet_discovery::advert::{self, Draft, Limits, Validator};
use agentnet_discovery::net::{self, Client, Config, TransportKind};
use agentnet_discovery::store::Store;
use libp2p::Multiaddr;
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct TestNode {
    client: Client,
    addr: Multiaddr,
    _dir: tempfile::TempDir,
}

async fn start_node(seed: u8, shutdown: &CancellationToken) -> TestNode {
    start_node_with(seed, shutdown, true).await
}

/// A node; with `listen` false it only dials out, so no other node can learn an address for it
/// and connect to it: the adversary below stays behind the one node it dials.
async fn start_node_with(seed: u8, shutdown: &CancellationToken, listen_on: bool) -> TestNode {
    let validator = Validator::new(
        Resolver::new(Default::default()).unwrap(),
        Limits::default(),
    );
    start_node_validating(seed, shutdown, listen_on, validator).await
}

async fn start_node_validating(
    seed: u8,
    shutdown: &CancellationToken,
    listen_on: bool,
    validator: Validator,
) -> TestNode {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let port = common::memory_port(0);
    let listen: Multiaddr = format!("/memory/{port}").parse().unwrap();
    let cfg = Config {
        listen: if listen_on {
            vec![listen.clone()]
        } else {
            vec![]
        },
        transport: TransportKind::Memory,
        heartbeat: Duration::from_millis(200),
        ..Default::default()
    };
    let mut s = [seed; 32];
    s[31] = 0xa5;
    let key = SecretKey::from_seed(&s);
    let (client, _task) = net::spawn(&key, cfg, store, validator, shutdown.clone())
        .await
        .unwrap();
    let addr = listen.with(libp2p::multiaddr::Protocol::P2p(client.peer_id()));
    TestNode {
        client,
        addr,
        _dir: dir,
    }
}

/// `n` nodes, each dialing the previous one and a node 3 back: a connected, low-degree graph.
async fn network(n: usize, shutdown: &CancellationToken) -> Vec<TestNode> {
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let node = start_node(i as u8 + 1, shutdown).await;
        for back in [1usize, 3] {
            if i >= back {
                let addr: Multiaddr = nodes
                    .get(i - back)
                    .map(|p: &TestNode| p.addr.clone())
                    .unwrap();
                node.client.dial(addr).await.unwrap();
            }
        }
        nodes.push(node);
    }
    // Let gossipsub build its mesh (a few heartbeats).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nodes
}

fn sample_card(desc: &str, tag: &str) -> serde_json::Value {
    json!({
        "name": "Translator", "description": desc, "version": "1.0.0",
        "supportedInterfaces": [{"url": "https://agents.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "t", "name": "Translate", "description": "Translate text.", "tags": [tag, "Language"]}]
    })
}

struct Agent {
    key: SecretKey,
    did: Did,
    kid: DidUrl,
}

impl Agent {
    fn new(seed: u8) -> Self {
        let key = SecretKey::from_seed(&[seed; 32]);
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        Agent { key, did, kid }
    }

    fn advert(
        &self,
        peer: &Client,
        seq: u64,
        desc: &str,
        tag: &str,
        issued_at: u64,
        ttl: u64,
    ) -> Vec<u8> {
        let signed = card::sign(&sample_card(desc, tag), &self.key, &self.kid).unwrap();
        let ad = advert::sign(
            Draft {
                did: self.did.clone(),
                kid: self.kid.clone(),
                card: signed,
                peer_id: peer.peer_id().to_string(),
                addrs: vec![],
                seq,
                issued_at,
                expires_at: issued_at + ttl,
            },
            &self.key,
        );
        serde_json::to_vec(&ad).unwrap()
    }
}

/// Wait until `check` holds on every node, or fail after `limit`.
async fn eventually<F, Fut>(nodes: &[TestNode], limit: Duration, what: &str, check: F)
where
    F: Fn(&Client) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        let mut missing = 0;
        for n in nodes {
            if !check(&n.client).await {
                missing += 1;
            }
        }
        if missing == 0 {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: {missing} of {} nodes still missing after {limit:?}",
            nodes.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn local_seq(c: &Client, did: &str, now: u64) -> Option<u64> {
    c.store().get(did, now).unwrap().map(|a| a.seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_nodes_gossip_late_joiner_uses_the_dht_and_updates_replace() {
    let shutdown = CancellationToken::new();
    let nodes = network(20, &shutdown).await;
    let agent = Agent::new(77);
    let now = net::unix_now();
    let did = agent.did.to_string();

    let v1 = agent.advert(&nodes[0].client, 1, "v1", "translation", now, 3600);
    let accepted = nodes[0].client.publish(v1).await.unwrap();
    assert_eq!(accepted.tags, vec!["language", "translation"]);

    eventually(&nodes, Duration::from_secs(20), "gossip of v1", |c| {
        let c = c.clone();
        let did = did.clone();
        async move { local_seq(&c, &did, net::unix_now()) == Some(1) }
    })
    .await;
    for n in &nodes {
        let found = n
            .client
            .discover(&["Translation".into()], 10)
            .await
            .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].did, did);
    }

    // A node that joins after the gossip: nothing in its store, found through the DHT.
    let late = start_node(200, &shutdown).await;
    late.client.dial(nodes[10].addr.clone()).await.unwrap();
    assert!(local_seq(&late.client, &did, now).is_none());
    let found = common::discover_within(
        &late.client,
        &["translation", "language"],
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        found.len(),
        1,
        "late joiner did not find the agent through the DHT"
    );
    assert_eq!(found[0].did, did);
    assert_eq!(late.client.stats().accepted.get(), 1);

    // An update with a higher sequence replaces the card everywhere.
    let v2 = agent.advert(
        &nodes[5].client,
        2,
        "v2",
        "translation",
        net::unix_now(),
        3600,
    );
    nodes[5].client.publish(v2).await.unwrap();
    eventually(&nodes, Duration::from_secs(20), "gossip of v2", |c| {
        let c = c.clone();
        let did = did.clone();
        async move { local_seq(&c, &did, net::unix_now()) == Some(2) }
    })
    .await;
    let card_desc = |c: &Client| {
        let a = c.store().get(&did, net::unix_now()).unwrap().unwrap();
        let ad: serde_json::Value = serde_json::from_slice(&a.bytes).unwrap();
        ad["card"]["description"].as_str().unwrap().to_owned()
    };
    for n in &nodes {
        assert_eq!(card_desc(&n.client), "v2");
    }
    shutdown.cancel();
}

/// Kademlia (libp2p-kad 0.48, 0.49) bootstraps by itself whenever a peer enters a routing table of
/// fewer than 20, which in a network this small is every new peer, and each bootstrap is a
/// lookup per bucket. A node joins with one lookup of its own id and cuts Kademlia's bootstraps
/// short; through that lookup a joining node still meets peers it never dialed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_looks_itself_up_once_and_still_meets_peers_it_never_dialed() {
    let shutdown = CancellationToken::new();
    let nodes = network(12, &shutdown).await;
    let late = start_node(201, &shutdown).await;
    late.client.dial(nodes[0].addr.clone()).await.unwrap();

    // Its lookup reaches beyond the node it dialed.
    let start = Instant::now();
    let met = loop {
        let peers = late.client.peers().await.unwrap();
        if peers.len() >= 4 || start.elapsed() > Duration::from_secs(20) {
            break peers.len();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        met >= 4,
        "the joining node met {met} peers, not beyond the one it dialed"
    );

    // Meanwhile the peers entering its table (and the other nodes') armed Kademlia's own
    // bootstraps: they were cut. Each node joined once. The cut runs after a swarm event, and
    // in a network this small a bootstrap can be a single lookup that starts and ends inside
    // the swarm's own polling, before any event reaches the task: one may then have run to
    // its end (seen once in CI), never more. Without the cut, nodes completed 3.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all: Vec<&Client> = nodes.iter().chain([&late]).map(|n| &n.client).collect();
    let mut completed = 0;
    for (i, c) in all.iter().enumerate() {
        let done = c.stats().bootstraps.get();
        assert!(done <= 1, "node {i} completed {done} bootstraps");
        completed += done;
        assert_eq!(c.stats().joins.get(), 1, "node {i}");
    }
    assert!(
        completed <= 3,
        "{completed} bootstraps ran to their end across {} nodes",
        all.len()
    );
    let cut: u64 = all.iter().map(|c| c.stats().bootstraps_cut.get()).sum();
    assert!(
        cut >= 1,
        "no automatic bootstrap was started, so none was cut"
    );
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adversarial_gossip_is_refused_and_never_reaches_a_third_node() {
    let shutdown = CancellationToken::new();
    // evil -> honest1 - honest2 - honest3. Evil listens nowhere, so only honest1 is connected
    // to it; everything evil sends must stop at honest1.
    let mut nodes: Vec<TestNode> = Vec::new();
    for i in 0..4u8 {
        let n = start_node_with(100 + i, &shutdown, i != 0).await;
        nodes.push(n);
    }
    nodes[0].client.dial(nodes[1].addr.clone()).await.unwrap();
    nodes[2].client.dial(nodes[1].addr.clone()).await.unwrap();
    nodes[3].client.dial(nodes[2].addr.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (evil, first, third) = (&nodes[0].client, &nodes[1].client, &nodes[3].client);
    let now = net::unix_now();
    let agent = Agent::new(50);
    let other = Agent::new(51);

    // Honest seq 5 first, so that a replay of a lower sequence has something to lose against.
    let honest = agent.advert(&nodes[2].client, 5, "honest", "forgery-test", now, 3600);
    nodes[2].client.publish(honest).await.unwrap();
    eventually(&nodes[1..], Duration::from_secs(15), "honest seq 5", |c| {
        let c = c.clone();
        let did = agent.did.to_string();
        async move { local_seq(&c, &did, net::unix_now()) == Some(5) }
    })
    .await;

    let mut bad: Vec<(&str, Vec<u8>)> = Vec::new();
    // Forged: a valid advertisement with one byte of the description changed after signing.
    let good = agent.advert(evil, 6, "honest", "forgery-test", now, 3600);
    let forged = String::from_utf8(good.clone())
        .unwrap()
        .replace("\"honest\"", "\"hacked\"");
    bad.push(("forged signature", forged.into_bytes()));
    // Key not in the DID document: signed by another agent's key under this DID's name.
    let mut stolen: serde_json::Value =
        serde_json::from_slice(&other.advert(evil, 7, "x", "forgery-test", now, 3600)).unwrap();
    stolen["did"] = json!(agent.did.to_string());
    bad.push((
        "key not in the DID document",
        serde_json::to_vec(&stolen).unwrap(),
    ));
    bad.push((
        "replayed lower sequence",
        agent.advert(evil, 3, "old", "forgery-test", now, 3600),
    ));
    bad.push((
        "expired",
        agent.advert(evil, 8, "e", "forgery-test", now - 7200, 3600),
    ));
    bad.push((
        "future-dated",
        agent.advert(evil, 9, "f", "forgery-test", now + 3600, 3600),
    ));
    // Over our 64 KiB limit, under gossipsub's transmit cap, so our check is what refuses it.
    let big = agent.advert(evil, 10, &"x".repeat(66_000), "forgery-test", now, 3600);
    bad.push(("oversized", big));
    bad.push(("malformed bytes", b"\x00\xffnot json at all".to_vec()));
    // Properly signed, a higher sequence, and a right-to-left override in the description
    // (shown as "…txt.exe", it is "…exe.txt"): refused for the hidden character.
    bad.push((
        "hidden character",
        agent.advert(evil, 12, "report\u{202e}txt.exe", "forgery-test", now, 3600),
    ));

    for (what, bytes) in &bad {
        evil.gossip_unchecked(bytes.clone())
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    // Meanwhile an honest update keeps flowing.
    let update = agent.advert(
        &nodes[2].client,
        11,
        "honest update",
        "forgery-test",
        now,
        3600,
    );
    nodes[2].client.publish(update).await.unwrap();
    eventually(&nodes[1..], Duration::from_secs(15), "honest update", |c| {
        let c = c.clone();
        let did = agent.did.to_string();
        async move { local_seq(&c, &did, net::unix_now()) == Some(11) }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Junk was refused where it arrived. (Which reasons get counted depends on timing: once
    // the first refusals drive the adversary's gossipsub score below the graylist threshold,
    // its later messages are dropped without validation. The reason for each kind is checked
    // one by one in `advert`'s unit tests.)
    assert!(first.stats().rejected_total() > 0);
    for n in &nodes[1..] {
        let held = n
            .client
            .store()
            .get(&agent.did.to_string(), net::unix_now())
            .unwrap()
            .unwrap();
        assert_eq!(held.seq, 11);
        assert!(!String::from_utf8_lossy(&held.bytes).contains("hacked"));
    }
    // No honest node forwarded any of it: the only peer anyone refused gossip from is the
    // adversary (a node it dialed on its own through the DHT may refuse it first-hand too).
    let evil_id = evil.peer_id();
    for n in &nodes[1..] {
        let from = n.client.stats().rejected_from.lock().unwrap().clone();
        assert!(
            from.keys().all(|p| *p == evil_id),
            "junk forwarded by an honest node: {from:?}"
        );
    }
    assert_eq!(third.stats().accepted.get(), 2);
    assert_eq!(
        local_seq(third, &agent.did.to_string(), net::unix_now()),
        Some(11)
    );
    shutdown.cancel();
}

/// A peer that has used its gossip budget (`per_peer_messages` in a window) on replays, which
/// cost it nothing and are only ignored, then relays a fresh advertisement first: the victim
/// must still take that advertisement from an honest peer. Before, the victim ignored the
/// over-budget copy one message at a time, gossipsub kept its id as seen, and the honest
/// copy that followed was dropped as a duplicate: the victim never had it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_over_its_budget_cannot_make_a_node_drop_an_honest_advertisement() {
    let shutdown = CancellationToken::new();
    // evil -> victim <- honest; neither outer node listens, so they never meet.
    let victim = start_node_with(120, &shutdown, true).await;
    let evil = start_node_with(121, &shutdown, false).await;
    let honest = start_node_with(122, &shutdown, false).await;
    evil.client.dial(victim.addr.clone()).await.unwrap();
    honest.client.dial(victim.addr.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let now = net::unix_now();

    // An advertisement the victim holds, for the replays.
    let known = Agent::new(60);
    let y = known.advert(&honest.client, 1, "known", "budget-test", now, 3600);
    honest.client.publish(y.clone()).await.unwrap();
    eventually(
        std::slice::from_ref(&victim),
        Duration::from_secs(10),
        "the known advertisement",
        |c| {
            let c = c.clone();
            let did = known.did.to_string();
            async move { local_seq(&c, &did, net::unix_now()) == Some(1) }
        },
    )
    .await;

    // The whole budget in replays: each the same signed JSON with more spaces after its
    // opening brace, so a new gossipsub id each time.
    let budget = Config::default().per_peer_messages as usize;
    for i in 1..=budget {
        let mut framed = b"{".to_vec();
        framed.extend(std::iter::repeat_n(b' ', i));
        framed.extend_from_slice(&y[1..]);
        evil.client.gossip_unchecked(framed).await.unwrap();
    }
    // Then a fresh advertisement, relayed by the adversary first and by the honest peer after.
    let fresh = Agent::new(61);
    let x = fresh.advert(&honest.client, 1, "fresh", "budget-test", now, 3600);
    tokio::time::sleep(Duration::from_millis(500)).await;
    evil.client.gossip_unchecked(x.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    honest.client.gossip_unchecked(x).await.unwrap();

    eventually(
        std::slice::from_ref(&victim),
        Duration::from_secs(5),
        "the fresh advertisement, from the honest peer",
        |c| {
            let c = c.clone();
            let did = fresh.did.to_string();
            async move { local_seq(&c, &did, net::unix_now()) == Some(1) }
        },
    )
    .await;
    assert!(victim.client.stats().muted.get() >= 1);
    // The replays were ignored, none penalized.
    assert_eq!(victim.client.stats().rejected_total(), 0);
    shutdown.cancel();
}

/// A did:web document server on loopback (plain HTTP, which the resolver allows for loopback
/// hosts only when told to): answers every request with `make_body(port)` and counts them.
fn serve_did_document(make_body: impl FnOnce(u16) -> String) -> (u16, std::sync::Arc<AtomicU64>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = make_body(port);
    let hits = std::sync::Arc::new(AtomicU64::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let mut got = Vec::new();
            // Read the request head (no body on a GET).
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            counted.fetch_add(1, Ordering::SeqCst);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/did+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    (port, hits)
}

/// A did:web agent: its document is fetched over HTTP by each node that validates its
/// advertisement (once, then cached), and the advertisement reaches every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn did_web_advertisement_is_resolved_and_reaches_every_node() {
    let key = SecretKey::from_seed(&[91; 32]);
    // The port is in the DID, so the server binds first and the document is made from it.
    let (port, hits) = serve_did_document(|port| {
        let did = format!("did:web:localhost%3A{port}");
        let kid = format!("{did}#key-1");
        json!({
            "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
            "id": did,
            "verificationMethod": [{
                "id": kid, "type": "Multikey", "controller": did,
                "publicKeyMultibase": agentnet_did::key::encode_multikey(&key.public()),
            }],
            "assertionMethod": [kid],
        })
        .to_string()
    });
    let did = Did::parse(&format!("did:web:localhost%3A{port}")).unwrap();
    let kid = DidUrl::parse(&format!("{did}#key-1")).unwrap();

    let shutdown = CancellationToken::new();
    let limits = Limits {
        web_jitter: Duration::from_millis(50),
        ..Limits::default()
    };
    let mut nodes: Vec<TestNode> = Vec::new();
    for i in 0..4u8 {
        let resolver = Resolver::new(agentnet_did::resolver::Options {
            http: agentnet_did::web::HttpOptions {
                allow_http_loopback: true,
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        let node = start_node_validating(
            150 + i,
            &shutdown,
            true,
            Validator::new(resolver, limits.clone()),
        )
        .await;
        if let Some(prev) = nodes.last() {
            node.client.dial(prev.addr.clone()).await.unwrap();
        }
        nodes.push(node);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let now = net::unix_now();
    let signed = card::sign(&sample_card("web agent", "weather"), &key, &kid).unwrap();
    let ad = advert::sign(
        Draft {
            did: did.clone(),
            kid: kid.clone(),
            card: signed,
            peer_id: nodes[0].client.peer_id().to_string(),
            addrs: vec![],
            seq: 1,
            issued_at: now,
            expires_at: now + 3600,
        },
        &key,
    );
    nodes[0]
        .client
        .publish(serde_json::to_vec(&ad).unwrap())
        .await
        .expect("the publishing node resolves and accepts it");
    let did_s = did.to_string();
    eventually(
        &nodes,
        Duration::from_secs(20),
        "did:web advert everywhere",
        |c| {
            let ok = local_seq(c, &did_s, now) == Some(1);
            async move { ok }
        },
    )
    .await;
    let fetched = hits.load(Ordering::SeqCst);
    assert!(
        (1..=4).contains(&fetched),
        "each node fetches the document at most once: {fetched} fetches for 4 nodes"
    );
    // The traffic counters (read from the libp2p metrics) saw the gossip that carried it.
    for n in &nodes[1..] {
        let t = n.client.traffic();
        assert!(t.gossip_unique >= 1, "{t:?}");
        assert!(t.gossip_received >= t.gossip_unique, "{t:?}");
        assert!(t.bytes_in > 0 && t.bytes_out > 0, "{t:?}");
    }
    shutdown.cancel();
}
