//! Scenario files for `simulate --scenario FILE` and the link model they describe.
//!
//! A scenario is TOML. Its top-level keys are the flags' names with `_` for `-` (`nodes`,
//! `dials`, `adverts`, `adversaries`, `seed`, `mesh`, `idontwant`, `heartbeat_ms`, `warmup_ms`, `idle_ms`,
//! `gap_ms`, `deadline_ms`, `junk_rate`, `queries`), and the tables `[links]`, `[churn]`,
//! `[partition]` and the attacks `[replay]`, `[sybil]`, `[eclipse]` (see `attack.rs`). A flag given on the command line wins over the file. Unknown keys are refused,
//! so a misspelt one never runs a different experiment than the file says.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentnet_discovery::net::{Link, LinkModel};
use serde::Deserialize;

/// A scenario file, as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub nodes: Option<u64>,
    pub dials: Option<usize>,
    pub adverts: Option<usize>,
    pub adversaries: Option<usize>,
    pub seed: Option<u64>,
    pub mesh: Option<usize>,
    pub idontwant: Option<bool>,
    pub heartbeat_ms: Option<u64>,
    pub warmup_ms: Option<u64>,
    pub idle_ms: Option<u64>,
    pub gap_ms: Option<u64>,
    pub deadline_ms: Option<u64>,
    pub junk_rate: Option<u32>,
    pub queries: Option<usize>,
    #[serde(default)]
    pub links: Links,
    pub churn: Option<Churn>,
    pub partition: Option<Partition>,
    pub replay: Option<Flood>,
    pub sybil: Option<Flood>,
    pub eclipse: Option<Eclipse>,
}

/// `[links]`: every link's one-way latency, drawn once per pair of nodes (the same both ways),
/// and bandwidth.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Links {
    /// `fixed` (every link `latency_ms`), `uniform` (`latency_ms` ± `spread_ms`) or `normal`
    /// (mean `latency_ms`, standard deviation `spread_ms`, cut at 0 and at 4 deviations).
    pub latency: Option<Dist>,
    pub latency_ms: Option<f64>,
    pub spread_ms: Option<f64>,
    /// Each direction of each link, in megabits per second; absent: unlimited.
    pub bandwidth_mbit: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    #[default]
    Fixed,
    Uniform,
    Normal,
}

/// `[churn]`: between advertisements, nodes leave (their swarm stops; their store stays for the
/// checks) and new ones join (each dials `dials` live nodes), at these rates.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Churn {
    #[serde(default)]
    pub leave_per_min: f64,
    #[serde(default)]
    pub join_per_min: f64,
}

/// `[partition]`: from advertisement `from_advert` (0-based) on, `fraction` of the nodes (drawn
/// by the seed) are cut off from the rest; at `heal_advert` the cut is lifted and the dials it
/// broke are made again.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    pub fraction: f64,
    pub from_advert: usize,
    pub heal_advert: Option<usize>,
}

/// `[replay]` and `[sybil]`: this many adversary nodes (full nodes, dialing `dials` honest
/// ones), each sending `rate` messages a second from the first advertisement to the last.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flood {
    pub nodes: usize,
    #[serde(default = "default_rate")]
    pub rate: u32,
}

fn default_rate() -> u32 {
    20
}

/// `[eclipse]`: this many attacker nodes (bare gossipsub, forwarding nothing) all dial one honest
/// node, `target` (0-based; default drawn by the seed), and dial it again whenever it closes
/// the connection.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Eclipse {
    pub nodes: usize,
    pub target: Option<usize>,
}

