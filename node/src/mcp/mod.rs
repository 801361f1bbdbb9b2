//! The node as an MCP server (`docs/MCP.md`): tools that let an MCP host find agents of the
//! network by skill, check their signed cards, and delegate work to them over A2A.
//!
//! - [`Server`]: the tools, built on `rmcp` (both protocol eras: 2026-07-28 stateless, and
//!   2025-11-25 with `initialize`). It reaches the node through a [`Directory`] (the running
//!   node's admin API, or the daemon's own state) and calls agents with a [`Caller`] that signs
//!   as one configured identity.
//! - [`http`]: `/mcp`, Streamable HTTP on the admin listener (Origin, Host, body and credential
//!   checks).
//! - [`stdio`]: `agentnet mcp`, on standard input and output.
//!
//! Nothing here publishes, reads key material or signs anything but the A2A requests of
//! `send_message`, `get_task` and `cancel_task`.

pub mod client;
pub mod hosted;
pub mod http;
pub mod stdio;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use agentnet_did::Resolver;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::admin::{Directory, Found};
use crate::call::{self, Agent, CallError, CallOptions, Caller, Outcome, Target};

/// Most skill tags in one search.
pub const MAX_TAGS: usize = 8;
/// Longest skill tag, bytes.
pub const MAX_TAG_LEN: usize = agentnet_discovery::tags::MAX_TAG_LEN;
/// Default number of agents `discover_agents` returns.
pub const DEFAULT_LIMIT: usize = 10;
/// Most agents `discover_agents` returns.
pub const MAX_LIMIT: usize = 50;
/// Longest DID accepted.
pub const MAX_DID: usize = agentnet_did::id::MAX_DID_LEN;
/// Longest task id accepted.
pub const MAX_TASK_ID: usize = 256;
/// Longest message text, bytes.
pub const MAX_TEXT: usize = call::MAX_TEXT;
/// Default and longest wait of `send_message`, seconds (the admin listener gives a request 90).
pub const DEFAULT_WAIT_SECS: u64 = 30;
/// Longest wait of `send_message`, seconds.
pub const MAX_WAIT_SECS: u64 = 60;
/// Longest description of an agent or skill returned by `discover_agents`, characters.
const MAX_SUMMARY: usize = 500;
/// Largest `/mcp` request body.
pub const MAX_BODY: usize = 512 * 1024;

/// What the tools need besides the node: how to verify and call agents.
#[derive(Clone)]
pub struct Config {
    /// Resolves DIDs for `resolve_did` and card verification.
    pub resolver: Resolver,
    /// Signs A2A requests (the node's did:key, or `agentnet mcp --as`); `None`: anonymous.
    pub signer: Option<Arc<dyn agentnet_a2a::client::Signer>>,
    /// Allow agent interfaces on loopback and private addresses and plain http (testnets).
    pub allow_private: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("signed", &self.signer.is_some())
            .field("allow_private", &self.allow_private)
            .finish_non_exhaustive()
    }
}

struct Inner {
    directory: Arc<dyn Directory>,
    resolver: Resolver,
    caller: Caller,
}

/// The MCP server: cheap to clone (one per HTTP request in the stateless era).
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

// ---- arguments ----

/// `discover_agents`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscoverArgs {
    /// Skill tags the agents must all have, such as ["translation"] (1 to 8 tags, each 1 to 64
    /// bytes).
    #[schemars(length(min = 1, max = 8))]
    pub tags: Vec<String>,
    /// How many agents to return at most (1 to 50, default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 50))]
    pub limit: Option<u32>,
}

/// An agent's DID.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DidArgs {
    /// The DID, such as "did:key:z6Mk…" or "did:web:example.com".
    #[schemars(length(min = 1, max = 2048))]
    pub did: String,
}

/// `send_message`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// The message for the agent (1 to 65536 bytes).
    #[schemars(length(min = 1, max = 65536))]
    pub text: String,
    /// The agent's DID (from discover_agents). With `tags`: only this agent.
    #[serde(default)]
    #[schemars(length(min = 1, max = 2048))]
    pub did: Option<String>,
    /// Instead of a DID: skill tags; the first agent found with all of them whose card
    /// verifies gets the message.
    #[serde(default)]
    #[schemars(length(min = 1, max = 8))]
    pub tags: Option<Vec<String>>,
    /// Continue this task of the agent (it must be waiting for input, state
    /// TASK_STATE_INPUT_REQUIRED); needs `did`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 256))]
    pub task_id: Option<String>,
    /// Seconds to wait for the task to finish or ask for input (0 to 60, default 30); 0
    /// returns as soon as the agent accepted the message.
    #[serde(default)]
    #[schemars(range(min = 0, max = 60))]
    pub wait_secs: Option<u64>,
}

