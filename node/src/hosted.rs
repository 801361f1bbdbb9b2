//! Hosted agents: the A2A agents the node serves for others, from its configuration file.
//!
//! `agentnet up --config node.toml` reads a TOML file ([`crate::config`]). Each `[[agent]]`
//! ([`AgentConfig`]) becomes an A2A 1.0
//! server ([`agentnet_a2a::server::Server`]) mounted on the node's **public** listener at
//! `/a2a/<id>` (JSON-RPC at `POST /a2a/<id>`, HTTP+JSON under `/a2a/<id>/…`, its card at
//! `/a2a/<id>/.well-known/agent-card.json`), with its tasks in the node's RocksDB
//! ([`crate::hosted::tasks`]) and callers identified by their DID signatures ([`crate::hosted::a2a_auth`]).
//!
//! Kinds ([`Kind`]):
//! - `echo`: completes at once with the message's text as the artifact `echo`;
//! - `ask`: asks "What is your name?" (`INPUT_REQUIRED`) and greets on the answer; each turn
//!   works `work_ms` milliseconds (default 1000);
//! - `command`: runs `command` (argv, no shell) with the message's text on standard input; its
//!   standard output (at most `max_output_bytes`, default 64 KiB, else the task fails) becomes
//!   the artifact `output`; a non-zero exit fails the task with the end of standard error; the
//!   process is killed at `timeout_secs` (default 60) and when the task is canceled. It runs
//!   with a cleared environment plus `env` (a table; `PATH` is [`DEFAULT_PATH`] unless `env`
//!   names it) in a working directory of its own, `<data-dir>/hosted/<id>/work` (mode 0700),
//!   never the node's; at most [`MAX_PROCESSES_PER_CALLER`] per caller, [`MAX_PROCESSES_PER_SOURCE`] per source and
//!   [`MAX_PROCESSES_PER_AGENT`] per agent run at once, [`MAX_PROCESSES`] on the node (the
//!   engine refuses one more with `RESOURCE_EXHAUSTED`, before anything starts);
//! - `proxy`: forwards each turn to the upstream A2A server at `upstream` (its card is fetched
//!   from `<upstream>/.well-known/agent-card.json`, an interface chosen as `agentnet call`
//!   does), follows the upstream task to a terminal or interrupted state (polling `GetTask`
//!   with backoff), and maps it back: artifacts, status message, state. An `INPUT_REQUIRED`
//!   upstream task is continued by the caller's next message (the upstream ids travel in the
//!   question's metadata, `agentnet.upstream`); a cancel is forwarded. The upstream URL and
//!   the card's interface URL are checked as every outgoing call is ([`crate::call::check_url`]:
//!   `https` and public addresses, unless `allow_private = true` for a testnet or a loopback
//!   upstream), connections pinned to the checked addresses, no redirects followed; requests
//!   are signed as the proxy agent's own DID, so the upstream sees this agent (never its
//!   callers); a delegation chain the task came with goes upstream too, handed off to the
//!   upstream agent when the chain allows ([`crate::hosted::authority`]);
//! - `tck`: the official A2A TCK's scenarios ([`agentnet_a2a::samples::Tck`]): the message
//!   id's prefix chooses a text, file, file-URL or data artifact, a direct message reply, input
//!   required or a rejection; anything else completes. What the TCK runs against
//!   (`docs/A2A.md`, "TCK"); it takes no other keys;
//!
//! Each agent has a policy, `did` (default: callers must sign) or `open`, and a key: by default
//! a did:key generated at first start and kept in `<data-dir>/hosted/<id>.jwk` (mode 0600),
//! or the private JWK file `key`. Its card (built here from the configuration) lists both
//! interfaces with URLs on the node's public URL, declares the DID security scheme
//! (`securitySchemes.agentnetDid`, an HTTP auth scheme `DIDWba`) and the extension
//! [`DID_AUTH_EXTENSION`] in `capabilities.extensions` (required when the policy is `did`), is
//! signed with the agent's key (JWS, as `agentnet card sign` does), served as is, and published
//! to the network (unless `publish = false`) so others find it by its skill tags.
//!
//! With `mcp = true`, the agent also serves an MCP endpoint at `/a2a/<id>/mcp`
//! under the same policy ([`crate::hosted::mcp`]), advertised on its card by the extension
//! `urn:agentnet:mcp:v1`.
//!
//! Every agent also has an ANP face ([`anp`], `docs/ANP.md`): its Agent Description at
//! `/a2a/<id>/ad.json`, an OpenRPC interface and a JSON-RPC endpoint running the same engine
//! under the same policy and authenticator; the node lists them at
//! `/.well-known/agent-descriptions`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use agentnet_a2a::auth::{Authenticator, BoxFuture};
use agentnet_a2a::client::{self, Client, ClientLimits};
use agentnet_a2a::handler::{Handler, HandlerError, Outcome, Turn, Updates};
use agentnet_a2a::samples::{self, agent_message, text_of};
use agentnet_a2a::server::{Config as ServerConfig, Server};
use agentnet_a2a::types::{
    Artifact, CancelTaskRequest, GetTaskRequest, Message, Part, SendMessageRequest,
    SendMessageResponse, Task, TaskState,
};
use agentnet_did::{card, SecretKey};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::hosted::tasks::TaskDb;

