//! Past one machine (issue 20, part 5): write a Shadow configuration that runs `agentnet
//! sim-node` processes (the node of libp2p's gossipsub-interop contract), and read what they
//! printed.
//!
//! ```text
//! cargo run -p agentnet-sim --bin shadowgen -- --scenario sim/scenarios/shadow-1000.toml --out DIR
//! shadow --progress true -d DIR/shadow.data DIR/shadow.yaml
//! cargo run -p agentnet-sim --bin shadowgen -- --analyze DIR/shadow.data
//! # the floor: the same run by libp2p's own gossipsub-interop node, then both compared
//! cargo run -p agentnet-sim --bin shadowgen -- --scenario S.toml --out DIR --floor BIN
//! shadow -d DIR/floor.data DIR/shadow-floor.yaml
//! cargo run -p agentnet-sim --bin shadowgen -- --analyze DIR/shadow.data --against DIR/floor.data --plots OUT
//! ```
//!
//! The scenario (TOML, every key optional) sets the nodes, the mesh each dials (seeded), the
//! messages (count, size, interval, after a warm-up) and the links (one latency and bandwidth
//! for every pair, Shadow's single-vertex graph with a self-loop). `--out` gets `params.json`
//! (the harness's script, the same for every node), `graph.gml` and `shadow.yaml` (hosts
//! `node0` … `node<N-1>`, each running the binary with `--params` and its own store).
//! `--analyze` reads `hosts/*/*.stdout` (or any directory of `*.stdout` files) and prints, per
//! message, the reach and the delays from its `Published` line to each `Received Message`
//! (docs/SIMULATION.md, "Past one machine").

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use serde::Deserialize;
use serde_json::{json, Value};

use agentnet_node::cli::netns;

// The figures of `simulate --out`, drawn the same way (the library's module).
use agentnet_sim::plot;

#[derive(Debug, Parser)]
#[command(
    name = "shadowgen",
    about = "Write a Shadow configuration of agentnet sim-node processes, or analyze a run"
)]
struct Args {
    /// The scenario file (TOML).
    #[arg(long, required_unless_present = "analyze")]
    scenario: Option<PathBuf>,
    /// Where to write params.json, graph.gml and shadow.yaml.
    #[arg(long, required_unless_present = "analyze")]
    out: Option<PathBuf>,
    /// Analyze a finished run's data directory instead.
    #[arg(long, conflicts_with_all = ["scenario", "out"])]
    analyze: Option<PathBuf>,
    /// With `--analyze`: the floor's run of the same scenario (`shadow-floor.yaml`'s data
    /// directory), analyzed beside it, with the ratios of the two.
    #[arg(long, value_name = "DIR", requires = "analyze")]
    against: Option<PathBuf>,
    /// With `--analyze`: write the figures (reach_cdf.svg, last_delivery.svg) into DIR.
    #[arg(long, value_name = "DIR", requires = "analyze")]
    plots: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Without Shadow: run the scenario's nodes as processes on this machine's loopback
    /// (node M on 127.0.0.1 + M, this TCP port), wait for them, and analyze `<out>/run`. The
    /// links are loopback's, not the scenario's latency.
    #[arg(long, value_name = "PORT", requires = "out")]
    run_local: Option<u16>,
    /// As `--run-local`, but each node in a network namespace of its own, made for the run and
    /// removed after it (root and iproute2's `ip` needed): node M at 10.77.0.1 + M on one
    /// bridge, so that each node dials from an address of its own.
    #[arg(
        long,
        value_name = "PORT",
        requires = "out",
        conflicts_with = "run_local"
    )]
    run_netns: Option<u16>,
    /// Also write `shadow-floor.yaml`: the same hosts, links and script, each host running
    /// BIN with `--params` alone. BIN is libp2p's own gossipsub-interop node (rust-libp2p,
    /// no validation, built from a copy of libp2p/test-plans): the floor of the run.
    #[arg(long, value_name = "BIN", requires = "scenario", conflicts_with_all = ["run_local", "run_netns"])]
    floor: Option<PathBuf>,
}

/// Where a local run's nodes are.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// On this machine's loopback, node M at 127.0.0.1 + M.
    Loopback,
    /// Each in its namespace of `net`.
    Netns(&'a netns::Net),
}

/// A Shadow scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Scenario {
    /// Nodes, `node0` … `node<N-1>`.
    nodes: u32,
    /// Connections each node dials (the first to an earlier node: the mesh is connected).
    dials: u32,
    /// Seed of the mesh and of the publishers.
    seed: u64,
    /// Seconds before the first message.
    warmup_s: u64,
    /// Messages, one every `interval_s`, each from a random node.
    messages: u32,
    /// Each message's size in bytes (a node cuts it to what it accepts, 64 KiB).
    message_bytes: u32,
    /// Seconds between messages.
    interval_s: u64,
    /// Seconds after the last message before the nodes exit.
    tail_s: u64,
    /// One-way latency of every link, milliseconds.
    latency_ms: u32,
    /// Every host's bandwidth, both ways, Mbit/s.
    bandwidth_mbit: u32,
    /// The agentnet binary (made absolute).
    binary: PathBuf,
    /// gossipsub mesh degree `D`; default the node's.
    mesh: Option<u32>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            nodes: 100,
            dials: 8,
            seed: 1,
            warmup_s: 60,
            messages: 20,
            message_bytes: 2048,
            interval_s: 2,
            tail_s: 30,
            latency_ms: 100,
            bandwidth_mbit: 100,
            binary: PathBuf::from("target/release/agentnet"),
            mesh: None,
        }
    }
}

