//! The adversaries of a run, and what each one sent.
//!
//! Full-node adversaries are agentnet nodes like the honest ones (they validate, store and
//! forward what they receive, so they stay in good standing), placed after the honest nodes and
//! dialing `dials` of them, and they send on top of that:
//! - **junk** (`--adversaries K`, `--junk-rate`): forged signatures, hijacks of honest DIDs
//!   (signed by another key), malformed JSON, random bytes, in turn;
//! - **replay** (`[replay]`): the honest advertisements their own store holds, sent again, each
//!   time in a new framing (the same signed JSON with other whitespace, so that its gossipsub id,
//!   the hash of the bytes, is new and no seen-cache drops it before validation);
//! - **sybil** (`[sybil]`): valid advertisements, each under a DID minted for it, tagged with
//!   the network's common skill tags, half of them naming a random peer id as their publisher
//!   (so that no per-publisher quota sees one publisher).
//!
//! Eclipse attackers (`[eclipse]`) are other software: bare rust-libp2p gossipsub nodes on the
//! advertisement topic that forward nothing (every message reported Ignore), all dialing one
//! honest node and dialing it again whenever it closes the connection, to take its connection
//! slots and its mesh.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentnet_discovery::net::{self, Links};
use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId};
use rand::Rng as _;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, Rng, Vocabulary};
use crate::node::SimNode;

/// What a full-node adversary sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Junk,
    Replay,
    Sybil,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Junk => "junk",
            Kind::Replay => "replay",
            Kind::Sybil => "sybil",
        }
    }
}

/// What one adversary did.
#[derive(Debug, Default)]
pub struct Tally {
    pub sent: u64,
    pub send_errors: u64,
    /// The DIDs it signed with (junk: its four; sybil: one per message sent).
    pub dids: Vec<String>,
}

/// Runs adversary `me` of `kind` at `rate` messages a second until `stop`.
pub async fn run(
    kind: Kind,
    me: Arc<SimNode>,
    rng: Rng,
    rate: u32,
    honest_dids: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
) -> Tally {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sender = Sender {
        me,
        rng,
        honest_dids,
        tally: Tally::default(),
        junk_agents: Vec::new(),
        vocab: Vocabulary::new(200),
        i: 0,
    };
    if kind == Kind::Junk {
        sender.junk_agents = (0..4).map(|_| Agent::new(&mut sender.rng)).collect();
        sender.tally.dids = sender
            .junk_agents
            .iter()
            .map(|a| a.did.to_string())
            .collect();
    }
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        sender.i += 1;
        let bytes = match kind {
            Kind::Junk => sender.junk(),
            Kind::Replay => sender.replay().await,
            Kind::Sybil => sender.sybil(),
        };
        let Some(bytes) = bytes else { continue };
        match sender.me.client.gossip_unchecked(bytes).await {
            Ok(()) => sender.tally.sent += 1,
            Err(_) => sender.tally.send_errors += 1,
        }
    }
    sender.tally
}

struct Sender {
    me: Arc<SimNode>,
    rng: Rng,
    honest_dids: Arc<Mutex<Vec<String>>>,
    tally: Tally,
    junk_agents: Vec<Agent>,
    vocab: Vocabulary,
    i: u64,
}

impl Sender {
    fn random_honest_did(&mut self) -> Option<String> {
        let h = self.honest_dids.lock().expect("dids lock poisoned");
        (!h.is_empty()).then(|| h[self.rng.gen_range(0..h.len())].clone())
    }

    /// Junk, in turn: forged signature, hijack of an honest DID (signed by another key),
    /// malformed JSON, random bytes. Every message is unique (gossipsub ids are the payload's
    /// hash).
    fn junk(&mut self) -> Option<Vec<u8>> {
        let i = self.i;
        let tags = vec!["junk".to_owned()];
        let agent = &self.junk_agents[(i % 4) as usize];
        Some(match i % 4 {
            0 => {
                let desc = format!("junk {i}");
                let good = agent.advert(&self.me, i, &desc, &tags, 1024).ok()?;
                String::from_utf8_lossy(&good)
                    .replace(&desc, &format!("hack {i}"))
                    .into_bytes()
            }
            1 => {
                let target = self.random_honest_did()?;
                let agent = &self.junk_agents[1];
                let bytes = agent
                    .advert(&self.me, 1_000_000 + i, "hijack", &tags, 1024)
                    .ok()?;
                let mut v = serde_json::from_slice::<Value>(&bytes).ok()?;
                v["did"] = json!(target);
                serde_json::to_vec(&v).unwrap_or_default()
            }
            2 => format!("{{\"v\":1,\"did\":\"not json {i}").into_bytes(),
            _ => (0..64)
                .flat_map(|_| self.rng.gen::<u64>().to_le_bytes())
                .collect(),
        })
    }

