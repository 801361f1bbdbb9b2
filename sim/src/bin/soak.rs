//! The soak load: a running node under mixed traffic for a long time, its resources sampled
//! every interval (issue 43, item 10; `scripts/soak.sh` starts the nodes and this).
//!
//! ```text
//! soak --data NODE_DIR --peer-data PEER_DIR --out DIR [--minutes 60] [--interval-secs 60]
//!      [--rate 0] [--measure-secs 25] [--measure-concurrency 96]
//! soak --plot DIR/results.jsonl --svg DIR/soak.svg
//! ```
//!
//! The soaked node (`--data`) hosts an `open` echo agent `echo` (with its MCP face) and a `did`
//! echo agent `echo-did`; the peer (`--peer-data`) is connected to it over libp2p. The load is a
//! fixed mix ([`MIX`]), one request kind after another in a fixed order:
//! - `a2a_open`: anonymous JSON-RPC `SendMessage` to `echo`;
//! - `a2a_signed`: `SendMessage` to `echo-did`, every request RFC 9421-signed by one of 64
//!   did:key identities (a fresh nonce each; no access token);
//! - `a2a_token`: the same as `agentnet call` sends it (`DidSigner`, which keeps the ANP access
//!   token the node answers with), 16 identities;
//! - `a2a_stream`: anonymous `SendStreamingMessage` to `echo`, the SSE stream read to its end;
//! - `mcp_agent`: `tools/call echo` on `echo`'s MCP face (`/a2a/echo/mcp`);
//! - `mcp_discover`, `mcp_send`: `tools/call discover_agents` and `send_message` (to `echo`, by
//!   DID) on the node's admin `/mcp`;
//! - `ard_search`: `POST /search` (ARD);
//! - `discover`: `GET /admin/v1/discover?skill=...`.
//!
//! Public-listener requests go out from 24 loopback sources, `127.0.k.1`, each in its own /24
//! (the listener's per-source and per-block shares: `server::Limits::PUBLIC`), each source at
//! most 12 requests in flight; admin requests at most 48 in flight (`Limits::ADMIN` holds 64
//! connections). Gossip: every second the generator has the peer publish advertisements
//! (signed here, imported through the peer's `POST /admin/v1/adverts`, announced by the peer):
//! a pool of 300 agents each re-published once a minute with a higher `seq`, and 2 new agents a
//! second that live 5 minutes.
//!
//! First the capacity: `--measure-concurrency` workers send the mix back to back for
//! `--measure-secs`; the achieved rate is the capacity, and the soak runs open-loop at half of
//! it (or at `--rate`). A request's latency is counted from the moment it was due, so time spent
//! waiting for a free slot counts. Each interval writes one JSON line to `results.jsonl`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_a2a::client::{self, Client, Endpoint, SignError, SignRequest, Signer};
use agentnet_did::{card, SecretKey};
use agentnet_discovery::advert::{self, Draft};
use agentnet_discovery::net::unix_now;
use agentnet_node::call;
use agentnet_node::data_dir::NodeFile;
use agentnet_node::identity::Identity;
use agentnet_node::DidSigner;
use clap::Parser;
use plotters::prelude::{
    ChartBuilder, Color, IntoDrawingArea, LineSeries, PathElement, RGBColor, SVGBackend,
    SeriesLabelPosition, BLACK, WHITE,
};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

