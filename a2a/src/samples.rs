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

/// Completes every task at once with an artifact `echo` holding the message's text, and the
/// short status message [`ECHO_DONE`]: the text is stored once more than the caller's message
/// (in the artifact), not in the status message and the history as well.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

/// The status message of a task [`Echo`] completed.
pub const ECHO_DONE: &str = "echoed: see the artifact echo";

impl Handler for Echo {
    fn handle(
        &self,
        turn: Turn,
        _updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        Box::pin(async move {
            let text = text_of(&turn.message);
            Ok(Outcome::Completed {
                message: Some(agent_message(&turn, ECHO_DONE)),
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
            let asked_before = turn
                .history
                .iter()
                .any(|m| m.role == Role::Agent && text_of(m) == ASK_NAME_QUESTION);
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

/// A 1.0 Agent Card for an agent served at `url` over both bindings (JSON-RPC first).
pub fn card(name: &str, description: &str, url: &str) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "description": description,
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": name,
            "name": name,
            "description": description,
            "tags": ["sample"],
        }],
    })
}

/// Both samples on one router: [`Echo`] under `/echo`, [`AskName`] (working `work` per turn)
/// under `/ask-name`, each with its card pointing at `<base>/echo` and `<base>/ask-name`, the
/// given policy and limits, an in-memory store each. What the example server and the tests
/// serve.
pub fn router(
    base: &str,
    work: Duration,
    config: impl Fn(serde_json::Value) -> crate::server::Config,
    auth: std::sync::Arc<dyn crate::auth::Authenticator>,
) -> (
    axum::Router,
    std::sync::Arc<crate::server::Server>,
    std::sync::Arc<crate::server::Server>,
) {
    use std::sync::Arc;
    let base = base.trim_end_matches('/');
    let echo = crate::server::Server::new(
        config(card(
            "echo",
            "Echoes your message back",
            &format!("{base}/echo"),
        )),
        Arc::new(Echo),
        Arc::new(crate::store::MemoryStore::default()),
        auth.clone(),
    );
    let ask = crate::server::Server::new(
        config(card(
            "ask-name",
            "Asks your name, then greets you",
            &format!("{base}/ask-name"),
        )),
        Arc::new(AskName { work }),
        Arc::new(crate::store::MemoryStore::default()),
        auth,
    );
    let router = axum::Router::new()
        .nest("/echo", echo.router())
        .nest("/ask-name", ask.router());
    (router, echo, ask)
}
