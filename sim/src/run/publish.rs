//! The advertisement phase: advertisements published one after another from random running
//! nodes, each measured until it reached every node or its deadline; the partition cut and
//! healed at the advertisements the scenario names, and churn between advertisements.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_did::SecretKey;
use agentnet_discovery::net;
use rand::Rng as _;

use super::setup::start_node;
use super::Sim;
use crate::agent::{seed32, Agent, Vocabulary};
use crate::measure::{ms, spawn_recorder, Spread};
use crate::node::{dial_plan, traffic_of, ConnCounts};
use crate::process::process_cpu;
use crate::scenario;

/// What the advertisement phase published and measured.
pub(super) struct Adverts {
    /// One per advertisement published.
    pub(super) spreads: Vec<Spread>,
    /// The DID and bytes of each advertisement published...
    pub(super) published: Vec<(String, Vec<u8>)>,
    /// ... and its tags (the fourth its own, `advert-<k>`).
    pub(super) published_tags: Vec<Vec<String>>,
    /// The size of the last advertisement.
    pub(super) advert_bytes: usize,
    pub(super) publish_errors: usize,
    /// Gossip and byte counters over every advertisement's window, summed.
    pub(super) total: net::Traffic,
    pub(super) churn: Churn,
    /// Dials across the cut made again when the partition healed that failed.
    pub(super) redial_failures: usize,
    /// The process's CPU and the honest nodes' connection counters when the phase began.
    pub(super) cpu_start: Option<Duration>,
    pub(super) conns_start: ConnCounts,
    /// How long the phase took.
    pub(super) phase: Duration,
}

/// Churn's count, and what is due of it.
pub(super) struct Churn {
    pub(super) left: usize,
    pub(super) joined: usize,
    /// Dials of the joiners that failed.
    pub(super) join_failures: usize,
    leave_due: f64,
    join_due: f64,
    last: Instant,
}

