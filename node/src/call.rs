//! Calling agents over A2A 1.0: the library behind `agentnet call` (and the MCP bridge).
//!
//! A call goes, in this order, and stops at the first refusal, before anything is sent to the
//! agent:
//!
//! 1. **Find** the agent's card: by DID in the node's index (`GET /admin/v1/adverts/{did}`), or
//!    by skill through the node's `discover` (its index, then the network), optionally narrowed
//!    to one DID; or a card the caller already holds ([`Target::Card`]).
//! 2. **Verify** every signature on the card (keys from the signers' DID documents, under
//!    `assertionMethod`), and that at least one signer is the agent's DID: a card signed by
//!    someone else is not the agent's, whatever it says.
//! 3. **Choose** an interface whose binding (`JSONRPC`, `HTTP+JSON`) and version (1.0) we speak,
//!    and check where it points: `https`, to public addresses only, unless
//!    [`CallOptions::allow_private`] (local testnets); the addresses checked are the ones
//!    connected to (pinned in the HTTP client), so DNS cannot swap them afterwards.
//! 4. **Send** the message, signed by the caller's [`crate::identity::Identity`] ([`DidSigner`]:
//!    RFC 9421 in the ANP profile, `keyid` = the identity's DID URL).
//! 5. **Follow** the task: the SSE stream (`SendStreamingMessage`), or a blocking
//!    `SendMessage` then `GetTask` polling with exponential backoff. If the stream drops before
//!    the task is done, the task is recovered with `GetTask` (polling): the message is never
//!    sent twice. A send whose answer is lost before the server named the task is reported as
//!    such, never retried.
//! 6. **Check** the result: the final task is read with `GetTask`; a `COMPLETED` task must carry
//!    artifacts ([`CallError::NoArtifacts`] otherwise).
//!
//! A task waiting for input (`INPUT_REQUIRED`) is continued with [`Caller::continue_task`]: the
//! task is read first, and the message is sent only if it is still waiting.
//!
//! Bounds: everything read from the agent goes through the `agentnet-a2a` client's limits
//! (4 MiB bodies, bounded SSE); the whole call has a deadline ([`CallOptions::timeout`]);
//! at most [`MAX_CANDIDATES`] discovered cards are tried.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentnet_a2a::client::{self, Client, ClientError, Endpoint, Signer};
use agentnet_a2a::types::{
    GetTaskRequest, Message, Part, Role, SendMessageRequest, SendMessageResponse, StreamResponse,
    Task, TaskState,
};
use agentnet_did::card::{self, CardSignatureError, KeySource};
use agentnet_did::{web, Did, DidUrl, Resolver};
use serde_json::Value;
use tokio::time::Instant;

use crate::network::directory::{self, Directory, Found};

pub use crate::identity::signer::{DidSigner, MAX_TOKENS};

pub mod anp;
pub mod mcp;

/// Most discovered cards tried for one `--skill` call.
pub const MAX_CANDIDATES: usize = 20;
/// Longest message text sent.
pub const MAX_TEXT: usize = 64 * 1024;
/// History asked for when reading the final task.
const HISTORY: i32 = 20;

/// Which agent to call.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Target {
    /// The agent with this DID, from the node's index.
    Did(String),
    /// The first agent found with all these skill tags (and this DID, if given) whose card
    /// verifies and offers an interface we speak.
    Skill {
        /// Skill tags, all required.
        tags: Vec<String>,
        /// Only this agent.
        did: Option<String>,
    },
    /// A card in hand, claimed to be `did`'s.
    Card {
        /// The agent's DID.
        did: String,
        /// Its signed card.
        card: Value,
    },
}

/// An agent found, its card verified, an interface chosen.
#[derive(Debug, Clone)]
pub struct Agent {
    /// The agent's DID.
    pub did: Did,
    /// Its card, signatures verified.
    pub card: Value,
    /// The `kid`s of the card's signatures.
    pub signers: Vec<String>,
    /// The interface we use.
    pub endpoint: Endpoint,
    /// The addresses the interface's host resolved to, checked, and connected to.
    pub addrs: Vec<SocketAddr>,
    /// Its card against the one the operator accepted, when the card came from the node
    /// ([`crate::trust::pins`]).
    pub pin: Option<crate::trust::pins::PinState>,
}

/// A card whose signatures verify, one of them by the agent's DID.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The agent's DID.
    pub did: Did,
    /// Its card.
    pub card: Value,
    /// The `kid`s of the card's signatures.
    pub signers: Vec<String>,
}