/// A task of an agent.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskArgs {
    /// The agent's DID.
    #[schemars(length(min = 1, max = 2048))]
    pub did: String,
    /// The task id (from send_message).
    #[schemars(length(min = 1, max = 256))]
    pub task_id: String,
}

/// No arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

// ---- results ----

/// A skill of an agent.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SkillSummary {
    /// Its id.
    pub id: Option<String>,
    /// Its name.
    pub name: Option<String>,
    /// What it does (shortened to 500 characters).
    pub description: Option<String>,
    /// Its tags.
    pub tags: Vec<String>,
}

/// A discovered agent. Its card is not verified yet: get_agent_card does it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AgentSummary {
    /// The agent's DID: what the other tools take.
    pub did: String,
    /// Its name, from its card.
    pub name: Option<String>,
    /// What it does, from its card (shortened to 500 characters).
    pub description: Option<String>,
    /// Its skill tags.
    pub tags: Vec<String>,
    /// Its skills.
    pub skills: Vec<SkillSummary>,
    /// False for a did:wba `e1_` DID, whose domain never vouched for its key.
    pub domain_verified: bool,
    /// When its advertisement expires, Unix seconds.
    pub expires_at: u64,
    /// The libp2p peer that published it.
    pub peer_id: String,
}

/// `discover_agents`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Discovered {
    /// The agents found, best first; empty if none.
    pub agents: Vec<AgentSummary>,
}

/// An interface of an agent.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Interface {
    /// Its URL.
    pub url: String,
    /// Its A2A binding (JSONRPC or HTTP+JSON).
    pub binding: String,
}

/// `get_agent_card`: a card that verified.
#[derive(Debug, Serialize, JsonSchema)]
pub struct VerifiedCard {
    /// The agent's DID.
    pub did: String,
    /// Every signature on the card verifies against its signer's DID document.
    pub verified: bool,
    /// The key ids (DID URLs) that signed the card.
    pub signers: Vec<String>,
    /// At least one signer is the agent's own DID.
    pub did_bound: bool,
    /// False for a did:wba `e1_` DID, whose domain never vouched for its key.
    pub domain_verified: bool,
    /// The interface send_message would use.
    pub interface: Interface,
    /// The signed A2A Agent Card.
    pub card: Value,
}

/// `resolve_did`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Resolved {
    /// The DID.
    pub did: String,
    /// Its DID document.
    pub document: Value,
}

/// A task or message from an agent (`send_message`, `get_task`, `cancel_task`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct TaskResult {
    /// The agent's DID.
    pub did: String,
    /// "task" or "message" (an agent may answer with a message and no task).
    pub kind: String,
    /// The task id, for get_task, cancel_task and send_message's task_id.
    pub task_id: Option<String>,
    /// The task's context id.
    pub context_id: Option<String>,
    /// The task's state, such as TASK_STATE_COMPLETED, TASK_STATE_WORKING,
    /// TASK_STATE_INPUT_REQUIRED, TASK_STATE_FAILED, TASK_STATE_CANCELED.
    pub state: Option<String>,
    /// Done, or waiting for input: nothing more happens without the caller. False: still
    /// working; read it again later with get_task.
    pub settled: bool,
    /// The text of the task's artifacts, or of the message.
    pub texts: Vec<String>,
    /// What a task waiting for input asks.
    pub question: Option<String>,
    /// The A2A Task, as the agent returned it.
    pub task: Option<Value>,
    /// The A2A Message, if the agent answered with one.
    pub message: Option<Value>,
}

/// A connected peer.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PeerSummary {
    /// Its PeerId.
    pub peer_id: String,
    /// The addresses it listens on.
    pub addrs: Vec<String>,
}

/// `list_peers`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PeerList {
    /// This node's PeerId.
    pub peer_id: String,
    /// Where this node listens.
    pub listen: Vec<String>,
    /// Connected peers.
    pub peers: Vec<PeerSummary>,
    /// The node's gossip counters.
    pub stats: Value,
}

// ---- checks ----