impl Sim<'_> {
    /// Publishes `--adverts` advertisements one after another, with partition and churn.
    pub(super) async fn publish_all(
        &mut self,
        honest_dids: &Mutex<Vec<String>>,
    ) -> Result<Adverts, String> {
        let args = self.args;
        eprintln!("simulate: publishing {} advertisements", args.adverts);
        let vocab = Vocabulary::new(200);
        let cpu_start = process_cpu();
        let conns_start = ConnCounts::of(&self.net.honest_nodes());
        let phase_start = Instant::now();
        let mut out = Adverts {
            spreads: Vec::with_capacity(args.adverts),
            published: Vec::new(),
            published_tags: Vec::new(),
            advert_bytes: 0,
            publish_errors: 0,
            total: net::Traffic::default(),
            churn: Churn {
                left: 0,
                joined: 0,
                join_failures: 0,
                leave_due: 0.0,
                join_due: 0.0,
                last: Instant::now(),
            },
            redial_failures: 0,
            cpu_start,
            conns_start,
            phase: Duration::ZERO,
        };
        for a in 0..args.adverts {
            if let Some(p) = &args.partition {
                out.redial_failures += self.partition_step(p, a).await;
            }
            let Some(spread) = self.publish_one(a, &vocab, honest_dids, &mut out).await? else {
                continue;
            };
            out.spreads.push(spread);
            // Churn, at the rates asked, over the time since the last step.
            if let Some(c) = &args.churn {
                self.churn_step(c, &mut out.churn).await?;
            }
        }
        out.phase = phase_start.elapsed();
        Ok(out)
    }

    /// Cuts the network before advertisement `a` or heals it, as the partition says; returns
    /// the redials across the cut that failed.
    async fn partition_step(&self, p: &scenario::Partition, a: usize) -> usize {
        let mut redial_failures = 0;
        if a == p.from_advert {
            self.cut.active.store(true, Ordering::Relaxed);
            eprintln!(
                "simulate: partition from advert {a}: {:.0} % of the nodes cut off",
                p.fraction * 100.0
            );
            // Connections across the cut close on the next bytes they carry.
            tokio::time::sleep(self.args.heartbeat() * 3).await;
        }
        if p.heal_advert == Some(a) {
            self.cut.active.store(false, Ordering::Relaxed);
            let (net, cut) = (&self.net, &self.cut);
            let across: Vec<(usize, usize)> = self
                .plan
                .iter()
                .copied()
                .filter(|&(i, j)| net.alive[i] && net.alive[j] && cut.cut_off(i) != cut.cut_off(j))
                .collect();
            redial_failures += dial_plan(&net.nodes, &across, self.started).await;
            eprintln!(
                "simulate: partition healed at advert {a}: {} dials made again",
                across.len()
            );
            tokio::time::sleep(self.args.gap).await;
        }
        redial_failures
    }

    /// Publishes advertisement `a` from a random running node and measures its spread; `None`
    /// if the publish failed.
    async fn publish_one(
        &mut self,
        a: usize,
        vocab: &Vocabulary,
        honest_dids: &Mutex<Vec<String>>,
        out: &mut Adverts,
    ) -> Result<Option<Spread>, String> {
        let live = self.net.live_honest();
        let publisher = self.net.nodes[live[self.rng.gen_range(0..live.len())]].clone();
        let agent = Agent::new(&mut self.rng);
        let mut tags = vocab.draw(&mut self.rng, 3);
        // A tag of its own, for the discover queries: found means this advertisement, not
        // another with a common tag from the local index.
        tags.push(format!("advert-{a}"));
        let bytes = agent.advert(&publisher, 1, &format!("advert {a}"), &tags, 1024)?;
        out.advert_bytes = bytes.len();
        let did = agent.did.to_string();
        let before = traffic_of(&self.net.nodes, &live);
        let t0 = Instant::now();
        if let Err(e) = publisher.client.publish(bytes.clone()).await {
            eprintln!("publishing advert {a}: {e}");
            out.publish_errors += 1;
            return Ok(None);
        }
        let publish = t0.elapsed();
        honest_dids
            .lock()
            .expect("dids lock poisoned")
            .push(did.clone());
        out.published.push((did.clone(), bytes));
        out.published_tags.push(tags.clone());
        let spread = self
            .measure_spread(&did, &live, t0, publish, before, &mut out.total)
            .await;
        eprintln!(
            "simulate: advert {}/{}: {} of {} nodes ({:.1} %), all by {}",
            a + 1,
            self.args.adverts,
            spread.reached,
            spread.expected,
            100.0 * spread.reached as f64 / spread.expected.max(1) as f64,
            spread.t[2].map_or("-".into(), |d| format!("{:.0} ms", ms(d)))
        );
        Ok(Some(spread))
    }

    /// Waits until `did` reached every node of `live` or its deadline, then the gap before the
    /// next; its figures, its window's counters added to `total`.
    async fn measure_spread(
        &self,
        did: &str,
        live: &[usize],
        t0: Instant,
        publish: Duration,
        before: net::Traffic,
        total: &mut net::Traffic,
    ) -> Spread {
        let (args, arrivals, expected) = (self.args, &self.arrivals, live.len());
        let deadline = tokio::time::Instant::from_std(t0 + args.deadline);
        loop {
            let notified = arrivals.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if arrivals.count(did) >= expected || tokio::time::Instant::now() >= deadline {
                break;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
        let mut times: Vec<Duration> = arrivals
            .times(did)
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
        let after = traffic_of(&self.net.nodes, live);
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
        Spread {
            reached: times.len(),
            expected,
            publish,
            t: [at(thresholds[0]), at(thresholds[1]), at(thresholds[2])],
            delays_ms: times.iter().map(|d| ms(*d)).collect(),
            duplicates: (unique > 0).then(|| copies as f64 / unique as f64 - 1.0),
            bytes_per_node: bytes_in as f64 / expected.max(1) as f64,
            partitioned: self.cut.active.load(Ordering::Relaxed),
            t0,
        }
    }

    /// Nodes leave and join at the rates asked, over the time since the last step: a leaver is
    /// a random running honest node, a joiner a new honest node dialing running ones.
    async fn churn_step(&mut self, c: &scenario::Churn, churn: &mut Churn) -> Result<(), String> {
        let minutes = churn.last.elapsed().as_secs_f64() / 60.0;
        churn.last = Instant::now();
        churn.leave_due += c.leave_per_min * minutes;
        churn.join_due += c.join_per_min * minutes;
        while churn.leave_due >= 1.0 {
            churn.leave_due -= 1.0;
            let live = self.net.live_honest();
            if live.len() <= 2 {
                break;
            }
            let i = live[self.scenario_rng.gen_range(0..live.len())];
            self.net.nodes[i].stop.cancel();
            self.net.alive[i] = false;
            churn.left += 1;
        }
        while churn.join_due >= 1.0 {
            churn.join_due -= 1.0;
            let i = self.net.nodes.len();
            let key = SecretKey::from_seed(&seed32(&mut self.scenario_rng));
            let (args, links) = (self.args, self.links_of(i));
            let node = Arc::new(
                start_node(
                    &key,
                    self.dir,
                    i as u64 + 1,
                    true,
                    args,
                    links,
                    &self.shutdown,
                )
                .await?,
            );
            spawn_recorder(&node, i, self.arrivals.clone(), self.stop_recorders.clone());
            let live = self.net.live_honest();
            self.net.push(node, true);
            let mut dials: Vec<(usize, usize)> = Vec::new();
            while dials.len() < args.dials.min(live.len()) {
                let j = live[self.scenario_rng.gen_range(0..live.len())];
                if !dials.iter().any(|d| d.1 == j) {
                    dials.push((i, j));
                }
            }
            churn.join_failures += dial_plan(&self.net.nodes, &dials, self.started).await;
            self.plan.extend(dials);
            churn.joined += 1;
        }
        Ok(())
    }
}
