//! The libp2p side: one task owns the [`Swarm`]; everything else talks to it through a
//! [`Client`] over a bounded channel with `oneshot` replies.
//!
//! Behaviours: gossipsub on [`TOPIC`] (content-addressed ids, `validate_messages`: nothing is
//! forwarded before our validation says Accept), Kademlia under our own protocol name (provider
//! records per skill-tag shard), a request-response protocol to fetch advertisements from
//! providers, identify, ping, and mDNS when enabled. Validation and RocksDB work run on other
//! tasks and blocking threads, never on the swarm task; every such task is tracked, and the
//! swarm task returns only after the last of them.
//!
//! # Layout
//! - this file: wire types, errors, the [`Client`], the swarm task's event loop (a handler per
//!   kind of swarm event) and its teardown;
//! - `config`: [`Config`];
//! - `swarm`: transports and behaviours with their settings;
//! - `links`: latency and bandwidth between nodes on the memory transport (simulations);
//! - `accept`: the path every advertisement takes into the store;
//! - `pool`: the validation thread pool and `spawn_blocking` for store calls;
//! - `limits`, `dht`: the admission policies (resolution slots, inbound fetches, inbound
//!   provider records), plain structs taking `now`;
//! - `bootstrap`: the bootstrap peers, what their dials came to and when to dial them again;
//! - `stats`: the counters ([`Stats`]) and the traffic read back from libp2p's metrics.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic, MessageAcceptance, MessageAuthenticity, MessageId};
use libp2p::kad::store::RecordStore as _;
use libp2p::kad::{self, GetProvidersOk, QueryId, QueryResult, RecordKey};
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport, ResponseChannel};
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::swarm::dial_opts::{DialOpts, PeerCondition};
use libp2p::swarm::ConnectionId;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{identify, mdns, noise, ping, tcp, yamux, StreamProtocol, Swarm};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
pub use tokio_util::sync::CancellationToken;
use tokio_util::sync::DropGuard;
use tokio_util::task::TaskTracker;

use crate::advert::{Reject, Validated, Validator};
use crate::store::{PutOutcome, Store, StoredAdvert};
use crate::tags;

mod accept;
mod bootstrap;
mod config;
mod dht;
mod limits;
pub mod links;
mod pool;
mod stats;
mod swarm;

use accept::{accept, Ctx, Gate};
pub use bootstrap::{BootstrapState, BootstrapStatus};
use bootstrap::{Bootstraps, Outcome};
pub use config::{Config, TransportKind};
pub use links::{Link, LinkModel, Links};
use stats::traffic_from_metrics;
pub use stats::{Stats, Traffic};
pub use swarm::GOSSIP_QUEUE_LEN;

/// gossipsub's mesh bounds for degree `d`, as the node sets them: D_low = D - D/4, D_high = 2D,
/// D_out = D/2. `simulate`'s bare-gossipsub floor uses the same, so the two stay comparable.
pub fn mesh_degree(b: &mut gossipsub::ConfigBuilder, d: usize) -> &mut gossipsub::ConfigBuilder {
    b.mesh_n(d)
        .mesh_n_low(d - d / 4)
        .mesh_n_high(2 * d)
        .mesh_outbound_min(d / 2)
}

/// gossipsub's IDONTWANT on or off, as the node sets it (`Config::gossip_idontwant`); the floor
/// uses the same. On: gossipsub's own threshold, IDONTWANT only for messages above 1 000 bytes
/// (an advertisement is ~2 KiB). Off: a threshold no message reaches.
pub fn idontwant(b: &mut gossipsub::ConfigBuilder, on: bool) -> &mut gossipsub::ConfigBuilder {
    b.idontwant_message_size_threshold(if on { 1000 } else { usize::MAX })
}
use pool::blocking;
use swarm::{build_swarm, Behaviour, BehaviourEvent};

use dht::{Admission, ProviderQuota, ProviderStore};
use limits::{FetchLimiter, ResolveSlots};

use libp2p::metrics::Registry;
pub use libp2p::{Multiaddr, PeerId};
pub use prometheus_client::metrics::counter::Counter;

/// The gossipsub topic of advertisements.
pub const TOPIC: &str = "agentnet/cards/1";
/// The gossipsub topic of endorsements (`agentnet_did::endorsement`): what they mean is the
/// node's business, so this crate carries them and asks a [`TopicCheck`] the node registers
/// ([`Client::check_endorsements`]) whether to forward each; until one is registered, none is.
pub const ENDORSE_TOPIC: &str = "agentnet/endorsements/1";

/// What a [`TopicCheck`] says of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Valid: forward it.
    Accept,
    /// Not forwarded, the sender not blamed (stale, a bound reached).
    Ignore,
    /// Not forwarded, and the sender scored down (forged, malformed).
    Reject,
}

/// The node's check of the messages on a topic other than [`TOPIC`]. It runs on a helper task
/// after the per-peer message rate ([`Config::per_peer_messages`]) and while holding one of the
/// validation permits ([`Config::max_concurrent_validations`]) the adverts use, so the two
/// topics share one budget per peer and one in total.
pub trait TopicCheck: Send + Sync + 'static {
    /// Check (and keep, if valid) `data`, received from `source`.
    fn check(
        &self,
        source: PeerId,
        data: Vec<u8>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send + 'static>>;
}

type TopicChecker = Arc<std::sync::OnceLock<Arc<dyn TopicCheck>>>;
/// Our Kademlia protocol: agentnet nodes form their own DHT.
pub const KAD_PROTOCOL: &str = "/agentnet/kad/1.0.0";
/// Request-response protocol to fetch advertisements by tag from a provider.
pub const FETCH_PROTOCOL: &str = "/agentnet/adverts/1.0.0";
/// Identify protocol version string.
pub const IDENTIFY_PROTOCOL: &str = "/agentnet/id/1.0.0";
/// Most provider announcements waiting (a node announces each of its tags once; re-announcing
/// the same tag while it waits is a no-op).
const MAX_PROVIDE_QUEUE: usize = 4096;
/// Most provider announcements (Kademlia queries) in flight at once.
const MAX_PROVIDING: usize = 2;
/// Most advertisements one fetch returns.
pub const MAX_FETCH: u32 = 50;
/// Most bytes of advertisements one fetch answer carries (the advertisements' own bytes; the
/// answer stops before the one that would pass it). 50 advertisements of up to 64 KiB were
/// 3.2 MiB an answer; a discover needs a few cards per provider, not megabytes.
pub const MAX_FETCH_BYTES: usize = 512 * 1024;
/// Largest fetch answer accepted on the wire: [`MAX_FETCH_BYTES`] and the CBOR framing of 50
/// byte strings, with room to spare.
const MAX_FETCH_RESPONSE: u64 = 2 * MAX_FETCH_BYTES as u64;
/// Fetch request streams open at once on one connection (libp2p's default is 100; a peer has
/// at most two connections, and our own per-peer limit is lower still, see
/// [`Config::fetch_in_flight_per_peer`]).
const FETCH_STREAMS_PER_CONNECTION: usize = 8;
/// `discover` asks at most this many providers of a tag...
pub const DISCOVER_PROVIDERS: usize = 16;
/// ...this many at a time...
pub const DISCOVER_BATCH: usize = 4;
/// ...gives each this long to answer (honest providers answer in milliseconds; a sybil that
/// accepts the request and never answers costs this, not the protocol's 10 s timeout)...
pub const DISCOVER_FETCH_TIMEOUT: Duration = Duration::from_secs(4);
/// ...and stops after this long (the providers lookup included), answering with what it
/// validated by then. Before, the advertisements of each answer were validated one after the
/// other, and an answer of 50 did:web advertisements for documents that never come took 50
/// resolver timeouts.
pub const DISCOVER_DEADLINE: Duration = Duration::from_secs(15);
/// When the local index already has matches, `discover` waits at most this long on the network
/// for more (the providers lookup included). Before, a node whose routing table and provider
/// records still named peers that had gone away waited on them (Kademlia gives an unresponsive
/// peer 10 s, a fetch [`DISCOVER_FETCH_TIMEOUT`]): about 5 s per discover instead of 0.05 s,
/// until it restarted. Healthy providers answer in milliseconds.
pub const DISCOVER_TOP_UP: Duration = Duration::from_secs(1);
/// The providers lookup of a `discover` answers with the providers found by then: the four
/// shards' Kademlia queries give each unresponsive peer 10 s, and a query ends only when its
/// closest peers have answered or timed out (up to the 20 s query timeout).
pub const DISCOVER_PROVIDERS_WAIT: Duration = Duration::from_secs(3);
/// Advertisements of one answer validated at once.
const DISCOVER_ACCEPTS: usize = 8;
/// Most providers collected for one tag (of its four shards).
const MAX_PROVIDERS_FOUND: usize = 64;
/// Most `Client::dial` calls waiting for their connection.
const MAX_PENDING_DIALS: usize = 256;
/// `Client::dial` gives up after this long, whatever the transport does (a TCP connect to an
/// address that drops packets can take minutes).
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
/// Peer addresses waiting to be written to the store; more are dropped (they are dial hints).
const PEER_WRITE_QUEUE: usize = 64;
/// How often expired inbound provider records are removed.
const PROVIDER_EXPIRY_INTERVAL: Duration = Duration::from_secs(30);

