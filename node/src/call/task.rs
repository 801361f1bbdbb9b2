//! The exchange once an agent is found: the message sent (again, with the same `messageId`, to
//! an agent that keeps one task per message id, when the answer was lost), the task followed
//! over SSE or by `GetTask` polling, and what the task and its artifacts say ([`texts`],
//! [`status_text`], [`state_name`], [`is_settled`]).

use std::time::Duration;

use agentnet_a2a::client::{Client, ClientError};
use agentnet_a2a::types::{
    GetTaskRequest, Message, Part, Role, SendMessageRequest, SendMessageResponse, StreamResponse,
    Task, TaskState,
};
use serde_json::Value;
use tokio::time::Instant;

use super::{pinned, Agent, CallError, Caller, Outcome, Progress, HISTORY, MAX_TEXT};

impl Caller {
    /// Send `msg` to `agent`, follow its task until it is settled, and check the result: a
    /// completed task carries artifacts.
    pub(super) async fn run(
        &self,
        agent: &Agent,
        msg: Message,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Outcome, CallError> {
        let client = self.client(agent)?;
        let mut req = send_request(msg);
        extensions_if_declared(&agent.card, &mut req.message);
        if let Some(d) = &self.opts.delegation {
            d.present(&agent.did, &mut req.message);
        }
        let task_id = if self.opts.stream {
            match self.follow_stream(&client, &req, progress).await? {
                Ok(id) => id,
                Err(m) => return Ok(Outcome::Message(m)),
            }
        } else {
            let answer = self.send_once(agent, &client, &req, progress).await?;
            progress(Progress::Sent);
            match answer {
                SendMessageResponse::Task(t) => {
                    progress(Progress::State {
                        task: t.id.clone(),
                        state: state_name(&t.status.state),
                    });
                    t.id
                }
                SendMessageResponse::Message(m) => return Ok(Outcome::Message(Box::new(m))),
            }
        };
        let task = self.poll(&client, &task_id, progress).await?;
        if task.status.state == TaskState::Completed
            && task.artifacts.as_ref().is_none_or(Vec::is_empty)
        {
            return Err(CallError::NoArtifacts(Box::new(task)));
        }
        Ok(Outcome::Task(Box::new(task)))
    }

    /// `SendMessage`, sent again (same request, same `messageId`) when the answer is lost on
    /// the way and the agent's card says it answers a repeat with the first task
    /// ([`agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION`]): exactly one task either way. An
    /// agent that does not say so is sent the message once (a repeat could run it twice).
    pub(super) async fn send_once(
        &self,
        agent: &Agent,
        client: &Client,
        req: &SendMessageRequest,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<SendMessageResponse, CallError> {
        let attempts = if exactly_once(&agent.card) {
            SEND_ATTEMPTS
        } else {
            1
        };
        let mut pause = Duration::from_millis(500);
        for attempt in 1..=attempts {
            match client.send_message(req).await.map_err(send_error) {
                Err(CallError::Send(e)) if attempt < attempts => {
                    progress(Progress::Resent {
                        attempt: attempt + 1,
                        of: attempts,
                        reason: e.to_string(),
                    });
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                answer => return answer,
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Follow the SSE stream; the task id once it is settled or the stream is gone (the
    /// caller then reads it with `GetTask`), or the direct message.
    async fn follow_stream(
        &self,
        client: &Client,
        req: &SendMessageRequest,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Result<String, Box<Message>>, CallError> {
        let mut stream = client.send_streaming(req).await.map_err(send_error)?;
        progress(Progress::Sent);
        let mut task_id: Option<String> = None;
        let lost =
            |id: &Option<String>, reason: String, progress: &mut (dyn FnMut(Progress) + Send)| {
                match id {
                    Some(id) => {
                        progress(Progress::Recovering {
                            task: id.clone(),
                            reason,
                        });
                        Ok(Ok(id.clone()))
                    }
                    None => Err(CallError::LostBeforeTask(reason)),
                }
            };
        loop {
            let ev = match stream.next().await {
                None => return lost(&task_id, "closed before the task was done".into(), progress),
                Some(Err(e)) if e.remote().is_some() => return Err(CallError::Agent(e)),
                Some(Err(e)) => return lost(&task_id, e.to_string(), progress),
                Some(Ok(ev)) => ev,
            };
            let (id, state) = match ev {
                StreamResponse::Message(m) if task_id.is_none() => return Ok(Err(Box::new(m))),
                StreamResponse::Message(_) => continue,
                StreamResponse::Task(t) => (t.id, Some(t.status.state)),
                StreamResponse::StatusUpdate(s) => (s.task_id, Some(s.status.state)),
                StreamResponse::ArtifactUpdate(a) => {
                    progress(Progress::Artifact {
                        name: a
                            .artifact
                            .name
                            .clone()
                            .unwrap_or_else(|| a.artifact.artifact_id.clone()),
                    });
                    (a.task_id, None)
                }
            };
            match &task_id {
                None => task_id = Some(id.clone()),
                Some(t) if *t != id => {
                    return Err(CallError::Protocol(format!(
                        "the stream of task {t} carried an event of task {id}"
                    )))
                }
                Some(_) => {}
            }
            if let Some(state) = state {
                progress(Progress::State {
                    task: id.clone(),
                    state: state_name(&state),
                });
                if is_settled(&state) {
                    return Ok(Ok(id));
                }
            }
        }
    }

    /// `GetTask` until the task is settled, waiting `poll_initial`, doubled up to `poll_max`,
    /// between reads; transport errors are retried the same way (the deadline bounds it all).
    async fn poll(
        &self,
        client: &Client,
        task_id: &str,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Task, CallError> {
        let mut wait = self.opts.poll_initial;
        let mut last_state = None;
        loop {
            match client.get_task(&get(task_id, Some(HISTORY))).await {
                Ok(t) => {
                    if t.id != task_id {
                        return Err(CallError::Protocol(format!(
                            "GetTask {task_id} answered task {}",
                            t.id
                        )));
                    }
                    if last_state.as_ref() != Some(&t.status.state) {
                        last_state = Some(t.status.state.clone());
                        progress(Progress::State {
                            task: t.id.clone(),
                            state: state_name(&t.status.state),
                        });
                    }
                    if is_settled(&t.status.state) {
                        return Ok(t);
                    }
                }
                Err(e) if e.remote().is_some() => return Err(CallError::Agent(e)),
                Err(e) => tracing::debug!(error = %e, "GetTask failed; retrying"),
            }
            let until = Instant::now() + wait;
            tokio::time::sleep_until(until).await;
            wait = (wait * 2).min(self.opts.poll_max);
        }
    }

    /// The A2A client of `agent`: connections go to the checked addresses only.
    pub(super) fn client(&self, agent: &Agent) -> Result<Client, CallError> {
        let http = pinned(&agent.endpoint.url, &agent.addrs, self.opts.connect_timeout)
            .build()
            .map_err(|e| CallError::Http(e.to_string()))?;
        Ok(Client::new(
            http,
            agent.endpoint.clone(),
            self.signer.clone(),
        ))
    }

    /// `fut` within the call's deadline ([`super::CallOptions::timeout`]).
    pub(super) async fn deadline<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        tokio::time::timeout(self.opts.timeout, fut)
            .await
            .map_err(|_| CallError::Timeout(self.opts.timeout))?
    }
}

/// How many times a message is sent to an agent that answers a repeat with its first task.
const SEND_ATTEMPTS: u32 = 3;

/// Whether `card` declares [`agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION`].
fn exactly_once(card: &Value) -> bool {
    declares(card, agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION)
}

/// Whether `card` declares the extension `uri` in `capabilities.extensions`.
fn declares(card: &Value, uri: &str) -> bool {
    card.pointer("/capabilities/extensions")
        .and_then(Value::as_array)
        .is_some_and(|exts| exts.iter().any(|e| e["uri"] == uri))
}

/// Ask for what an agent's `card` says it offers, in `message.extensions`: to run the message
/// once ([`agentnet_a2a::engine::asks_once`]), so that a resend after a lost answer reaches the
/// first task, and a signed receipt ([`agentnet_did::receipt::EXTENSION`]), which an agent
/// signs only for a caller who asks (docs/PROTOCOL.md, "Receipts and the audit log").
pub(super) fn extensions_if_declared(card: &Value, message: &mut Message) {
    for uri in [
        agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION,
        agentnet_did::receipt::EXTENSION,
    ] {
        if declares(card, uri) {
            let exts = message.extensions.get_or_insert_with(Vec::new);
            if !exts.iter().any(|e| e == uri) {
                exts.push(uri.to_owned());
            }
        }
    }
}

fn send_error(e: ClientError) -> CallError {
    if e.remote().is_some() {
        CallError::Agent(e)
    } else {
        CallError::Send(e)
    }
}

/// The `GetTask` request of task `id`.
pub(super) fn get(id: &str, history_length: Option<i32>) -> GetTaskRequest {
    GetTaskRequest {
        id: id.to_owned(),
        history_length,
        tenant: None,
    }
}

/// The `SendMessage` request a call sends for `msg` (no configuration: the server's defaults).
pub fn send_request(msg: Message) -> SendMessageRequest {
    SendMessageRequest {
        message: msg,
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

/// A user message with `text`, continuing `task` if given: what `agentnet call "text"` sends
/// (a fresh `messageId` each time).
pub fn message(text: &str, task: Option<&Task>) -> Result<Message, CallError> {
    if text.is_empty() || text.len() > MAX_TEXT {
        return Err(CallError::BadText);
    }
    let mut m = Message::new(Role::User, vec![Part::text(text)]);
    if let Some(t) = task {
        m.task_id = Some(t.id.clone());
        m.context_id = Some(t.context_id.clone());
    }
    Ok(m)
}

/// Task `id` of the client's agent, which must be waiting for the caller's input.
pub(super) async fn waiting_task(client: &Client, id: &str) -> Result<Task, CallError> {
    let task = client
        .get_task(&get(id, Some(0)))
        .await
        .map_err(CallError::Agent)?;
    if !matches!(
        task.status.state,
        TaskState::InputRequired | TaskState::AuthRequired
    ) {
        return Err(CallError::NotWaiting {
            task: task.id,
            state: state_name(&task.status.state),
        });
    }
    Ok(task)
}

/// The text parts of the task's artifacts, or of a message, in order.
pub fn texts(outcome: &Outcome) -> Vec<String> {
    let parts: Vec<&Part> = match outcome {
        Outcome::Task(t) => t
            .artifacts
            .iter()
            .flatten()
            .flat_map(|a| a.parts.iter())
            .collect(),
        Outcome::Message(m) => m.parts.iter().collect(),
    };
    parts
        .into_iter()
        .filter_map(|p| p.as_text().map(str::to_owned))
        .collect()
}

/// The text of a task's status message (what an `INPUT_REQUIRED` task asks).
pub fn status_text(task: &Task) -> Option<String> {
    let m = task.status.message.as_ref()?;
    let t: Vec<&str> = m.parts.iter().filter_map(|p| p.as_text()).collect();
    (!t.is_empty()).then(|| t.join("\n"))
}

/// The ProtoJSON name of a task state.
pub fn state_name(s: &TaskState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{s:?}"))
}

/// Whether a task in state `s` needs nothing more from us to be done with this turn.
pub fn is_settled(s: &TaskState) -> bool {
    s.is_terminal() || matches!(s, TaskState::InputRequired | TaskState::AuthRequired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_agent_that_says_it_keeps_one_task_per_message_is_sent_a_message_twice() {
        let ext = agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION;
        let says =
            serde_json::json!({"capabilities": {"extensions": [{"uri": "x"}, {"uri": ext}]}});
        assert!(exactly_once(&says));
        for silent in [
            serde_json::json!({"capabilities": {"extensions": [{"uri": "x"}]}}),
            serde_json::json!({"capabilities": {}}),
            serde_json::json!({"capabilities": {"extensions": {"uri": ext}}}),
            serde_json::json!(null),
        ] {
            assert!(!exactly_once(&silent), "{silent}");
        }
        // Our hosted agents say so.
        let cfg: crate::config::FileConfig =
            toml::from_str("[[agent]]\nid = \"e\"\nkind = \"echo\"\n").unwrap();
        let card = crate::hosted::card_for(&cfg.agent[0], "https://n.example/a2a/e");
        assert!(exactly_once(&card), "{card}");
    }

    /// The caller asks for what the card offers, and only that: an agent signs a receipt only
    /// for a caller who asks (`hosted::receipts::asked`), so a call to one of our agents asks.
    #[test]
    fn a_call_asks_for_the_receipt_and_the_single_run_the_card_offers() {
        let cfg: crate::config::FileConfig =
            toml::from_str("[[agent]]\nid = \"e\"\nkind = \"echo\"\n").unwrap();
        let card = crate::hosted::card_for(&cfg.agent[0], "https://n.example/a2a/e");
        let mut m = message("hi", None).unwrap();
        m.extensions = Some(vec!["urn:example:mine".into()]);
        extensions_if_declared(&card, &mut m);
        assert_eq!(
            m.extensions.as_deref().unwrap(),
            [
                "urn:example:mine",
                agentnet_a2a::engine::EXACTLY_ONCE_EXTENSION,
                agentnet_did::receipt::EXTENSION
            ]
        );
        let mut m = message("hi", None).unwrap();
        extensions_if_declared(&serde_json::json!({"capabilities": {}}), &mut m);
        assert_eq!(m.extensions, None);
    }

    #[test]
    fn messages_are_bounded_and_continue_their_task() {
        assert!(matches!(message("", None), Err(CallError::BadText)));
        assert!(matches!(
            message(&"x".repeat(MAX_TEXT + 1), None),
            Err(CallError::BadText)
        ));
        let t: Task = serde_json::from_value(serde_json::json!({
            "id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}
        }))
        .unwrap();
        let m = message("Ada", Some(&t)).unwrap();
        assert_eq!(m.task_id.as_deref(), Some("t1"));
        assert_eq!(m.context_id.as_deref(), Some("c1"));
        assert_eq!(
            state_name(&TaskState::InputRequired),
            "TASK_STATE_INPUT_REQUIRED"
        );
        assert!(is_settled(&TaskState::InputRequired) && !is_settled(&TaskState::Working));
    }
}
