//! The built-in sample agents: [`Echo`] and [`AskName`] (which asks for more input first).
//!
//! Both are real [`Handler`]s, used by the node's `testnet` and by the tests and interop
//! example of this crate.

use std::time::Duration;

use a2a::{Artifact, Message, Part, Role};

use crate::auth::BoxFuture;
use crate::handler::{Handler, HandlerError, Outcome, Turn, Updates};

/// An agent message in the turn's task and context.
pub fn agent_message(turn: &Turn, text: impl Into<String>) -> Message {
    let mut m = Message::new(Role::Agent, vec![Part::text(text)]);
    m.task_id = Some(turn.task_id.clone());
    m.context_id = Some(turn.context_id.clone());
    m
}

/// The text of a message: its text parts joined with newlines.
pub fn text_of(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter_map(|p| p.as_text())
        .collect::<Vec<_>>()
        .join("\n")
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

/// Completes every task at once with an artifact `echo` holding the message's text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

impl Handler for Echo {
    fn handle(
        &self,
        turn: Turn,
        _updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        Box::pin(async move {
            let text = text_of(&turn.message);
            Ok(Outcome::Completed {
                message: Some(agent_message(&turn, format!("echo: {text}"))),
                artifacts: vec![text_artifact("echo", text)],
            })
        })
    }
}

/// Asks the caller's name before it answers: the first turn works for `work`, then ends in
/// `TASK_STATE_INPUT_REQUIRED` with the question "What is your name?"; the caller's next
/// message on the task starts the second turn, which works for `work` again and completes with
/// an artifact `greeting` holding `Hello, <name>! You asked: <first message>`.
#[derive(Debug, Clone, Copy)]
pub struct AskName {
    /// How long each turn works (a status update "working" is sent when it starts).
    pub work: Duration,
}

/// The question [`AskName`] asks.
pub const ASK_NAME_QUESTION: &str = "What is your name?";

impl Handler for AskName {
    fn handle(
        &self,
        turn: Turn,
        updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        let work = self.work;
        Box::pin(async move {
            let asked_before = turn.history.iter().any(|m| m.role == Role::Agent);
            let _ = updates
                .status(agent_message(
                    &turn,
                    if asked_before {
                        "thinking about your answer"
                    } else {
                        "reading your request"
                    },
                ))
                .await;
            tokio::select! {
                _ = turn.cancel.cancelled() => {
                    return Err(HandlerError("canceled".into()));
                }
                _ = tokio::time::sleep(work) => {}
            }
            if !asked_before {
                return Ok(Outcome::InputRequired {
                    message: agent_message(&turn, ASK_NAME_QUESTION),
                });
            }
            let name = text_of(&turn.message);
            let first = turn
                .history
                .iter()
                .find(|m| m.role == Role::User)
                .map(text_of)
                .unwrap_or_default();
            let greeting = format!("Hello, {name}! You asked: {first}");
            Ok(Outcome::Completed {
                message: Some(agent_message(&turn, greeting.clone())),
                artifacts: vec![text_artifact("greeting", greeting)],
            })
        })
    }
}