/// Ask a provider for its advertisements matching all `tags`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FetchRequest {
    /// Normalized tags.
    pub tags: Vec<String>,
    /// At most this many (capped at [`MAX_FETCH`]).
    pub limit: u32,
}

/// A provider's answer: advertisements as they were stored, to be validated by the asker.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FetchResponse {
    /// Raw advertisements.
    pub adverts: Vec<serde_bytes::ByteBuf>,
}

/// Errors of the network layer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Building the swarm failed.
    #[error("starting the network: {0}")]
    Start(String),
    /// The swarm task is gone (shut down).
    #[error("the network task has stopped")]
    Stopped,
    /// A store operation failed.
    #[error("store: {0}")]
    Store(String),
    /// The advertisement was refused.
    #[error("advertisement refused: {0}")]
    Rejected(#[from] Reject),
    /// A dial or request failed.
    #[error("{0}")]
    Network(String),
    /// Refused for now by a bound (a pool or a per-peer limit is full); try later.
    #[error("busy: {0}")]
    Busy(String),
}

/// A connected peer.
#[derive(Debug, Clone, Serialize)]
pub struct PeerInfo {
    /// Its PeerId.
    pub peer_id: String,
    /// Addresses it listens on (from identify).
    pub addrs: Vec<String>,
}

enum Command {
    Publish {
        validated: Validated,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Providers {
        tag: String,
        /// Answer with what was found by then, if the queries have not ended.
        deadline: Option<Instant>,
        reply: oneshot::Sender<Vec<PeerId>>,
    },
    Fetch {
        peer: PeerId,
        request: FetchRequest,
        reply: oneshot::Sender<Result<FetchResponse, Error>>,
    },
    Dial {
        addr: Multiaddr,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Peers {
        reply: oneshot::Sender<Vec<PeerInfo>>,
    },
    ListenAddrs {
        reply: oneshot::Sender<Vec<Multiaddr>>,
    },
    #[cfg(feature = "test-utils")]
    GossipUnchecked {
        bytes: Vec<u8>,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    PublishEndorsement {
        bytes: Vec<u8>,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

/// What helper tasks hand back to the swarm task.
enum Internal {
    Validation {
        id: MessageId,
        source: PeerId,
        acceptance: MessageAcceptance,
    },
    Respond {
        peer: PeerId,
        channel: ResponseChannel<FetchResponse>,
        response: FetchResponse,
    },
}

/// An advertisement this node accepted (from gossip, a fetch, or a local publish).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The agent's DID.
    pub did: String,
    /// Its sequence number.
    pub seq: u64,
    /// Its tags.
    pub tags: Vec<String>,
}

/// The handle the rest of the program uses.
#[derive(Clone)]
pub struct Client {
    tx: mpsc::Sender<Command>,
    peer_id: PeerId,
    store: Store,
    validator: Validator,
    stats: Arc<Stats>,
    accepted: tokio::sync::broadcast::Sender<Accepted>,
    metrics: Arc<Mutex<Registry>>,
    /// The node's token: cancelled by the caller's shutdown token, or when the last client
    /// goes (`_stop_on_drop`).
    cancel: CancellationToken,
    slots: ResolveSlots,
    /// The bootstrap addresses' state, written by the swarm task.
    bootstrap: Arc<Mutex<Vec<BootstrapStatus>>>,
    endorsements: TopicChecker,
    _stop_on_drop: Arc<DropGuard>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("peer_id", &self.peer_id)
            .finish()
    }
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

impl Client {
    /// This node's PeerId.
    pub fn peer_id(&self) -> PeerId {
        self.peer_id
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Every advertisement accepted from now on. A receiver that falls more than 1024 behind
    /// loses the oldest (and is told so by `RecvError::Lagged`); the store has them all.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Accepted> {
        self.accepted.subscribe()
    }

    /// Each configured bootstrap address: pending, connected or failed (with the last dial
    /// error), and since when. A failed or disconnected one is dialed again, with backoff,
    /// while the node has no peer.
    pub fn bootstrap_status(&self) -> Vec<BootstrapStatus> {
        self.bootstrap
            .lock()
            .expect("bootstrap status lock poisoned")
            .clone()
    }

    /// The store this node indexes into.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The node's metrics (libp2p's gossipsub and bandwidth, and [`Stats`]) in the Prometheus
    /// text format.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        let registry = self.metrics.lock().expect("metrics lock poisoned");
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }

    /// Gossip and byte counters since the node started.
    pub fn traffic(&self) -> Traffic {
        traffic_from_metrics(&self.metrics_text())
    }

    async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)
    }

    /// Validate, store and announce an advertisement (gossip + DHT provider records).
    pub async fn publish(&self, bytes: Vec<u8>) -> Result<Validated, Error> {
        // Our own publishing: the store's caps and disk watermark do not apply.
        let validated = self.accept_from(bytes, Gate::Own).await?;
        self.call(|reply| Command::Publish {
            validated: validated.clone(),
            reply,
        })
        .await??;
        Ok(validated)
    }

    /// Validate and store one advertisement (from anywhere), exactly as gossip is validated.
    /// Returns it if it is new; `Reject::StaleSeq` if we have it or a newer one. The caller's
    /// own advertisements: a DID document fetch it needs does not wait for the resolution pool.
    pub async fn accept(&self, bytes: Vec<u8>) -> Result<Validated, Error> {
        self.accept_from(bytes, Gate::Local).await
    }

    async fn accept_from(&self, bytes: Vec<u8>, gate: Gate) -> Result<Validated, Error> {
        accept(
            &Ctx {
                store: &self.store,
                validator: &self.validator,
                stats: &self.stats,
                events: &self.accepted,
                cancel: &self.cancel,
            },
            bytes,
            gate,
        )
        .await
    }

    /// Ask `peer` for its advertisements matching `request` (the fetch protocol); the answer is
    /// not validated (see [`Client::discover`], which does).
    pub async fn fetch(&self, peer: PeerId, request: FetchRequest) -> Result<FetchResponse, Error> {
        self.call(|reply| Command::Fetch {
            peer,
            request,
            reply,
        })
        .await?
    }

    /// Find agents whose cards carry all `tags`: the local index first, then providers found
    /// through the DHT; every network result is validated like gossip. Ranked by freshness,
    /// one per DID, at most `limit`.
    ///
    /// Bounded: the providers found in [`DISCOVER_PROVIDERS_WAIT`] are asked, at most
    /// [`DISCOVER_PROVIDERS`] of them, [`DISCOVER_BATCH`] at a time, each for at most
    /// [`DISCOVER_FETCH_TIMEOUT`], until `limit` are found or the network part ends: after
    /// [`DISCOVER_TOP_UP`] if the local index had matches, [`DISCOVER_DEADLINE`] if not. The
    /// local matches and what was validated by then are returned.
    pub async fn discover(
        &self,
        tags: &[String],
        limit: usize,
    ) -> Result<Vec<StoredAdvert>, Error> {
        let tags: Vec<String> = tags.iter().filter_map(|t| tags::normalize(t)).collect();
        if tags.is_empty() {
            return Err(Error::Network("no usable tag to search for".into()));
        }
        let limit = limit.clamp(1, 1000);
        // On this worker, not a blocking thread: a bounded read (at most `limit` adverts found
        // through one tag's index) that the block cache serves, cheaper than the hand-off
        // (profiled with MCP `discover_agents`, docs/BENCHMARKS.md).
        let local = self
            .store
            .find(&tags, limit, unix_now())
            .map_err(|e| Error::Store(e.to_string()))?;
        if local.len() >= limit {
            return Ok(local);
        }
        let wait = if local.is_empty() {
            DISCOVER_DEADLINE
        } else {
            DISCOVER_TOP_UP
        };
        let deadline = tokio::time::Instant::now() + wait;
        let request = FetchRequest {
            tags: tags.clone(),
            limit: (limit as u32).min(MAX_FETCH),
        };
        let work = async {
            // Providers of the first tag; their answers are filtered by all tags on their side
            // and checked again on ours.
            let providers = self
                .call(|reply| Command::Providers {
                    tag: tags[0].clone(),
                    deadline: Some(Instant::now() + DISCOVER_PROVIDERS_WAIT.min(wait)),
                    reply,
                })
                .await?;
            let providers: Vec<PeerId> = providers
                .into_iter()
                .filter(|p| *p != self.peer_id)
                .take(DISCOVER_PROVIDERS)
                .collect();
            // Answers are handled as they come, DISCOVER_BATCH fetches in flight.
            let mut answers = futures::stream::iter(providers.iter().copied())
                .map(|peer| {
                    let request = request.clone();
                    async move {
                        let answer = match tokio::time::timeout(
                            DISCOVER_FETCH_TIMEOUT,
                            self.fetch(peer, request),
                        )
                        .await
                        {
                            Ok(r) => r,
                            Err(_) => Err(Error::Network(format!(
                                "fetch from {peer}: no answer in {DISCOVER_FETCH_TIMEOUT:?}"
                            ))),
                        };
                        (peer, answer)
                    }
                })
                .buffer_unordered(DISCOVER_BATCH);
            while let Some((peer, answer)) = answers.next().await {
                let answer = match answer {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "fetch from a provider failed");
                        continue;
                    }
                };
                // Validated a few at a time: advertisements that need a DID document fetch
                // take the provider's resolution slots (two), the rest are refused at once
                // instead of waiting in line, and offline ones (did:key) are not held up.
                let accepts = answer
                    .adverts
                    .into_iter()
                    .take(MAX_FETCH as usize)
                    .map(|ad| {
                        self.accept_from(ad.into_vec(), Gate::Peer(peer, self.slots.clone()))
                    });
                let results: Vec<_> = futures::stream::iter(accepts)
                    .buffer_unordered(DISCOVER_ACCEPTS)
                    .collect()
                    .await;
                for r in results {
                    match r {
                        Ok(_) | Err(Error::Rejected(Reject::StaleSeq { .. })) => {}
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "fetched advertisement refused")
                        }
                    }
                }
                let store = self.store.clone();
                let t = tags.clone();
                if blocking(move || store.find(&t, limit, unix_now()))
                    .await?
                    .len()
                    >= limit
                {
                    break;
                }
            }
            Ok::<(), Error>(())
        };
        match tokio::time::timeout_at(deadline, work).await {
            Ok(r) => r?,
            Err(_) => {
                tracing::debug!(tags = ?tags, "discover deadline passed; answering with what was found")
            }
        }
        let store = self.store.clone();
        blocking(move || store.find(&tags, limit, unix_now())).await
    }

    /// The PeerIds of nodes providing `tag` in the DHT.
    pub async fn providers(&self, tag: &str) -> Result<Vec<PeerId>, Error> {
        let tag = tags::normalize(tag).ok_or_else(|| Error::Network(format!("bad tag {tag:?}")))?;
        self.call(|reply| Command::Providers {
            tag,
            deadline: None,
            reply,
        })
        .await
    }

    /// Dial an address and wait for the connection (with or without a `/p2p/` component; the
    /// dial is tracked by its connection id). Ok at once if the address names a peer we are
    /// connected to. Fails if the dial fails, or after 30 s.
    pub async fn dial(&self, addr: Multiaddr) -> Result<(), Error> {
        let shown = addr.to_string();
        match tokio::time::timeout(
            DIAL_TIMEOUT,
            self.call(|reply| Command::Dial { addr, reply }),
        )
        .await
        {
            Ok(r) => r?,
            Err(_) => Err(Error::Network(format!(
                "dialing {shown}: no connection after {DIAL_TIMEOUT:?}"
            ))),
        }
    }

    /// Connected peers.
    pub async fn peers(&self) -> Result<Vec<PeerInfo>, Error> {
        self.call(|reply| Command::Peers { reply }).await
    }

    /// Addresses we listen on.
    pub async fn listen_addrs(&self) -> Result<Vec<Multiaddr>, Error> {
        self.call(|reply| Command::ListenAddrs { reply }).await
    }

    /// Register the check of [`ENDORSE_TOPIC`] messages (once; a second call is an error).
    pub fn check_endorsements(&self, check: Arc<dyn TopicCheck>) -> Result<(), Error> {
        self.endorsements
            .set(check)
            .map_err(|_| Error::Start("the endorsement check is already registered".into()))
    }

    /// Send `bytes` on [`ENDORSE_TOPIC`]. The caller checks them first: this crate does not
    /// read endorsements (a node forwards a peer's only after its [`TopicCheck`] accepts).
    /// No gossip peer yet is not an error: the bytes are then not sent, and the caller's
    /// next announcement is.
    pub async fn publish_endorsement(&self, bytes: Vec<u8>) -> Result<(), Error> {
        self.call(|reply| Command::PublishEndorsement { bytes, reply })
            .await?
    }

    /// Send bytes on the advertisement topic WITHOUT validating or storing them: what an
    /// adversarial peer does. For tests and the simulation (feature `test-utils`); an honest
    /// node never needs it.
    #[cfg(feature = "test-utils")]
    pub async fn gossip_unchecked(&self, bytes: Vec<u8>) -> Result<(), Error> {
        self.call(|reply| Command::GossipUnchecked { bytes, reply })
            .await?
    }
}