/// Who dials whom: node `i > 0` dials a random earlier node first, then random others, `dials`
/// distinct peers in all (fewer when there are not enough nodes).
fn mesh(s: &Scenario) -> Vec<Vec<u32>> {
    let mut rng = StdRng::seed_from_u64(s.seed);
    let n = s.nodes;
    (0..n)
        .map(|i| {
            let mut to: Vec<u32> = Vec::new();
            let want = s.dials.min(n.saturating_sub(1));
            if i > 0 {
                to.push(rng.gen_range(0..i));
            }
            while (to.len() as u32) < want {
                let j = rng.gen_range(0..n);
                if j != i && !to.contains(&j) {
                    to.push(j);
                }
            }
            to
        })
        .collect()
}

/// The harness's script for every node.
fn script(s: &Scenario) -> Value {
    let mut rng = StdRng::seed_from_u64(s.seed ^ 0x5eed);
    let mut v = Vec::new();
    if let Some(d) = s.mesh {
        v.push(json!({"type": "initGossipSub", "gossipSubParams": {"D": d}}));
    }
    for (i, to) in mesh(s).into_iter().enumerate() {
        if !to.is_empty() {
            v.push(json!({"type": "ifNodeIDEquals", "nodeID": i,
                "instruction": {"type": "connect", "connectTo": to}}));
        }
    }
    v.push(json!({"type": "subscribeToTopic", "topicID": "agentnet", "partial": false}));
    for m in 0..s.messages {
        let at = s.warmup_s + u64::from(m) * s.interval_s;
        v.push(json!({"type": "waitUntil", "elapsedSeconds": at}));
        let from = rng.gen_range(0..s.nodes);
        v.push(json!({"type": "ifNodeIDEquals", "nodeID": from, "instruction": {
            "type": "publish", "messageID": m, "messageSizeBytes": s.message_bytes, "topicID": "agentnet"}}));
    }
    let end = s.warmup_s + u64::from(s.messages) * s.interval_s + s.tail_s;
    v.push(json!({"type": "waitUntil", "elapsedSeconds": end}));
    json!({"script": v})
}

/// The environment of every node process, under Shadow and in local runs alike.
///
/// `MIMALLOC_ARENA_EAGER_COMMIT=0`: mimalloc (the binary's allocator) commits its arenas
/// eagerly by default where the kernel overcommits, and a `sim-node` process then holds about
/// 33 MB resident for 4.5 MB of peak heap; committed on demand, 11 MB (docs/BENCHMARKS.md,
/// "Under Shadow"). Memory is what bounds a Shadow run's nodes on one machine; a node's CPU
/// time is not simulated there, so the commits cost nothing it measures.
const NODE_ENV: [(&str, &str); 2] = [
    ("AGENTNET_LOG", "warn"),
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
];

fn graph(s: &Scenario) -> String {
    format!(
        "graph [\n  directed 0\n  node [\n    id 0\n    host_bandwidth_up \"{b} Mbit\"\n    host_bandwidth_down \"{b} Mbit\"\n  ]\n  edge [\n    source 0\n    target 0\n    latency \"{l} ms\"\n    packet_loss 0.0\n  ]\n]\n",
        b = s.bandwidth_mbit,
        l = s.latency_ms
    )
}

/// What every host runs.
struct Host<'a> {
    binary: &'a Path,
    params: &'a Path,
    /// libp2p's gossipsub-interop node rather than `agentnet sim-node`.
    floor: bool,
}

impl Host<'_> {
    fn args(&self) -> String {
        if self.floor {
            format!("--params {}", self.params.display())
        } else {
            // The store's files in memory: Shadow holds every node's open files in its one
            // process, under one limit, and a store on disk holds 15 (docs/SIMULATION.md).
            format!(
                "sim-node --params {} --store-in-memory",
                self.params.display()
            )
        }
    }
}

/// Every path in it is absolute: Shadow reads a relative graph path from the directory it runs
/// in, not the file's, so a run started from anywhere else would not find it.
fn shadow_yaml(s: &Scenario, host: &Host<'_>, graph: &Path) -> String {
    let end = s.warmup_s + u64::from(s.messages) * s.interval_s + s.tail_s;
    let mut y = format!(
        "# Written by shadowgen (agentnet-sim); docs/SIMULATION.md, \"Past one machine\".\n\
         general:\n  stop_time: {} s\n  model_unblocked_syscall_latency: true\n\
         experimental:\n  socket_recv_buffer: 7500000\n  socket_send_buffer: 7500000\n\
         network:\n  graph:\n    type: gml\n    file:\n      path: {}\nhosts:\n",
        end + 60,
        graph.display()
    );
    let env = NODE_ENV
        .iter()
        .map(|(k, v)| format!("{k}: \"{v}\""))
        .collect::<Vec<_>>()
        .join(", ");
    for i in 0..s.nodes {
        y.push_str(&format!(
            "  node{i}:\n    network_node_id: 0\n    processes:\n    - path: {bin}\n      args: {args}\n      environment: {{ {env} }}\n      expected_final_state: {{ exited: 0 }}\n",
            bin = host.binary.display(),
            args = host.args()
        ));
    }
    y
}