pub mod a2a_auth;
pub mod anp;
pub mod authority;
mod command;
pub mod mcp;
mod proxy;
pub mod receipts;
pub mod tasks;

use command::CommandAgent;
use proxy::ProxyAgent;

pub mod config;

pub use config::{AgentConfig, AgentError, Kind, PolicyName};

/// The extension URI a card declares when its agent accepts DID-signed requests
/// (`docs/PROTOCOL.md`, "A2A: the DID security scheme").
pub const DID_AUTH_EXTENSION: &str = "urn:agentnet:a2a:did-auth:v1";
/// The name of the DID scheme in a card's `securitySchemes`.
pub const DID_SCHEME: &str = "agentnetDid";
/// Where hosted agents are mounted on the public listener.
pub const MOUNT: &str = "/a2a";
/// `PATH` of a `command` agent whose `env` names none.
pub const DEFAULT_PATH: &str = "/usr/bin:/bin";
/// Most `command` processes running at once on the node, all agents together: each holds three
/// pipes and a process slot, so 64 stay far under the usual limit of 1024 descriptors whatever
/// callers do. Shared out statically: each command agent gets `64 / <command agents>` of them
/// (at most [`MAX_PROCESSES_PER_AGENT`]), so that no agent's callers take another's.
pub const MAX_PROCESSES: usize = 64;
/// Most processes of one `command` agent running at once: 16.
pub const MAX_PROCESSES_PER_AGENT: usize = 16;
/// Most processes one caller (a DID; the anonymous callers of an `open` agent together) runs
/// at once on one `command` agent: 4.
pub const MAX_PROCESSES_PER_CALLER: usize = 4;
/// Command processes at once from one source (an IPv4 address, an IPv6 /64) at one agent,
/// whatever DIDs it signs with: 8.
pub const MAX_PROCESSES_PER_SOURCE: usize = 8;
/// A hosted agent, built and ready to mount.
pub struct Hosted {
    /// Its id (path segment).
    pub id: String,
    /// Its key.
    pub key: SecretKey,
    /// Its signed card, as served and published.
    pub card: Value,
    /// Publish it?
    pub publish: bool,
    /// Advert lifetime.
    pub ttl: u64,
    /// Signs its tasks' receipts (also those the restart fails, [`recover`]).
    pub sealer: Arc<receipts::Sealer>,
    /// The A2A server.
    pub server: Arc<Server>,
    /// Its MCP endpoint, if configured.
    pub mcp: Option<crate::hosted::mcp::Endpoint>,
    /// Its ANP face ([`anp`]).
    pub anp: Arc<anp::Face>,
    /// The node's public base URL.
    pub public_base: String,
}

impl std::fmt::Debug for Hosted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hosted")
            .field("id", &self.id)
            .field("did", &self.key.did_key().to_string())
            .finish_non_exhaustive()
    }
}

