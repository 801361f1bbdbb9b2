//! The report of a run: its settings, delivery and reach (beside the floor's), what the honest
//! nodes made of the attacks, and what it all cost, as one JSON object.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use agentnet_discovery::net::Config;
use serde_json::{json, Map, Value};

use super::adversaries::Attacks;
use super::checks::{Queries, StoreChecks, Totals};
use super::publish::Adverts;
use super::setup::{Idle, Setup};
use super::Sim;
use crate::measure::{ms, percentile};
use crate::process::{loadavg, proc_mib};

/// What the phases of a run measured.
pub(super) struct Outcome {
    /// `/proc/loadavg` at the start.
    pub(super) load_start: String,
    /// (seconds since the start, resident MiB), every second.
    pub(super) rss_samples: Arc<Mutex<Vec<(f64, u64)>>>,
    pub(super) setup: Setup,
    pub(super) idle: Idle,
    pub(super) adverts: Adverts,
    pub(super) queries: Queries,
    pub(super) totals: Totals,
    pub(super) attacks: Attacks,
    /// The eclipse's figures, with `[eclipse]`.
    pub(super) eclipse: Option<Value>,
    pub(super) stores: StoreChecks,
    /// Node tasks aborted at shutdown.
    pub(super) stuck: usize,
    /// The floor's figures, with `--floor`.
    pub(super) floor: Option<Value>,
}

/// The report: every part's keys in one object.
pub(super) fn report(sim: &Sim<'_>, mut o: Outcome) -> Value {
    o.stores.sybil_stored.sort_unstable();
    let mut report = Map::new();
    for part in [
        settings(sim),
        delivery(sim, &mut o),
        defence(sim, &o),
        costs(sim, &o),
    ] {
        if let Value::Object(m) = part {
            report.extend(m);
        }
    }
    Value::Object(report)
}

/// What the run was asked to do.
fn settings(sim: &Sim<'_>) -> Value {
    let args = sim.args;
    json!({
        "nodes": sim.n,
        "scenario": args.scenario.as_ref().map(|p| p.display().to_string()),
        "links": args.delays.map(|d| json!({
            "latency": format!("{:?}", d.dist).to_lowercase(), "latency_ms": d.mean_ms,
            "spread_ms": d.spread_ms, "bandwidth_bytes_per_s": d.bytes_per_sec,
        })),
        "dials": args.dials,
        "adverts": args.adverts,
        "adversaries": args.adversaries,
        "seed": args.seed,
        "heartbeat_ms": ms(args.heartbeat()),
        "deadline_ms": ms(args.deadline),
        "warmup_ms": ms(args.warmup()),
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
    })
}

