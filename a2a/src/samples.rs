//! The built-in sample agents: [`Echo`], [`AskName`] (which asks for more input first) and
//! [`Tck`] (the official A2A TCK's scenarios, chosen by the message id's prefix).
//!
//! They are real [`Handler`]s, used by the node's hosted agents and `testnet`, and by the tests
//! and interop example of this crate.

use std::time::Duration;

use a2a::{Artifact, Message, Part, PartContent, Role};

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

fn artifact(name: &str, part: Part) -> Artifact {
    Artifact {
        artifact_id: uuid::Uuid::new_v4().to_string(),
        name: Some(name.to_string()),
        description: None,
        parts: vec![part],
        metadata: None,
        extensions: None,
    }
}

fn file_part(content: PartContent) -> Part {
    Part {
        content,
        filename: Some("output.txt".into()),
        media_type: Some("text/plain".into()),
        metadata: None,
    }
}

/// The scenarios of the official A2A TCK (a2aproject/a2a-tck, `scenarios/*.feature`): what the
/// agent does is chosen by the prefix of the message's id, the TCK's in-band signal, on every
/// message (a follow-up message on a task waiting for input is a new choice):
///
/// | message id starts with | the agent |
/// | --- | --- |
/// | `tck-message-response` | answers with a message, "Direct message response", and makes no task |
/// | `tck-input-required` | asks for input (`INPUT_REQUIRED`) |
/// | `tck-reject-task` | rejects the task, "rejected" |
/// | `tck-artifact-text` | completes with a text artifact "Generated text content" |
/// | `tck-artifact-file-url` | completes with a file artifact by URL, `https://example.com/output.txt` (`output.txt`, `text/plain`) |
/// | `tck-artifact-file` | completes with a file artifact of bytes (`output.txt`, `text/plain`) |
/// | `tck-artifact-data` | completes with a data artifact `{"key": "value", "count": 42}` |
/// | `tck-stream-…` | reports working, sends a text artifact as an update (the scenario's text), completes |
/// | anything else | completes with the status message "Hello from TCK" |
///
/// Each turn ends at once; it stores what a caller sent, as every agent does, within the
/// engine's bounds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tck;

/// What [`Tck`] says when it completes a task without another scenario.
pub const TCK_DONE: &str = "Hello from TCK";

impl Handler for Tck {
    fn reply(&self, message: &Message) -> Option<Message> {
        message
            .message_id
            .starts_with("tck-message-response")
            .then(|| Message::new(Role::Agent, vec![Part::text("Direct message response")]))
    }

    fn handle(
        &self,
        turn: Turn,
        updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        Box::pin(async move {
            let id = turn.message.message_id.as_str();
            let done = |artifacts| Outcome::Completed {
                message: Some(agent_message(&turn, TCK_DONE)),
                artifacts,
            };
            // Longest prefixes first: `tck-artifact-file-url` before `tck-artifact-file`.
            let outcome = if id.starts_with("tck-input-required") {
                Outcome::InputRequired {
                    message: agent_message(&turn, "Input required: send a message to go on"),
                }
            } else if id.starts_with("tck-reject-task") {
                Outcome::Rejected {
                    message: agent_message(&turn, "rejected"),
                }
            } else if id.starts_with("tck-artifact-text") {
                done(vec![artifact("text", Part::text("Generated text content"))])
            } else if id.starts_with("tck-artifact-file-url") {
                done(vec![artifact(
                    "file",
                    file_part(PartContent::Url("https://example.com/output.txt".into())),
                )])
            } else if id.starts_with("tck-artifact-file") {
                done(vec![artifact(
                    "file",
                    file_part(PartContent::Raw(b"Hello from TCK\n".to_vec())),
                )])
            } else if id.starts_with("tck-artifact-data") {
                done(vec![artifact(
                    "data",
                    Part {
                        content: PartContent::Data(
                            serde_json::json!({"key": "value", "count": 42}),
                        ),
                        filename: None,
                        media_type: Some("application/json".into()),
                        metadata: None,
                    },
                )])
            } else if let Some(rest) = id.strip_prefix("tck-stream-") {
                let text = if rest.starts_with("001") {
                    Some("Stream hello from TCK")
                } else if rest.starts_with("002") {
                    None
                } else if rest.starts_with("003") {
                    Some("Stream task lifecycle")
                } else if rest.starts_with("ordering") {
                    Some("Ordered output")
                } else {
                    Some("Streamed text content")
                };
                let _ = updates
                    .status(agent_message(&turn, "working on the stream"))
                    .await;
                if let Some(text) = text {
                    let _ = updates.artifact(artifact("text", Part::text(text))).await;
                }
                done(vec![])
            } else {
                done(vec![])
            };
            Ok(outcome)
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
        .route("/echo/", echo.jsonrpc_route())
        .nest("/ask-name", ask.router())
        .route("/ask-name/", ask.jsonrpc_route());
    (router, echo, ask)
}