/// The key file of a hosted agent in `data_dir`.
pub fn key_path(data_dir: &Path, id: &str) -> PathBuf {
    data_dir.join("hosted").join(format!("{id}.jwk"))
}

/// The URL of agent `id` under `public_base`.
pub fn agent_url(public_base: &str, id: &str) -> String {
    format!("{}{MOUNT}/{id}", public_base.trim_end_matches('/'))
}

/// The unsigned card of `a`, served at `url`.
pub fn card_for(a: &AgentConfig, url: &str) -> Value {
    let name = a.name.clone().unwrap_or_else(|| a.id.clone());
    let description = a
        .description
        .clone()
        .unwrap_or_else(|| a.kind.default_description().to_owned());
    let tags = tags_of(a);
    let required = a.policy == PolicyName::Did;
    let mut c = json!({
        "name": name,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ],
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extensions": [{
                "uri": DID_AUTH_EXTENSION,
                "description": "Requests may be signed with the caller's DID: RFC 9421 HTTP Message Signatures in the ANP profile (Signature-Input, Signature, Content-Digest; keyid a DID URL of an authentication key); ANP's legacy Authorization: DIDWba header (aud: this host and port) starts new tasks only. Tasks belong to the signer's DID.",
                "required": required,
            }],
        },
        "securitySchemes": {
            DID_SCHEME: {"httpAuthSecurityScheme": {
                "scheme": "DIDWba",
                "description": format!("DID signature of the request, see {DID_AUTH_EXTENSION}"),
            }},
        },
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": a.id,
            "name": name,
            "description": description,
            "tags": tags,
        }],
    });
    if required {
        c["securityRequirements"] = json!([{"schemes": {DID_SCHEME: {"list": []}}}]);
    }
    if let Some(exts) = c
        .pointer_mut("/capabilities/extensions")
        .and_then(Value::as_array_mut)
    {
        if a.mcp == Some(true) {
            exts.push(crate::hosted::mcp::extension(&format!(
                "{url}{}",
                crate::hosted::mcp::PATH
            )));
        }
        exts.push(anp::extension(&format!("{url}{}", anp::AD_PATH)));
        exts.push(crate::hosted::authority::extension(
            a.require_delegation_from.as_deref().unwrap_or_default(),
        ));
        exts.push(receipts::extension());
        exts.push(json!({
            "uri": agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION,
            "description": "A SendMessage sent again with the same messageId by the same caller (a retry after a lost answer) is answered with the task the first one started, and a follow-up already received is not run again.",
            "required": false,
        }));
    }
    c
}

/// The skill tags of `a`: `tags`, default `[<kind>]`.
pub fn tags_of(a: &AgentConfig) -> Vec<String> {
    a.tags_or_kind()
}

/// The working directory of `command` agent `id`: `<data-dir>/hosted/<id>/work`.
pub fn work_dir(data_dir: &Path, id: &str) -> PathBuf {
    data_dir.join("hosted").join(id).join("work")
}

/// Create `dir` (and its parents) with mode 0700 for the last component, or make an existing
/// one 0700.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        }
        r => r,
    }
}

/// The engine's bounds for an agent of `kind` among `commands` command agents: a command
/// agent's turns are processes ([`MAX_PROCESSES`]).
fn limits_for(kind: Kind, commands: usize) -> agentnet_a2a::engine::Limits {
    let mut l = agentnet_a2a::engine::Limits::default();
    if kind == Kind::Command {
        l.max_running = (MAX_PROCESSES / commands.max(1)).clamp(1, MAX_PROCESSES_PER_AGENT);
        l.max_running_per_owner = MAX_PROCESSES_PER_CALLER.min(l.max_running);
        l.max_running_per_source = MAX_PROCESSES_PER_SOURCE.min(l.max_running);
    }
    l
}

/// What the hosted agents share with the rest of the node.
#[derive(Clone, Default)]
pub struct Shared {
    /// Where callers' receipts go (the node's audit log).
    pub audit: Option<crate::audit::Recorder>,
    /// The node's card pins (a `proxy` checks its upstream's card against them).
    pub pins: Option<Arc<crate::trust::pins::Pins>>,
}

