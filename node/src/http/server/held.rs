//! The connections a listener holds, each with what closes it: [`Shares`] counts them, and
//! this registry is where a full listener makes room.
//!
//! The shares bound what one source and one block may hold, but a crowd spread over enough
//! blocks (eight /24s of slow connections fill the public listener's 512 slots) still took
//! every slot, and the listener then refused everyone until connections closed. So when a new
//! source holding few connections finds the listener full (or only reserved slots left), the
//! listener closes one *idle* connection of the block holding the most, if that block holds
//! at least two more than the newcomer's: the oldest idle one of its source holding the most.
//! Idle means no request in flight: a connection still waiting for a request head (all a
//! slow-loris client ever sends) or a kept-alive one between requests; a request being served,
//! or a response body being streamed (SSE), is never cut. The newcomer takes the slot at once
//! (the evicted connection's permit passes to it), so the crowd cannot take it back, and a
//! block that holds no more than a newcomer's plus one is never evicted from: making room
//! moves the listener towards an equal share per block, and never away from it. A trusted
//! proxy's connections carry many clients and are never evicted; a proxy does not evict.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agentnet_a2a::auth::Source;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::{lock, Block, Limits, Refusal, Shares};

/// One connection the listener holds.
struct Conn {
    source: Source,
    proxy: bool,
    /// Requests in flight on it (head received, response body not yet sent).
    busy: Arc<AtomicUsize>,
    /// Cancelled when the listener closes it to make room.
    evict: CancellationToken,
    /// Its slot of the connection cap; passed on to the newcomer when it is evicted.
    permit: OwnedSemaphorePermit,
}

/// Every connection a listener holds, and their [`Shares`].
pub(super) struct Held {
    shares: Shares,
    conns: HashMap<u64, Conn>,
    /// The next connection's id: ids grow, so a smaller one is an older connection.
    next: u64,
    /// Connections closed to make room, since the listener started.
    evicted: u64,
}

/// What the connection task of an admitted connection keeps: its requests in flight, the
/// token that evicts it, and (on drop) its place in [`Held`].
pub(super) struct Admitted {
    held: Arc<Mutex<Held>>,
    id: u64,
    /// Count a request in flight with [`InFlight::start`].
    pub(super) busy: Arc<AtomicUsize>,
    /// Cancelled when the listener closes this connection to make room.
    pub(super) evict: CancellationToken,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        lock(&self.held).close(self.id);
    }
}

