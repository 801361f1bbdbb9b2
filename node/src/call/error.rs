//! Why a call failed ([`CallError`]): every refusal before anything is sent, and every way the
//! exchange with the agent can end badly.

use std::time::Duration;

use agentnet_a2a::client::ClientError;
use agentnet_a2a::types::Task;
use agentnet_did::card::CardSignatureError;

use super::MAX_TEXT;
use crate::network::directory;

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
    /// An ANP agent's description, interface or answer refused ([`super::anp`]).
    #[error("{0}")]
    Anp(String),
}
