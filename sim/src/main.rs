//! Simulate an agentnet network in one process and measure how fast advertisements spread.
//!
//! N full nodes (real validation, one RocksDB store each in a temporary directory) on libp2p's
//! memory transport. Each node dials `--dials` others (the first one an earlier node, so the graph
//! is connected). After the mesh forms, `--adverts` advertisements are published one after
//! another from random nodes, each by a fresh did:key agent with a ~1 KiB card, and for each we
//! measure when 50 %, 95 % and 100 % of the nodes accepted it (timestamps taken as each node's
//! `Accepted` event arrives). With `--adversaries K`, K extra nodes gossip junk all along
//! (forged signatures, hijack attempts on honest DIDs, malformed and random bytes); we count what
//! the honest nodes refused and check that none of it was stored or forwarded.
//!
//! ```text
//! cargo run --release -p agentnet-sim --bin simulate -- --nodes 100 [--dials 8] [--adverts 20]
//!     [--adversaries K] [--seed S] [--warmup-ms W] [--idle-ms 60000] [--gap-ms 2000] [--json]
//! (`--help` lists every flag)
//! ```
//!
//! Duplicates and bytes come from each node's libp2p metrics ([`Client::traffic`]), as the
//! difference between the start and the end of the advertisement phase: the duplicate ratio is
//! gossip copies received per advertisement accepted, minus one; bytes per node are all bytes
//! received on a node's connections (every protocol, after encryption) per advertisement.
//!
//! The default warm-up (90 s) is long enough for the network to settle: Kademlia's bootstrap
//! queries have ended and the connections they opened have been closed or trimmed, so what is
//! measured is the steady state a running network is in, not its first seconds. Measured at 100
//! nodes: after 25 s the idle network still used 10–50 % of a core and the 100 % reach p95 was
//! 55–107 ms; after 90 s, 5 % and 43 ms.
//!
//! The run is bounded (a watchdog ends it), and the temporary directory is removed at the end.

#![recursion_limit = "512"]

mod attack;
mod floor;
mod plot;
mod scenario;

use agentnet_discovery::net::Counter;
use scenario::{Dist, Scenario};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_did::{card, Did, DidUrl, Resolver, SecretKey};
use agentnet_discovery::advert::{self, Draft, Limits, Validator};
use agentnet_discovery::net::{self, Client, Config, TransportKind};
use agentnet_discovery::store::{self, Memory, Store};
use clap::Parser;
use futures::StreamExt;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Hundreds of nodes in one process allocate from many threads at once; glibc's allocator spent
/// a third of the CPU of an idle 100-node network in `malloc` (perf), mimalloc does not.
/// (Not with the `system-alloc` feature: heaptrack sees only what goes through malloc.)
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command-line arguments.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "simulate",
    about = "Simulate an agentnet network in one process and measure how fast advertisements spread"
)]
struct Args {
    /// Honest nodes (or `nodes` in the scenario file).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=5000))]
    nodes: Option<u64>,
    /// A scenario file (TOML; sim/scenarios/): its keys set what the flags do, plus `[links]`,
    /// `[churn]` and `[partition]`. A flag given too wins over the file.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Write results.json and SVG figures (reach CDF, reach per advertisement and over time,
    /// duplicates, bytes, memory) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// One-way latency of every link, in ms (the mean, with --latency-spread-ms).
    #[arg(long = "latency-ms")]
    latency_ms: Option<f64>,
    /// Spread of the latency: ± for uniform, the standard deviation for normal.
    #[arg(long = "latency-spread-ms")]
    latency_spread_ms: Option<f64>,
    /// How link latencies are drawn (seeded, once per pair of nodes).
    #[arg(long = "latency-dist", value_enum)]
    latency_dist: Option<Dist>,
    /// Bandwidth of each direction of each link, in megabits per second.
    #[arg(long = "bandwidth-mbit")]
    bandwidth_mbit: Option<f64>,
    /// Filled from the scenario file.
    /// After the agentnet network, measure a bare rust-libp2p gossipsub network in the same run:
    /// same transport, links, dial plan and mesh degree, no validation (the floor).
    #[arg(long)]
    floor: bool,
    /// Give every node's store its own RocksDB block cache and memtable budget (8 + 16 MiB),
    /// as a node process has; by default the stores share one (--store-cache-mb,
    /// --store-memtable-mb).
    #[arg(long = "own-store-memory")]
    own_store_memory: bool,
    /// The shared block cache of the stores, MiB (1 to 65536).
    #[arg(long = "store-cache-mb", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    store_cache_mb: u64,
    /// The shared memtable budget of the stores, MiB (1 to 65536) (default: 1 MiB per store,
    /// at least 256; less makes the stores flush at every write, see
    /// `store::SHARED_MEMTABLE_BYTES_PER_STORE`).
    #[arg(long = "store-memtable-mb",
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    store_memtable_mb: Option<u64>,
    #[arg(skip)]
    store_memory: Option<Memory>,
    /// Stores the run opens at the start: the honest nodes' and the junk adversaries' (the
    /// eclipse attackers are bare gossipsub swarms, with none; churn's joiners take the place
    /// of those that left, within the spare files of `ensure_open_files`).
    #[arg(skip)]
    stores: usize,
    /// After the advertisements, this many discover queries (the DHT and the fetch protocol),
    /// each from a running node that gossip did not bring an advertisement to (a partition, a
    /// join after it), for the tag only that advertisement has (`advert-<k>`).
    #[arg(long, default_value_t = 0)]
    queries: usize,
    /// Size of the floor's messages.
    #[arg(long = "floor-bytes", default_value_t = 2048)]
    floor_bytes: usize,
    #[arg(skip)]
    churn: Option<scenario::Churn>,
    #[arg(skip)]
    partition: Option<scenario::Partition>,
    #[arg(skip)]
    delays: Option<scenario::Delays>,
    #[arg(skip)]
    replay: Option<scenario::Flood>,
    #[arg(skip)]
    sybil: Option<scenario::Flood>,
    #[arg(skip)]
    eclipse: Option<scenario::Eclipse>,
    /// Connections each node dials (the first to an earlier node).
    #[arg(long, default_value_t = 8)]
    dials: usize,
    /// Advertisements published, one after another.
    #[arg(long, default_value_t = 20)]
    adverts: usize,
    /// Extra nodes gossiping junk during the run.
    #[arg(long, default_value_t = 0)]
    adversaries: usize,
    /// RNG seed for keys, topology and publishers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// gossipsub heartbeat in ms (default: net::Config's).
    #[arg(long = "heartbeat-ms", value_parser = millis)]
    heartbeat: Option<Duration>,
    /// Per-advertisement deadline in ms; later nodes count as not delivered.
    #[arg(long = "deadline-ms", value_parser = millis, default_value = "10000")]
    deadline: Duration,
    /// Wait after dialing for the network to settle, in ms (default: 6 heartbeats, at least 90 s).
    #[arg(long = "warmup-ms", value_parser = millis)]
    warmup: Option<Duration>,
    /// After the warm-up, a window in which nothing is published, in ms: the settled network's
    /// connection churn and idle CPU are measured in it.
    #[arg(long = "idle-ms", value_parser = millis, default_value = "60000")]
    idle: Duration,
    /// Pause after each advertisement reached every node, before the next, in ms (2000: longer
    /// than net::Config's provide_delay plus the DHT announcements that follow; 50 makes a burst).
    #[arg(long = "gap-ms", value_parser = millis, default_value = "2000")]
    gap: Duration,
    /// How long after a publish its tags are announced in the DHT, in ms.
    #[arg(long = "provide-delay-ms", value_parser = millis)]
    provide_delay: Option<Duration>,
    /// Kademlia's periodic routing-table refresh in seconds, 0 for never (default:
    /// net::Config's).
    #[arg(long = "kad-bootstrap-s")]
    kad_bootstrap_s: Option<u64>,
    /// Kademlia's k: the closest peers a lookup looks for and a provider record is stored on
    /// (default: net::Config's, libp2p's 20).
    #[arg(long = "kad-k", value_parser = clap::value_parser!(u64).range(1..=64))]
    kad_k: Option<u64>,
    /// Connection manager low watermark.
    #[arg(long = "conn-low", default_value_t = Config::default().conn_low)]
    conn_low: usize,
    /// Connection manager high watermark.
    #[arg(long = "conn-high", default_value_t = Config::default().conn_high)]
    conn_high: usize,
    /// How long a new connection is kept from the connection manager's trim, in ms (default:
    /// net::Config's, 10 000).
    #[arg(long = "conn-grace-ms", value_parser = millis)]
    conn_grace: Option<Duration>,
    /// gossipsub mesh degree.
    #[arg(long, default_value_t = Config::default().gossip_mesh, value_parser = clap::value_parser!(usize))]
    mesh: usize,
    /// gossipsub's IDONTWANT on, in the nodes and the floor alike (`net::Config::gossip_idontwant`).
    #[arg(long)]
    idontwant: bool,
    /// Junk messages per second per adversary.
    #[arg(long = "junk-rate", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    junk_rate: u32,
    /// Abort (and clean up) if the process grows past this many MiB (default: half of
    /// MemAvailable at start).
    #[arg(long = "max-rss-mb")]
    max_rss_mb: Option<u64>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn millis(s: &str) -> Result<Duration, String> {
    s.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|e| format!("{s:?}: {e}"))
}

