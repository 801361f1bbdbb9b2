//! The SSE fan-out: a bounded broadcast channel of events per live task, the streams that
//! read it ([`EventStream`]) and the slots they hold. A stream that falls behind gets the
//! task's current snapshot instead of the missed events.

use std::collections::HashMap;
use std::sync::Arc;

use a2a::{
    Artifact, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent,
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::slots::{Held, Shares};
use super::{is_interrupted, Engine, Inner};
use crate::auth::{Caller, Owner, Source};
use crate::error::ProtocolError;

/// A live task's fan-out: its event channel, its streams, its running turn.
pub(super) struct Channel {
    tx: broadcast::Sender<StreamResponse>,
    pub(super) subscribers: usize,
    pub(super) running: Option<CancellationToken>,
}

/// What the engine holds for its live tasks: their channels, keyed by owner and task id, and
/// the slots held (running turns, open streams).
#[derive(Default)]
pub(super) struct Live {
    pub(super) channels: HashMap<(Owner, String), Channel>,
    pub(super) running: Held,
    subscribers: Held,
}

/// Counts one SSE stream; uncounted on drop.
pub(super) struct SubscriberSlot {
    inner: Arc<Inner>,
    key: (Owner, String),
    source: Source,
}

impl Drop for SubscriberSlot {
    fn drop(&mut self) {
        let mut live = self.inner.lock_live();
        live.subscribers.give_back(&self.key.0, &self.source);
        if let Some(ch) = live.channels.get_mut(&self.key) {
            ch.subscribers = ch.subscribers.saturating_sub(1);
            if ch.subscribers == 0 && ch.running.is_none() {
                live.channels.remove(&self.key);
            }
        }
    }
}

/// The events of one task, for an SSE stream: first the task, then its status and artifact
/// updates, ending after a terminal status, when no event has come for
/// [`Limits::max_stream_idle`], and after [`Limits::max_stream_lifetime`]. A
/// `SendStreamingMessage` stream also ends after an interrupted status (`INPUT_REQUIRED`,
/// `AUTH_REQUIRED`: the turn is over), right after the first event when the task is already
/// in one; a `SubscribeToTask` stream stays open through them until the task ends, so that a
/// client waiting on an interrupted task sees it go on and finish. A message the agent
/// answered directly ([`Handler::reply`]) is a stream of that one message.
///
/// [`Limits::max_stream_idle`]: super::Limits::max_stream_idle
/// [`Limits::max_stream_lifetime`]: super::Limits::max_stream_lifetime
/// [`Handler::reply`]: crate::handler::Handler::reply
pub struct EventStream {
    first: Option<StreamResponse>,
    /// `None`: the stream is its first event only.
    rx: Option<broadcast::Receiver<StreamResponse>>,
    engine: Engine,
    owner: Owner,
    task_id: String,
    ended: bool,
    /// `SubscribeToTask`: an interrupted state does not end the stream.
    until_terminal: bool,
    deadline: tokio::time::Instant,
    _slot: Option<SubscriberSlot>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("task_id", &self.task_id)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    /// A stream of the task `task_id` that starts with the task as `first`, then reads the
    /// task's channel until it ends, holding its stream slot (`sub`, from
    /// [`Engine::subscribe_channel`]); `until_terminal` for `SubscribeToTask`.
    pub(super) fn open(
        engine: &Engine,
        owner: &Owner,
        task_id: String,
        first: Task,
        sub: (broadcast::Receiver<StreamResponse>, SubscriberSlot),
        until_terminal: bool,
    ) -> Self {
        let (rx, slot) = sub;
        EventStream {
            first: Some(StreamResponse::Task(first)),
            rx: Some(rx),
            engine: engine.clone(),
            owner: owner.clone(),
            task_id,
            ended: false,
            until_terminal,
            deadline: tokio::time::Instant::now() + engine.inner.limits.max_stream_lifetime,
            _slot: Some(slot),
        }
    }

    /// A stream of one event, `only`: nothing follows it.
    pub(super) fn single(engine: &Engine, owner: &Owner, only: StreamResponse) -> Self {
        EventStream {
            first: Some(only),
            rx: None,
            engine: engine.clone(),
            owner: owner.clone(),
            task_id: String::new(),
            ended: false,
            until_terminal: false,
            deadline: tokio::time::Instant::now(),
            _slot: None,
        }
    }

    /// Does a task in state `s` end this stream?
    fn ends_at(&self, s: &TaskState) -> bool {
        s.is_terminal() || (!self.until_terminal && is_interrupted(s))
    }

    /// The next event; `None` once the stream has ended.
    pub async fn next(&mut self) -> Option<StreamResponse> {
        if self.ended {
            return None;
        }
        if let Some(first) = self.first.take() {
            match &first {
                // A task already waiting for its caller has nothing more to stream, unless
                // this is a subscription, which waits for the task to go on.
                StreamResponse::Task(t) => self.ended = self.ends_at(&t.status.state),
                StreamResponse::Message(_) => self.ended = true,
                _ => {}
            }
            self.ended |= self.rx.is_none();
            return Some(first);
        }
        let idle = self.engine.inner.limits.max_stream_idle;
        let left = self
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        let rx = self.rx.as_mut()?;
        let Ok(received) = tokio::time::timeout(idle.min(left), rx.recv()).await else {
            if left <= idle {
                tracing::debug!(task = %self.task_id, "SSE stream at its lifetime; ending it");
            } else {
                tracing::debug!(task = %self.task_id, ?idle, "SSE stream idle; ending it");
            }
            self.ended = true;
            return None;
        };
        let ev = match received {
            Ok(ev) => ev,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(task = %self.task_id, missed, "SSE stream lagged; sending the task");
                match self.engine.load(&self.owner, &self.task_id).await {
                    Ok(Some(t)) => StreamResponse::Task(self.engine.shape(t, None)),
                    _ => {
                        self.ended = true;
                        return None;
                    }
                }
            }
            Err(broadcast::error::RecvError::Closed) => {
                self.ended = true;
                return None;
            }
        };
        let state = match &ev {
            StreamResponse::StatusUpdate(s) => Some(&s.status.state),
            StreamResponse::Task(t) => Some(&t.status.state),
            _ => None,
        };
        if let Some(s) = state {
            self.ended = self.ends_at(s);
        }
        Some(ev)
    }
}

