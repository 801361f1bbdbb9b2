//! Hosted agents: the A2A agents the node serves for others, from its configuration file.
//!
//! `agentnet up --config node.toml` reads a TOML file ([`crate::config`]). Each `[[agent]]`
//! ([`AgentConfig`]) becomes an A2A 1.0
//! server ([`agentnet_a2a::server::Server`]) mounted on the node's **public** listener at
//! `/a2a/<id>` (JSON-RPC at `POST /a2a/<id>`, HTTP+JSON under `/a2a/<id>/…`, its card at
//! `/a2a/<id>/.well-known/agent-card.json`), with its tasks in the node's RocksDB
//! ([`crate::tasks`]) and callers identified by their DID signatures ([`crate::a2a_auth`]).
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
//!   are signed as the node's DID, so the upstream sees this node (never its callers);
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
//! under the same policy ([`crate::mcp::hosted`]), advertised on its card by the extension
//! `urn:agentnet:mcp:v1`.

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

use crate::config::{ConfigError, FileConfig};
use crate::tasks::TaskDb;

pub use crate::config::{AgentConfig, Kind, PolicyName};

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
/// Most standard error kept from a failed command.
const MAX_STDERR: usize = 4096;

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
    /// The A2A server.
    pub server: Arc<Server>,
    /// Its MCP endpoint, if configured.
    pub mcp: Option<crate::mcp::hosted::Endpoint>,
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
    let description = a.description.clone().unwrap_or_else(|| match a.kind {
        Kind::Echo => "Echoes your message back".into(),
        Kind::Ask => "Asks your name, then greets you".into(),
        Kind::Command => "Runs a local command on your message".into(),
        Kind::Proxy => "Forwards to an upstream A2A agent".into(),
    });
    let kind = match a.kind {
        Kind::Echo => "echo",
        Kind::Ask => "ask",
        Kind::Command => "command",
        Kind::Proxy => "proxy",
    };
    let tags = a.tags.clone().unwrap_or_else(|| vec![kind.to_string()]);
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
    if a.mcp == Some(true) {
        if let Some(exts) = c
            .pointer_mut("/capabilities/extensions")
            .and_then(Value::as_array_mut)
        {
            exts.push(crate::mcp::hosted::extension(&format!(
                "{url}{}",
                crate::mcp::hosted::PATH
            )));
        }
    }
    c
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