struct PendingProviders {
    remaining: usize,
    deadline: Option<Instant>,
    found: HashSet<PeerId>,
    reply: oneshot::Sender<Vec<PeerId>>,
}

struct Node {
    swarm: Swarm<Behaviour>,
    topic: IdentTopic,
    endorse_topic: IdentTopic,
    endorsements: TopicChecker,
    store: Store,
    validator: Validator,
    stats: Arc<Stats>,
    accepted: tokio::sync::broadcast::Sender<Accepted>,
    internal_tx: mpsc::Sender<Internal>,
    validations: Arc<Semaphore>,
    rates: HashMap<PeerId, (Instant, u32)>,
    /// Peers that used their whole message budget, muted (gossipsub's blacklist) until their
    /// window ends: see [`Node::within_rate`].
    muted: HashMap<PeerId, Instant>,
    cfg: Config,
    pending_providers: HashMap<u64, PendingProviders>,
    provider_queries: HashMap<QueryId, u64>,
    next_pending: u64,
    pending_fetches:
        HashMap<OutboundRequestId, (PeerId, oneshot::Sender<Result<FetchResponse, Error>>)>,
    /// When each connected peer's first connection was established.
    connected_since: HashMap<PeerId, Instant>,
    /// Tag keys to announce, and when.
    provide_queue: std::collections::VecDeque<(RecordKey, Instant)>,
    /// Announcements in flight.
    providing: HashSet<QueryId>,
    /// `Client::dial` calls, by the connection id of their dial (at most
    /// [`MAX_PENDING_DIALS`]).
    pending_dials: HashMap<ConnectionId, (Multiaddr, oneshot::Sender<Result<(), Error>>)>,
    peer_addrs: HashMap<PeerId, Vec<Multiaddr>>,
    /// The Kademlia bootstraps this node started ([`Node::bootstrap`]), until their last step.
    /// Any other bootstrap query is Kademlia's automatic one, cut short
    /// ([`Node::cut_automatic_bootstraps`]).
    own_bootstraps: HashSet<QueryId>,
    /// Automatic bootstraps cut short, until their last step (each is counted once).
    cut_bootstraps: HashSet<QueryId>,
    /// Our join lookups in flight (`Node::add_kad_address`), whose requests are counted apart.
    joining: HashSet<QueryId>,
    /// The bootstrap addresses and their redials.
    bootstraps: Bootstraps,
    /// Our listeners, closed first at teardown.
    listeners: Vec<libp2p::core::transport::ListenerId>,
    /// The first bootstrap dials were made.
    bootstraps_started: bool,
    /// The node's token (see [`Client`]); helper tasks stop on it.
    cancel: CancellationToken,
    /// Every helper task (validations, fetch answers, sweeps, peer writes): `run` waits for all
    /// of them before it returns.
    tasks: TaskTracker,
    /// The resolution pool (validations waiting for a DID document).
    slots: ResolveSlots,
    /// Inbound fetch requests.
    fetch_limiter: FetchLimiter,
    /// Inbound provider records.
    provider_quota: ProviderQuota,
    /// Addresses of peers we dialed, to the store writer (bounded; full drops).
    peer_writes: mpsc::Sender<(PeerId, Multiaddr)>,
    /// A sweep of expired advertisements is running (they never overlap).
    sweeping: Arc<std::sync::atomic::AtomicBool>,
}