/// Build every hosted agent of `cfg`.
pub fn build(
    agents: &[AgentConfig],
    public_base: &str,
    data_dir: &Path,
    tasks: &Arc<TaskDb>,
    auth: Arc<dyn Authenticator>,
    authority: &crate::hosted::authority::Shared,
    shared: Shared,
) -> Result<Vec<Hosted>, AgentError> {
    let Shared { audit, pins } = shared;
    let mut out = Vec::new();
    let commands = agents.iter().filter(|a| a.kind == Kind::Command).count();
    for a in agents {
        let path = a.key.clone().unwrap_or_else(|| key_path(data_dir, &a.id));
        let key_err = |source| AgentError::Key {
            agent: a.id.clone(),
            path: path.clone(),
            source,
        };
        let key = if a.key.is_some() {
            SecretKey::load(&path).map_err(key_err)?
        } else {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|source| AgentError::KeyDir {
                    path: parent.to_owned(),
                    source,
                })?;
            }
            SecretKey::load_or_create(&path).map_err(key_err)?.0
        };
        let url = agent_url(public_base, &a.id);
        let did = key.did_key();
        let signed = card::sign(
            &card_for(a, &url),
            &key,
            &did.with_fragment(did.method_specific_id()),
        )
        .map_err(|source| AgentError::Card {
            agent: a.id.clone(),
            source,
        })?;
        let subs = Arc::new(receipts::SubReceipts::default());
        let sealer = Arc::new(
            receipts::Sealer::new(&key, subs.clone()).with_chains(authority.memo().clone()),
        );
        let handler: Arc<dyn Handler> = match a.kind {
            Kind::Echo => Arc::new(samples::Echo),
            Kind::Tck => Arc::new(samples::Tck),
            Kind::Ask => Arc::new(samples::AskName {
                work: Duration::from_millis(a.work_ms.unwrap_or(config::DEFAULT_WORK_MS)),
            }),
            Kind::Command => {
                let work = work_dir(data_dir, &a.id);
                private_dir(&work).map_err(|source| AgentError::WorkDir {
                    agent: a.id.clone(),
                    path: work.clone(),
                    source,
                })?;
                let mut env = a.env.clone().unwrap_or_default();
                env.entry("PATH".into())
                    .or_insert_with(|| DEFAULT_PATH.into());
                Arc::new(CommandAgent {
                    argv: a.command.clone().unwrap_or_default(),
                    env: Arc::new(env),
                    work: Arc::new(work),
                    timeout: Duration::from_secs(
                        a.timeout_secs.unwrap_or(config::DEFAULT_TIMEOUT_SECS),
                    ),
                    max_output: a
                        .max_output_bytes
                        .unwrap_or(config::DEFAULT_MAX_OUTPUT_BYTES),
                })
            }
            Kind::Proxy => Arc::new(ProxyAgent {
                upstream: a.upstream.clone().unwrap_or_default(),
                allow_private: a.allow_private == Some(true),
                resolver: authority.resolver().clone(),
                identity: crate::identity::Identity::did_key(SecretKey::from_seed(&key.seed())),
                client: Arc::new(tokio::sync::OnceCell::new()),
                audit: audit.clone().map(|r| (r, did.to_string())),
                subs: subs.clone(),
                upstream_did: Arc::new(tokio::sync::OnceCell::new()),
                pins: pins.clone(),
                refuse_changed: a.refuse_changed_card == Some(true),
            }),
        };
        let gate = Arc::new(authority.authority(
            did.to_string(),
            tags_of(a),
            a.require_delegation_from.clone().unwrap_or_default(),
        ));
        let server = Server::new(
            ServerConfig::new(signed.clone())
                .policy(a.policy())
                .limits(limits_for(a.kind, commands))
                .gate(gate.clone()),
            handler,
            Arc::new(tasks.agent(&a.id).sealed({
                let sealer = sealer.clone();
                Arc::new(move |caller: Option<&str>, t: &mut Task| sealer.seal(caller, t))
            })),
            auth.clone(),
        );
        let mcp = (a.mcp == Some(true)).then(|| crate::hosted::mcp::Endpoint {
            auth: auth.clone(),
            require_did: a.policy == PolicyName::Did,
            host: url::Url::parse(public_base)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default(),
            origin: crate::hosted::mcp::origin_of(public_base),
            turns: (a.kind != Kind::Echo).then(|| server.engine().clone()),
            authority: Some(gate.clone()),
        });
        let anp = Arc::new(anp::Face::new(
            &signed,
            &did.to_string(),
            &url,
            a.policy == PolicyName::Did,
            auth.clone(),
        ));
        out.push(Hosted {
            anp,
            public_base: public_base.trim_end_matches('/').to_string(),
            id: a.id.clone(),
            key,
            card: signed,
            publish: a.publish.unwrap_or(true),
            ttl: a.ttl.unwrap_or(config::DEFAULT_TTL_SECS),
            server,
            mcp,
            sealer,
        });
    }
    Ok(out)
}

