//! The admission hook: a check an agent runs on every operation before any work, after the
//! caller is authenticated (the node's delegation policy, `docs/PROTOCOL.md`, "Delegation").
//!
//! The engine calls [`Gate::admit`] for `SendMessage` (streaming too) with the message and, for
//! a message that continues a task, the stored task; for `GetTask`, `SubscribeToTask` and
//! `CancelTask` with the stored task. `ListTasks` is not gated: it lists the caller's own tasks,
//! each admitted when it was created. A refusal is the caller's error
//! ([`ProtocolError::PermissionDenied`]); what the gate returns for a new task becomes that
//! task's `metadata` (so what admitted it travels with it), and a member of the message's
//! metadata the task holds that way is kept once: the task's history holds the message without
//! it ([`Admitted::held`]).

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

/// What the gate let in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Admitted {
    /// Set on a new task as its `metadata`.
    pub metadata: Option<HashMap<String, Value>>,
    /// A member of the message's `metadata` that the task holds already, in its own
    /// `metadata`: the task's history keeps the message without it (the handler still gets
    /// the message whole). A delegation chain is a few KB, so a task does not store and answer
    /// it twice.
    pub held: Option<&'static str>,
}

/// The admission hook.
pub trait Gate: Send + Sync + 'static {
    /// `Ok` to go on, or the refusal.
    fn admit<'a>(&'a self, ask: Admit<'a>) -> BoxFuture<'a, Result<Admitted, ProtocolError>>;
}

/// `message` as a task's history keeps it: without the `held` member of its metadata (and
/// without metadata, when that was its only member).
pub fn as_held(message: &Message, held: Option<&str>) -> Message {
    let Some(member) = held else {
        return message.clone();
    };
    let Some(meta) = message.metadata.as_ref().filter(|m| m.contains_key(member)) else {
        return message.clone();
    };
    let rest: HashMap<String, Value> = meta
        .iter()
        .filter(|(k, _)| k.as_str() != member)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Message {
        metadata: (!rest.is_empty()).then_some(rest),
        ..without_metadata(message)
    }
}

/// A copy of `message` but for its metadata (not copied).
fn without_metadata(message: &Message) -> Message {
    Message {
        message_id: message.message_id.clone(),
        context_id: message.context_id.clone(),
        task_id: message.task_id.clone(),
        role: message.role.clone(),
        parts: message.parts.clone(),
        metadata: None,
        extensions: message.extensions.clone(),
        reference_task_ids: message.reference_task_ids.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(meta: Value) -> Message {
        serde_json::from_value(serde_json::json!({
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
            "extensions": ["urn:x"], "referenceTaskIds": ["t0"], "metadata": meta,
        }))
        .unwrap()
    }

    #[test]
    fn the_history_copy_drops_the_held_member_and_only_it() {
        let both = message(serde_json::json!({"actorChain": [1, 2], "other": true}));
        let kept = as_held(&both, Some("actorChain"));
        let want = message(serde_json::json!({"other": true}));
        assert_eq!(kept, want);
        // Its only member: no metadata at all.
        let only = message(serde_json::json!({"actorChain": [1]}));
        let mut bare = message(serde_json::json!({}));
        bare.metadata = None;
        assert_eq!(as_held(&only, Some("actorChain")), bare);
        // Nothing held, or a member the message lacks: the message as it came.
        assert_eq!(as_held(&both, None), both);
        assert_eq!(as_held(&want, Some("actorChain")), want);
    }
}