/// The libp2p identity of the node key: the same Ed25519 key.
fn keypair(key: &agentnet_did::SecretKey) -> Result<libp2p::identity::Keypair, Error> {
    let mut seed = key.seed();
    libp2p::identity::Keypair::ed25519_from_bytes(&mut seed)
        .map_err(|e| Error::Start(format!("node key: {e}")))
}

/// The PeerId a node with `key` has (what `agentnet init` prints before the node runs).
pub fn peer_id_of(key: &agentnet_did::SecretKey) -> Result<PeerId, Error> {
    Ok(keypair(key)?.public().to_peer_id())
}

/// Start the network: build the swarm from the node's key, listen, dial the bootstrap peers, and
/// run the swarm task until `shutdown` fires.
pub async fn spawn(
    key: &agentnet_did::SecretKey,
    cfg: Config,
    store: Store,
    validator: Validator,
    shutdown: CancellationToken,
) -> Result<(Client, tokio::task::JoinHandle<()>), Error> {
    let keypair = keypair(key)?;
    let peer_id = keypair.public().to_peer_id();
    let stats = Arc::new(Stats::default());
    let mut registry = Registry::default();
    stats.register(&mut registry);
    let swarm = build_swarm(keypair, &cfg, &mut registry)?;
    let (tx, cmd_rx) = mpsc::channel(256);
    let (internal_tx, internal_rx) = mpsc::channel(1024);
    let topic = IdentTopic::new(TOPIC);
    let endorse_topic = IdentTopic::new(ENDORSE_TOPIC);
    let endorsements: TopicChecker = Default::default();
    let (accepted, _) = tokio::sync::broadcast::channel(1024);
    // The node's own token: the caller's shutdown, or the last client dropped.
    let cancel = shutdown.child_token();
    let tasks = TaskTracker::new();
    let slots = ResolveSlots::new(cfg.max_concurrent_resolutions, cfg.resolutions_per_peer);
    let (peer_writes, peer_writes_rx) = mpsc::channel(PEER_WRITE_QUEUE);
    tasks.spawn(write_peers(store.clone(), peer_writes_rx, cancel.clone()));
    let mut node = Node {
        accepted: accepted.clone(),
        swarm,
        topic: topic.clone(),
        endorse_topic: endorse_topic.clone(),
        endorsements: endorsements.clone(),
        store: store.clone(),
        validator: validator.clone(),
        stats: stats.clone(),
        internal_tx,
        validations: Arc::new(Semaphore::new(cfg.max_concurrent_validations.max(1))),
        rates: HashMap::new(),
        muted: HashMap::new(),
        cfg: cfg.clone(),
        pending_providers: HashMap::new(),
        provider_queries: HashMap::new(),
        next_pending: 0,
        pending_fetches: HashMap::new(),
        connected_since: HashMap::new(),
        provide_queue: Default::default(),
        providing: HashSet::new(),
        pending_dials: HashMap::new(),
        peer_addrs: HashMap::new(),
        own_bootstraps: HashSet::new(),
        cut_bootstraps: HashSet::new(),
        joining: HashSet::new(),
        bootstraps: Bootstraps::new(&cfg.bootstrap, Instant::now(), unix_now()),
        bootstraps_started: false,
        listeners: Vec::new(),
        cancel: cancel.clone(),
        tasks,
        slots: slots.clone(),
        fetch_limiter: FetchLimiter::new(
            cfg.fetch_in_flight_total,
            cfg.fetch_in_flight_per_peer,
            cfg.fetch_per_peer,
            cfg.rate_window,
            // One entry per peer with a window open: connections are capped at
            // `max_connections`, and a peer reconnecting keeps its entry until it ends.
            (cfg.max_connections as usize).saturating_mul(2),
        ),
        provider_quota: ProviderQuota::new(cfg.provider_keys_per_peer, cfg.provider_keys_total),
        peer_writes,
        sweeping: Default::default(),
    };
    node.swarm
        .behaviour_mut()
        .gossipsub
        .subscribe(&topic)
        .map_err(|e| Error::Start(format!("subscribing to {TOPIC}: {e}")))?;
    node.swarm
        .behaviour_mut()
        .gossipsub
        .subscribe(&endorse_topic)
        .map_err(|e| Error::Start(format!("subscribing to {ENDORSE_TOPIC}: {e}")))?;
    for addr in &cfg.listen {
        swarm::probe_listen(addr)?;
    }
    for addr in &cfg.listen {
        let id = node
            .swarm
            .listen_on(addr.clone())
            .map_err(|e| Error::Start(format!("listening on {addr}: {e:?}")))?;
        node.listeners.push(id);
    }
    node.dial_bootstraps();
    if cfg.redial_peers > 0 {
        let s = store.clone();
        match blocking(move || s.peers()).await {
            Ok(known) => node.redial(known),
            Err(error) => tracing::warn!(%error, "reading known peers"),
        }
    }
    let client = Client {
        tx,
        peer_id,
        store,
        validator,
        stats,
        accepted,
        metrics: Arc::new(Mutex::new(registry)),
        cancel: cancel.clone(),
        slots,
        bootstrap: node.bootstraps.status(),
        endorsements,
        _stop_on_drop: Arc::new(cancel.clone().drop_guard()),
    };
    let handle = tokio::spawn(node.run(cmd_rx, internal_rx));
    Ok((client, handle))
}

/// Write the addresses of peers we dialed to the store, one at a time, until the node stops.
/// A restarted node dials them again ([`Config::redial_peers`]). Only dialed addresses are
/// written: a peer that dials us shows its ephemeral port, and it cannot make us write at all.
async fn write_peers(
    store: Store,
    mut rx: mpsc::Receiver<(PeerId, Multiaddr)>,
    cancel: CancellationToken,
) {
    loop {
        let (peer, addr) = tokio::select! {
            _ = cancel.cancelled() => return,
            next = rx.recv() => match next {
                Some(p) => p,
                None => return,
            },
        };
        let s = store.clone();
        let (p, a) = (peer.to_string(), vec![addr.to_string()]);
        if let Err(error) = blocking(move || s.put_peer(&p, &a, unix_now())).await {
            tracing::debug!(%error, %peer, "remembering a peer");
        }
    }
}

fn peer_of(addr: &Multiaddr) -> Option<PeerId> {
    addr.iter().find_map(|p| match p {
        libp2p::multiaddr::Protocol::P2p(id) => Some(id),
        _ => None,
    })
}