impl Inner {
    /// The live state, locked (a panic while it was held does not poison it for good).
    pub(super) fn lock_live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Send `ev` to the streams of the task `id`, if any.
    pub(super) fn publish(&self, owner: &Owner, id: &str, ev: StreamResponse) {
        let live = self.lock_live();
        if let Some(ch) = live.channels.get(&(owner.clone(), id.to_string())) {
            // No receiver is fine: nobody is streaming this task.
            let _ = ch.tx.send(ev);
        }
    }
}

impl Engine {
    /// Mark the task's channel running with the turn's cancel token (creating the channel if
    /// no stream opened it).
    pub(super) fn mark_running(&self, owner: &Owner, id: &str, cancel: &CancellationToken) {
        let buffer = self.inner.limits.event_buffer.max(1);
        let mut live = self.inner.lock_live();
        let ch = live
            .channels
            .entry((owner.clone(), id.to_string()))
            .or_insert_with(|| Channel {
                tx: broadcast::channel(buffer).0,
                subscribers: 0,
                running: None,
            });
        ch.running = Some(cancel.clone());
    }

    /// Open a stream slot on the task's channel (creating the channel), bounded per task, per
    /// owner, per source and in all.
    pub(super) fn subscribe_channel(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<(broadcast::Receiver<StreamResponse>, SubscriberSlot), ProtocolError> {
        let (owner, source) = (&caller.owner, &caller.source);
        let l = &self.inner.limits;
        let key = (owner.clone(), id.to_string());
        let mut live = self.inner.lock_live();
        live.subscribers.check(
            caller,
            &Shares {
                total: l.max_subscribers,
                per_owner: l.max_subscribers_per_owner,
                per_source: l.max_subscribers_per_source,
                what: "streams",
                state: "open",
                hint: "; close one first",
            },
        )?;
        let buffer = l.event_buffer.max(1);
        let ch = live.channels.entry(key.clone()).or_insert_with(|| Channel {
            tx: broadcast::channel(buffer).0,
            subscribers: 0,
            running: None,
        });
        if ch.subscribers >= l.max_subscribers_per_task {
            let n = ch.subscribers;
            if n == 0 && ch.running.is_none() {
                live.channels.remove(&key);
            }
            return Err(ProtocolError::Busy(format!(
                "{n} streams are open on this task (at most {})",
                l.max_subscribers_per_task
            )));
        }
        ch.subscribers += 1;
        let rx = ch.tx.subscribe();
        live.subscribers.take(owner, source);
        Ok((
            rx,
            SubscriberSlot {
                inner: self.inner.clone(),
                key,
                source: *source,
            },
        ))
    }
}

/// A task's status, as a stream event.
pub(super) fn status_event(task: &Task) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        metadata: None,
    })
}

/// An artifact of the task `t`, as a stream event.
pub(super) fn artifact_event(t: &Task, artifact: Artifact) -> StreamResponse {
    StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: t.id.clone(),
        context_id: t.context_id.clone(),
        artifact,
        append: None,
        last_chunk: None,
        metadata: None,
    })
}
