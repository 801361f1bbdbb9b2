//! Setup: the nodes started, the dial plan drawn and made, the arrival recorders; then the
//! warm-up and the idle window in which the settled network is watched.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentnet_did::{Resolver, SecretKey};
use agentnet_discovery::advert::{Limits, Validator};
use agentnet_discovery::net::{self, Config, TransportKind};
use agentnet_discovery::store::Store;
use futures::StreamExt;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use rand::Rng as _;
use tokio_util::sync::CancellationToken;

use super::Sim;
use crate::agent::seed32;
use crate::args::Args;
use crate::attack::EclipseTally;
use crate::measure::spawn_recorder;
use crate::node::{dial_plan, ConnCounts, Net, SimNode};
use crate::process::process_cpu;
use crate::scenario;

/// Nodes starting at once during setup.
const STARTS_IN_FLIGHT: usize = 8;

/// What setup made.
pub(super) struct Setup {
    /// Dials of the plan that failed.
    pub(super) dial_failures: usize,
    /// How long the nodes took to start and dial.
    pub(super) took: Duration,
    /// The eclipse's victim, its attackers' tally and their peer ids, with `[eclipse]`.
    pub(super) eclipse: Option<(usize, Arc<EclipseTally>, Vec<PeerId>)>,
    /// Stops the eclipse attackers.
    pub(super) stop_eclipse: CancellationToken,
}

/// The settled network, watched for `--idle-ms` with nothing published.
pub(super) struct Idle {
    pub(super) warmup: Duration,
    pub(super) window: Duration,
    /// The initial honest nodes' connection counters at the start of the window...
    pub(super) start: ConnCounts,
    /// ... and what they counted in it.
    pub(super) conns: ConnCounts,
    /// The process's CPU in the window, % of a core.
    pub(super) cpu: Option<f64>,
    /// The initial honest nodes' peer counts at its end, sorted.
    pub(super) degrees: Vec<usize>,
}

impl Sim<'_> {
    /// Starts the nodes, makes the dial plan, starts the eclipse attackers and the recorders.
    pub(super) async fn set_up(&mut self) -> Result<Setup, String> {
        // Keys drawn in order first (the same keys, topology and publishers as one at a time),
        // then the nodes started STARTS_IN_FLIGHT at a time.
        let keys: Vec<SecretKey> = (0..self.n + self.kinds.len())
            .map(|_| SecretKey::from_seed(&seed32(&mut self.rng)))
            .collect();
        self.net = self.start_nodes(&keys).await?;
        self.plan = self.draw_dial_plan();
        let dial_failures = dial_plan(&self.net.nodes, &self.plan, self.started).await;
        let took = self.started.elapsed();
        let stop_eclipse = CancellationToken::new();
        let eclipse = self.start_eclipse(&stop_eclipse)?;
        eprintln!(
            "simulate: {} nodes up and dialed in {:.1} s; warming up",
            self.net.nodes.len(),
            took.as_secs_f64()
        );
        // Arrival recorders, one per honest node.
        for idx in 0..self.n {
            spawn_recorder(
                &self.net.nodes[idx],
                idx,
                self.arrivals.clone(),
                self.stop_recorders.clone(),
            );
        }
        Ok(Setup {
            dial_failures,
            took,
            eclipse,
            stop_eclipse,
        })
    }

    /// Node `i`'s link model, if the run has links or a partition.
    pub(super) fn links_of(&self, i: usize) -> Option<net::Links> {
        let with_links = self.args.delays.is_some() || self.args.partition.is_some();
        with_links.then(|| {
            Arc::new(scenario::NodeLinks {
                me: i,
                base: 1,
                delays: self.args.delays,
                cut: self.cut.clone(),
            }) as net::Links
        })
    }

    /// Starts a node per key, STARTS_IN_FLIGHT at a time: a start is a store opened on a
    /// blocking thread and a swarm built, and one at a time left the second core idle. Honest
    /// ones listen; adversaries listen nowhere, so they stay behind the nodes they dial (as in
    /// discovery/tests/network.rs).
    async fn start_nodes(&self, keys: &[SecretKey]) -> Result<Net, String> {
        let (args, dir, n, started) = (self.args, self.dir, self.n, self.started);
        let mut net = Net {
            nodes: Vec::with_capacity(keys.len()),
            honest: Vec::new(),
            alive: Vec::new(),
        };
        let mut starts = futures::stream::iter(keys.iter().enumerate())
            .map(|(i, key)| {
                let links = self.links_of(i);
                let shutdown = &self.shutdown;
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
        Ok(net)
    }

    /// Dials: the first to an earlier node (connectivity), the rest to any other honest node.
    fn draw_dial_plan(&mut self) -> Vec<(usize, usize)> {
        let (n, dials) = (self.n, self.args.dials);
        let mut plan: Vec<(usize, usize)> = Vec::new();
        for i in 0..n + self.kinds.len() {
            let mut targets: Vec<usize> = Vec::new();
            let honest = i < n;
            if honest && i > 0 {
                targets.push(self.rng.gen_range(0..i));
            }
            let want = if honest {
                dials.min(n - 1)
            } else {
                dials.min(n)
            };
            while targets.len() < want {
                let j = self.rng.gen_range(0..n);
                if j != i && !targets.contains(&j) {
                    targets.push(j);
                }
            }
            plan.extend(targets.into_iter().map(|j| (i, j)));
        }
        plan
    }

    /// Lets gossipsub build its mesh, then watches the settled network for `--idle-ms` with
    /// nothing published: the connections it opens then are its steady churn (Kademlia's
    /// periodic bootstrap, the connection manager, pings), and its CPU the cost of being idle.
    pub(super) async fn settle(&self) -> Idle {
        let warmup = self.args.warmup();
        tokio::time::sleep(warmup).await;
        let initial: Vec<Arc<SimNode>> = self.net.nodes[..self.n].to_vec();
        let window = self.args.idle;
        let start = ConnCounts::of(&initial);
        let cpu_start = process_cpu();
        tokio::time::sleep(window).await;
        let conns = ConnCounts::of(&initial).since(&start);
        let cpu = match (cpu_start, process_cpu()) {
            (Some(a), Some(b)) if !window.is_zero() => {
                Some(100.0 * b.saturating_sub(a).as_secs_f64() / window.as_secs_f64())
            }
            _ => None,
        };
        let mut degrees = Vec::with_capacity(self.n);
        for node in &initial {
            degrees.push(node.client.peers().await.map(|p| p.len()).unwrap_or(0));
        }
        degrees.sort_unstable();
        Idle {
            warmup,
            window,
            start,
            conns,
            cpu,
            degrees,
        }
    }
}

/// Starts node `port` (listening on `/memory/<port>` if `listen`), its store under `dir`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn start_node(
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