fn check_did(did: &str) -> Result<(), String> {
    if did.is_empty() || did.len() > MAX_DID {
        return Err(format!("`did` must be 1 to {MAX_DID} bytes"));
    }
    agentnet_did::Did::parse(did)
        .map(|_| ())
        .map_err(|e| format!("{:?} is not a DID: {e}", shorten(did, 80)))
}

fn check_tags(tags: &[String]) -> Result<(), String> {
    if tags.is_empty() || tags.len() > MAX_TAGS {
        return Err(format!("give 1 to {MAX_TAGS} tags, not {}", tags.len()));
    }
    for t in tags {
        if t.len() > MAX_TAG_LEN || agentnet_discovery::tags::normalize(t).is_none() {
            return Err(format!(
                "tag {:?} is not usable: 1 to {MAX_TAG_LEN} bytes, no control characters",
                shorten(t, 80)
            ));
        }
    }
    Ok(())
}

fn check_task_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_TASK_ID || id.chars().any(char::is_control) {
        return Err(format!(
            "`task_id` must be 1 to {MAX_TASK_ID} bytes without control characters"
        ));
    }
    Ok(())
}

/// The first `n` characters of `s`, with `…` if it had more.
fn shorten(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        None => s.to_owned(),
        Some((end, _)) => {
            let mut out = String::with_capacity(end + '…'.len_utf8());
            out.push_str(&s[..end]);
            out.push('…');
            out
        }
    }
}

fn text_of(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(|s| shorten(s, MAX_SUMMARY))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .take(agentnet_discovery::tags::MAX_TAGS)
                .map(|s| shorten(s, MAX_TAG_LEN))
                .collect()
        })
        .unwrap_or_default()
}

/// The parts of an advertisement that a summary shows, borrowed from its bytes: reading the
/// whole card as a `Value` was most of `discover_agents`' cost (profiled, docs/BENCHMARKS.md).
#[derive(Deserialize)]
struct AdvertView<'a> {
    #[serde(borrow)]
    card: CardView<'a>,
}

#[derive(Deserialize)]
struct CardView<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    skills: Vec<SkillView<'a>>,
}

#[derive(Deserialize)]
struct SkillView<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tags: Vec<Cow<'a, str>>,
}

fn short(s: Option<&str>, n: usize) -> Option<String> {
    s.map(|s| shorten(s, n))
}

/// A stored advertisement's summary. A card whose fields are not of the expected JSON types
/// (validation checks the card's signature, not its shape) is read as a `Value` instead, the
/// way [`summary`] tolerates it: a field of another type is left out.
pub(crate) fn summarize(a: agentnet_discovery::store::StoredAdvert) -> AgentSummary {
    let Ok(view) = serde_json::from_slice::<AdvertView>(&a.bytes) else {
        return summary(crate::admin::found(a));
    };
    let card = view.card;
    AgentSummary {
        name: short(card.name.as_deref(), MAX_SUMMARY),
        description: short(card.description.as_deref(), MAX_SUMMARY),
        skills: card
            .skills
            .iter()
            .take(32)
            .map(|s| SkillSummary {
                id: short(s.id.as_deref(), MAX_SUMMARY),
                name: short(s.name.as_deref(), MAX_SUMMARY),
                description: short(s.description.as_deref(), MAX_SUMMARY),
                tags: s
                    .tags
                    .iter()
                    .take(agentnet_discovery::tags::MAX_TAGS)
                    .map(|t| shorten(t, MAX_TAG_LEN))
                    .collect(),
            })
            .collect(),
        domain_verified: a.domain_verified(),
        did: a.did,
        tags: a.tags,
        expires_at: a.expires_at,
        peer_id: a.peer_id,
    }
}

/// A found agent's summary, from its card as a JSON value.
pub(crate) fn summary(f: Found) -> AgentSummary {
    let skills = f
        .card
        .get("skills")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .take(32)
                .map(|s| SkillSummary {
                    id: text_of(s, "id"),
                    name: text_of(s, "name"),
                    description: text_of(s, "description"),
                    tags: strings(s.get("tags")),
                })
                .collect()
        })
        .unwrap_or_default();
    AgentSummary {
        name: text_of(&f.card, "name"),
        description: text_of(&f.card, "description"),
        did: f.did,
        tags: f.tags,
        skills,
        domain_verified: f.domain_verified,
        expires_at: f.expires_at,
        peer_id: f.peer_id,
    }
}

