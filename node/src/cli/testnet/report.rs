//! What `agentnet testnet` found ([`Report`], as `--json` prints it) and its summary in text.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::Mode;

/// What the run found, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Every discovery succeeded.
    pub ok: bool,
    /// Where the nodes ran: `in-process`, `processes` or `namespaces`.
    pub mode: Mode,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The nodes.
    pub nodes: Vec<NodeReport>,
    /// The sample agents published.
    pub published: Vec<PublishedReport>,
    /// The last node's search for each agent.
    pub discoveries: Vec<DiscoveryReport>,
    /// The last node's A2A call of the agent node 1 hosts.
    pub call: CallReport,
    /// The last node's MCP tool call of the agent node 1 hosts with an MCP endpoint.
    pub mcp: McpReport,
    /// The same agent's ANP and ARD faces, used from the last node.
    pub faces: FacesReport,
    /// Authority across hops: a principal's delegation, checked at every hop.
    pub delegation: DelegationReport,
    /// Discovery is not approval: an endorsed agent ranked first, a changed card flagged.
    pub trust: TrustReport,
    /// Node 1's well-known documents.
    pub well_known: WellKnownReport,
    /// From the start (before node 1) to the last node having found every sample agent,
    /// milliseconds; none if it did not find them all.
    pub discovered_ms: Option<u64>,
    /// Wall time from start to the report, milliseconds.
    pub elapsed_ms: u64,
}

/// One node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeReport {
    /// 1-based.
    pub node: usize,
    /// The node's did:key.
    pub did: String,
    /// Its libp2p PeerId.
    pub peer_id: String,
    /// Its public HTTP listener (well-known files).
    pub http: String,
    /// Its admin listener.
    pub admin: String,
    /// Its data directory (`admin.token`, `node.json`).
    pub data_dir: PathBuf,
    /// The process it runs in: the testnet's own in process, its child with `--processes`.
    pub pid: u32,
    /// With `--processes`: its standard error (the node's log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
    /// With `--netns`: the network namespace it runs in (`ip netns exec NAME agentnet …`
    /// reaches its admin API, whose address is the namespace's loopback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// Its libp2p addresses.
    pub listen: Vec<String>,
    /// Connected peers when the report was made.
    pub peers: usize,
    /// Time `daemon::start` took (with `--processes`: from starting the child to its banner),
    /// milliseconds.
    pub start_ms: u64,
}

/// One published sample agent.
#[derive(Debug, Clone, Serialize)]
pub struct PublishedReport {
    /// The card's name.
    pub name: String,
    /// The agent's did:key (its own key, not the node's).
    pub did: String,
    /// Its skill tags.
    pub tags: Vec<String>,
    /// The node that published it.
    pub node: usize,
    /// The advertisement's sequence number.
    pub seq: u64,
    /// Time the publish request took, milliseconds.
    pub ms: u64,
}

/// The A2A call of the hosted sample agent.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CallReport {
    /// The skill tag it was found by.
    pub tag: String,
    /// The agent's DID.
    pub did: Option<String>,
    /// The interface called.
    pub url: Option<String>,
    /// The caller's DID (requests signed with RFC 9421).
    pub caller: String,
    /// The task.
    pub task: Option<String>,
    /// The question the agent asked (INPUT_REQUIRED).
    pub question: Option<String>,
    /// The final state (ProtoJSON name).
    pub state: Option<String>,
    /// The artifact texts.
    pub answer: Vec<String>,
    /// Time to find and verify the card, milliseconds.
    pub find_ms: u64,
    /// Time of the two turns, milliseconds.
    pub call_ms: u64,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The MCP tool call of the hosted sample agent with an MCP endpoint.
