//! What a call reports while it runs ([`Progress`]), and how it reads on a terminal.

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