fn task_result(did: &str, outcome: &Outcome) -> TaskResult {
    let texts = call::texts(outcome);
    match outcome {
        Outcome::Task(t) => TaskResult {
            did: did.to_owned(),
            kind: "task".into(),
            task_id: Some(t.id.clone()),
            context_id: Some(t.context_id.clone()),
            state: Some(call::state_name(&t.status.state)),
            settled: call::is_settled(&t.status.state),
            texts,
            question: matches!(
                t.status.state,
                agentnet_a2a::types::TaskState::InputRequired
                    | agentnet_a2a::types::TaskState::AuthRequired
            )
            .then(|| call::status_text(t))
            .flatten(),
            task: serde_json::to_value(t).ok(),
            message: None,
        },
        Outcome::Message(m) => TaskResult {
            did: did.to_owned(),
            kind: "message".into(),
            task_id: None,
            context_id: m.context_id.clone(),
            state: None,
            settled: true,
            texts,
            question: None,
            task: None,
            message: serde_json::to_value(m).ok(),
        },
    }
}

/// What the model reads when a call failed.
fn explain(e: &CallError) -> String {
    match e {
        CallError::NotFound(_) => format!("{e}. Use discover_agents to find agents by skill."),
        CallError::CardSignature { .. } | CallError::NotTheAgents { .. } => {
            format!("the agent's card is not trustworthy: {e}. Do not use this agent.")
        }
        CallError::Agent(_) => format!("the agent answered with an error: {e}"),
        _ => e.to_string(),
    }
}

#[tool_router]
impl Server {
    /// A server reaching the node through `directory`.
    pub fn new(directory: Arc<dyn Directory>, cfg: Config) -> Self {
        let opts = CallOptions {
            allow_private: cfg.allow_private,
            timeout: Duration::from_secs(MAX_WAIT_SECS),
            poll_initial: Duration::from_millis(100),
            poll_max: Duration::from_secs(2),
            ..Default::default()
        };
        let caller = Caller::new(
            Some(directory.clone()),
            cfg.resolver.clone(),
            cfg.signer,
            opts,
        );
        Server {
            inner: Arc::new(Inner {
                directory,
                resolver: cfg.resolver,
                caller,
            }),
            tool_router: Self::tool_router(),
        }
    }

    async fn find(&self, target: Target) -> Result<Agent, String> {
        let mut quiet = |_: call::Progress| {};
        match (self.inner.caller.find(&target, &mut quiet).await, &target) {
            (Ok(a), _) => Ok(a),
            (Err(CallError::NotFound(_)), Target::Did(did)) => Err(format!(
                "the node knows no live advertisement of {}. Use discover_agents to find \
                 agents by skill.",
                shorten(did, 200)
            )),
            (Err(e), _) => Err(explain(&e)),
        }
    }

    /// `get_task`, or `cancel_task` when `cancel`.
    async fn on_task(&self, args: TaskArgs, cancel: bool) -> Result<Json<TaskResult>, String> {
        check_did(&args.did)?;
        check_task_id(&args.task_id)?;
        let agent = self.find(Target::Did(args.did)).await?;
        let caller = &self.inner.caller;
        let t = if cancel {
            caller.cancel_task(&agent, &args.task_id).await
        } else {
            caller.get_task(&agent, &args.task_id).await
        }
        .map_err(|e| explain(&e))?;
        Ok(Json(task_result(
            agent.did.as_str(),
            &Outcome::Task(Box::new(t)),
        )))
    }