fn absolute(p: &Path) -> std::io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_owned())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

fn read_scenario(scenario: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(scenario)
        .map_err(|e| format!("reading {}: {e}", scenario.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", scenario.display()))
}

/// A local run's node processes: those still running when it is dropped (the run stopped on
/// an error) are killed, so that none outlives the run or its namespaces.
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Run the nodes as local processes (see `--run-local`, `--run-netns`); the run's directory.
fn run_local(s: &Scenario, out: &Path, port: u16, place: Place<'_>) -> Result<PathBuf, String> {
    let run = out.join("run");
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).map_err(|e| e.to_string())?;
    let binary = absolute(&s.binary).map_err(|e| e.to_string())?;
    let params = out.join("params.json");
    let mut children = Children(Vec::new());
    for i in 0..s.nodes {
        let f = |ext: &str| {
            std::fs::File::create(run.join(format!("node{i}.{ext}"))).map_err(|e| e.to_string())
        };
        let (o, e) = (f("stdout")?, f("stderr")?);
        let (mut cmd, ip, base) = match place {
            Place::Loopback => (
                std::process::Command::new(&binary),
                std::net::Ipv4Addr::from(0x7f00_0001u32 + i),
                std::net::Ipv4Addr::LOCALHOST,
            ),
            Place::Netns(net) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", &net.name(i)]).arg(&binary);
                (c, net.address(i), net.address(0))
            }
        };
        let child = cmd
            .args(["sim-node", "--params"])
            .arg(&params)
            .args(["--node-id", &i.to_string(), "--listen-ip", &ip.to_string()])
            .args(["--port", &port.to_string()])
            .args(["--dial", &format!("/ip4/{{ip}}/tcp/{port}")])
            .args(["--ip-base", &base.to_string()])
            .arg("--store")
            .arg(run.join(format!("store{i}")))
            .envs(NODE_ENV)
            .stdin(std::process::Stdio::null())
            .stdout(o)
            .stderr(e)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        children.0.push(child);
        if i % 50 == 49 {
            eprintln!("started {} of {} nodes", i + 1, s.nodes);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let end = s.warmup_s + u64::from(s.messages) * s.interval_s + s.tail_s;
    eprintln!("{} nodes running; their script ends after {end} s", s.nodes);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(end + 120);
    let mut failed = 0;
    for (i, c) in children.0.iter_mut().enumerate() {
        loop {
            match c.try_wait() {
                Ok(Some(st)) => {
                    if !st.success() {
                        failed += 1;
                        eprintln!("node {i}: {st} (see {}/node{i}.stderr)", run.display());
                    }
                    break;
                }
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(200))
                }
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    failed += 1;
                    eprintln!("node {i} did not end in time: killed");
                    break;
                }
            }
        }
        let _ = std::fs::remove_dir_all(run.join(format!("store{i}")));
    }
    if failed > 0 {
        return Err(format!("{failed} node(s) failed"));
    }
    Ok(run)
}

fn generate(scenario: &Path, out: &Path, floor: Option<&Path>) -> Result<String, String> {
    let s = read_scenario(scenario)?;
    if !(2..=100_000).contains(&s.nodes) || s.dials == 0 || s.interval_s == 0 {
        return Err("nodes must be 2 to 100 000, dials and interval_s at least 1".into());
    }
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let params = absolute(&out.join("params.json")).map_err(|e| e.to_string())?;
    let graph_path = absolute(&out.join("graph.gml")).map_err(|e| e.to_string())?;
    let binary = absolute(&s.binary).map_err(|e| e.to_string())?;
    let write = |name: &str, body: &[u8]| {
        std::fs::write(out.join(name), body).map_err(|e| format!("writing {name}: {e}"))
    };
    write(
        "params.json",
        &serde_json::to_vec(&script(&s)).map_err(|e| e.to_string())?,
    )?;
    write("graph.gml", graph(&s).as_bytes())?;
    let host = Host {
        binary: &binary,
        params: &params,
        floor: false,
    };
    write(
        "shadow.yaml",
        shadow_yaml(&s, &host, &graph_path).as_bytes(),
    )?;
    let mut floor_hint = String::new();
    if let Some(bin) = floor {
        let bin = absolute(bin).map_err(|e| e.to_string())?;
        if !bin.is_file() {
            return Err(format!(
                "--floor {}: no such file (build libp2p/test-plans' gossipsub-interop/rust-libp2p \
                 node first: docs/SIMULATION.md, \"The floor under Shadow\")",
                bin.display()
            ));
        }
        let host = Host {
            binary: &bin,
            params: &params,
            floor: true,
        };
        write(
            "shadow-floor.yaml",
            shadow_yaml(&s, &host, &graph_path).as_bytes(),
        )?;
        floor_hint = format!(
            "\nfloor: shadow --progress true -d {o}/floor.data {o}/shadow-floor.yaml\n\
             then:  shadowgen --analyze {o}/floor.data",
            o = out.display()
        );
    }
    Ok(format!(
        "wrote {}/{{params.json,graph.gml,shadow.yaml}}: {} nodes, {} messages of {} bytes, {} ms links\n\
         run:  shadow --progress true -d {}/shadow.data {}/shadow.yaml\n\
         then: shadowgen --analyze {}/shadow.data{}",
        out.display(),
        s.nodes,
        s.messages,
        s.message_bytes,
        s.latency_ms,
        out.display(),
        out.display(),
        out.display(),
        floor_hint
    ))
}