impl Scenario {
    /// Reads and checks a scenario file; the error names the file and what to fix.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading scenario {}: {e}", path.display()))?;
        let s: Scenario =
            toml::from_str(&text).map_err(|e| format!("scenario {}: {e}", path.display()))?;
        s.check()
            .map_err(|e| format!("scenario {}: {e}", path.display()))?;
        Ok(s)
    }

    fn check(&self) -> Result<(), String> {
        if let Some(c) = &self.churn {
            for (name, v) in [
                ("leave_per_min", c.leave_per_min),
                ("join_per_min", c.join_per_min),
            ] {
                if !(0.0..=10_000.0).contains(&v) {
                    return Err(format!(
                        "[churn] {name} must be between 0 and 10000, not {v}"
                    ));
                }
            }
        }
        if let Some(p) = &self.partition {
            if !(p.fraction > 0.0 && p.fraction < 1.0) {
                return Err(format!(
                    "[partition] fraction must be between 0 and 1 (exclusive), not {}",
                    p.fraction
                ));
            }
            if p.heal_advert.is_some_and(|h| h <= p.from_advert) {
                return Err("[partition] heal_advert must come after from_advert".into());
            }
        }
        for (name, f) in [("replay", &self.replay), ("sybil", &self.sybil)] {
            if let Some(f) = f {
                if f.nodes == 0 || f.nodes > 1000 {
                    return Err(format!(
                        "[{name}] nodes must be between 1 and 1000, not {}",
                        f.nodes
                    ));
                }
                if !(1..=10_000).contains(&f.rate) {
                    return Err(format!(
                        "[{name}] rate must be between 1 and 10000, not {}",
                        f.rate
                    ));
                }
            }
        }
        if let Some(e) = &self.eclipse {
            if e.nodes == 0 || e.nodes > 1000 {
                return Err(format!(
                    "[eclipse] nodes must be between 1 and 1000, not {}",
                    e.nodes
                ));
            }
            if let (Some(t), Some(n)) = (e.target, self.nodes) {
                if t as u64 >= n {
                    return Err(format!(
                        "[eclipse] target must be a node below nodes = {n}, not {t}"
                    ));
                }
            }
        }
        self.links.delay_model(0).map(|_| ())
    }
}

impl Links {
    /// The latency distribution and bandwidth these keys describe (`seed` draws the links).
    pub fn delay_model(&self, seed: u64) -> Result<Option<Delays>, String> {
        let mean = self.latency_ms.unwrap_or(0.0);
        let spread = self.spread_ms.unwrap_or(0.0);
        if !(0.0..=60_000.0).contains(&mean) || !(0.0..=60_000.0).contains(&spread) {
            return Err(format!(
                "[links] latency_ms and spread_ms must be between 0 and 60000, not {mean} and {spread}"
            ));
        }
        let bytes_per_sec = match self.bandwidth_mbit {
            None => None,
            Some(m) if m > 0.0 && m <= 1_000_000.0 => Some((m * 125_000.0) as u64),
            Some(m) => return Err(format!("[links] bandwidth_mbit must be above 0, not {m}")),
        };
        if mean == 0.0 && spread == 0.0 && bytes_per_sec.is_none() {
            return Ok(None);
        }
        Ok(Some(Delays {
            dist: self.latency.unwrap_or_default(),
            mean_ms: mean,
            spread_ms: spread,
            bytes_per_sec,
            seed,
        }))
    }
}

/// How every link of a run is drawn.
#[derive(Debug, Clone, Copy)]
pub struct Delays {
    pub dist: Dist,
    pub mean_ms: f64,
    pub spread_ms: f64,
    pub bytes_per_sec: Option<u64>,
    pub seed: u64,
}

impl Delays {
    /// The one-way latency between nodes `a` and `b` (the same both ways, the same every run of
    /// a seed).
    pub fn latency(&self, a: usize, b: usize) -> Duration {
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let mut x = splitmix(self.seed ^ ((lo as u64) << 32 | hi as u64));
        let mut unit = || {
            x = splitmix(x);
            // 53 bits into (0, 1].
            ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64
        };
        let ms = match self.dist {
            Dist::Fixed => self.mean_ms,
            Dist::Uniform => self.mean_ms + self.spread_ms * (2.0 * unit() - 1.0),
            Dist::Normal => {
                // Box-Muller: two uniform draws, one standard normal.
                let (u1, u2) = (unit(), unit());
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                self.mean_ms + self.spread_ms * z.clamp(-4.0, 4.0)
            }
        };
        Duration::from_secs_f64(ms.max(0.0) / 1000.0)
    }
}

/// SplitMix64: a seeded, stateless hash of the pair (no RNG state to keep per link).
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which side of a partition each node is on, and whether the cut is in force.
#[derive(Debug, Default)]
pub struct Cut {
    pub active: AtomicBool,
    /// `side[i]`: node i is in the cut-off part. Nodes past the end (joined later) are not.
    pub side: Vec<bool>,
}

impl Cut {
    /// Node `i` is in the cut-off part (whether or not the cut is in force).
    pub fn cut_off(&self, i: usize) -> bool {
        self.side.get(i).copied().unwrap_or(false)
    }

    pub fn separates(&self, a: usize, b: usize) -> bool {
        self.active.load(Ordering::Relaxed) && self.cut_off(a) != self.cut_off(b)
    }
}

/// The link model of node `me`, which listens on memory port `base + me` (`start_node`: base 1).
#[derive(Debug)]
pub struct NodeLinks {
    pub me: usize,
    pub base: u64,
    pub delays: Option<Delays>,
    pub cut: Arc<Cut>,
}