/// How a call behaves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CallOptions {
    /// Follow the task over SSE (`SendStreamingMessage`) rather than a blocking `SendMessage`
    /// and polling.
    pub stream: bool,
    /// Allow interfaces on loopback, private and link-local addresses, and plain `http`
    /// (local testnets, tests). Off: `https` to public addresses only.
    pub allow_private: bool,
    /// The deadline of the whole call, finding included.
    pub timeout: Duration,
    /// First wait between two `GetTask` polls; doubled each time up to `poll_max`.
    pub poll_initial: Duration,
    /// Longest wait between two polls.
    pub poll_max: Duration,
    /// Connect timeout of each request to the agent.
    pub connect_timeout: Duration,
    /// The delegation chain every message presents (`Message.metadata.actorChain`).
    pub delegation: Option<Arc<Delegation>>,
}

/// The largest chain file read: eight links of the largest size, and room around them.
pub const MAX_CHAIN_FILE: u64 =
    (agentnet_did::delegation::MAX_LINKS * agentnet_did::delegation::MAX_LINK_BYTES) as u64 + 4096;

/// Read a chain file: the JSON array `agentnet delegate` writes (or an object with
/// `actorChain`), at most [`MAX_CHAIN_FILE`] bytes, checked for shape and attenuation.
pub fn read_chain(path: &std::path::Path) -> anyhow::Result<Value> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let f = std::fs::File::open(path)
        .with_context(|| format!("reading the delegation {}", path.display()))?;
    let mut bytes = Vec::new();
    f.take(MAX_CHAIN_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CHAIN_FILE {
        anyhow::bail!(
            "{} is over {MAX_CHAIN_FILE} bytes: not a delegation chain",
            path.display()
        );
    }
    let v: Value = agentnet_did::json::from_slice(
        &bytes,
        agentnet_did::json::Limits {
            max_depth: 16,
            max_values: 16_384,
        },
    )
    .with_context(|| format!("{} is not JSON", path.display()))?;
    let v = match v {
        Value::Object(mut o) => o
            .remove(agentnet_did::delegation::METADATA_MEMBER)
            .with_context(|| {
                format!(
                    "{} has no {}",
                    path.display(),
                    agentnet_did::delegation::METADATA_MEMBER
                )
            })?,
        v => v,
    };
    agentnet_did::delegation::Chain::parse(&v)
        .with_context(|| format!("{} does not hold", path.display()))?;
    Ok(v)
}

/// A delegation chain a caller presents ([`agentnet_did::delegation`], docs/PROTOCOL.md
/// "Delegation"), with the holder's identity for hand-offs.
#[derive(Clone)]
pub struct Delegation {
    chain: Value,
    holder: Option<crate::identity::Identity>,
}

impl std::fmt::Debug for Delegation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delegation")
            .field("digest", &agentnet_did::delegation::digest(&self.chain))
            .finish_non_exhaustive()
    }
}

impl Delegation {
    /// `chain` (checked for shape and attenuation), presented as is, or with a hand-off to
    /// each agent called when `holder` (the caller's identity) holds its last link and that link
    /// allows one more: then the agent called may act on it onward.
    pub fn new(
        chain: Value,
        holder: Option<crate::identity::Identity>,
    ) -> Result<Self, agentnet_did::delegation::ChainError> {
        agentnet_did::delegation::Chain::parse(&chain)?;
        Ok(Delegation { chain, holder })
    }

    /// `chain` held by `holder`, whose DID must be its last audience (`what` names the chain
    /// in the error); handed off to each agent called when `hand_off`.
    pub fn held(
        chain: Value,
        holder: crate::identity::Identity,
        hand_off: bool,
        what: &str,
    ) -> anyhow::Result<Self> {
        let parsed = agentnet_did::delegation::Chain::parse(&chain)?;
        let last = parsed
            .links()
            .last()
            .map(|l| l.audience.to_string())
            .unwrap_or_default();
        if last != holder.did().as_str() {
            anyhow::bail!(
                "the delegation {what} is to {last}, but the calls sign as {}: use a chain issued to {}",
                holder.did(),
                holder.did()
            );
        }
        Ok(Delegation::new(chain, hand_off.then_some(holder))?)
    }

    /// The chain as loaded.
    pub fn chain(&self) -> &Value {
        &self.chain
    }

    /// What to present to `agent`.
    pub fn for_agent(&self, agent: &Did) -> Value {
        if let Some(id) = &self.holder {
            match agentnet_did::delegation::hand_off(id.key(), id.kid(), &self.chain, agent) {
                Ok(Some(c)) => return c,
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "no hand-off to {agent}"),
            }
        }
        self.chain.clone()
    }

    /// Put the chain for `agent` into `message`'s metadata.
    pub fn present(&self, agent: &Did, message: &mut Message) {
        message
            .metadata
            .get_or_insert_with(Default::default)
            .insert(
                agentnet_did::delegation::METADATA_MEMBER.to_string(),
                self.for_agent(agent),
            );
    }
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            stream: false,
            allow_private: false,
            timeout: Duration::from_secs(300),
            poll_initial: Duration::from_millis(250),
            poll_max: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            delegation: None,
        }
    }
}