/// One node's lines: when each message was published by it, and received.
#[derive(Debug, Default)]
struct NodeLog {
    published: BTreeMap<String, i64>,
    received: BTreeMap<String, i64>,
    duplicates: u64,
}

/// Microseconds since the epoch (an f64 of seconds would lose them).
fn micros(t: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|d| d.timestamp_micros())
}

fn read_log(text: &str) -> NodeLog {
    let mut log = NodeLog::default();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(msg), Some(t)) = (v["msg"].as_str(), v["time"].as_str().and_then(micros)) else {
            continue;
        };
        let id = v["id"].as_str().unwrap_or_default().to_string();
        match msg {
            "Published" => {
                log.published.insert(id, t);
            }
            "Received Message" => match log.received.entry(id) {
                std::collections::btree_map::Entry::Occupied(_) => log.duplicates += 1,
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(t);
                }
            },
            "Traffic" => log.duplicates += v["duplicates"].as_u64().unwrap_or(0),
            _ => {}
        }
    }
    log
}

/// Most `*.stdout` files an analysis reads: the most nodes a scenario may have.
const MAX_NODE_LOGS: usize = 100_000;
/// Largest `*.stdout` file an analysis reads. A node prints a line per message it accepted
/// (~80 bytes): a 1 000-node run's files are ~2 KB each.
const MAX_NODE_LOG_BYTES: u64 = 64 << 20;

/// The `*.stdout` files under `dir` (three levels down at most, as Shadow lays them out).
fn stdout_files(dir: &Path, out: &mut Vec<PathBuf>, depth: u32) -> Result<(), String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() && depth < 3 {
            stdout_files(&p, out, depth + 1)?;
        } else if p.extension().is_some_and(|x| x == "stdout") {
            if out.len() == MAX_NODE_LOGS {
                return Err(format!(
                    "more than {MAX_NODE_LOGS} *.stdout files under {}: give one run's data directory",
                    dir.display()
                ));
            }
            out.push(p);
        }
    }
    Ok(())
}

