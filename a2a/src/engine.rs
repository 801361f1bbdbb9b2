//! The task engine: A2A's operations, independent of the binding that carried them.
//!
//! Both bindings of [`crate::server`] call the same [`Engine`] methods, with the caller's
//! [`Owner`] already decided. The engine:
//!
//! - creates a task for every new message (`SUBMITTED`), runs the agent's turn in a task of its
//!   own (`WORKING`, then what the [`Outcome`] says), and keeps the task in the [`TaskStore`];
//! - continues a task in `INPUT_REQUIRED` (or `AUTH_REQUIRED`) when the caller's next message
//!   names it, refuses messages to terminal tasks (`UnsupportedOperation`) and to tasks still
//!   working;
//! - makes every change of a task a read-modify-write under a lock striped by task id, and
//!   refuses to change a terminal task at that one place, so a terminal task never changes:
//!   a cancel sticks when the agent's work finishes later, and the late outcome is dropped;
//! - fans updates out to SSE streams through a bounded broadcast channel per live task. A
//!   stream that falls behind gets the task's current snapshot instead of the missed events.
//!
//! # Bounds ([`Limits`])
//!
//! Turns running per owner, per source and in all; SSE subscribers per task, per owner, per
//! source and in all, and how long a stream may go without an event; history kept per task and
//! returned per request; artifacts per task; page size; how long a blocking `SendMessage` waits
//! before it answers with the task as it is (the node's request timeout is 30 s). The request
//! body limit is applied by the server. A source ([`Source`]) is the caller's network block:
//! DIDs cost nothing to mint, so a per-owner share alone bounds nobody; the per-source share is
//! what keeps one address (or IPv6 /64) from taking a whole total.
//!
//! # Beside it
//!
//! This file is the state machine: admission, a task's creation and changes, the turn. Around
//! it, one idea each: `limits` ([`Limits`]), `slots` (the running turns and open streams held,
//! counted in all, per owner and per source) and `fanout` (the SSE fan-out: each live task's
//! broadcast channel, and the [`EventStream`] that reads it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2a::{
    Artifact, CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, Message,
    Role, SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use futures_util::FutureExt as _;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::auth::{Caller, Owner, Source};
use crate::error::ProtocolError;
use crate::gate::{as_held, Admit, Admitted, Gate, Operation};
use crate::handler::{Handler, HandlerError, Outcome, Turn, Update, Updates};
use crate::seen::{Bounds, Seen};
use crate::store::{Cursor, ListQuery, StoreError, TaskStore};

mod fanout;
mod limits;
mod slots;

pub use fanout::EventStream;
pub use limits::Limits;

use fanout::{artifact_event, status_event, Live};
use slots::Shares;

/// The card extension of an agent whose engine answers a repeated `SendMessage` (same
/// `messageId`, same caller) with the task the first one started ([`Limits::max_seen`]): its
/// callers may send again when an answer is lost. A message asks for it by listing this URI
/// in its `extensions`; any other message is run every time it comes, as A2A has it (the
/// official TCK sends one message id on each transport, and expects a task for each).
pub const EXACTLY_ONCE_EXTENSION: &str = "urn:agentnet:a2a:exactly-once:v1";

/// Whether `m` asks to be run once ([`EXACTLY_ONCE_EXTENSION`] in its `extensions`).
pub fn asks_once(m: &Message) -> bool {
    m.extensions
        .as_ref()
        .is_some_and(|e| e.iter().any(|u| u == EXACTLY_ONCE_EXTENSION))
}

/// How a turn ended: the task as the turn left it; `None` when the turn did not write the
/// last state (canceled, shut down); an error when a task not stored yet could not be.
type TurnEnd = Result<Option<Task>, ProtocolError>;

/// What a turn's work came to: the agent's outcome or error, or the panic it raised.
type Ran = std::thread::Result<Result<Outcome, HandlerError>>;

/// Stripes of the per-task update lock.
const STRIPES: usize = 64;

struct Inner {
    handler: Arc<dyn Handler>,
    store: Arc<dyn TaskStore>,
    limits: Limits,
    live: Mutex<Live>,
    stripes: Vec<Mutex<()>>,
    shutdown: CancellationToken,
    /// New-task messages and their tasks ([`crate::seen`]).
    seen: Mutex<Seen>,
    /// The admission check run before any work ([`crate::gate`]).
    gate: Option<Arc<dyn Gate>>,
}

/// The task engine of one agent. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("limits", &self.inner.limits)
            .finish_non_exhaustive()
    }
}

fn store_error(e: StoreError) -> ProtocolError {
    match e {
        StoreError::Full(_) | StoreError::Refused(_) => ProtocolError::Busy(e.to_string()),
        StoreError::Backend(_) => ProtocolError::Internal(e.to_string()),
    }
}

/// A new task admitted but not written yet (see [`Limits::defer_first_write`]), with the source
/// its first write is charged to.
struct Unstored {
    task: Task,
    source: crate::auth::Source,
}

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// `INPUT_REQUIRED` and `AUTH_REQUIRED`: the task waits for the caller.
fn is_interrupted(s: &TaskState) -> bool {
    matches!(s, TaskState::InputRequired | TaskState::AuthRequired)
}

fn push_history(task: &mut Task, message: Message, max: usize) {
    let h = task.history.get_or_insert_with(Vec::new);
    h.push(message);
    if h.len() > max {
        let excess = h.len() - max;
        h.drain(..excess);
    }
}

/// Releases a running-turn slot (and the channel's `running` mark) when the turn ends, however
/// it ends.
struct RunSlot {
    inner: Arc<Inner>,
    owner: Owner,
    source: Source,
    task_id: Option<String>,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let mut live = self.inner.lock_live();
        live.running.give_back(&self.owner, &self.source);
        if let Some(id) = self.task_id.take() {
            let key = (self.owner.clone(), id);
            if let Some(ch) = live.channels.get_mut(&key) {
                ch.running = None;
                if ch.subscribers == 0 {
                    live.channels.remove(&key);
                }
            }
        }
    }
}

impl Inner {
    /// The stripe of the per-task update lock that `id` takes.
    fn stripe(&self, id: &str) -> &Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.hash(&mut h);
        &self.stripes[(h.finish() as usize) % STRIPES]
    }
}

impl Engine {
    /// An engine running `handler`'s turns and keeping tasks in `store`.
    pub fn new(handler: Arc<dyn Handler>, store: Arc<dyn TaskStore>, limits: Limits) -> Self {
        Self::gated(handler, store, limits, None)
    }

    /// [`Engine::new`] with an admission check run before every operation's work.
    pub fn gated(
        handler: Arc<dyn Handler>,
        store: Arc<dyn TaskStore>,
        limits: Limits,
        gate: Option<Arc<dyn Gate>>,
    ) -> Self {
        Engine {
            inner: Arc::new(Inner {
                handler,
                store,
                live: Mutex::new(Live::default()),
                stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
                shutdown: CancellationToken::new(),
                seen: Mutex::new(Seen::new(Bounds {
                    per_owner: limits.max_seen_per_owner,
                    per_source: limits.max_seen_per_source,
                    total: limits.max_seen,
                })),
                gate,
                limits,
            }),
        }
    }

