//! Blocking work off the async workers: the validation pool, and `spawn_blocking` for store calls.

use super::{oneshot, Arc, Error, Mutex};

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Store(format!("store task failed: {e}")))?
        .map_err(|e| Error::Store(e.to_string()))
}

/// The validation pool: as many threads as the machine has cores, shared by every node in the
/// process, for the work of one advertisement (stored sequence, signatures, write).
///
/// Why not `spawn_blocking`: under a burst of gossip every validation took its own
/// blocking-pool thread, and hundreds of runnable threads, each with ~0.15 ms of CPU work,
/// were time-sliced against the runtime's workers, which carry the network: forwarding
/// waited on the scheduler. A fixed pool keeps the work in arrival order and the threads few.
/// Jobs beyond the queue's bound go to `spawn_blocking` rather than wait.
pub(super) struct Pool {
    tx: std::sync::mpsc::SyncSender<Box<dyn FnOnce() + Send>>,
}

pub(super) const POOL_QUEUE: usize = 4096;

pub(super) fn pool() -> &'static Pool {
    static POOL: std::sync::OnceLock<Pool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Box<dyn FnOnce() + Send>>(POOL_QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("agentnet-validate-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    // A panicking job loses its reply (the caller gets an error), not the thread.
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                        tracing::error!("a validation job panicked");
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "starting a validation thread");
            }
        }
        Pool { tx }
    })
}

/// Run `f` on the validation pool (or, when its queue is full, a blocking thread).
pub(super) async fn on_pool<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Result<T, Error> {
    let (reply, rx) = oneshot::channel();
    let job: Box<dyn FnOnce() + Send> = Box::new(move || {
        let _ = reply.send(f());
    });
    match pool().tx.try_send(job) {
        Ok(()) => {}
        Err(std::sync::mpsc::TrySendError::Full(job))
        | Err(std::sync::mpsc::TrySendError::Disconnected(job)) => {
            tokio::task::spawn_blocking(job);
        }
    }
    rx.await
        .map_err(|_| Error::Store("validation job dropped".into()))?
        .map_err(|e| Error::Store(e.to_string()))
}
