//! One run of the simulation, in its phases: the nodes started and dialed (`setup`), the
//! attackers (`adversaries`), the advertisements published one after another under partition
//! and churn (`publish`), what gossip missed asked for, the stores checked and the nodes shut
//! down, the floor (`checks`), and the report it all adds up to (`results`).

mod adversaries;
mod checks;
mod publish;
mod results;
mod setup;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rand::{Rng as _, SeedableRng};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::Rng;
use crate::args::Args;
use crate::attack;
use crate::measure::Arrivals;
use crate::node::Net;
use crate::process::{loadavg, rss_sampler};
use crate::scenario;
use checks::Totals;
use results::Outcome;

/// Runs the simulation `args` describe, its stores under `dir`, and returns its report.
pub(crate) async fn run(args: &Args, dir: &Path) -> Result<Value, String> {
    let load_start = loadavg();
    let started = Instant::now();
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let rss_samples = rss_sampler(started, stop_sampler.clone());
    let mut sim = Sim::new(args, dir, started);
    let setup = sim.set_up().await?;
    let idle = sim.settle().await;
    let adversaries = sim.start_adversaries();
    let mut adverts = sim.publish_all(&adversaries.honest_dids).await?;
    let queries = sim.discover_missed(&adverts).await?;
    let honest = sim.net.honest_nodes();
    let totals = Totals::read(&honest, &adverts);
    // Stop the adversaries, let in-flight validations finish, then check the honest stores.
    let attacks = adversaries.stop(&sim.net.nodes[..sim.n]).await;
    let eclipse = sim.eclipse_report(setup.eclipse.as_ref(), &adverts).await;
    setup.stop_eclipse.cancel();
    let published = std::mem::take(&mut adverts.published);
    let stores = sim
        .check_stores(&honest, published, &attacks.junk.dids)
        .await?;
    let stuck = sim.shut_down(honest).await;
    let floor = sim.floor().await?;
    stop_sampler.store(true, Ordering::Relaxed);
    Ok(results::report(
        &sim,
        Outcome {
            load_start,
            rss_samples,
            setup,
            idle,
            adverts,
            queries,
            totals,
            attacks,
            eclipse,
            stores,
            stuck,
            floor,
        },
    ))
}

/// The run's state its phases share.
struct Sim<'a> {
    args: &'a Args,
    /// Where the stores are.
    dir: &'a Path,
    /// When the run started.
    started: Instant,
    /// Keys, topology, publishers and the adversaries' seeds, seeded from `--seed`.
    rng: Rng,
    /// Churn, partition, the eclipse victim and the queries draw from their own generator, so
    /// that a scenario with them has the same keys, topology and publishers as one without.
    scenario_rng: Rng,
    /// Cancels every node.
    shutdown: CancellationToken,
    /// Honest nodes at the start.
    n: usize,
    /// The full-node adversaries in start order, each with its rate.
    kinds: Vec<(attack::Kind, u32)>,
    /// The partition's sides, and whether it is in force.
    cut: Arc<scenario::Cut>,
    net: Net,
    /// Every dial made: setup's, then the joiners'.
    plan: Vec<(usize, usize)>,
    /// When each honest node accepted each advertisement.
    arrivals: Arc<Arrivals>,
    stop_recorders: CancellationToken,
}

impl<'a> Sim<'a> {
    /// A run with no node started yet; the partition's sides are drawn.
    fn new(args: &'a Args, dir: &'a Path, started: Instant) -> Self {
        let n = args.nodes() as usize;
        let mut scenario_rng = Rng::seed_from_u64(args.seed ^ 0x5eed_c4a5);
        let cut = Arc::new(scenario::Cut {
            active: false.into(),
            side: match &args.partition {
                Some(p) => (0..n)
                    .map(|_| scenario_rng.gen::<f64>() < p.fraction)
                    .collect(),
                None => Vec::new(),
            },
        });
        let kinds = args.adversary_kinds();
        Sim {
            args,
            dir,
            started,
            rng: Rng::seed_from_u64(args.seed),
            scenario_rng,
            shutdown: CancellationToken::new(),
            n,
            net: Net {
                nodes: Vec::with_capacity(n + kinds.len()),
                honest: Vec::new(),
                alive: Vec::new(),
            },
            kinds,
            cut,
            plan: Vec::new(),
            arrivals: Arc::new(Arrivals::default()),
            stop_recorders: CancellationToken::new(),
        }
    }
}