#[derive(Debug, Parser)]
#[command(
    name = "soak",
    about = "Mixed load on a running node for a long time, its resources sampled every interval"
)]
struct Args {
    /// The soaked node's data directory (its node.json and admin.token).
    #[arg(long, required_unless_present_any = ["plot", "summary"])]
    data: Option<PathBuf>,
    /// The peer's data directory: the node that gossips advertisements to the soaked one.
    #[arg(long, required_unless_present_any = ["plot", "summary"])]
    peer_data: Option<PathBuf>,
    /// Where results.jsonl and soak.svg go.
    #[arg(long, required_unless_present_any = ["plot", "summary"])]
    out: Option<PathBuf>,
    /// How many intervals the soak runs.
    #[arg(long, default_value_t = 60)]
    minutes: u64,
    /// The length of an interval, seconds (a developer's short run: 10).
    #[arg(long, default_value_t = 60)]
    interval_secs: u64,
    /// Intervals sampled after the load stops (the node idle: what it gives back).
    #[arg(long, default_value_t = 0)]
    after: u64,
    /// Requests per second of the soak; 0: half the capacity measured first.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Seconds of the capacity measurement.
    #[arg(long, default_value_t = 25)]
    measure_secs: u64,
    /// Requests in flight during the capacity measurement.
    #[arg(long, default_value_t = 96)]
    measure_concurrency: usize,
    /// Only draw the figure of an earlier run's results.jsonl.
    #[arg(long, conflicts_with = "summary")]
    plot: Option<PathBuf>,
    /// Only summarize an earlier run's results.jsonl: a table of some minutes, and each
    /// resource's slope over the first and the second half of the run.
    #[arg(long)]
    summary: Option<PathBuf>,
    /// The figure (with --plot).
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// The request kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    A2aOpen,
    A2aSigned,
    A2aToken,
    A2aStream,
    McpAgent,
    McpDiscover,
    McpSend,
    ArdSearch,
    Discover,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::A2aOpen,
        Kind::A2aSigned,
        Kind::A2aToken,
        Kind::A2aStream,
        Kind::McpAgent,
        Kind::McpDiscover,
        Kind::McpSend,
        Kind::ArdSearch,
        Kind::Discover,
    ];
    fn name(self) -> &'static str {
        match self {
            Kind::A2aOpen => "a2a_open",
            Kind::A2aSigned => "a2a_signed",
            Kind::A2aToken => "a2a_token",
            Kind::A2aStream => "a2a_stream",
            Kind::McpAgent => "mcp_agent",
            Kind::McpDiscover => "mcp_discover",
            Kind::McpSend => "mcp_send",
            Kind::ArdSearch => "ard_search",
            Kind::Discover => "discover",
        }
    }
    fn admin(self) -> bool {
        matches!(self, Kind::McpDiscover | Kind::McpSend | Kind::Discover)
    }
}

/// One round of the mix, 20 requests: the order the kinds are sent in, over and over.
const MIX: [Kind; 20] = [
    Kind::A2aOpen,
    Kind::A2aSigned,
    Kind::ArdSearch,
    Kind::A2aOpen,
    Kind::A2aToken,
    Kind::A2aStream,
    Kind::McpDiscover,
    Kind::A2aOpen,
    Kind::A2aSigned,
    Kind::Discover,
    Kind::McpAgent,
    Kind::A2aOpen,
    Kind::A2aSigned,
    Kind::ArdSearch,
    Kind::A2aToken,
    Kind::A2aStream,
    Kind::McpSend,
    Kind::A2aOpen,
    Kind::Discover,
    Kind::McpDiscover,
];

/// Public-listener sources (`127.0.k.1`, k = 1..=SOURCES).
const SOURCES: usize = 24;
/// In flight per public source. The listener holds 32 connections per source, and 384 of its
/// 512 for sources holding 4 or more (`server::Limits::PUBLIC`): 24 x 12 = 288 stays under,
/// idle pooled connections included.
const PER_SOURCE: usize = 12;
/// In flight on the admin listener (64 connections).
const ADMIN_INFLIGHT: usize = 48;
/// Requests due but not yet sent at most (beyond: shed and counted).
const MAX_PENDING: usize = 20_000;
/// did:key identities of `a2a_signed` and of `a2a_token`.
const SIGNED_DIDS: usize = 64;
const TOKEN_DIDS: usize = 16;
/// The gossip: agents re-published once a minute, new agents per second and their lifetime.
/// 300 / 60 + 2 = 7 advertisements a second: under the 100 per 10 s a node takes from one
/// peer (`agentnet_discovery::net::Config::per_peer_messages`), past which it mutes the peer.
const POOL: u64 = 300;
const NEW_PER_SEC: u64 = 2;
const NEW_TTL: u64 = 300;
/// Tags of the pool (each agent carries 2: every tag on 24 agents).
const TAGS: u64 = 25;

/// Signs every request, never an access token (the default [`Signer::token`]).
struct AlwaysSign(DidSigner);

impl Signer for AlwaysSign {
    fn sign<'a>(
        &'a self,
        request: SignRequest<'a>,
    ) -> agentnet_a2a::auth::BoxFuture<'a, Result<HeaderMap, SignError>> {
        self.0.sign(request)
    }
}

/// One public source.
struct Lane {
    http: reqwest::Client,
    slots: Semaphore,
}

/// Everything a request needs.
struct Target {
    lanes: Vec<Lane>,
    next_lane: AtomicUsize,
    admin_http: reqwest::Client,
    admin_slots: Semaphore,
    admin: String,
    token: String,
    public: String,
    open: Endpoint,
    did_ep: Endpoint,
    signed: Vec<Arc<AlwaysSign>>,
    tokens: Vec<Arc<DidSigner>>,
    echo_did: String,
    n: AtomicU64,
}