/// One node's lines, read whole within [`MAX_NODE_LOG_BYTES`].
fn read_node_log(f: &Path) -> Result<NodeLog, String> {
    let err = |e: std::io::Error| format!("reading {}: {e}", f.display());
    let len = std::fs::metadata(f).map_err(err)?.len();
    if len > MAX_NODE_LOG_BYTES {
        return Err(format!(
            "{}: {len} bytes, more than a node's output can be ({MAX_NODE_LOG_BYTES}): \
             is this a run's data directory?",
            f.display()
        ));
    }
    std::fs::read_to_string(f)
        .map(|t| read_log(&t))
        .map_err(err)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Milliseconds from `from` to each time, sorted.
fn delays(times: &[i64], from: i64) -> Vec<f64> {
    let mut d: Vec<f64> = times.iter().map(|t| (t - from) as f64 / 1000.0).collect();
    d.sort_by(f64::total_cmp);
    d
}

/// Mean, p50, p95, p99 and largest of sorted delays (null where there are none).
fn spread(sorted: &[f64]) -> Value {
    let mean = if sorted.is_empty() {
        f64::NAN
    } else {
        sorted.iter().sum::<f64>() / sorted.len() as f64
    };
    json!({
        "mean_ms": mean,
        "p50_ms": percentile(sorted, 0.5),
        "p95_ms": percentile(sorted, 0.95),
        "p99_ms": percentile(sorted, 0.99),
        "max_ms": sorted.last().copied().unwrap_or(f64::NAN),
    })
}

/// Per message: reach (receivers over nodes - 1) and delay percentiles, milliseconds, from its
/// `Published` line and from its first delivery (the harness's own measure,
/// `analyze_message_deliveries.py`: its nodes print no `Published` line to standard output, so
/// for them only the second is known). Over all messages: the same over every delivery, and
/// the time each message took to reach every node that got it.
fn analyze(dir: &Path) -> Result<Value, String> {
    let mut files = Vec::new();
    stdout_files(dir, &mut files, 0)?;
    if files.is_empty() {
        return Err(format!("no *.stdout file under {}", dir.display()));
    }
    let logs = files
        .iter()
        .map(|f| read_node_log(f))
        .collect::<Result<Vec<NodeLog>, String>>()?;
    let nodes = logs.len();
    let mut ids: HashSet<String> = HashSet::new();
    for l in &logs {
        ids.extend(l.published.keys().cloned());
        ids.extend(l.received.keys().cloned());
    }
    let mut ids: Vec<String> = ids.into_iter().collect();
    ids.sort_by_key(|i| (i.parse::<u64>().unwrap_or(u64::MAX), i.clone()));
    let (mut rows, mut all_pub, mut all_first) = (Vec::new(), Vec::new(), Vec::new());
    let (mut last_pub, mut last_first) = (Vec::new(), Vec::new());
    for id in &ids {
        let at = logs.iter().find_map(|l| l.published.get(id)).copied();
        let times: Vec<i64> = logs
            .iter()
            .filter_map(|l| l.received.get(id))
            .copied()
            .collect();
        let Some(first) = times.iter().min().copied() else {
            rows.push(json!({"id": id, "reach": 0.0}));
            continue;
        };
        let from_pub = at.map(|at| delays(&times, at)).unwrap_or_default();
        let from_first = delays(&times, first);
        if let Some(&m) = from_pub.last() {
            last_pub.push(m);
        }
        last_first.push(from_first.last().copied().unwrap_or(0.0));
        all_pub.extend_from_slice(&from_pub);
        all_first.extend_from_slice(&from_first);
        rows.push(json!({
            "id": id,
            "reach": times.len() as f64 / (nodes.saturating_sub(1).max(1)) as f64,
            "p50_ms": percentile(&from_pub, 0.5),
            "p95_ms": percentile(&from_pub, 0.95),
            "max_ms": from_pub.last().copied().unwrap_or(f64::NAN),
            "first_to_p50_ms": percentile(&from_first, 0.5),
            "first_to_last_ms": from_first.last().copied().unwrap_or(f64::NAN),
        }));
    }
    for v in [&mut all_pub, &mut all_first, &mut last_pub, &mut last_first] {
        v.sort_by(f64::total_cmp);
    }
    let dups: u64 = logs.iter().map(|l| l.duplicates).sum();
    let accepted: usize = logs.iter().map(|l| l.received.len()).sum();
    let possible = ids.len() * nodes.saturating_sub(1);
    let cdf = |d: &[f64]| -> Vec<(f64, f64)> {
        // A step at every k-th value and the last (at most ~500 steps): the share stays
        // where it was until the next value, so a line through the points draws the CDF.
        let k = (d.len() / 500).max(1);
        let mut p = vec![(0.0, 0.0)];
        for (i, &x) in d.iter().enumerate() {
            if i % k == 0 || i + 1 == d.len() {
                let below = p.last().map_or(0.0, |l| l.1);
                p.push((x, below));
                p.push((x, (i + 1) as f64 / d.len() as f64));
            }
        }
        p
    };
    Ok(json!({
        "nodes": nodes,
        "messages": rows,
        "cdf_from_first_delivery": cdf(&all_first),
        "cdf_from_published": cdf(&all_pub),
        "cdf_last_from_first": cdf(&last_first),
        "deliveries": accepted,
        "reach": if possible == 0 { 0.0 } else { accepted as f64 / possible as f64 },
        "from_published": spread(&all_pub),
        "from_first_delivery": spread(&all_first),
        "last_delivery_from_published": {"p50_ms": percentile(&last_pub, 0.5), "p95_ms": percentile(&last_pub, 0.95)},
        "last_delivery_from_first": {"p50_ms": percentile(&last_first, 0.5), "p95_ms": percentile(&last_first, 0.95)},
        "duplicates_per_delivery": if accepted == 0 { 0.0 } else { dups as f64 / accepted as f64 },
    }))
}

fn ms(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.0}"))
}

fn table(v: &Value) -> String {
    let mut s = format!(
        "{} nodes\n{:>6} {:>7} {:>9} {:>9} {:>9} {:>12}\n",
        v["nodes"], "id", "reach", "p50 ms", "p95 ms", "max ms", "first→last"
    );
    for m in v["messages"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "{:>6} {:>6.1}% {:>9} {:>9} {:>9} {:>12}\n",
            m["id"].as_str().unwrap_or("?"),
            m["reach"].as_f64().unwrap_or(0.0) * 100.0,
            ms(&m["p50_ms"]),
            ms(&m["p95_ms"]),
            ms(&m["max_ms"]),
            ms(&m["first_to_last_ms"])
        ));
    }
    for (name, key, last) in [
        (
            "from publication",
            "from_published",
            "last_delivery_from_published",
        ),
        (
            "from first delivery",
            "from_first_delivery",
            "last_delivery_from_first",
        ),
    ] {
        let d = &v[key];
        s.push_str(&format!(
            "every delivery {name}: mean {} p50 {} p95 {} p99 {} max {} ms; \
             the last of each message: p50 {} p95 {} ms\n",
            ms(&d["mean_ms"]),
            ms(&d["p50_ms"]),
            ms(&d["p95_ms"]),
            ms(&d["p99_ms"]),
            ms(&d["max_ms"]),
            ms(&v[last]["p50_ms"]),
            ms(&v[last]["p95_ms"])
        ));
    }
    s.push_str(&format!(
        "reach {:.1}% ({} deliveries); duplicates per delivery: {:.2}",
        v["reach"].as_f64().unwrap_or(0.0) * 100.0,
        v["deliveries"],
        v["duplicates_per_delivery"].as_f64().unwrap_or(0.0)
    ));
    s
}