/// What a call reports while it runs (the CLI prints these on standard error).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Progress {
    /// A card was found and verified.
    Verified {
        /// The agent.
        did: String,
        /// The card's signers.
        signers: Vec<String>,
    },
    /// The card differs from the one the operator accepted (`agentnet trust accept`).
    Changed {
        /// The agent.
        did: String,
        /// What differs.
        diff: Vec<String>,
    },
    /// A discovered card was passed over.
    Skipped {
        /// The agent.
        did: String,
        /// Why.
        reason: String,
    },
    /// The interface chosen.
    Interface {
        /// Its URL.
        url: String,
        /// Its binding.
        binding: &'static str,
    },
    /// The message was sent.
    Sent,
    /// The task's state.
    State {
        /// Task id.
        task: String,
        /// Its state (ProtoJSON name).
        state: String,
    },
    /// An artifact arrived on the stream.
    Artifact {
        /// Its name or id.
        name: String,
    },
    /// The answer to the message was lost; the same message (same `messageId`) is sent again
    /// to an agent that answers a repeat with the task the first one started.
    Resent {
        /// This attempt.
        attempt: u32,
        /// Of how many.
        of: u32,
        /// What happened to the last one.
        reason: String,
    },
    /// The stream dropped; the task is recovered with `GetTask`.
    Recovering {
        /// Task id.
        task: String,
        /// What happened to the stream.
        reason: String,
    },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Verified { did, signers } => {
                write!(
                    f,
                    "card of {did} verified (signed by {})",
                    signers.join(", ")
                )
            }
            Progress::Changed { did, diff } => write!(
                f,
                "the card of {did} CHANGED since it was accepted ({}); check it, then `agentnet trust accept {did}`",
                diff.join("; ")
            ),
            Progress::Skipped { did, reason } => write!(f, "skipped {did}: {reason}"),
            Progress::Interface { url, binding } => write!(f, "calling {url} ({binding})"),
            Progress::Sent => f.write_str("message sent"),
            Progress::State { task, state } => write!(f, "task {task}: {state}"),
            Progress::Artifact { name } => write!(f, "artifact {name}"),
            Progress::Resent {
                attempt,
                of,
                reason,
            } => write!(
                f,
                "the answer was lost ({reason}); sending the same message again, {attempt} of \
                 {of} (the agent keeps one task per message id)"
            ),
            Progress::Recovering { task, reason } => {
                write!(
                    f,
                    "stream lost ({reason}); reading task {task} with GetTask"
                )
            }
        }
    }
}

/// What the agent answered.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Outcome {
    /// A task, done or waiting (`INPUT_REQUIRED`, `AUTH_REQUIRED`), as `GetTask` returned it.
    Task(Box<Task>),
    /// A direct message, without a task.
    Message(Box<Message>),
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The node's admin API failed.
    #[error(transparent)]
    Admin(#[from] directory::Error),
    /// No admin API to look the agent up in.
    #[error("finding an agent needs a running node (or give its card)")]
    NoNode,
    /// The agent is not known.
    #[error("{0}")]
    NotFound(String),
    /// The name is not a DID.
    #[error("{0:?} is not a DID")]
    BadDid(String),
    /// The card's signatures do not verify.
    #[error("the card of {did} does not verify: {source}")]
    CardSignature {
        /// The agent.
        did: String,
        /// Why.
        #[source]
        source: CardSignatureError,
    },
    /// The card verifies but is not signed by the agent's DID.
    #[error("the card is not {did}'s: it is signed by {signers:?} only")]
    NotTheAgents {
        /// The agent.
        did: String,
        /// Who signed.
        signers: Vec<String>,
    },
    /// No interface we can use (binding, version, scheme or address).
    #[error("{0}")]
    Interface(ClientError),
    /// The interface points where we do not go.
    #[error("refusing the interface {url}: {reason}")]
    Address {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The message is too long or empty.
    #[error("the message must be 1 to {MAX_TEXT} bytes")]
    BadText,
    /// Sending failed (every attempt, for an agent that answers a repeat with its first task);
    /// whether the agent received the message is unknown.
    #[error("sending the message failed: {0}")]
    Send(ClientError),
    /// The answer was lost before the agent named the task: nothing is known to recover.
    #[error(
        "the stream ended before the agent named the task ({0}); the message is not sent again"
    )]
    LostBeforeTask(String),
    /// The agent answered with an error, or talking to it failed after the send.
    #[error(transparent)]
    Agent(ClientError),
    /// A task to continue is not waiting for input.
    #[error("task {task} is {state}, not waiting for input")]
    NotWaiting {
        /// Task id.
        task: String,
        /// Its state.
        state: String,
    },
    /// The task completed without artifacts.
    #[error("task {} completed without any artifact", .0.id)]
    NoArtifacts(Box<Task>),
    /// The agent answered something that does not fit.
    #[error("the agent's answer does not fit: {0}")]
    Protocol(String),
    /// The deadline passed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Http(String),
    /// An ANP agent's description, interface or answer refused ([`anp`]).
    #[error("{0}")]
    Anp(String),
}

