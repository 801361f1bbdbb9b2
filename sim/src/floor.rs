//! The floor: a bare rust-libp2p gossipsub network, measured in the same run as the agentnet
//! nodes (`simulate --floor`), with the same transport (memory, Noise, Yamux), the same links,
//! the same dial plan and mesh degree, and no validation, no store, no DHT. What agentnet adds
//! on top of gossipsub is the difference between the two.
//!
//! Each message is `--floor-bytes` (2 KiB) whose first 8 bytes are its number; a node records
//! the first copy it gets. gossipsub's own message id (the payload's SHA-256, as agentnet's)
//! drops the duplicates.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_discovery::net::Links;
use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAuthenticity, MessageId};
use libp2p::multiaddr::Protocol;
use libp2p::swarm::SwarmEvent;
use libp2p::Swarm;
use libp2p::{Multiaddr, PeerId};
use rand::Rng as _;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use tokio::sync::{mpsc, Notify};

/// Memory ports of the floor's nodes start here (the agentnet nodes' start at 1; the memory
/// transport's ports are one namespace per process).
pub const BASE_PORT: u64 = 1_000_000;

/// What the floor is asked to do.
pub struct Plan<'a> {
    pub nodes: usize,
    pub dials: &'a [(usize, usize)],
    pub mesh: usize,
    pub heartbeat: Duration,
    pub warmup: Duration,
    pub messages: usize,
    pub bytes: usize,
    pub gap: Duration,
    pub deadline: Duration,
    pub seed: u64,
    /// IDONTWANT as the node's (`net::Config::gossip_idontwant`).
    pub idontwant: bool,
}

enum Cmd {
    Dial(Multiaddr),
    Publish(Vec<u8>),
}

#[derive(Default)]
struct Seen {
    by_msg: Mutex<HashMap<u64, Vec<Instant>>>,
    notify: Notify,
}

/// A bare gossipsub configuration as the floor and the eclipse attackers use it: anonymous
/// messages whose id is the payload's SHA-256 (as the node's), mesh degree `mesh` (at least 2),
/// the node's send queue per connection. The caller adds what differs (validation, IDONTWANT)
/// before `build`.
///
/// The queue: the node's length, so that both drop a slow peer's copies at the same point
/// (gossipsub 0.50's queues grow as they fill; 0.49's default of 5 000 allocated 2 500 slots,
/// ~425 KiB, per connection when it opened, and 1 000 floor nodes took 5 GB more than the
/// node's). Its length is room for a burst, not speed: the floor's messages go one at a time.
pub fn bare_config(
    mesh: usize,
    heartbeat: Duration,
    max_transmit: usize,
) -> gossipsub::ConfigBuilder {
    let mut builder = gossipsub::ConfigBuilder::default();
    builder
        .validation_mode(gossipsub::ValidationMode::Anonymous)
        .message_id_fn(|m: &gossipsub::Message| MessageId::new(&Sha256::digest(&m.data)))
        .max_transmit_size(max_transmit)
        .heartbeat_interval(heartbeat)
        .connection_handler_queue_len(agentnet_discovery::net::GOSSIP_QUEUE_LEN);
    agentnet_discovery::net::mesh_degree(&mut builder, mesh.max(2));
    builder
}

/// A bare rust-libp2p gossipsub swarm over the simulator's memory transport (Noise, Yamux,
/// `links`), subscribed to `topic`, connections kept while idle: the floor's nodes and the
/// eclipse attackers. `what` names it in errors.
pub fn bare_swarm(
    cfg: gossipsub::Config,
    links: Option<Links>,
    topic: &IdentTopic,
    what: &str,
) -> Result<Swarm<gossipsub::Behaviour>, String> {
    let mut swarm = libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_other_transport(|key| {
            agentnet_discovery::net::links::memory_transport(key, links)
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        })
        .map_err(|e| format!("{what} transport: {e}"))?
        .with_behaviour(|_| {
            gossipsub::Behaviour::new(MessageAuthenticity::Anonymous, cfg)
                .map_err(|e| format!("{what} gossipsub: {e}").into())
        })
        .map_err(|e| format!("{what} behaviour: {e}"))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(3600)))
        .build();
    swarm
        .behaviour_mut()
        .subscribe(topic)
        .map_err(|e| format!("{what} subscribe: {e}"))?;
    Ok(swarm)
}

