//! The admission hook: a check an agent runs on every operation before any work, after the
//! caller is authenticated (the node's delegation policy, `docs/PROTOCOL.md`, "Delegation").
//!
//! The engine calls [`Gate::admit`] for `SendMessage` (streaming too) with the message and, for
//! a message that continues a task, the stored task; for `GetTask`, `SubscribeToTask` and
//! `CancelTask` with the stored task. `ListTasks` is not gated: it lists the caller's own tasks,
//! each admitted when it was created. A refusal is the caller's error
//! ([`ProtocolError::PermissionDenied`]); what the gate returns for a new task becomes that
//! task's `metadata` (so what admitted it travels with it).

use a2a::{Message, Task};
use std::collections::HashMap;

use serde_json::Value;

use crate::auth::{BoxFuture, Caller};
use crate::ProtocolError;

/// The operation asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `SendMessage`, `SendStreamingMessage`.
    Send,
    /// `GetTask`, `SubscribeToTask`.
    Get,
    /// `CancelTask`.
    Cancel,
}

impl Operation {
    /// `send`, `get` or `cancel`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Send => "send",
            Operation::Get => "get",
            Operation::Cancel => "cancel",
        }
    }
}

/// What the gate is asked.
#[derive(Debug, Clone, Copy)]
pub struct Admit<'a> {
    /// Who asks (authenticated).
    pub caller: &'a Caller,
    /// What for.
    pub op: Operation,
    /// The message sent, for [`Operation::Send`].
    pub message: Option<&'a Message>,
    /// The stored task the operation reaches, if any (a continued, read or canceled task).
    pub task: Option<&'a Task>,
}

/// The admission hook.
pub trait Gate: Send + Sync + 'static {
    /// `Ok(metadata)` to go on (the metadata, if any, is set on a new task), or the refusal.
    fn admit<'a>(
        &'a self,
        ask: Admit<'a>,
    ) -> BoxFuture<'a, Result<Option<HashMap<String, Value>>, ProtocolError>>;
}