    #[tool(
        description = "Find agents of the open agent network that have all the given skill tags \
        (the node's index first, then the network). Returns each agent's DID, name, description \
        and skills. The cards are not verified here: call get_agent_card to check an agent's \
        identity, or send_message, which verifies before sending.",
        annotations(read_only_hint = true, open_world_hint = true)
    )]
    async fn discover_agents(
        &self,
        Parameters(args): Parameters<DiscoverArgs>,
    ) -> Result<Json<Discovered>, String> {
        check_tags(&args.tags)?;
        let limit = match args.limit {
            None => DEFAULT_LIMIT,
            Some(n) if (1..=MAX_LIMIT as u32).contains(&n) => n as usize,
            Some(n) => return Err(format!("`limit` must be 1 to {MAX_LIMIT}, not {n}")),
        };
        let mut agents = self
            .inner
            .directory
            .summaries(&args.tags, limit)
            .await
            .map_err(|e| format!("discovering agents: {e}"))?;
        agents.truncate(limit);
        Ok(Json(Discovered { agents }))
    }

    #[tool(
        description = "Get an agent's signed A2A Agent Card by its DID, verified: every \
        signature must check out against its signer's DID document and one signer must be the \
        agent's own DID. Fails (isError) if the node knows no such agent or the card does not \
        verify; such an agent must not be trusted.",
        annotations(read_only_hint = true, open_world_hint = true)
    )]
    async fn get_agent_card(
        &self,
        Parameters(args): Parameters<DidArgs>,
    ) -> Result<Json<VerifiedCard>, String> {
        check_did(&args.did)?;
        let agent = self.find(Target::Did(args.did.clone())).await?;
        Ok(Json(VerifiedCard {
            domain_verified: agentnet_discovery::advert::domain_verified(&args.did),
            did: args.did,
            verified: true,
            signers: agent.signers,
            did_bound: true,
            interface: Interface {
                url: agent.endpoint.url.to_string(),
                binding: agent.endpoint.binding.name().into(),
            },
            card: agent.card,
        }))
    }

    #[tool(
        description = "Resolve a DID (did:key, did:web, did:wba) to its DID document: its keys \
        and services.",
        annotations(read_only_hint = true, open_world_hint = true)
    )]
    async fn resolve_did(
        &self,
        Parameters(args): Parameters<DidArgs>,
    ) -> Result<Json<Resolved>, String> {
        check_did(&args.did)?;
        let doc = self
            .inner
            .resolver
            .resolve_str(&args.did)
            .await
            .map_err(|e| format!("resolving {}: {e}", shorten(&args.did, 200)))?;
        Ok(Json(Resolved {
            did: args.did,
            document: doc.to_json(),
        }))
    }

    #[tool(
        description = "Send a text message to an agent, by DID or by skill tags (the first \
        agent with all the tags whose card verifies), signed with this node's DID. Waits up to \
        wait_secs for the task to finish or to ask for input, and returns the task (its state, \
        the text of its artifacts, its question if it waits for input) or the agent's message. \
        A task still working (settled: false) can be read later with get_task. To answer a \
        task waiting for input, call again with its did and task_id.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn send_message(
        &self,
        Parameters(args): Parameters<SendArgs>,
    ) -> Result<Json<TaskResult>, String> {
        if args.text.is_empty() || args.text.len() > MAX_TEXT {
            return Err(format!("`text` must be 1 to {MAX_TEXT} bytes"));
        }
        if let Some(d) = &args.did {
            check_did(d)?;
        }
        if let Some(t) = &args.tags {
            check_tags(t)?;
        }
        if let Some(id) = &args.task_id {
            check_task_id(id)?;
            if args.did.is_none() {
                return Err("continuing a task (`task_id`) needs the agent's `did`".into());
            }
        }
        let wait = args.wait_secs.unwrap_or(DEFAULT_WAIT_SECS);
        if wait > MAX_WAIT_SECS {
            return Err(format!("`wait_secs` must be 0 to {MAX_WAIT_SECS}"));
        }
        let target = match (args.tags, args.did) {
            (Some(tags), did) => Target::Skill { tags, did },
            (None, Some(did)) => Target::Did(did),
            (None, None) => return Err("give the agent's `did` or skill `tags`".into()),
        };
        let agent = self.find(target).await?;
        let did = agent.did.to_string();
        let caller = &self.inner.caller;
        let first = caller
            .start(&agent, &args.text, args.task_id.as_deref(), wait == 0)
            .await
            .map_err(|e| explain(&e))?;
        let outcome = match first {
            Outcome::Task(t) if wait > 0 && !call::is_settled(&t.status.state) => {
                let t = caller
                    .wait(&agent, &t.id, Duration::from_secs(wait))
                    .await
                    .map_err(|e| explain(&e))?;
                Outcome::Task(Box::new(t))
            }
            o => o,
        };
        Ok(Json(task_result(&did, &outcome)))
    }

    #[tool(
        description = "Read a task of an agent (by the agent's DID and the task id that \
        send_message returned): its state and the text of its artifacts.",
        annotations(read_only_hint = true, open_world_hint = true)
    )]
    async fn get_task(
        &self,
        Parameters(args): Parameters<TaskArgs>,
    ) -> Result<Json<TaskResult>, String> {
        self.on_task(args, false).await
    }

    #[tool(
        description = "Cancel a task of an agent that is not finished (working, or waiting \
        for input). Returns the task in its new state.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            open_world_hint = true
        )
    )]
    async fn cancel_task(
        &self,
        Parameters(args): Parameters<TaskArgs>,
    ) -> Result<Json<TaskResult>, String> {
        self.on_task(args, true).await
    }

    #[tool(
        description = "List the peers this node is connected to in the agent network, and its \
        gossip counters.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_peers(
        &self,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<Json<PeerList>, String> {
        let p = self
            .inner
            .directory
            .peers()
            .await
            .map_err(|e| format!("reading the node's peers: {e}"))?;
        Ok(Json(PeerList {
            peer_id: p.peer_id,
            listen: p.listen,
            peers: p
                .peers
                .into_iter()
                .map(|p| PeerSummary {
                    peer_id: p.peer_id,
                    addrs: p.addrs,
                })
                .collect(),
            stats: serde_json::to_value(p.stats).unwrap_or(Value::Null),
        }))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agentnet", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools of an agentnet node: find AI agents of an open network by skill \
                 (discover_agents), check who they are (get_agent_card, resolve_did), and \
                 delegate work to them over A2A (send_message, get_task, cancel_task).",
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_bounds() {
        assert!(check_tags(&["echo".into()]).is_ok());
        assert!(check_tags(&[]).is_err());
        assert!(check_tags(&vec!["a".to_string(); MAX_TAGS + 1]).is_err());
        assert!(check_tags(&["x".repeat(MAX_TAG_LEN + 1)]).is_err());
        assert!(check_tags(&["a\u{1}b".into()]).is_err());
        assert!(check_did("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK").is_ok());
        assert!(check_did("not a did").is_err());
        assert!(check_did(&format!("did:web:{}", "a".repeat(MAX_DID))).is_err());
        assert!(check_task_id("t1").is_ok());
        assert!(check_task_id("").is_err());
        assert!(check_task_id(&"t".repeat(MAX_TASK_ID + 1)).is_err());
        assert!(check_task_id("a\nb").is_err());
    }

    #[test]
    fn arguments_refuse_unknown_members() {
        let e = serde_json::from_value::<DidArgs>(serde_json::json!({"did": "x", "key": "y"}));
        assert!(e.is_err());
        let e = serde_json::from_value::<NoArgs>(serde_json::json!({"publish": true}));
        assert!(e.is_err());
    }

    fn stored(card: Value) -> agentnet_discovery::store::StoredAdvert {
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        let bytes = serde_json::to_vec(&serde_json::json!({
            "v": 1, "did": did, "card": card, "peerId": "12D3KooW", "addrs": [], "seq": 3,
            "issuedAt": 1, "expiresAt": 2,
            "proof": {"protected": "e30", "signature": "AA"}
        }))
        .unwrap();
        agentnet_discovery::store::StoredAdvert {
            did: did.into(),
            seq: 3,
            issued_at: 1,
            expires_at: 2,
            tags: vec!["echo".into()],
            peer_id: "12D3KooW".into(),
            bytes,
        }
    }

    /// The fast reading of a stored advertisement says what the `Value` reading says, for
    /// cards of the expected shape and for cards that are not.
    #[test]
    fn summaries_read_from_bytes_match_the_value_reading() {
        let long = "é".repeat(MAX_SUMMARY + 7);
        let cards = [
            serde_json::json!({"name": "A", "description": long, "skills": [
                {"id": "s", "name": "S", "description": "d", "tags": ["echo", "x".repeat(300)]},
                {"id": "t"}
            ]}),
            serde_json::json!({"name": 5, "skills": [{"id": "s", "tags": ["echo", 7]}]}),
            serde_json::json!({"name": null, "skills": "none"}),
            serde_json::json!({"skills": (0..40).map(|i| serde_json::json!({"id": i.to_string(),
                "tags": (0..20).map(|j| format!("t{j}")).collect::<Vec<_>>()})).collect::<Vec<_>>()}),
            serde_json::json!("not an object"),
        ];
        for card in cards {
            let a = stored(card.clone());
            let fast = serde_json::to_value(summarize(a.clone())).unwrap();
            let slow = serde_json::to_value(summary(crate::admin::found(a))).unwrap();
            assert_eq!(fast, slow, "card {card}");
        }
        let s = summarize(stored(serde_json::json!({"description": long})));
        let d = s.description.unwrap();
        assert_eq!(d.chars().count(), MAX_SUMMARY + 1);
        assert!(d.ends_with('…'));
    }
}