/// Runs the floor network and returns its figures: reach times per message and delivery.
/// Duplicates are not among them: gossipsub drops a copy it has seen before the application
/// sees it, and the floor keeps no metrics registry to count them.
pub async fn run(p: &Plan<'_>, links_of: &dyn Fn(usize) -> Option<Links>) -> Result<Value, String> {
    let started = Instant::now();
    let topic = IdentTopic::new("agentnet-floor");
    let seen = Arc::new(Seen::default());
    let mut cmds = Vec::with_capacity(p.nodes);
    let mut addrs = Vec::with_capacity(p.nodes);
    let stop = tokio_util::sync::CancellationToken::new();
    let mut tasks = Vec::new();
    for i in 0..p.nodes {
        let mut builder = bare_config(p.mesh, p.heartbeat, p.bytes + 4096);
        agentnet_discovery::net::idontwant(&mut builder, p.idontwant);
        let cfg = builder
            .build()
            .map_err(|e| format!("floor gossipsub config: {e}"))?;
        let mut swarm = bare_swarm(cfg, links_of(i), &topic, "floor")?;
        let addr = Multiaddr::empty().with(Protocol::Memory(BASE_PORT + i as u64));
        swarm
            .listen_on(addr.clone())
            .map_err(|e| format!("floor listen: {e}"))?;
        let peer: PeerId = *swarm.local_peer_id();
        addrs.push(addr.with(Protocol::P2p(peer)));
        let (tx, mut rx) = mpsc::channel::<Cmd>(16);
        cmds.push(tx);
        let (seen, stop, topic) = (seen.clone(), stop.clone(), topic.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine: HashSet<u64> = HashSet::new();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    cmd = rx.recv() => match cmd {
                        Some(Cmd::Dial(a)) => { let _ = swarm.dial(a); }
                        Some(Cmd::Publish(m)) => { let _ = swarm.behaviour_mut().publish(topic.clone(), m); }
                        None => break,
                    },
                    ev = swarm.select_next_some() => {
                        if let SwarmEvent::Behaviour(gossipsub::Event::Message { message, .. }) = ev {
                            let Some(head) = message.data.get(..8) else { continue };
                            let id = u64::from_le_bytes(head.try_into().unwrap_or_default());
                            if mine.insert(id) {
                                seen.by_msg.lock().expect("floor lock poisoned")
                                    .entry(id).or_default().push(Instant::now());
                                seen.notify.notify_waiters();
                            }
                        }
                    }
                }
            }
        }));
    }
    for &(i, j) in p.dials {
        if i < p.nodes && j < p.nodes {
            let _ = cmds[i].send(Cmd::Dial(addrs[j].clone())).await;
        }
    }
    tokio::time::sleep(p.warmup).await;
    let setup = started.elapsed();

    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(p.seed);
    let mut reach: [Vec<f64>; 3] = Default::default();
    let mut delivered = 0usize;
    let expected = p.nodes - 1;
    for m in 0..p.messages as u64 {
        let publisher = rng.gen_range(0..p.nodes);
        let mut data = vec![0u8; p.bytes.max(8)];
        rng.fill(&mut data[8..]);
        data[..8].copy_from_slice(&m.to_le_bytes());
        let t0 = Instant::now();
        let _ = cmds[publisher].send(Cmd::Publish(data)).await;
        let deadline = tokio::time::Instant::from_std(t0 + p.deadline);
        loop {
            let notified = seen.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let count = seen
                .by_msg
                .lock()
                .expect("floor lock poisoned")
                .get(&m)
                .map_or(0, Vec::len);
            if count >= expected || tokio::time::Instant::now() >= deadline {
                break;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
        let mut times: Vec<f64> = seen
            .by_msg
            .lock()
            .expect("floor lock poisoned")
            .get(&m)
            .map(|v| {
                v.iter()
                    .map(|t| t.saturating_duration_since(t0).as_secs_f64() * 1000.0)
                    .collect()
            })
            .unwrap_or_default();
        times.sort_by(f64::total_cmp);
        delivered += times.len();
        for (k, share) in [0.5, 0.95, 1.0].iter().enumerate() {
            let need = ((expected as f64 * share).ceil() as usize).max(1);
            if let Some(t) = times.get(need - 1) {
                reach[k].push(*t);
            }
        }
        tokio::time::sleep(p.gap).await;
    }
    stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        json!({
            "messages_reaching": v.len(),
            "median_ms": crate::measure::percentile(v, 0.5),
            "p95_ms": crate::measure::percentile(v, 0.95),
            "max_ms": v.last(),
        })
    };
    let [r50, r95, r100] = &mut reach;
    Ok(json!({
        "nodes": p.nodes,
        "messages": p.messages,
        "message_bytes": p.bytes,
        "setup_s": setup.as_secs_f64(),
        "delivery_pct": 100.0 * delivered as f64 / (expected * p.messages).max(1) as f64,
        "reach": {"reach50": summary(r50), "reach95": summary(r95), "reach100": summary(r100)},
    }))
}
