//! Where a caller's verified receipts go: the log in this process, the node's through its admin
//! API ([`ReceiptSink`]), or nowhere ([`Recorder`]), and what became of each ([`Recorded`]).

use std::sync::Arc;

use agentnet_did::receipt;
use agentnet_did::Resolver;
use serde::Serialize;

use super::{verify_and_append, verify_entry, AuditError, AuditLog, NewEntry};

/// What became of a task's receipt, for the caller's output (`--json`: `receipt`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Recorded {
    /// Verified and appended as entry `seq`.
    Logged {
        /// The entry.
        seq: u64,
        /// The receipt's digest.
        digest: String,
    },
    /// Verified, not logged: why (no node running).
    NotLogged {
        /// The receipt's digest.
        digest: String,
        /// Why.
        reason: String,
    },
    /// The task carries no receipt (the agent does not sign them).
    None,
    /// The receipt does not verify, or could not be logged: why.
    Refused {
        /// Why.
        reason: String,
    },
}

impl Recorded {
    /// The warning line to print, if any.
    pub fn warning(&self) -> Option<String> {
        match self {
            Recorded::Logged { .. } | Recorded::None => None,
            Recorded::NotLogged { reason, .. } => {
                Some(format!("receipt verified, not logged: {reason}"))
            }
            Recorded::Refused { reason } => Some(format!("warning: {reason}")),
        }
    }
}

/// The request as the agent holds it: the caller's last message in the task's history
/// (without the chain the task holds: docs/PROTOCOL.md, "Kept once"). What a log entry's
/// `request` is.
pub fn request_of(task: &agentnet_a2a::types::Task) -> Option<&agentnet_a2a::types::Message> {
    task.history
        .iter()
        .flatten()
        .rev()
        .find(|m| m.role == agentnet_a2a::types::Role::User)
}

/// The receipt in a task (`metadata["signed-receipts/v1"]`), if any.
pub fn receipt_of(task: &agentnet_a2a::types::Task) -> Option<String> {
    task.metadata
        .as_ref()?
        .get(receipt::METADATA_KEY)?
        .as_str()
        .map(str::to_string)
}

/// Why a [`ReceiptSink`] did not take an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkError {
    /// Nothing answers where the log was said to be (its address).
    NotRunning(String),
    /// The log's owner answered with a refusal, or the exchange failed.
    Failed(String),
}

/// A node's audit log in another process: where a CLI process sends the entries it verified.
/// The admin API's client implements it; the log does not depend on how an entry travels.
pub trait ReceiptSink: Send + Sync {
    /// Append `entry` (whose receipt the caller verified); the seq it got.
    fn append<'a>(
        &'a self,
        entry: &'a NewEntry,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, SinkError>> + Send + 'a>>;
}

/// Where a process's receipts go.
#[derive(Clone)]
pub enum Recorder {
    /// This process owns the log (the daemon).
    Local(Arc<AuditLog>, Resolver),
    /// A log in another process (a CLI process sends to the node's admin API).
    Remote(Arc<dyn ReceiptSink>, Resolver),
    /// No node running: verify only; why not logged.
    Nowhere(Resolver, String),
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Recorder::Local(..) => "Recorder::Local",
            Recorder::Remote(..) => "Recorder::Remote",
            Recorder::Nowhere(..) => "Recorder::Nowhere",
        })
    }
}

impl Recorder {
    /// The resolver receipts are verified with.
    pub fn resolver(&self) -> &Resolver {
        match self {
            Recorder::Local(_, r) | Recorder::Remote(_, r) | Recorder::Nowhere(r, _) => r,
        }
    }

    /// Whether an entry on behalf of the remote caller `owner` from `source` could still be
    /// logged here ([`AuditLog::room_for_stranger`]), asked before a stranger's work is done;
    /// the reason when not. A log in another process, or none, is not asked: its writer
    /// works for the node's own user.
    pub async fn room_for_stranger(&self, owner: &str, source: &str) -> Result<(), String> {
        let Recorder::Local(log, _) = self else {
            return Ok(());
        };
        let (log, owner, source) = (log.clone(), owner.to_owned(), source.to_owned());
        match tokio::task::spawn_blocking(move || log.room_for_stranger(&owner, Some(&source)))
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(AuditError::StrangersFull(why))) => Err(why),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("checking the audit log's room: {e}")),
        }
    }

    /// Verify and log the receipt of `task`, which `agent` ran for `caller` after `message`:
    /// the caller's message as the agent holds it ([`request_of`]), which the receipt must
    /// cover. `sent`: the parts the writer sent, when it knows them; `message` must hold the
    /// same, else the receipt is refused ([`AuditError::NotSent`]). `on_behalf`: the remote
    /// caller the writer worked for (its owner key) and the network block it called from,
    /// which the strangers' share counts.
    #[allow(clippy::too_many_arguments)]
    pub async fn record(
        &self,
        writer: &str,
        agent: &str,
        caller: Option<&str>,
        task: &agentnet_a2a::types::Task,
        message: Option<&agentnet_a2a::types::Message>,
        sent: Option<&[agentnet_a2a::types::Part]>,
        on_behalf: Option<(&str, &str)>,
    ) -> Recorded {
        let Some(jws) = receipt_of(task) else {
            return Recorded::None;
        };
        let refused = |e: AuditError| Recorded::Refused {
            reason: e.to_string(),
        };
        let Some(message) = message else {
            return refused(AuditError::NoRequest);
        };
        if let Some(parts) = sent {
            if message.parts != parts {
                let held = serde_json::to_string(&message.parts).unwrap_or_default();
                return refused(AuditError::NotSent {
                    held: held.chars().take(80).collect(),
                });
            }
        }
        let new = NewEntry {
            writer: writer.into(),
            task_id: task.id.clone(),
            agent: agent.into(),
            caller: caller.map(str::to_string),
            receipt: jws.clone(),
            message: serde_json::to_value(message).ok(),
            on_behalf: on_behalf.map(|o| o.0.to_string()),
            on_behalf_source: on_behalf.map(|o| o.1.to_string()),
        };
        let digest = receipt::receipt_digest(&jws);
        let refused = |reason: String| Recorded::Refused { reason };
        match self {
            Recorder::Local(log, resolver) => match verify_and_append(log, resolver, new).await {
                Ok(e) => Recorded::Logged { seq: e.seq, digest },
                Err(e) => refused(e.to_string()),
            },
            Recorder::Remote(sink, resolver) => {
                if let Err(e) = verify_entry(&new, resolver).await {
                    return refused(e.to_string());
                }
                match sink.append(&new).await {
                    Ok(seq) => Recorded::Logged { seq, digest },
                    Err(SinkError::NotRunning(url)) => Recorded::NotLogged {
                        digest,
                        reason: format!("the node at {url} is not running (start `agentnet up` to keep an audit log)"),
                    },
                    Err(SinkError::Failed(e)) => refused(format!("receipt verified, not logged: {e}")),
                }
            }
            Recorder::Nowhere(resolver, why) => match verify_entry(&new, resolver).await {
                Ok(_) => Recorded::NotLogged {
                    digest,
                    reason: why.clone(),
                },
                Err(e) => refused(e.to_string()),
            },
        }
    }
}
