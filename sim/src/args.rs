//! The command line of `simulate`: its flags, the scenario file's keys where no flag was given,
//! and the checks and derived defaults of both (`Args::load`).

use std::path::PathBuf;
use std::time::Duration;

use agentnet_discovery::net::Config;
use agentnet_discovery::store::{self, Memory};
use clap::Parser;

use crate::attack;
use crate::scenario::{self, Dist, Scenario};

/// Command-line arguments.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "simulate",
    about = "Simulate an agentnet network in one process and measure how fast advertisements spread"
)]
pub struct Args {
    /// Honest nodes (or `nodes` in the scenario file).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=5000))]
    pub(crate) nodes: Option<u64>,
    /// A scenario file (TOML; sim/scenarios/): its keys set what the flags do, plus `[links]`,
    /// `[churn]` and `[partition]`. A flag given too wins over the file.
    #[arg(long)]
    pub(crate) scenario: Option<PathBuf>,
    /// Write results.json and SVG figures (reach CDF, reach per advertisement and over time,
    /// duplicates, bytes, memory) into this directory.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// One-way latency of every link, in ms (the mean, with --latency-spread-ms).
    #[arg(long = "latency-ms")]
    pub(crate) latency_ms: Option<f64>,
    /// Spread of the latency: ± for uniform, the standard deviation for normal.
    #[arg(long = "latency-spread-ms")]
    pub(crate) latency_spread_ms: Option<f64>,
    /// How link latencies are drawn (seeded, once per pair of nodes).
    #[arg(long = "latency-dist", value_enum)]
    pub(crate) latency_dist: Option<Dist>,
    /// Bandwidth of each direction of each link, in megabits per second.
    #[arg(long = "bandwidth-mbit")]
    pub(crate) bandwidth_mbit: Option<f64>,
    /// Filled from the scenario file.
    /// After the agentnet network, measure a bare rust-libp2p gossipsub network in the same run:
    /// same transport, links, dial plan and mesh degree, no validation (the floor).
    #[arg(long)]
    pub(crate) floor: bool,
    /// Give every node's store its own RocksDB block cache and memtable budget (8 + 16 MiB),
    /// as a node process has; by default the stores share one (--store-cache-mb,
    /// --store-memtable-mb).
    #[arg(long = "own-store-memory")]
    pub(crate) own_store_memory: bool,
    /// The shared block cache of the stores, MiB (1 to 65536).
    #[arg(long = "store-cache-mb", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub(crate) store_cache_mb: u64,
    /// The shared memtable budget of the stores, MiB (1 to 65536) (default: 1 MiB per store,
    /// at least 256; less makes the stores flush at every write, see
    /// `store::SHARED_MEMTABLE_BYTES_PER_STORE`).
    #[arg(long = "store-memtable-mb",
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub(crate) store_memtable_mb: Option<u64>,
    #[arg(skip)]
    pub(crate) store_memory: Option<Memory>,
    /// Stores the run opens at the start: the honest nodes' and the junk adversaries' (the
    /// eclipse attackers are bare gossipsub swarms, with none; churn's joiners take the place
    /// of those that left, within the spare files of `ensure_open_files`).
    #[arg(skip)]
    pub(crate) stores: usize,
    /// After the advertisements, this many discover queries (the DHT and the fetch protocol),
    /// each from a running node that gossip did not bring an advertisement to (a partition, a
    /// join after it), for the tag only that advertisement has (`advert-<k>`).
    #[arg(long, default_value_t = 0)]
    pub(crate) queries: usize,
    /// Size of the floor's messages.
    #[arg(long = "floor-bytes", default_value_t = 2048)]
    pub(crate) floor_bytes: usize,
    #[arg(skip)]
    pub(crate) churn: Option<scenario::Churn>,
    #[arg(skip)]
    pub(crate) partition: Option<scenario::Partition>,
    #[arg(skip)]
    pub(crate) delays: Option<scenario::Delays>,
    #[arg(skip)]
    pub(crate) replay: Option<scenario::Flood>,
    #[arg(skip)]
    pub(crate) sybil: Option<scenario::Flood>,
    #[arg(skip)]
    pub(crate) eclipse: Option<scenario::Eclipse>,
    /// Connections each node dials (the first to an earlier node).
    #[arg(long, default_value_t = 8)]
    pub(crate) dials: usize,
    /// Advertisements published, one after another.
    #[arg(long, default_value_t = 20)]
    pub(crate) adverts: usize,
    /// Extra nodes gossiping junk during the run.
    #[arg(long, default_value_t = 0)]
    pub(crate) adversaries: usize,
    /// RNG seed for keys, topology and publishers.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// gossipsub heartbeat in ms (default: net::Config's).
    #[arg(long = "heartbeat-ms", value_parser = millis)]
    pub(crate) heartbeat: Option<Duration>,
    /// Per-advertisement deadline in ms; later nodes count as not delivered.
    #[arg(long = "deadline-ms", value_parser = millis, default_value = "10000")]
    pub(crate) deadline: Duration,
    /// Wait after dialing for the network to settle, in ms (default: 6 heartbeats, at least 90 s).
    #[arg(long = "warmup-ms", value_parser = millis)]
    pub(crate) warmup: Option<Duration>,
    /// After the warm-up, a window in which nothing is published, in ms: the settled network's
    /// connection churn and idle CPU are measured in it.
    #[arg(long = "idle-ms", value_parser = millis, default_value = "60000")]
    pub(crate) idle: Duration,
    /// Pause after each advertisement reached every node, before the next, in ms (2000: longer
    /// than net::Config's provide_delay plus the DHT announcements that follow; 50 makes a burst).
    #[arg(long = "gap-ms", value_parser = millis, default_value = "2000")]
    pub(crate) gap: Duration,
    /// How long after a publish its tags are announced in the DHT, in ms.
    #[arg(long = "provide-delay-ms", value_parser = millis)]
    pub(crate) provide_delay: Option<Duration>,
    /// Kademlia's periodic routing-table refresh in seconds, 0 for never (default:
    /// net::Config's).
    #[arg(long = "kad-bootstrap-s")]
    pub(crate) kad_bootstrap_s: Option<u64>,
    /// Kademlia's k: the closest peers a lookup looks for and a provider record is stored on
    /// (default: net::Config's, libp2p's 20).
    #[arg(long = "kad-k", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(crate) kad_k: Option<u64>,
    /// Connection manager low watermark.
    #[arg(long = "conn-low", default_value_t = Config::default().conn_low)]
    pub(crate) conn_low: usize,
    /// Connection manager high watermark.
    #[arg(long = "conn-high", default_value_t = Config::default().conn_high)]
    pub(crate) conn_high: usize,
    /// How long a new connection is kept from the connection manager's trim, in ms (default:
    /// net::Config's, 10 000).
    #[arg(long = "conn-grace-ms", value_parser = millis)]
    pub(crate) conn_grace: Option<Duration>,
    /// gossipsub mesh degree.
    #[arg(long, default_value_t = Config::default().gossip_mesh, value_parser = clap::value_parser!(usize))]
    pub(crate) mesh: usize,
    /// gossipsub's IDONTWANT on, in the nodes and the floor alike (`net::Config::gossip_idontwant`).
    #[arg(long)]
    pub(crate) idontwant: bool,
    /// Junk messages per second per adversary.
    #[arg(long = "junk-rate", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) junk_rate: u32,
    /// Abort (and clean up) if the process grows past this many MiB (default: half of
    /// MemAvailable at start).
    #[arg(long = "max-rss-mb")]
    pub(crate) max_rss_mb: Option<u64>,
    /// One JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

fn millis(s: &str) -> Result<Duration, String> {
    s.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|e| format!("{s:?}: {e}"))
}

impl Args {
    /// The command line, with the scenario file's keys where no flag was given.
    pub fn load() -> Result<Self, String> {
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

    pub(crate) fn nodes(&self) -> u64 {
        self.nodes.unwrap_or_default()
    }

    /// The full-node adversaries in start order (after the honest nodes), each with its rate.
    pub(crate) fn adversary_kinds(&self) -> Vec<(attack::Kind, u32)> {
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
    pub(crate) fn warmup(&self) -> Duration {
        self.warmup.unwrap_or_default()
    }

    pub(crate) fn heartbeat(&self) -> Duration {
        self.heartbeat.unwrap_or_default()
    }

    pub(crate) fn provide_delay(&self) -> Duration {
        self.provide_delay.unwrap_or_default()
    }

    pub(crate) fn conn_grace(&self) -> Duration {
        self.conn_grace.unwrap_or_default()
    }
}