#[derive(Debug, Clone, Default, Serialize)]
pub struct McpReport {
    /// The skill tag it was found by.
    pub tag: String,
    /// The agent's DID.
    pub did: Option<String>,
    /// The MCP endpoint its verified card advertises.
    pub url: Option<String>,
    /// The protocol versions used, preferred first.
    pub versions: Vec<String>,
    /// The caller's DID (every HTTP request signed with RFC 9421).
    pub caller: String,
    /// The tools listed.
    pub tools: Vec<String>,
    /// The tool called.
    pub tool: String,
    /// The text sent.
    pub sent: String,
    /// The tool's structured result.
    pub result: Option<Value>,
    /// Time to find and verify the card, milliseconds.
    pub find_ms: u64,
    /// Time to list the tools and call one (two MCP sessions), milliseconds.
    pub call_ms: u64,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The ANP and ARD faces of node 1's `mcp-echo` agent, used from the last node: its Agent
/// Description followed from its verified card and called over ANP's JSON-RPC (signed), and
/// the last node's ARD registry searched for it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FacesReport {
    /// The agent's DID.
    pub did: Option<String>,
    /// Its Agent Description (`ad.json`).
    pub ad_url: Option<String>,
    /// Its ANP JSON-RPC endpoint and the method called.
    pub rpc_url: Option<String>,
    /// The method called.
    pub method: Option<String>,
    /// The text sent over ANP.
    pub sent: String,
    /// What the agent answered.
    pub answer: Option<Value>,
    /// Time to read the description and call, milliseconds.
    pub anp_ms: u64,
    /// The ARD search sent to the last node (`POST /search`).
    pub ard_search: Option<String>,
    /// The agent's ARD identifier in the answer.
    pub ard_identifier: Option<String>,
    /// Time of the search, milliseconds.
    pub ard_ms: u64,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Authority across hops (issue 18): a principal (a did:key made for the run, its key in
/// `<base>/principal.key`) delegates to the last node (the orchestrator), which calls node 2's
/// `specialist` (a proxy, requiring the principal's delegation); the specialist hands the chain
/// on to node 1's `summaries` (an echo agent, requiring it too). Then a narrower delegation (the
/// specialist only) is refused where it should be: at `summaries`, one hop further.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DelegationReport {
    /// The principal's DID.
    pub principal: String,
    /// The orchestrator (the last node's DID), the chain's holder.
    pub orchestrator: String,
    /// The specialist on node 2.
    pub specialist: Option<String>,
    /// The sub-agent on node 1.
    pub sub_agent: Option<String>,
    /// What the orchestrator sent, and what came back through both hops.
    pub sent: String,
    /// The answer's texts.
    pub answer: Vec<String>,
    /// Links in the chain the specialist's task ran under (principal → orchestrator →
    /// specialist); the specialist added one more for the sub-agent.
    pub links_at_specialist: usize,
    /// The digest of that chain.
    pub chain_digest: Option<String>,
    /// Time of the call through both hops, milliseconds.
    pub call_ms: u64,
    /// The orchestrator's audit log: the entry of the specialist's verified receipt.
    pub audit_entry: Option<u64>,
    /// That receipt's digest.
    pub receipt: Option<String>,
    /// The sub-receipts it names (the sub-agent's, which node 2's proxy verified and logged).
    pub sub_receipts: Vec<String>,
    /// Whether node 2's audit log holds each of them.
    pub sub_receipts_logged: bool,
    /// The narrower delegation's call: how the specialist's task ended, and why.
    pub refused_state: Option<String>,
    /// The refusal, as the sub-agent gave it.
    pub refused_reason: Option<String>,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Discovery is not approval (issue 19): node 1 publishes two agents with the skill
/// [`TRUST_TAG`], `Gale` then `Breeze` (Gale, known longer, shown first); the last node, whose
/// `[trust] endorsers` names node 1's DID, discovers them (pinning both cards); node 1's
/// operator endorses `Breeze` (`agentnet endorse`), and the last node ranks it first,
/// `endorsed`, with the reason; then `Gale`'s publisher re-publishes its card under the same
/// DID with another interface URL and an instruction aimed at a model in its skill, and the
/// last node shows it `CHANGED`, with the diff and the flags.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TrustReport {
    /// The skill tag.
    pub tag: String,
    /// The endorser: node 1's DID.
    pub endorser: String,
    /// The endorsed agent (`Breeze`).
    pub endorsed: Option<String>,
    /// The other agent (`Gale`), whose card changes.
    pub other: Option<String>,
    /// The last node's order (DIDs) before the endorsement.
    pub before: Vec<String>,
    /// ... and after it.
    pub after: Vec<String>,
    /// The endorsed agent's level at the last node, and why.
    pub level: Option<String>,
    /// Why.
    pub reasons: Vec<String>,
    /// From the endorsement to the last node ranking the agent first, milliseconds.
    pub endorse_ms: u64,
    /// The changed card's pin at the last node (`CHANGED`).
    pub pin: Option<String>,
    /// What changed.
    pub diff: Vec<String>,
    /// The flags the changed card raises (`rule at path`).
    pub flags: Vec<String>,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One discovery by the last node.
#[derive(Debug, Clone, Serialize)]
pub struct DiscoveryReport {
    /// The skill tag searched for.
    pub tag: String,
    /// The agent expected.
    pub name: String,
    /// Its DID.
    pub did: String,
    /// The searching node.
    pub node: usize,
    /// Found before the timeout.
    pub found: bool,
    /// `gossip`: already in the node's index when asked; `dht`: fetched from a provider found
    /// through the DHT during the search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The node the advertisement names as its publisher, when found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published_by: Option<usize>,
    /// Discovery requests made.
    pub attempts: u32,
    /// From the start of the search to the answer (or the timeout), milliseconds.
    pub ms: u64,
    /// Why it was not found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Node 1's well-known documents.
#[derive(Debug, Clone, Serialize)]
pub struct WellKnownReport {
    /// `/.well-known/did.json`.
    pub did_json: String,
    /// `/.well-known/agent-card.json`.
    pub agent_card_json: String,
    /// `/.well-known/agent-descriptions` (ANP: the hosted agents' descriptions).
    pub agent_descriptions: String,
    /// `/.well-known/ard.json` (ARD: the hosted agents, signed).
    pub ard_json: String,
}

/// The text summary of a run: the nodes, what they published and found, each sample's outcome,
/// and node 1's well-known files.
pub(super) fn print_summary(r: &Report, keep: bool) -> anyhow::Result<()> {
    print_network(r)?;
    print_calls(r)?;
    print_authority(r)?;
    print_well_known(r, keep)
}

/// The nodes, the adverts published and what the last node discovered.
fn print_network(r: &Report) -> anyhow::Result<()> {
    out!()?;
    out!(
        "summary ({} ms{})",
        r.elapsed_ms,
        match r.discovered_ms {
            Some(t) => format!("; every sample agent discovered at {t} ms"),
            None => String::new(),
        }
    )?;
    match r.mode {
        Mode::Processes => out!("  nodes, each an `agentnet up` process:")?,
        Mode::Namespaces => {
            out!("  nodes, each an `agentnet up` process in its own network namespace:")?
        }
        Mode::InProcess => out!("  nodes:")?,
    }
    for node in &r.nodes {
        out!(
            "    {:>2}  {}  http://{}  {} peer(s){}",
            node.node,
            node.peer_id,
            node.http,
            node.peers,
            match (&node.log, &node.netns) {
                (Some(log), None) => format!("  pid {}, log {}", node.pid, log.display()),
                (Some(log), Some(ns)) =>
                    format!("  pid {}, log {}, namespace {ns}", node.pid, log.display()),
                (None, _) => String::new(),
            }
        )?;
    }
    out!("  published {} advert(s):", r.published.len())?;
    for p in &r.published {
        out!(
            "    {:<10}  {}  from node {}  [{}]",
            p.name,
            p.did,
            p.node,
            p.tags.join(",")
        )?;
    }
    out!("  discovered from node {}:", r.nodes.len())?;
    for d in &r.discoveries {
        if d.found {
            out!(
                "    {:<13} → {:<10}  {:>5} ms  via {}",
                d.tag,
                d.name,
                d.ms,
                d.via.as_deref().unwrap_or("?")
            )?;
        } else {
            out!(
                "    {:<13} → {:<10}  NOT FOUND after {} ms: {}",
                d.tag,
                d.name,
                d.ms,
                d.error.as_deref().unwrap_or("no answer")
            )?;
        }
    }
    Ok(())
}

/// The calls of the last node: A2A, MCP, and the same agent's ANP and ARD faces.
fn print_calls(r: &Report) -> anyhow::Result<()> {
    let c = &r.call;
    out!(
        "  A2A call from node {} (signed as {}):",
        r.nodes.len(),
        c.caller
    )?;
    match &c.error {
        None => out!(
            "    {} → {}  found in {} ms; task {}: asked {:?}, then {} in {} ms: {}",
            c.tag,
            c.did.as_deref().unwrap_or("?"),
            c.find_ms,
            c.task.as_deref().unwrap_or("?"),
            c.question.as_deref().unwrap_or(""),
            c.state.as_deref().unwrap_or("?"),
            c.call_ms,
            c.answer.join(" ")
        )?,
        Some(e) => out!("    FAILED: {e}")?,
    }
    let m = &r.mcp;
    out!(
        "  MCP tool call from node {} (signed as {}):",
        r.nodes.len(),
        m.caller
    )?;
    match &m.error {
        None => out!(
            "    {} → {}  found in {} ms; {} tools [{}]; {}({:?}) → {} in {} ms",
            m.tag,
            m.did.as_deref().unwrap_or("?"),
            m.find_ms,
            m.url.as_deref().unwrap_or("?"),
            m.tools.join(", "),
            m.tool,
            m.sent,
            m.result.as_ref().map(|v| v.to_string()).unwrap_or_default(),
            m.call_ms
        )?,
        Some(e) => out!("    FAILED: {e}")?,
    }
    let f = &r.faces;
    out!(
        "  the same agent's ANP and ARD faces, from node {}:",
        r.nodes.len()
    )?;
    match &f.error {
        None => {
            out!(
                "    ANP: {} → {}({:?}) → {} in {} ms, signed",
                f.ad_url.as_deref().unwrap_or("?"),
                f.method.as_deref().unwrap_or("?"),
                f.sent,
                f.answer.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                f.anp_ms
            )?;
            out!(
                "    ARD: POST {} {{\"query\": {{\"text\": \"echo\"}}}} → {} in {} ms",
                f.ard_search.as_deref().unwrap_or("?"),
                f.ard_identifier.as_deref().unwrap_or("?"),
                f.ard_ms
            )?;
            if f.ard_identifier
                .as_deref()
                .is_some_and(|i| i.contains(".did.invalid:"))
            {
                out!(
                    "    (ARD names an agent urn:air:<publisher>:…; a did:key has no domain to \
                     vouch for it, so its publisher is the placeholder key.did.invalid: docs/ARD.md)"
                )?;
            }
        }
        Some(e) => out!("    FAILED: {e}")?,
    }
    Ok(())
}

/// Authority across hops (the delegation sample) and discovery that is not approval (trust).
fn print_authority(r: &Report) -> anyhow::Result<()> {
    let d = &r.delegation;
    out!("  authority across hops (principal {}):", d.principal)?;
    match &d.error {
        None => {
            out!(
                "    node {} → specialist {} (node 2) → summaries {} (node 1): {:?} in {} ms; {} links at the specialist, one handed on",
                r.nodes.len(),
                d.specialist.as_deref().unwrap_or("?"),
                d.sub_agent.as_deref().unwrap_or("?"),
                d.answer.join(" "),
                d.call_ms,
                d.links_at_specialist
            )?;
            out!(
                "    node {}'s audit log: entry {} (receipt {}) → sub-receipt {} in node 2's log; try `agentnet audit --task …`",
                r.nodes.len(),
                d.audit_entry.unwrap_or(0),
                d.receipt.as_deref().map(|x| &x[..x.len().min(12)]).unwrap_or("?"),
                d.sub_receipts.first().map(|x| &x[..x.len().min(12)]).unwrap_or("?")
            )?;
            out!(
                "    a delegation for the specialist only: refused at summaries, as it should be \
                 (the task ends {}): {}",
                d.refused_state
                    .as_deref()
                    .map(|s| s.trim_start_matches("TASK_STATE_").to_lowercase())
                    .unwrap_or_else(|| "?".into()),
                d.refused_reason.as_deref().unwrap_or("?")
            )?;
        }
        Some(e) => out!("    FAILED: {e}")?,
    }
    let t = &r.trust;
    out!("  discovery is not approval (node {}):", r.nodes.len())?;
    match &t.error {
        None => {
            out!(
                "    {}: Breeze {} ranked first after node 1 endorsed it ({} ms): {}",
                t.tag,
                t.endorsed.as_deref().unwrap_or("?"),
                t.endorse_ms,
                t.level.as_deref().unwrap_or("?")
            )?;
            out!(
                "    Gale {} re-published: {} ({}); flags: {}",
                t.other.as_deref().unwrap_or("?"),
                t.pin.as_deref().unwrap_or("?"),
                t.diff.join("; "),
                t.flags.join(", ")
            )?;
        }
        Some(e) => out!("    FAILED: {e}")?,
    }
    Ok(())
}

/// Node 1's well-known files, to fetch while the nodes run (with `keep`).
fn print_well_known(r: &Report, keep: bool) -> anyhow::Result<()> {
    if keep {
        out!("  node 1's well-known files:")?;
    } else {
        // The nodes stop when the summary is printed: the lines work with `--keep` only.
        out!("  node 1's well-known files (run with --keep to fetch them while the nodes run):")?;
    }
    out!("    curl {}", r.well_known.did_json)?;
    out!("    curl {}", r.well_known.agent_card_json)?;
    out!("    curl {}", r.well_known.agent_descriptions)?;
    out!("    curl {}", r.well_known.ard_json)?;
    Ok(())
}