/// Latencies and outcomes of one interval.
#[derive(Default)]
struct Window {
    lat_us: BTreeMap<Kind, Vec<u64>>,
    errors: BTreeMap<Kind, u64>,
    error_sample: BTreeMap<Kind, String>,
}

impl Window {
    fn record(&mut self, kind: Kind, us: u64, result: Result<(), String>) {
        self.lat_us.entry(kind).or_default().push(us);
        if let Err(e) = result {
            *self.errors.entry(kind).or_default() += 1;
            self.error_sample.entry(kind).or_insert(e);
        }
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A window as JSON: counts, errors and latency percentiles, overall and by kind.
fn summary(w: &Window, secs: f64) -> Value {
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

const MCP_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"soak","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

/// A stateless 2026-07-28 `tools/call`, as `scripts/bench_mcp.sh` sends it; the result must be
/// a tool result without `isError: true`.
async fn mcp_call(
    http: &reqwest::Client,
    url: &str,
    auth: Option<&str>,
    tool: &str,
    args: Value,
) -> Result<(), String> {
    let meta: Value = serde_json::from_str(MCP_META).map_err(|e| e.to_string())?;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta}});
    let mut req = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .body(body.to_string());
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {}", &text[..text.len().min(200)]));
    }
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| format!("not JSON ({e}): {}", &text[..text.len().min(200)]))?;
    match v.get("result") {
        Some(r) if r.get("isError") != Some(&Value::Bool(true)) => Ok(()),
        _ => Err(text.chars().take(300).collect()),
    }
}

/// A plain HTTP exchange that must answer 2xx, its body read whole.
async fn expect_ok(req: reqwest::RequestBuilder) -> Result<(), String> {
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    }
}

