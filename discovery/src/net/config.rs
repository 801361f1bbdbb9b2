//! Network settings.

use super::{Duration, Multiaddr};

/// Which transports the node uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// TCP + Noise + Yamux, QUIC, DNS (incl. `/dnsaddr` bootstrap through hickory).
    Network,
    /// libp2p's in-process memory transport (many-node tests and simulations).
    Memory,
}

/// Network settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Addresses to listen on.
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start (`/ip4/…/tcp/…/p2p/…`, `/dnsaddr/…`).
    pub bootstrap: Vec<Multiaddr>,
    /// mDNS discovery on the LAN.
    pub mdns: bool,
    /// Transports.
    pub transport: TransportKind,
    /// Most validations in flight; gossip arriving beyond it is ignored (not forwarded).
    /// A validation that must fetch a DID document gives its permit back and waits in the
    /// resolution pool instead ([`Config::max_concurrent_resolutions`]).
    pub max_concurrent_validations: usize,
    /// Most validations waiting for a DID document fetch (did:web not cached), over all peers.
    /// Gossip needing one beyond it is ignored (not forwarded, not penalized): a fetch may take
    /// the resolver's whole timeout, and before this pool one peer sending two did:web
    /// advertisements a second for unresolvable domains held every validation permit.
    pub max_concurrent_resolutions: usize,
    /// Most of those on behalf of one peer (the peer that gossiped it, or the provider a
    /// discover fetched it from).
    pub resolutions_per_peer: usize,
    /// Inbound fetch requests answered at once, over all peers; the excess is refused (the
    /// stream is dropped) before any store read.
    pub fetch_in_flight_total: usize,
    /// Inbound fetch requests answered at once for one peer.
    pub fetch_in_flight_per_peer: usize,
    /// Inbound fetch requests one peer may make per [`Config::rate_window`].
    pub fetch_per_peer: u32,
    /// Kademlia provider records other peers may store with us: most keys per providing peer.
    pub provider_keys_per_peer: usize,
    /// The same, over all peers. Our own provider records are kept apart and never count.
    pub provider_keys_total: usize,
    /// How long an inbound provider record is kept (the record's own expiry if sooner); the
    /// provider re-announces before it ends.
    pub provider_record_ttl: Duration,
    /// At start, dial this many peers from the store's `peers` (most recently seen first), so
    /// that a restarted node finds the network without bootstrap.
    pub redial_peers: usize,
    /// Most advertisements accepted from one peer per [`Config::rate_window`].
    pub per_peer_messages: u32,
    /// The window of `per_peer_messages`.
    pub rate_window: Duration,
    /// gossipsub heartbeat.
    pub heartbeat: Duration,
    /// gossipsub mesh degree D (D_low = D - D/4, D_high = 2D). 4, not gossipsub's 6: every copy
    /// a node receives costs it a decryption and a decode, and with 6 the CPU spent on
    /// duplicates (5.5 per advertisement) slowed propagation more than the shorter paths sped
    /// it up (measured, docs/BENCHMARKS.md). Lost copies are repaired by gossip (IHAVE/IWANT)
    /// at the next heartbeat, and by the DHT.
    pub gossip_mesh: usize,
    /// gossipsub 1.2's IDONTWANT: on the first copy of an advertisement, before validating it,
    /// tell the mesh peers not to send theirs. Off by default (see `swarm::build_behaviour`).
    pub gossip_idontwant: bool,
    /// How often expired advertisements are swept from the store.
    pub sweep_interval: Duration,
    /// A connection nothing uses closes after this long. gossipsub keeps its mesh peers'
    /// connections open, Kademlia and fetches theirs while a query or request is in flight.
    pub idle_timeout: Duration,
    /// Connection manager: when more than `conn_high` peers are connected, connections to peers
    /// outside the gossip mesh, with no fetch in flight and older than `conn_grace` are closed,
    /// newest first, until `conn_low` remain (checked every second).
    pub conn_high: usize,
    /// See [`Config::conn_high`].
    pub conn_low: usize,
    /// See [`Config::conn_high`].
    pub conn_grace: Duration,
    /// Hard cap on established connections (refused beyond it), against a flood of peers.
    pub max_connections: u32,
    /// How long after a publish its tags are announced in the DHT. Gossip is the fast path and
    /// goes first; each announcement is a Kademlia query that opens connections to ~20 nodes,
    /// and run at the same moment they slowed the gossip they compete with (measured).
    /// Announcements also run at most two at a time.
    pub provide_delay: Duration,
    /// How often Kademlia refreshes its routing table (a bootstrap: one lookup per bucket).
    /// Each refresh contacts O(K log N) peers, most of them not connected, and those connections
    /// are closed again by `idle_timeout` and the connection manager: libp2p's default of 5
    /// minutes made that the steady churn of a settled network (measured at 300 nodes: about
    /// 110 connections opened per node per minute). Every lookup a node makes (announcements,
    /// discover) refreshes the buckets it crosses anyway. A node joins with one lookup of its
    /// own id, not a bootstrap, and Kademlia's automatic bootstraps are cut short
    /// (docs/ARCHITECTURE.md). `None`: never periodically.
    pub kad_bootstrap_interval: Option<Duration>,
    /// Kademlia's k (its replication factor): how many closest peers a lookup looks for, and so
    /// about how many it contacts, and how many store each provider record. libp2p's default,
    /// 20. A lookup contacts about k peers or more. The join's lookup of our own id looks for k
    /// too (libp2p's `get_closest_peers` looks for 20 whatever k is); its automatic bootstraps,
    /// cut short, still do. Measured at 1 000 nodes: k = 8 halved the setup's dials and took it
    /// from 82 s to 54 s (docs/BENCHMARKS.md, "Setup").
    pub kad_k: usize,
    /// Refuse new connections (both directions) while the process's resident memory is above
    /// this many bytes; connections already open stay. The last line of the connection bounds,
    /// after `max_connections` and the per-connection queues: whatever a connection costs,
    /// strangers cannot take the node past it. Process-wide, so `None` (off) by default: many
    /// nodes in one process (tests, `simulate`) would share one budget. The daemon sets it
    /// (`agentnet up --max-memory-mib`).
    pub max_process_memory: Option<usize>,
    /// Source addresses gossipsub's peer score does not count as colocated (its IP colocation
    /// penalty greylists a peer sharing an address with more than 10 others). Empty by default.
    /// Processes on one machine's loopback all dial from 127.0.0.1 whatever address they
    /// listen on, so `agentnet sim-node` on loopback lists it; measured at 100 processes: a
    /// fifth of the nodes greylisted by every peer and never receiving a message without it.
    pub colocation_whitelist: Vec<std::net::IpAddr>,
    /// Latency and bandwidth of the memory transport's links, asked by the port each dial goes
    /// to (simulations; [`links`](super::links)). `None`: every link is instant. Ignored by
    /// [`TransportKind::Network`].
    pub links: Option<super::Links>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: vec![
                "/ip4/0.0.0.0/tcp/0".parse().expect("valid multiaddr"),
                "/ip4/0.0.0.0/udp/0/quic-v1"
                    .parse()
                    .expect("valid multiaddr"),
            ],
            bootstrap: Vec::new(),
            mdns: false,
            transport: TransportKind::Network,
            max_concurrent_validations: 64,
            // A handful of slow fetches at once is plenty for honest did:web agents (documents
            // are cached after the first); 2 per peer lets one relay pass on a burst slowly.
            max_concurrent_resolutions: 8,
            resolutions_per_peer: 2,
            // An answer is at most MAX_FETCH_BYTES: 32 in flight is at most 16 MiB.
            fetch_in_flight_total: 32,
            fetch_in_flight_per_peer: 4,
            // One discover asks a provider once; 20 in 10 s is a busy client, not a flood.
            fetch_per_peer: 20,
            // 512 keys: 16 agents of 32 tags. 16384 keys of at most 4 short addresses each
            // stay under ~10 MiB.
            provider_keys_per_peer: 512,
            provider_keys_total: 16384,
            // Kademlia republishes provider records every 12 h by default; 24 h survives one
            // missed republish.
            provider_record_ttl: Duration::from_secs(24 * 3600),
            redial_peers: 16,
            per_peer_messages: 100,
            rate_window: Duration::from_secs(10),
            heartbeat: Duration::from_millis(700),
            gossip_mesh: 4,
            gossip_idontwant: false,
            sweep_interval: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(10),
            conn_high: 32,
            conn_low: 16,
            conn_grace: Duration::from_secs(10),
            max_connections: 512,
            provide_delay: Duration::from_secs(1),
            kad_bootstrap_interval: Some(Duration::from_secs(30 * 60)),
            kad_k: 20,
            max_process_memory: None,
            colocation_whitelist: Vec::new(),
            links: None,
        }
    }
}