    /// The engine's limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Stop every running turn (their tasks stay as stored; the node marks them on restart).
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    /// Turns running now (for tests and metrics).
    pub fn running(&self) -> usize {
        self.inner.lock_live().running.total
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, ProtocolError> + Send + 'static,
    ) -> Result<T, ProtocolError> {
        if self.inner.store.runs_inline() {
            return f(&self.inner);
        }
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| ProtocolError::Internal(format!("task store call: {e}")))?
    }

    async fn load(&self, owner: &Owner, id: &str) -> Result<Option<Task>, ProtocolError> {
        let (owner, id) = (owner.clone(), id.to_string());
        self.blocking(move |i| i.store.get(&owner, &id).map_err(store_error))
            .await
    }

    /// Read-modify-write one task under its stripe lock. A terminal task is never changed:
    /// `on_terminal` is returned instead.
    async fn update(
        &self,
        owner: &Owner,
        id: &str,
        on_terminal: ProtocolError,
        f: impl FnOnce(&mut Task, &Limits) -> Result<(), ProtocolError> + Send + 'static,
    ) -> Result<Task, ProtocolError> {
        let (owner, id) = (owner.clone(), id.to_string());
        self.blocking(move |i| {
            let _g = i.stripe(&id).lock().unwrap_or_else(|p| p.into_inner());
            let mut task = i
                .store
                .get(&owner, &id)
                .map_err(store_error)?
                .ok_or_else(|| ProtocolError::TaskNotFound(id.clone()))?;
            if task.status.state.is_terminal() {
                return Err(on_terminal);
            }
            let old = task.status.clone();
            f(&mut task, &i.limits)?;
            i.store.seal(&owner, &mut task);
            i.store.replace(&owner, &old, &task).map_err(store_error)?;
            Ok(task)
        })
        .await
    }

    /// A task as returned to a caller: history cut to `history_length` (bounded).
    fn shape(&self, mut task: Task, history_length: Option<i32>) -> Task {
        let max = self.inner.limits.max_history_returned;
        let keep = match history_length {
            Some(n) => (n.max(0) as usize).min(max),
            None => max,
        };
        if keep == 0 {
            task.history = None;
        } else if let Some(h) = task.history.as_mut() {
            if h.len() > keep {
                h.drain(..h.len() - keep);
            }
        }
        task
    }

    fn check_id(&self, what: &str, id: &str) -> Result<(), ProtocolError> {
        if id.is_empty() || id.len() > self.inner.limits.max_id_len {
            return Err(ProtocolError::InvalidParams(format!(
                "{what} must be 1 to {} bytes",
                self.inner.limits.max_id_len
            )));
        }
        Ok(())
    }

    fn check_history_length(&self, h: Option<i32>) -> Result<(), ProtocolError> {
        match h {
            Some(n) if n < 0 => Err(ProtocolError::InvalidParams(
                "historyLength must not be negative".into(),
            )),
            _ => Ok(()),
        }
    }

    fn reserve_run(&self, caller: &Caller) -> Result<RunSlot, ProtocolError> {
        let (owner, source) = (&caller.owner, &caller.source);
        let l = &self.inner.limits;
        let mut live = self.inner.lock_live();
        live.running.check(
            caller,
            &Shares {
                total: l.max_running,
                per_owner: l.max_running_per_owner,
                per_source: l.max_running_per_source,
                what: "tasks",
                state: "running",
                hint: "",
            },
        )?;
        live.running.take(owner, source);
        Ok(RunSlot {
            inner: self.inner.clone(),
            owner: owner.clone(),
            source: *source,
            task_id: None,
        })
    }

    fn validate_send(&self, req: &SendMessageRequest) -> Result<(), ProtocolError> {
        let m = &req.message;
        self.check_id("message.messageId", &m.message_id)?;
        if m.role != Role::User {
            return Err(ProtocolError::InvalidParams(
                "message.role must be ROLE_USER".into(),
            ));
        }
        if m.parts.is_empty() {
            return Err(ProtocolError::InvalidParams(
                "message.parts: at least one part is required".into(),
            ));
        }
        if let Some(t) = &m.task_id {
            self.check_id("message.taskId", t)?;
        }
        if let Some(c) = &m.context_id {
            self.check_id("message.contextId", c)?;
        }
        if let Some(cfg) = &req.configuration {
            if cfg.task_push_notification_config.is_some() {
                return Err(ProtocolError::PushNotificationNotSupported);
            }
            self.check_history_length(cfg.history_length)?;
        }
        Ok(())
    }

    /// The task a message that asks to be run once ([`asks_once`]) already reached, if this
    /// is that message sent again (same `messageId`, same owner): for a follow-up, the task whose history holds it; for a new
    /// task, the one it started ([`crate::seen`]), read once it is stored (a blocking send's
    /// task is first written within [`Limits::defer_first_write`]). `None`: a message to run.
    async fn repeated(
        &self,
        caller: &Caller,
        req: &SendMessageRequest,
    ) -> Result<Option<Task>, ProtocolError> {
        let m = &req.message;
        if !asks_once(m) {
            return Ok(None);
        }
        self.validate_send(req)?;
        let owner = &caller.owner;
        if let Some(id) = &m.task_id {
            let Some(task) = self.load(owner, id).await? else {
                return Ok(None);
            };
            let received = task
                .history
                .iter()
                .flatten()
                .any(|h| h.message_id == m.message_id);
            return Ok(received.then_some(task));
        }
        let seen = self
            .inner
            .seen
            .lock()
            .expect("seen lock poisoned")
            .task(owner, &m.message_id)
            .map(str::to_owned);
        let Some(id) = seen else {
            return Ok(None);
        };
        // Bounded: past a few times the deferred write's delay, the task is gone (refused by
        // its quota, or swept): the message runs as a new one.
        let wait = (self.inner.limits.defer_first_write * 4).max(Duration::from_millis(200));
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(task) = self.load(owner, &id).await? {
                return Ok(Some(task));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Accept a message: create or continue its task, start the turn. Returns the task as
    /// accepted, the stream (when asked for) and the turn's completion signal. With `defer`
    /// (a blocking send, whose caller learns the task's id only from the answer) a new task's
    /// first write waits for the turn (see [`Limits::defer_first_write`]).
    async fn begin(
        &self,
        caller: &Caller,
        req: SendMessageRequest,
        stream: bool,
        defer: bool,
    ) -> Result<(Task, Option<EventStream>, oneshot::Receiver<TurnEnd>), ProtocolError> {
        let owner = &caller.owner;
        let Admitted {
            metadata: admitted,
            held,
        } = self.admit_send(caller, &req).await?;
        let defer = defer && !stream && !self.inner.limits.defer_first_write.is_zero();
        let mut slot = self.reserve_run(caller)?;
        let mut message = req.message;
        let new_id = uuid::Uuid::new_v4().to_string();
        // The stream slot is taken before the task is created or moved, so that a refusal
        // leaves no task behind and no event is missed.
        let sub = if stream {
            let id = message.task_id.as_deref().unwrap_or(&new_id);
            Some(self.subscribe_channel(caller, id)?)
        } else {
            None
        };

        let cancel = self.inner.shutdown.child_token();
        let (task, history, unstored) = match message.task_id.clone() {
            Some(id) => {
                let (task, history) = self.continue_task(owner, &id, &mut message, held).await?;
                (task, history, None)
            }
            None => {
                let task = self.new_task(caller, &mut message, new_id, admitted, held);
                // Marked running before it is stored, so that a cancel that finds the task
                // stored also finds the turn to stop.
                self.mark_running(owner, &task.id, &cancel);
                slot.task_id = Some(task.id.clone());
                let unstored = self.store_new(caller, &task, defer).await?;
                (task, Vec::new(), unstored)
            }
        };
        message.task_id = Some(task.id.clone());

        let events = sub.map(|sub| {
            let first = self.shape(task.clone(), None);
            EventStream::open(self, owner, task.id.clone(), first, sub, false)
        });
        let turn = Turn {
            task_id: task.id.clone(),
            context_id: task.context_id.clone(),
            caller: owner.clone(),
            source: caller.source,
            message,
            history,
            cancel,
        };
        let fresh = task.status.state == TaskState::Submitted;
        let done = self.launch(owner, turn, fresh, slot, unstored);
        Ok((task, events, done))
    }

    /// Check a message before any work: its fields, then the gate, if any, with the task the
    /// message names as stored. Returns what the gate admitted it with.
    async fn admit_send(
        &self,
        caller: &Caller,
        req: &SendMessageRequest,
    ) -> Result<Admitted, ProtocolError> {
        self.validate_send(req)?;
        let Some(gate) = &self.inner.gate else {
            return Ok(Admitted::default());
        };
        let stored = match &req.message.task_id {
            Some(id) if !id.is_empty() && id.len() <= self.inner.limits.max_id_len => {
                self.load(&caller.owner, id).await?
            }
            _ => None,
        };
        Ok(gate
            .admit(Admit {
                caller,
                op: Operation::Send,
                message: Some(&req.message),
                task: stored.as_ref(),
            })
            .await?)
    }

    /// Continue the task `id`, waiting for its caller, with `message`: the message joins its
    /// history (less the member the task holds already) and the task is `WORKING` again.
    /// Returns the task and its history before the message; `message` gets the task's context.
    async fn continue_task(
        &self,
        owner: &Owner,
        id: &str,
        message: &mut Message,
        held: Option<&'static str>,
    ) -> Result<(Task, Vec<Message>), ProtocolError> {
        let msg = as_held(message, held);
        let task = self
            .update(
                owner,
                id,
                ProtocolError::UnsupportedOperation(format!(
                    "task {id} is in a terminal state and takes no more messages"
                )),
                {
                    move |t, l| {
                        if !is_interrupted(&t.status.state) {
                            return Err(ProtocolError::UnsupportedOperation(format!(
                                "task {} is still working; wait for it or cancel it",
                                t.id
                            )));
                        }
                        if let Some(c) = &msg.context_id {
                            if c != &t.context_id {
                                return Err(ProtocolError::InvalidParams(
                                    "message.contextId does not match the task's".into(),
                                ));
                            }
                        }
                        let mut msg = msg;
                        msg.context_id = Some(t.context_id.clone());
                        push_history(t, msg, l.max_history_stored);
                        t.status = TaskStatus {
                            state: TaskState::Working,
                            message: None,
                            timestamp: Some(now()),
                        };
                        Ok(())
                    }
                },
            )
            .await?;
        let mut before = task.history.clone().unwrap_or_default();
        before.pop(); // the message just added is the turn's message, not its history
        message.context_id = Some(task.context_id.clone());
        Ok((task, before))
    }

    /// The new task `id` that `message` starts (`SUBMITTED`, the message its history, less the
    /// member the gate `held`), remembered against a retry when the message asks to be run
    /// once; `message` gets the task's ids.
    fn new_task(
        &self,
        caller: &Caller,
        message: &mut Message,
        id: String,
        metadata: Option<HashMap<String, serde_json::Value>>,
        held: Option<&'static str>,
    ) -> Task {
        if asks_once(message) {
            self.inner.seen.lock().expect("seen lock poisoned").insert(
                caller,
                &message.message_id,
                &id,
            );
        }
        let context_id = message
            .context_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        message.task_id = Some(id.clone());
        message.context_id = Some(context_id.clone());
        let mut task = Task {
            id,
            context_id,
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: Some(now()),
            },
            artifacts: None,
            history: None,
            metadata,
        };
        let max_hist = self.inner.limits.max_history_stored;
        push_history(&mut task, as_held(message, held), max_hist);
        task
    }

    /// The first write of a new task, charged to the store's quota. With `defer` the task is
    /// only admitted, and returned to be written by its turn (see
    /// [`Limits::defer_first_write`]).
    async fn store_new(
        &self,
        caller: &Caller,
        task: &Task,
        defer: bool,
    ) -> Result<Option<Unstored>, ProtocolError> {
        // The turn starts at once, so the task is stored as WORKING in its first write
        // (one write fewer per message); the caller still sees it SUBMITTED first.
        let mut working = task.clone();
        working.status.state = TaskState::Working;
        let c = caller.clone();
        if defer {
            self.blocking(move |i| i.store.admit(&c).map_err(store_error))
                .await?;
            return Ok(Some(Unstored {
                task: working,
                source: caller.source,
            }));
        }
        self.blocking(move |i| {
            let mut working = working;
            i.store.seal(&c.owner, &mut working);
            i.store
                .admit(&c)
                .and_then(|()| i.store.insert(&c, &working))
                .map_err(store_error)
        })
        .await?;
        Ok(None)
    }

    /// Start `turn` in a task of its own, marked running on the task's channel and holding
    /// its running `slot` until it ends. The receiver gets how it ended.
    fn launch(
        &self,
        owner: &Owner,
        turn: Turn,
        fresh: bool,
        mut slot: RunSlot,
        unstored: Option<Unstored>,
    ) -> oneshot::Receiver<TurnEnd> {
        self.mark_running(owner, &turn.task_id, &turn.cancel);
        slot.task_id = Some(turn.task_id.clone());
        let (done_tx, done_rx) = oneshot::channel();
        let engine = self.clone();
        let owner = owner.clone();
        tokio::spawn(async move {
            let last = engine.drive(owner, turn, fresh, unstored).await;
            drop(slot);
            let _ = done_tx.send(last);
        });
        done_rx
    }

    /// Run one turn to its end and store what it produced. `unstored` is the new task not
    /// written yet (see [`Limits::defer_first_write`]); it is written when the turn first
    /// reports, or when the delay has passed.
    async fn drive(
        &self,
        owner: Owner,
        turn: Turn,
        fresh: bool,
        mut unstored: Option<Unstored>,
    ) -> TurnEnd {
        let id = turn.task_id.clone();
        if !self
            .announce_start(&owner, &turn, fresh, unstored.is_some())
            .await
        {
            return Ok(None);
        }
        let Some(result) = self.run_turn(&owner, turn, &mut unstored).await? else {
            return Ok(None);
        };
        let outcome = Self::outcome_of(&id, result);
        self.finish(&owner, &id, &mut unstored, outcome).await
    }

    /// Tell the task's streams that the turn starts (`WORKING`); `false` when it is not to
    /// start: canceled since the task was accepted.
    async fn announce_start(
        &self,
        owner: &Owner,
        turn: &Turn,
        fresh: bool,
        unstored: bool,
    ) -> bool {
        let id = &turn.task_id;
        if fresh {
            // Stored WORKING when it was accepted (see `begin`), or not stored yet; a cancel
            // since then has stopped the token.
            if turn.cancel.is_cancelled() {
                return false;
            }
        }
        if fresh && !unstored {
            self.inner.publish(
                owner,
                id,
                StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                    task_id: id.clone(),
                    context_id: turn.context_id.clone(),
                    status: TaskStatus {
                        state: TaskState::Working,
                        message: None,
                        timestamp: Some(now()),
                    },
                    metadata: None,
                }),
            );
        } else if !fresh {
            match self.load(owner, id).await {
                Ok(Some(t)) if !t.status.state.is_terminal() => {
                    self.inner.publish(owner, id, status_event(&t))
                }
                _ => return false, // canceled between acceptance and start
            }
        }
        true
    }

    /// Run the agent's turn, storing and streaming its updates as they come, and writing an
    /// `unstored` task when the delay has passed. `None` when the turn was canceled or shut
    /// down; the error is a failed first write of an unstored task, which ends the turn.
    async fn run_turn(
        &self,
        owner: &Owner,
        turn: Turn,
        unstored: &mut Option<Unstored>,
    ) -> Result<Option<Ran>, ProtocolError> {
        let id = turn.task_id.clone();
        let cancel = turn.cancel.clone();
        let (tx, mut rx) = mpsc::channel(16);
        // The turn runs in this task (no task of its own to spawn and wake): a panic in it is
        // caught here and fails the task, a cancel drops it. A turn that ends at its first
        // poll (the echo agent's) is done before any timer is armed.
        let work = std::panic::AssertUnwindSafe(self.inner.handler.handle(turn, Updates { tx }))
            .catch_unwind();
        let mut work = std::pin::pin!(work);
        let result = match (&mut work).now_or_never() {
            Some(r) => Some(r),
            None => {
                let limits = &self.inner.limits;
                let first_write =
                    tokio::time::sleep(limits.defer_first_write.min(limits.max_blocking_wait / 2));
                tokio::pin!(first_write);
                loop {
                    tokio::select! {
                        r = &mut work => break Some(r),
                        Some(u) = rx.recv() => {
                            self.apply_update(owner, &id, unstored, u).await?;
                        }
                        _ = &mut first_write, if unstored.is_some() => {
                            if let Some(t) = unstored.take() {
                                self.insert(owner, t).await?;
                            }
                        }
                        _ = cancel.cancelled() => break None,
                    }
                }
            }
        };
        // Updates sent just before the outcome are applied first.
        while let Ok(u) = rx.try_recv() {
            self.apply_update(owner, &id, unstored, u).await?;
        }
        // Canceled (the cancel wrote the state) or shut down (the task stays as stored; one
        // not stored yet is dropped with its turn): a handler that noticed the cancel first
        // and returned does not get to write either.
        Ok(result.filter(|_| !cancel.is_cancelled()))
    }

    /// The outcome of a turn's work: an agent's error or panic fails the task.
    fn outcome_of(id: &str, result: Ran) -> Outcome {
        match result {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => Outcome::Failed {
                message: agent_text(id, &e.0),
            },
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::warn!(task = %id, panic = %why, "agent turn panicked");
                Outcome::Failed {
                    message: agent_text(id, "the agent failed"),
                }
            }
        }
    }

    /// Store the turn's outcome and send it to the task's streams, its artifacts before its
    /// final status. An outcome the store refuses fails the task.
    async fn finish(
        &self,
        owner: &Owner,
        id: &str,
        unstored: &mut Option<Unstored>,
        outcome: Outcome,
    ) -> TurnEnd {
        let gone = ProtocolError::UnsupportedOperation(String::new());
        let (state, message, artifacts) = match outcome {
            Outcome::Completed { message, artifacts } => (TaskState::Completed, message, artifacts),
            Outcome::InputRequired { message } => (TaskState::InputRequired, Some(message), vec![]),
            Outcome::Failed { message } => (TaskState::Failed, Some(message), vec![]),
            Outcome::Rejected { message } => (TaskState::Rejected, Some(message), vec![]),
        };
        let outcome_artifacts = artifacts.clone();
        let first = unstored.is_some();
        let res = self
            .change(owner, id, unstored, gone, {
                move |t, l| {
                    for a in artifacts {
                        add_artifact(t, a, l.max_artifacts);
                    }
                    let message = message.map(|mut m| {
                        m.task_id = Some(t.id.clone());
                        m.context_id = Some(t.context_id.clone());
                        m.role = Role::Agent;
                        m
                    });
                    if let Some(m) = &message {
                        push_history(t, m.clone(), l.max_history_stored);
                    }
                    t.status = TaskStatus {
                        state,
                        message,
                        timestamp: Some(now()),
                    };
                    Ok(())
                }
            })
            .await;
        match res {
            // Written for the first time: nobody knew the task, nobody streams it.
            Ok(t) if first => Ok(Some(t)),
            Ok(t) => {
                // The outcome's artifacts, as events, before the final status.
                for a in outcome_artifacts {
                    self.inner.publish(owner, id, artifact_event(&t, a));
                }
                self.inner.publish(owner, id, status_event(&t));
                Ok(Some(t))
            }
            Err(e) if first => Err(e),
            // Canceled meanwhile: the cancel wrote the last state.
            Err(ProtocolError::UnsupportedOperation(m)) if m.is_empty() => Ok(None),
            // The outcome could not be stored (too large, store full, I/O): never left WORKING
            // silently. The task fails with the reason, without what could not be stored.
            Err(e) => self.fail_unstorable(owner, id, &e).await,
        }
    }

    /// The turn's outcome could not be written: mark the task `FAILED` with the reason, so
    /// its caller sees the end instead of a task working forever.
    async fn fail_unstorable(&self, owner: &Owner, id: &str, why: &ProtocolError) -> TurnEnd {
        tracing::warn!(task = %id, error = %why, "a turn's outcome could not be stored; failing the task");
        let text = format!("the agent's answer could not be stored: {why}");
        let tid = id.to_string();
        let gone = ProtocolError::UnsupportedOperation(String::new());
        match self
            .update(owner, id, gone, move |t, l| {
                let m = agent_text(&tid, &text);
                push_history(t, m.clone(), l.max_history_stored);
                t.status = TaskStatus {
                    state: TaskState::Failed,
                    message: Some(m),
                    timestamp: Some(now()),
                };
                Ok(())
            })
            .await
        {
            Ok(t) => {
                self.inner.publish(owner, id, status_event(&t));
                Ok(Some(t))
            }
            Err(ProtocolError::UnsupportedOperation(m)) if m.is_empty() => Ok(None),
            Err(e) => {
                // The store refuses even that: the task stays as stored until the next start,
                // which fails every task left working.
                tracing::error!(task = %id, error = %e, "could not mark the task failed either");
                Ok(None)
            }
        }
    }

    /// Write a new task for the first time (admitted by `begin`).
    async fn insert(&self, owner: &Owner, u: Unstored) -> Result<Task, ProtocolError> {
        let caller = Caller::new(owner.clone(), u.source);
        let mut task = u.task;
        self.blocking(move |i| {
            i.store.seal(&caller.owner, &mut task);
            i.store.insert(&caller, &task).map_err(store_error)?;
            Ok(task)
        })
        .await
    }

    /// [`Engine::update`] the turn's task, or, while it is `unstored`, change it and write it
    /// for the first time.
    async fn change(
        &self,
        owner: &Owner,
        id: &str,
        unstored: &mut Option<Unstored>,
        on_terminal: ProtocolError,
        f: impl FnOnce(&mut Task, &Limits) -> Result<(), ProtocolError> + Send + 'static,
    ) -> Result<Task, ProtocolError> {
        match unstored.take() {
            Some(mut t) => {
                f(&mut t.task, &self.inner.limits)?;
                self.insert(owner, t).await
            }
            None => self.update(owner, id, on_terminal, f).await,
        }
    }

    /// Store an update of the turn and send it to the task's streams. An update the task no
    /// longer takes (canceled) is dropped; the error is a failed first write of an unstored
    /// task, which ends the turn.
    async fn apply_update(
        &self,
        owner: &Owner,
        id: &str,
        unstored: &mut Option<Unstored>,
        u: Update,
    ) -> Result<(), ProtocolError> {
        let gone = ProtocolError::UnsupportedOperation(String::new());
        let first = unstored.is_some();
        let (r, event) = match u {
            Update::Status(m) => {
                let r = self
                    .change(owner, id, unstored, gone, move |t, l| {
                        let mut m = m;
                        m.task_id = Some(t.id.clone());
                        m.context_id = Some(t.context_id.clone());
                        m.role = Role::Agent;
                        push_history(t, m.clone(), l.max_history_stored);
                        t.status = TaskStatus {
                            state: TaskState::Working,
                            message: Some(m),
                            timestamp: Some(now()),
                        };
                        Ok(())
                    })
                    .await;
                (r, None)
            }
            Update::Artifact(a) => {
                let ev_artifact = a.clone();
                let r = self
                    .change(owner, id, unstored, gone, move |t, l| {
                        add_artifact(t, a, l.max_artifacts);
                        Ok(())
                    })
                    .await;
                (r, Some(ev_artifact))
            }
        };
        let t = match r {
            Err(e) if first => return Err(e),
            // Canceled meanwhile: the update is not taken.
            Err(ProtocolError::UnsupportedOperation(m)) if m.is_empty() => return Ok(()),
            Err(e) => {
                // Not stored (too large, store full): the turn goes on; its outcome decides.
                tracing::warn!(task = %id, error = %e, "a turn's update could not be stored");
                return Ok(());
            }
            // Written for the first time: nobody knew the task, nobody streams it.
            Ok(_) if first => return Ok(()),
            Ok(t) => t,
        };
        match event {
            None => self.inner.publish(owner, id, status_event(&t)),
            Some(artifact) => self.inner.publish(owner, id, artifact_event(&t, artifact)),
        }
        Ok(())
    }

    /// The agent's direct answer to a message that names no task ([`Handler::reply`]): a
    /// message in the caller's context (a new one if it named none), no task stored.
    fn direct_reply(&self, req: &SendMessageRequest) -> Result<Option<Message>, ProtocolError> {
        self.validate_send(req)?;
        if req.message.task_id.is_some() {
            return Ok(None);
        }
        Ok(self.inner.handler.reply(&req.message).map(|mut m| {
            m.role = Role::Agent;
            m.task_id = None;
            m.context_id = Some(
                req.message
                    .context_id
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            );
            m
        }))
    }

    /// Run the gate, if any, for `op` on the stored `task`.
    async fn admit(
        &self,
        caller: &Caller,
        op: Operation,
        task: &Task,
    ) -> Result<(), ProtocolError> {
        if let Some(gate) = &self.inner.gate {
            gate.admit(Admit {
                caller,
                op,
                message: None,
                task: Some(task),
            })
            .await?;
        }
        Ok(())
    }

    /// `SendMessage`: blocking unless `returnImmediately`; answers `{"task": …}`, or
    /// `{"message": …}` when the agent answers directly ([`Handler::reply`]).
    pub async fn send_message(
        &self,
        caller: &Caller,
        req: SendMessageRequest,
    ) -> Result<SendMessageResponse, ProtocolError> {
        let owner = &caller.owner;
        let (immediately, history_length) = req
            .configuration
            .as_ref()
            .map(|c| (c.return_immediately.unwrap_or(false), c.history_length))
            .unwrap_or((false, None));
        if let Some(m) = self.direct_reply(&req)? {
            return Ok(SendMessageResponse::Message(m));
        }
        if let Some(task) = self.repeated(caller, &req).await? {
            return Ok(SendMessageResponse::Task(self.shape(task, history_length)));
        }
        let (task, _, done) = self.begin(caller, req, false, !immediately).await?;
        if immediately {
            return Ok(SendMessageResponse::Task(self.shape(task, history_length)));
        }
        // The turn's last state when it wrote one; otherwise (canceled, still running at the
        // wait's end) the stored task.
        let task = match tokio::time::timeout(self.inner.limits.max_blocking_wait, done).await {
            Ok(Ok(Ok(Some(t)))) => t,
            Ok(Ok(Err(e))) => return Err(e),
            _ => self
                .load(owner, &task.id)
                .await?
                .ok_or_else(|| ProtocolError::TaskNotFound(task.id.clone()))?,
        };
        Ok(SendMessageResponse::Task(self.shape(task, history_length)))
    }

    /// `SendStreamingMessage`: the task, then its updates until a terminal or interrupted
    /// state.
    pub async fn send_streaming(
        &self,
        caller: &Caller,
        req: SendMessageRequest,
    ) -> Result<EventStream, ProtocolError> {
        if let Some(m) = self.direct_reply(&req)? {
            return Ok(EventStream::single(
                self,
                &caller.owner,
                StreamResponse::Message(m),
            ));
        }
        if let Some(task) = self.repeated(caller, &req).await? {
            // The task the first send started: followed like `SubscribeToTask` while it runs
            // or waits, or given as it ended.
            if !task.status.state.is_terminal() {
                if let Ok(events) = self
                    .subscribe(
                        caller,
                        SubscribeToTaskRequest {
                            id: task.id.clone(),
                            tenant: None,
                        },
                    )
                    .await
                {
                    return Ok(events);
                }
            }
            let task = self.shape(task, None);
            return Ok(EventStream::single(
                self,
                &caller.owner,
                StreamResponse::Task(task),
            ));
        }
        let (_, events, _) = self.begin(caller, req, true, false).await?;
        events.ok_or_else(|| ProtocolError::Internal("stream not opened".into()))
    }

    /// `GetTask`.
    pub async fn get_task(
        &self,
        caller: &Caller,
        req: GetTaskRequest,
    ) -> Result<Task, ProtocolError> {
        let owner = &caller.owner;
        self.check_history_length(req.history_length)?;
        if req.id.is_empty() || req.id.len() > self.inner.limits.max_id_len {
            return Err(ProtocolError::TaskNotFound(req.id));
        }
        let task = self
            .load(owner, &req.id)
            .await?
            .ok_or_else(|| ProtocolError::TaskNotFound(req.id.clone()))?;
        self.admit(caller, Operation::Get, &task).await?;
        Ok(self.shape(task, req.history_length))
    }

    /// `ListTasks`: the caller's tasks, newest status first. Anonymous callers own no list.
    pub async fn list_tasks(
        &self,
        caller: &Caller,
        req: ListTasksRequest,
    ) -> Result<ListTasksResponse, ProtocolError> {
        let owner = &caller.owner;
        let l = &self.inner.limits;
        self.check_history_length(req.history_length)?;
        let page_size = match req.page_size {
            None | Some(0) => l.default_page_size,
            Some(n) if n < 0 || n as usize > l.max_page_size => {
                return Err(ProtocolError::InvalidParams(format!(
                    "pageSize must be 1 to {}",
                    l.max_page_size
                )))
            }
            Some(n) => n as usize,
        };
        let cursor = match req.page_token.as_deref() {
            None | Some("") => None,
            Some(t) => Some(Cursor::from_token(t).ok_or_else(|| {
                ProtocolError::InvalidParams("pageToken is not one this server issued".into())
            })?),
        };
        if let Some(c) = &req.context_id {
            self.check_id("contextId", c)?;
        }
        if matches!(owner, Owner::Anonymous(_)) {
            return Ok(ListTasksResponse {
                tasks: vec![],
                next_page_token: String::new(),
                page_size: page_size as i32,
                total_size: 0,
            });
        }
        let include_artifacts = req.include_artifacts.unwrap_or(false);
        let asked_history = req.history_length.unwrap_or(0);
        let history_length = Some(asked_history);
        // The store cuts each task as it reads it (history, artifacts) and stops the page at
        // MAX_PAGE_BYTES of records, so a page of large tasks is never held whole.
        let query = ListQuery {
            context_id: req.context_id.clone(),
            status: req.status.clone().filter(|s| *s != TaskState::Unspecified),
            status_after: req.status_timestamp_after,
            page_size,
            cursor,
            max_bytes: crate::store::MAX_PAGE_BYTES,
            history_length: Some((asked_history.max(0) as usize).min(l.max_history_returned)),
            drop_artifacts: !include_artifacts,
        };
        let o = owner.clone();
        // Off the request workers whatever `runs_inline` says: a page reads megabytes.
        let inner = self.inner.clone();
        let page = tokio::task::spawn_blocking(move || inner.store.list(&o, &query))
            .await
            .map_err(|e| ProtocolError::Internal(format!("task store call: {e}")))?
            .map_err(store_error)?;
        let tasks = page
            .tasks
            .into_iter()
            .map(|t| {
                let mut t = self.shape(t, history_length);
                if !include_artifacts {
                    t.artifacts = None;
                }
                t
            })
            .collect();
        Ok(ListTasksResponse {
            tasks,
            next_page_token: page.next.map(|c| c.to_token()).unwrap_or_default(),
            page_size: page_size as i32,
            total_size: page.total_size.min(i32::MAX as usize) as i32,
        })
    }

    /// `CancelTask`: the task becomes `CANCELED` for good; its running turn is stopped.
    pub async fn cancel_task(
        &self,
        caller: &Caller,
        req: CancelTaskRequest,
    ) -> Result<Task, ProtocolError> {
        let owner = &caller.owner;
        if req.id.is_empty() || req.id.len() > self.inner.limits.max_id_len {
            return Err(ProtocolError::TaskNotFound(req.id));
        }
        if self.inner.gate.is_some() {
            let stored = self
                .load(owner, &req.id)
                .await?
                .ok_or_else(|| ProtocolError::TaskNotFound(req.id.clone()))?;
            self.admit(caller, Operation::Cancel, &stored).await?;
        }
        let task = self
            .update(
                owner,
                &req.id,
                ProtocolError::TaskNotCancelable(req.id.clone()),
                |t, _| {
                    t.status = TaskStatus {
                        state: TaskState::Canceled,
                        message: None,
                        timestamp: Some(now()),
                    };
                    Ok(())
                },
            )
            .await?;
        self.inner.publish(owner, &task.id, status_event(&task));
        let running = self
            .inner
            .lock_live()
            .channels
            .get(&(owner.clone(), task.id.clone()))
            .and_then(|c| c.running.clone());
        if let Some(token) = running {
            token.cancel();
        }
        Ok(self.shape(task, None))
    }

    /// `SubscribeToTask`: the task, then its updates. Terminal tasks are refused.
    pub async fn subscribe(
        &self,
        caller: &Caller,
        req: SubscribeToTaskRequest,
    ) -> Result<EventStream, ProtocolError> {
        let owner = &caller.owner;
        if req.id.is_empty() || req.id.len() > self.inner.limits.max_id_len {
            return Err(ProtocolError::TaskNotFound(req.id));
        }
        let terminal = |id: &str| {
            ProtocolError::UnsupportedOperation(format!(
                "task {id} is in a terminal state; there is nothing to subscribe to"
            ))
        };
        let task = self
            .load(owner, &req.id)
            .await?
            .ok_or_else(|| ProtocolError::TaskNotFound(req.id.clone()))?;
        if task.status.state.is_terminal() {
            return Err(terminal(&req.id));
        }
        self.admit(caller, Operation::Get, &task).await?;
        let (rx, slot) = self.subscribe_channel(caller, &req.id)?;
        // Read again after subscribing, so that no update falls between snapshot and stream.
        let task = self
            .load(owner, &req.id)
            .await?
            .ok_or_else(|| ProtocolError::TaskNotFound(req.id.clone()))?;
        if task.status.state.is_terminal() {
            return Err(terminal(&req.id));
        }
        let first = self.shape(task, None);
        Ok(EventStream::open(
            self,
            owner,
            req.id,
            first,
            (rx, slot),
            true,
        ))
    }
}