    /// An honest advertisement this node stored, in a framing not sent before: the same JSON
    /// value (so the same signed content) with `i` spaces after its opening brace.
    async fn replay(&mut self) -> Option<Vec<u8>> {
        let did = self.random_honest_did()?;
        let store = self.me.client.store().clone();
        let stored = tokio::task::spawn_blocking(move || store.get(&did, net::unix_now()))
            .await
            .ok()?
            .ok()??;
        let bytes = stored.bytes;
        let body = bytes.strip_prefix(b"{")?;
        let mut out = Vec::with_capacity(bytes.len() + self.i as usize % 4096 + 1);
        out.push(b'{');
        out.extend(std::iter::repeat_n(b' ', (self.i % 4096) as usize + 1));
        out.extend_from_slice(body);
        Some(out)
    }

    /// A valid advertisement under a DID minted for it, with three of the common tags; every
    /// other one names a random peer id as its publisher.
    fn sybil(&mut self) -> Option<Vec<u8>> {
        let agent = Agent::new(&mut self.rng);
        let mut tags = self.vocab.draw(&mut self.rng, 3);
        tags.push("sybil".to_owned());
        let bytes = agent
            .advert(&self.me, 1, &format!("sybil {}", self.i), &tags, 1024)
            .ok()?;
        self.tally.dids.push(agent.did.to_string());
        if self.i % 2 == 1 {
            return Some(bytes);
        }
        // The publisher's peer id is signed into the envelope (and an address naming a peer
        // must name that one): re-sign with another, at an address of its own.
        let fake = PeerId::random();
        let addr = format!(
            "/memory/{}/p2p/{fake}",
            self.rng.gen_range(1..u64::from(u32::MAX))
        );
        agent
            .advert_as(
                &fake.to_string(),
                &addr,
                1,
                &format!("sybil {}", self.i),
                &tags,
                1024,
            )
            .ok()
    }
}

/// What the eclipse attackers saw.
#[derive(Debug, Default)]
pub struct EclipseTally {
    /// Connections to the victim established, in total (first dials and redials).
    pub connections: AtomicU64,
    /// ... closed by the victim (or the link).
    pub closed: AtomicU64,
    /// Advertisement copies the victim sent them (what it forwarded into its mesh with them).
    pub messages: AtomicU64,
    /// Attackers connected to the victim now.
    pub connected: AtomicU64,
}

/// Starts `count` eclipse attackers dialing `victim`; they stop with `stop`. `links_of(k)` is
/// attacker k's link model.
pub fn eclipse(
    count: usize,
    victim: Multiaddr,
    heartbeat: Duration,
    mesh: usize,
    links_of: &dyn Fn(usize) -> Option<Links>,
    stop: CancellationToken,
) -> Result<(Arc<EclipseTally>, Vec<PeerId>), String> {
    let tally = Arc::new(EclipseTally::default());
    let topic = IdentTopic::new(net::TOPIC);
    let mut ids = Vec::with_capacity(count);
    for k in 0..count {
        let mut builder = crate::floor::bare_config(mesh, heartbeat, 300 * 1024);
        builder.validate_messages();
        let cfg = builder
            .build()
            .map_err(|e| format!("eclipse gossipsub config: {e}"))?;
        let mut swarm = crate::floor::bare_swarm(cfg, links_of(k), &topic, "eclipse")?;
        ids.push(*swarm.local_peer_id());
        let (tally, stop, victim) = (tally.clone(), stop.clone(), victim.clone());
        tokio::spawn(async move {
            let _ = swarm.dial(victim.clone());
            let mut open: HashSet<libp2p::swarm::ConnectionId> = HashSet::new();
            let redial = tokio::time::sleep(Duration::from_secs(3600));
            tokio::pin!(redial);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = &mut redial => {
                        redial.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(3600));
                        if open.is_empty() {
                            let _ = swarm.dial(victim.clone());
                        }
                    }
                    ev = swarm.select_next_some() => match ev {
                        SwarmEvent::ConnectionEstablished { connection_id, .. } => {
                            if open.is_empty() {
                                tally.connected.fetch_add(1, Ordering::Relaxed);
                            }
                            open.insert(connection_id);
                            tally.connections.fetch_add(1, Ordering::Relaxed);
                        }
                        SwarmEvent::ConnectionClosed { connection_id, .. } => {
                            if open.remove(&connection_id) {
                                tally.closed.fetch_add(1, Ordering::Relaxed);
                                if open.is_empty() {
                                    tally.connected.fetch_sub(1, Ordering::Relaxed);
                                }
                            }
                            redial.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(1));
                        }
                        SwarmEvent::OutgoingConnectionError { .. } => {
                            redial.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(1));
                        }
                        SwarmEvent::Behaviour(gossipsub::Event::Message { message_id, propagation_source, .. }) => {
                            tally.messages.fetch_add(1, Ordering::Relaxed);
                            // Forward nothing, blame no one.
                            swarm.behaviour_mut().report_message_validation_result(
                                &message_id,
                                &propagation_source,
                                MessageAcceptance::Ignore,
                            );
                        }
                        _ => {}
                    }
                }
            }
        });
    }
    Ok((tally, ids))
}
