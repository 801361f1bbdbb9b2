//! The measurements of the soak: latencies and outcomes per interval and their summary, what
//! the node's process and data directory hold, and the node's own account of itself.

use std::collections::BTreeMap;
use std::path::Path;

use agentnet_node::data_dir::NodeFile;
use serde_json::{json, Value};

use crate::load::Kind;

/// Latencies and outcomes of one interval.
#[derive(Default)]
pub(crate) struct Window {
    pub(crate) lat_us: BTreeMap<Kind, Vec<u64>>,
    errors: BTreeMap<Kind, u64>,
    error_sample: BTreeMap<Kind, String>,
}

impl Window {
    /// A request of `kind` that took `us` µs, and its outcome.
    pub(crate) fn record(&mut self, kind: Kind, us: u64, result: Result<(), String>) {
        self.lat_us.entry(kind).or_default().push(us);
        if let Err(e) = result {
            *self.errors.entry(kind).or_default() += 1;
            self.error_sample.entry(kind).or_insert(e);
        }
    }
}

/// The `p` quantile of `sorted` µs, in ms (0 when empty).
fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// `x` to two decimals.
pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A window as JSON: counts, errors and latency percentiles, overall and by kind.
pub(crate) fn summary(w: &Window, secs: f64) -> Value {
    let mut all: Vec<u64> = w.lat_us.values().flatten().copied().collect();
    all.sort_unstable();
    let mut kinds = serde_json::Map::new();
    for (k, v) in &w.lat_us {
        let mut v = v.clone();
        v.sort_unstable();
        kinds.insert(
            k.name().into(),
            json!({
                "n": v.len(),
                "errors": w.errors.get(k).copied().unwrap_or(0),
                "p50_ms": round2(pct(&v, 0.50)),
                "p99_ms": round2(pct(&v, 0.99)),
            }),
        );
    }
    let samples: serde_json::Map<String, Value> = w
        .error_sample
        .iter()
        .map(|(k, e)| {
            (
                k.name().to_string(),
                Value::String(e.chars().take(300).collect()),
            )
        })
        .collect();
    json!({
        "requests": all.len(),
        "req_per_s": round2(all.len() as f64 / secs),
        "errors": w.errors.values().sum::<u64>(),
        "p50_ms": round2(pct(&all, 0.50)),
        "p99_ms": round2(pct(&all, 0.99)),
        "p999_ms": round2(pct(&all, 0.999)),
        "max_ms": round2(all.last().copied().unwrap_or(0) as f64 / 1000.0),
        "kinds": kinds,
        "error_samples": samples,
    })
}

/// What the node's process and data directory hold now.
pub(crate) fn node_sample(pid: u32, data: &Path) -> Value {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .ok();
    // utime and stime, fields 14 and 15 of /proc/PID/stat (after the command's parentheses).
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some(t as f64 / 100.0)
        });
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| {
            s.split_whitespace()
                .take(3)
                .filter_map(|x| x.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let free = rustix::fs::statvfs(data)
        .ok()
        .map(|s| s.f_bavail * s.f_frsize);
    json!({
        "rss_kib": field("VmRSS:"),
        "rss_peak_kib": field("VmHWM:"),
        "threads": field("Threads:"),
        "fds": fds,
        "node_cpu_s": cpu,
        "data_dir_bytes": dir_bytes(data),
        "disk_free_bytes": free,
        "loadavg": load,
    })
}

/// The bytes of the files under `dir`, recursively.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// The node's own account (`GET /admin/v1/status`): tasks, the advert store, gossip counters.
pub(crate) async fn status(http: &reqwest::Client, admin: &str, token: &str) -> Value {
    let r = http
        .get(format!("{admin}/admin/v1/status"))
        .header("Authorization", format!("Bearer {token}"))
        .send()
        .await;
    let v: Value = match r {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(e) => return json!({"error": e.to_string()}),
    };
    json!({
        "tasks": v.pointer("/tasks/total"),
        "task_bytes": v.pointer("/tasks/bytes"),
        "adverts": v.pointer("/store/adverts"),
        "store_bytes": v.pointer("/store/bytes"),
        "store_refused": v.pointer("/store/refused"),
        "peers": v.get("connected"),
        "stats": v.get("stats"),
    })
}

/// A node's `node.json` and admin token, from its data directory.
pub(crate) fn read_node(dir: &Path) -> Result<(NodeFile, String), String> {
    let nf = NodeFile::read(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let token = std::fs::read_to_string(dir.join("admin.token"))
        .map_err(|e| format!("{}/admin.token: {e}", dir.display()))?;
    Ok((nf, token.trim().to_string()))
}