fn agent_text(task_id: &str, text: &str) -> Message {
    let mut m = Message::new(Role::Agent, vec![a2a::Part::text(text)]);
    m.task_id = Some(task_id.to_string());
    m
}

fn add_artifact(t: &mut Task, a: Artifact, max: usize) {
    let arts = t.artifacts.get_or_insert_with(Vec::new);
    if let Some(existing) = arts.iter_mut().find(|x| x.artifact_id == a.artifact_id) {
        *existing = a;
    } else if arts.len() < max {
        arts.push(a);
    } else {
        tracing::warn!(task = %t.id, max, "artifact dropped: the task has the most artifacts it may");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::BoxFuture;
    use crate::auth::Source;
    use crate::handler::HandlerError;
    use crate::store::MemoryStore;
    use a2a::Part;

    struct Panics;
    impl Handler for Panics {
        fn handle(&self, _: Turn, _: Updates) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
            Box::pin(async { panic!("agent bug") })
        }
    }

    fn msg() -> SendMessageRequest {
        SendMessageRequest {
            message: Message::new(Role::User, vec![Part::text("x")]),
            configuration: None,
            metadata: None,
            tenant: None,
        }
    }

    #[tokio::test]
    async fn terminal_tasks_are_never_updated() {
        let store = Arc::new(MemoryStore::default());
        let e = Engine::new(
            Arc::new(crate::samples::Echo),
            store.clone(),
            Limits::default(),
        );
        let c = Caller::local("did:x");
        let o = c.owner.clone();
        let SendMessageResponse::Task(t) = e.send_message(&c, msg()).await.unwrap() else {
            panic!()
        };
        assert_eq!(t.status.state, TaskState::Completed);
        let r = e
            .update(
                &o,
                &t.id,
                ProtocolError::Internal("terminal".into()),
                |t, _| {
                    t.status.state = TaskState::Working;
                    Ok(())
                },
            )
            .await;
        assert_eq!(r.unwrap_err(), ProtocolError::Internal("terminal".into()));
        let stored = store.get(&o, &t.id).unwrap().unwrap();
        assert_eq!(stored.status, t.status);
    }

    #[tokio::test]
    async fn a_panicking_agent_fails_its_task_and_frees_its_slot() {
        let e = Engine::new(
            Arc::new(Panics),
            Arc::new(MemoryStore::default()),
            Limits::default(),
        );
        let c = Caller::new(Owner::Anonymous(Source::Local), Source::Local);
        let SendMessageResponse::Task(t) = e.send_message(&c, msg()).await.unwrap() else {
            panic!()
        };
        assert_eq!(t.status.state, TaskState::Failed);
        assert_eq!(e.running(), 0);
        assert!(e.inner.lock_live().channels.is_empty());
    }

    /// A store that counts its writes and can be told to fail new tasks.
    #[derive(Default)]
    struct Counting {
        mem: MemoryStore,
        writes: std::sync::atomic::AtomicUsize,
        fail_inserts: std::sync::atomic::AtomicBool,
    }

    impl Counting {
        fn writes(&self) -> usize {
            self.writes.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn count(&self) {
            self.writes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl TaskStore for Counting {
        fn get(&self, owner: &Owner, id: &str) -> Result<Option<Task>, StoreError> {
            self.mem.get(owner, id)
        }
        fn put(&self, owner: &Owner, task: &Task) -> Result<(), StoreError> {
            self.count();
            self.mem.put(owner, task)
        }
        fn admit(&self, caller: &Caller) -> Result<(), StoreError> {
            self.mem.admit(caller)
        }
        fn insert(&self, caller: &Caller, task: &Task) -> Result<(), StoreError> {
            if self.fail_inserts.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(StoreError::Backend("disk full".into()));
            }
            self.count();
            self.mem.insert(caller, task)
        }
        fn list(&self, owner: &Owner, q: &ListQuery) -> Result<crate::store::TaskPage, StoreError> {
            self.mem.list(owner, q)
        }
        fn runs_inline(&self) -> bool {
            true
        }
    }

    /// Completes when its gate opens; counts its turns.
    struct Gated {
        gate: tokio::sync::Semaphore,
        turns: std::sync::atomic::AtomicUsize,
    }

    impl Default for Gated {
        fn default() -> Self {
            Gated {
                gate: tokio::sync::Semaphore::new(0),
                turns: Default::default(),
            }
        }
    }

    impl Handler for Arc<Gated> {
        fn handle(&self, _: Turn, _: Updates) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
            self.turns.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let me = self.clone();
            Box::pin(async move {
                me.gate.acquire().await.unwrap().forget();
                Ok(Outcome::Completed {
                    message: None,
                    artifacts: vec![],
                })
            })
        }
    }

    fn task_of(r: SendMessageResponse) -> Task {
        match r {
            SendMessageResponse::Task(t) => t,
            other => panic!("not a task: {other:?}"),
        }
    }

    async fn listed(e: &Engine, o: &Caller) -> Vec<Task> {
        let req: ListTasksRequest = serde_json::from_value(serde_json::json!({})).unwrap();
        e.list_tasks(o, req).await.unwrap().tasks
    }

    #[tokio::test]
    async fn a_blocking_send_that_ends_at_once_writes_its_task_once() {
        let store = Arc::new(Counting::default());
        let e = Engine::new(
            Arc::new(crate::samples::Echo),
            store.clone(),
            Limits::default(),
        );
        let c = Caller::local("did:x");
        let o = c.owner.clone();
        let t = task_of(e.send_message(&c, msg()).await.unwrap());
        assert_eq!(t.status.state, TaskState::Completed);
        assert_eq!(store.writes(), 1);
        assert_eq!(store.get(&o, &t.id).unwrap().unwrap().status, t.status);
        // Asked to answer at once, the caller learns the id before the turn ends: the task is
        // stored before the answer, then again with its outcome.
        let mut m = msg();
        m.configuration = Some(a2a::SendMessageConfiguration {
            accepted_output_modes: None,
            task_push_notification_config: None,
            history_length: None,
            return_immediately: Some(true),
        });
        let t = task_of(e.send_message(&c, m).await.unwrap());
        assert!(store.get(&o, &t.id).unwrap().is_some());
    }

    /// A store that cannot take a completed task (as a store refuses a record too large or
    /// too deep to read back).
    #[derive(Default)]
    struct RefusesCompleted(MemoryStore);

    impl TaskStore for RefusesCompleted {
        fn get(&self, owner: &Owner, id: &str) -> Result<Option<Task>, StoreError> {
            self.0.get(owner, id)
        }
        fn put(&self, owner: &Owner, task: &Task) -> Result<(), StoreError> {
            if task.status.state == TaskState::Completed {
                return Err(StoreError::Backend("record too deep to read back".into()));
            }
            self.0.put(owner, task)
        }
        fn list(&self, owner: &Owner, q: &ListQuery) -> Result<crate::store::TaskPage, StoreError> {
            self.0.list(owner, q)
        }
    }

    /// The outcome of a turn whose task the caller already knows (`returnImmediately`) could
    /// not be stored: the task fails with the reason instead of staying WORKING forever.
    #[tokio::test]
    async fn an_outcome_the_store_refuses_fails_the_task() {
        let store = Arc::new(RefusesCompleted::default());
        let e = Engine::new(
            Arc::new(crate::samples::Echo),
            store.clone(),
            Limits::default(),
        );
        let c = Caller::local("did:x");
        let mut m = msg();
        m.configuration = Some(a2a::SendMessageConfiguration {
            accepted_output_modes: None,
            task_push_notification_config: None,
            history_length: None,
            return_immediately: Some(true),
        });
        let t = task_of(e.send_message(&c, m).await.unwrap());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let stored = loop {
            let s = store.get(&c.owner, &t.id).unwrap().unwrap();
            if s.status.state != TaskState::Working {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "left WORKING");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(stored.status.state, TaskState::Failed);
        let text = stored.status.message.unwrap().parts[0]
            .as_text()
            .unwrap()
            .to_string();
        assert!(text.contains("could not be stored"), "{text}");
        assert_eq!(e.running(), 0);
    }

    #[tokio::test]
    async fn a_slow_blocking_turn_is_stored_once_the_delay_has_passed() {
        let store = Arc::new(Counting::default());
        let agent = Arc::new(Gated::default());
        let limits = Limits {
            defer_first_write: Duration::from_millis(20),
            ..Limits::default()
        };
        let e = Engine::new(Arc::new(agent.clone()), store.clone(), limits);
        let c = Caller::local("did:x");
        let o = c.owner.clone();
        let send = tokio::spawn({
            let (e, c) = (e.clone(), c.clone());
            async move { e.send_message(&c, msg()).await }
        });
        // The caller does not know the id yet, but its task list shows the task working.
        let working = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(t) = listed(&e, &c).await.pop() {
                    return t;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the running task was never stored");
        assert_eq!(working.status.state, TaskState::Working);
        agent.gate.add_permits(1);
        let t = task_of(send.await.unwrap().unwrap());
        assert_eq!(t.id, working.id);
        assert_eq!(t.status.state, TaskState::Completed);
        assert_eq!(store.writes(), 2);
        let stored = store.get(&o, &t.id).unwrap().unwrap();
        assert_eq!(stored.status.state, TaskState::Completed);
    }

    /// A store that marks each terminal task it is given to seal with its state.
    #[derive(Default)]
    struct Sealing(MemoryStore);

    impl TaskStore for Sealing {
        fn get(&self, owner: &Owner, id: &str) -> Result<Option<Task>, StoreError> {
            self.0.get(owner, id)
        }
        fn put(&self, owner: &Owner, task: &Task) -> Result<(), StoreError> {
            self.0.put(owner, task)
        }
        fn list(&self, owner: &Owner, q: &ListQuery) -> Result<crate::store::TaskPage, StoreError> {
            self.0.list(owner, q)
        }
        fn seal(&self, _: &Owner, task: &mut Task) {
            if task.status.state.is_terminal() {
                let state = serde_json::to_value(&task.status.state).unwrap();
                task.metadata
                    .get_or_insert_with(Default::default)
                    .insert("sealed".into(), state);
            }
        }
    }

    fn sealed(t: &Task) -> Option<String> {
        t.metadata
            .as_ref()?
            .get("sealed")?
            .as_str()
            .map(str::to_owned)
    }

    /// Every way a task ends passes it to `seal` before it is written, and the caller gets the
    /// sealed task: a turn that completes, a handler that panics, a cancel of a running turn.
    #[tokio::test]
    async fn every_terminal_write_is_sealed_and_answered_sealed() {
        let c = Caller::local("did:x");
        let o = c.owner.clone();
        for handler in [
            Arc::new(crate::samples::Echo) as Arc<dyn Handler>,
            Arc::new(Panics),
        ] {
            let store = Arc::new(Sealing::default());
            let e = Engine::new(handler, store.clone(), Limits::default());
            let t = task_of(e.send_message(&c, msg()).await.unwrap());
            let want = serde_json::to_value(&t.status.state).unwrap();
            assert!(t.status.state.is_terminal());
            assert_eq!(sealed(&t).as_deref(), want.as_str(), "answered: {t:?}");
            let stored = store.get(&o, &t.id).unwrap().unwrap();
            assert_eq!(sealed(&stored).as_deref(), want.as_str(), "stored");
        }
        let store = Arc::new(Sealing::default());
        let agent = Arc::new(Gated::default());
        let e = Engine::new(Arc::new(agent.clone()), store.clone(), Limits::default());
        let mut req = msg();
        req.configuration =
            Some(serde_json::from_value(serde_json::json!({"returnImmediately": true})).unwrap());
        let t = task_of(e.send_message(&c, req).await.unwrap());
        assert_eq!(sealed(&t), None, "a running task is not sealed");
        let canceled = e
            .cancel_task(
                &c,
                serde_json::from_value(serde_json::json!({"id": t.id})).unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(sealed(&canceled).as_deref(), Some("TASK_STATE_CANCELED"));
        let stored = store.get(&o, &t.id).unwrap().unwrap();
        assert_eq!(sealed(&stored).as_deref(), Some("TASK_STATE_CANCELED"));
        agent.gate.add_permits(1);
    }

    #[tokio::test]
    async fn a_caller_past_the_quota_is_refused_before_the_turn_runs() {
        let agent = Arc::new(Gated::default());
        let e = Engine::new(
            Arc::new(agent.clone()),
            Arc::new(MemoryStore::new(1)),
            Limits::default(),
        );
        let c = Caller::local("did:x");

        agent.gate.add_permits(1);
        e.send_message(&c, msg()).await.unwrap();
        let err = e.send_message(&c, msg()).await.unwrap_err();
        assert!(matches!(err, ProtocolError::Busy(_)), "{err:?}");
        assert_eq!(agent.turns.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn turns_admitted_together_are_all_stored_past_the_quota() {
        let agent = Arc::new(Gated::default());
        let store = Arc::new(MemoryStore::new(1));
        let e = Engine::new(Arc::new(agent.clone()), store.clone(), Limits::default());
        let c = Caller::local("did:x");
        let o = c.owner.clone();
        let sends: Vec<_> = (0..3)
            .map(|_| {
                let (e, c) = (e.clone(), c.clone());
                tokio::spawn(async move { e.send_message(&c, msg()).await })
            })
            .collect();
        // All three were admitted (nothing stored yet) before any finishes.
        while agent.turns.load(std::sync::atomic::Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        agent.gate.add_permits(3);
        for s in sends {
            let t = task_of(s.await.unwrap().unwrap());
            assert_eq!(t.status.state, TaskState::Completed);
            assert!(
                store.get(&o, &t.id).unwrap().is_some(),
                "an accepted outcome was lost"
            );
        }
        // The bound holds again for the next one.
        let err = e.send_message(&c, msg()).await.unwrap_err();
        assert!(matches!(err, ProtocolError::Busy(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_first_write_that_fails_is_the_callers_error() {
        let store = Arc::new(Counting::default());
        store
            .fail_inserts
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let e = Engine::new(
            Arc::new(crate::samples::Echo),
            store.clone(),
            Limits::default(),
        );
        let c = Caller::local("did:x");

        let err = e.send_message(&c, msg()).await.unwrap_err();
        assert!(matches!(err, ProtocolError::Internal(_)), "{err:?}");
        assert_eq!(e.running(), 0);
        assert!(listed(&e, &c).await.is_empty());
    }
}
