//! A node keeps finding the network: a bootstrap peer that is down at first and comes up later
//! is connected to, a node whose only peer restarted connects to it again, bootstrap dials are
//! reported per address, and a discover whose provider went away (its address now a black
//! hole) answers with what the node knows within its bound instead of waiting on it.

mod common;

use std::time::{Duration, Instant};

use agentnet_did::{card, Did, DidUrl, Resolver, SecretKey};
use agentnet_discovery::advert::{self, Draft, Limits, Validator};
use agentnet_discovery::net::{self, BootstrapState, Client, Config, TransportKind};
use agentnet_discovery::store::Store;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A node with its own shutdown token (to stop it alone) and its data directory.
struct TestNode {
    client: Client,
    task: tokio::task::JoinHandle<()>,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl TestNode {
    /// Stop the node and wait until nothing of it runs (its listener is gone).
    async fn stop(self) {
        self.stop.cancel();
        drop(self.client);
        self.task.await.unwrap();
    }
}

fn key(seed: u8) -> SecretKey {
    let mut s = [seed; 32];
    s[31] = 0x5a;
    SecretKey::from_seed(&s)
}

fn peer_id(seed: u8) -> PeerId {
    let mut seed = key(seed).seed();
    libp2p::identity::Keypair::ed25519_from_bytes(&mut seed)
        .unwrap()
        .public()
        .to_peer_id()
}

async fn start(seed: u8, cfg: Config) -> TestNode {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let validator = Validator::new(
        Resolver::new(Default::default()).unwrap(),
        Limits::default(),
    );
    let stop = CancellationToken::new();
    let (client, task) = net::spawn(&key(seed), cfg, store, validator, stop.clone())
        .await
        .unwrap();
    TestNode {
        client,
        task,
        stop,
        _dir: dir,
    }
}

fn memory(listen: Option<u64>, bootstrap: Vec<Multiaddr>) -> Config {
    Config {
        listen: listen
            .map(|p| format!("/memory/{p}").parse().unwrap())
            .into_iter()
            .collect(),
        bootstrap,
        transport: TransportKind::Memory,
        heartbeat: Duration::from_millis(200),
        redial_peers: 0,
        ..Default::default()
    }
}

fn memory_addr(port: u64, seed: u8) -> Multiaddr {
    format!("/memory/{port}/p2p/{}", peer_id(seed))
        .parse()
        .unwrap()
}

async fn connected(c: &Client, peer: PeerId) -> bool {
    c.peers()
        .await
        .unwrap()
        .iter()
        .any(|p| p.peer_id == peer.to_string())
}

/// Poll `check` every 100 ms until it holds or `limit` passes; whether it held.
async fn within<F, Fut>(limit: Duration, check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A did:key agent's advertisement with one `tag`, naming `peer` as its node.
fn advert(seed: u8, peer: &Client, tag: &str) -> (Vec<u8>, String) {
    let key = SecretKey::from_seed(&[seed; 32]);
    let did: Did = key.did_key();
    let kid: DidUrl = did.with_fragment(did.method_specific_id());
    let c = json!({
        "name": "Translator", "description": "Translates.", "version": "1.0.0",
        "supportedInterfaces": [{"url": "https://agents.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "t", "name": "Translate", "description": "Translate text.", "tags": [tag]}]
    });
    let signed = card::sign(&c, &key, &kid).unwrap();
    let now = net::unix_now();
    let ad = advert::sign(
        Draft {
            did: did.clone(),
            kid,
            card: signed,
            peer_id: peer.peer_id().to_string(),
            addrs: vec![],
            seq: 1,
            issued_at: now,
            expires_at: now + 3600,
        },
        &key,
    );
    (serde_json::to_vec(&ad).unwrap(), did.to_string())
}

async fn has(c: &Client, did: &str) -> bool {
    c.store().get(did, net::unix_now()).unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_peer_that_comes_up_late_is_connected_to_and_its_gossip_arrives() {
    let port = common::memory_port(0);
    // B starts first: its bootstrap dial to A fails.
    let b = start(
        2,
        memory(Some(common::memory_port(0)), vec![memory_addr(port, 1)]),
    )
    .await;
    assert!(
        within(Duration::from_secs(5), || async {
            b.client.bootstrap_status()[0].state == BootstrapState::Failed
        })
        .await,
        "{:?}",
        b.client.bootstrap_status()
    );
    let status = b.client.bootstrap_status();
    assert_eq!(status[0].address, memory_addr(port, 1).to_string());
    assert!(status[0].last_error.is_some(), "{status:?}");
    // Kademlia's own first attempts (a bootstrap query when A entered the routing table) are
    // over by then.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // A comes up; nothing on B but its own redials can connect them (no discover runs, and A
    // knows nothing of B).
    let a = start(1, memory(Some(port), vec![])).await;
    assert!(
        within(Duration::from_secs(15), || connected(
            &b.client,
            a.client.peer_id()
        ))
        .await,
        "B never connected to its bootstrap peer A after A came up: {:?}",
        b.client.bootstrap_status()
    );
    assert_eq!(
        b.client.bootstrap_status()[0].state,
        BootstrapState::Connected
    );
    // And they are one network: A's gossip reaches B (mesh after a few heartbeats).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (ad, did) = advert(7, &a.client, "late-bootstrap");
    a.client.publish(ad).await.unwrap();
    assert!(
        within(Duration::from_secs(10), || has(&b.client, &did)).await,
        "A's gossip never reached B"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_only_peer_restarted_connects_to_it_again() {
    let port = common::memory_port(0);
    let a = start(3, memory(Some(port), vec![])).await;
    let b = start(
        4,
        memory(Some(common::memory_port(0)), vec![memory_addr(port, 3)]),
    )
    .await;
    let a_id = a.client.peer_id();
    assert!(within(Duration::from_secs(10), || connected(&b.client, a_id)).await);
    a.stop().await;
    assert!(
        within(Duration::from_secs(10), || async {
            !connected(&b.client, a_id).await
        })
        .await
    );
    assert_eq!(
        b.client.bootstrap_status()[0].state,
        BootstrapState::Pending
    );
    // A restarts with the same key on the same address.
    let a = start(3, memory(Some(port), vec![])).await;
    assert!(
        within(Duration::from_secs(15), || connected(&b.client, a_id)).await,
        "B never reconnected to A: {:?}",
        b.client.bootstrap_status()
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (ad, did) = advert(8, &a.client, "restarted-peer");
    a.client.publish(ad).await.unwrap();
    assert!(
        within(Duration::from_secs(10), || has(&b.client, &did)).await,
        "A's gossip never reached B after A restarted"
    );
}

/// A TCP listener that accepts connections and never says a word: the address of a peer that
/// went away, now a black hole (a frozen process, a firewall that accepts). Runs until the
/// test process ends.
fn black_hole(port: u16) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().take(256).flatten() {
            held.push(s);
        }
    });
}

fn tcp(listen: &str, bootstrap: Vec<Multiaddr>) -> Config {
    Config {
        listen: vec![listen.parse().unwrap()],
        bootstrap,
        heartbeat: Duration::from_millis(200),
        redial_peers: 0,
        ..Default::default()
    }
}

async fn tcp_listen_addr(c: &Client) -> Multiaddr {
    for _ in 0..100 {
        if let Some(a) = c.listen_addrs().await.unwrap().into_iter().next() {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no listen address");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discover_whose_provider_went_away_answers_with_what_is_known_within_its_bound() {
    let a = start(5, tcp("/ip4/127.0.0.1/tcp/0", vec![])).await;
    let a_addr = tcp_listen_addr(&a.client).await;
    let port = a_addr
        .iter()
        .find_map(|p| match p {
            Protocol::Tcp(p) => Some(p),
            _ => None,
        })
        .unwrap();
    let (ad, did) = advert(9, &a.client, "gone-provider");
    a.client.publish(ad).await.unwrap();
    let b = start(
        6,
        tcp(
            "/ip4/127.0.0.1/tcp/0",
            vec![a_addr.with(Protocol::P2p(a.client.peer_id()))],
        ),
    )
    .await;
    // B finds the agent through the DHT (A published before B came).
    let found =
        common::discover_within(&b.client, &["gone-provider"], Duration::from_secs(20)).await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].did, did);
    // A goes away; its address is now a black hole.
    a.stop().await;
    black_hole(port);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // B still answers from its index, without waiting on A: Kademlia gives the unresponsive
    // peer 10 s, a fetch 4 s. Asked for more than it has, so it does go to the network.
    for _ in 0..2 {
        let started = Instant::now();
        let found = b
            .client
            .discover(&["gone-provider".to_string()], 5)
            .await
            .unwrap();
        let took = started.elapsed();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].did, did);
        assert!(
            took < net::DISCOVER_FETCH_TIMEOUT,
            "discover waited {took:?} on a provider that went away"
        );
    }
}