impl Args {
    /// The command line, with the scenario file's keys where no flag was given.
    fn load() -> Result<Self, String> {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let m = Args::command().get_matches();
        let mut args = Args::from_arg_matches(&m).map_err(|e| e.to_string())?;
        let file = match &args.scenario {
            Some(p) => Scenario::load(p)?,
            None => Scenario::default(),
        };
        let unset = |id: &str| m.value_source(id) != Some(clap::parser::ValueSource::CommandLine);
        macro_rules! take {
            ($($field:ident),*) => {$(
                if unset(stringify!($field)) {
                    if let Some(v) = file.$field {
                        args.$field = v.into();
                    }
                }
            )*};
        }
        take!(
            nodes,
            dials,
            adverts,
            adversaries,
            seed,
            mesh,
            idontwant,
            junk_rate,
            queries
        );
        let ms = |v: Option<u64>| v.map(Duration::from_millis);
        if unset("heartbeat") && file.heartbeat_ms.is_some() {
            args.heartbeat = ms(file.heartbeat_ms);
        }
        if unset("warmup") && file.warmup_ms.is_some() {
            args.warmup = ms(file.warmup_ms);
        }
        for (id, slot, v) in [
            ("idle", &mut args.idle, file.idle_ms),
            ("gap", &mut args.gap, file.gap_ms),
            ("deadline", &mut args.deadline, file.deadline_ms),
        ] {
            if let (true, Some(v)) = (unset(id), v) {
                *slot = Duration::from_millis(v);
            }
        }
        let links = scenario::Links {
            latency: args.latency_dist.or(file.links.latency),
            latency_ms: args.latency_ms.or(file.links.latency_ms),
            spread_ms: args.latency_spread_ms.or(file.links.spread_ms),
            bandwidth_mbit: args.bandwidth_mbit.or(file.links.bandwidth_mbit),
        };
        args.delays = links.delay_model(args.seed)?;
        args.churn = file.churn;
        args.partition = file.partition;
        args.replay = file.replay;
        args.sybil = file.sybil;
        args.eclipse = file.eclipse;
        args.finish()
    }

    fn nodes(&self) -> u64 {
        self.nodes.unwrap_or_default()
    }

    /// The full-node adversaries in start order (after the honest nodes), each with its rate.
    fn adversary_kinds(&self) -> Vec<(attack::Kind, u32)> {
        let mut kinds = vec![(attack::Kind::Junk, self.junk_rate); self.adversaries];
        for (kind, flood) in [
            (attack::Kind::Replay, self.replay),
            (attack::Kind::Sybil, self.sybil),
        ] {
            if let Some(f) = flood {
                kinds.extend(std::iter::repeat_n((kind, f.rate), f.nodes));
            }
        }
        kinds
    }

    /// Checks clap cannot express, and the derived defaults.
    fn finish(mut self) -> Result<Self, String> {
        let Some(nodes) = self.nodes else {
            return Err("give --nodes N, or a --scenario file with `nodes = N`".into());
        };
        if !(2..=5000).contains(&nodes) {
            return Err(format!("nodes must be between 2 and 5000, not {nodes}"));
        }
        if self.conn_low > self.conn_high || self.conn_high == 0 {
            return Err("--conn-low must not exceed --conn-high, which must be at least 1".into());
        }
        if self.queries > 10_000 {
            return Err(format!(
                "queries must be at most 10000, not {}",
                self.queries
            ));
        }
        if let Some(t) = self.eclipse.and_then(|e| e.target) {
            if t as u64 >= nodes {
                return Err(format!(
                    "[eclipse] target must be a node below {nodes}, not {t}"
                ));
            }
        }
        let attackers = self.eclipse.map_or(0, |e| e.nodes);
        if nodes as usize + self.adversary_kinds().len() + attackers > 5000 {
            return Err("at most 5000 nodes in one process".into());
        }
        self.mesh = self.mesh.clamp(2, 64);
        self.stores = nodes as usize + self.adversary_kinds().len();
        if !self.own_store_memory {
            let memtable_mb = self.store_memtable_mb.unwrap_or_else(|| {
                ((self.stores * store::SHARED_MEMTABLE_BYTES_PER_STORE) >> 20).max(256) as u64
            });
            self.store_memtable_mb = Some(memtable_mb);
            self.store_memory = Some(Memory::shared(
                (self.store_cache_mb as usize) << 20,
                (memtable_mb as usize) << 20,
            ));
        }
        let defaults = Config::default();
        let heartbeat = self.heartbeat.unwrap_or(defaults.heartbeat);
        self.heartbeat = Some(heartbeat.max(Duration::from_millis(10)));
        self.provide_delay = Some(self.provide_delay.unwrap_or(defaults.provide_delay));
        self.conn_grace = Some(self.conn_grace.unwrap_or(defaults.conn_grace));
        self.deadline = self.deadline.max(Duration::from_millis(1));
        self.dials = self.dials.clamp(1, nodes as usize - 1);
        let settle = Duration::from_secs(90);
        self.warmup = Some(self.warmup.unwrap_or_else(|| (heartbeat * 6).max(settle)));
        Ok(self)
    }

    // The accessors below read what `finish` filled in.
    fn warmup(&self) -> Duration {
        self.warmup.unwrap_or_default()
    }

    fn heartbeat(&self) -> Duration {
        self.heartbeat.unwrap_or_default()
    }

    fn provide_delay(&self) -> Duration {
        self.provide_delay.unwrap_or_default()
    }

    fn conn_grace(&self) -> Duration {
        self.conn_grace.unwrap_or_default()
    }
}

/// Draws for topology, publishers and tags: `StdRng` seeded from `--seed`, so a run repeats.
type Rng = StdRng;

fn seed32(rng: &mut Rng) -> [u8; 32] {
    rng.gen()
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path =
            std::env::temp_dir().join(format!("agentnet-simulate-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("removing {}: {e}", self.0.display());
        }
    }
}

/// `/proc/loadavg`'s first three fields.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

/// CPU time this process used so far (user + system), from `/proc/self/stat`.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesized command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux configuration we run on.
    Some(Duration::from_millis(ticks * 10))
}

/// A `kB` field of a `/proc` file such as `/proc/self/status` or `/proc/meminfo`, in MiB.
fn proc_mib(file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// Ends the process if it grows past `limit_mib`: every node holds buffers per connection, and a
/// network where every node connects to every other outgrows the machine. The stores' directory
/// is removed first. A thread, not a task, so that a saturated runtime cannot starve it.
fn rss_watchdog(limit_mib: u64, dir: PathBuf) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(250));
        let rss = proc_mib("/proc/self/status", "VmRSS:").unwrap_or(0);
        if rss > limit_mib {
            eprintln!(
                "simulate: resident memory {rss} MiB passed the limit of {limit_mib} MiB \
                 (--max-rss-mb); aborting"
            );
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(3);
        }
    });
}

struct SimNode {
    client: Client,
    addr: Multiaddr,
    task: JoinHandle<()>,
    /// Cancelled when the node leaves (churn), or with the whole run.
    stop: CancellationToken,
}

#[allow(clippy::too_many_arguments)]
async fn start_node(
    key: &SecretKey,
    dir: &Path,
    port: u64,
    listen: bool,
    args: &Args,
    links: Option<net::Links>,
    shutdown: &CancellationToken,
) -> Result<SimNode, String> {
    let path = dir.join(format!("node-{port}"));
    let memory = args.store_memory.clone().unwrap_or_default();
    let store = tokio::task::spawn_blocking(move || {
        Store::open_shared(&path, agentnet_discovery::store::Limits::default(), &memory)
    })
    .await
    .map_err(|e| format!("opening store: {e}"))?
    .map_err(|e| format!("opening store: {e}"))?;
    let validator = Validator::new(
        Resolver::new(Default::default()).map_err(|e| format!("resolver: {e}"))?,
        Limits::default(),
    );
    let listen_addr: Multiaddr = Multiaddr::empty().with(Protocol::Memory(port));
    let cfg = Config {
        listen: if listen {
            vec![listen_addr.clone()]
        } else {
            Vec::new()
        },
        transport: TransportKind::Memory,
        heartbeat: args.heartbeat(),
        provide_delay: args.provide_delay(),
        conn_low: args.conn_low,
        conn_high: args.conn_high,
        conn_grace: args.conn_grace(),
        gossip_mesh: args.mesh,
        gossip_idontwant: args.idontwant,
        kad_bootstrap_interval: match args.kad_bootstrap_s {
            None => Config::default().kad_bootstrap_interval,
            Some(0) => None,
            Some(s) => Some(Duration::from_secs(s)),
        },
        links,
        kad_k: args.kad_k.map_or(Config::default().kad_k, |k| k as usize),
        ..Default::default()
    };
    let stop = shutdown.child_token();
    let (client, task) = net::spawn(key, cfg, store, validator, stop.clone())
        .await
        .map_err(|e| format!("starting node {port}: {e}"))?;
    let addr = listen_addr.with(Protocol::P2p(client.peer_id()));
    Ok(SimNode {
        client,
        addr,
        task,
        stop,
    })
}

/// A fresh did:key agent.
struct Agent {
    key: SecretKey,
    did: Did,
    kid: DidUrl,
}

impl Agent {
    fn new(rng: &mut Rng) -> Self {
        let key = SecretKey::from_seed(&seed32(rng));
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        Agent { key, did, kid }
    }

    /// A signed advertisement whose unsigned card is about `card_bytes` long.
    fn advert(
        &self,
        publisher: &SimNode,
        seq: u64,
        desc: &str,
        tags: &[String],
        card_bytes: usize,
    ) -> Result<Vec<u8>, String> {
        let peer_id = publisher.client.peer_id().to_string();
        self.advert_as(
            &peer_id,
            &publisher.addr.to_string(),
            seq,
            desc,
            tags,
            card_bytes,
        )
    }