/// The run beside its floor: each figure of `from_first_delivery` and of the last delivery,
/// and the run's over the floor's.
fn compare(run: &Value, floor: &Value) -> Value {
    let mut rows = Vec::new();
    for (what, key, q) in [
        ("every delivery, mean", "from_first_delivery", "mean_ms"),
        ("every delivery, p50", "from_first_delivery", "p50_ms"),
        ("every delivery, p95", "from_first_delivery", "p95_ms"),
        ("every delivery, max", "from_first_delivery", "max_ms"),
        (
            "last of each message, p50",
            "last_delivery_from_first",
            "p50_ms",
        ),
        (
            "last of each message, p95",
            "last_delivery_from_first",
            "p95_ms",
        ),
    ] {
        let (a, b) = (run[key][q].as_f64(), floor[key][q].as_f64());
        let ratio = match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => json!(a / b),
            _ => Value::Null,
        };
        rows.push(json!({"figure": what, "run_ms": a, "floor_ms": b, "ratio": ratio}));
    }
    json!({"from_first_delivery": rows, "reach": {"run": run["reach"], "floor": floor["reach"]}})
}

fn comparison_table(c: &Value) -> String {
    let mut s = format!(
        "\nbeside the floor (from each message's first delivery)\n{:<28} {:>9} {:>9} {:>7}\n",
        "", "run ms", "floor ms", "ratio"
    );
    for r in c["from_first_delivery"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "{:<28} {:>9} {:>9} {:>7}\n",
            r["figure"].as_str().unwrap_or(""),
            ms(&r["run_ms"]),
            ms(&r["floor_ms"]),
            r["ratio"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.2}"))
        ));
    }
    s.push_str(&format!(
        "reach: run {:.1}%, floor {:.1}%",
        c["reach"]["run"].as_f64().unwrap_or(0.0) * 100.0,
        c["reach"]["floor"].as_f64().unwrap_or(0.0) * 100.0
    ));
    s
}

fn points(v: &Value) -> Vec<(f64, f64)> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
        .collect()
}

/// reach_cdf.svg (every delivery, from each message's first) and last_delivery.svg (the CDF of
/// each message's last delivery), the floor's line beside the run's when there is one.
fn plots(dir: &Path, run: &Value, floor: Option<&Value>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (file, key, title, y) in [
        (
            "reach_cdf.svg",
            "cdf_from_first_delivery",
            "Deliveries over time, from each message's first delivery",
            "share of deliveries",
        ),
        (
            "last_delivery.svg",
            "cdf_last_from_first",
            "Time for a message to reach every node that got it",
            "share of messages",
        ),
    ] {
        let mut series = vec![plot::Series {
            label: format!("agentnet sim-node ({} nodes)", run["nodes"]),
            points: points(&run[key]),
        }];
        if let Some(f) = floor {
            series.push(plot::Series {
                label: format!(
                    "floor: libp2p's gossipsub-interop node ({} nodes)",
                    f["nodes"]
                ),
                points: points(&f[key]),
            });
        }
        plot::lines(
            &dir.join(file),
            title,
            "ms since the first delivery",
            y,
            &series,
        )?;
    }
    Ok(())
}

/// `--analyze DIR [--against FLOOR] [--plots OUT]`.
fn analyze_runs(dir: &Path, against: Option<&Path>, out: Option<&Path>) -> Result<Value, String> {
    let run = analyze(dir)?;
    let floor = against.map(analyze).transpose()?;
    if let Some(out) = out {
        plots(out, &run, floor.as_ref())?;
    }
    let mut v = run;
    if let Some(f) = floor {
        v["comparison"] = compare(&v, &f);
        v["floor"] = f;
    }
    Ok(v)
}

