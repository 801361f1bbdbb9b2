//! Kind `proxy`: each turn forwarded to an upstream A2A agent, signed as the proxy agent's own
//! DID; a delegation chain the turn came with is presented upstream, handed off to the upstream
//! agent (whose DID its verified card names) when the chain allows one more link.

use super::{
    agent_message, client, json, receipts, Arc, Artifact, BoxFuture, CancelTaskRequest, Client,
    ClientLimits, Duration, GetTaskRequest, Handler, HandlerError, Message, Outcome,
    SendMessageRequest, SendMessageResponse, Task, TaskState, Turn, Updates, Value,
};

/// Forwards turns to an upstream A2A agent.
#[derive(Clone)]
pub(super) struct ProxyAgent {
    pub(super) upstream: String,
    /// Upstream addresses may be loopback or private, and `http`.
    pub(super) allow_private: bool,
    /// Resolves the signers of the upstream card.
    pub(super) resolver: agentnet_did::Resolver,
    /// The agent's identity: signs upstream requests, hands delegations on.
    pub(super) identity: crate::identity::Identity,
    /// The upstream client, and the upstream agent's DID when its card verified.
    pub(super) client: Arc<tokio::sync::OnceCell<(Arc<Client>, Option<agentnet_did::Did>)>>,
    /// Where the upstream receipts go (the node's audit log), and the DID this agent signs as.
    pub(super) audit: Option<(crate::audit::Recorder, String)>,
    /// The upstream receipts' digests, for this agent's own receipts.
    pub(super) subs: Arc<receipts::SubReceipts>,
    /// The upstream agent's DID: its card's signer (`None`: unsigned card, receipts unchecked).
    pub(super) upstream_did: Arc<tokio::sync::OnceCell<Option<String>>>,
    /// The node's card pins: the upstream's signed card is checked against its pin.
    pub(super) pins: Option<Arc<crate::trust::pins::Pins>>,
    /// Refuse a changed upstream card (else log it and go on).
    pub(super) refuse_changed: bool,
}

impl ProxyAgent {
    /// Verify the upstream task's receipt, log it, and list its digest in this task's receipt.
    async fn record(&self, turn: &Turn, upstream: &Task, sent: &Message) {
        let Some((rec, me)) = &self.audit else {
            return;
        };
        let Some(Some(did)) = self.upstream_did.get() else {
            if crate::audit::receipt_of(upstream).is_some() {
                tracing::warn!(task = %turn.task_id, "upstream receipt not checked: the upstream card is not signed");
            }
            return;
        };
        // The request as the upstream agent holds it: its history's copy (which must hold the
        // parts sent), else the message sent in the form the upstream keeps it (its task's
        // ids, without the chain its task holds: docs/PROTOCOL.md, "Kept once"); a poll reads
        // the upstream task without its history.
        let derived;
        let held = match crate::audit::request_of(upstream) {
            Some(m) => m,
            None => {
                let mut m = agentnet_a2a::gate::as_held(
                    sent,
                    Some(agentnet_did::delegation::METADATA_MEMBER),
                );
                m.task_id = Some(upstream.id.clone());
                m.context_id = Some(upstream.context_id.clone());
                derived = m;
                &derived
            }
        };
        match rec
            .record(
                "proxy",
                did,
                Some(me),
                upstream,
                Some(held),
                Some(&sent.parts),
                Some((&turn.caller.key(), &turn.source.key())),
            )
            .await
        {
            crate::audit::Recorded::Logged { digest, .. } => {
                if !self.subs.add(&turn.task_id, digest) {
                    tracing::warn!(task = %turn.task_id, "sub-receipt not listed: too many waiting");
                }
            }
            crate::audit::Recorded::None => {}
            other => {
                tracing::warn!(task = %turn.task_id, upstream = %upstream.id, outcome = ?other, "upstream receipt not logged")
            }
        }
    }
}

impl ProxyAgent {
    /// Why this turn's upstream receipt could not be logged, if it could not: the audit log's
    /// share for entries on behalf of remote callers (this caller's, its network block's, or
    /// all strangers') is full. Asked before the upstream call, so that a full share costs
    /// no upstream work the node would do and then not log. `None` when no receipt is
    /// logged for this agent (no audit log, or an unsigned upstream card).
    async fn no_room_to_log(&self, turn: &Turn) -> Option<String> {
        let (rec, _) = self.audit.as_ref()?;
        if !matches!(self.upstream_did.get(), Some(Some(_))) {
            return None;
        }
        let why = rec
            .room_for_stranger(&turn.caller.key(), &turn.source.key())
            .await
            .err()?;
        Some(format!(
            "this proxy is not taking more work from you now: {why}; try again once the node's \
             operator has made room (`agentnet audit` shows the log)"
        ))
    }
}