/// The ProtoJSON name of a task state.
pub fn state_name(s: &TaskState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{s:?}"))
}

/// Whether a task in state `s` needs nothing more from us to be done with this turn.
pub fn is_settled(s: &TaskState) -> bool {
    s.is_terminal() || matches!(s, TaskState::InputRequired | TaskState::AuthRequired)
}

/// Calls agents: finds and verifies them, then sends, follows and checks.
pub struct Caller {
    admin: Option<Arc<dyn Directory>>,
    resolver: Resolver,
    signer: Option<Arc<dyn Signer>>,
    opts: CallOptions,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("directory", &self.admin.is_some())
            .field("signed", &self.signer.is_some())
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Caller {
    /// A caller looking agents up through `admin` (a running node's admin API, or the daemon's
    /// own state; optional when cards are given), verifying cards with `resolver`, signing with
    /// `signer` (none: anonymous).
    pub fn new(
        admin: Option<Arc<dyn Directory>>,
        resolver: Resolver,
        signer: Option<Arc<dyn Signer>>,
        opts: CallOptions,
    ) -> Self {
        Caller {
            admin,
            resolver,
            signer,
            opts,
        }
    }

    /// The options.
    pub fn options(&self) -> &CallOptions {
        &self.opts
    }

    /// Present `delegation` from now on (`None`: none).
    pub fn set_delegation(&mut self, delegation: Option<Arc<Delegation>>) {
        self.opts.delegation = delegation;
    }

    /// The node's directory this caller finds agents in, if any.
    pub fn directory(&self) -> Option<&Arc<dyn Directory>> {
        self.admin.as_ref()
    }

    /// The signer of requests (`None`: anonymous).
    pub fn signer(&self) -> Option<&Arc<dyn Signer>> {
        self.signer.as_ref()
    }

    /// Find, verify and choose the interface of `target`'s agent. Nothing is sent to it.
    pub async fn find(
        &self,
        target: &Target,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Agent, CallError> {
        let deadline = self.opts.timeout;
        tokio::time::timeout(deadline, self.find_inner(target, progress))
            .await
            .map_err(|_| CallError::Timeout(deadline))?
    }

    async fn find_inner(
        &self,
        target: &Target,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Agent, CallError> {
        match target {
            Target::Card { did, card } => self.check(did, card.clone(), false, progress).await,
            Target::Did(did) => {
                let card = self.card_of(did).await?;
                self.check(did, card, true, progress).await
            }
            Target::Skill { tags, did } => {
                let found = self.candidates(tags).await?;
                let mut last = None;
                for f in found
                    .into_iter()
                    .filter(|f| did.as_ref().is_none_or(|d| *d == f.did))
                {
                    match self.check(&f.did, f.card, true, progress).await {
                        Ok(a) => return Ok(a),
                        Err(e) => {
                            progress(Progress::Skipped {
                                did: f.did.clone(),
                                reason: e.to_string(),
                            });
                            last = Some(e);
                        }
                    }
                }
                Err(last.unwrap_or_else(|| {
                    CallError::NotFound(format!(
                        "no agent found with skill {}{}",
                        tags.join(" + "),
                        did.as_ref()
                            .map(|d| format!(" and DID {d}"))
                            .unwrap_or_default()
                    ))
                }))
            }
        }
    }

    /// Agents with all of `tags` (the node's index, then the network), at most
    /// [`MAX_CANDIDATES`]; their cards are not verified yet.
    pub async fn candidates(&self, tags: &[String]) -> Result<Vec<Found>, CallError> {
        let admin = self.admin.as_ref().ok_or(CallError::NoNode)?;
        Ok(admin.discover(tags, MAX_CANDIDATES).await?)
    }

    /// The card of `did` in the node's index (not verified: [`Caller::verify`] does it).
    pub async fn card_of(&self, did: &str) -> Result<Value, CallError> {
        let admin = self.admin.as_ref().ok_or(CallError::NoNode)?;
        let ad = admin.advert(did).await?.ok_or_else(|| {
            CallError::NotFound(format!(
                "the node knows no live advertisement of {did}; find it with --skill \
                 (the node's index, then the network)"
            ))
        })?;
        if ad.get("did").and_then(Value::as_str) != Some(did) {
            return Err(CallError::Protocol(format!(
                "the node's advertisement of {did} names another DID"
            )));
        }
        Ok(ad.get("card").cloned().unwrap_or(Value::Null))
    }

    /// Verify `card` as `did`'s (checked against its pin when it came `from_node`) and choose
    /// its interface.
    async fn check(
        &self,
        did: &str,
        card: Value,
        from_node: bool,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Agent, CallError> {
        let Verified {
            did: parsed,
            card,
            signers,
        } = self.verify(did, card, progress).await?;
        // A pin that cannot be read is no reason to fail the call: the node says why in
        // `discover`.
        let pin = match (&self.admin, from_node) {
            (Some(admin), true) => admin.pin(did).await.ok().flatten(),
            _ => None,
        };
        if let Some(crate::trust::pins::PinState::Changed { diff, .. }) = &pin {
            progress(Progress::Changed {
                did: did.to_owned(),
                diff: diff.clone(),
            });
        }
        let endpoint = client::choose_interface(&card).map_err(CallError::Interface)?;
        let addrs = self.check_address(&endpoint.url).await?;
        progress(Progress::Interface {
            url: endpoint.url.to_string(),
            binding: endpoint.binding.name(),
        });
        Ok(Agent {
            did: parsed,
            card,
            signers,
            endpoint,
            addrs,
            pin,
        })
    }

    /// Verify every signature on `card` and that one signer is `did`: the card is `did`'s.
    /// Nothing is sent to the agent.
    pub async fn verify(
        &self,
        did: &str,
        card: Value,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Verified, CallError> {
        let parsed =
            Did::parse(did).map_err(|_| CallError::BadDid(did.chars().take(200).collect()))?;
        let sigs = card::verify(&card, KeySource::Did(&self.resolver))
            .await
            .map_err(|source| CallError::CardSignature {
                did: did.to_owned(),
                source,
            })?;
        let signers: Vec<String> = sigs.into_iter().map(|s| s.kid).collect();
        let by_agent = signers
            .iter()
            .any(|k| DidUrl::parse(k).is_ok_and(|u| u.did() == &parsed));
        if !by_agent {
            return Err(CallError::NotTheAgents {
                did: did.to_owned(),
                signers,
            });
        }
        progress(Progress::Verified {
            did: did.to_owned(),
            signers: signers.clone(),
        });
        Ok(Verified {
            did: parsed,
            card,
            signers,
        })
    }

    /// Where an endpoint points: [`check_url`] under this caller's `allow_private`.
    pub async fn check_address(&self, url: &url::Url) -> Result<Vec<SocketAddr>, CallError> {
        check_url(url, self.opts.allow_private).await
    }

    /// The A2A client of `agent`: connections go to the checked addresses only.
    fn client(&self, agent: &Agent) -> Result<Client, CallError> {
        let http = pinned(&agent.endpoint.url, &agent.addrs, self.opts.connect_timeout)
            .build()
            .map_err(|e| CallError::Http(e.to_string()))?;
        Ok(Client::new(
            http,
            agent.endpoint.clone(),
            self.signer.clone(),
        ))
    }

    /// Send `text` to `agent` as a new task and follow it until it is done or waiting.
    pub async fn send(
        &self,
        agent: &Agent,
        text: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Outcome, CallError> {
        let msg = message(text, None)?;
        self.deadline(self.run(agent, msg, progress)).await
    }

    /// Continue task `task_id` of `agent`, which must be waiting for input, with `text`.
    pub async fn continue_task(
        &self,
        agent: &Agent,
        task_id: &str,
        text: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Outcome, CallError> {
        let fut = async {
            let client = self.client(agent)?;
            let task = waiting_task(&client, task_id).await?;
            let msg = message(text, Some(&task))?;
            self.run(agent, msg, progress).await
        };
        self.deadline(fut).await
    }

    /// Send `text` to `agent` (continuing `task_id`, which must be waiting for input, if given)
    /// and return the agent's first answer without following the task: with
    /// `return_immediately` the agent answers as soon as it accepted the message. Then
    /// [`Caller::wait`] follows the task for as long as the caller can wait.
    pub async fn start(
        &self,
        agent: &Agent,
        text: &str,
        task_id: Option<&str>,
        return_immediately: bool,
    ) -> Result<Outcome, CallError> {
        let fut = async {
            let client = self.client(agent)?;
            let task = match task_id {
                Some(id) => Some(waiting_task(&client, id).await?),
                None => None,
            };
            let req = SendMessageRequest {
                message: message(text, task.as_ref())?,
                configuration: Some(agentnet_a2a::types::SendMessageConfiguration {
                    accepted_output_modes: None,
                    task_push_notification_config: None,
                    history_length: Some(HISTORY),
                    return_immediately: Some(return_immediately),
                }),
                metadata: None,
                tenant: None,
            };
            let mut req = req;
            once_if_declared(agent, &mut req.message);
            if let Some(d) = &self.opts.delegation {
                d.present(&agent.did, &mut req.message);
            }
            let mut quiet = |p: Progress| tracing::info!(%p, "sending");
            match self.send_once(agent, &client, &req, &mut quiet).await? {
                SendMessageResponse::Task(t) => Ok(Outcome::Task(Box::new(t))),
                SendMessageResponse::Message(m) => Ok(Outcome::Message(Box::new(m))),
            }
        };
        self.deadline(fut).await
    }

    /// Read task `task` of `agent` again until it is settled (done, or waiting for input) or
    /// `until` has come; the task as last read. Every `GetTask` is bounded by the time left:
    /// an agent that stops answering ends the wait at `until` all the same, with the task as
    /// last read (`task` itself if no read came back).
    pub async fn wait(&self, agent: &Agent, task: Task, until: Instant) -> Result<Task, CallError> {
        let client = self.client(agent)?;
        let task_id = task.id.clone();
        let mut last = task;
        let mut wait = self.opts.poll_initial;
        loop {
            let req = get(&task_id, Some(HISTORY));
            let Ok(read) = tokio::time::timeout_at(until, client.get_task(&req)).await else {
                return Ok(last);
            };
            let t = read.map_err(CallError::Agent)?;
            if t.id != task_id {
                return Err(CallError::Protocol(format!(
                    "GetTask {task_id} answered task {}",
                    t.id
                )));
            }
            last = t;
            let now = Instant::now();
            if is_settled(&last.status.state) || now >= until {
                return Ok(last);
            }
            tokio::time::sleep_until((now + wait).min(until)).await;
            wait = (wait * 2).min(self.opts.poll_max);
        }
    }

    /// `GetTask` of task `task_id` of `agent`.
    pub async fn get_task(&self, agent: &Agent, task_id: &str) -> Result<Task, CallError> {
        let client = self.client(agent)?;
        self.deadline(async {
            client
                .get_task(&get(task_id, Some(HISTORY)))
                .await
                .map_err(CallError::Agent)
        })
        .await
    }

    /// `CancelTask` of task `task_id` of `agent`: the task as the agent answers it.
    pub async fn cancel_task(&self, agent: &Agent, task_id: &str) -> Result<Task, CallError> {
        let client = self.client(agent)?;
        let req = agentnet_a2a::types::CancelTaskRequest {
            id: task_id.to_owned(),
            metadata: None,
            tenant: None,
        };
        self.deadline(async { client.cancel_task(&req).await.map_err(CallError::Agent) })
            .await
    }

    async fn deadline<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        tokio::time::timeout(self.opts.timeout, fut)
            .await
            .map_err(|_| CallError::Timeout(self.opts.timeout))?
    }

    async fn run(
        &self,
        agent: &Agent,
        msg: Message,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Outcome, CallError> {
        let client = self.client(agent)?;
        let mut req = send_request(msg);
        once_if_declared(agent, &mut req.message);
        if let Some(d) = &self.opts.delegation {
            d.present(&agent.did, &mut req.message);
        }
        let task_id = if self.opts.stream {
            match self.follow_stream(&client, &req, progress).await? {
                Ok(id) => id,
                Err(m) => return Ok(Outcome::Message(m)),
            }
        } else {
            let answer = self.send_once(agent, &client, &req, progress).await?;
            progress(Progress::Sent);
            match answer {
                SendMessageResponse::Task(t) => {
                    progress(Progress::State {
                        task: t.id.clone(),
                        state: state_name(&t.status.state),
                    });
                    t.id
                }
                SendMessageResponse::Message(m) => return Ok(Outcome::Message(Box::new(m))),
            }
        };
        let task = self.poll(&client, &task_id, progress).await?;
        if task.status.state == TaskState::Completed
            && task.artifacts.as_ref().is_none_or(Vec::is_empty)
        {
            return Err(CallError::NoArtifacts(Box::new(task)));
        }
        Ok(Outcome::Task(Box::new(task)))
    }

    /// `SendMessage`, sent again (same request, same `messageId`) when the answer is lost on
    /// the way and the agent's card says it answers a repeat with the first task
    /// ([`agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION`]): exactly one task either way. An
    /// agent that does not say so is sent the message once (a repeat could run it twice).
    async fn send_once(
        &self,
        agent: &Agent,
        client: &Client,
        req: &SendMessageRequest,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<SendMessageResponse, CallError> {
        let attempts = if exactly_once(&agent.card) {
            SEND_ATTEMPTS
        } else {
            1
        };
        let mut pause = Duration::from_millis(500);
        for attempt in 1..=attempts {
            match client.send_message(req).await.map_err(send_error) {
                Err(CallError::Send(e)) if attempt < attempts => {
                    progress(Progress::Resent {
                        attempt: attempt + 1,
                        of: attempts,
                        reason: e.to_string(),
                    });
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                answer => return answer,
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Follow the SSE stream; the task id once it is settled or the stream is gone (the
    /// caller then reads it with `GetTask`), or the direct message.
    async fn follow_stream(
        &self,
        client: &Client,
        req: &SendMessageRequest,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Result<String, Box<Message>>, CallError> {
        let mut stream = client.send_streaming(req).await.map_err(send_error)?;
        progress(Progress::Sent);
        let mut task_id: Option<String> = None;
        let lost =
            |id: &Option<String>, reason: String, progress: &mut (dyn FnMut(Progress) + Send)| {
                match id {
                    Some(id) => {
                        progress(Progress::Recovering {
                            task: id.clone(),
                            reason,
                        });
                        Ok(Ok(id.clone()))
                    }
                    None => Err(CallError::LostBeforeTask(reason)),
                }
            };
        loop {
            let ev = match stream.next().await {
                None => return lost(&task_id, "closed before the task was done".into(), progress),
                Some(Err(e)) if e.remote().is_some() => return Err(CallError::Agent(e)),
                Some(Err(e)) => return lost(&task_id, e.to_string(), progress),
                Some(Ok(ev)) => ev,
            };
            let (id, state) = match ev {
                StreamResponse::Message(m) if task_id.is_none() => return Ok(Err(Box::new(m))),
                StreamResponse::Message(_) => continue,
                StreamResponse::Task(t) => (t.id, Some(t.status.state)),
                StreamResponse::StatusUpdate(s) => (s.task_id, Some(s.status.state)),
                StreamResponse::ArtifactUpdate(a) => {
                    progress(Progress::Artifact {
                        name: a
                            .artifact
                            .name
                            .clone()
                            .unwrap_or_else(|| a.artifact.artifact_id.clone()),
                    });
                    (a.task_id, None)
                }
            };
            match &task_id {
                None => task_id = Some(id.clone()),
                Some(t) if *t != id => {
                    return Err(CallError::Protocol(format!(
                        "the stream of task {t} carried an event of task {id}"
                    )))
                }
                Some(_) => {}
            }
            if let Some(state) = state {
                progress(Progress::State {
                    task: id.clone(),
                    state: state_name(&state),
                });
                if is_settled(&state) {
                    return Ok(Ok(id));
                }
            }
        }
    }

    /// `GetTask` until the task is settled, waiting `poll_initial`, doubled up to `poll_max`,
    /// between reads; transport errors are retried the same way (the deadline bounds it all).
    async fn poll(
        &self,
        client: &Client,
        task_id: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Task, CallError> {
        let mut wait = self.opts.poll_initial;
        let mut last_state = None;
        loop {
            match client.get_task(&get(task_id, Some(HISTORY))).await {
                Ok(t) => {
                    if t.id != task_id {
                        return Err(CallError::Protocol(format!(
                            "GetTask {task_id} answered task {}",
                            t.id
                        )));
                    }
                    if last_state.as_ref() != Some(&t.status.state) {
                        last_state = Some(t.status.state.clone());
                        progress(Progress::State {
                            task: t.id.clone(),
                            state: state_name(&t.status.state),
                        });
                    }
                    if is_settled(&t.status.state) {
                        return Ok(t);
                    }
                }
                Err(e) if e.remote().is_some() => return Err(CallError::Agent(e)),
                Err(e) => tracing::debug!(error = %e, "GetTask failed; retrying"),
            }
            let until = Instant::now() + wait;
            tokio::time::sleep_until(until).await;
            wait = (wait * 2).min(self.opts.poll_max);
        }
    }
}

/// How many times a message is sent to an agent that answers a repeat with its first task.
const SEND_ATTEMPTS: u32 = 3;

/// Whether `card` declares [`agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION`].
fn exactly_once(card: &Value) -> bool {
    card.pointer("/capabilities/extensions")
        .and_then(Value::as_array)
        .is_some_and(|exts| {
            exts.iter()
                .any(|e| e["uri"] == agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION)
        })
}

/// Ask `agent` to run `message` once ([`agentnet_a2a::engine::asks_once`]) when its card says
/// it can: then a resend after a lost answer reaches the first task.
fn once_if_declared(agent: &Agent, message: &mut Message) {
    if exactly_once(&agent.card) {
        let uri = agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION.to_owned();
        let exts = message.extensions.get_or_insert_with(Vec::new);
        if !exts.contains(&uri) {
            exts.push(uri);
        }
    }
}

fn send_error(e: ClientError) -> CallError {
    if e.remote().is_some() {
        CallError::Agent(e)
    } else {
        CallError::Send(e)
    }
}

fn get(id: &str, history_length: Option<i32>) -> GetTaskRequest {
    GetTaskRequest {
        id: id.to_owned(),
        history_length,
        tenant: None,
    }
}

/// The `SendMessage` request a call sends for `msg` (no configuration: the server's defaults).
pub fn send_request(msg: Message) -> SendMessageRequest {
    SendMessageRequest {
        message: msg,
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

/// A user message with `text`, continuing `task` if given: what `agentnet call "text"` sends
/// (a fresh `messageId` each time).
pub fn message(text: &str, task: Option<&Task>) -> Result<Message, CallError> {
    if text.is_empty() || text.len() > MAX_TEXT {
        return Err(CallError::BadText);
    }
    let mut m = Message::new(Role::User, vec![Part::text(text)]);
    if let Some(t) = task {
        m.task_id = Some(t.id.clone());
        m.context_id = Some(t.context_id.clone());
    }
    Ok(m)
}

/// Task `id` of the client's agent, which must be waiting for the caller's input.
async fn waiting_task(client: &Client, id: &str) -> Result<Task, CallError> {
    let task = client
        .get_task(&get(id, Some(0)))
        .await
        .map_err(CallError::Agent)?;
    if !matches!(
        task.status.state,
        TaskState::InputRequired | TaskState::AuthRequired
    ) {
        return Err(CallError::NotWaiting {
            task: task.id,
            state: state_name(&task.status.state),
        });
    }
    Ok(task)
}

/// The text parts of the task's artifacts, or of a message, in order.
pub fn texts(outcome: &Outcome) -> Vec<String> {
    let parts: Vec<&Part> = match outcome {
        Outcome::Task(t) => t
            .artifacts
            .iter()
            .flatten()
            .flat_map(|a| a.parts.iter())
            .collect(),
        Outcome::Message(m) => m.parts.iter().collect(),
    };
    parts
        .into_iter()
        .filter_map(|p| p.as_text().map(str::to_owned))
        .collect()
}

/// The text of a task's status message (what an `INPUT_REQUIRED` task asks).
pub fn status_text(task: &Task) -> Option<String> {
    let m = task.status.message.as_ref()?;
    let t: Vec<&str> = m.parts.iter().filter_map(|p| p.as_text()).collect();
    (!t.is_empty()).then(|| t.join("\n"))
}

/// Where `url` points: `https` (or `http` with `allow_private`), and every address its host
/// resolves to public unless `allow_private`: the addresses to connect to (pin them with
/// [`pinned`], so that DNS cannot swap them afterwards). The check of every outgoing call to an
/// address others chose: agents' interfaces, MCP endpoints, proxy upstreams.
pub async fn check_url(url: &url::Url, allow_private: bool) -> Result<Vec<SocketAddr>, CallError> {
    let refuse = |reason: String| CallError::Address {
        url: url.to_string(),
        reason,
    };
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        s => return Err(refuse(format!("scheme {s} (https only)"))),
    }
    let host = url.host_str().ok_or_else(|| refuse("no host".into()))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| refuse("no port".into()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| refuse(format!("resolving {host}: {e}")))?
        .take(16)
        .collect();
    if addrs.is_empty() {
        return Err(refuse(format!("{host} has no address")));
    }
    if !allow_private {
        if let Some(a) = addrs.iter().find(|a| !web::is_public(a.ip())) {
            return Err(refuse(format!(
                "{host} resolves to {} (not a public address)",
                a.ip()
            )));
        }
    }
    Ok(addrs)
}

/// An HTTP client builder whose connections to `url`'s host go to `addrs` (from
/// [`check_url`]) only: no redirects, no proxy (which would resolve the name again).
pub fn pinned(
    url: &url::Url,
    addrs: &[SocketAddr],
    connect_timeout: Duration,
) -> reqwest::ClientBuilder {
    let mut b = agentnet_did::http::client_builder()
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(host) = url.host_str() {
        if host.parse::<std::net::IpAddr>().is_err() {
            b = b.resolve_to_addrs(host, addrs);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_agent_that_says_it_keeps_one_task_per_message_is_sent_a_message_twice() {
        let ext = agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION;
        let says =
            serde_json::json!({"capabilities": {"extensions": [{"uri": "x"}, {"uri": ext}]}});
        assert!(exactly_once(&says));
        for silent in [
            serde_json::json!({"capabilities": {"extensions": [{"uri": "x"}]}}),
            serde_json::json!({"capabilities": {}}),
            serde_json::json!({"capabilities": {"extensions": {"uri": ext}}}),
            serde_json::json!(null),
        ] {
            assert!(!exactly_once(&silent), "{silent}");
        }
        // Our hosted agents say so.
        let cfg: crate::config::FileConfig =
            toml::from_str("[[agent]]\nid = \"e\"\nkind = \"echo\"\n").unwrap();
        let card = crate::hosted::card_for(&cfg.agent[0], "https://n.example/a2a/e");
        assert!(exactly_once(&card), "{card}");
    }

    #[test]
    fn messages_are_bounded_and_continue_their_task() {
        assert!(matches!(message("", None), Err(CallError::BadText)));
        assert!(matches!(
            message(&"x".repeat(MAX_TEXT + 1), None),
            Err(CallError::BadText)
        ));
        let t: Task = serde_json::from_value(serde_json::json!({
            "id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}
        }))
        .unwrap();
        let m = message("Ada", Some(&t)).unwrap();
        assert_eq!(m.task_id.as_deref(), Some("t1"));
        assert_eq!(m.context_id.as_deref(), Some("c1"));
        assert_eq!(
            state_name(&TaskState::InputRequired),
            "TASK_STATE_INPUT_REQUIRED"
        );
        assert!(is_settled(&TaskState::InputRequired) && !is_settled(&TaskState::Working));
    }
}