/// Setup, churn and partition, delivery and reach (the floor's beside it), the queries.
fn delivery(sim: &Sim<'_>, o: &mut Outcome) -> Value {
    let (args, n, spreads) = (sim.args, sim.n, &o.adverts.spreads);
    let expected: usize = spreads.iter().map(|s| s.expected).sum();
    let delivered: usize = spreads.iter().map(|s| s.reached).sum();
    let mut summary = Map::new();
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
    let floor_report = o.floor.take().map(|mut f| {
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
    let (churn, q) = (&o.adverts.churn, &o.queries);
    json!({
        "churn": args.churn.as_ref().map(|c| json!({
            "leave_per_min": c.leave_per_min, "join_per_min": c.join_per_min,
            "left": churn.left, "joined": churn.joined, "join_dial_failures": churn.join_failures,
        })),
        "partition": args.partition.as_ref().map(|p| json!({
            "fraction": p.fraction, "from_advert": p.from_advert, "heal_advert": p.heal_advert,
            "cut_off": sim.cut.side.iter().filter(|s| **s).count(),
            "redial_failures": o.adverts.redial_failures,
        })),
        "advert_bytes": o.adverts.advert_bytes,
        "setup_s": o.setup.took.as_secs_f64(),
        "dial_failures": o.setup.dial_failures,
        "degree": {"min": o.idle.degrees.first(), "median": o.idle.degrees.get(n / 2), "max": o.idle.degrees.last()},
        "publish_errors": o.adverts.publish_errors,
        "delivery_pct": if expected == 0 { 100.0 } else { 100.0 * delivered as f64 / expected as f64 },
        "not_delivered": expected - delivered,
        "reach": Value::Object(summary),
        "local_publish_ms": {"median": percentile(&publish, 0.5), "p95": percentile(&publish, 0.95)},
        "floor": floor_report,
        "queries": {
            "asked": q.found + q.failed, "found": q.found, "not_found": q.failed,
            "missed_by_gossip": q.missed_pairs,
            "median_ms": percentile(&q.ms, 0.5), "p95_ms": percentile(&q.ms, 0.95),
        },
        "per_advert": per_advert,
    })
}

/// What the honest nodes did with what they got, and what the attacks achieved.
fn defence(sim: &Sim<'_>, o: &Outcome) -> Value {
    let (args, c, a) = (sim.args, &o.stores, &o.attacks);
    let refused_total: u64 = c.refused.values().sum();
    let validated = c.accepted + c.ignored + refused_total;
    let validation_per_message =
        (validated > 0).then(|| a.validation_micros as f64 / validated as f64);
    let sybil_stored = &c.sybil_stored;
    json!({
        "accepted": c.accepted,
        "ignored": c.ignored,
        "throttled": c.throttled,
        "throttled_busy": c.throttled_busy,
        "muted": c.muted,
        "refused": refused_total,
        "refused_by_reason": c.refused,
        "attacks": {
            "replay": args.replay.map(|f| json!({
                "nodes": f.nodes, "rate": f.rate, "sent": a.replay.sent, "send_errors": a.replay.send_errors,
            })),
            "sybil": args.sybil.map(|f| {
                json!({
                    "nodes": f.nodes, "rate": f.rate, "sent": a.sybil.sent, "send_errors": a.sybil.send_errors,
                    "dids_minted": a.sybil.dids.len(),
                    "stored_per_honest_node": {"median": sybil_stored.get(sybil_stored.len() / 2),
                        "max": sybil_stored.last()},
                })
            }),
            "eclipse": o.eclipse,
        },
        "accepted_again": c.accepted.saturating_sub(c.stored_total),
        "recorder_lagged": sim.arrivals.lagged.load(Ordering::Relaxed),
        "validation_cpu_s": a.validation_micros as f64 / 1e6,
        "validation_us_per_message": validation_per_message,
        "junk_sent": a.junk.sent,
        "junk_send_errors": a.junk.send_errors,
        "junk_stored": c.junk_stored,
        "junk_forwarded_by_honest": c.forwarded_by_honest,
    })
}

/// What the run cost: gossip copies and bytes, connections, CPU, memory and time.
fn costs(sim: &Sim<'_>, o: &Outcome) -> Value {
    let (n, total, t, idle) = (sim.n, &o.adverts.total, &o.totals, &o.idle);
    let (copies, unique, bytes_in) = (total.gossip_received, total.gossip_unique, total.bytes_in);
    let expected: usize = o.adverts.spreads.iter().map(|s| s.expected).sum();
    let bytes_per_node_per_advert = if expected == 0 {
        0.0
    } else {
        bytes_in as f64 / expected as f64
    };
    let phase = o.adverts.phase;
    let rss: Vec<Value> = o
        .rss_samples
        .lock()
        .expect("samples lock poisoned")
        .iter()
        .map(|(t, m)| json!([t, m]))
        .collect();
    json!({
        "gossip_copies_received": copies,
        "gossip_unique_received": unique,
        "gossip_idontwant_received": total.idontwant_received,
        "gossip_send_dropped": total.send_dropped,
        "gossip_validated_too_late": total.validated_too_late,
        "duplicate_ratio": (unique > 0).then(|| copies as f64 / unique as f64 - 1.0),
        "bytes_in_per_node_per_advert": bytes_per_node_per_advert,
        "bytes_in_total": bytes_in,
        "bytes_out_total": total.bytes_out,
        "connections": {"opened": t.opened, "dials": t.dials, "trimmed": t.trimmed, "kad_bootstraps": t.bootstraps, "kad_bootstraps_cut": t.bootstraps_cut, "kad_joins": t.joins, "kad_requests": t.kad_requests,
            "idle_window_s": idle.window.as_secs_f64(),
            "setup_and_warmup": idle.start.json(n, o.setup.took + idle.warmup),
            "idle": idle.conns.json(n, idle.window),
            "advert_phase": t.phase_conns.json(n, phase)},
        "cpu_s_advert_phase": t.cpu.map(|c| c.as_secs_f64()),
        "idle_cpu_pct": idle.cpu,
        "advert_phase_s": phase.as_secs_f64(),
        "node_tasks_aborted": o.stuck,
        "peak_rss_mib": proc_mib("/proc/self/status", "VmHWM:"),
        "load_start": o.load_start,
        "load_end": loadavg(),
        "elapsed_s": sim.started.elapsed().as_secs_f64(),
        "rss_mib_samples": rss,
    })
}
