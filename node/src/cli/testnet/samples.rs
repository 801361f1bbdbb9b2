//! The testnet at work, once its nodes are up ([`samples`]): they connect, the sample agents
//! are published from the first nodes and discovered from the last, then the last node calls
//! node 1's agents, acts on a principal's delegation and sees an endorsement; the [`Report`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentnet_did::{card, SecretKey};
use anyhow::Context as _;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::calls::{call_sample, faces_sample, mcp_sample};
use super::delegation::delegation_sample;
use super::member::Member;
use super::report::{
    CallReport, DelegationReport, DiscoveryReport, FacesReport, McpReport, NodeReport,
    PublishedReport, Report, TrustReport, WellKnownReport,
};
use super::trust::trust_sample;
use super::{admin_client, ms, Options, Progress, DISCOVER_TIMEOUT, RETRY, SAMPLE_TTL};
use crate::admin::{self, PublishRequest};
use crate::data_dir::AgentKeys;

/// How long the nodes get to connect to node 1.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A sample agent.
struct Sample {
    name: &'static str,
    slug: &'static str,
    description: &'static str,
    skill: &'static str,
    /// The first one is what the last node searches for.
    tags: [&'static str; 2],
    example: &'static str,
}

const SAMPLES: [Sample; 3] = [
    Sample {
        name: "Translator",
        slug: "translator",
        description: "Translates text between languages.",
        skill: "translate",
        tags: ["translation", "language"],
        example: "Translate 'good morning' into French",
    },
    Sample {
        name: "Summarizer",
        slug: "summarizer",
        description: "Summarizes long texts in a few sentences.",
        skill: "summarize",
        tags: ["summarization", "text"],
        example: "Summarize this article in three sentences",
    },
    Sample {
        name: "Weather",
        slug: "weather",
        description: "Gives the weather forecast for a place.",
        skill: "forecast",
        tags: ["weather", "forecast"],
        example: "Will it rain in Lyon tomorrow?",
    },
];

/// The unsigned A2A 1.0 Agent Card of a sample agent; its URL is a placeholder in `.invalid`.
fn sample_card(s: &Sample) -> Value {
    json!({
        "name": s.name,
        "description": format!("Sample agent of `agentnet testnet`. {}", s.description),
        "version": "0.1.0",
        "supportedInterfaces": [{
            "url": format!("https://agents.invalid/{}/a2a/v1", s.slug),
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0"
        }],
        "provider": {"organization": "agentnet testnet", "url": "https://agents.invalid"},
        "capabilities": {"streaming": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": s.skill,
            "name": s.name,
            "description": s.description,
            "tags": s.tags,
            "examples": [s.example]
        }]
    })
}

/// Everything after the start: publish, discover, call, delegate, endorse; the report.
pub(super) async fn samples(
    opts: &Options,
    base: &Path,
    progress: Progress,
    t0: Instant,
    nodes: &[Member],
    principal_key: &SecretKey,
    start_ms: &[u64],
) -> anyhow::Result<Report> {
    let n = nodes.len();
    let dirs: Vec<PathBuf> = (0..n)
        .map(|i| base.join(format!("node-{}", i + 1)))
        .collect();
    let clients: Vec<admin::Client> = dirs
        .iter()
        .zip(nodes)
        .map(|(d, m)| admin_client(d, m))
        .collect::<anyhow::Result<_>>()?;

    wait_connected(&clients, progress).await?;
    let published = publish_samples(&dirs, &clients, progress).await?;
    let discoveries = discover_samples(nodes, &clients[n - 1], &published, progress).await?;
    let discovered_ms = discoveries
        .iter()
        .all(|d| d.found)
        .then(|| ms(t0.elapsed()));

    // The A2A call: node 1 announces its hosted agent again now that the network is up (at its
    // start it had no peer to tell), and the last node finds it by skill, verifies its card,
    // and calls it with DID-signed requests, through the INPUT_REQUIRED round.
    // Both calls come from the last node: signed with its node key, under its did:key.
    let last_key = || {
        SecretKey::load(&crate::data_dir::key_file(&dirs[n - 1]))
            .with_context(|| format!("node {n}'s key"))
    };
    let call = call_sample(
        &dirs[0],
        &clients[0],
        &clients[n - 1],
        last_key()?,
        &nodes[0],
        &progress,
    )
    .await;
    // MCP: the last node calls the echo tool of node 1's `mcp-echo` agent, its endpoint read
    // from the verified card, every request signed.
    let mcp = mcp_sample(
        &dirs[0],
        &clients[0],
        &clients[n - 1],
        last_key()?,
        &nodes[0],
        &progress,
    )
    .await;
    // The same agent's ANP face (its description, a signed JSON-RPC call) and the last node's
    // ARD registry, which answers from its P2P index.
    let faces = faces_sample(
        &clients[n - 1],
        last_key()?,
        nodes[n - 1].info().http,
        &progress,
    )
    .await;

    // Authority across hops: the last node acts for the principal, through node 2 to node 1.
    let delegation = delegation_sample(
        &dirs,
        &clients,
        nodes,
        principal_key,
        last_key()?,
        &progress,
    )
    .await;

    // Discovery is not approval: node 1's endorsement ranks an agent first at the last node,
    // and a card changed under its DID is shown changed and flagged.
    let trust = trust_sample(&dirs, &clients, &nodes[0].info().did, &progress).await;

    let node_reports = node_reports(nodes, &clients, &dirs, start_ms).await?;
    let missing: Vec<&str> = discoveries
        .iter()
        .filter(|d| !d.found)
        .map(|d| d.tag.as_str())
        .collect();
    let call_failed = call.error.is_some()
        || mcp.error.is_some()
        || faces.error.is_some()
        || delegation.error.is_some()
        || trust.error.is_some();
    let http0 = nodes[0].info().http;
    Ok(Report {
        ok: missing.is_empty() && !call_failed,
        mode: opts.mode,
        error: first_error(n, missing, &call, &mcp, &faces, &delegation, &trust),
        call,
        mcp,
        faces,
        delegation,
        trust,
        nodes: node_reports,
        published,
        discoveries,
        well_known: WellKnownReport {
            did_json: format!("http://{http0}/.well-known/did.json"),
            agent_card_json: format!("http://{http0}/.well-known/agent-card.json"),
            agent_descriptions: format!("http://{http0}/.well-known/agent-descriptions"),
            ard_json: format!("http://{http0}/.well-known/ard.json"),
        },
        discovered_ms,
        elapsed_ms: ms(t0.elapsed()),
    })
}

