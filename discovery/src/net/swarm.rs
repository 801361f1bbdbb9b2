//! The swarm: transports, and the behaviours with their settings.

use super::{
    gossipsub, identify, kad, links, mdns, noise, ping, request_response, tcp, yamux, Config,
    Digest, Duration, Error, FetchRequest, FetchResponse, IdentTopic, MessageAuthenticity,
    MessageId, Multiaddr, NetworkBehaviour, ProtocolSupport, ProviderStore, Registry, Sha256,
    StreamProtocol, Swarm, Toggle, TransportKind, FETCH_PROTOCOL, FETCH_STREAMS_PER_CONNECTION,
    IDENTIFY_PROTOCOL, KAD_PROTOCOL, MAX_FETCH_RESPONSE, TOPIC,
};

#[derive(NetworkBehaviour)]
pub(super) struct Behaviour {
    pub(super) limits: libp2p::connection_limits::Behaviour,
    pub(super) memory: Toggle<libp2p::memory_connection_limits::Behaviour>,
    pub(super) gossipsub: gossipsub::Behaviour,
    pub(super) kad: kad::Behaviour<ProviderStore>,
    pub(super) identify: identify::Behaviour,
    pub(super) ping: ping::Behaviour,
    pub(super) fetch: request_response::cbor::Behaviour<FetchRequest, FetchResponse>,
    pub(super) mdns: Toggle<mdns::tokio::Behaviour>,
}

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// gossipsub's per-connection send queue, in messages (see `build_behaviour`); the simulator's
/// bare gossipsub floor uses it too.
pub const GOSSIP_QUEUE_LEN: usize = 256;

/// How long gossipsub keeps a received message for forwarding after validation (and for IWANT),
/// whatever the heartbeat: a validation slower than this (a node starved of CPU, a DID document
/// fetch near its timeout) accepts the message without forwarding it.
const VALIDATION_WINDOW: Duration = Duration::from_secs(15);

/// How long a forwarded message may wait in a peer's send queue (gossipsub's default: 1 s).
const FORWARD_QUEUE_FOR: Duration = Duration::from_secs(5);

/// gossipsub's `history_length` for `heartbeat`: heartbeats in [`VALIDATION_WINDOW`], never
/// fewer than gossipsub's 5.
fn history_length(heartbeat: Duration) -> usize {
    let beats = VALIDATION_WINDOW.as_millis() / heartbeat.as_millis().max(1);
    (beats as usize + 1).max(5)
}

