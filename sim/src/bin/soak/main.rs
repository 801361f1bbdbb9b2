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

mod gossip;
mod load;
mod measure;
mod report;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_a2a::client;
use agentnet_did::SecretKey;
use agentnet_discovery::net::unix_now;
use agentnet_node::data_dir::NodeFile;
use agentnet_node::identity::Identity;
use agentnet_node::DidSigner;
use clap::Parser;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use gossip::{Gossip, POOL};
use load::{
    AlwaysSign, Kind, Lane, Target, ADMIN_INFLIGHT, MAX_PENDING, MIX, PER_SOURCE, SIGNED_DIDS,
    SOURCES, TOKEN_DIDS,
};
use measure::{node_sample, read_node, round2, status, summary, Window};
use report::{plot_file, summarize};

/// Command-line arguments.
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

/// Soaks the node: connects to it and checks every request kind, starts the gossip, measures
/// the capacity, runs the load interval by interval, samples the idle node, draws the figure.
async fn run(args: Args) -> Result<(), String> {
    let (data, peer_data, out) = match (&args.data, &args.peer_data, &args.out) {
        (Some(a), Some(b), Some(c)) => (a.clone(), b.clone(), c.clone()),
        _ => return Err("--data, --peer-data and --out are needed".into()),
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let (file, token) = read_node(&data)?;
    let (peer, peer_token) = read_node(&peer_data)?;
    let node = Node::new(data, file, token)?;
    let target = Arc::new(node.target().await?);
    // One of each kind first: every kind must work before the load.
    for k in Kind::ALL {
        target
            .run(k)
            .await
            .map_err(|e| format!("a first {} failed: {e}", k.name()))?;
    }
    let gossip = node.start_gossip(&peer, &peer_token).await?;
    let results_path = out.join("results.jsonl");
    let mut results =
        File::create(&results_path).map_err(|e| format!("{}: {e}", results_path.display()))?;
    let rate = if args.rate > 0.0 {
        args.rate
    } else {
        measure_capacity(&args, &node, &target, &mut results).await?
    };
    let load = Load::start(target, rate);
    let cpu_prev = soak_intervals(&args, &node, &load, &gossip, &mut results).await?;
    load.dispatcher.abort();
    idle_intervals(&args, &node, &load.window, cpu_prev, &mut results).await?;
    plot_file(&results_path, &out.join("soak.svg"))
}

/// The soaked node: its data directory, its `node.json` and admin token, its listeners' URLs
/// and a client for its admin listener.
struct Node {
    data: PathBuf,
    file: NodeFile,
    token: String,
    public: String,
    admin: String,
    admin_http: reqwest::Client,
}

/// An HTTP client builder: no proxy, a minute per request.
fn http_builder() -> reqwest::ClientBuilder {
    agentnet_did::http::client_builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
}

/// One JSON line into results.jsonl, flushed.
fn write_line(f: &mut File, v: &Value) -> Result<(), String> {
    use std::io::Write;
    writeln!(f, "{v}").map_err(|e| e.to_string())?;
    f.flush().map_err(|e| e.to_string())
}

impl Node {
    /// The node of `data`, with its `node.json` and admin token.
    fn new(data: PathBuf, file: NodeFile, token: String) -> Result<Self, String> {
        Ok(Node {
            public: format!("http://{}", file.http),
            admin: format!("http://{}", file.admin),
            admin_http: http_builder().build().map_err(|e| e.to_string())?,
            data,
            file,
            token,
        })
    }

    /// What the node's process and data directory hold now.
    fn sample(&self) -> Value {
        node_sample(self.file.pid, &self.data)
    }

    /// The node's own account (`GET /admin/v1/status`).
    async fn status(&self) -> Value {
        status(&self.admin_http, &self.admin, &self.token).await
    }

    /// Everything a request needs: the echo agents' endpoints (from their cards), the DID of
    /// `echo`, the public sources and the signing identities.
    async fn target(&self) -> Result<Target, String> {
        let card_of = |id: &str| {
            let http = self.admin_http.clone();
            let url = format!("{}/a2a/{id}", self.public);
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
        let echo_did = self.echo_did().await?;
        let lanes = (1..=SOURCES)
            .map(|k| {
                let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, k as u8, 1));
                Ok(Lane {
                    http: http_builder()
                        .local_address(ip)
                        .build()
                        .map_err(|e| e.to_string())?,
                    slots: Semaphore::new(PER_SOURCE),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Target {
            lanes,
            next_lane: AtomicUsize::new(0),
            admin_http: self.admin_http.clone(),
            admin_slots: Semaphore::new(ADMIN_INFLIGHT),
            admin: self.admin.clone(),
            token: self.token.clone(),
            public: self.public.clone(),
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
        })
    }

    /// The DID of the hosted agent `echo`, from the node's status; the status printed.
    async fn echo_did(&self) -> Result<String, String> {
        let (admin, token) = (&self.admin, &self.token);
        let st = self.status().await;
        let full: Value = self
            .admin_http
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
        eprintln!(
            "soak: node {} (pid {}), {st}",
            self.file.http, self.file.pid
        );
        Ok(echo_did)
    }

    /// The gossip: the pool first (seq 1), until the node holds it (a minute at most), then
    /// the steady trickle, in a task of its own.
    async fn start_gossip(
        &self,
        peer: &NodeFile,
        peer_token: &str,
    ) -> Result<GossipCounts, String> {
        let peer_addr = peer
            .listen
            .first()
            .cloned()
            .unwrap_or_else(|| "/ip4/127.0.0.1/tcp/1".into());
        let gossip = Gossip {
            http: http_builder().build().map_err(|e| e.to_string())?,
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
        let counts = GossipCounts {
            posted: gossip.posted.clone(),
            failed: gossip.failed.clone(),
            last_error: gossip.last_error.clone(),
        };
        for _ in 0..60 {
            let s = self.status().await;
            if s.get("adverts").and_then(|a| a.as_u64()).unwrap_or(0) >= POOL {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let s = self.status().await;
        eprintln!(
            "soak: the peer published {} adverts ({} failed: {:?}); the node holds {}",
            counts.posted.load(Ordering::Relaxed),
            counts.failed.load(Ordering::Relaxed),
            counts
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            s.get("adverts").cloned().unwrap_or(Value::Null)
        );
        tokio::spawn(gossip.run());
        Ok(counts)
    }
}

/// The gossip's counters, read while it runs.
struct GossipCounts {
    posted: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
}

/// The capacity: `--measure-concurrency` workers send the mix back to back (closed loop) for
/// `--measure-secs`; its line into results; returns the soak's rate, half of it.
async fn measure_capacity(
    args: &Args,
    node: &Node,
    target: &Arc<Target>,
    results: &mut File,
) -> Result<f64, String> {
    let w = Arc::new(Mutex::new(Window::default()));
    let stop = Instant::now() + Duration::from_secs(args.measure_secs);
    let seq = Arc::new(AtomicU64::new(0));
    let cpu0 = node.sample()["node_cpu_s"].as_f64();
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
    let cpu1 = node.sample()["node_cpu_s"].as_f64();
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
    sum["node"] = node.sample();
    sum["loadavg"] = sum["node"]["loadavg"].clone();
    write_line(results, &sum)?;
    eprintln!(
        "soak: capacity {capacity:.0} req/s; soaking at {:.0} req/s: {sum}",
        capacity / 2.0
    );
    Ok(capacity / 2.0)
}

/// The soak's load, running: open loop at `rate`, each request counted from when it was due.
struct Load {
    /// The current interval's latencies and outcomes.
    window: Arc<Mutex<Window>>,
    /// Requests sent and not yet answered.
    pending: Arc<AtomicUsize>,
    /// Requests shed (MAX_PENDING in flight) since the last interval.
    shed: Arc<AtomicU64>,
    start: Instant,
    rate: f64,
    dispatcher: JoinHandle<()>,
}

impl Load {
    /// Starts the dispatcher: every 5 ms, the requests due by then, each in a task.
    fn start(target: Arc<Target>, rate: f64) -> Load {
        let window = Arc::new(Mutex::new(Window::default()));
        let pending = Arc::new(AtomicUsize::new(0));
        let shed = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let dispatcher = {
            let (window, pending, shed) = (window.clone(), pending.clone(), shed.clone());
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
        Load {
            window,
            pending,
            shed,
            start,
            rate,
            dispatcher,
        }
    }
}

/// `--minutes` intervals under load, one line each (the interval's requests, the node's
/// resources and status, the gossip); stops early under 2 GiB free on the disk. Returns the
/// node's CPU time at the last sample.
async fn soak_intervals(
    args: &Args,
    node: &Node,
    load: &Load,
    gossip: &GossipCounts,
    results: &mut File,
) -> Result<Option<f64>, String> {
    let interval = Duration::from_secs(args.interval_secs);
    let mut cpu_prev = node.sample()["node_cpu_s"].as_f64();
    let mut g_prev = 0;
    for m in 1..=args.minutes {
        let until = load.start + interval * m as u32;
        tokio::time::sleep_until(until.into()).await;
        let w = std::mem::take(&mut *load.window.lock().unwrap_or_else(|p| p.into_inner()));
        let mut line = summary(&w, args.interval_secs as f64);
        let node_now = node.sample();
        let cpu = node_now["node_cpu_s"].as_f64();
        line["minute"] = json!(m);
        line["t"] = json!(unix_now());
        line["rate"] = json!(round2(load.rate));
        line["pending"] = json!(load.pending.load(Ordering::Relaxed));
        line["shed"] = json!(load.shed.swap(0, Ordering::Relaxed));
        if let (Some(a), Some(b)) = (cpu_prev, cpu) {
            line["node_cpu_per_s"] = json!(round2((b - a) / args.interval_secs as f64));
        }
        cpu_prev = cpu;
        let g = gossip.posted.load(Ordering::Relaxed);
        line["gossip"] = json!({
            "published": g - g_prev,
            "failed_total": gossip.failed.load(Ordering::Relaxed),
            "last_error": gossip.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        });
        g_prev = g;
        line["node"] = node_now;
        line["status"] = node.status().await;
        write_line(results, &line)?;
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
    Ok(cpu_prev)
}

/// `--after` intervals with the load stopped: what the idle node gives back, one line each.
async fn idle_intervals(
    args: &Args,
    node: &Node,
    window: &Mutex<Window>,
    mut cpu_prev: Option<f64>,
    results: &mut File,
) -> Result<(), String> {
    let interval = Duration::from_secs(args.interval_secs);
    let stopped = Instant::now();
    for m in 1..=args.after {
        tokio::time::sleep_until((stopped + interval * m as u32).into()).await;
        let w = std::mem::take(&mut *window.lock().unwrap_or_else(|p| p.into_inner()));
        let node_now = node.sample();
        let cpu = node_now["node_cpu_s"].as_f64();
        let mut line = json!({
            "after_minute": m,
            "t": unix_now(),
            "late_requests": w.lat_us.values().map(Vec::len).sum::<usize>(),
            "node": node_now,
            "status": node.status().await,
        });
        if let (Some(a), Some(b)) = (cpu_prev, cpu) {
            line["node_cpu_per_s"] = json!(round2((b - a) / args.interval_secs as f64));
        }
        cpu_prev = cpu;
        write_line(results, &line)?;
        eprintln!(
            "soak: idle minute {m}: rss {} KiB, fds {}, tasks {}, adverts {}",
            line["node"]["rss_kib"],
            line["node"]["fds"],
            line["status"]["tasks"],
            line["status"]["adverts"]
        );
    }
    Ok(())
}