/// One request in flight on a connection: counted from its head to the end of its response
/// body (held by the body, so a streamed response counts while it streams).
pub(super) struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Count a request in flight on the connection whose counter is `busy`.
    pub(super) fn start(busy: &Arc<AtomicUsize>) -> InFlight {
        busy.fetch_add(1, Ordering::AcqRel);
        InFlight(busy.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Held {
    pub(super) fn new(limits: Limits) -> Self {
        Held {
            shares: Shares::new(limits),
            conns: HashMap::new(),
            next: 0,
            evicted: 0,
        }
    }

    /// Admit a connection of `source` (a trusted `proxy`'s when set) holding `permit`, a slot
    /// of the connection cap when one was free: counted in the shares, or, when the listener
    /// is full for it, given the slot of an idle connection closed to make room; or why not.
    pub(super) fn admit(
        this: &Arc<Mutex<Held>>,
        source: Source,
        proxy: bool,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Admitted, Refusal> {
        let mut held = lock(this);
        let tried = match permit {
            Some(_) => held.shares.take(source, proxy),
            None => Err(Refusal::Full),
        };
        let permit = match (tried, permit) {
            (Ok(()), Some(permit)) => permit,
            (Err(why @ (Refusal::Full | Refusal::Reserve)), permit) => {
                let gone = held.make_room(source, proxy).ok_or(why)?;
                held.shares.take(source, proxy)?;
                // A permit of its own already: the evicted one's goes back to the cap.
                permit.unwrap_or(gone)
            }
            (Err(why), _) => return Err(why),
            // `take` succeeds only with a permit; never reached.
            (Ok(()), None) => {
                held.shares.give_back(source);
                return Err(Refusal::Full);
            }
        };
        let id = held.next;
        held.next += 1;
        let (busy, evict) = (Arc::new(AtomicUsize::new(0)), CancellationToken::new());
        held.conns.insert(
            id,
            Conn {
                source,
                proxy,
                busy: busy.clone(),
                evict: evict.clone(),
                permit,
            },
        );
        drop(held);
        Ok(Admitted {
            held: this.clone(),
            id,
            busy,
            evict,
        })
    }

    /// Close connection `id` (its task ended): its share is given back. An evicted one was
    /// given back when it was evicted.
    fn close(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            self.shares.give_back(c.source);
        }
    }

    /// Evict the idle connection that makes room for a newcomer of `source`, if the newcomer
    /// would be admitted once there is room and some block holds at least two more than its
    /// block: its share given back, its task told to close; its permit for the newcomer.
    fn make_room(&mut self, source: Source, proxy: bool) -> Option<OwnedSemaphorePermit> {
        let l = self.shares.limits;
        if proxy || self.shares.held(source) >= l.max_per_source_in_reserve {
            return None;
        }
        let room = self.shares.total.checked_sub(1)?;
        self.shares.check(source, proxy, room).ok()?;
        let mine = self.shares.in_block(Block::of(source));
        let (_, id) = self
            .conns
            .iter()
            .filter(|(_, c)| !c.proxy && c.busy.load(Ordering::Acquire) == 0)
            .map(|(id, c)| {
                let block = self.shares.in_block(Block::of(c.source));
                ((block, self.shares.held(c.source), Reverse(*id)), *id)
            })
            .filter(|((block, ..), _)| *block > mine + 1)
            .max()?;
        let gone = self.conns.remove(&id)?;
        self.shares.give_back(gone.source);
        gone.evict.cancel();
        self.evicted += 1;
        tracing::debug!(
            evicted = %gone.source,
            newcomer = %source,
            total = self.evicted,
            "HTTP listener full: an idle connection of the block holding the most closed to make room"
        );
        Some(gone.permit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;

    fn src(ip: &str) -> Source {
        Source::of(ip.parse().unwrap())
    }

    /// A listener of `max` slots (a reserve of a quarter for sources holding fewer than 2).
    fn listener(max: usize) -> (Arc<Mutex<Held>>, Arc<Semaphore>) {
        let limits = Limits {
            max_connections: max,
            max_per_source: 4,
            max_per_block: 8,
            reserved: max / 4,
            max_per_source_in_reserve: 2,
            ..Limits::PUBLIC
        };
        (
            Arc::new(Mutex::new(Held::new(limits))),
            Arc::new(Semaphore::new(max)),
        )
    }

    fn connect(
        held: &Arc<Mutex<Held>>,
        slots: &Arc<Semaphore>,
        ip: &str,
    ) -> Result<Admitted, Refusal> {
        Held::admit(held, src(ip), false, slots.clone().try_acquire_owned().ok())
    }

    /// A crowd spread over many blocks fills the listener; a newcomer then gets the slot of an
    /// idle connection of the block holding the most, at once, and the crowd cannot take it
    /// back. A busy connection is never cut, and blocks holding as little as the newcomer's
    /// plus one are not evicted from.
    #[test]
    fn a_full_listener_makes_room_from_the_block_holding_the_most() {
        let (held, slots) = listener(32);
        // Five blocks of two addresses try four connections each: the blocks' shares (8)
        // and the reserve (the last 8 slots, for sources holding fewer than 2) let 32 in,
        // and a source holding 2 is not made room for.
        let mut crowd = Vec::new();
        for b in 1..=5 {
            for a in 1..=2 {
                for _ in 0..4 {
                    if let Ok(c) = connect(&held, &slots, &format!("198.51.{b}.{a}")) {
                        crowd.push(c);
                    }
                }
            }
        }
        assert_eq!(crowd.len(), 32, "the crowd fills the listener");
        assert!(crowd.iter().all(|c| !c.evict.is_cancelled()));
        assert_eq!(slots.available_permits(), 0);
        // One of the crowd's connections is serving a request: it is never the one cut.
        let serving = InFlight::start(&crowd[0].busy);
        // A newcomer is admitted, and the connection cut is told so.
        let honest = connect(&held, &slots, "192.0.2.1").expect("room made");
        let cut: Vec<&Admitted> = crowd.iter().filter(|c| c.evict.is_cancelled()).collect();
        assert_eq!(cut.len(), 1);
        assert!(!crowd[0].evict.is_cancelled(), "a busy connection was cut");
        assert_eq!(lock(&held).shares.total, 32);
        // The crowd's next connection finds no block holding two more than its own.
        assert_eq!(
            connect(&held, &slots, "198.51.1.1").err(),
            Some(Refusal::Full)
        );
        // The evicted connection's task ends: nothing is given back twice.
        let before = lock(&held).shares.total;
        let i = crowd.iter().position(|c| c.evict.is_cancelled()).unwrap();
        drop(crowd.remove(i));
        assert_eq!(lock(&held).shares.total, before);
        assert_eq!(lock(&held).evicted, 1);
        // A second newcomer, then a third: each makes room.
        let second = connect(&held, &slots, "192.0.2.2").expect("room made again");
        let third = connect(&held, &slots, "203.0.113.1").expect("and again");
        // Every connection given back leaves nothing behind.
        drop((honest, second, third, serving));
        crowd.clear();
        let h = lock(&held);
        assert_eq!(h.shares.total, 0);
        assert!(h.conns.is_empty());
        assert_eq!(slots.available_permits(), 32);
    }

    /// Room is made only for a newcomer holding few, never by a trusted proxy, never from a
    /// proxy's connections and never from a busy one.
    #[test]
    fn room_is_not_made_for_a_source_holding_many_nor_by_or_from_a_proxy() {
        let (held, slots) = listener(8);
        let proxy = src("10.0.0.1");
        let permit = || slots.clone().try_acquire_owned().ok();
        let mut conns = Vec::new();
        for _ in 0..5 {
            conns.push(Held::admit(&held, proxy, true, permit()).unwrap());
        }
        // A source holding two (the reserve's few), another holding one: full.
        for ip in ["192.0.2.1", "192.0.2.1", "198.51.100.1"] {
            conns.push(connect(&held, &slots, ip).unwrap());
        }
        assert_eq!(slots.available_permits(), 0);
        let none_cut = |conns: &[Admitted]| conns.iter().all(|c| !c.evict.is_cancelled());
        // The source holding two is not made room for; nor is the proxy.
        assert_eq!(
            connect(&held, &slots, "192.0.2.1").err(),
            Some(Refusal::Full)
        );
        assert_eq!(
            Held::admit(&held, proxy, true, None).err(),
            Some(Refusal::Full)
        );
        assert!(none_cut(&conns));
        // With the two busy, a newcomer finds only the proxy's and a block holding one.
        let busy: Vec<InFlight> = conns[5..7]
            .iter()
            .map(|c| InFlight::start(&c.busy))
            .collect();
        assert_eq!(
            connect(&held, &slots, "203.0.113.1").err(),
            Some(Refusal::Full)
        );
        assert!(none_cut(&conns));
        // Idle again, one of them makes room for the newcomer.
        drop(busy);
        let _newcomer = connect(&held, &slots, "203.0.113.1").expect("room made");
        assert_eq!(conns.iter().filter(|c| c.evict.is_cancelled()).count(), 1);
        assert!(conns[5..7].iter().any(|c| c.evict.is_cancelled()));
    }
}