pub(super) fn build_behaviour(
    key: &libp2p::identity::Keypair,
    cfg: &Config,
    registry: &mut Registry,
) -> Result<Behaviour, BoxError> {
    let peer_id = key.public().to_peer_id();
    // Anonymous gossip: an advertisement is signed by its agent's DID and its message id is the
    // hash of its bytes, so gossipsub's own per-message signature (one more Ed25519 verify on
    // every copy received, duplicates included) and sequence numbers add nothing.
    let d = cfg.gossip_mesh.max(2);
    let mut builder = gossipsub::ConfigBuilder::default();
    let gossip_cfg = builder
        .validation_mode(gossipsub::ValidationMode::Anonymous)
        .validate_messages()
        .message_id_fn(|m: &gossipsub::Message| MessageId::new(&Sha256::digest(&m.data)))
        .max_transmit_size(crate::advert::Limits::default().max_bytes + 4096)
        .heartbeat_interval(cfg.heartbeat)
        // Per-connection send queue for publishes, forwards, IHAVE and IWANT (gossipsub 0.50 keeps
        // subscriptions unbounded and control messages under its own bound of 20 000, and every
        // queue grows as it fills: an idle connection holds none of it; 0.49's `async_channel`
        // allocated its slots whole when the connection opened, ~21 KiB each). gossipsub's
        // default (5000) lets one peer that reads slowly make us buffer 5000 messages of up to
        // `max_transmit_size`. Advertisements are a low-rate topic: 256 leaves room for a burst
        // (a node publishing 100 agents at once) and bounds what one peer can make us buffer; a
        // full queue drops copies for that peer only, which gossip repairs through IHAVE/IWANT.
        .connection_handler_queue_len(GOSSIP_QUEUE_LEN)
        // A message stays in gossipsub's cache for `history_length` heartbeats from its arrival,
        // and only a message still there when its validation ends is forwarded: gossipsub's 5
        // (3.5 s at the default heartbeat, 1 s at simulate's 200 ms) let a node made CPU-bound
        // accept honest advertisements without passing them on. Seen in ci-attacks.toml on a
        // busy machine: 252 accepted too late in one run, three (advert, node) pairs never
        // reached (docs/BENCHMARKS.md, "Delivery under attack on a short CPU"). What the cache
        // holds meanwhile is bounded by the per-peer message budget.
        .history_length(history_length(cfg.heartbeat))
        // Forwards and answers to IWANT wait in a peer's send queue for up to this before they
        // are abandoned (gossipsub's 1 s drops them whenever the node is starved of CPU for a
        // second); the queue's length, not this, bounds what a slow peer makes us hold.
        .forward_queue_duration(FORWARD_QUEUE_FOR);
    // No IDONTWANT by default (`Config::gossip_idontwant`). gossipsub 0.49 sent one to every
    // mesh peer for every copy received, duplicates included (40 % more CPU, no fewer
    // duplicates); 0.50 sends it on the first copy only, which halves the duplicates at
    // 1 000 nodes but costs more CPU than the copies it saves, and reach is slower
    // (docs/BENCHMARKS.md, "libp2p 0.57 at 1 000 nodes").
    super::idontwant(gossip_cfg, cfg.gossip_idontwant);
    let gossip_cfg = super::mesh_degree(gossip_cfg, d)
        .build()
        .map_err(|e| format!("gossipsub config: {e}"))?;
    let mut gossipsub = gossipsub::Behaviour::new(MessageAuthenticity::Anonymous, gossip_cfg)
        .map_err(|e| format!("gossipsub: {e}"))?
        .with_metrics(
            registry.sub_registry_with_prefix("gossipsub"),
            Default::default(),
        );
    // Peer scoring tuned for a low-rate topic: no penalty for few deliveries in the mesh (honest
    // peers may have nothing to send for hours), a heavy one for invalid messages.
    let topic_params = gossipsub::TopicScoreParams {
        topic_weight: 1.0,
        mesh_message_deliveries_weight: 0.0,
        mesh_failure_penalty_weight: 0.0,
        invalid_message_deliveries_weight: -100.0,
        invalid_message_deliveries_decay: 0.9,
        ..Default::default()
    };
    let mut params = gossipsub::PeerScoreParams::default();
    params
        .ip_colocation_factor_whitelist
        .extend(cfg.colocation_whitelist.iter().copied());
    params
        .topics
        .insert(IdentTopic::new(TOPIC).hash(), topic_params);
    gossipsub
        .with_peer_score(params, gossipsub::PeerScoreThresholds::default())
        .map_err(|e| format!("gossipsub scoring: {e}"))?;

    let mut kad_cfg = kad::Config::new(StreamProtocol::new(KAD_PROTOCOL));
    kad_cfg.set_query_timeout(Duration::from_secs(20));
    if let Some(k) = std::num::NonZeroUsize::new(cfg.kad_k) {
        kad_cfg.set_replication_factor(k);
    }
    // Kademlia re-bootstraps by itself whenever its routing table is short of peers; the swarm
    // task cuts those short (`Node::cut_automatic_bootstraps`). The periodic refresh every
    // `kad_bootstrap_interval` is the swarm task's (`Node::run`), which skips a node with no
    // peer where Kademlia's warns "Failed to trigger bootstrap" (see
    // `Config::kad_bootstrap_interval` for why not libp2p's 5 minutes).
    kad_cfg.set_periodic_bootstrap_interval(None);
    // Peers enter the routing table through `Node::add_kad_address` only.
    kad_cfg.set_kbucket_inserts(kad::BucketInserts::Manual);
    // Inbound records are reported, not stored: `Node::on_inbound_provider` admits provider
    // records by quota; value records are not used by agentnet and never admitted.
    kad_cfg.set_record_filtering(kad::StoreInserts::FilterBoth);
    kad_cfg.set_provider_record_ttl(Some(cfg.provider_record_ttl));
    let kad_store = ProviderStore::new(peer_id, cfg.provider_keys_total);
    let mut kad = kad::Behaviour::with_config(peer_id, kad_store, kad_cfg);
    kad.set_mode(Some(kad::Mode::Server));

    let identify = identify::Behaviour::new(
        identify::Config::new(IDENTIFY_PROTOCOL.into(), key.public())
            .with_agent_version(concat!("agentnet/", env!("CARGO_PKG_VERSION")).into()),
    );
    let codec = request_response::cbor::codec::Codec::default()
        .set_request_size_maximum(16 * 1024)
        .set_response_size_maximum(MAX_FETCH_RESPONSE);
    let fetch = request_response::Behaviour::with_codec(
        codec,
        [(StreamProtocol::new(FETCH_PROTOCOL), ProtocolSupport::Full)],
        request_response::Config::default()
            .with_request_timeout(Duration::from_secs(10))
            .with_max_concurrent_streams(FETCH_STREAMS_PER_CONNECTION),
    );
    let mdns = if cfg.mdns {
        Some(
            mdns::tokio::Behaviour::new(mdns::Config::default(), peer_id)
                .map_err(|e| format!("mdns: {e}"))?,
        )
    } else {
        None
    };
    let limits = libp2p::connection_limits::ConnectionLimits::default()
        .with_max_established(Some(cfg.max_connections))
        .with_max_established_per_peer(Some(2))
        .with_max_pending_incoming(Some(cfg.max_connections.div_ceil(4)));
    let memory = cfg
        .max_process_memory
        .map(libp2p::memory_connection_limits::Behaviour::with_max_bytes);
    Ok(Behaviour {
        limits: libp2p::connection_limits::Behaviour::new(limits),
        memory: memory.into(),
        gossipsub,
        kad,
        identify,
        ping: ping::Behaviour::default(),
        fetch,
        mdns: mdns.into(),
    })
}