impl Node {
    /// The event loop, then the teardown. Returns when nothing of the node runs any more.
    async fn run(
        mut self,
        mut cmd_rx: mpsc::Receiver<Command>,
        mut internal_rx: mpsc::Receiver<Internal>,
    ) {
        let mut sweep = tokio::time::interval(self.cfg.sweep_interval);
        let mut trim = tokio::time::interval(Duration::from_secs(1));
        let mut provide = tokio::time::interval(Duration::from_millis(250));
        provide.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut expire = tokio::time::interval(PROVIDER_EXPIRY_INTERVAL);
        expire.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Kademlia's own periodic bootstrap is off (see `build_behaviour`); this one skips a
        // node with an empty routing table instead of warning about it.
        let refresh_every = self.cfg.kad_bootstrap_interval.unwrap_or(Duration::MAX);
        let mut refresh = tokio::time::interval_at(
            tokio::time::Instant::now()
                .checked_add(refresh_every)
                .unwrap_or_else(tokio::time::Instant::now),
            refresh_every.min(Duration::from_secs(365 * 24 * 3600)),
        );
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let cancel = self.cancel.clone();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(cmd) = cmd_rx.recv() => self.on_command(cmd),
                Some(ev) = internal_rx.recv() => self.on_internal(ev),
                ev = self.swarm.select_next_some() => {
                    self.on_swarm(ev);
                    self.cut_automatic_bootstraps();
                }
                _ = sweep.tick() => self.sweep(),
                _ = trim.tick() => {
                    self.unmute();
                    self.trim_connections();
                    self.dial_bootstraps();
                }
                _ = provide.tick() => {
                    self.provide_due();
                    self.providers_due();
                }
                _ = refresh.tick(), if self.cfg.kad_bootstrap_interval.is_some() => {
                    self.bootstrap();
                }
                _ = expire.tick() => self.expire_provider_records(),
            }
        }
        // Teardown, in this order:
        // 1. No new work: commands are refused from here on (callers get `Error::Stopped`),
        //    no helper is spawned any more (`close`), and the listeners close (the memory
        //    transport frees its port only then: a node restarted on it can listen again).
        cmd_rx.close();
        for id in std::mem::take(&mut self.listeners) {
            self.swarm.remove_listener(id);
        }
        self.tasks.close();
        // 2. Helpers stop at their next await point on the cancelled token (a validation
        //    waiting for a DID document, the peer writer); a blocking store call in progress
        //    finishes, and no validation writes once the token is cancelled. What they send
        //    back is dropped; reading it keeps them from blocking on a full channel.
        let wait = self.tasks.wait();
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = &mut wait => break,
                Some(_) = internal_rx.recv() => {}
            }
        }
        // 3. The swarm, its connections and the pending replies go with `self`: callers waiting
        //    on a fetch, a dial or providers get `Error::Stopped`.
        tracing::debug!("network task stopped");
    }

    /// Sweep expired advertisements off the swarm task; at most one sweep at a time.
    fn sweep(&self) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let (store, sweeping) = (self.store.clone(), self.sweeping.clone());
        self.tasks.spawn_blocking(move || {
            match store.sweep_expired(unix_now()) {
                Ok(n) if n > 0 => tracing::debug!(swept = n, "expired advertisements swept"),
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "sweeping expired advertisements"),
            }
            sweeping.store(false, Ordering::Release);
        });
    }

    /// Dial the bootstrap addresses that are due (all at start; then, while the node has no
    /// peer, those not connected, with backoff: see `bootstrap`). Each is put back in the
    /// routing table first: Kademlia must not lose it.
    fn dial_bootstraps(&mut self) {
        let now = Instant::now();
        let due = self.bootstraps.due(
            self.connected_since.is_empty(),
            self.bootstraps_started,
            now,
        );
        self.bootstraps_started = true;
        for i in due {
            let Some((addr, peer)) = self.bootstraps.addr(i) else {
                continue;
            };
            let addr = addr.clone();
            if let Some(peer) = peer {
                self.add_kad_address(peer, addr.clone());
            }
            // A new port, not the listener's (see `build_swarm`).
            let opts = DialOpts::unknown_peer_id()
                .address(addr.clone())
                .allocate_new_port()
                .build();
            let id = opts.connection_id();
            let started = self
                .swarm
                .dial(opts)
                .map(|()| id)
                .map_err(|e| e.to_string());
            let error = started.as_ref().err().cloned();
            match self.bootstraps.dialing(i, started, now, unix_now()) {
                Outcome::Changed(_) => {
                    tracing::warn!(address = %addr, error = ?error, "cannot dial bootstrap peer; retrying while the node has no peer")
                }
                Outcome::Same(_) => {
                    tracing::debug!(address = %addr, error = ?error, "cannot dial bootstrap peer")
                }
                Outcome::Other => {}
            }
        }
    }

    /// Peers in the Kademlia routing table.
    fn routing_table_len(&mut self) -> usize {
        self.swarm
            .behaviour_mut()
            .kad
            .kbuckets()
            .map(|b| b.num_entries())
            .sum()
    }

    /// Answer the providers lookups whose deadline passed with what they found; their queries
    /// end.
    fn providers_due(&mut self) {
        let now = Instant::now();
        let late: Vec<u64> = self
            .pending_providers
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            let queries: Vec<QueryId> = self
                .provider_queries
                .iter()
                .filter(|(_, p)| **p == id)
                .map(|(q, _)| *q)
                .collect();
            for q in queries {
                self.provider_queries.remove(&q);
                if let Some(mut query) = self.swarm.behaviour_mut().kad.query_mut(&q) {
                    query.finish();
                }
            }
            if let Some(p) = self.pending_providers.remove(&id) {
                tracing::debug!(found = p.found.len(), "providers lookup deadline passed");
                let _ = p.reply.send(p.found.into_iter().collect());
            }
        }
    }

    /// Remove inbound provider records whose time is up.
    fn expire_provider_records(&mut self) {
        let gone = self.provider_quota.expire(Instant::now());
        if gone.is_empty() {
            return;
        }
        let store = self.swarm.behaviour_mut().kad.store_mut();
        for (key, peer) in &gone {
            store.remove_provider(key, peer);
        }
        tracing::debug!(expired = gone.len(), "inbound provider records expired");
    }

    /// Dial up to [`Config::redial_peers`] of the peers the store knows (most recently seen
    /// first), each at its first address that carries or can be given its peer id.
    fn redial(&mut self, known: Vec<(String, Vec<String>, u64)>) {
        let mut dialed = 0;
        for (peer, addrs, _) in known {
            if dialed >= self.cfg.redial_peers {
                break;
            }
            let Ok(peer) = peer.parse::<PeerId>() else {
                continue;
            };
            if peer == *self.swarm.local_peer_id() || self.swarm.is_connected(&peer) {
                continue;
            }
            let addrs: Vec<Multiaddr> = addrs
                .iter()
                .filter_map(|a| a.parse::<Multiaddr>().ok())
                .filter_map(|a| match peer_of(&a) {
                    Some(p) if p == peer => Some(a),
                    Some(_) => None,
                    None => Some(a.with(libp2p::multiaddr::Protocol::P2p(peer))),
                })
                .collect();
            if addrs.is_empty() {
                continue;
            }
            for a in &addrs {
                self.add_kad_address(peer, a.clone());
            }
            let opts = DialOpts::peer_id(peer)
                .condition(PeerCondition::DisconnectedAndNotDialing)
                .addresses(addrs)
                .allocate_new_port()
                .build();
            match self.swarm.dial(opts) {
                Ok(()) => dialed += 1,
                Err(error) => tracing::debug!(%peer, %error, "redialing a known peer"),
            }
        }
        if dialed > 0 {
            tracing::info!(dialed, "dialing peers known from before");
        }
    }

    fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Publish { validated, reply } => {
                let b = self.swarm.behaviour_mut();
                match b
                    .gossipsub
                    .publish(self.topic.clone(), validated.bytes.clone())
                {
                    Ok(_) | Err(gossipsub::PublishError::Duplicate) => {}
                    Err(gossipsub::PublishError::NoPeersSubscribedToTopic) => {
                        tracing::debug!(did = %validated.did, "no gossip peers yet; the DHT still has it")
                    }
                    Err(e) => tracing::warn!(error = %e, did = %validated.did, "gossip publish"),
                }
                let shard = tags::shard_for(&self.swarm.local_peer_id().to_bytes());
                let due = Instant::now() + self.cfg.provide_delay;
                for tag in &validated.tags {
                    let key = RecordKey::new(&tags::dht_key(tag, shard));
                    if !self.provide_queue.iter().any(|(k, _)| k == &key)
                        && self.provide_queue.len() < MAX_PROVIDE_QUEUE
                    {
                        self.provide_queue.push_back((key, due));
                    }
                }
                let _ = reply.send(Ok(()));
            }
            Command::Providers {
                tag,
                deadline,
                reply,
            } => {
                let id = self.next_pending;
                self.next_pending += 1;
                for shard in 0..tags::SHARDS {
                    let q = self
                        .swarm
                        .behaviour_mut()
                        .kad
                        .get_providers(RecordKey::new(&tags::dht_key(&tag, shard)));
                    self.provider_queries.insert(q, id);
                }
                self.pending_providers.insert(
                    id,
                    PendingProviders {
                        remaining: tags::SHARDS as usize,
                        deadline,
                        found: HashSet::new(),
                        reply,
                    },
                );
            }
            Command::Fetch {
                peer,
                request,
                reply,
            } => {
                let id = self
                    .swarm
                    .behaviour_mut()
                    .fetch
                    .send_request(&peer, request);
                self.pending_fetches.insert(id, (peer, reply));
            }
            Command::Dial { addr, reply } => {
                if let Some(peer) = peer_of(&addr) {
                    if self.swarm.is_connected(&peer) {
                        let _ = reply.send(Ok(()));
                        return;
                    }
                    self.add_kad_address(peer, addr.clone());
                }
                if self.pending_dials.len() >= MAX_PENDING_DIALS {
                    // Callers that gave up (timed out) leave their entry until the dial ends.
                    self.pending_dials.retain(|_, (_, r)| !r.is_closed());
                }
                if self.pending_dials.len() >= MAX_PENDING_DIALS {
                    let _ = reply.send(Err(Error::Busy(format!(
                        "dialing {addr}: {MAX_PENDING_DIALS} dials already waiting"
                    ))));
                    return;
                }
                // Tracked by connection id: a failed dial to an address without `/p2p/`
                // reports no peer id.
                let opts = DialOpts::unknown_peer_id()
                    .address(addr.clone())
                    .allocate_new_port()
                    .build();
                let id = opts.connection_id();
                match self.swarm.dial(opts) {
                    Ok(()) => {
                        self.pending_dials.insert(id, (addr, reply));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(Error::Network(format!("dialing {addr}: {e}"))));
                    }
                }
            }
            Command::PublishEndorsement { bytes, reply } => {
                let _ = reply.send(self.publish_endorsement(bytes));
            }
            Command::Peers { reply } => {
                let peers = self
                    .swarm
                    .connected_peers()
                    .map(|p| PeerInfo {
                        peer_id: p.to_string(),
                        addrs: self
                            .peer_addrs
                            .get(p)
                            .map(|a| a.iter().map(|x| x.to_string()).collect())
                            .unwrap_or_default(),
                    })
                    .collect();
                let _ = reply.send(peers);
            }
            Command::ListenAddrs { reply } => {
                let _ = reply.send(self.swarm.listeners().cloned().collect());
            }
            #[cfg(feature = "test-utils")]
            Command::GossipUnchecked { bytes, reply } => {
                let r = self
                    .swarm
                    .behaviour_mut()
                    .gossipsub
                    .publish(self.topic.clone(), bytes)
                    .map(|_| ())
                    .map_err(|e| Error::Network(format!("gossip: {e}")));
                let _ = reply.send(r);
            }
        }
    }

    fn publish_endorsement(&mut self, bytes: Vec<u8>) -> Result<(), Error> {
        match self
            .swarm
            .behaviour_mut()
            .gossipsub
            .publish(self.endorse_topic.clone(), bytes)
        {
            Ok(_)
            | Err(gossipsub::PublishError::Duplicate)
            | Err(gossipsub::PublishError::NoPeersSubscribedToTopic) => Ok(()),
            Err(e) => Err(Error::Network(format!("gossip: {e}"))),
        }
    }

    fn on_internal(&mut self, ev: Internal) {
        match ev {
            Internal::Validation {
                id,
                source,
                acceptance,
            } => {
                self.swarm
                    .behaviour_mut()
                    .gossipsub
                    .report_message_validation_result(&id, &source, acceptance);
            }
            Internal::Respond {
                peer,
                channel,
                response,
            } => {
                self.fetch_limiter.finish(&peer);
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .fetch
                    .send_response(channel, response);
            }
        }
    }

    /// Add a peer's address to the Kademlia routing table if its bucket has room (or already
    /// holds the peer). Kademlia's own policy, when a bucket is full, dials the bucket's oldest
    /// disconnected peer to see whether it is alive; with connections that close when idle that
    /// dial makes the remote do the same, and so on, a chain of dials that never settles (we
    /// measured every node connected to nearly every other). Routing entries of dead peers are
    /// still dropped when queries fail to reach them.
    fn add_kad_address(&mut self, peer: PeerId, addr: Multiaddr) {
        let was_empty = self.routing_table_len() == 0;
        let kad = &mut self.swarm.behaviour_mut().kad;
        let room = kad.kbucket(peer).is_some_and(|b| {
            b.num_entries() < kad::K_VALUE.get() || b.iter().any(|e| e.node.key.preimage() == &peer)
        });
        if room {
            kad.add_address(&peer, addr);
            // The first peer in the routing table (at start, or after it emptied): join the
            // DHT through it with one lookup of our own id. It finds our closest peers and
            // makes us known to them; the buckets farther out fill as other peers' lookups and
            // ours pass, and are refreshed every `kad_bootstrap_interval`. A full bootstrap
            // here (a lookup per bucket, ~10 on 1 000 nodes) dialed ~175 peers per joining
            // node and made most of a network's setup storm (docs/BENCHMARKS.md).
            if was_empty {
                let me = *self.swarm.local_peer_id();
                // As many as the configured k (libp2p's `get_closest_peers` always looks for 20).
                let k = std::num::NonZeroUsize::new(self.cfg.kad_k).unwrap_or(kad::K_VALUE);
                let id = self.swarm.behaviour_mut().kad.get_n_closest_peers(me, k);
                self.joining.insert(id);
                self.stats.joins.inc();
            }
        }
    }

    /// Start a Kademlia bootstrap (a lookup of our own id, then one per bucket farther out),
    /// unless one of ours is running or the routing table is empty.
    fn bootstrap(&mut self) {
        if !self.own_bootstraps.is_empty() || self.routing_table_len() == 0 {
            return;
        }
        if let Ok(id) = self.swarm.behaviour_mut().kad.bootstrap() {
            self.own_bootstraps.insert(id);
        }
    }

    /// Cuts short the bootstraps Kademlia starts by itself. libp2p-kad (0.48, 0.49) starts one half a
    /// second after any peer enters a routing table of fewer than 20, and again after it ends
    /// if peers entered meanwhile (so twice per node joining, and on every new peer in a network
    /// of fewer than 20), each a lookup per bucket that dials tens of peers; it has no public
    /// setting to turn this off (`set_automatic_bootstrap_throttle` is crate-private;
    /// rust-libp2p issue #5341). On a 1 000-node network that joins at once, those dials are
    /// most of the setup's connection storm (docs/BENCHMARKS.md). The node bootstraps itself
    /// instead: a lookup of its own id when the routing table gets its first peer
    /// (`Node::add_kad_address`), and a bootstrap every `kad_bootstrap_interval`
    /// ([`Node::bootstrap`]). A finished step of a cut query starts its next step (the next
    /// bucket), which the next call cuts again; each step has sent at most a few requests.
    fn cut_automatic_bootstraps(&mut self) {
        let own = &self.own_bootstraps;
        for mut q in self.swarm.behaviour_mut().kad.iter_queries_mut() {
            if matches!(q.info(), kad::QueryInfo::Bootstrap { .. }) && !own.contains(&q.id()) {
                q.finish();
                if self.cut_bootstraps.insert(q.id()) {
                    self.stats.bootstraps_cut.inc();
                }
            }
        }
    }

    /// Start the provider announcements that are due, at most [`MAX_PROVIDING`] at a time.
    fn provide_due(&mut self) {
        let now = Instant::now();
        while self.providing.len() < MAX_PROVIDING {
            match self.provide_queue.front() {
                Some((_, due)) if *due <= now => {}
                _ => break,
            }
            let Some((key, _)) = self.provide_queue.pop_front() else {
                break;
            };
            match self.swarm.behaviour_mut().kad.start_providing(key) {
                Ok(id) => {
                    self.providing.insert(id);
                }
                Err(e) => tracing::warn!(error = ?e, "announcing a tag in the DHT"),
            }
        }
    }

    /// An ADD_PROVIDER from another peer (Kademlia only reports it, `StoreInserts::FilterBoth`;
    /// it checked that the record's provider is the sender): stored if the quota admits it.
    fn on_inbound_provider(&mut self, record: kad::ProviderRecord) {
        let decision = self.provider_quota.admit(
            record.provider,
            &record.key,
            record.expires,
            self.cfg.provider_record_ttl,
            Instant::now(),
        );
        if !decision.admitted() {
            self.stats.provider_records_refused.inc();
            if decision == Admission::Full {
                tracing::debug!(peer = %record.provider, "inbound provider records full");
            }
            return;
        }
        let provider = record.provider;
        let key = record.key.clone();
        let mut record = dht::trim_record(record);
        let cap = Instant::now() + self.cfg.provider_record_ttl;
        record.expires = Some(record.expires.map_or(cap, |e| e.min(cap)));
        match self
            .swarm
            .behaviour_mut()
            .kad
            .store_mut()
            .add_provider(record)
        {
            Ok(()) => {
                self.stats.provider_records_admitted.inc();
            }
            Err(error) => {
                // Only if the quota and the store disagree; keep them in step.
                tracing::debug!(%error, %provider, "inbound provider record not stored");
                if decision == Admission::New {
                    self.provider_quota.forget(&provider, &key);
                }
            }
        }
    }

    /// The connection manager (see [`Config::conn_high`]).
    fn trim_connections(&mut self) {
        let connected = self.connected_since.len();
        if connected <= self.cfg.conn_high {
            return;
        }
        let mesh: HashSet<PeerId> = self
            .swarm
            .behaviour()
            .gossipsub
            .all_mesh_peers()
            .copied()
            .collect();
        let busy: HashSet<PeerId> = self.pending_fetches.values().map(|(p, _)| *p).collect();
        let now = Instant::now();
        let mut candidates: Vec<(PeerId, Instant)> = self
            .connected_since
            .iter()
            .filter(|(p, since)| {
                !mesh.contains(p)
                    && !busy.contains(p)
                    && now.duration_since(**since) >= self.cfg.conn_grace
            })
            .map(|(p, since)| (*p, *since))
            .collect();
        // Newest first: connections that lasted have proven useful.
        candidates.sort_by_key(|c| std::cmp::Reverse(c.1));
        let excess = connected.saturating_sub(self.cfg.conn_low.min(self.cfg.conn_high));
        let mut closed = 0u64;
        for (peer, _) in candidates.into_iter().take(excess) {
            if self.swarm.disconnect_peer_id(peer).is_ok() {
                closed += 1;
            }
        }
        if closed > 0 {
            self.stats.trimmed.inc_by(closed);
            tracing::debug!(closed, connected, "connection manager closed connections");
        }
    }

    /// Per-peer rate limit on gossip: true if this message is within the budget.
    ///
    /// The message that uses the last of a peer's budget mutes the peer for the rest of its
    /// window: gossipsub then drops whatever it sends before its duplicate cache. Ignoring
    /// its messages one by one instead would put each one's id in that cache, so that the
    /// same message from an honest peer would be dropped as a duplicate. A peer could then
    /// spend its budget on cheap replays and relay a fresh advertisement first, and the node
    /// would never take that advertisement from anyone: seen at 200 nodes with four
    /// replayers, where four of 20 advertisements each missed a node for ~5 s, until a
    /// replayer's own replay carried it.
    fn within_rate(&mut self, peer: PeerId) -> bool {
        let now = Instant::now();
        let window = self.cfg.rate_window;
        let entry = self.rates.entry(peer).or_insert((now, 0));
        if now.duration_since(entry.0) >= window {
            *entry = (now, 0);
        }
        entry.1 += 1;
        let (start, used) = *entry;
        if used == self.cfg.per_peer_messages {
            self.muted.insert(peer, start + window);
            self.swarm.behaviour_mut().gossipsub.blacklist_peer(&peer);
            self.stats.muted.inc();
            tracing::debug!(%peer, used, "peer used its gossip budget: muted until its window ends");
        }
        used <= self.cfg.per_peer_messages
    }

    /// Lifts the mutes whose windows have ended.
    fn unmute(&mut self) {
        let now = Instant::now();
        let ended: Vec<PeerId> = self
            .muted
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(p, _)| *p)
            .collect();
        for peer in ended {
            self.muted.remove(&peer);
            self.swarm
                .behaviour_mut()
                .gossipsub
                .remove_blacklisted_peer(&peer);
        }
    }

    /// The admission every gossip message passes, on either topic: the sender's message rate,
    /// then a validation permit. A message refused here is ignored (not forwarded, the sender
    /// not blamed) and counted as throttled.
    fn admit(&mut self, source: PeerId, id: &MessageId) -> Option<OwnedSemaphorePermit> {
        let permit = if self.within_rate(source) {
            let permit = self.validations.clone().try_acquire_owned().ok();
            if permit.is_none() {
                self.stats.throttled_busy.inc();
            }
            permit
        } else {
            None
        };
        if permit.is_none() {
            self.stats.throttled.inc();
            self.swarm
                .behaviour_mut()
                .gossipsub
                .report_message_validation_result(id, &source, MessageAcceptance::Ignore);
        }
        permit
    }

    fn on_gossip(&mut self, source: PeerId, id: MessageId, data: Vec<u8>) {
        let Some(permit) = self.admit(source, &id) else {
            return;
        };
        let (store, validator, stats, events, tx, cancel, slots) = (
            self.store.clone(),
            self.validator.clone(),
            self.stats.clone(),
            self.accepted.clone(),
            self.internal_tx.clone(),
            self.cancel.clone(),
            self.slots.clone(),
        );
        self.tasks.spawn(async move {
            let ctx = Ctx {
                store: &store,
                validator: &validator,
                stats: &stats,
                events: &events,
                cancel: &cancel,
            };
            // The permit is held until validation ends, or handed back while a DID document
            // is fetched (then a resolution slot is held instead).
            let gate = Gate::Gossip(source, slots, Some(permit));
            let acceptance = match accept(&ctx, data, gate).await {
                Ok(v) => {
                    tracing::debug!(did = %v.did, seq = v.seq, peer = %source, "accepted advertisement");
                    MessageAcceptance::Accept
                }
                Err(Error::Rejected(r)) if r.penalize() => {
                    stats.reject_from(source);
                    tracing::info!(peer = %source, reason = r.reason(), error = %r, "rejected advertisement");
                    MessageAcceptance::Reject
                }
                Err(Error::Stopped) => return,
                Err(e) => {
                    tracing::debug!(peer = %source, error = %e, "ignored advertisement");
                    MessageAcceptance::Ignore
                }
            };
            let _ = tx
                .send(Internal::Validation {
                    id,
                    source,
                    acceptance,
                })
                .await;
        });
    }

    /// An [`ENDORSE_TOPIC`] message: the same per-peer rate and validation permits as an
    /// advertisement, then the node's [`TopicCheck`] on a helper task.
    fn on_endorsement(&mut self, source: PeerId, id: MessageId, data: Vec<u8>) {
        let Some(check) = self.endorsements.get().cloned() else {
            self.stats.endorsements_ignored.inc();
            self.swarm
                .behaviour_mut()
                .gossipsub
                .report_message_validation_result(&id, &source, MessageAcceptance::Ignore);
            return;
        };
        let Some(permit) = self.admit(source, &id) else {
            return;
        };
        let (tx, cancel, stats) = (
            self.internal_tx.clone(),
            self.cancel.clone(),
            self.stats.clone(),
        );
        self.tasks.spawn(async move {
            let acceptance = tokio::select! {
                v = check.check(source, data) => match v {
                    Verdict::Accept => {
                        stats.endorsements_accepted.inc();
                        MessageAcceptance::Accept
                    }
                    Verdict::Ignore => {
                        stats.endorsements_ignored.inc();
                        MessageAcceptance::Ignore
                    }
                    Verdict::Reject => {
                        stats.endorsements_rejected.inc();
                        stats.reject_from(source);
                        MessageAcceptance::Reject
                    }
                },
                _ = cancel.cancelled() => return,
            };
            drop(permit);
            let _ = tx
                .send(Internal::Validation {
                    id,
                    source,
                    acceptance,
                })
                .await;
        });
    }

    /// Answer a fetch request on a helper task, if the limiter admits it; a refused request's
    /// stream is dropped unanswered (the asker sees the stream close), before any store read.
    fn on_fetch_request(
        &mut self,
        peer: PeerId,
        request: FetchRequest,
        channel: ResponseChannel<FetchResponse>,
    ) {
        if let Err(why) = self.fetch_limiter.start(peer, Instant::now()) {
            self.stats.fetches_refused.inc();
            tracing::debug!(%peer, ?why, "fetch request refused");
            drop(channel);
            return;
        }
        self.stats.fetches_served.inc();
        let store = self.store.clone();
        let tx = self.internal_tx.clone();
        self.tasks.spawn(async move {
            let tags: Vec<String> = request
                .tags
                .iter()
                .take(tags::MAX_TAGS)
                .filter_map(|t| tags::normalize(t))
                .collect();
            let limit = request.limit.min(MAX_FETCH) as usize;
            let found = if tags.is_empty() {
                Vec::new()
            } else {
                blocking(move || store.find(&tags, limit, unix_now()))
                    .await
                    .unwrap_or_default()
            };
            let mut bytes = 0usize;
            let response = FetchResponse {
                adverts: found
                    .into_iter()
                    .take_while(|a| {
                        bytes += a.bytes.len();
                        bytes <= MAX_FETCH_BYTES
                    })
                    .map(|a| serde_bytes::ByteBuf::from(a.bytes))
                    .collect(),
            };
            // Sent even at shutdown: the swarm task drains the channel until every helper ends.
            let _ = tx
                .send(Internal::Respond {
                    peer,
                    channel,
                    response,
                })
                .await;
        });
    }

    /// Apply one swarm event: each kind to its own handler, behaviours' events to
    /// [`on_behaviour`](Self::on_behaviour).
    fn on_swarm(&mut self, ev: SwarmEvent<BehaviourEvent>) {
        match ev {
            SwarmEvent::Behaviour(ev) => self.on_behaviour(ev),
            SwarmEvent::Dialing { .. } => {
                self.stats.dials.inc();
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                endpoint,
                connection_id,
                ..
            } => self.on_connected(peer_id, &endpoint, connection_id),
            SwarmEvent::ConnectionClosed {
                peer_id,
                num_established: 0,
                ..
            } => self.on_disconnected(peer_id),
            SwarmEvent::OutgoingConnectionError {
                peer_id,
                error,
                connection_id,
            } => self.on_dial_failed(peer_id, &error, connection_id),
            SwarmEvent::NewListenAddr { address, .. } => self.on_listening(address),
            _ => {}
        }
    }

    /// Apply one event of a behaviour: gossip, Kademlia, the fetch protocol, identify, mDNS.
    fn on_behaviour(&mut self, ev: BehaviourEvent) {
        match ev {
            BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            }) => {
                if message.topic == self.endorse_topic.hash() {
                    self.on_endorsement(propagation_source, message_id, message.data)
                } else {
                    self.on_gossip(propagation_source, message_id, message.data)
                }
            }
            BehaviourEvent::Kad(kad::Event::OutboundQueryProgressed {
                id,
                result,
                step,
                stats,
                ..
            }) => self.on_query_progressed(id, result, &step, &stats),
            BehaviourEvent::Kad(kad::Event::InboundRequest {
                request:
                    kad::InboundRequest::AddProvider {
                        record: Some(record),
                    },
            }) => self.on_inbound_provider(record),
            BehaviourEvent::Kad(kad::Event::RoutablePeer { peer, address, .. }) => {
                self.add_kad_address(peer, address)
            }
            BehaviourEvent::Fetch(ev) => self.on_fetch_event(ev),
            BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                self.on_identified(peer_id, info)
            }
            BehaviourEvent::Mdns(mdns::Event::Discovered(list)) => self.on_mdns_discovered(list),
            _ => {}
        }
    }

    /// A step of one of our Kademlia queries: count its requests, then act on what finished
    /// (an announcement, a bootstrap, a provider search).
    fn on_query_progressed(
        &mut self,
        id: QueryId,
        result: QueryResult,
        step: &kad::ProgressStep,
        stats: &kad::QueryStats,
    ) {
        // Each step of a multi-step query (a bootstrap's buckets) counts its own.
        let requests = u64::from(stats.num_requests());
        if self.joining.contains(&id) {
            self.stats.kad_requests_join.inc_by(requests);
            if step.last {
                self.joining.remove(&id);
            }
        } else if self.cut_bootstraps.contains(&id) {
            self.stats.kad_requests_cut.inc_by(requests);
        } else {
            self.stats.kad_requests_other.inc_by(requests);
        }
        if step.last && self.providing.remove(&id) {
            if let QueryResult::StartProviding(Err(e)) = &result {
                tracing::debug!(error = ?e, "announcing a tag in the DHT");
            }
            self.provide_due();
        }
        if let QueryResult::Bootstrap(_) = &result {
            if step.last {
                self.own_bootstraps.remove(&id);
                if !self.cut_bootstraps.remove(&id) {
                    self.stats.bootstraps.inc();
                }
            }
        }
        if let QueryResult::GetProviders(r) = result {
            self.on_providers_found(id, r, step.last);
        }
    }

    /// Providers found by the search `id` of a pending [`Client::providers`] call (`last`: the
    /// query's last step): kept up to [`MAX_PROVIDERS_FOUND`]; the caller is answered once
    /// every search of the call is done.
    fn on_providers_found(&mut self, id: QueryId, r: kad::GetProvidersResult, last: bool) {
        let Some(pending_id) = self.provider_queries.get(&id).copied() else {
            return;
        };
        let done = match r {
            Ok(GetProvidersOk::FoundProviders { providers, .. }) => {
                if let Some(p) = self.pending_providers.get_mut(&pending_id) {
                    let room = MAX_PROVIDERS_FOUND.saturating_sub(p.found.len());
                    p.found.extend(providers.into_iter().take(room));
                }
                last
            }
            Ok(GetProvidersOk::FinishedWithNoAdditionalRecord { .. }) => true,
            Err(_) => true,
        };
        if done {
            self.provider_queries.remove(&id);
            if let Some(mut q) = self.swarm.behaviour_mut().kad.query_mut(&id) {
                q.finish();
            }
            let finished = self.pending_providers.get_mut(&pending_id).map(|p| {
                p.remaining -= 1;
                p.remaining == 0
            });
            if finished == Some(true) {
                if let Some(p) = self.pending_providers.remove(&pending_id) {
                    let _ = p.reply.send(p.found.into_iter().collect());
                }
            }
        }
    }

    /// The fetch protocol: a request to serve, or the answer (or failure) of one of ours.
    fn on_fetch_event(&mut self, ev: request_response::Event<FetchRequest, FetchResponse>) {
        match ev {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => self.on_fetch_request(peer, request, channel),
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some((_, reply)) = self.pending_fetches.remove(&request_id) {
                        let _ = reply.send(Ok(response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id,
                error,
                peer,
                ..
            } => {
                if let Some((_, reply)) = self.pending_fetches.remove(&request_id) {
                    let _ = reply.send(Err(Error::Network(format!("fetch from {peer}: {error}"))));
                }
            }
            _ => {}
        }
    }

    /// A peer said who it is: its listen addresses (the first 16) go to Kademlia and the
    /// peer list.
    fn on_identified(&mut self, peer_id: PeerId, info: identify::Info) {
        let addrs: Vec<Multiaddr> = info.listen_addrs.into_iter().take(16).collect();
        for a in &addrs {
            self.add_kad_address(peer_id, a.clone());
        }
        self.peer_addrs.insert(peer_id, addrs);
    }

    /// Peers found on the local network: added to Kademlia and dialed if not connected.
    fn on_mdns_discovered(&mut self, list: Vec<(PeerId, Multiaddr)>) {
        for (peer, addr) in list {
            self.add_kad_address(peer, addr.clone());
            if !self.swarm.is_connected(&peer) {
                let _ = self.swarm.dial(addr);
            }
        }
    }

    /// A connection is up: count it, answer a pending dial, mark a bootstrap peer reached, and
    /// remember the address of a peer we dialed.
    fn on_connected(
        &mut self,
        peer_id: PeerId,
        endpoint: &libp2p::core::ConnectedPoint,
        connection_id: ConnectionId,
    ) {
        self.stats.connections_opened.inc();
        self.connected_since
            .entry(peer_id)
            .or_insert_with(Instant::now);
        if let Some((_, reply)) = self.pending_dials.remove(&connection_id) {
            let _ = reply.send(Ok(()));
        }
        if let Outcome::Changed(address) =
            self.bootstraps
                .connected(connection_id, peer_id, Instant::now(), unix_now())
        {
            tracing::info!(%address, peer = %peer_id, "connected to bootstrap peer");
        }
        if endpoint.is_dialer() {
            // Full queue: this one is not remembered (a dial hint, not data).
            let _ = self
                .peer_writes
                .try_send((peer_id, endpoint.get_remote_address().clone()));
        }
    }

    /// The last connection to `peer_id` closed: forget its rate, mute, addresses and
    /// connection time, and tell the bootstraps.
    fn on_disconnected(&mut self, peer_id: PeerId) {
        self.rates.remove(&peer_id);
        if self.muted.remove(&peer_id).is_some() {
            self.swarm
                .behaviour_mut()
                .gossipsub
                .remove_blacklisted_peer(&peer_id);
        }
        self.peer_addrs.remove(&peer_id);
        self.connected_since.remove(&peer_id);
        self.bootstraps.disconnected(peer_id, unix_now());
    }

    /// A dial failed: answer a pending dial, and tell the bootstraps (a bootstrap peer's
    /// failure is logged).
    fn on_dial_failed(
        &mut self,
        peer_id: Option<PeerId>,
        error: &libp2p::swarm::DialError,
        connection_id: ConnectionId,
    ) {
        tracing::debug!(peer = ?peer_id, %error, "outgoing connection failed");
        if let Some((a, reply)) = self.pending_dials.remove(&connection_id) {
            let _ = reply.send(Err(Error::Network(format!("dialing {a}: {error}"))));
        }
        let e = error.to_string();
        match self
            .bootstraps
            .failed(connection_id, &e, Instant::now(), unix_now())
        {
            Outcome::Changed(address) => {
                tracing::warn!(%address, error = %e, "dialing bootstrap peer failed; retrying while the node has no peer")
            }
            Outcome::Same(address) => {
                tracing::debug!(%address, error = %e, "dialing bootstrap peer failed")
            }
            Outcome::Other => {}
        }
    }

    /// A new listen address: logged, and the first node of a network quiets Kademlia.
    fn on_listening(&mut self, address: Multiaddr) {
        tracing::info!(%address, "listening");
        // Kademlia schedules a bootstrap on a new listen address when no peer is
        // connected, and warns "Failed to trigger bootstrap: No known peers" half a
        // second later on the first node of a network. A bootstrap call that finds the
        // routing table empty cancels that schedule and says nothing.
        if self.routing_table_len() == 0 {
            let _ = self.swarm.behaviour_mut().kad.bootstrap();
        }
    }
}