/// Each upstream request: connect within 10 s, answer within 60 s.
const PROXY_TIMEOUTS: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(60));

/// The metadata key carrying the upstream task's ids in an `INPUT_REQUIRED` question.
const UPSTREAM_KEY: &str = "agentnet.upstream";
/// Longest a proxied turn follows its upstream task.
const PROXY_MAX_WAIT: Duration = Duration::from_secs(600);

impl ProxyAgent {
    async fn client(&self) -> Result<(Arc<Client>, Option<agentnet_did::Did>), HandlerError> {
        self.client
            .get_or_try_init(|| async {
                let base = url::Url::parse(&self.upstream)
                    .map_err(|e| HandlerError(format!("upstream URL: {e}")))?;
                let http = self.pinned(&base).await?;
                let card = client::fetch_card(&http, &base, ClientLimits::default())
                    .await
                    .map_err(|e| HandlerError(format!("upstream card: {e}")))?;
                let endpoint = client::choose_interface(&card)
                    .map_err(|e| HandlerError(format!("upstream: {e}")))?;
                // The DID whose signature on the card verifies: hand-offs go to it, and its
                // receipts are checked against it.
                let did = upstream_did(&card, &self.resolver).await;
                if let Some(d) = &did {
                    self.check_pin(d.as_str(), &card).await?;
                }
                let _ = self.upstream_did.set(did.as_ref().map(|d| d.to_string()));
                // The card names its own URL, perhaps on another host: checked the same way.
                let http = self.pinned(&endpoint.url).await?;
                let signer: Arc<dyn agentnet_a2a::client::Signer> =
                    Arc::new(crate::call::DidSigner::new(self.identity.clone()));
                Ok((Arc::new(Client::new(http, endpoint, Some(signer))), did))
            })
            .await
            .cloned()
    }

    /// The upstream's signed card against its pin (pinned when first read): a changed card is
    /// refused when the agent's policy says so, else logged. The proxy reads the card once per
    /// start, and its endpoint comes from that reading: this is where a change can take effect.
    async fn check_pin(&self, did: &str, card: &Value) -> Result<(), HandlerError> {
        let Some(pins) = self.pins.clone() else {
            return Ok(());
        };
        let (d, c) = (did.to_owned(), card.clone());
        let now = crate::trust::endorsements::unix_now();
        let state = tokio::task::spawn_blocking(move || pins.observe(&d, &c, now))
            .await
            .map_err(|e| HandlerError(format!("checking the upstream card: {e}")))?;
        if let crate::trust::pins::PinState::Changed { diff, .. } = state {
            let what = diff.join("; ");
            if self.refuse_changed {
                return Err(HandlerError(format!(
                    "the upstream card of {did} changed since it was accepted ({what}); \
                     `agentnet trust accept {did}` on this node accepts it"
                )));
            }
            tracing::warn!(upstream = %did, changes = %what, "the upstream card changed since it was accepted; calling it anyway (refuse_changed_card = false)");
        }
        Ok(())
    }

    /// An HTTP client for `url`, its addresses checked and pinned, no redirects.
    async fn pinned(&self, url: &url::Url) -> Result<reqwest::Client, HandlerError> {
        let addrs = crate::call::check_url(url, self.allow_private)
            .await
            .map_err(|e| HandlerError(format!("upstream: {e}")))?;
        crate::call::pinned(url, &addrs, PROXY_TIMEOUTS.0)
            .timeout(PROXY_TIMEOUTS.1)
            .build()
            .map_err(|e| HandlerError(format!("upstream client: {e}")))
    }
}

/// The DID whose signature on the upstream card verifies (the first), if any.
async fn upstream_did(
    card: &Value,
    resolver: &agentnet_did::Resolver,
) -> Option<agentnet_did::Did> {
    let signers = agentnet_did::card::verify(card, agentnet_did::card::KeySource::Did(resolver))
        .await
        .map_err(|e| tracing::warn!(error = %e, "the upstream card does not verify: no hand-off"))
        .ok()?;
    let kid = signers.first()?.kid.clone();
    agentnet_did::DidUrl::parse(&kid)
        .ok()
        .map(|u| u.did().clone())
}

/// The delegation chain the task came with: the turn's message's, else the first in history.
fn chain_of(turn: &Turn) -> Option<Value> {
    let key = agentnet_did::delegation::METADATA_MEMBER;
    std::iter::once(&turn.message)
        .chain(turn.history.iter())
        .find_map(|m| m.metadata.as_ref()?.get(key).cloned())
}