/// Every node bootstrapped from node 1; wait until each has a connection, or
/// [`CONNECT_TIMEOUT`] (then go on with a warning). Node 1 may not keep one to every other
/// node: the DHT connects them among themselves too.
async fn wait_connected(clients: &[admin::Client], progress: Progress) -> anyhow::Result<()> {
    let n = clients.len();
    let started = Instant::now();
    let deadline = started + CONNECT_TIMEOUT;
    loop {
        let mut counts = Vec::with_capacity(n);
        for c in clients {
            counts.push(c.peers().await?.peers.len());
        }
        let connected = counts.iter().all(|&k| k >= 1);
        if connected {
            progress.line(format!(
                "all {n} nodes connected in {} ms (node 1 has {} peers)",
                ms(started.elapsed()),
                counts[0]
            ));
            break;
        }
        if Instant::now() >= deadline {
            progress.line(format!(
                "warning: after {} s the nodes have {counts:?} peers; going on",
                CONNECT_TIMEOUT.as_secs()
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Publish the [`SAMPLES`] from the first n-1 nodes in turn, each under a fresh did:key; the
/// last node publishes nothing.
async fn publish_samples(
    dirs: &[PathBuf],
    clients: &[admin::Client],
    progress: Progress,
) -> anyhow::Result<Vec<PublishedReport>> {
    let n = clients.len();
    let mut published = Vec::with_capacity(SAMPLES.len());
    for (j, sample) in SAMPLES.iter().enumerate() {
        let node = j % (n - 1);
        let key = SecretKey::generate();
        let did = key.did_key();
        let signed = card::sign(
            &sample_card(sample),
            &key,
            &did.with_fragment(did.method_specific_id()),
        )
        .with_context(|| format!("signing the {} card", sample.name))?;
        // As `agentnet publish --key` does: the key goes into the node's data directory, the
        // request names the DID.
        let agent = AgentKeys::new(&dirs[node])
            .install(&key)
            .with_context(|| format!("installing the {} key", sample.name))?;
        let started = Instant::now();
        let p = clients[node]
            .publish(&PublishRequest {
                card: signed,
                ttl_secs: SAMPLE_TTL,
                did: Some(agent),
            })
            .await
            .with_context(|| format!("publishing {} from node {}", sample.name, node + 1))?;
        let took = ms(started.elapsed());
        progress.line(format!(
            "published {} ({}) from node {} in {took} ms, tags {}",
            sample.name,
            p.did,
            node + 1,
            p.tags.join(",")
        ));
        published.push(PublishedReport {
            name: sample.name.into(),
            did: p.did,
            tags: p.tags,
            node: node + 1,
            seq: p.seq,
            ms: took,
        });
    }
    Ok(published)
}

/// The last node (`searcher`) looks for each published agent, all at once ([`search`]).
async fn discover_samples(
    nodes: &[Member],
    searcher: &admin::Client,
    published: &[PublishedReport],
    progress: Progress,
) -> anyhow::Result<Vec<DiscoveryReport>> {
    let n = nodes.len();
    let peer_nodes: Vec<String> = nodes.iter().map(|r| r.info().peer_id.clone()).collect();
    let searcher = searcher.clone();
    let mut searches = tokio::task::JoinSet::new();
    for (j, (sample, p)) in SAMPLES.iter().zip(published).enumerate() {
        let c = searcher.clone();
        let (tag, name, did) = (sample.tags[0].to_owned(), sample.name, p.did.clone());
        let peer_nodes = peer_nodes.clone();
        searches.spawn(async move {
            let (mut r, publisher) = search(&c, &tag, &did).await;
            r.name = name.into();
            r.node = n;
            r.published_by = publisher
                .and_then(|p| peer_nodes.iter().position(|x| *x == p))
                .map(|i| i + 1);
            (j, r)
        });
    }
    let mut discoveries: Vec<Option<DiscoveryReport>> = vec![None; SAMPLES.len()];
    while let Some(joined) = searches.join_next().await {
        let (j, r) = joined.context("a discovery task failed")?;
        if r.found {
            progress.line(format!(
                "node {n} found {} → {} {} via {} in {} ms",
                r.tag,
                r.name,
                r.did,
                r.via.as_deref().unwrap_or("?"),
                r.ms
            ));
        } else {
            progress.line(format!(
                "node {n} did not find {} → {} {} within {} s: {}",
                r.tag,
                r.name,
                r.did,
                DISCOVER_TIMEOUT.as_secs(),
                r.error.as_deref().unwrap_or("no answer")
            ));
        }
        discoveries[j] = Some(r);
    }
    Ok(discoveries.into_iter().flatten().collect())
}

/// Each node as the report shows it: addresses, data directory, process, peers now.
async fn node_reports(
    nodes: &[Member],
    clients: &[admin::Client],
    dirs: &[PathBuf],
    start_ms: &[u64],
) -> anyhow::Result<Vec<NodeReport>> {
    let mut node_reports = Vec::with_capacity(nodes.len());
    for (i, (r, c)) in nodes.iter().zip(clients).enumerate() {
        node_reports.push(NodeReport {
            node: i + 1,
            did: r.info().did.clone(),
            peer_id: r.info().peer_id.clone(),
            http: r.info().http.to_string(),
            admin: r.info().admin.to_string(),
            data_dir: dirs[i].clone(),
            pid: r.info().pid,
            log: r.log().map(Path::to_path_buf),
            netns: r.netns().map(str::to_owned),
            listen: r.info().listen.clone(),
            peers: c.peers().await?.peers.len(),
            start_ms: start_ms[i],
        });
    }
    Ok(node_reports)
}

/// What failed first, in the report's order: the discoveries `missing` (by the last node, the
/// `n`th), then the A2A call, MCP, ANP or ARD, the delegated call, the trust sample.
fn first_error(
    n: usize,
    mut missing: Vec<&str>,
    call: &CallReport,
    mcp: &McpReport,
    faces: &FacesReport,
    delegation: &DelegationReport,
    trust: &TrustReport,
) -> Option<String> {
    if !missing.is_empty() {
        missing.sort_unstable();
        Some(format!(
            "node {n} did not discover {} within {} s",
            missing.join(", "),
            DISCOVER_TIMEOUT.as_secs()
        ))
    } else {
        call.error
            .as_ref()
            .map(|e| format!("the A2A call failed: {e}"))
            .or_else(|| {
                mcp.error
                    .as_ref()
                    .map(|e| format!("the MCP call failed: {e}"))
            })
            .or_else(|| {
                faces
                    .error
                    .as_ref()
                    .map(|e| format!("the ANP call or the ARD search failed: {e}"))
            })
            .or_else(|| {
                delegation
                    .error
                    .as_ref()
                    .map(|e| format!("the delegated call failed: {e}"))
            })
            .or_else(|| {
                trust
                    .error
                    .as_ref()
                    .map(|e| format!("the trust sample failed: {e}"))
            })
    }
}

/// Ask the node behind `c` for `tag` until `did` is among the answers or [`DISCOVER_TIMEOUT`]
/// passes. Returns the report (without name and node) and the publishing peer.
async fn search(c: &admin::Client, tag: &str, did: &str) -> (DiscoveryReport, Option<String>) {
    let started = Instant::now();
    let deadline = started + DISCOVER_TIMEOUT;
    let mut r = DiscoveryReport {
        tag: tag.to_owned(),
        name: String::new(),
        did: did.to_owned(),
        node: 0,
        found: false,
        via: None,
        published_by: None,
        attempts: 0,
        ms: 0,
        error: None,
    };
    let skills = [tag.to_owned()];
    loop {
        // Whether gossip has already brought it: the discovery below answers from the index.
        let in_index = matches!(c.advert(did).await, Ok(Some(_)));
        r.attempts += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, c.discover(&skills, admin::DEFAULT_LIMIT)).await {
            Ok(Ok(found)) => {
                if let Some(f) = found.into_iter().find(|f| f.did == did) {
                    r.found = true;
                    r.error = None;
                    r.via = Some(if in_index { "gossip" } else { "dht" }.into());
                    r.ms = ms(started.elapsed());
                    return (r, Some(f.peer_id));
                }
                r.error = Some(format!("{did} not among the answers"));
            }
            Ok(Err(e)) => r.error = Some(e.to_string()),
            Err(_) => r.error = Some("the last discovery request timed out".into()),
        }
        if Instant::now() + RETRY >= deadline {
            r.ms = ms(started.elapsed());
            return (r, None);
        }
        tokio::time::sleep(RETRY).await;
    }
}