impl LinkModel for NodeLinks {
    fn link(&self, to: u64) -> Option<Link> {
        let other = to.checked_sub(self.base)? as usize;
        if self.cut.separates(self.me, other) {
            return None;
        }
        Some(match &self.delays {
            None => Link {
                latency: Duration::ZERO,
                bytes_per_sec: None,
            },
            Some(d) => Link {
                latency: d.latency(self.me, other),
                bytes_per_sec: d.bytes_per_sec,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_symmetric_seeded_and_within_the_distribution() {
        let d = Delays {
            dist: Dist::Uniform,
            mean_ms: 100.0,
            spread_ms: 50.0,
            bytes_per_sec: None,
            seed: 7,
        };
        let mut seen = Vec::new();
        for a in 0..40 {
            for b in 0..40 {
                let l = d.latency(a, b);
                assert_eq!(l, d.latency(b, a));
                assert!(l >= Duration::from_millis(50) && l <= Duration::from_millis(150));
                seen.push(l);
            }
        }
        seen.sort();
        assert!(seen[0] < Duration::from_millis(60), "{:?}", seen[0]);
        assert!(seen[seen.len() - 1] > Duration::from_millis(140));
        let other = Delays { seed: 8, ..d };
        assert_ne!(d.latency(1, 2), other.latency(1, 2));
        let normal = Delays {
            dist: Dist::Normal,
            ..d
        };
        let mean: f64 = (0..2000)
            .map(|i| normal.latency(i, i + 1).as_secs_f64() * 1000.0)
            .sum::<f64>()
            / 2000.0;
        assert!((mean - 100.0).abs() < 5.0, "{mean}");
    }

    #[test]
    fn a_partition_cuts_only_across_and_only_while_active() {
        let cut = Arc::new(Cut {
            active: AtomicBool::new(false),
            side: vec![true, false, false],
        });
        let links = NodeLinks {
            me: 0,
            base: 1,
            delays: None,
            cut: cut.clone(),
        };
        assert!(links.link(2).is_some());
        cut.active.store(true, Ordering::Relaxed);
        assert!(links.link(2).is_none(), "node 0 is cut from node 1");
        let inside = NodeLinks {
            me: 1,
            base: 1,
            delays: None,
            cut: cut.clone(),
        };
        assert!(inside.link(3).is_some(), "nodes 1 and 2 are on one side");
        assert!(links.link(0).is_none(), "port 0 is no node");
    }

    #[test]
    fn bad_scenarios_are_refused_with_the_key_named() {
        for (text, want) in [
            ("nodes = 10\nnodez = 3", "nodez"),
            ("[partition]\nfraction = 1.5\nfrom_advert = 1", "fraction"),
            (
                "[partition]\nfraction = 0.5\nfrom_advert = 3\nheal_advert = 2",
                "heal_advert",
            ),
            ("[links]\nlatency_ms = -1", "latency_ms"),
            ("[links]\nbandwidth_mbit = 0", "bandwidth_mbit"),
            ("[links]\nlatency = \"pareto\"", "pareto"),
            ("[churn]\nleave_per_min = -2", "leave_per_min"),
            ("[sybil]\nnodes = 0", "nodes"),
            ("[replay]\nnodes = 2\nrate = 0", "rate"),
            ("[replay]\nnodes = 2\nrat = 5", "rat"),
            ("nodes = 10\n[eclipse]\nnodes = 4\ntarget = 10", "target"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("s.toml");
            std::fs::write(&p, text).unwrap();
            let e = Scenario::load(&p).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.toml");
        std::fs::write(
            &p,
            "nodes = 30\n[links]\nlatency = \"normal\"\nlatency_ms = 100\nspread_ms = 20\n\
             bandwidth_mbit = 50\n[churn]\nleave_per_min = 6\njoin_per_min = 6\n\
             [partition]\nfraction = 0.3\nfrom_advert = 2\nheal_advert = 4\n\
             [replay]\nnodes = 2\n[sybil]\nnodes = 1\nrate = 5\n[eclipse]\nnodes = 6\n",
        )
        .unwrap();
        let s = Scenario::load(&p).unwrap();
        assert_eq!(s.nodes, Some(30));
        assert_eq!(s.replay.map(|f| (f.nodes, f.rate)), Some((2, 20)));
        assert_eq!(s.sybil.map(|f| (f.nodes, f.rate)), Some((1, 5)));
        assert_eq!(s.eclipse.map(|e| (e.nodes, e.target)), Some((6, None)));
        let d = s.links.delay_model(1).unwrap().unwrap();
        assert_eq!(d.bytes_per_sec, Some(6_250_000));
    }
}
