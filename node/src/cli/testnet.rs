//! `agentnet testnet`: a whole network in one process, the newcomer's first command.
//!
//! It starts N full nodes ([`daemon::start`]) on loopback, node 1 first and every other node
//! bootstrapping from it; publishes three sample agents, each under its own fresh did:key,
//! from different nodes through their admin API (the path `agentnet publish` takes); then asks
//! the last node, which published nothing, to discover each agent by skill tag (the path
//! `agentnet discover` takes: its index, which gossip fills, then the DHT) and reports how long
//! each took. Then the A2A call: node 1 hosts a sample agent (`greeter`, kind `ask`, DID
//! policy); the last node finds it by its skill tag, verifies its card, and calls it with
//! RFC 9421-signed requests under the last node's did:key: the agent asks for a name
//! (INPUT_REQUIRED), the caller answers, the task completes with its artifact. Then MCP: node 1
//! also hosts `mcp-echo` (kind `echo`, DID policy, `mcp = true`); the last node finds it by
//! skill, verifies its card, reads the MCP endpoint the card advertises and calls its `echo`
//! tool over MCP with every HTTP request RFC 9421-signed by the same DID. Then authority
//! across hops ([`DelegationReport`]): a principal delegates to the last node, which calls
//! node 2's `specialist` (a proxy), which hands the chain on to node 1's `summaries`; both
//! require the principal's delegation and check the whole chain; the last node logs the
//! specialist's verified receipt, which names the sub-agent's (logged on node 2); and a
//! narrower delegation is refused by `summaries`, one hop on. Nodes are numbered from 1 in the
//! output, JSON included.
//!
//! With `--processes` ([`Mode::Processes`]) each node is a child process of this binary running
//! `agentnet up` on loopback, with its own data directory and a configuration file for what it
//! hosts (`<base>/node-<i>.toml`, its standard error in `<base>/node-<i>.log`); the run and the
//! report are the same ([`member`] holds the difference, and keeps children from outliving it).
//!
//! With `--processes N --netns` ([`Mode::Namespaces`], as root) each child runs in a network
//! namespace of its own ([`netns`]: node M at 10.77.0.M on one bridge), so that the nodes see
//! one another at distinct addresses, as on different machines; the testnet reaches their
//! loopback-only admin APIs through forwarders into the namespaces, and removes the
//! namespaces when it ends.
//!
//! This file starts the nodes and stops them; `samples` runs what follows the start and builds
//! the [`Report`] (`report` prints it), with the samples in `calls` (A2A, MCP, ANP and ARD),
//! `delegation` and `trust`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentnet_did::SecretKey;
use anyhow::{bail, Context as _};
use serde::Serialize;
use tokio::time::Instant;

use crate::admin;
use crate::cli::netns;
use crate::daemon;
use crate::http::server::Limits;

mod calls;
mod delegation;
mod member;
mod report;
mod samples;
mod trust;
use calls::hosted_sample;
use delegation::{specialist_config, SUB_TAG};
use member::Member;
use report::print_summary;
pub use report::{
    CallReport, DelegationReport, DiscoveryReport, FacesReport, McpReport, NodeReport,
    PublishedReport, Report, TrustReport, WellKnownReport,
};
use samples::samples;

/// Default number of nodes.
pub const DEFAULT_NODES: u8 = 4;
/// Fewest nodes: one to publish, one to discover.
pub const MIN_NODES: u8 = 2;
/// Most nodes.
pub const MAX_NODES: u8 = 32;
/// How long the last node gets to find each agent.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause between two discovery attempts.
const RETRY: Duration = Duration::from_millis(200);
/// Timeout of one admin request.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Lifetime of the sample advertisements, seconds (re-announced at 2/3 of it with `--keep`).
const SAMPLE_TTL: u64 = 600;

/// Where the nodes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Mode {
    /// All in this process (`--nodes`).
    InProcess,
    /// Each a child process running `agentnet up` (`--processes`).
    Processes,
    /// Each a child process in a network namespace of its own (`--processes N --netns`).
    Namespaces,
}

/// What `agentnet testnet` was asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many nodes, [`MIN_NODES`]..=[`MAX_NODES`].
    pub nodes: u8,
    /// Where they run.
    pub mode: Mode,
    /// Keep node data in `<dir>/node-<i>`; default: a temporary directory removed at exit.
    pub data_dir: Option<PathBuf>,
    /// Print one JSON object ([`Report`]) on standard output; progress goes to standard error.
    pub json: bool,
    /// Keep the nodes running until Ctrl-C or SIGTERM.
    pub keep: bool,
}