/// Build every hosted agent of `cfg`.
pub fn build(
    cfg: &FileConfig,
    public_base: &str,
    data_dir: &Path,
    tasks: &Arc<TaskDb>,
    auth: Arc<dyn Authenticator>,
    node_signer: Option<Arc<dyn agentnet_a2a::client::Signer>>,
) -> Result<Vec<Hosted>, ConfigError> {
    let mut out = Vec::new();
    let commands = cfg.agent.iter().filter(|a| a.kind == Kind::Command).count();
    for a in &cfg.agent {
        let path = a.key.clone().unwrap_or_else(|| key_path(data_dir, &a.id));
        let key_err = |source| ConfigError::Key {
            agent: a.id.clone(),
            path: path.clone(),
            source,
        };
        let key = if a.key.is_some() {
            SecretKey::load(&path).map_err(key_err)?
        } else {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|source| ConfigError::Read {
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
        .map_err(|source| ConfigError::Card {
            agent: a.id.clone(),
            source,
        })?;
        let handler: Arc<dyn Handler> = match a.kind {
            Kind::Echo => Arc::new(samples::Echo),
            Kind::Ask => Arc::new(samples::AskName {
                work: Duration::from_millis(a.work_ms.unwrap_or(1000)),
            }),
            Kind::Command => {
                let work = work_dir(data_dir, &a.id);
                private_dir(&work).map_err(|source| ConfigError::WorkDir {
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
                    timeout: Duration::from_secs(a.timeout_secs.unwrap_or(60)),
                    max_output: a.max_output_bytes.unwrap_or(64 * 1024),
                })
            }
            Kind::Proxy => Arc::new(ProxyAgent {
                upstream: a.upstream.clone().unwrap_or_default(),
                allow_private: a.allow_private == Some(true),
                signer: node_signer.clone(),
                client: Arc::new(tokio::sync::OnceCell::new()),
            }),
        };
        let server = Server::new(
            ServerConfig::new(signed.clone())
                .policy(a.policy())
                .limits(limits_for(a.kind, commands)),
            handler,
            Arc::new(tasks.agent(&a.id)),
            auth.clone(),
        );
        let mcp = (a.mcp == Some(true)).then(|| crate::mcp::hosted::Endpoint {
            auth: auth.clone(),
            require_did: a.policy == PolicyName::Did,
            host: url::Url::parse(public_base)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default(),
            origin: crate::mcp::hosted::origin_of(public_base),
            turns: (a.kind != Kind::Echo).then(|| server.engine().clone()),
        });
        out.push(Hosted {
            id: a.id.clone(),
            key,
            card: signed,
            publish: a.publish.unwrap_or(true),
            ttl: a.ttl.unwrap_or(3600),
            server,
            mcp,
        });
    }
    Ok(out)
}

/// The routes of every hosted agent, for the public listener: `/a2a/<id>/…` (and its MCP
/// endpoint `/a2a/<id>/mcp`, whose sessions end when `stop` is cancelled), with the origin
/// layer the DID authenticator needs.
pub fn router(hosted: &[Hosted], stop: &tokio_util::sync::CancellationToken) -> axum::Router {
    let mut r = axum::Router::new();
    for h in hosted {
        let mut agent = h.server.router();
        if let Some(mcp) = &h.mcp {
            agent = mcp.router(stop.child_token()).merge(agent);
        }
        r = r.nest(&format!("{MOUNT}/{}", h.id), agent);
    }
    r.layer(axum::middleware::from_fn(crate::a2a_auth::origin_layer))
}

fn text_artifact(name: &str, text: String) -> Artifact {
    Artifact {
        artifact_id: uuid::Uuid::new_v4().to_string(),
        name: Some(name.to_string()),
        description: None,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
    }
}

/// Runs a local command per turn.
#[derive(Debug)]
struct CommandAgent {
    argv: Vec<String>,
    /// Its whole environment.
    env: Arc<std::collections::BTreeMap<String, String>>,
    /// Its working directory.
    work: Arc<PathBuf>,
    timeout: Duration,
    max_output: usize,
}

/// Read at most `max` bytes; `Err` with what was read if there was more.
async fn read_capped(
    r: &mut (impl tokio::io::AsyncRead + Unpin),
    max: usize,
) -> std::io::Result<Result<Vec<u8>, Vec<u8>>> {
    let mut out = Vec::new();
    (&mut *r).take(max as u64 + 1).read_to_end(&mut out).await?;
    if out.len() > max {
        out.truncate(max);
        return Ok(Err(out));
    }
    Ok(Ok(out))
}

/// A command's process group (the command leads it), killed when the turn ends however it ends
/// (done, failed, timed out, canceled, or its future dropped): nothing the command started in
/// the background outlives its turn. `kill_on_drop` alone kills only the command itself.
struct ProcessGroup(u32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let Ok(pgid) = libc::pid_t::try_from(self.0) else {
            return;
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours; a negative pid
        // names the process group. The group is ours: the command was started as its leader,
        // and its id cannot be reused while any member lives.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

impl Handler for CommandAgent {
    fn handle(
        &self,
        turn: Turn,
        _updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        let argv = self.argv.clone();
        let env = self.env.clone();
        let work = self.work.clone();
        let timeout = self.timeout;
        let max = self.max_output;
        Box::pin(async move {
            let input = text_of(&turn.message);
            // Nothing of the node's environment (its secrets, its AGENTNET_* settings) or
            // working directory reaches the command; PATH (in `env`) also finds argv[0].
            let mut child = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .env_clear()
                .envs(env.iter())
                .current_dir(work.as_path())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .process_group(0)
                .spawn()
                .map_err(|e| HandlerError(format!("starting {}: {e}", argv[0])))?;
            let _group = child.id().map(ProcessGroup);
            let mut stdin = child.stdin.take();
            let mut stdout = child
                .stdout
                .take()
                .ok_or_else(|| HandlerError("no stdout".into()))?;
            let mut stderr = child
                .stderr
                .take()
                .ok_or_else(|| HandlerError("no stderr".into()))?;
            let work = async {
                let feed = async {
                    if let Some(mut s) = stdin.take() {
                        // A command that does not read its input is fine.
                        let _ = s.write_all(input.as_bytes()).await;
                        let _ = s.shutdown().await;
                    }
                };
                // Standard error is read all along (a command must not block on a full pipe),
                // but only standard output decides when we stop waiting: past its cap the task
                // fails at once, whatever standard error does (it was read to its end before,
                // so a command writing without end waited for the timeout).
                let out_side = async { tokio::join!(feed, read_capped(&mut stdout, max)).1 };
                let err_side = read_capped(&mut stderr, MAX_STDERR);
                tokio::pin!(out_side, err_side);
                let mut err = None;
                let out = loop {
                    tokio::select! {
                        o = &mut out_side => break o,
                        e = &mut err_side, if err.is_none() => err = Some(e),
                    }
                };
                if matches!(out, Ok(Err(_))) {
                    return (out, err.unwrap_or(Ok(Ok(Vec::new()))));
                }
                let err = match err {
                    Some(e) => e,
                    None => err_side.await,
                };
                (out, err)
            };
            let (out, err) = tokio::select! {
                r = work => r,
                _ = turn.cancel.cancelled() => {
                    let _ = child.kill().await;
                    return Err(HandlerError("canceled".into()));
                }
                _ = tokio::time::sleep(timeout) => {
                    let _ = child.kill().await;
                    return Ok(Outcome::Failed {
                        message: agent_message(&turn, format!("the command took longer than {} s and was stopped", timeout.as_secs())),
                    });
                }
            };
            let out = out.map_err(|e| HandlerError(format!("reading output: {e}")))?;
            let Ok(out) = out else {
                let _ = child.kill().await;
                return Ok(Outcome::Failed {
                    message: agent_message(
                        &turn,
                        format!("the command wrote more than {max} bytes"),
                    ),
                });
            };
            let status = tokio::select! {
                s = child.wait() => s.map_err(|e| HandlerError(format!("waiting: {e}")))?,
                _ = tokio::time::sleep(timeout) => {
                    let _ = child.kill().await;
                    return Err(HandlerError("the command did not exit".into()));
                }
            };
            if !status.success() {
                let err = err
                    .ok()
                    .map(|r| r.unwrap_or_else(|e| e))
                    .unwrap_or_default();
                return Ok(Outcome::Failed {
                    message: agent_message(
                        &turn,
                        format!(
                            "the command failed ({status}): {}",
                            String::from_utf8_lossy(&err).trim()
                        ),
                    ),
                });
            }
            Ok(Outcome::Completed {
                message: None,
                artifacts: vec![text_artifact(
                    "output",
                    String::from_utf8_lossy(&out).into_owned(),
                )],
            })
        })
    }
}

/// Forwards turns to an upstream A2A agent.
#[derive(Clone)]
struct ProxyAgent {
    upstream: String,
    /// Upstream addresses may be loopback or private, and `http`.
    allow_private: bool,
    /// Signs upstream requests (the node's DID).
    signer: Option<Arc<dyn agentnet_a2a::client::Signer>>,
    client: Arc<tokio::sync::OnceCell<Arc<Client>>>,
}

/// Each upstream request: connect within 10 s, answer within 60 s.
const PROXY_TIMEOUTS: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(60));

/// The metadata key carrying the upstream task's ids in an `INPUT_REQUIRED` question.
const UPSTREAM_KEY: &str = "agentnet.upstream";
/// Longest a proxied turn follows its upstream task.
const PROXY_MAX_WAIT: Duration = Duration::from_secs(600);

impl ProxyAgent {
    async fn client(&self) -> Result<Arc<Client>, HandlerError> {
        self.client
            .get_or_try_init(|| async {
                let base = url::Url::parse(&self.upstream)
                    .map_err(|e| HandlerError(format!("upstream URL: {e}")))?;
                let http = self.pinned(&base).await?;
                let card = client::fetch_card(&http, &base, ClientLimits::default())
                    .await
                    .map_err(|e| HandlerError(format!("upstream card: {e}")))?;
                let endpoint = client::choose_interface(&card)
                    .map_err(|e| HandlerError(format!("upstream: {e}")))?;
                // The card names its own URL, perhaps on another host: checked the same way.
                let http = self.pinned(&endpoint.url).await?;
                Ok(Arc::new(Client::new(http, endpoint, self.signer.clone())))
            })
            .await
            .cloned()
    }

    /// An HTTP client for `url`, its addresses checked and pinned, no redirects.
    async fn pinned(&self, url: &url::Url) -> Result<reqwest::Client, HandlerError> {
        let addrs = crate::call::check_url(url, self.allow_private)
            .await
            .map_err(|e| HandlerError(format!("upstream: {e}")))?;
        crate::call::pinned(url, &addrs, PROXY_TIMEOUTS.0)
            .timeout(PROXY_TIMEOUTS.1)
            .build()
            .map_err(|e| HandlerError(format!("upstream client: {e}")))
    }
}

fn outcome_of(turn: &Turn, task: Task) -> Option<Outcome> {
    let status_msg = |fallback: &str| {
        let mut m = task
            .status
            .message
            .clone()
            .unwrap_or_else(|| agent_message(turn, fallback));
        m.task_id = Some(turn.task_id.clone());
        m.context_id = Some(turn.context_id.clone());
        m
    };
    match task.status.state {
        TaskState::Completed => Some(Outcome::Completed {
            message: task.status.message.clone().map(|_| status_msg("")),
            artifacts: task.artifacts.clone().unwrap_or_default(),
        }),
        TaskState::InputRequired | TaskState::AuthRequired => {
            let mut m = status_msg("the upstream agent needs more input");
            m.metadata.get_or_insert_with(Default::default).insert(
                UPSTREAM_KEY.into(),
                json!({"taskId": task.id, "contextId": task.context_id}),
            );
            Some(Outcome::InputRequired { message: m })
        }
        TaskState::Failed | TaskState::Canceled => Some(Outcome::Failed {
            message: status_msg("the upstream task failed"),
        }),
        TaskState::Rejected => Some(Outcome::Rejected {
            message: status_msg("the upstream agent rejected the task"),
        }),
        _ => None,
    }
}

impl Handler for ProxyAgent {
    fn handle(
        &self,
        turn: Turn,
        _updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        let this = self.clone();
        Box::pin(async move {
            let client = this.client().await?;
            // Continue the upstream task this one is waiting on, if any.
            let upstream_ids = turn.history.iter().rev().find_map(|m| {
                m.metadata.as_ref()?.get(UPSTREAM_KEY).and_then(|v| {
                    Some((
                        v["taskId"].as_str()?.to_string(),
                        v["contextId"].as_str()?.to_string(),
                    ))
                })
            });
            let mut msg = Message::new(turn.message.role.clone(), turn.message.parts.clone());
            if let Some((t, c)) = &upstream_ids {
                msg.task_id = Some(t.clone());
                msg.context_id = Some(c.clone());
            }
            let req = SendMessageRequest {
                message: msg,
                configuration: None,
                metadata: None,
                tenant: None,
            };
            let resp = tokio::select! {
                r = client.send_message(&req) => r.map_err(|e| HandlerError(format!("upstream: {e}")))?,
                _ = turn.cancel.cancelled() => return Err(HandlerError("canceled".into())),
            };
            let mut task = match resp {
                SendMessageResponse::Message(m) => {
                    return Ok(Outcome::Completed {
                        message: None,
                        artifacts: vec![Artifact {
                            artifact_id: uuid::Uuid::new_v4().to_string(),
                            name: Some("reply".into()),
                            description: None,
                            parts: m.parts,
                            metadata: None,
                            extensions: None,
                        }],
                    })
                }
                SendMessageResponse::Task(t) => t,
            };
            let deadline = tokio::time::Instant::now() + PROXY_MAX_WAIT;
            let mut wait = Duration::from_millis(100);
            loop {
                if let Some(o) = outcome_of(&turn, task.clone()) {
                    return Ok(o);
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(HandlerError(
                        "the upstream task did not finish in time".into(),
                    ));
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = turn.cancel.cancelled() => {
                        let _ = client.cancel_task(&CancelTaskRequest { id: task.id.clone(), metadata: None, tenant: None }).await;
                        return Err(HandlerError("canceled".into()));
                    }
                }
                wait = (wait * 2).min(Duration::from_secs(5));
                task = client
                    .get_task(&GetTaskRequest {
                        id: task.id.clone(),
                        history_length: Some(0),
                        tenant: None,
                    })
                    .await
                    .map_err(|e| HandlerError(format!("upstream: {e}")))?;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_AGENTS;

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
