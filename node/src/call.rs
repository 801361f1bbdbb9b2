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
//!
//! # Rooms
//!
//! This file is the front door: what to call ([`Target`]), how ([`CallOptions`]), the
//! [`Caller`] and its entry points, what comes back ([`Agent`], [`Outcome`]). Behind it:
//!
//! - `find`: finding the agent and verifying its card ([`Verified`], [`Caller::verify`]).
//! - `address`: where a call may go ([`check_url`]) and the HTTP client pinned there
//!   ([`pinned`]).
//! - `task`: the exchange (send, follow, check) and what a task says ([`texts`],
//!   [`state_name`]).
//! - `delegation`: the chain a caller holds and presents ([`Delegation`], [`read_chain`]).
//! - `progress`: what a call reports while it runs ([`Progress`]).
//! - `error`: why a call failed ([`CallError`]).
//! - [`anp`] and [`mcp`]: the clients of an agent's other faces, on the same finding and checks.
//!
//! The signer of requests is the identity's ([`DidSigner`], in [`crate::identity::signer`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentnet_a2a::client::{Endpoint, Signer};
use agentnet_a2a::types::{Message, SendMessageRequest, SendMessageResponse, Task};
use agentnet_did::{Did, Resolver};
use serde_json::Value;
use tokio::time::Instant;

use crate::network::directory::Directory;

pub use crate::identity::signer::{DidSigner, MAX_TOKENS};

pub use address::{check_url, pinned};
pub use delegation::{read_chain, Delegation, MAX_CHAIN_FILE};
pub use error::CallError;
pub use find::Verified;
pub use progress::Progress;
pub use task::{is_settled, message, send_request, state_name, status_text, texts};

use task::{extensions_if_declared, get, waiting_task};

mod address;
pub mod anp;
mod delegation;
mod error;
mod find;
pub mod mcp;
mod progress;
mod task;

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

/// What the agent answered.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Outcome {
    /// A task, done or waiting (`INPUT_REQUIRED`, `AUTH_REQUIRED`), as `GetTask` returned it.
    Task(Box<Task>),
    /// A direct message, without a task.
    Message(Box<Message>),
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
            extensions_if_declared(&agent.card, &mut req.message);
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
}