fn main() -> ExitCode {
    let a = Args::parse();
    let show = |v: Value| {
        if a.json {
            v.to_string()
        } else if v["comparison"].is_object() {
            format!("{}\n{}", table(&v), comparison_table(&v["comparison"]))
        } else {
            table(&v)
        }
    };
    let r = match (&a.analyze, &a.scenario, &a.out) {
        (Some(dir), _, _) => analyze_runs(dir, a.against.as_deref(), a.plots.as_deref()).map(show),
        (None, Some(sc), Some(out)) => generate(sc, out, a.floor.as_deref()).and_then(|msg| {
            let Some(port) = a.run_local.or(a.run_netns) else {
                return Ok(msg);
            };
            eprintln!("{msg}");
            let s = read_scenario(sc)?;
            let net = match a.run_netns {
                Some(_) => Some(netns::Net::create(
                    s.nodes,
                    false,
                    "--run-netns",
                    "use --run-local PORT (every node on this machine's loopback)",
                )?),
                None => None,
            };
            if let Some(net) = &net {
                eprintln!(
                    "{} nodes in network namespaces {} … {} (bridge br0 in {})",
                    s.nodes,
                    net.name(0),
                    net.name(s.nodes - 1),
                    net.hub()
                );
            }
            let place = net.as_ref().map_or(Place::Loopback, Place::Netns);
            let run = run_local(&s, out, port, place)?;
            // The namespaces go before the analysis, which reads only the run's files.
            drop(net);
            analyze(&run).map(show)
        }),
        _ => Err("give --scenario FILE --out DIR, or --analyze DIR".into()),
    };
    match r {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mesh_is_connected_and_seeded() {
        let s = Scenario {
            nodes: 300,
            dials: 4,
            ..Default::default()
        };
        let m = mesh(&s);
        assert_eq!(m, mesh(&s), "the same seed, the same mesh");
        // Every node reaches node 0 through its first dial (an earlier node).
        for (i, to) in m.iter().enumerate().skip(1) {
            assert!(to[0] < i as u32 && to.len() == 4, "{i}: {to:?}");
        }
        let p = script(&s);
        let publishes = p["script"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["instruction"]["type"] == "publish")
            .count();
        assert_eq!(publishes, 20);
        let host = |binary: &'static str, floor| Host {
            binary: Path::new(binary),
            params: Path::new("/x/params.json"),
            floor,
        };
        let y = shadow_yaml(&s, &host("/bin/agentnet", false), Path::new("/x/graph.gml"));
        assert_eq!(
            y.matches("      args: sim-node --params /x/params.json --store-in-memory\n")
                .count(),
            300
        );
        let f = shadow_yaml(&s, &host("/bin/floor", true), Path::new("/x/graph.gml"));
        assert_eq!(
            f.matches("    - path: /bin/floor\n      args: --params /x/params.json\n")
                .count(),
            300,
            "{f}"
        );
        assert_eq!(y.matches("    - path: /bin/agentnet").count(), 300);
        assert!(y.contains("      path: /x/graph.gml\n"), "{y}");
        assert_eq!(
            y.matches(
                "environment: { AGENTNET_LOG: \"warn\", MIMALLOC_ARENA_EAGER_COMMIT: \"0\" }"
            )
            .count(),
            300,
            "{y}"
        );
        assert!(y.contains("  node299:\n"));
        assert!(graph(&s).contains("latency \"100 ms\""));
    }

    #[test]
    fn a_floor_binary_that_is_not_there_is_refused_with_where_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        let sc = dir.path().join("s.toml");
        std::fs::write(&sc, "nodes = 3\nbinary = \"/bin/true\"\n").unwrap();
        let out = dir.path().join("out");
        let e = generate(&sc, &out, Some(Path::new("/nonexistent/floor"))).unwrap_err();
        assert!(
            e.contains("/nonexistent/floor") && e.contains("test-plans"),
            "{e}"
        );
        assert!(!out.join("shadow-floor.yaml").exists());
        let msg = generate(&sc, &out, Some(Path::new("/bin/true"))).unwrap();
        let f = std::fs::read_to_string(out.join("shadow-floor.yaml")).unwrap();
        assert_eq!(
            f.matches("    - path: /bin/true\n      args: --params ")
                .count(),
            3,
            "{f}"
        );
        assert!(msg.contains("shadow-floor.yaml"), "{msg}");
    }

    #[test]
    fn an_output_too_large_or_unreadable_is_refused_by_name_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("node0.stdout"), "").unwrap();
        // Past the bound (sparse: nothing is written).
        let big = dir.path().join("node1.stdout");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_NODE_LOG_BYTES + 1)
            .unwrap();
        let e = analyze(dir.path()).unwrap_err();
        assert!(e.contains("node1.stdout") && e.contains("bytes"), "{e}");
        // Not text: an error naming the file, not a node counted with nothing received.
        std::fs::write(&big, [0xff, 0xfe, 0x00]).unwrap();
        let e = analyze(dir.path()).unwrap_err();
        assert!(e.contains("node1.stdout"), "{e}");
    }

    #[test]
    fn a_run_beside_its_floor_gives_ratios_and_figures() {
        let line = |id: u32, t: &str| {
            format!("{{\"msg\":\"Received Message\",\"id\":\"{id}\",\"time\":\"2000-01-01T00:01:{t}Z\"}}\n")
        };
        let (run, floor, figs) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        // The run: message 1 reaches its three receivers 0, 200 and 400 ms after the first.
        for (i, t) in ["00.1", "00.3", "00.5"].iter().enumerate() {
            std::fs::write(run.path().join(format!("node{i}.stdout")), line(1, t)).unwrap();
        }
        std::fs::write(run.path().join("node3.stdout"), "").unwrap();
        // The floor: 0, 100, 200 ms.
        for (i, t) in ["00.1", "00.2", "00.3"].iter().enumerate() {
            std::fs::write(floor.path().join(format!("node{i}.stdout")), line(1, t)).unwrap();
        }
        std::fs::write(floor.path().join("node3.stdout"), "").unwrap();
        let v = analyze_runs(run.path(), Some(floor.path()), Some(figs.path())).unwrap();
        let rows = v["comparison"]["from_first_delivery"].as_array().unwrap();
        let row = |name: &str| rows.iter().find(|r| r["figure"] == name).unwrap().clone();
        assert!(
            (row("every delivery, max")["ratio"].as_f64().unwrap() - 2.0).abs() < 1e-9,
            "{v}"
        );
        assert!((row("every delivery, mean")["run_ms"].as_f64().unwrap() - 200.0).abs() < 1e-9);
        assert!(
            (row("last of each message, p95")["floor_ms"]
                .as_f64()
                .unwrap()
                - 200.0)
                .abs()
                < 1e-9
        );
        // The CDF is drawn in steps: nothing before the message's last delivery, all at it.
        assert_eq!(
            points(&v["cdf_last_from_first"]),
            [(0.0, 0.0), (400.0, 0.0), (400.0, 1.0)],
            "{v}"
        );
        let t = comparison_table(&v["comparison"]);
        assert!(
            t.contains("every delivery, max") && t.contains("2.00"),
            "{t}"
        );
        for f in ["reach_cdf.svg", "last_delivery.svg"] {
            let svg = std::fs::read_to_string(figs.path().join(f)).unwrap();
            assert!(
                svg.contains("floor: libp2p") && svg.contains("agentnet sim-node (4 nodes)"),
                "{f}"
            );
        }
        // No floor: no comparison, and the figures have the run's line alone.
        let v = analyze_runs(run.path(), None, None).unwrap();
        assert!(v.get("comparison").is_none(), "{v}");
        assert!(analyze_runs(run.path(), Some(Path::new("/nonexistent")), None).is_err());
    }

    #[test]
    fn the_analysis_reads_reach_and_delays_from_the_lines() {
        let dir = tempfile::tempdir().unwrap();
        let w = |n: &str, body: &str| std::fs::write(dir.path().join(n), body).unwrap();
        w("node0.stdout", "{\"msg\":\"PeerID\",\"time\":\"2000-01-01T00:00:00Z\",\"id\":\"x\"}\n{\"msg\":\"Published\",\"id\":\"1\",\"time\":\"2000-01-01T00:01:00.000000Z\"}\n");
        w("node1.stdout", "{\"msg\":\"Received Message\",\"id\":\"1\",\"time\":\"2000-01-01T00:01:00.100000Z\"}\nnot json\n{\"msg\":\"Received Message\",\"id\":\"2\",\"time\":\"2000-01-01T00:02:00Z\"}\n");
        w("node2.stdout", "{\"msg\":\"Received Message\",\"id\":\"1\",\"time\":\"2000-01-01T00:01:00.300000Z\"}\n{\"msg\":\"Received Message\",\"id\":\"1\",\"time\":\"2000-01-01T00:01:00.400000Z\"}\n");
        // Message 2 as the harness's own nodes print it: no `Published` line anywhere, and a
        // time in nanoseconds.
        w("node3.stdout", "{\"msg\":\"Received Message\",\"id\":\"2\",\"time\":\"2000-01-01T00:02:00.250000001Z\"}\n");
        let v = analyze(dir.path()).unwrap();
        assert_eq!(v["nodes"], 4);
        let m = &v["messages"][0];
        assert!(
            (m["reach"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9,
            "{v}"
        );
        assert!((m["max_ms"].as_f64().unwrap() - 300.0).abs() < 1e-6, "{v}");
        assert!(
            (m["first_to_last_ms"].as_f64().unwrap() - 200.0).abs() < 1e-6,
            "{v}"
        );
        let m = &v["messages"][1];
        assert_eq!(m["id"], "2");
        assert!(m["max_ms"].is_null(), "no publication time: {v}");
        assert!(
            (m["first_to_last_ms"].as_f64().unwrap() - 250.0).abs() < 1e-6,
            "{v}"
        );
        // Over everything: 4 of 6 possible deliveries; from publication only message 1's.
        assert_eq!(v["deliveries"], 4);
        assert!(
            (v["reach"].as_f64().unwrap() - 4.0 / 6.0).abs() < 1e-9,
            "{v}"
        );
        assert!(
            (v["from_published"]["mean_ms"].as_f64().unwrap() - 200.0).abs() < 1e-6,
            "{v}"
        );
        assert!(
            (v["from_first_delivery"]["max_ms"].as_f64().unwrap() - 250.0).abs() < 1e-6,
            "{v}"
        );
        assert!(
            (v["last_delivery_from_first"]["p95_ms"].as_f64().unwrap() - 250.0).abs() < 1e-6,
            "{v}"
        );
        assert!(
            (v["duplicates_per_delivery"].as_f64().unwrap() - 0.25).abs() < 1e-9,
            "{v}"
        );
        let t = table(&v);
        assert!(t.contains("reach 66.7% (4 deliveries)"), "{t}");
    }
}
