//! What one agent's engine lets its callers cost: [`Limits`], every bound with its default and
//! the reason for it.

use std::time::Duration;

/// What one agent's engine lets its callers cost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Request bodies at most this many bytes (applied by the server): 1 MiB.
    pub max_body_bytes: usize,
    /// Messages kept in a task's history (oldest dropped first): 100.
    pub max_history_stored: usize,
    /// Messages returned in a task's history, whatever `historyLength` asks: 100.
    pub max_history_returned: usize,
    /// Artifacts kept per task (later ones are dropped with a warning): 64.
    pub max_artifacts: usize,
    /// `ListTasks` page size when the request sets none: 50 (the spec's default).
    pub default_page_size: usize,
    /// Largest `pageSize` accepted: 100 (the spec's maximum).
    pub max_page_size: usize,
    /// Turns running at once for one owner: 16.
    pub max_running_per_owner: usize,
    /// Turns running at once for one source (an IPv4 address or IPv6 /64, whatever the
    /// owners): 64, so that free DIDs from one block take at most 1/16 of `max_running`.
    pub max_running_per_source: usize,
    /// Turns running at once in all: 1024.
    pub max_running: usize,
    /// SSE streams open on one task: 8.
    pub max_subscribers_per_task: usize,
    /// SSE streams open for one owner: 16.
    pub max_subscribers_per_owner: usize,
    /// SSE streams open for one source (an IPv4 address or IPv6 /64, whatever the owners): 32,
    /// 1/8 of `max_subscribers`.
    pub max_subscribers_per_source: usize,
    /// SSE streams open in all: 256.
    pub max_subscribers: usize,
    /// An SSE stream that carries no event for this long ends (keep-alive comments do not
    /// count), so a task that works for days holds no stream slot for days; the client can
    /// subscribe again: 10 min.
    pub max_stream_idle: Duration,
    /// An SSE stream ends after this long whatever it carries (a `SubscribeToTask` on a task
    /// waiting for input stays open until the task ends, so a task that keeps reporting would
    /// otherwise hold its slot for as long as it lives); the client can subscribe again: 1 h.
    pub max_stream_lifetime: Duration,
    /// Events buffered per live task for its streams: 64.
    pub event_buffer: usize,
    /// A blocking `SendMessage` answers after this with the task as it is: 25 s, under the
    /// node's 30 s request timeout.
    pub max_blocking_wait: Duration,
    /// SSE keep-alive comment interval: 15 s.
    pub keep_alive: Duration,
    /// A new task of a blocking `SendMessage` is first written when its turn reports (an
    /// update or its outcome) or after this long, whichever comes first: 50 ms (at most half
    /// of `max_blocking_wait`; zero writes it at once). Until then only the turn knows its id,
    /// so nobody can ask for it; a turn that ends within the delay costs one write instead of
    /// two. The quota is checked before the turn starts all the same.
    pub defer_first_write: Duration,
    /// Longest id (task, context, message) accepted: 256 bytes.
    pub max_id_len: usize,
    /// New-task messages remembered per owner with the task each started, so that the same
    /// `messageId` sent again (a retry after a lost answer) gets that task, not a second one:
    /// 256 (the oldest forgotten first).
    pub max_seen_per_owner: usize,
    /// And per source (an IPv4 address or IPv6 /64, whatever the owners): 4096.
    pub max_seen_per_source: usize,
    /// And in all: 16384 (about 7 MiB at the longest ids); 0 turns it off.
    pub max_seen: usize,
    /// Deepest JSON nesting of a request body (applied by the server, before anything is
    /// parsed): 64. What the store wraps around a message must still read back
    /// ([`crate::store::MAX_RECORD_DEPTH`]); at most that minus a margin.
    pub max_json_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 1 << 20,
            max_history_stored: 100,
            max_history_returned: 100,
            max_artifacts: 64,
            default_page_size: 50,
            max_page_size: 100,
            max_running_per_owner: 16,
            max_running_per_source: 64,
            max_running: 1024,
            max_subscribers_per_task: 8,
            max_subscribers_per_owner: 16,
            max_subscribers_per_source: 32,
            max_subscribers: 256,
            max_stream_idle: Duration::from_secs(600),
            max_stream_lifetime: Duration::from_secs(3600),
            event_buffer: 64,
            max_blocking_wait: Duration::from_secs(25),
            keep_alive: Duration::from_secs(15),
            defer_first_write: Duration::from_millis(50),
            max_id_len: 256,
            max_seen_per_owner: 256,
            max_seen_per_source: 4096,
            max_seen: 16384,
            max_json_depth: 64,
        }
    }
}
