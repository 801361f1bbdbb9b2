//! The one path every advertisement takes into the store: cheap checks, the resolution pool, keys, then signatures and the write on the validation pool.

use super::pool::on_pool;
use super::{
    blocking, unix_now, Accepted, CancellationToken, Counter, Error, Instant, OwnedSemaphorePermit,
    PeerId, PutOutcome, Reject, ResolveSlots, Stats, Store, Validated, Validator,
};

/// Count a refusal: penalized reasons by name, the others (stale, throttled, unresolvable) as
/// ignored.
pub(super) fn refuse(stats: &Stats, r: Reject) -> Error {
    if r.penalize() {
        stats.reject(&r);
    } else {
        stats.ignored.inc();
    }
    Error::Rejected(r)
}

/// Adds the microseconds since its start to a counter when dropped, whichever way the closure
/// it lives in returns.
struct Elapsed<'a>(Instant, &'a Counter);

impl Drop for Elapsed<'_> {
    fn drop(&mut self) {
        self.1
            .inc_by(self.0.elapsed().as_micros().min(u128::from(u64::MAX)) as u64);
    }
}

/// Where an advertisement being accepted came from, for the resolution pool.
pub(super) enum Gate {
    /// This node's own caller: no pool.
    Local,
    /// This node's own publishing: no pool, and the store's caps and disk watermark do not
    /// apply ([`Store::put_own`]).
    Own,
    /// A peer (a fetch provider): a DID document fetch takes one of its slots.
    Peer(PeerId, ResolveSlots),
    /// Gossip: as `Peer`, and the validation permit is given back while the fetch waits.
    Gossip(PeerId, ResolveSlots, Option<OwnedSemaphorePermit>),
}

/// Whose work a validation is: the node's own, or the network's.
#[derive(Clone, Copy)]
enum GateKind {
    Node,
    Network,
}

/// What [`accept`] works with.
pub(super) struct Ctx<'a> {
    pub(super) store: &'a Store,
    pub(super) validator: &'a Validator,
    pub(super) stats: &'a Stats,
    pub(super) events: &'a tokio::sync::broadcast::Sender<Accepted>,
    /// The node's: a validation waiting for a DID document stops at shutdown, and none writes
    /// once it is cancelled.
    pub(super) cancel: &'a CancellationToken,
}

/// Validate against the stored sequence, then store: the one path every advertisement takes.
///
/// The cheap checks run here; the stored-sequence read, both signatures and the write run in one
/// blocking task (one thread hop, not three: at gossip rates the hops cost as much as a
/// signature). A did:web advertisement whose document is not cached reads the sequence first, so
/// that a replay never costs a fetch, and then waits for its document in the resolution pool.
pub(super) async fn accept(ctx: &Ctx<'_>, bytes: Vec<u8>, gate: Gate) -> Result<Validated, Error> {
    let Ctx {
        store,
        validator,
        stats,
        events,
        cancel,
    } = *ctx;
    let now = unix_now();
    let pre = {
        let _count = Elapsed(Instant::now(), &stats.validation_micros);
        validator.precheck(&bytes, None, now)
    }
    .map_err(|r| refuse(stats, r))?;
    let own = matches!(gate, Gate::Own);
    let gate_kind = match gate {
        Gate::Local | Gate::Own => GateKind::Node,
        Gate::Peer(..) | Gate::Gossip(..) => GateKind::Network,
    };
    let mut _slot = None;
    let mut stored = None;
    if validator.needs_resolution(&pre) {
        let s = store.clone();
        let did = pre.did.clone();
        stored = blocking(move || s.seq(&did)).await?;
        crate::advert::check_seq(&pre, stored).map_err(|r| refuse(stats, r))?;
        let pool = match &gate {
            Gate::Local | Gate::Own => None,
            Gate::Peer(p, pool) | Gate::Gossip(p, pool, _) => Some((*p, pool)),
        };
        if let Some((peer, pool)) = pool {
            match pool.try_take(peer) {
                Some(slot) => _slot = Some(slot),
                None => {
                    stats.resolutions_refused.inc();
                    return Err(Error::Busy(format!(
                        "no resolution slot for {} from {peer}",
                        pre.did
                    )));
                }
            }
        }
        if let Gate::Gossip(_, _, permit) = gate {
            // The fetch may take the resolver's timeout; the validation permit is for work.
            drop(permit);
        }
    }
    let keys = tokio::select! {
        // A DID with a stored sequence spends its own fetch budget, not its domain's.
        k = validator.keys_after(&pre, stored) => k.map_err(|r| refuse(stats, r))?,
        _ = cancel.cancelled() => return Err(Error::Stopped),
    };
    drop(_slot);
    let s = store.clone();
    let stop = cancel.clone();
    let work = stats.validation_micros.clone();
    let job = move || {
        let _count = Elapsed(Instant::now(), &work);
        let stored = s.seq(&pre.did)?;
        if let Err(r) = crate::advert::check_seq(&pre, stored) {
            return Ok(Err(Some(r)));
        }
        let v = match crate::advert::verify(pre, &keys, bytes) {
            Ok(v) => v,
            Err(r) => return Ok(Err(Some(r))),
        };
        // Nothing is written once the node stops: the store may be flushing.
        if stop.is_cancelled() {
            return Ok(Err(None));
        }
        let put = if own { s.put_own(&v)? } else { s.put(&v)? };
        Ok(Ok((v, put)))
    };
    // The node's own work (its publishing, its caller's) does not queue behind strangers'
    // gossip in the shared pool: under a flood of valid advertisements the pool's queue is
    // seconds long, and an operator's publish waited in it (measured: docs/SIMULATION.md,
    // "Attacks"). It is one job per local call, so a blocking thread of its own costs nothing.
    let outcome = match gate_kind {
        GateKind::Network => on_pool(job).await?,
        GateKind::Node => blocking(job).await?,
    };
    let (validated, put) = match outcome {
        Ok(done) => done,
        Err(Some(r)) => return Err(refuse(stats, r)),
        Err(None) => return Err(Error::Stopped),
    };
    match put {
        PutOutcome::Stale { stored_seq } => Err(refuse(
            stats,
            Reject::StaleSeq {
                got: validated.seq,
                stored: stored_seq,
            },
        )),
        _ => {
            stats.accepted.inc();
            let _ = events.send(Accepted {
                did: validated.did.clone(),
                seq: validated.seq,
                tags: validated.tags.clone(),
            });
            Ok(validated)
        }
    }
}
