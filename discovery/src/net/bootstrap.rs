//! The bootstrap peers: what their dials came to (for operators, [`Client::bootstrap_status`]),
//! and when to dial them again. A plain struct taking `now`; the swarm task applies it.
//!
//! A node whose bootstrap dial failed, or whose only connection (to its bootstrap peer) closed
//! and could not be redialed, had nothing left that would ever dial again: Kademlia dials only
//! for queries, and a node with no peer runs none worth the name. So while the node has no
//! peer at all, every bootstrap address not connected is dialed again, after
//! [`RETRY_MIN`], then twice as long each time up to [`RETRY_MAX`].

use super::{
    peer_of, Arc, ConnectionId, Deserialize, Duration, Instant, Multiaddr, Mutex, PeerId, Serialize,
};

/// First wait before a bootstrap address is dialed again...
pub(super) const RETRY_MIN: Duration = Duration::from_secs(1);
/// ...doubled after each failure up to this.
pub(super) const RETRY_MAX: Duration = Duration::from_secs(60);

/// Where a bootstrap address stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum BootstrapState {
    /// Not connected now: a dial is in progress or due (after a connection closed, or at start).
    Pending,
    /// The last dial connected and the connection is open.
    Connected,
    /// The last dial failed (see `last_error`); it is dialed again while the node has no peer.
    Failed,
}

/// One bootstrap address as [`Client::bootstrap_status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapStatus {
    /// The address, as configured.
    pub address: String,
    /// Where it stands.
    pub state: BootstrapState,
    /// The error of the last failed dial, if any (kept after a later success).
    pub last_error: Option<String>,
    /// Unix seconds when `state` last changed.
    pub since: u64,
}

struct Entry {
    addr: Multiaddr,
    /// The peer behind it: from the address's `/p2p/`, or the first connection.
    peer: Option<PeerId>,
    /// The dial in flight.
    dialing: Option<ConnectionId>,
    retry: Duration,
    next: Instant,
}

/// The bootstrap addresses, their state and their redial schedule.
pub(super) struct Bootstraps {
    entries: Vec<Entry>,
    /// Shared with the [`Client`]s.
    status: Arc<Mutex<Vec<BootstrapStatus>>>,
}

/// What a dial's end means for the log.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Not a bootstrap dial.
    Other,
    /// A bootstrap dial, and its address's state changed (worth a warning or an info line).
    Changed(Multiaddr),
    /// A bootstrap dial that ended as the one before it did.
    Same(Multiaddr),
}

impl Bootstraps {
    pub(super) fn new(addrs: &[Multiaddr], now: Instant, unix: u64) -> Self {
        let status = addrs
            .iter()
            .map(|a| BootstrapStatus {
                address: a.to_string(),
                state: BootstrapState::Pending,
                last_error: None,
                since: unix,
            })
            .collect();
        Self {
            entries: addrs
                .iter()
                .map(|a| Entry {
                    addr: a.clone(),
                    peer: peer_of(a),
                    dialing: None,
                    retry: RETRY_MIN,
                    next: now,
                })
                .collect(),
            status: Arc::new(Mutex::new(status)),
        }
    }

    pub(super) fn status(&self) -> Arc<Mutex<Vec<BootstrapStatus>>> {
        self.status.clone()
    }

    fn set(&self, i: usize, state: BootstrapState, error: Option<String>, unix: u64) -> bool {
        let mut s = self.status.lock().expect("bootstrap status lock poisoned");
        let Some(st) = s.get_mut(i) else {
            return false;
        };
        let changed = st.state != state;
        if changed {
            st.state = state;
            st.since = unix;
        }
        if error.is_some() {
            st.last_error = error;
        }
        changed
    }

    /// Addresses to dial now: all of them at start, then, while the node has no connected
    /// peer, those not dialing whose retry is due. The caller dials each and reports the
    /// dial's connection id with [`Bootstraps::dialing`].
    pub(super) fn due(&mut self, no_peers: bool, started: bool, now: Instant) -> Vec<usize> {
        if started && !no_peers {
            return Vec::new();
        }
        (0..self.entries.len())
            .filter(|&i| {
                let e = &self.entries[i];
                e.dialing.is_none() && e.next <= now
            })
            .collect()
    }

    pub(super) fn addr(&self, i: usize) -> Option<(&Multiaddr, Option<PeerId>)> {
        self.entries.get(i).map(|e| (&e.addr, e.peer))
    }

    /// The dial of entry `i` started as `id` (or could not start: `None`, with the error).
    pub(super) fn dialing(
        &mut self,
        i: usize,
        id: Result<ConnectionId, String>,
        now: Instant,
        unix: u64,
    ) -> Outcome {
        let Some(e) = self.entries.get_mut(i) else {
            return Outcome::Other;
        };
        match id {
            Ok(id) => {
                e.dialing = Some(id);
                Outcome::Other
            }
            Err(error) => {
                e.next = now + e.retry;
                e.retry = (e.retry * 2).min(RETRY_MAX);
                let addr = e.addr.clone();
                if self.set(i, BootstrapState::Failed, Some(error), unix) {
                    Outcome::Changed(addr)
                } else {
                    Outcome::Same(addr)
                }
            }
        }
    }