/// Fail the tasks the last run left working ([`TaskDb::recover_sealed`]), each signed by its
/// agent's [`receipts::Sealer`] (an agent no longer configured: unsigned). Call before serving.
/// `sealers`: each agent's id and [`Hosted::sealer`].
pub fn recover(
    tasks: &TaskDb,
    sealers: &[(String, Arc<receipts::Sealer>)],
) -> Result<usize, agentnet_a2a::store::StoreError> {
    tasks.recover_sealed(&|agent, caller, task| {
        if let Some((_, s)) = sealers.iter().find(|(id, _)| id == agent) {
            s.seal(caller, task);
        }
    })
}

/// The routes of every hosted agent, for the public listener: `/a2a/<id>/…` (and its MCP
/// endpoint `/a2a/<id>/mcp`, whose sessions end when `stop` is cancelled, and its ANP face,
/// [`anp`]), the node's `/.well-known/agent-descriptions`, with the origin layer the DID
/// authenticator needs.
pub fn router(hosted: &[Hosted], stop: &tokio_util::sync::CancellationToken) -> axum::Router {
    let base = hosted.first().map(|h| h.public_base.as_str()).unwrap_or("");
    let list = anp::well_known(base, &hosted.iter().map(|h| &*h.anp).collect::<Vec<_>>());
    let mut r = axum::Router::new().route(
        anp::WELL_KNOWN,
        axum::routing::get(move || async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                list.to_string(),
            )
        }),
    );
    for h in hosted {
        let mut agent = anp::router(h.anp.clone(), h.server.clone()).merge(h.server.router());
        if let Some(mcp) = &h.mcp {
            agent = mcp.router(stop.child_token()).merge(agent);
        }
        let base = format!("{MOUNT}/{}", h.id);
        // JSON-RPC at `<base>/` too: clients join "/" to the interface URL.
        r = r
            .nest(&base, agent)
            .route(&format!("{base}/"), h.server.jsonrpc_route());
    }
    r.layer(axum::middleware::from_fn(
        crate::hosted::a2a_auth::origin_layer,
    ))
}
#[cfg(test)]
mod tests {
    use super::*;
    use config::MAX_AGENTS;

    #[test]
    fn command_agents_share_the_node_s_processes() {
        let l = limits_for(Kind::Command, 1);
        assert_eq!(
            (
                l.max_running,
                l.max_running_per_owner,
                l.max_running_per_source
            ),
            (16, 4, 8)
        );
        assert_eq!(limits_for(Kind::Command, 8).max_running, 8);
        let l = limits_for(Kind::Command, MAX_AGENTS);
        assert_eq!((l.max_running, l.max_running_per_owner), (1, 1));
        for n in 1..=MAX_AGENTS {
            assert!(
                n * limits_for(Kind::Command, n).max_running <= MAX_PROCESSES,
                "{n}"
            );
        }
        // Other kinds keep the engine's defaults.
        assert_eq!(
            limits_for(Kind::Echo, 3),
            agentnet_a2a::engine::Limits::default()
        );
    }
}
