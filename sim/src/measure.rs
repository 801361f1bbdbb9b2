//! What the run measures with: when each node accepted each advertisement (recorded from its
//! events as they arrive), the figures of one advertisement, and percentiles.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::node::SimNode;

/// When each node's `Accepted` event for each DID arrived.
#[derive(Default)]
pub(crate) struct Arrivals {
    by_did: Mutex<HashMap<String, Vec<(usize, Instant)>>>,
    pub(crate) notify: Notify,
    /// `Accepted` events a recorder missed (its channel overflowed): deliveries not timed.
    pub(crate) lagged: std::sync::atomic::AtomicU64,
}

impl Arrivals {
    /// `node` accepted `did` at `at` (its first acceptance counts).
    fn record(&self, did: String, node: usize, at: Instant) {
        let mut m = self.by_did.lock().expect("arrivals lock poisoned");
        let v = m.entry(did).or_default();
        if !v.iter().any(|(n, _)| *n == node) {
            v.push((node, at));
        }
        drop(m);
        self.notify.notify_waiters();
    }

    /// Nodes that accepted `did`.
    pub(crate) fn count(&self, did: &str) -> usize {
        self.by_did
            .lock()
            .expect("arrivals lock poisoned")
            .get(did)
            .map_or(0, Vec::len)
    }

    /// Whether `node` accepted `did`.
    pub(crate) fn has(&self, did: &str, node: usize) -> bool {
        self.by_did
            .lock()
            .expect("arrivals lock poisoned")
            .get(did)
            .is_some_and(|v| v.iter().any(|(n, _)| *n == node))
    }

    /// When `node` accepted `did`.
    pub(crate) fn at(&self, did: &str, node: usize) -> Option<Instant> {
        self.by_did
            .lock()
            .expect("arrivals lock poisoned")
            .get(did)?
            .iter()
            .find(|(n, _)| *n == node)
            .map(|(_, t)| *t)
    }

    /// When each node that accepted `did` did.
    pub(crate) fn times(&self, did: &str) -> Vec<Instant> {
        self.by_did
            .lock()
            .expect("arrivals lock poisoned")
            .get(did)
            .map(|v| v.iter().map(|(_, t)| *t).collect())
            .unwrap_or_default()
    }
}

/// Figures of one advertisement.
pub(crate) struct Spread {
    pub(crate) reached: usize,
    /// Honest nodes running when it was published.
    pub(crate) expected: usize,
    pub(crate) publish: Duration,
    /// Time until 50, 95, 100 % of those nodes accepted it, if they did before the deadline.
    pub(crate) t: [Option<Duration>; 3],
    /// Each delivery's delay, sorted.
    pub(crate) delays_ms: Vec<f64>,
    /// Gossip copies received per accepted, minus one, from its publication to the next.
    pub(crate) duplicates: Option<f64>,
    /// Bytes in per running node over the same window (every protocol).
    pub(crate) bytes_per_node: f64,
    /// Published while a partition was in force.
    pub(crate) partitioned: bool,
    /// When it was published.
    pub(crate) t0: Instant,
}

/// The `p` quantile (0 to 1) of `sorted`, by nearest rank; `None` when empty.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// `d` in milliseconds.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Records when `node` (index `idx`) accepts each advertisement.
pub(crate) fn spawn_recorder(
    node: &SimNode,
    idx: usize,
    arrivals: Arc<Arrivals>,
    stop: CancellationToken,
) {
    let mut rx = node.client.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                ev = rx.recv() => match ev {
                    // Sybil advertisements are not the run's: not recorded (a flood of them would
                    // fill the table).
                    Ok(ev) if ev.tags.iter().any(|t| t == "sybil") => {}
                    Ok(ev) => arrivals.record(ev.did, idx, Instant::now()),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(k)) => {
                        arrivals.lagged.fetch_add(k, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        }
    });
}