/// Inbound streams a connection may have in protocol negotiation at once (libp2p: 128). Each is
/// a yamux stream whose data the muxer buffers until it is read, up to its 256 KiB window; a
/// handler reads its streams as they come, so honest peers never have more than a few waiting
/// (one gossipsub stream, a Kademlia request or two, a fetch).
const MAX_NEGOTIATING_INBOUND_STREAMS: usize = 16;

fn swarm_config(c: libp2p::swarm::Config, idle: Duration) -> libp2p::swarm::Config {
    c.with_idle_connection_timeout(idle)
        .with_max_negotiating_inbound_streams(MAX_NEGOTIATING_INBOUND_STREAMS)
}

pub(super) fn build_swarm(
    keypair: libp2p::identity::Keypair,
    cfg: &Config,
    registry: &mut Registry,
) -> Result<Swarm<Behaviour>, Error> {
    let start = |e: &dyn std::fmt::Display| Error::Start(e.to_string());
    let idle = cfg.idle_timeout;
    let swarm = match cfg.transport {
        TransportKind::Network => libp2p::SwarmBuilder::with_existing_identity(keypair)
            .with_tokio()
            // Ports: libp2p-tcp sets SO_REUSEPORT on every listener and, for dials that ask
            // for `PortUse::Reuse` (Kademlia's and request-response's do), binds the dial to
            // the listener's port. Reused ports only help hole punching, which agentnet does
            // not do; SO_REUSEPORT also let a second node listen on a port another holds, the
            // kernel sharing connections between them. So: listen ports are probe-bound
            // without SO_REUSEPORT first (`probe_listen`, refused if taken), and our own dials
            // (bootstrap, `Client::dial`, redials) take a new port. The behaviours' dials keep
            // libp2p's default; a reused port whose 4-tuple is taken falls back to a new one.
            .with_tcp(
                tcp::Config::default().nodelay(true),
                noise::Config::new,
                yamux::Config::default,
            )
            .map_err(|e| start(&e))?
            .with_quic()
            .with_dns()
            .map_err(|e| start(&e))?
            .with_bandwidth_metrics(registry)
            .with_behaviour(|key| build_behaviour(key, cfg, registry))
            .map_err(|e| start(&e))?
            .with_swarm_config(|c| swarm_config(c, idle))
            .build(),
        TransportKind::Memory => libp2p::SwarmBuilder::with_existing_identity(keypair)
            .with_tokio()
            .with_other_transport(|key| {
                links::memory_transport(key, cfg.links.clone()).map_err(|e| Box::new(e) as BoxError)
            })
            .map_err(|e| start(&e))?
            .with_bandwidth_metrics(registry)
            .with_behaviour(|key| build_behaviour(key, cfg, registry))
            .map_err(|e| start(&e))?
            .with_swarm_config(|c| swarm_config(c, idle))
            .build(),
    };
    Ok(swarm)
}

/// Refuse a listen address whose TCP port another socket holds. libp2p-tcp listens with
/// SO_REUSEPORT, so a second node of the same user on a taken port listened too and the
/// kernel spread connections, bootstrap dials included, over both nodes. A plain bind (no
/// SO_REUSEPORT) of each concrete `/ip4|ip6/…/tcp/<port>` (and `…/udp/<port>`, QUIC's) fails
/// while any socket holds it; port 0 and other transports are not probed.
pub(super) fn probe_listen(addr: &Multiaddr) -> Result<(), Error> {
    use libp2p::multiaddr::Protocol;
    let mut it = addr.iter();
    let ip: std::net::IpAddr = match it.next() {
        Some(Protocol::Ip4(ip)) => ip.into(),
        Some(Protocol::Ip6(ip)) => ip.into(),
        _ => return Ok(()),
    };
    // QUIC's UDP socket is bound without SO_REUSEPORT, as this probe is: libp2p would refuse
    // a taken one too, but with its error's debug dump.
    let probe = match it.next() {
        Some(Protocol::Tcp(port)) if port != 0 => std::net::TcpListener::bind((ip, port)).map(drop),
        Some(Protocol::Udp(port)) if port != 0 => std::net::UdpSocket::bind((ip, port)).map(drop),
        _ => return Ok(()),
    };
    match probe {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(Error::Start(format!(
            "{addr} is already in use by another process; pick another port with --listen"
        ))),
        // Not ours to judge (an address not on this host, no permission): libp2p's own
        // listen reports it.
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_cache_outlasts_a_slow_validation_at_any_heartbeat() {
        // The node's default heartbeat (700 ms), simulate's (200 ms), and one slower than the
        // window: never gossipsub's 1 s-at-200-ms again, never fewer than its 5.
        assert_eq!(history_length(Duration::from_millis(700)), 22);
        assert_eq!(history_length(Duration::from_millis(200)), 76);
        assert_eq!(history_length(Duration::from_secs(60)), 5);
        for ms in [100, 200, 700, 1000, 3000] {
            let hb = Duration::from_millis(ms);
            assert!(
                hb * history_length(hb) as u32 >= VALIDATION_WINDOW,
                "{ms} ms"
            );
        }
    }
}