/// Why a sample step failed, on one line, also said on the progress lines; `None` if it did not.
fn failure(done: anyhow::Result<()>, what: &str, progress: &Progress) -> Option<String> {
    let e = super::one_line(&done.err()?);
    progress.line(format!("{what} failed: {e}"));
    Some(e)
}

/// Progress lines: standard output, or standard error when standard output carries the JSON.
#[derive(Clone, Copy)]
struct Progress {
    json: bool,
}

impl Progress {
    fn line(self, s: impl std::fmt::Display) {
        if self.json {
            say!("{s}");
        } else {
            // Once the reader is gone the testnet still runs to its end and stops its nodes;
            // the report's own output then ends the command (exit 0).
            let _ = out!("{s}");
        }
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}

/// The client of a node's admin API, at the address the testnet reaches it by (a forwarder
/// into its namespace, with `--netns`) with the token in its data directory.
fn admin_client(data_dir: &Path, member: &Member) -> anyhow::Result<admin::Client> {
    let token = crate::data_dir::token::Token::read(data_dir)?;
    Ok(admin::Client::new(
        &format!("http://{}", member.admin()),
        token,
        ADMIN_TIMEOUT,
    )?)
}

/// Run the testnet: exit code 0 if the last node found every sample agent, 1 otherwise.
pub async fn run(opts: Options) -> anyhow::Result<ExitCode> {
    if !(MIN_NODES..=MAX_NODES).contains(&opts.nodes) {
        bail!("--nodes must be between {MIN_NODES} and {MAX_NODES}");
    }
    // Removed when this returns, after the nodes have stopped.
    let mut temp = None;
    let base: PathBuf = match &opts.data_dir {
        Some(d) => d.clone(),
        None => temp
            .insert(
                tempfile::Builder::new()
                    .prefix("agentnet-testnet-")
                    .tempdir()
                    .context("creating a temporary directory for the nodes")?,
            )
            .path()
            .to_owned(),
    };
    let progress = Progress { json: opts.json };
    let t0 = Instant::now();
    // Dropped (the namespaces removed) when this returns, after the nodes have stopped.
    let net = match opts.mode {
        Mode::Namespaces => {
            // With the uplink: the testnet calls the nodes' agents itself, as `agentnet call`
            // run on the last node's data directory would.
            let net = netns::Net::create(
                opts.nodes.into(),
                true,
                "--netns",
                "run without it (every node on this machine's loopback)",
            )
            .map_err(anyhow::Error::msg)?;
            progress.line(format!(
                "{} network namespaces {} … {} (bridge br0 in {})",
                opts.nodes,
                net.name(0),
                net.name(u32::from(opts.nodes) - 1),
                net.hub()
            ));
            Some(net)
        }
        Mode::InProcess | Mode::Processes => None,
    };
    let mut nodes: Vec<Member> = Vec::with_capacity(opts.nodes.into());
    // Ctrl-C or SIGTERM while it runs: the nodes stop as on any other error.
    let outcome = tokio::select! {
        r = exercise(&opts, &base, net.as_ref(), progress, t0, &mut nodes) => r,
        e = interrupted() => Err(e),
    };

    let report = match outcome {
        Ok(report) => report,
        Err(e) => {
            shutdown(nodes, progress).await;
            // The children's logs are what explains a failure: kept, not removed with the rest.
            if let (Some(t), Mode::Processes | Mode::Namespaces) = (temp.take(), opts.mode) {
                let kept = t.keep();
                return Err(e.context(format!(
                    "the nodes' logs and data are kept in {}",
                    kept.display()
                )));
            }
            return Err(e);
        }
    };
    let printed = if opts.json {
        super::output::json_text(&report).and_then(|text| out!("{text}"))
    } else {
        print_summary(&report, opts.keep)
    };
    if let Err(e) = printed {
        shutdown(nodes, progress).await;
        return Err(e);
    }
    if opts.keep {
        let last = report
            .nodes
            .last()
            .map(|n| super::output::shell_word(&n.data_dir.display().to_string()))
            .unwrap_or_default();
        // Inside a namespace, a command reaches the node's admin API from inside it too.
        let a = match report.nodes.last().and_then(|n| n.netns.as_deref()) {
            Some(ns) => format!("ip netns exec {ns} agentnet"),
            None => "agentnet".into(),
        };
        // Each line runs as printed: the nodes are `local` (their node.json says so), so the
        // call needs no `--local`.
        progress.line(format!(
            "\nthe testnet keeps running; press Ctrl-C to stop it. Try, from another terminal:\n  \
             {a} discover --data-dir {last} --skill translation\n  \
             {a} call --data-dir {last} --skill greeting Hello\n  \
             {a} tools --data-dir {last} --skill mcp-echo\n  \
             {a} status --data-dir {last}\n  \
             {a} audit --data-dir {last}\n  \
             {a} peers --data-dir {last}"
        ));
        let died = tokio::select! {
            r = daemon::terminated() => {
                if let Err(error) = r {
                    progress.line(format!("error: {error}; stopping"));
                }
                None
            }
            e = member::first_exit(&nodes) => Some(e),
        };
        if let Some(e) = died {
            shutdown(nodes, progress).await;
            return Err(e.context("while the testnet was kept running"));
        }
    }
    shutdown(nodes, progress).await;
    if report.ok {
        Ok(ExitCode::SUCCESS)
    } else {
        say!(
            "error: {}",
            report.error.as_deref().unwrap_or("a discovery failed")
        );
        Ok(ExitCode::FAILURE)
    }
}

/// Start the nodes (into `nodes`, so that the caller stops them whatever happens), publish,
/// discover, and report.
async fn exercise(
    opts: &Options,
    base: &Path,
    net: Option<&netns::Net>,
    progress: Progress,
    t0: Instant,
    nodes: &mut Vec<Member>,
) -> anyhow::Result<Report> {
    let n = usize::from(opts.nodes);
    let mut start_ms = Vec::with_capacity(n);
    let principal_key = principal_key(base)?;
    let principal = principal_key.did_key().to_string();
    // With --processes: this binary, `agentnet up` in each child.
    let exe = match opts.mode {
        Mode::InProcess => None,
        Mode::Processes | Mode::Namespaces => {
            Some(std::env::current_exe().context("finding the agentnet binary to run the nodes")?)
        }
    };
    for i in 0..n {
        let bootstrap = nodes
            .first()
            .map(|first| first.info().listen.clone())
            .unwrap_or_default();
        if i > 0 && bootstrap.is_empty() {
            bail!("node 1 reports no listen address to bootstrap from");
        }
        let hosted = node_config(i, n, nodes, &principal)?;
        let data_dir = base.join(format!("node-{}", i + 1));
        let started = Instant::now();
        let member = match &exe {
            None => start_in_process(i, &data_dir, &bootstrap, hosted).await?,
            Some(exe) => start_process(i, exe, base, &data_dir, &bootstrap, &hosted, net).await?,
        };
        let took = ms(started.elapsed());
        start_ms.push(took);
        progress.line(started_line(i, n, took, &member));
        nodes.push(member);
    }
    // From here on a child that exits ends the run, with its log's last lines.
    let nodes: &[Member] = nodes;
    tokio::select! {
        r = samples(opts, base, progress, t0, nodes, &principal_key, &start_ms) => r,
        e = member::first_exit(nodes) => Err(e),
    }
}

/// The principal of the delegation sample; its key stays with the nodes (`--keep`: delegate
/// more with `agentnet delegate --data-dir <base>/principal`).
fn principal_key(base: &Path) -> anyhow::Result<SecretKey> {
    let principal_dir = base.join("principal");
    std::fs::create_dir_all(&principal_dir)
        .with_context(|| format!("creating {}", principal_dir.display()))?;
    Ok(
        SecretKey::load_or_create(&crate::data_dir::key_file(&principal_dir))
            .context("the principal's key")?
            .0,
    )
}

/// What node `i` of `n` hosts: node 1 the sample agents the last node calls, node 2 the
/// specialist; the last node counts node 1's endorsements.
fn node_config(
    i: usize,
    n: usize,
    nodes: &[Member],
    principal: &str,
) -> anyhow::Result<crate::config::FileConfig> {
    // Node 1 hosts the sample agents the last node calls; node 2 the specialist.
    let mut hosted = match i {
        0 => hosted_sample(principal)?,
        1 => specialist_config(
            &format!("http://{}/a2a/{SUB_TAG}", nodes[0].info().http),
            principal,
        )?,
        _ => Default::default(),
    };
    // The last node counts node 1's endorsements ([`TrustReport`]).
    if i + 1 == n {
        if let Some(first) = nodes.first() {
            hosted.trust.endorsers = vec![first.info().did.clone()];
        }
    }
    Ok(hosted)
}

/// Start node `i` in this process, on loopback, bootstrapping from `bootstrap`.
async fn start_in_process(
    i: usize,
    data_dir: &Path,
    bootstrap: &[String],
    hosted: crate::config::FileConfig,
) -> anyhow::Result<Member> {
    Ok(Member::InProcess(Box::new(
        daemon::start(daemon::Options {
            data_dir: data_dir.to_path_buf(),
            listen: vec!["/ip4/127.0.0.1/tcp/0".parse().expect("a valid multiaddr")],
            bootstrap: bootstrap
                .iter()
                .map(|a| a.parse())
                .collect::<Result<Vec<libp2p::Multiaddr>, _>>()
                .context("node 1's listen addresses")?,
            http: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            http_limits: Limits::PUBLIC,
            admin_limits: Limits::ADMIN,
            store_limits: Default::default(),
            // Several nodes share this process: a process-wide bound would be theirs
            // together.
            max_memory: None,
            mdns: false,
            public_url: None,
            hosted,
            resolver: Default::default(),
            // On loopback: the commands run on the nodes' data directories (`--keep`)
            // call their agents as printed.
            local: true,
        })
        .await
        .with_context(|| format!("starting node {} in {}", i + 1, data_dir.display()))?,
    )))
}

/// Start node `i` as a child running `exe up`: the same settings as flags of `agentnet up`
/// (`--local` for `local`; the memory bound is the child's own), what it hosts in its
/// configuration file. Beside the data directory, not in it: a data directory that cannot be
/// used is the child's to report, in its log. With `net`, in node `i`'s namespace.
async fn start_process(
    i: usize,
    exe: &Path,
    base: &Path,
    data_dir: &Path,
    bootstrap: &[String],
    hosted: &crate::config::FileConfig,
    net: Option<&netns::Net>,
) -> anyhow::Result<Member> {
    let config = base.join(format!("node-{}.toml", i + 1));
    let text = toml::to_string(hosted).context("writing a node's configuration file")?;
    std::fs::write(&config, text).with_context(|| format!("writing {}", config.display()))?;
    let m = u32::try_from(i).expect("at most MAX_NODES nodes");
    let ns = match net {
        Some(net) => {
            let file = net
                .open(m)
                .with_context(|| format!("node {}'s network namespace", i + 1))?;
            Some((net.name(m), file, net.address(m)))
        }
        None => None,
    };
    Ok(Member::Process(Box::new(
        member::Spawn {
            node: i + 1,
            exe,
            data_dir,
            config: &config,
            log: &base.join(format!("node-{}.log", i + 1)),
            bootstrap,
            ip: ns
                .as_ref()
                .map_or(std::net::Ipv4Addr::LOCALHOST, |(_, _, ip)| *ip),
            netns: ns.as_ref().map(|(name, file, _)| (name.as_str(), file)),
        }
        .start()
        .await?,
    )))
}

/// The progress line of node `i` of `n`, started in `took` ms.
fn started_line(i: usize, n: usize, took: u64, member: &Member) -> String {
    format!(
        "started node {}/{n} in {took} ms: {} http://{}{}{}",
        i + 1,
        short(&member.info().peer_id),
        member.info().http,
        match (member.log(), member.netns()) {
            (None, _) => String::new(),
            (Some(log), None) => {
                format!(" (pid {}, log {})", member.info().pid, log.display())
            }
            (Some(log), Some(ns)) => format!(
                " (pid {}, log {}, namespace {ns})",
                member.info().pid,
                log.display()
            ),
        },
        if i == 0 {
            String::new()
        } else {
            " (bootstrapping from node 1)".into()
        }
    )
}

/// Resolves on Ctrl-C or SIGTERM, with the error that ends the run; never if the handlers
/// cannot be installed (the run goes on, as it did before it listened for them).
async fn interrupted() -> anyhow::Error {
    match daemon::terminated().await {
        Ok(()) => anyhow::anyhow!("interrupted (Ctrl-C or SIGTERM)"),
        Err(error) => {
            tracing::warn!(%error, "Ctrl-C will not stop the nodes in order");
            std::future::pending().await
        }
    }
}

/// Stop every node, all at once.
async fn shutdown(nodes: Vec<Member>, progress: Progress) {
    if nodes.is_empty() {
        return;
    }
    let started = Instant::now();
    let n = nodes.len();
    let what = match (nodes.iter().any(|m| m.log().is_some()), n) {
        (true, 1) => "node process",
        (true, _) => "node processes",
        (false, 1) => "node",
        (false, _) => "nodes",
    };
    let mut stops = tokio::task::JoinSet::new();
    for r in nodes {
        stops.spawn(r.shutdown());
    }
    while let Some(r) = stops.join_next().await {
        if let Err(error) = r {
            tracing::warn!(%error, "stopping a node");
        }
    }
    progress.line(format!(
        "stopped {n} {what} in {} ms",
        ms(started.elapsed())
    ));
}

/// `12D3KooW…abcdef`: a PeerId short enough for a progress line.
fn short(peer_id: &str) -> String {
    match peer_id.char_indices().nth_back(5) {
        Some((tail, _)) if peer_id.len() > 16 => format!("{}…{}", &peer_id[..8], &peer_id[tail..]),
        _ => peer_id.to_owned(),
    }
}