    /// [`Agent::advert`] naming `peer_id` as the publishing node, at `addr`.
    fn advert_as(
        &self,
        peer_id: &str,
        addr: &str,
        seq: u64,
        desc: &str,
        tags: &[String],
        card_bytes: usize,
    ) -> Result<Vec<u8>, String> {
        let mut c = sample_card(desc, tags, "");
        let len = serde_json::to_vec(&c).map(|v| v.len()).unwrap_or(0);
        if len < card_bytes {
            c = sample_card(desc, tags, &filler(card_bytes - len));
        }
        let signed = card::sign(&c, &self.key, &self.kid).map_err(|e| format!("card: {e}"))?;
        let now = net::unix_now();
        let ad = advert::sign(
            Draft {
                did: self.did.clone(),
                kid: self.kid.clone(),
                card: signed,
                peer_id: peer_id.to_owned(),
                addrs: vec![addr.to_owned()],
                seq,
                issued_at: now,
                expires_at: now + 3600,
            },
            &self.key,
        );
        serde_json::to_vec(&ad).map_err(|e| format!("encoding advertisement: {e}"))
    }
}

fn filler(n: usize) -> String {
    const WORDS: &str = "translates summarizes classifies extracts answers plans routes ";
    WORDS.chars().cycle().take(n).collect()
}

fn sample_card(desc: &str, tags: &[String], extra: &str) -> Value {
    json!({
        "name": "Sim agent", "description": format!("{desc} {extra}"), "version": "1.0.0",
        "supportedInterfaces": [{"url": "https://agents.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "provider": {"organization": "Example Org", "url": "https://example.org"},
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "main", "name": "Main skill", "description": "Does the thing.", "tags": tags}]
    })
}

/// Tags from a vocabulary of 200 with a Zipf(1) skew, 3 distinct per card.
struct Vocabulary {
    cumulative: Vec<f64>,
}

impl Vocabulary {
    fn new(size: usize) -> Self {
        let mut acc = 0.0;
        let cumulative = (1..=size)
            .map(|k| {
                acc += 1.0 / k as f64;
                acc
            })
            .collect();
        Vocabulary { cumulative }
    }

    fn draw(&self, rng: &mut Rng, n: usize) -> Vec<String> {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let mut out: Vec<String> = Vec::with_capacity(n);
        while out.len() < n {
            let x = rng.gen::<f64>() * total;
            let i = self.cumulative.partition_point(|c| *c < x);
            let tag = format!("skill-{i}");
            if !out.contains(&tag) {
                out.push(tag);
            }
        }
        out
    }
}

/// When each node's `Accepted` event for each DID arrived.
#[derive(Default)]
struct Arrivals {
    by_did: Mutex<HashMap<String, Vec<(usize, Instant)>>>,
    notify: Notify,
    /// `Accepted` events a recorder missed (its channel overflowed): deliveries not timed.
    lagged: std::sync::atomic::AtomicU64,
}

impl Arrivals {
    fn record(&self, did: String, node: usize, at: Instant) {
        let mut m = self.by_did.lock().expect("arrivals lock poisoned");
        let v = m.entry(did).or_default();
        if !v.iter().any(|(n, _)| *n == node) {
            v.push((node, at));
        }
        drop(m);
        self.notify.notify_waiters();
    }

    fn count(&self, did: &str) -> usize {
        self.by_did
            .lock()
            .expect("arrivals lock poisoned")
            .get(did)
            .map_or(0, Vec::len)
    }

    fn has(&self, did: &str, node: usize) -> bool {
        self.by_did
            .lock()
            .expect("arrivals lock poisoned")
            .get(did)
            .is_some_and(|v| v.iter().any(|(n, _)| *n == node))
    }

    fn at(&self, did: &str, node: usize) -> Option<Instant> {
        self.by_did
            .lock()
            .expect("arrivals lock poisoned")
            .get(did)?
            .iter()
            .find(|(n, _)| *n == node)
            .map(|(_, t)| *t)
    }

    fn times(&self, did: &str) -> Vec<Instant> {
        self.by_did
            .lock()
            .expect("arrivals lock poisoned")
            .get(did)
            .map(|v| v.iter().map(|(_, t)| *t).collect())
            .unwrap_or_default()
    }
}

/// Figures of one advertisement.
struct Spread {
    reached: usize,
    /// Honest nodes running when it was published.
    expected: usize,
    publish: Duration,
    /// Time until 50, 95, 100 % of those nodes accepted it, if they did before the deadline.
    t: [Option<Duration>; 3],
    /// Each delivery's delay, sorted.
    delays_ms: Vec<f64>,
    /// Gossip copies received per accepted, minus one, from its publication to the next.
    duplicates: Option<f64>,
    /// Bytes in per running node over the same window (every protocol).
    bytes_per_node: f64,
    /// Published while a partition was in force.
    partitioned: bool,
    /// When it was published.
    t0: Instant,
}

/// One counter of the nodes' [`net::Stats`], summed.
/// Connection counters summed over nodes, to take differences over a window.
#[derive(Debug, Clone, Copy)]
struct ConnCounts {
    opened: u64,
    trimmed: u64,
    dials: u64,
}

impl ConnCounts {
    fn of(nodes: &[Arc<SimNode>]) -> Self {
        ConnCounts {
            opened: stat_sum(nodes, |s| &s.connections_opened),
            trimmed: stat_sum(nodes, |s| &s.trimmed),
            dials: stat_sum(nodes, |s| &s.dials),
        }
    }

    fn since(&self, start: &ConnCounts) -> ConnCounts {
        ConnCounts {
            opened: self.opened.saturating_sub(start.opened),
            trimmed: self.trimmed.saturating_sub(start.trimmed),
            dials: self.dials.saturating_sub(start.dials),
        }
    }

    /// Totals, and connections opened per node per minute (each connection counts at both
    /// ends: one dial between two nodes adds 2 to `opened`).
    fn json(&self, nodes: usize, window: Duration) -> Value {
        let minutes = window.as_secs_f64() / 60.0;
        let per_node_min = |x: u64| (minutes > 0.0).then(|| x as f64 / nodes as f64 / minutes);
        json!({
            "opened": self.opened, "trimmed": self.trimmed, "dials": self.dials,
            "opened_per_node_per_min": per_node_min(self.opened),
            "dials_per_node_per_min": per_node_min(self.dials),
        })
    }
}

fn stat_sum(nodes: &[Arc<SimNode>], counter: fn(&net::Stats) -> &Counter) -> u64 {
    nodes.iter().map(|s| counter(s.client.stats()).get()).sum()
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The run's nodes in start order: node i listens on `/memory/<i + 1>`. Honest nodes that join
/// later (churn) come after the adversaries.
struct Net {
    nodes: Vec<Arc<SimNode>>,
    honest: Vec<bool>,
    alive: Vec<bool>,
}

impl Net {
    fn push(&mut self, node: Arc<SimNode>, honest: bool) {
        self.nodes.push(node);
        self.honest.push(honest);
        self.alive.push(true);
    }

    /// Honest nodes running now.
    fn live_honest(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.honest[i] && self.alive[i])
            .collect()
    }

    /// Every honest node, run or left.
    fn honest_nodes(&self) -> Vec<Arc<SimNode>> {
        (0..self.nodes.len())
            .filter(|&i| self.honest[i])
            .map(|i| self.nodes[i].clone())
            .collect()
    }
}

/// Records when `node` (index `idx`) accepts each advertisement.
fn spawn_recorder(node: &SimNode, idx: usize, arrivals: Arc<Arrivals>, stop: CancellationToken) {
    let mut rx = node.client.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                ev = rx.recv() => match ev {
                    // Sybil advertisements are not the run's: not recorded (a flood of them would
                    // fill the table).
                    Ok(ev) if ev.tags.iter().any(|t| t == "sybil") => {}
                    Ok(ev) => arrivals.record(ev.did, idx, Instant::now()),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(k)) => {
                        arrivals.lagged.fetch_add(k, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        }
    });
}

/// Makes the dials of `plan` (from, to), 32 at a time; returns how many failed.
async fn dial_plan(nodes: &[Arc<SimNode>], plan: &[(usize, usize)], started: Instant) -> usize {
    futures::stream::iter(plan.iter().map(|&(i, j)| {
        let (from, to) = (nodes[i].client.clone(), nodes[j].addr.clone());
        async move {
            tokio::time::timeout(Duration::from_secs(10), from.dial(to))
                .await
                .map_err(|_| ())
                .and_then(|r| r.map_err(|_| ()))
        }
    }))
    .buffer_unordered(32)
    .enumerate()
    .fold(0usize, |failed, (k, r)| {
        if plan.len() >= 500 && (k + 1) % 500 == 0 {
            eprintln!(
                "simulate: {} of {} dials done at {:.1} s",
                k + 1,
                plan.len(),
                started.elapsed().as_secs_f64()
            );
        }
        futures::future::ready(failed + usize::from(r.is_err()))
    })
    .await
}

/// Gossip and byte counters summed over `idx`.
fn traffic_of(nodes: &[Arc<SimNode>], idx: &[usize]) -> net::Traffic {
    let mut t = net::Traffic::default();
    for &i in idx {
        let x = nodes[i].client.traffic();
        t.gossip_received += x.gossip_received;
        t.gossip_unique += x.gossip_unique;
        t.idontwant_received += x.idontwant_received;
        t.send_dropped += x.send_dropped;
        t.validated_too_late += x.validated_too_late;
        t.bytes_in += x.bytes_in;
        t.bytes_out += x.bytes_out;
    }
    t
}