fn outcome_of(turn: &Turn, task: Task) -> Option<Outcome> {
    let status_msg = |fallback: &str| {
        let mut m = task
            .status
            .message
            .clone()
            .unwrap_or_else(|| agent_message(turn, fallback));
        m.task_id = Some(turn.task_id.clone());
        m.context_id = Some(turn.context_id.clone());
        m
    };
    match task.status.state {
        TaskState::Completed => Some(Outcome::Completed {
            message: task.status.message.clone().map(|_| status_msg("")),
            artifacts: task.artifacts.clone().unwrap_or_default(),
        }),
        TaskState::InputRequired | TaskState::AuthRequired => {
            let mut m = status_msg("the upstream agent needs more input");
            m.metadata.get_or_insert_with(Default::default).insert(
                UPSTREAM_KEY.into(),
                json!({"taskId": task.id, "contextId": task.context_id}),
            );
            Some(Outcome::InputRequired { message: m })
        }
        TaskState::Failed | TaskState::Canceled => Some(Outcome::Failed {
            message: status_msg("the upstream task failed"),
        }),
        TaskState::Rejected => Some(Outcome::Rejected {
            message: status_msg("the upstream agent rejected the task"),
        }),
        _ => None,
    }
}

impl Handler for ProxyAgent {
    fn handle(
        &self,
        turn: Turn,
        _updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        let this = self.clone();
        Box::pin(async move {
            let (client, upstream) = this.client().await?;
            if let Some(why) = this.no_room_to_log(&turn).await {
                return Ok(Outcome::Rejected {
                    message: agent_message(&turn, &why),
                });
            }
            // Continue the upstream task this one is waiting on, if any.
            let upstream_ids = turn.history.iter().rev().find_map(|m| {
                m.metadata.as_ref()?.get(UPSTREAM_KEY).and_then(|v| {
                    Some((
                        v["taskId"].as_str()?.to_string(),
                        v["contextId"].as_str()?.to_string(),
                    ))
                })
            });
            let mut msg = Message::new(turn.message.role.clone(), turn.message.parts.clone());
            // The upstream's receipt is what this agent's own receipt names (`subReceipts`): ask
            // for it (an agent signs one only for a caller who asks).
            msg.extensions = Some(vec![agentnet_did::receipt::EXTENSION.to_owned()]);
            if let Some((t, c)) = &upstream_ids {
                msg.task_id = Some(t.clone());
                msg.context_id = Some(c.clone());
            }
            if let Some(chain) = chain_of(&turn) {
                // Handed on when this agent holds the chain's last link and it allows one more;
                // presented as it is otherwise (the upstream decides).
                let chain = match (
                    &upstream,
                    crate::call::Delegation::new(chain.clone(), Some(this.identity.clone())),
                ) {
                    (Some(did), Ok(d)) => d.for_agent(did),
                    _ => chain,
                };
                msg.metadata
                    .get_or_insert_with(Default::default)
                    .insert(agentnet_did::delegation::METADATA_MEMBER.to_string(), chain);
            }
            let sent = msg.clone();
            let req = SendMessageRequest {
                message: msg,
                configuration: None,
                metadata: None,
                tenant: None,
            };
            let resp = tokio::select! {
                r = client.send_message(&req) => r.map_err(|e| HandlerError(format!("upstream: {e}")))?,
                _ = turn.cancel.cancelled() => return Err(HandlerError("canceled".into())),
            };
            let mut task = match resp {
                SendMessageResponse::Message(m) => {
                    return Ok(Outcome::Completed {
                        message: None,
                        artifacts: vec![Artifact {
                            artifact_id: uuid::Uuid::new_v4().to_string(),
                            name: Some("reply".into()),
                            description: None,
                            parts: m.parts,
                            metadata: None,
                            extensions: None,
                        }],
                    })
                }
                SendMessageResponse::Task(t) => t,
            };
            let deadline = tokio::time::Instant::now() + PROXY_MAX_WAIT;
            let mut wait = Duration::from_millis(100);
            loop {
                if let Some(o) = outcome_of(&turn, task.clone()) {
                    if task.status.state.is_terminal() {
                        this.record(&turn, &task, &sent).await;
                    }
                    return Ok(o);
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(HandlerError(
                        "the upstream task did not finish in time".into(),
                    ));
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = turn.cancel.cancelled() => {
                        let _ = client.cancel_task(&CancelTaskRequest { id: task.id.clone(), metadata: None, tenant: None }).await;
                        return Err(HandlerError("canceled".into()));
                    }
                }
                wait = (wait * 2).min(Duration::from_secs(5));
                task = client
                    .get_task(&GetTaskRequest {
                        id: task.id.clone(),
                        history_length: Some(0),
                        tenant: None,
                    })
                    .await
                    .map_err(|e| HandlerError(format!("upstream: {e}")))?;
            }
        })
    }
}
