//! The agent behind the server: the [`Handler`] trait.
//!
//! The engine owns tasks, their states and their storage; a handler only does the work of one
//! *turn*: it gets the caller's message (and the task's earlier history), may report progress
//! and artifacts through [`Updates`] while it works, and ends the turn with an [`Outcome`]:
//! completed, input required (the task waits for the caller's next message, which starts the
//! next turn), failed or rejected. A handler never sets a task's state itself, so it cannot
//! move a terminal task: a turn whose task was canceled meanwhile has its outcome dropped.
//!
//! The node's hosted agents implement this trait (a proxy to an upstream A2A server, a local
//! command); [`crate::samples`] has the two built-in samples.

use a2a::{Artifact, Message};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::auth::{BoxFuture, Owner, Source};

/// One turn of work on a task.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Turn {
    /// The task's id.
    pub task_id: String,
    /// The task's context id.
    pub context_id: String,
    /// Who sent the message.
    pub caller: Owner,
    /// The network block the message came from (what per-source shares are counted by).
    pub source: Source,
    /// The message that started this turn.
    pub message: Message,
    /// The task's stored history before this message (oldest first, bounded by the engine's
    /// `max_history_stored`).
    pub history: Vec<Message>,
    /// Cancelled when the task is canceled or the engine shuts down: stop working then.
    pub cancel: CancellationToken,
}

/// How a turn ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Outcome {
    /// The task is done: `TASK_STATE_COMPLETED`, with an optional final message and the
    /// artifacts produced (added to any sent through [`Updates::artifact`]).
    Completed {
        /// The status message.
        message: Option<Message>,
        /// Artifacts to add to the task.
        artifacts: Vec<Artifact>,
    },
    /// The agent needs the caller's answer: `TASK_STATE_INPUT_REQUIRED`. The caller's next
    /// message with this task id starts the next turn.
    InputRequired {
        /// The question.
        message: Message,
    },
    /// The work failed: `TASK_STATE_FAILED`.
    Failed {
        /// Why.
        message: Message,
    },
    /// The agent will not do this: `TASK_STATE_REJECTED`.
    Rejected {
        /// Why.
        message: Message,
    },
}

/// A handler could not do its turn; the task becomes `TASK_STATE_FAILED` with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HandlerError(pub String);

/// What a handler reports while it works.
#[derive(Debug, Clone)]
pub(crate) enum Update {
    Status(Message),
    Artifact(Artifact),
}

/// The turn's task is over (canceled, or the turn already ended): updates are not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the task no longer takes updates")]
pub struct Closed;

/// Progress reports of one turn. The channel is bounded: a handler that reports faster than the
/// engine stores waits.
#[derive(Debug, Clone)]
pub struct Updates {
    pub(crate) tx: mpsc::Sender<Update>,
}

impl Updates {
    /// Report progress: a `TASK_STATE_WORKING` status update carrying `message`.
    pub async fn status(&self, message: Message) -> Result<(), Closed> {
        self.tx
            .send(Update::Status(message))
            .await
            .map_err(|_| Closed)
    }

    /// Add an artifact to the task now (an artifact update event).
    pub async fn artifact(&self, artifact: Artifact) -> Result<(), Closed> {
        self.tx
            .send(Update::Artifact(artifact))
            .await
            .map_err(|_| Closed)
    }
}

/// An agent: does the work of one turn.
pub trait Handler: Send + Sync + 'static {
    /// Work on `turn`; report through `updates`; end with an outcome.
    fn handle(
        &self,
        turn: Turn,
        updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>>;

    /// Answer a message that names no task with a message of the agent's, creating no task
    /// (A2A 1.0 section 3.1.1: `SendMessage` returns a Task or a Message; a stream is then that
    /// one message). Called after the request is validated and before any task exists; `None`
    /// (the default) starts a task as usual. It runs on the request's worker: return at once,
    /// do no work here. The engine sets the reply's role, and its context (the caller's, or a
    /// new one).
    fn reply(&self, _message: &Message) -> Option<Message> {
        None
    }
}