/// Samples the process's resident memory every second, from the start of the run.
fn rss_sampler(
    started: Instant,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Arc<Mutex<Vec<(f64, u64)>>> {
    let samples: Arc<Mutex<Vec<(f64, u64)>>> = Default::default();
    let out = samples.clone();
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Some(rss) = proc_mib("/proc/self/status", "VmRSS:") {
                out.lock()
                    .expect("samples lock poisoned")
                    .push((started.elapsed().as_secs_f64(), rss));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    samples
}

/// Nodes starting at once during setup.
const STARTS_IN_FLIGHT: usize = 8;

async fn run(args: &Args, dir: &Path) -> Result<Value, String> {
    let load_start = loadavg();
    let started = Instant::now();
    let stop_sampler = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rss_samples = rss_sampler(started, stop_sampler.clone());
    let mut rng = Rng::seed_from_u64(args.seed);
    // Churn and partition draw from their own generator, so that a scenario with them has the
    // same keys, topology and publishers as one without.
    let mut scenario_rng = Rng::seed_from_u64(args.seed ^ 0x5eed_c4a5);
    let shutdown = CancellationToken::new();
    let n = args.nodes() as usize;

    let cut = Arc::new(scenario::Cut {
        active: false.into(),
        side: match &args.partition {
            Some(p) => (0..n)
                .map(|_| scenario_rng.gen::<f64>() < p.fraction)
                .collect(),
            None => Vec::new(),
        },
    });
    let with_links = args.delays.is_some() || args.partition.is_some();
    let links_of = |i: usize| -> Option<net::Links> {
        with_links.then(|| {
            Arc::new(scenario::NodeLinks {
                me: i,
                base: 1,
                delays: args.delays,
                cut: cut.clone(),
            }) as net::Links
        })
    };

    // Nodes: honest ones listen; adversaries listen nowhere, so they stay behind the nodes they
    // dial (as in tests/network.rs).
    let kinds = args.adversary_kinds();
    let mut net = Net {
        nodes: Vec::with_capacity(n + kinds.len()),
        honest: Vec::new(),
        alive: Vec::new(),
    };
    // Keys drawn in order first (the same keys, topology and publishers as one at a time),
    // then the nodes started STARTS_IN_FLIGHT at a time: a start is a store opened on a
    // blocking thread and a swarm built, and one at a time left the second core idle.
    let keys: Vec<SecretKey> = (0..n + kinds.len())
        .map(|_| SecretKey::from_seed(&seed32(&mut rng)))
        .collect();
    let mut starts = futures::stream::iter(keys.iter().enumerate())
        .map(|(i, key)| {
            let links = links_of(i);
            let shutdown = &shutdown;
            async move { start_node(key, dir, i as u64 + 1, i < n, args, links, shutdown).await }
        })
        .buffered(STARTS_IN_FLIGHT);
    while let Some(node) = starts.next().await {
        let i = net.nodes.len();
        net.push(Arc::new(node?), i < n);
        if (i + 1) % 250 == 0 {
            eprintln!(
                "simulate: {} nodes started at {:.1} s",
                i + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    drop(starts);
    eprintln!(
        "simulate: {} nodes started in {:.1} s; dialing",
        net.nodes.len(),
        started.elapsed().as_secs_f64()
    );

    // Dials: the first to an earlier node (connectivity), the rest to any other honest node.
    let mut plan: Vec<(usize, usize)> = Vec::new();
    for i in 0..n + kinds.len() {
        let mut targets: Vec<usize> = Vec::new();
        let honest = i < n;
        if honest && i > 0 {
            targets.push(rng.gen_range(0..i));
        }
        let want = if honest {
            args.dials.min(n - 1)
        } else {
            args.dials.min(n)
        };
        while targets.len() < want {
            let j = rng.gen_range(0..n);
            if j != i && !targets.contains(&j) {
                targets.push(j);
            }
        }
        plan.extend(targets.into_iter().map(|j| (i, j)));
    }
    let dial_failures = dial_plan(&net.nodes, &plan, started).await;
    let setup = started.elapsed();

    // Eclipse attackers dial their victim now, to be there while the mesh forms.
    let stop_eclipse = CancellationToken::new();
    let eclipse = match args.eclipse {
        Some(e) => {
            let victim = e.target.unwrap_or_else(|| scenario_rng.gen_range(0..n));
            let first = n + kinds.len();
            let (tally, ids) = attack::eclipse(
                e.nodes,
                net.nodes[victim].addr.clone(),
                args.heartbeat(),
                args.mesh,
                &|k| links_of(1_000_000 + first + k),
                stop_eclipse.clone(),
            )?;
            eprintln!(
                "simulate: {} eclipse attackers dialing node {victim}",
                e.nodes
            );
            Some((victim, tally, ids))
        }
        None => None,
    };
    eprintln!(
        "simulate: {} nodes up and dialed in {:.1} s; warming up",
        net.nodes.len(),
        setup.as_secs_f64()
    );

    // Arrival recorders, one per honest node.
    let arrivals = Arc::new(Arrivals::default());
    let stop_recorders = CancellationToken::new();
    for idx in 0..n {
        spawn_recorder(
            &net.nodes[idx],
            idx,
            arrivals.clone(),
            stop_recorders.clone(),
        );
    }

    // Let gossipsub build its mesh, then watch the settled network for `--idle-ms` with nothing
    // published: the connections it opens then are its steady churn (Kademlia's periodic
    // bootstrap, the connection manager, pings), and its CPU the cost of being idle.
    let warmup = args.warmup();
    tokio::time::sleep(warmup).await;
    let initial: Vec<Arc<SimNode>> = net.nodes[..n].to_vec();
    let idle_window = args.idle;
    let idle_start = ConnCounts::of(&initial);
    let idle_cpu_start = process_cpu();
    tokio::time::sleep(idle_window).await;
    let idle_conns = ConnCounts::of(&initial).since(&idle_start);
    let idle_cpu = match (idle_cpu_start, process_cpu()) {
        (Some(a), Some(b)) if !idle_window.is_zero() => {
            Some(100.0 * b.saturating_sub(a).as_secs_f64() / idle_window.as_secs_f64())
        }
        _ => None,
    };
    let mut degrees = Vec::with_capacity(n);
    for node in &initial {
        degrees.push(node.client.peers().await.map(|p| p.len()).unwrap_or(0));
    }
    degrees.sort_unstable();

    // Adversaries.
    let honest_dids: Arc<Mutex<Vec<String>>> = Default::default();
    let stop_junk = CancellationToken::new();
    let mut junk_tasks = Vec::new();
    for (node, &(kind, rate)) in net.nodes.iter().skip(n).zip(&kinds) {
        let task = tokio::spawn(attack::run(
            kind,
            node.clone(),
            Rng::seed_from_u64(rng.gen::<u64>()),
            rate,
            honest_dids.clone(),
            stop_junk.clone(),
        ));
        junk_tasks.push((kind, task));
    }
    let validation_start = stat_sum(&net.nodes[..n], |s| &s.validation_micros);

    // Advertisements, one after another.
    eprintln!("simulate: publishing {} advertisements", args.adverts);
    let vocab = Vocabulary::new(200);
    let cpu_start = process_cpu();
    let phase_conns_start = ConnCounts::of(&net.honest_nodes());
    let phase_start = Instant::now();
    let mut spreads: Vec<Spread> = Vec::with_capacity(args.adverts);
    let mut published: Vec<(String, Vec<u8>)> = Vec::new();
    let mut published_tags: Vec<Vec<String>> = Vec::new();
    let mut advert_bytes = 0;
    let mut publish_errors = 0;
    let mut total = net::Traffic::default();
    let (mut left, mut joined, mut join_failures) = (0usize, 0usize, 0usize);
    let (mut leave_due, mut join_due) = (0.0f64, 0.0f64);
    let mut last_churn = Instant::now();
    let mut redial_failures = 0;
    for a in 0..args.adverts {
        if let Some(p) = &args.partition {
            if a == p.from_advert {
                cut.active.store(true, std::sync::atomic::Ordering::Relaxed);
                eprintln!(
                    "simulate: partition from advert {a}: {:.0} % of the nodes cut off",
                    p.fraction * 100.0
                );
                // Connections across the cut close on the next bytes they carry.
                tokio::time::sleep(args.heartbeat() * 3).await;
            }
            if p.heal_advert == Some(a) {
                cut.active
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                let across: Vec<(usize, usize)> = plan
                    .iter()
                    .copied()
                    .filter(|&(i, j)| {
                        net.alive[i] && net.alive[j] && cut.cut_off(i) != cut.cut_off(j)
                    })
                    .collect();
                redial_failures += dial_plan(&net.nodes, &across, started).await;
                eprintln!(
                    "simulate: partition healed at advert {a}: {} dials made again",
                    across.len()
                );
                tokio::time::sleep(args.gap).await;
            }
        }
        let live = net.live_honest();
        let expected = live.len();
        let publisher = net.nodes[live[rng.gen_range(0..live.len())]].clone();
        let agent = Agent::new(&mut rng);
        let mut tags = vocab.draw(&mut rng, 3);
        // A tag of its own, for the discover queries: found means this advertisement, not
        // another with a common tag from the local index.
        tags.push(format!("advert-{a}"));
        let bytes = agent.advert(&publisher, 1, &format!("advert {a}"), &tags, 1024)?;
        advert_bytes = bytes.len();
        let did = agent.did.to_string();
        let before = traffic_of(&net.nodes, &live);
        let t0 = Instant::now();
        if let Err(e) = publisher.client.publish(bytes.clone()).await {
            eprintln!("publishing advert {a}: {e}");
            publish_errors += 1;
            continue;
        }
        let publish = t0.elapsed();
        honest_dids
            .lock()
            .expect("dids lock poisoned")
            .push(did.clone());
        published.push((did.clone(), bytes));
        published_tags.push(tags.clone());
        let deadline = tokio::time::Instant::from_std(t0 + args.deadline);
        loop {
            let notified = arrivals.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if arrivals.count(&did) >= expected || tokio::time::Instant::now() >= deadline {
                break;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
        let mut times: Vec<Duration> = arrivals
            .times(&did)
            .into_iter()
            .map(|t| t.saturating_duration_since(t0))
            .filter(|d| *d <= args.deadline)
            .collect();
        times.sort_unstable();
        let thresholds = [
            expected.div_ceil(2),
            (expected * 95).div_ceil(100),
            expected,
        ];
        let at = |k: usize| times.get(k.max(1) - 1).copied();
        // The pause before the next one (after this one reached every node or its deadline).
        tokio::time::sleep(args.gap).await;
        let after = traffic_of(&net.nodes, &live);
        let copies = after.gossip_received.saturating_sub(before.gossip_received);
        let unique = after.gossip_unique.saturating_sub(before.gossip_unique);
        let bytes_in = after.bytes_in.saturating_sub(before.bytes_in);
        total.gossip_received += copies;
        total.gossip_unique += unique;
        total.idontwant_received += after
            .idontwant_received
            .saturating_sub(before.idontwant_received);
        total.send_dropped += after.send_dropped.saturating_sub(before.send_dropped);
        total.validated_too_late += after
            .validated_too_late
            .saturating_sub(before.validated_too_late);
        total.bytes_in += bytes_in;
        total.bytes_out += after.bytes_out.saturating_sub(before.bytes_out);
        let spread = Spread {
            reached: times.len(),
            expected,
            publish,
            t: [at(thresholds[0]), at(thresholds[1]), at(thresholds[2])],
            delays_ms: times.iter().map(|d| ms(*d)).collect(),
            duplicates: (unique > 0).then(|| copies as f64 / unique as f64 - 1.0),
            bytes_per_node: bytes_in as f64 / expected.max(1) as f64,
            partitioned: cut.active.load(std::sync::atomic::Ordering::Relaxed),
            t0,
        };
        eprintln!(
            "simulate: advert {}/{}: {} of {} nodes ({:.1} %), all by {}",
            a + 1,
            args.adverts,
            spread.reached,
            expected,
            100.0 * spread.reached as f64 / expected.max(1) as f64,
            spread.t[2].map_or("-".into(), |d| format!("{:.0} ms", ms(d)))
        );
        spreads.push(spread);

        // Churn, at the rates asked, over the time since the last step.
        if let Some(c) = &args.churn {
            let minutes = last_churn.elapsed().as_secs_f64() / 60.0;
            last_churn = Instant::now();
            leave_due += c.leave_per_min * minutes;
            join_due += c.join_per_min * minutes;
            while leave_due >= 1.0 {
                leave_due -= 1.0;
                let live = net.live_honest();
                if live.len() <= 2 {
                    break;
                }
                let i = live[scenario_rng.gen_range(0..live.len())];
                net.nodes[i].stop.cancel();
                net.alive[i] = false;
                left += 1;
            }
            while join_due >= 1.0 {
                join_due -= 1.0;
                let i = net.nodes.len();
                let key = SecretKey::from_seed(&seed32(&mut scenario_rng));
                let node = Arc::new(
                    start_node(&key, dir, i as u64 + 1, true, args, links_of(i), &shutdown).await?,
                );
                spawn_recorder(&node, i, arrivals.clone(), stop_recorders.clone());
                let live = net.live_honest();
                net.push(node, true);
                let mut dials: Vec<(usize, usize)> = Vec::new();
                while dials.len() < args.dials.min(live.len()) {
                    let j = live[scenario_rng.gen_range(0..live.len())];
                    if !dials.iter().any(|d| d.1 == j) {
                        dials.push((i, j));
                    }
                }
                join_failures += dial_plan(&net.nodes, &dials, started).await;
                plan.extend(dials);
                joined += 1;
            }
        }
    }
    let phase = phase_start.elapsed();

    // Discover queries for what gossip did not deliver: (advertisement, running node) pairs.
    // Pairs the node's own `Accepted` events do not cover, checked against its store (it may
    // have fetched one) on a blocking thread: RocksDB reads, one per pair.
    let candidates: Vec<(usize, usize, String, Store)> = published
        .iter()
        .enumerate()
        .flat_map(|(k, (did, _))| {
            net.live_honest()
                .into_iter()
                .filter(|&i| !arrivals.has(did, i))
                .map(|i| (k, i, did.clone(), net.nodes[i].client.store().clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut missed: Vec<(usize, usize)> = tokio::task::spawn_blocking(move || {
        let now = net::unix_now();
        candidates
            .into_iter()
            .filter(|(_, _, did, store)| !store.get(did, now).is_ok_and(|a| a.is_some()))
            .map(|(k, i, _, _)| (k, i))
            .collect()
    })
    .await
    .map_err(|e| format!("checking the stores: {e}"))?;
    let mut query_ms: Vec<f64> = Vec::new();
    let (mut query_found, mut query_failed) = (0usize, 0usize);
    if args.queries > 0 && !missed.is_empty() {
        eprintln!(
            "simulate: {} (advertisement, node) pairs gossip missed; {} discover queries",
            missed.len(),
            args.queries.min(missed.len())
        );
    }
    for q in 0..args.queries.min(missed.len()) {
        let (k, i) = missed.swap_remove(scenario_rng.gen_range(0..missed.len()));
        let (did, tag) = (&published[k].0, published_tags[k][3].clone());
        let t0 = Instant::now();
        let found = tokio::time::timeout(
            Duration::from_secs(30),
            net.nodes[i].client.discover(&[tag], 100),
        )
        .await;
        let took = ms(t0.elapsed());
        let ok = matches!(&found, Ok(Ok(v)) if v.iter().any(|a| a.did.as_str() == did.as_str()));
        if ok {
            query_found += 1;
            query_ms.push(took);
        } else {
            query_failed += 1;
        }
        eprintln!(
            "simulate: query {}/{}: node {i} for advert {k}: {} in {took:.0} ms",
            q + 1,
            args.queries.min(missed.len() + q + 1),
            if ok { "found" } else { "not found" }
        );
    }
    query_ms.sort_by(f64::total_cmp);
    let missed_pairs = missed.len() + query_found + query_failed;
    let honest = net.honest_nodes();
    let phase_conns = ConnCounts::of(&honest).since(&phase_conns_start);
    let cpu = match (cpu_start, process_cpu()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let (copies, unique, bytes_in, bytes_out) = (
        total.gossip_received,
        total.gossip_unique,
        total.bytes_in,
        total.bytes_out,
    );
    let duplicate_ratio = (unique > 0).then(|| copies as f64 / unique as f64 - 1.0);
    let expected: usize = spreads.iter().map(|s| s.expected).sum();
    let bytes_per_node_per_advert = if expected == 0 {
        0.0
    } else {
        bytes_in as f64 / expected as f64
    };
    let trimmed = stat_sum(&honest, |s| &s.trimmed);
    let opened = stat_sum(&honest, |s| &s.connections_opened);
    let dials = stat_sum(&honest, |s| &s.dials);
    let bootstraps = stat_sum(&honest, |s| &s.bootstraps);
    let bootstraps_cut = stat_sum(&honest, |s| &s.bootstraps_cut);
    let joins = stat_sum(&honest, |s| &s.joins);
    let kad_requests = json!({
        "join": stat_sum(&honest, |s| &s.kad_requests_join),
        "cut_bootstraps": stat_sum(&honest, |s| &s.kad_requests_cut),
        "other": stat_sum(&honest, |s| &s.kad_requests_other),
    });

    // Stop the adversaries, let in-flight validations finish, then check the honest stores.
    stop_junk.cancel();
    let mut tallies: HashMap<&'static str, attack::Tally> = HashMap::new();
    for (kind, t) in junk_tasks {
        if let Ok(t) = t.await {
            let sum = tallies.entry(kind.name()).or_default();
            sum.sent += t.sent;
            sum.send_errors += t.send_errors;
            sum.dids.extend(t.dids);
        }
    }
    let junk = tallies.remove("junk").unwrap_or_default();
    let replay = tallies.remove("replay").unwrap_or_default();
    let sybil = tallies.remove("sybil").unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let validation_micros =
        stat_sum(&net.nodes[..n], |s| &s.validation_micros).saturating_sub(validation_start);
    // The victim's connections now: to attackers, and to the rest.
    let eclipse_report = match &eclipse {
        Some((victim, tally, ids)) => {
            let peers = net.nodes[*victim].client.peers().await.unwrap_or_default();
            let ids: Vec<String> = ids.iter().map(|p| p.to_string()).collect();
            let to_attackers = peers.iter().filter(|p| ids.contains(&p.peer_id)).count();
            let delays = |of: &dyn Fn(&str) -> Option<f64>| -> Vec<f64> {
                let mut v: Vec<f64> = published.iter().filter_map(|(did, _)| of(did)).collect();
                v.sort_by(f64::total_cmp);
                v
            };
            let t0s: HashMap<&str, Instant> = spreads
                .iter()
                .zip(&published)
                .map(|(sp, (did, _))| (did.as_str(), sp.t0))
                .collect();
            let victim_delay = delays(&|did| {
                let at = arrivals.at(did, *victim)?;
                Some(ms(at.saturating_duration_since(*t0s.get(did)?)))
            });
            let others_median = {
                let mut v: Vec<f64> = spreads.iter().flat_map(|s| s.delays_ms.clone()).collect();
                v.sort_by(f64::total_cmp);
                percentile(&v, 0.5)
            };
            use std::sync::atomic::Ordering::Relaxed;
            Some(json!({
                "victim": victim, "attackers": ids.len(),
                "adverts_reached": victim_delay.len(), "adverts": published.len(),
                "victim_median_ms": percentile(&victim_delay, 0.5),
                "victim_max_ms": victim_delay.last(),
                "network_median_ms": others_median,
                "victim_peers_at_end": peers.len(), "victim_peers_attackers": to_attackers,
                "attacker_connections": tally.connections.load(Relaxed),
                "attacker_connections_closed": tally.closed.load(Relaxed),
                "attackers_connected_at_end": tally.connected.load(Relaxed),
                "copies_sent_to_attackers": tally.messages.load(Relaxed),
            }))
        }
        None => None,
    };
    stop_eclipse.cancel();
    let adversary_ids: Vec<PeerId> = (0..net.nodes.len())
        .filter(|&i| !net.honest[i])
        .map(|i| net.nodes[i].client.peer_id())
        .collect();
    let mut refused: HashMap<&'static str, u64> = HashMap::new();
    let (mut accepted, mut ignored, mut throttled, mut throttled_busy, mut muted) = (0, 0, 0, 0, 0);
    let mut forwarded_by_honest = 0u64;
    let mut junk_stored = 0usize;
    let published = Arc::new(published);
    let junk_dids = Arc::new(junk.dids.clone());
    let with_sybil = args.sybil.is_some();
    let mut sybil_stored: Vec<usize> = Vec::new();
    let mut stored_total = 0u64;
    for node in &honest {
        let stats = node.client.stats();
        accepted += stats.accepted.get();
        ignored += stats.ignored.get();
        throttled += stats.throttled.get();
        throttled_busy += stats.throttled_busy.get();
        muted += stats.muted.get();
        for (reason, count) in stats.rejected.lock().expect("stats lock poisoned").iter() {
            *refused.entry(reason).or_default() += count;
        }
        forwarded_by_honest += stats
            .rejected_from
            .lock()
            .expect("stats lock poisoned")
            .iter()
            .filter(|(p, _)| !adversary_ids.contains(p))
            .map(|(_, c)| c)
            .sum::<u64>();
        // Every stored advertisement is one of the honest ones, byte for byte; no junk DID.
        let (store, published, junk_dids) = (
            node.client.store().clone(),
            published.clone(),
            junk_dids.clone(),
        );
        // A replay in another framing is the same signed JSON: compared as values.
        let (bad, honest_here, len) = tokio::task::spawn_blocking(move || {
            let now = net::unix_now();
            let value = |b: &[u8]| serde_json::from_slice::<Value>(b).ok();
            let mut bad_honest = 0;
            let mut honest_here = 0;
            for (did, bytes) in published.iter() {
                if let Ok(Some(a)) = store.get(did, now) {
                    honest_here += 1;
                    if a.bytes != *bytes && value(&a.bytes) != value(bytes) {
                        bad_honest += 1;
                    }
                }
            }
            let bad_junk = junk_dids
                .iter()
                .filter(|did| !matches!(store.get(did, now), Ok(None)))
                .count();
            let len = store.len().unwrap_or(0);
            (bad_honest + bad_junk, honest_here, len)
        })
        .await
        .map_err(|e| format!("checking a store: {e}"))?;
        stored_total += len as u64;
        // Without Sybil publishers, whatever a store holds beyond the honest advertisements
        // is junk; with them, it is theirs (they are valid: accepted and forwarded).
        let extra = len.saturating_sub(honest_here);
        if with_sybil {
            sybil_stored.push(extra);
            junk_stored += bad;
        } else {
            junk_stored += bad + extra;
        }
    }

    // Shut down: recorders, then the nodes (each closes its swarm; the stores close when the
    // last clone is dropped, by the caller after the runtime stops).
    stop_recorders.cancel();
    shutdown.cancel();
    let mut stuck = 0;
    for node in &net.nodes {
        let task = &node.task;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !task.is_finished() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !task.is_finished() {
            task.abort();
            stuck += 1;
        }
    }
    drop(net);
    drop(honest);

    // The floor, with the agentnet nodes gone: the initial nodes' dial plan over the same links.
    let floor = if args.floor {
        eprintln!("simulate: the floor: {n} bare gossipsub nodes");
        let dials: Vec<(usize, usize)> = plan
            .iter()
            .copied()
            .filter(|&(i, j)| i < n && j < n)
            .collect();
        let floor_cut = Arc::new(scenario::Cut::default());
        let floor_links = |i: usize| -> Option<net::Links> {
            args.delays.map(|d| {
                Arc::new(scenario::NodeLinks {
                    me: i,
                    base: floor::BASE_PORT,
                    delays: Some(d),
                    cut: floor_cut.clone(),
                }) as net::Links
            })
        };
        let f = floor::run(
            &floor::Plan {
                nodes: n,
                dials: &dials,
                mesh: args.mesh,
                heartbeat: args.heartbeat(),
                warmup: args.warmup(),
                messages: args.adverts,
                bytes: args.floor_bytes,
                gap: args.gap.min(Duration::from_millis(500)),
                deadline: args.deadline,
                seed: args.seed,
                idontwant: args.idontwant,
            },
            &floor_links,
        )
        .await?;
        Some(f)
    } else {
        None
    };
    stop_sampler.store(true, std::sync::atomic::Ordering::Relaxed);

    // Figures.
    let delivered: usize = spreads.iter().map(|s| s.reached).sum();
    let mut summary = serde_json::Map::new();
    for (k, name) in ["reach50", "reach95", "reach100"].iter().enumerate() {
        let mut v: Vec<f64> = spreads.iter().filter_map(|s| s.t[k].map(ms)).collect();
        v.sort_by(f64::total_cmp);
        summary.insert(
            (*name).into(),
            json!({
                "adverts_reaching": v.len(),
                "median_ms": percentile(&v, 0.5),
                "p95_ms": percentile(&v, 0.95),
                "max_ms": v.last(),
            }),
        );
    }
    let mut publish: Vec<f64> = spreads.iter().map(|s| ms(s.publish)).collect();
    publish.sort_by(f64::total_cmp);
    let refused_total: u64 = refused.values().sum();
    let floor_report = floor.map(|mut f| {
        let ratio = |k: &str| match (
            summary.get(k).and_then(|x| x["p95_ms"].as_f64()),
            f["reach"][k]["p95_ms"].as_f64(),
        ) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        f["p95_over_floor"] = json!({"reach50": ratio("reach50"), "reach95": ratio("reach95"), "reach100": ratio("reach100")});
        f
    });
    let per_advert: Vec<Value> = spreads
        .iter()
        .map(|s| {
            json!({
                "reached": s.reached, "expected": s.expected, "partitioned": s.partitioned,
                "publish_ms": ms(s.publish),
                "reach50_ms": s.t[0].map(ms), "reach95_ms": s.t[1].map(ms), "reach100_ms": s.t[2].map(ms),
                "duplicates": s.duplicates, "bytes_in_per_node": s.bytes_per_node,
                "delays_ms": s.delays_ms,
            })
        })
        .collect();
    let rss: Vec<Value> = rss_samples
        .lock()
        .expect("samples lock poisoned")
        .iter()
        .map(|(t, m)| json!([t, m]))
        .collect();
    let validated = accepted + ignored + refused_total;
    let validation_per_message =
        (validated > 0).then(|| validation_micros as f64 / validated as f64);
    Ok(json!({
        "nodes": n,
        "scenario": args.scenario.as_ref().map(|p| p.display().to_string()),
        "links": args.delays.map(|d| json!({
            "latency": format!("{:?}", d.dist).to_lowercase(), "latency_ms": d.mean_ms,
            "spread_ms": d.spread_ms, "bandwidth_bytes_per_s": d.bytes_per_sec,
        })),
        "churn": args.churn.as_ref().map(|c| json!({
            "leave_per_min": c.leave_per_min, "join_per_min": c.join_per_min,
            "left": left, "joined": joined, "join_dial_failures": join_failures,
        })),
        "partition": args.partition.as_ref().map(|p| json!({
            "fraction": p.fraction, "from_advert": p.from_advert, "heal_advert": p.heal_advert,
            "cut_off": cut.side.iter().filter(|s| **s).count(), "redial_failures": redial_failures,
        })),
        "dials": args.dials,
        "adverts": args.adverts,
        "adversaries": args.adversaries,
        "seed": args.seed,
        "heartbeat_ms": ms(args.heartbeat()),
        "deadline_ms": ms(args.deadline),
        "warmup_ms": ms(warmup),
        "gap_ms": ms(args.gap),
        "provide_delay_ms": ms(args.provide_delay()),
        "conn_watermarks": [args.conn_low, args.conn_high],
        "conn_grace_ms": ms(args.conn_grace()),
        "mesh": args.mesh,
        "idontwant": args.idontwant,
        "store_memory": if args.own_store_memory { json!("own") } else {
            json!({"shared_cache_mb": args.store_cache_mb, "shared_memtable_mb": args.store_memtable_mb})
        },
        "kad_bootstrap_s": match args.kad_bootstrap_s {
            Some(s) => json!(s),
            None => json!(Config::default().kad_bootstrap_interval.map(|d| d.as_secs())),
        },
        "kad_k": args.kad_k.map_or(Config::default().kad_k, |k| k as usize),
        "advert_bytes": advert_bytes,
        "setup_s": setup.as_secs_f64(),
        "dial_failures": dial_failures,
        "degree": {"min": degrees.first(), "median": degrees.get(n / 2), "max": degrees.last()},
        "publish_errors": publish_errors,
        "delivery_pct": if expected == 0 { 100.0 } else { 100.0 * delivered as f64 / expected as f64 },
        "not_delivered": expected - delivered,
        "reach": Value::Object(summary),
        "local_publish_ms": {"median": percentile(&publish, 0.5), "p95": percentile(&publish, 0.95)},
        "accepted": accepted,
        "ignored": ignored,
        "throttled": throttled,
        "throttled_busy": throttled_busy,
        "muted": muted,
        "refused": refused_total,
        "refused_by_reason": refused,
        "attacks": {
            "replay": args.replay.map(|f| json!({
                "nodes": f.nodes, "rate": f.rate, "sent": replay.sent, "send_errors": replay.send_errors,
            })),
            "sybil": args.sybil.map(|f| {
                sybil_stored.sort_unstable();
                json!({
                    "nodes": f.nodes, "rate": f.rate, "sent": sybil.sent, "send_errors": sybil.send_errors,
                    "dids_minted": sybil.dids.len(),
                    "stored_per_honest_node": {"median": sybil_stored.get(sybil_stored.len() / 2),
                        "max": sybil_stored.last()},
                })
            }),
            "eclipse": eclipse_report,
        },
        "accepted_again": accepted.saturating_sub(stored_total),
        "recorder_lagged": arrivals.lagged.load(std::sync::atomic::Ordering::Relaxed),
        "validation_cpu_s": validation_micros as f64 / 1e6,
        "validation_us_per_message": validation_per_message,
        "junk_sent": junk.sent,
        "junk_send_errors": junk.send_errors,
        "junk_stored": junk_stored,
        "junk_forwarded_by_honest": forwarded_by_honest,
        "gossip_copies_received": copies,
        "gossip_unique_received": unique,
        "gossip_idontwant_received": total.idontwant_received,
        "gossip_send_dropped": total.send_dropped,
        "gossip_validated_too_late": total.validated_too_late,
        "duplicate_ratio": duplicate_ratio,
        "bytes_in_per_node_per_advert": bytes_per_node_per_advert,
        "bytes_in_total": bytes_in,
        "bytes_out_total": bytes_out,
        "connections": {"opened": opened, "dials": dials, "trimmed": trimmed, "kad_bootstraps": bootstraps, "kad_bootstraps_cut": bootstraps_cut, "kad_joins": joins, "kad_requests": kad_requests,
            "idle_window_s": idle_window.as_secs_f64(),
            "setup_and_warmup": idle_start.json(n, setup + warmup),
            "idle": idle_conns.json(n, idle_window),
            "advert_phase": phase_conns.json(n, phase)},
        "cpu_s_advert_phase": cpu.map(|c| c.as_secs_f64()),
        "idle_cpu_pct": idle_cpu,
        "advert_phase_s": phase.as_secs_f64(),
        "node_tasks_aborted": stuck,
        "peak_rss_mib": proc_mib("/proc/self/status", "VmHWM:"),
        "load_start": load_start,
        "load_end": loadavg(),
        "elapsed_s": started.elapsed().as_secs_f64(),
        "floor": floor_report,
        "queries": {
            "asked": query_found + query_failed, "found": query_found, "not_found": query_failed,
            "missed_by_gossip": missed_pairs,
            "median_ms": percentile(&query_ms, 0.5), "p95_ms": percentile(&query_ms, 0.95),
        },
        "per_advert": per_advert,
        "rss_mib_samples": rss,
    }))
}

/// `results.json` and the figures, into `out` (created if missing).
fn write_out(out: &Path, report: &Value) -> Result<(), String> {
    use plot::Series;
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let json = serde_json::to_vec_pretty(report).map_err(|e| format!("encoding results: {e}"))?;
    let file = out.join("results.json");
    std::fs::write(&file, json).map_err(|e| format!("writing {}: {e}", file.display()))?;
    let empty = Vec::new();
    let adverts = report["per_advert"].as_array().unwrap_or(&empty);
    // Reach CDF: every delivery's delay, over every delivery expected.
    let expected: f64 = adverts.iter().map(|a| f64_of(&a["expected"])).sum();
    let mut delays: Vec<f64> = adverts
        .iter()
        .flat_map(|a| {
            a["delays_ms"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(f64_of)
        })
        .collect();
    delays.sort_by(f64::total_cmp);
    let cdf = |delays: &[f64], expected: f64| -> Vec<(f64, f64)> {
        let mut pts = vec![(0.0, 0.0)];
        pts.extend(
            delays
                .iter()
                .enumerate()
                .map(|(k, d)| (*d, 100.0 * (k + 1) as f64 / expected.max(1.0))),
        );
        pts
    };
    let title = |what: &str| {
        format!(
            "{what}: {} nodes{}",
            report["nodes"],
            report["links"]["latency_ms"]
                .as_f64()
                .map_or(String::new(), |l| format!(", {l} ms links"))
        )
    };
    plot::lines(
        &out.join("reach_cdf.svg"),
        &title("Deliveries by delay"),
        "ms since publication",
        "% of expected deliveries",
        &[Series {
            label: String::new(),
            points: cdf(&delays, expected),
        }],
    )?;
    // Reach over time, for up to six advertisements spread over the run.
    let step = adverts.len().div_ceil(6).max(1);
    let over_time: Vec<Series> = adverts
        .iter()
        .enumerate()
        .step_by(step)
        .map(|(k, a)| {
            let d: Vec<f64> = a["delays_ms"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(f64_of)
                .collect();
            Series {
                label: format!(
                    "advert {k}{}",
                    if a["partitioned"] == json!(true) {
                        " (partition)"
                    } else {
                        ""
                    }
                ),
                points: cdf(&d, f64_of(&a["expected"])),
            }
        })
        .collect();
    plot::lines(
        &out.join("reach_over_time.svg"),
        &title("Reach over time"),
        "ms since publication",
        "% of running nodes reached",
        &over_time,
    )?;
    let per_advert = |f: &dyn Fn(&Value) -> Option<f64>| -> Vec<(f64, f64)> {
        adverts
            .iter()
            .enumerate()
            .filter_map(|(k, a)| f(a).map(|y| (k as f64, y)))
            .collect()
    };
    for (file, what, y, points) in [
        (
            "reach_by_advert.svg",
            "Reach at the deadline",
            "% of running nodes",
            per_advert(&|a| Some(100.0 * f64_of(&a["reached"]) / f64_of(&a["expected"]).max(1.0))),
        ),
        (
            "duplicates.svg",
            "Duplicates per accepted copy",
            "duplicates",
            per_advert(&|a| a["duplicates"].as_f64()),
        ),
        (
            "bytes.svg",
            "Bytes in per node per advert",
            "KiB (all protocols)",
            per_advert(&|a| a["bytes_in_per_node"].as_f64().map(|b| b / 1024.0)),
        ),
    ] {
        plot::lines(
            &out.join(file),
            &title(what),
            "advertisement",
            y,
            &[Series {
                label: String::new(),
                points,
            }],
        )?;
    }
    let rss: Vec<(f64, f64)> = report["rss_mib_samples"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|p| (f64_of(&p[0]), f64_of(&p[1])))
        .collect();
    plot::lines(
        &out.join("memory.svg"),
        &title("Resident memory"),
        "s since start",
        "MiB",
        &[Series {
            label: String::new(),
            points: rss,
        }],
    )
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn print_text(r: &Value) {
    let f = |v: &Value| match v.as_f64() {
        Some(x) => format!("{x:.1}"),
        None => "-".into(),
    };
    println!(
        "nodes {}  dials {}  adverts {}  adversaries {}  seed {}  heartbeat {} ms",
        r["nodes"], r["dials"], r["adverts"], r["adversaries"], r["seed"], r["heartbeat_ms"]
    );
    println!(
        "setup {:.1} s, dial failures {}, degree min/median/max {}/{}/{}, advert {} bytes",
        r["setup_s"].as_f64().unwrap_or(0.0),
        r["dial_failures"],
        r["degree"]["min"],
        r["degree"]["median"],
        r["degree"]["max"],
        r["advert_bytes"]
    );
    if let Some(l) = r["links"].as_object() {
        println!(
            "links: {} latency {} ms (spread {} ms), bandwidth {}",
            l["latency"].as_str().unwrap_or("fixed"),
            l["latency_ms"],
            l["spread_ms"],
            l["bandwidth_bytes_per_s"]
                .as_f64()
                .map_or("unlimited".into(), |b| format!(
                    "{:.1} Mbit/s",
                    b * 8.0 / 1e6
                ))
        );
    }
    if let Some(c) = r["churn"].as_object() {
        println!(
            "churn: {} left, {} joined (rates {}/{} per minute; join dial failures {})",
            c["left"], c["joined"], c["leave_per_min"], c["join_per_min"], c["join_dial_failures"]
        );
    }
    if let Some(p) = r["partition"].as_object() {
        println!(
            "partition: {} nodes cut off from advert {} to {} (redial failures {})",
            p["cut_off"], p["from_advert"], p["heal_advert"], p["redial_failures"]
        );
    }
    println!(
        "delivery {:.2} % ({} node-deliveries missing, deadline {} ms)",
        r["delivery_pct"].as_f64().unwrap_or(0.0),
        r["not_delivered"],
        r["deadline_ms"]
    );
    for (name, label) in [
        ("reach50", "50 %"),
        ("reach95", "95 %"),
        ("reach100", "100 %"),
    ] {
        let x = &r["reach"][name];
        println!(
            "reach {label:>5}: median {:>7} ms  p95 {:>7} ms  max {:>7} ms  ({} of {} adverts)",
            f(&x["median_ms"]),
            f(&x["p95_ms"]),
            f(&x["max_ms"]),
            x["adverts_reaching"],
            r["adverts"]
        );
    }
    if let Some(fl) = r["floor"].as_object() {
        for name in ["reach50", "reach95", "reach100"] {
            let x = &fl["reach"][name];
            println!(
                "floor {name:>8} (bare gossipsub, {} B): median {:>7} ms  p95 {:>7} ms; agentnet's p95 is {}x",
                fl["message_bytes"],
                f(&x["median_ms"]),
                f(&x["p95_ms"]),
                fl["p95_over_floor"][name]
                    .as_f64()
                    .map_or("-".into(), |v| format!("{v:.2}"))
            );
        }
        println!(
            "floor: delivery {:.2} %",
            fl["delivery_pct"].as_f64().unwrap_or(0.0)
        );
    }
    let q = &r["queries"];
    if q["asked"].as_u64().unwrap_or(0) > 0 || q["missed_by_gossip"].as_u64().unwrap_or(0) > 0 {
        println!(
            "discover (DHT + fetch) for what gossip missed ({} pairs): {} of {} found, median {} ms, p95 {} ms",
            q["missed_by_gossip"], q["found"], q["asked"], f(&q["median_ms"]), f(&q["p95_ms"])
        );
    }
    println!(
        "local publish (validate + store): median {} ms  p95 {} ms",
        f(&r["local_publish_ms"]["median"]),
        f(&r["local_publish_ms"]["p95"])
    );
    println!(
        "honest nodes: accepted {}  ignored {}  throttled {} ({} with every validation permit in use)  refused {} {}",
        r["accepted"], r["ignored"], r["throttled"], r["throttled_busy"], r["refused"], r["refused_by_reason"]
    );
    if r["adversaries"].as_u64().unwrap_or(0) > 0 {
        println!(
            "junk: sent {} (send errors {}), stored by honest nodes {}, forwarded by honest nodes {}",
            r["junk_sent"], r["junk_send_errors"], r["junk_stored"], r["junk_forwarded_by_honest"]
        );
    }
    let attacks = &r["attacks"];
    if attacks["replay"].is_object() {
        let x = &attacks["replay"];
        println!(
            "replay: {} nodes sent {} honest advertisements again in new framings; accepted again by honest nodes {}",
            x["nodes"], x["sent"], r["accepted_again"]
        );
    }
    if attacks["sybil"].is_object() {
        let x = &attacks["sybil"];
        println!(
            "sybil: {} nodes sent {} valid advertisements under {} minted DIDs; stored per honest node: median {}, max {}",
            x["nodes"], x["sent"], x["dids_minted"],
            x["stored_per_honest_node"]["median"], x["stored_per_honest_node"]["max"]
        );
    }
    if attacks["eclipse"].is_object() {
        let x = &attacks["eclipse"];
        println!(
            "eclipse: {} attackers on node {}: it got {} of {} adverts (median {} ms, network median {} ms); \
             at the end {} of its {} peers were attackers ({} attacker connections, {} closed by it)",
            x["attackers"], x["victim"], x["adverts_reached"], x["adverts"],
            f(&x["victim_median_ms"]), f(&x["network_median_ms"]),
            x["victim_peers_attackers"], x["victim_peers_at_end"],
            x["attacker_connections"], x["attacker_connections_closed"]
        );
    }
    if let Some(cpu) = r["validation_cpu_s"].as_f64() {
        println!(
            "validation: {cpu:.2} s over the honest nodes, {} µs per message validated",
            f(&r["validation_us_per_message"])
        );
    }
    println!(
        "gossip: {} copies received for {} accepted (duplicate ratio {}); bytes in per node per \
         advert {:.0} (all protocols)",
        r["gossip_copies_received"],
        r["gossip_unique_received"],
        r["duplicate_ratio"]
            .as_f64()
            .map_or("-".into(), |x| format!("{x:.2}")),
        r["bytes_in_per_node_per_advert"].as_f64().unwrap_or(0.0),
    );
    let c = &r["connections"];
    println!(
        "connections (whole run, all nodes): opened {}, dials {}, trimmed {}; Kademlia joins {}, bootstraps {} (automatic ones cut short {})",
        c["opened"], c["dials"], c["trimmed"], c["kad_joins"], c["kad_bootstraps"], c["kad_bootstraps_cut"]
    );
    for (label, w) in [
        (
            format!("settled, idle {:.0} s", f64_of(&c["idle_window_s"])),
            &c["idle"],
        ),
        ("while publishing".to_owned(), &c["advert_phase"]),
    ] {
        println!(
            "  {label}: opened {} ({} per node per minute), dials {} ({} per node per minute), trimmed {}",
            w["opened"],
            f(&w["opened_per_node_per_min"]),
            w["dials"],
            f(&w["dials_per_node_per_min"]),
            w["trimmed"]
        );
    }
    println!(
        "CPU {} s over a {:.1} s advert phase (idle network: {} % of a core); peak RSS {} MiB; \
         load {} -> {}; total {:.1} s",
        f(&r["cpu_s_advert_phase"]),
        r["advert_phase_s"].as_f64().unwrap_or(0.0),
        f(&r["idle_cpu_pct"]),
        r["peak_rss_mib"],
        r["load_start"].as_str().unwrap_or("n/a"),
        r["load_end"].as_str().unwrap_or("n/a"),
        r["elapsed_s"].as_f64().unwrap_or(0.0)
    );
}

/// Files one node's store holds open: RocksDB keeps its lock, info log, manifest and
/// write-ahead log open, and a handle on the store's directory per column family (15, counted
/// in a run), and a flush adds a table file for a while.
const OPEN_FILES_PER_STORE: u64 = 16;
/// Open files the rest of the process may need (the runtime, the output, the figures).
const OPEN_FILES_SPARE: u64 = 256;

/// Raises the process's soft limit on open files as far as the run needs and the hard limit
/// allows, and refuses a run that would still run out: at ~1 250 nodes under a limit of 20 000
/// the stores would fail to open, or to flush, part way through.
fn ensure_open_files(stores: u64) -> Result<(), String> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let need = stores * OPEN_FILES_PER_STORE + OPEN_FILES_SPARE;
    let mut limit = getrlimit(Resource::Nofile);
    let enough = |l: Option<u64>| l.is_none_or(|l| l >= need);
    if enough(limit.current) {
        return Ok(());
    }
    let hard = limit.maximum;
    limit.current = Some(hard.map_or(need, |h| h.min(need)));
    let raised = setrlimit(Resource::Nofile, limit).is_ok();
    let now = getrlimit(Resource::Nofile).current;
    if raised && enough(now) {
        return Ok(());
    }
    let show = |l: Option<u64>| l.map_or("unlimited".to_string(), |l| l.to_string());
    Err(format!(
        "{stores} stores need about {need} open files ({OPEN_FILES_PER_STORE} each), and this \
         process may open {} (hard limit {}): run fewer nodes, or raise the hard limit \
         (`ulimit -Hn {need}` as root, or LimitNOFILE= for a service) and run again",
        show(now),
        show(hard),
    ))
}

fn main() -> ExitCode {
    let args = match Args::load() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("simulate: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = match TempDir::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("simulate: creating a temporary directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = ensure_open_files(args.stores as u64) {
        eprintln!("simulate: {e}");
        return ExitCode::from(2);
    }
    let limit = args
        .max_rss_mb
        .unwrap_or_else(|| proc_mib("/proc/meminfo", "MemAvailable:").map_or(8192, |m| m / 2));
    rss_watchdog(limit, dir.0.clone());
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("simulate: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Watchdog: setup, every advertisement's deadline, and slack for checks and shutdown.
    let nodes = (args.nodes() as usize + args.adversaries) as u32;
    let bound = Duration::from_secs(60)
        + Duration::from_secs(1) * nodes
        + args.warmup()
        + args.idle
        + (args.deadline + args.gap + Duration::from_millis(100)) * args.adverts as u32
        // Healing a partition: its redials and a gap.
        + args.partition.as_ref().map_or(Duration::ZERO, |_| Duration::from_secs(60) + args.gap)
        // Joins: each a node start and its dials.
        + args.churn.as_ref().map_or(Duration::ZERO, |c| {
            let minutes = (args.deadline + args.gap).as_secs_f64() * args.adverts as f64 / 60.0;
            Duration::from_secs(12) * (c.join_per_min * minutes).ceil() as u32
        })
        // Queries: each bounded at 30 s.
        + Duration::from_secs(30) * args.queries as u32
        // The floor: its warm-up, each message's deadline and gap, and its shutdown.
        + if args.floor {
            args.warmup()
                + (args.deadline + args.gap.min(Duration::from_millis(500))) * args.adverts as u32
                + Duration::from_secs(60)
        } else {
            Duration::ZERO
        };
    let result = rt.block_on(async {
        tokio::time::timeout(bound, run(&args, &dir.0))
            .await
            .unwrap_or_else(|_| Err(format!("run exceeded its bound of {bound:?}")))
    });
    // Stops the node tasks and blocking work still running; the stores close with them.
    rt.shutdown_timeout(Duration::from_secs(10));
    drop(dir);
    match result {
        Ok(report) => {
            if let Some(out) = &args.out {
                if let Err(e) = write_out(out, &report) {
                    eprintln!("simulate: {e}");
                    return ExitCode::FAILURE;
                }
                eprintln!("simulate: results and figures in {}", out.display());
            }
            if args.json {
                println!("{report}");
            } else {
                print_text(&report);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("simulate: {e}");
            ExitCode::FAILURE
        }
    }
}