    /// A connection was established (`id` of its dial, if we dialed).
    pub(super) fn connected(
        &mut self,
        id: ConnectionId,
        peer: PeerId,
        now: Instant,
        unix: u64,
    ) -> Outcome {
        let mut outcome = Outcome::Other;
        for i in 0..self.entries.len() {
            let e = &mut self.entries[i];
            let ours = e.dialing == Some(id);
            if !ours && e.peer != Some(peer) {
                continue;
            }
            if ours {
                e.dialing = None;
                e.peer.get_or_insert(peer);
            }
            e.retry = RETRY_MIN;
            e.next = now + RETRY_MIN;
            let addr = e.addr.clone();
            if self.set(i, BootstrapState::Connected, None, unix) {
                outcome = Outcome::Changed(addr);
            } else if ours {
                outcome = Outcome::Same(addr);
            }
        }
        outcome
    }

    /// A dial failed (`id` of the dial).
    pub(super) fn failed(
        &mut self,
        id: ConnectionId,
        error: &str,
        now: Instant,
        unix: u64,
    ) -> Outcome {
        let Some(i) = self.entries.iter().position(|e| e.dialing == Some(id)) else {
            return Outcome::Other;
        };
        let e = &mut self.entries[i];
        e.dialing = None;
        e.next = now + e.retry;
        e.retry = (e.retry * 2).min(RETRY_MAX);
        let addr = e.addr.clone();
        if self.set(i, BootstrapState::Failed, Some(error.to_owned()), unix) {
            Outcome::Changed(addr)
        } else {
            Outcome::Same(addr)
        }
    }

    /// The last connection to `peer` closed.
    pub(super) fn disconnected(&mut self, peer: PeerId, unix: u64) {
        for i in 0..self.entries.len() {
            if self.entries[i].peer == Some(peer) {
                self.set(i, BootstrapState::Pending, None, unix);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> Multiaddr {
        format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap()
    }

    fn state(b: &Bootstraps, i: usize) -> BootstrapState {
        b.status.lock().unwrap()[i].state
    }

    #[test]
    fn failed_dials_are_retried_with_backoff_while_the_node_has_no_peer() {
        let t0 = Instant::now();
        let mut b = Bootstraps::new(&[addr(1)], t0, 100);
        assert_eq!(b.due(true, false, t0), vec![0]);
        let id = ConnectionId::new_unchecked(1);
        b.dialing(0, Ok(id), t0, 100);
        assert!(b.due(true, true, t0).is_empty(), "not while dialing");
        assert_eq!(b.failed(id, "refused", t0, 101), Outcome::Changed(addr(1)));
        let s = b.status.lock().unwrap()[0].clone();
        assert_eq!(s.state, BootstrapState::Failed);
        assert_eq!(s.last_error.as_deref(), Some("refused"));
        assert_eq!(s.since, 101);
        assert!(b.due(true, true, t0).is_empty(), "not before the retry");
        assert_eq!(b.due(true, true, t0 + RETRY_MIN), vec![0]);
        // The next failure waits twice as long, and is not news.
        let id = ConnectionId::new_unchecked(2);
        b.dialing(0, Ok(id), t0 + RETRY_MIN, 101);
        let t1 = t0 + RETRY_MIN;
        assert_eq!(b.failed(id, "refused", t1, 102), Outcome::Same(addr(1)));
        assert!(b.due(true, true, t1 + RETRY_MIN).is_empty());
        assert_eq!(b.due(true, true, t1 + 2 * RETRY_MIN), vec![0]);
        // Not while the node has peers.
        assert!(b.due(false, true, t1 + RETRY_MAX).is_empty());
        // The backoff stops growing.
        let mut t = t1;
        for n in 3..20 {
            let id = ConnectionId::new_unchecked(n);
            b.dialing(0, Ok(id), t, 0);
            b.failed(id, "refused", t, 0);
            t += RETRY_MAX;
            assert_eq!(b.due(true, true, t), vec![0]);
        }
    }

    #[test]
    fn a_connection_resets_the_backoff_and_its_close_makes_the_address_pending() {
        let t0 = Instant::now();
        let peer = PeerId::random();
        let mut b = Bootstraps::new(&[addr(1), addr(2)], t0, 0);
        let (a, c) = (
            ConnectionId::new_unchecked(1),
            ConnectionId::new_unchecked(2),
        );
        b.dialing(0, Ok(a), t0, 0);
        b.dialing(1, Ok(c), t0, 0);
        assert_eq!(b.connected(a, peer, t0, 5), Outcome::Changed(addr(1)));
        assert_eq!(state(&b, 0), BootstrapState::Connected);
        assert_eq!(state(&b, 1), BootstrapState::Pending);
        // Someone else's connection is not ours.
        let other = ConnectionId::new_unchecked(9);
        assert_eq!(b.connected(other, PeerId::random(), t0, 5), Outcome::Other);
        assert_eq!(b.failed(other, "x", t0, 5), Outcome::Other);
        b.disconnected(peer, 9);
        assert_eq!(state(&b, 0), BootstrapState::Pending);
        // Redialed when the node is alone again (the second is still dialing).
        assert_eq!(b.due(true, true, t0 + RETRY_MIN), vec![0]);
        // A dial that could not start counts as a failure.
        assert_eq!(
            b.dialing(0, Err("no transport".into()), t0, 10),
            Outcome::Changed(addr(1))
        );
        assert_eq!(state(&b, 0), BootstrapState::Failed);
    }
}
