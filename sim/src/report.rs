//! What a run reports: `results.json` and the SVG figures (`--out`), and the text summary
//! printed without `--json`.

use std::path::Path;

use serde_json::{json, Value};

use crate::plot::{self, Series};

/// `results.json` and the figures, into `out` (created if missing).
pub(crate) fn write_out(out: &Path, report: &Value) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let json = serde_json::to_vec_pretty(report).map_err(|e| format!("encoding results: {e}"))?;
    let file = out.join("results.json");
    std::fs::write(&file, json).map_err(|e| format!("writing {}: {e}", file.display()))?;
    let empty = Vec::new();
    let adverts = report["per_advert"].as_array().unwrap_or(&empty);
    reach_figures(out, report, adverts)?;
    per_advert_figures(out, report, adverts)?;
    memory_figure(out, report)
}

/// A figure's title: `what`, the run's nodes and its links' latency.
fn figure_title(report: &Value, what: &str) -> String {
    format!(
        "{what}: {} nodes{}",
        report["nodes"],
        report["links"]["latency_ms"]
            .as_f64()
            .map_or(String::new(), |l| format!(", {l} ms links"))
    )
}

/// The points of the CDF of `delays` (sorted), as a share of `expected` deliveries.
fn cdf(delays: &[f64], expected: f64) -> Vec<(f64, f64)> {
    let mut pts = vec![(0.0, 0.0)];
    pts.extend(
        delays
            .iter()
            .enumerate()
            .map(|(k, d)| (*d, 100.0 * (k + 1) as f64 / expected.max(1.0))),
    );
    pts
}

/// The reach CDF of every delivery, and the reach over time of up to six advertisements.
fn reach_figures(out: &Path, report: &Value, adverts: &[Value]) -> Result<(), String> {
    let empty = Vec::new();
    let title = |what: &str| figure_title(report, what);
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
    Ok(())
}

/// Reach at the deadline, duplicates and bytes, per advertisement.
fn per_advert_figures(out: &Path, report: &Value, adverts: &[Value]) -> Result<(), String> {
    let title = |what: &str| figure_title(report, what);
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
    Ok(())
}

/// The process's resident memory over the run.
fn memory_figure(out: &Path, report: &Value) -> Result<(), String> {
    let empty = Vec::new();
    let title = |what: &str| figure_title(report, what);
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

/// A number of the report, 0 when absent.
fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// The report as text, on standard output.
pub(crate) fn print_text(r: &Value) {
    print_setup(r);
    print_reach(r);
    print_defence(r);
    print_costs(r);
}

/// A number with one decimal, `-` when absent.
fn one_decimal(v: &Value) -> String {
    match v.as_f64() {
        Some(x) => format!("{x:.1}"),
        None => "-".into(),
    }
}

/// The run's shape: its sizes, setup, links, churn and partition.
fn print_setup(r: &Value) {
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
}

/// Delivery and reach, the floor's beside it, the discover queries and the local publish.
fn print_reach(r: &Value) {
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
            one_decimal(&x["median_ms"]),
            one_decimal(&x["p95_ms"]),
            one_decimal(&x["max_ms"]),
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
                one_decimal(&x["median_ms"]),
                one_decimal(&x["p95_ms"]),
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
            q["missed_by_gossip"], q["found"], q["asked"], one_decimal(&q["median_ms"]), one_decimal(&q["p95_ms"])
        );
    }
    println!(
        "local publish (validate + store): median {} ms  p95 {} ms",
        one_decimal(&r["local_publish_ms"]["median"]),
        one_decimal(&r["local_publish_ms"]["p95"])
    );
}

/// What the honest nodes did with what they got, and what the attacks achieved.
fn print_defence(r: &Value) {
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
            one_decimal(&x["victim_median_ms"]), one_decimal(&x["network_median_ms"]),
            x["victim_peers_attackers"], x["victim_peers_at_end"],
            x["attacker_connections"], x["attacker_connections_closed"]
        );
    }
    if let Some(cpu) = r["validation_cpu_s"].as_f64() {
        println!(
            "validation: {cpu:.2} s over the honest nodes, {} µs per message validated",
            one_decimal(&r["validation_us_per_message"])
        );
    }
}

/// What the run cost: gossip copies and bytes, connections, CPU and memory.
fn print_costs(r: &Value) {
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
            one_decimal(&w["opened_per_node_per_min"]),
            w["dials"],
            one_decimal(&w["dials_per_node_per_min"]),
            w["trimmed"]
        );
    }
    println!(
        "CPU {} s over a {:.1} s advert phase (idle network: {} % of a core); peak RSS {} MiB; \
         load {} -> {}; total {:.1} s",
        one_decimal(&r["cpu_s_advert_phase"]),
        r["advert_phase_s"].as_f64().unwrap_or(0.0),
        one_decimal(&r["idle_cpu_pct"]),
        r["peak_rss_mib"],
        r["load_start"].as_str().unwrap_or("n/a"),
        r["load_end"].as_str().unwrap_or("n/a"),
        r["elapsed_s"].as_f64().unwrap_or(0.0)
    );
}