impl Target {
    async fn run(&self, kind: Kind) -> Result<(), String> {
        let n = self.next_lane.fetch_add(1, Ordering::Relaxed);
        if kind.admin() {
            let _slot = self
                .admin_slots
                .acquire()
                .await
                .map_err(|e| e.to_string())?;
            return self.run_admin(kind, n).await;
        }
        let lane = &self.lanes[n % self.lanes.len()];
        let _slot = lane.slots.acquire().await.map_err(|e| e.to_string())?;
        let http = &lane.http;
        let msg = || call::message("hello from the soak", None).map_err(|e| e.to_string());
        let i = self.n.fetch_add(1, Ordering::Relaxed) as usize;
        match kind {
            Kind::A2aOpen | Kind::A2aSigned | Kind::A2aToken => {
                let (endpoint, signer): (_, Option<Arc<dyn agentnet_a2a::client::Signer>>) =
                    match kind {
                        Kind::A2aOpen => (self.open.clone(), None),
                        Kind::A2aSigned => (
                            self.did_ep.clone(),
                            Some(self.signed[i % self.signed.len()].clone()),
                        ),
                        _ => (
                            self.did_ep.clone(),
                            Some(self.tokens[i % self.tokens.len()].clone()),
                        ),
                    };
                Client::new(http.clone(), endpoint, signer)
                    .send_message(&call::send_request(msg()?))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Kind::A2aStream => {
                let c = Client::new(http.clone(), self.open.clone(), None);
                let mut s = c
                    .send_streaming(&call::send_request(msg()?))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut events = 0;
                while let Some(ev) = s.next().await {
                    ev.map_err(|e| e.to_string())?;
                    events += 1;
                }
                if events == 0 {
                    return Err("a stream without events".into());
                }
                Ok(())
            }
            Kind::McpAgent => {
                let url = format!("{}/a2a/echo/mcp", self.public);
                mcp_call(http, &url, None, "echo", json!({"text": "hello"})).await
            }
            Kind::ArdSearch => {
                let words = ["translates", "summarizes", "classifies", "soak agent"];
                let body = json!({"query": {"text": words[i % words.len()]}, "pageSize": 10});
                expect_ok(
                    http.post(format!("{}/search", self.public))
                        .header("Content-Type", "application/json")
                        .body(body.to_string()),
                )
                .await
            }
            _ => Err("not a public kind".into()),
        }
    }

    async fn run_admin(&self, kind: Kind, n: usize) -> Result<(), String> {
        let tag = format!("soak-{}", n as u64 % TAGS);
        let auth = format!("Bearer {}", self.token);
        let url = format!("{}/mcp", self.admin);
        match kind {
            Kind::McpDiscover => {
                mcp_call(
                    &self.admin_http,
                    &url,
                    Some(&auth),
                    "discover_agents",
                    json!({"tags": [tag]}),
                )
                .await
            }
            Kind::McpSend => {
                mcp_call(
                    &self.admin_http,
                    &url,
                    Some(&auth),
                    "send_message",
                    json!({"did": self.echo_did, "text": "hello", "wait_secs": 10}),
                )
                .await
            }
            Kind::Discover => {
                expect_ok(
                    self.admin_http
                        .get(format!(
                            "{}/admin/v1/discover?skill={tag}&limit=10",
                            self.admin
                        ))
                        .header("Authorization", auth),
                )
                .await
            }
            _ => Err("not an admin kind".into()),
        }
    }
}

/// The gossip source: advertisements signed here, published by the peer.
struct Gossip {
    http: reqwest::Client,
    url: String,
    auth: String,
    peer_id: String,
    addr: String,
    seed: u64,
    next_new: u64,
    posted: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl Gossip {
    fn advert(&self, i: u64, seq: u64, ttl: u64) -> Result<Value, String> {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&i.to_le_bytes());
        seed[16] = 0x50;
        let key = SecretKey::from_seed(&seed);
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let tags: Vec<String> = (0..2u64)
            .map(|k| format!("soak-{}", (i + k * 7) % TAGS))
            .collect();
        let c = json!({
            "name": format!("Soak agent {i}"),
            "description": "A soak agent: translates, summarizes and classifies short texts.",
            "version": format!("1.0.{seq}"),
            "supportedInterfaces": [{"url": format!("https://agent-{i}.soak.example/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "provider": {"organization": "Soak Org", "url": "https://soak.example"},
            "capabilities": {"streaming": true, "pushNotifications": false},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "main", "name": "Main skill", "description": "Does the thing.", "tags": tags,
                "examples": ["translate this text", "summarize this page"]}]
        });
        let signed = card::sign(&c, &key, &kid).map_err(|e| e.to_string())?;
        let now = unix_now();
        let ad = advert::sign(
            Draft {
                did,
                kid,
                card: signed,
                peer_id: self.peer_id.clone(),
                addrs: vec![self.addr.clone()],
                seq,
                issued_at: now,
                expires_at: now + ttl,
            },
            &key,
        );
        serde_json::to_value(&ad).map_err(|e| e.to_string())
    }

    async fn post(&self, ad: Value) {
        let r = expect_ok(
            self.http
                .post(&self.url)
                .header("Authorization", &self.auth)
                .header("Content-Type", "application/json")
                .body(ad.to_string()),
        )
        .await;
        match r {
            Ok(()) => self.posted.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                self.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }

    /// Publish pool agent `i` with `seq`.
    async fn pool(&self, i: u64, seq: u64) {
        match self.advert(i, seq, 3600) {
            Ok(ad) => self.post(ad).await,
            Err(e) => {
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Forever: each second, 1/60 of the pool again (higher seq) and NEW_PER_SEC new agents.
    async fn run(mut self) {
        let start = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let per_sec = POOL.div_ceil(60);
        let mut k = 0u64;
        loop {
            tick.tick().await;
            let seq = 2 + start.elapsed().as_secs();
            for _ in 0..per_sec {
                self.pool(k % POOL, seq).await;
                k += 1;
            }
            for _ in 0..NEW_PER_SEC {
                let i = self.next_new;
                self.next_new += 1;
                match self.advert(i, 1, NEW_TTL) {
                    Ok(ad) => self.post(ad).await,
                    Err(_) => {
                        self.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// What the node's process and data directory hold now.
fn node_sample(pid: u32, data: &Path) -> Value {
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
async fn status(http: &reqwest::Client, admin: &str, token: &str) -> Value {
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

fn read_node(dir: &Path) -> Result<(NodeFile, String), String> {
    let nf = NodeFile::read(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let token = std::fs::read_to_string(dir.join("admin.token"))
        .map_err(|e| format!("{}/admin.token: {e}", dir.display()))?;
    Ok((nf, token.trim().to_string()))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = Args::parse();
    let r = match (&args.plot, &args.summary) {
        (Some(p), _) => plot_file(p, args.svg.as_deref().unwrap_or(Path::new("soak.svg"))),
        (None, Some(p)) => summarize(p),
        (None, None) => run(args).await,
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let (data, peer_data, out) = match (&args.data, &args.peer_data, &args.out) {
        (Some(a), Some(b), Some(c)) => (a.clone(), b.clone(), c.clone()),
        _ => return Err("--data, --peer-data and --out are needed".into()),
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let (node, token) = read_node(&data)?;
    let (peer, peer_token) = read_node(&peer_data)?;
    let public = format!("http://{}", node.http);
    let admin = format!("http://{}", node.admin);
    let builder = || {
        agentnet_did::http::client_builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
    };
    let admin_http = builder().build().map_err(|e| e.to_string())?;

    let card_of = |id: &str| {
        let http = admin_http.clone();
        let url = format!("{public}/a2a/{id}");
        async move {
            let u = url::Url::parse(&url).map_err(|e| e.to_string())?;
            client::fetch_card(&http, &u, client::ClientLimits::default())
                .await
                .map_err(|e| format!("the card of {url}: {e}"))
        }
    };
    let open_card = card_of("echo").await?;
    let did_card = card_of("echo-did").await?;
    let open = client::choose_interface(&open_card).map_err(|e| e.to_string())?;
    let did_ep = client::choose_interface(&did_card).map_err(|e| e.to_string())?;
    let st = status(&admin_http, &admin, &token).await;
    let full: Value = admin_http
        .get(format!("{admin}/admin/v1/status"))
        .header("Authorization", format!("Bearer {token}"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let echo_did = full
        .get("hosted")
        .and_then(|h| h.as_array())
        .and_then(|a| a.iter().find(|x| x.get("id") == Some(&json!("echo"))))
        .and_then(|x| x.get("did"))
        .and_then(|d| d.as_str())
        .ok_or("the node hosts no agent `echo`")?
        .to_string();
    eprintln!("soak: node {} (pid {}), {st}", node.http, node.pid);

    let lanes = (1..=SOURCES)
        .map(|k| {
            let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, k as u8, 1));
            Ok(Lane {
                http: builder()
                    .local_address(ip)
                    .build()
                    .map_err(|e| e.to_string())?,
                slots: Semaphore::new(PER_SOURCE),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let target = Arc::new(Target {
        lanes,
        next_lane: AtomicUsize::new(0),
        admin_http: admin_http.clone(),
        admin_slots: Semaphore::new(ADMIN_INFLIGHT),
        admin: admin.clone(),
        token: token.clone(),
        public: public.clone(),
        open,
        did_ep,
        signed: (0..SIGNED_DIDS)
            .map(|_| {
                Arc::new(AlwaysSign(DidSigner::new(Identity::did_key(
                    SecretKey::generate(),
                ))))
            })
            .collect(),
        tokens: (0..TOKEN_DIDS)
            .map(|_| Arc::new(DidSigner::new(Identity::did_key(SecretKey::generate()))))
            .collect(),
        echo_did,
        n: AtomicU64::new(0),
    });

    // One of each kind first: every kind must work before the load.
    for k in Kind::ALL {
        target
            .run(k)
            .await
            .map_err(|e| format!("a first {} failed: {e}", k.name()))?;
    }

    // The gossip: the pool first (seq 1), then the steady trickle.
    let peer_addr = peer
        .listen
        .first()
        .cloned()
        .unwrap_or_else(|| "/ip4/127.0.0.1/tcp/1".into());
    let gossip = Gossip {
        http: builder().build().map_err(|e| e.to_string())?,
        url: format!("http://{}/admin/v1/adverts", peer.admin),
        auth: format!("Bearer {peer_token}"),
        peer_id: peer.peer_id.clone(),
        addr: peer_addr,
        seed: 43,
        next_new: POOL,
        posted: Arc::new(AtomicU64::new(0)),
        failed: Arc::new(AtomicU64::new(0)),
        last_error: Arc::new(Mutex::new(None)),
    };
    // 8 a second, within the per-peer budget.
    let mut fill = tokio::time::interval(Duration::from_millis(125));
    for i in 0..POOL {
        fill.tick().await;
        gossip.pool(i, 1).await;
    }
    let (g_posted, g_failed, g_err) = (
        gossip.posted.clone(),
        gossip.failed.clone(),
        gossip.last_error.clone(),
    );
    for _ in 0..60 {
        let s = status(&admin_http, &admin, &token).await;
        if s.get("adverts").and_then(|a| a.as_u64()).unwrap_or(0) >= POOL {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let s = status(&admin_http, &admin, &token).await;
    eprintln!(
        "soak: the peer published {} adverts ({} failed: {:?}); the node holds {}",
        g_posted.load(Ordering::Relaxed),
        g_failed.load(Ordering::Relaxed),
        g_err.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        s.get("adverts").cloned().unwrap_or(Value::Null)
    );
    tokio::spawn(gossip.run());

    let results_path = out.join("results.jsonl");
    let mut results = std::fs::File::create(&results_path)
        .map_err(|e| format!("{}: {e}", results_path.display()))?;
    let write = |f: &mut std::fs::File, v: &Value| {
        use std::io::Write;
        writeln!(f, "{v}").map_err(|e| e.to_string())?;
        f.flush().map_err(|e| e.to_string())
    };

    // The capacity: closed loop, back to back.
    let rate = if args.rate > 0.0 {
        args.rate
    } else {
        let w = Arc::new(Mutex::new(Window::default()));
        let stop = Instant::now() + Duration::from_secs(args.measure_secs);
        let seq = Arc::new(AtomicU64::new(0));
        let cpu0 = node_sample(node.pid, &data)["node_cpu_s"].as_f64();
        let t0 = Instant::now();
        let workers: Vec<_> = (0..args.measure_concurrency)
            .map(|_| {
                let (t, w, seq) = (target.clone(), w.clone(), seq.clone());
                tokio::spawn(async move {
                    while Instant::now() < stop {
                        let k = MIX[seq.fetch_add(1, Ordering::Relaxed) as usize % MIX.len()];
                        let s = Instant::now();
                        let r = t.run(k).await;
                        let us = s.elapsed().as_micros() as u64;
                        w.lock().unwrap_or_else(|p| p.into_inner()).record(k, us, r);
                    }
                })
            })
            .collect();
        for h in workers {
            let _ = h.await;
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu1 = node_sample(node.pid, &data)["node_cpu_s"].as_f64();
        let w = w.lock().unwrap_or_else(|p| p.into_inner());
        let mut sum = summary(&w, secs);
        let ok = sum["requests"].as_u64().unwrap_or(0) - sum["errors"].as_u64().unwrap_or(0);
        let capacity = ok as f64 / secs;
        sum["phase"] = json!("capacity");
        sum["concurrency"] = json!(args.measure_concurrency);
        sum["secs"] = json!(round2(secs));
        sum["capacity_req_per_s"] = json!(round2(capacity));
        sum["soak_rate_req_per_s"] = json!(round2(capacity / 2.0));
        if let (Some(a), Some(b)) = (cpu0, cpu1) {
            sum["node_cpu_per_s"] = json!(round2((b - a) / secs));
        }
        sum["node"] = node_sample(node.pid, &data);
        sum["loadavg"] = sum["node"]["loadavg"].clone();
        write(&mut results, &sum)?;
        eprintln!(
            "soak: capacity {capacity:.0} req/s; soaking at {:.0} req/s: {sum}",
            capacity / 2.0
        );
        capacity / 2.0
    };

    // The soak: open loop at `rate`.
    let window = Arc::new(Mutex::new(Window::default()));
    let pending = Arc::new(AtomicUsize::new(0));
    let shed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let dispatcher = {
        let (target, window, pending, shed) = (
            target.clone(),
            window.clone(),
            pending.clone(),
            shed.clone(),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(5));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut issued: u64 = 0;
            loop {
                tick.tick().await;
                let due = (start.elapsed().as_secs_f64() * rate) as u64;
                while issued < due {
                    let at = start + Duration::from_secs_f64(issued as f64 / rate);
                    let k = MIX[issued as usize % MIX.len()];
                    issued += 1;
                    if pending.load(Ordering::Relaxed) >= MAX_PENDING {
                        shed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    pending.fetch_add(1, Ordering::Relaxed);
                    let (t, w, p) = (target.clone(), window.clone(), pending.clone());
                    tokio::spawn(async move {
                        let r = t.run(k).await;
                        let us = at.elapsed().as_micros() as u64;
                        p.fetch_sub(1, Ordering::Relaxed);
                        w.lock().unwrap_or_else(|p| p.into_inner()).record(k, us, r);
                    });
                }
            }
        })
    };

    let interval = Duration::from_secs(args.interval_secs);
    let mut cpu_prev = node_sample(node.pid, &data)["node_cpu_s"].as_f64();
    let mut g_prev = 0;
    for m in 1..=args.minutes {
        let until = start + interval * m as u32;
        tokio::time::sleep_until(until.into()).await;
        let w = std::mem::take(&mut *window.lock().unwrap_or_else(|p| p.into_inner()));
        let mut line = summary(&w, args.interval_secs as f64);
        let node_now = node_sample(node.pid, &data);
        let cpu = node_now["node_cpu_s"].as_f64();
        line["minute"] = json!(m);
        line["t"] = json!(unix_now());
        line["rate"] = json!(round2(rate));
        line["pending"] = json!(pending.load(Ordering::Relaxed));
        line["shed"] = json!(shed.swap(0, Ordering::Relaxed));
        if let (Some(a), Some(b)) = (cpu_prev, cpu) {
            line["node_cpu_per_s"] = json!(round2((b - a) / args.interval_secs as f64));
        }
        cpu_prev = cpu;
        let g = g_posted.load(Ordering::Relaxed);
        line["gossip"] = json!({
            "published": g - g_prev,
            "failed_total": g_failed.load(Ordering::Relaxed),
            "last_error": g_err.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        });
        g_prev = g;
        line["node"] = node_now;
        line["status"] = status(&admin_http, &admin, &token).await;
        write(&mut results, &line)?;
        eprintln!(
            "soak: minute {m}: {} req, {} errors, p50 {} ms, p99 {} ms, rss {} KiB, fds {}, tasks {}, adverts {}, load {}",
            line["requests"],
            line["errors"],
            line["p50_ms"],
            line["p99_ms"],
            line["node"]["rss_kib"],
            line["node"]["fds"],
            line["status"]["tasks"],
            line["status"]["adverts"],
            line["node"]["loadavg"]
        );
        if line["node"]["disk_free_bytes"]
            .as_u64()
            .is_some_and(|f| f < 2 << 30)
        {
            eprintln!("soak: under 2 GiB free on the disk: stopping");
            break;
        }
    }
    dispatcher.abort();
    let stopped = Instant::now();
    for m in 1..=args.after {
        tokio::time::sleep_until((stopped + interval * m as u32).into()).await;
        let w = std::mem::take(&mut *window.lock().unwrap_or_else(|p| p.into_inner()));
        let node_now = node_sample(node.pid, &data);
        let cpu = node_now["node_cpu_s"].as_f64();
        let mut line = json!({
            "after_minute": m,
            "t": unix_now(),
            "late_requests": w.lat_us.values().map(Vec::len).sum::<usize>(),
            "node": node_now,
            "status": status(&admin_http, &admin, &token).await,
        });
        if let (Some(a), Some(b)) = (cpu_prev, cpu) {
            line["node_cpu_per_s"] = json!(round2((b - a) / args.interval_secs as f64));
        }
        cpu_prev = cpu;
        write(&mut results, &line)?;
        eprintln!(
            "soak: idle minute {m}: rss {} KiB, fds {}, tasks {}, adverts {}",
            line["node"]["rss_kib"],
            line["node"]["fds"],
            line["status"]["tasks"],
            line["status"]["adverts"]
        );
    }
    plot_file(&results_path, &out.join("soak.svg"))
}

/// The least-squares slope of `pts` (per unit of x), `None` under two points.
fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return None;
    }
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The median of `v` (sorted here).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Print a Markdown table of minutes 1, 15, 30, 45 and the last, and each resource's slope per
/// minute over the first and the second half of the run (a resource that only grows while the
/// store warms up flattens in the second half; one that grows without bound does not).
fn summarize(results: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(results).map_err(|e| format!("{}: {e}", results.display()))?;
    let all: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let lines: Vec<&Value> = all.iter().filter(|v| v.get("minute").is_some()).collect();
    let last = lines.len();
    if last == 0 {
        return Err("no minute lines".into());
    }
    let mib = |v: &Value| v.as_f64().map(|b| b / 1024.0 / 1024.0);
    println!("| minute | req/s | errors | p50 ms | p99 ms | RSS MiB | open files | tasks | task MiB | data dir MiB | adverts | load (1 min) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut shown: Vec<usize> = [1, 15, 30, 45, last]
        .into_iter()
        .filter(|m| *m <= last)
        .collect();
    shown.dedup();
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    for m in shown {
        let v = lines[m - 1];
        println!(
            "| {m} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f(&v["req_per_s"]),
            v["errors"],
            f(&v["p50_ms"]),
            f(&v["p99_ms"]),
            f(&json!(v["node"]["rss_kib"].as_f64().map(|k| k / 1024.0))),
            v["node"]["fds"],
            v["status"]["tasks"],
            f(&json!(mib(&v["status"]["task_bytes"]))),
            f(&json!(mib(&v["node"]["data_dir_bytes"]))),
            v["status"]["adverts"],
            f(&v["node"]["loadavg"][0]),
        );
    }
    for v in all.iter().filter(|v| v.get("after_minute").is_some()) {
        println!(
            "| idle {} | | | | | {} | {} | {} | {} | {} | {} | {} |",
            v["after_minute"],
            f(&json!(v["node"]["rss_kib"].as_f64().map(|k| k / 1024.0))),
            v["node"]["fds"],
            v["status"]["tasks"],
            f(&json!(mib(&v["status"]["task_bytes"]))),
            f(&json!(mib(&v["node"]["data_dir_bytes"]))),
            v["status"]["adverts"],
            f(&v["node"]["loadavg"][0]),
        );
    }
    let half = last / 2;
    type Get = fn(&Value) -> Option<f64>;
    let measures: [(&str, Get); 7] = [
        ("RSS, MiB", |v| {
            Some(v["node"]["rss_kib"].as_f64()? / 1024.0)
        }),
        ("open files", |v| v["node"]["fds"].as_f64()),
        ("threads", |v| v["node"]["threads"].as_f64()),
        ("tasks", |v| v["status"]["tasks"].as_f64()),
        ("data dir, MiB", |v| {
            Some(v["node"]["data_dir_bytes"].as_f64()? / 1024.0 / 1024.0)
        }),
        ("adverts", |v| v["status"]["adverts"].as_f64()),
        ("p99, ms", |v| v["p99_ms"].as_f64()),
    ];
    println!();
    println!("| measure | slope per minute, minutes 1-{half} | slope per minute, minutes {}-{last} | median, first half | median, second half |", half + 1);
    println!("|---|---|---|---|---|");
    for (name, get) in measures {
        let pts = |r: &[&Value]| -> Vec<(f64, f64)> {
            r.iter()
                .filter_map(|v| Some((v["minute"].as_f64()?, get(v)?)))
                .collect()
        };
        let (a, b) = (pts(&lines[..half]), pts(&lines[half..]));
        let s = |p: &[(f64, f64)]| slope(p).map_or("-".into(), |x| format!("{x:.3}"));
        println!(
            "| {name} | {} | {} | {:.1} | {:.1} |",
            s(&a),
            s(&b),
            median(a.iter().map(|p| p.1).collect()),
            median(b.iter().map(|p| p.1).collect()),
        );
    }
    Ok(())
}

/// The figure of a results.jsonl: four panels by minute (RSS, open files, the task store,
/// latency).
fn plot_file(results: &Path, svg: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(results).map_err(|e| format!("{}: {e}", results.display()))?;
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("minute").is_some())
        .collect();
    let series = |f: &dyn Fn(&Value) -> Option<f64>| -> Vec<(f64, f64)> {
        lines
            .iter()
            .filter_map(|v| Some((v["minute"].as_f64()?, f(v)?)))
            .collect()
    };
    let mib = 1024.0 * 1024.0;
    let panels: Vec<(&str, &str, Vec<(&str, Vec<(f64, f64)>)>)> = vec![
        (
            "node RSS",
            "MiB",
            vec![(
                "RSS",
                series(&|v| Some(v["node"]["rss_kib"].as_f64()? / 1024.0)),
            )],
        ),
        (
            "open files",
            "fds",
            vec![("open files", series(&|v| v["node"]["fds"].as_f64()))],
        ),
        (
            "task store",
            "thousands / MiB",
            vec![
                (
                    "tasks (thousands)",
                    series(&|v| Some(v["status"]["tasks"].as_f64()? / 1000.0)),
                ),
                (
                    "data dir (MiB)",
                    series(&|v| Some(v["node"]["data_dir_bytes"].as_f64()? / mib)),
                ),
                ("adverts", series(&|v| v["status"]["adverts"].as_f64())),
            ],
        ),
        (
            "latency",
            "ms",
            vec![
                ("p99", series(&|v| v["p99_ms"].as_f64())),
                ("p50", series(&|v| v["p50_ms"].as_f64())),
            ],
        ),
    ];
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", svg.display());
    let root = SVGBackend::new(svg, (900, 1100)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
    ];
    for (area, (title, unit, ss)) in root.split_evenly((4, 1)).iter().zip(&panels) {
        let x_max = ss
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.0))
            .fold(1.0f64, f64::max);
        let y_max = ss
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.1))
            .fold(1e-9f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(*title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("minute")
            .y_desc(*unit)
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (label, pts)) in ss.iter().enumerate() {
            let color = colors[i % colors.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(*label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}
