//! Endorsements (issue 19): signed statements "DID A vouches for DID B for skills S until T"
//! ([`agentnet_did::endorsement`]), gossiped on their own topic
//! ([`agentnet_discovery::net::ENDORSE_TOPIC`]), kept here, and counted by the trust policy
//! only when their issuer is one the operator trusts.
//!
//! # Whose endorsements count
//! The operator's **roots**: the node's own DID (what `agentnet endorse` signs) and
//! `[trust] endorsers`. With `[trust] endorse_depth = 1` (the default) only the roots'
//! endorsements count; with depth 2 a DID a root endorsed (for any skill, not revoked) is an
//! endorser too, and so on, to depth [`MAX_DEPTH`]. A DID no chain from a root reaches counts
//! for nothing however many endorse it: a thousand fresh did:keys endorsing each other are a
//! thousand statements no one the operator trusts made.
//!
//! # Layout and bounds
//! One column family, [`CF_ENDORSEMENTS`], of the node's store. Key `e` ‖ issuer ‖ `0x00` ‖
//! subject: the JSON of a [`Kept`] (the latest statement of that issuer on that subject, a
//! revocation included, until it expires); `c` ‖ issuer: how many it has (u64 BE);
//! `w` ‖ (u64::MAX − that count, BE) ‖ issuer: empty, the issuers holding the most first;
//! `p` ‖ peer: how many statements of issuers the operator did not trust that peer delivered
//! are kept (u64 BE); `n`: how many in all; `W`: the `w` entries of a store written before
//! them were made. Of two statements on one pair the later `iat` stands, so a replayed older
//! endorsement is refused once its revocation is kept.
//!
//! Bounds: [`MAX_PER_ISSUER`] per issuer; [`MAX_PER_SOURCE`] statements of untrusted issuers
//! per gossip peer that delivered them (the peer a message came from, as the gossip check is
//! given it); [`MAX_TOTAL`] in all, of which issuers the operator does not trust fill at most
//! [`OPEN_SHARE`], so that a flood of strangers' statements never leaves no room for those that
//! count. Keys and peer ids are both free to mint, so a full share is not a reason to refuse:
//! a new statement makes room by taking one statement of the untrusted issuer holding the most
//! (`w`), provided it holds more than the newcomer's issuer will (an issuer holding the most
//! takes its own). A flood then churns among its own keys, and a new issuer's first statement
//! is kept (and forwarded) however full the share is; a trusted issuer's statement at
//! [`MAX_TOTAL`] makes room the same way. Trusted issuers' statements are never taken. With
//! as many flooding issuers as the share holds, each at one statement, a newcomer takes the
//! place of one of them, and may lose it to the next. The gossip side is bounded before this:
//! per peer by the message rate and in total by the validation permits the adverts use.
//! Expired statements are swept when the store is full (at most once a minute) and every
//! re-announcement period.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_did::endorsement::{self, EndorseError, Endorsement};
use agentnet_discovery::net::{PeerId, TopicCheck, Verdict};
use agentnet_discovery::store::{Family, FamilyOp, Store, StoreError};
use serde::{Deserialize, Serialize};

/// The column family of endorsements.
pub const CF_ENDORSEMENTS: &str = crate::db::ENDORSEMENTS;
/// Most statements kept per issuer.
pub const MAX_PER_ISSUER: u64 = 256;
/// Most statements kept in all.
pub const MAX_TOTAL: u64 = 16_384;
/// Most statements kept by issuers the operator does not trust.
pub const OPEN_SHARE: u64 = 12_288;
/// Most statements of issuers the operator does not trust kept from one gossip peer: a
/// twelfth of [`OPEN_SHARE`].
pub const MAX_PER_SOURCE: u64 = 1024;
/// Most issuers, the largest first, looked at (trusted ones passed over) for a statement to
/// take when the share is full.
const RANK_SCAN: usize = 64;
/// Deepest `endorse_depth`.
pub const MAX_DEPTH: u8 = 4;
/// Most endorsers (roots included) the depth walk collects.
pub const MAX_ENDORSERS: usize = 1024;
/// How long the set of endorsers is reused before it is walked again.
const TRUSTED_TTL: Duration = Duration::from_secs(30);
/// Sweeps of expired statements, when full, at most this often.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

const COUNT_KEY: &[u8] = b"n";
const RANKED_KEY: &[u8] = b"W";

/// What is kept of one statement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Kept {
    /// The compact JWS as it came.
    pub jws: String,
    /// What it says (verified when it came).
    pub endorsement: Endorsement,
    /// The gossip peer it came from, when its issuer was not trusted then (counted against
    /// that peer's [`MAX_PER_SOURCE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// What [`Endorsements::put`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// Kept (new, or later than the one it replaces).
    Stored,
    /// The very statement kept already (a re-announcement).
    Same,
    /// Older than (or as old as, and not) the kept one: refused.
    Stale,
    /// A bound is reached: refused, with why.
    Full(String),
}

/// An endorsement that counts: who, for what, until when, how far from a root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vouch {
    /// The issuer.
    pub by: String,
    /// The skills vouched for (empty: every skill).
    pub skills: Vec<String>,
    /// Until when (Unix seconds).
    pub until: u64,
    /// 1: a root's; 2: an endorser a root endorsed; ...
    pub hops: u8,
}

impl Vouch {
    /// The reason shown with the level.
    pub fn reason(&self) -> String {
        let skills = if self.skills.is_empty() {
            "every skill".to_string()
        } else {
            format!("skills {}", self.skills.join(", "))
        };
        let path = if self.hops <= 1 {
            "an endorser this node trusts".to_string()
        } else {
            format!("{} hops from an endorser this node trusts", self.hops)
        };
        format!(
            "endorsed by {} ({path}) for {skills} until {}",
            self.by,
            rfc3339(self.until)
        )
    }
}

/// Now, Unix seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `t` (Unix seconds) as RFC 3339.
pub fn rfc3339(t: u64) -> String {
    chrono::DateTime::from_timestamp(t.min(i64::MAX as u64) as i64, 0)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| t.to_string())
}

/// Endorsers, each with its distance from a root (0: a root).
pub type Endorsers = Arc<HashMap<String, u8>>;

/// The endorsements of one node.
pub struct Endorsements {
    family: Family,
    write: Mutex<Option<Instant>>,
    roots: Vec<String>,
    depth: u8,
    trusted: Mutex<Option<(Instant, Endorsers)>>,
    /// [`Endorsements::vouched`] as a set, kept as `trusted` is (and forgotten with it): a
    /// discovery ranks every match, and most are vouched for by nobody.
    vouched: Mutex<Option<(Instant, Arc<std::collections::HashSet<String>>)>>,
    /// Bumped by [`Endorsements::forget_trusted`]: a set read across it is not kept.
    epoch: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Endorsements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endorsements")
            .field("roots", &self.roots)
            .field("depth", &self.depth)
            .finish()
    }
}

fn pair_key(iss: &str, sub: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + iss.len() + sub.len());
    k.push(b'e');
    k.extend_from_slice(iss.as_bytes());
    k.push(0);
    k.extend_from_slice(sub.as_bytes());
    k
}

fn issuer_key(iss: &str) -> Vec<u8> {
    let mut k = vec![b'c'];
    k.extend_from_slice(iss.as_bytes());
    k
}

fn rank_key(iss: &[u8], count: u64) -> Vec<u8> {
    crate::db::rank_key(b"w", count, iss)
}

fn source_key(peer: &str) -> Vec<u8> {
    [&b"p"[..], peer.as_bytes()].concat()
}

use crate::db::counter_op;

/// The ops that move `iss`'s count from `old` to `new`, its rank entry with it.
fn issuer_ops(iss: &str, old: u64, new: u64, ops: &mut Vec<FamilyOp>) {
    ops.push(counter_op(issuer_key(iss), new));
    if old != new {
        if old > 0 {
            ops.push(FamilyOp::Delete(rank_key(iss.as_bytes(), old)));
        }
        if new > 0 {
            ops.push(FamilyOp::Put(rank_key(iss.as_bytes(), new), Vec::new()));
        }
    }
}

fn read_u64(v: Option<Vec<u8>>) -> u64 {
    v.as_deref().and_then(crate::db::u64_at).unwrap_or(0)
}

impl Endorsements {
    /// The endorsements in `store` (opened with [`CF_ENDORSEMENTS`]), counted from `roots` to
    /// `depth` (1 to [`MAX_DEPTH`]).
    pub fn open(store: &Store, roots: Vec<String>, depth: u8) -> Result<Self, StoreError> {
        let e = Endorsements {
            family: store.family(CF_ENDORSEMENTS)?,
            write: Mutex::new(None),
            roots,
            depth: depth.clamp(1, MAX_DEPTH),
            trusted: Mutex::new(None),
            vouched: Mutex::new(None),
            epoch: Default::default(),
        };
        e.rank_issuers()?;
        Ok(e)
    }

    /// Write the rank entries (`w`) of a store written before they were kept, once.
    fn rank_issuers(&self) -> Result<(), StoreError> {
        if self.family.get(RANKED_KEY)?.is_some() {
            return Ok(());
        }
        let mut ops = Vec::new();
        self.family.scan(b"c", b"d", usize::MAX, |k, v| {
            let n = read_u64(Some(v.to_vec()));
            if n > 0 {
                ops.push(FamilyOp::Put(rank_key(&k[1..], n), Vec::new()));
            }
            true
        })?;
        ops.push(FamilyOp::Put(RANKED_KEY.to_vec(), Vec::new()));
        self.family.write(ops)
    }

    /// Take one statement of the untrusted issuer holding the most, if it holds more than
    /// `floor` (or is `newcomer`); whether one was taken. Called under the write lock.
    fn make_room(
        &self,
        newcomer: &str,
        floor: u64,
        trusted: &HashMap<String, u8>,
    ) -> Result<bool, StoreError> {
        let mut holders: Vec<(u64, String)> = Vec::new();
        let mut passed = 0;
        self.family
            .scan(b"w", b"x", RANK_SCAN + trusted.len(), |k, _| {
                let count = crate::db::rank_of(k, 1).unwrap_or(0);
                let iss = String::from_utf8_lossy(k.get(9..).unwrap_or_default()).into_owned();
                if trusted.contains_key(&iss) {
                    return true;
                }
                if count <= floor && iss != newcomer {
                    return false;
                }
                holders.push((count, iss));
                passed += 1;
                passed < RANK_SCAN
            })?;
        for (count, iss) in holders {
            let start = pair_key(&iss, "");
            let mut end = start.clone();
            if let Some(last) = end.last_mut() {
                *last = 1;
            }
            let mut first: Option<(Vec<u8>, Option<String>)> = None;
            self.family.scan(&start, &end, 1, |k, v| {
                let from = serde_json::from_slice::<Kept>(v).ok().and_then(|k| k.from);
                first = Some((k.to_vec(), from));
                false
            })?;
            let Some((key, from)) = first else {
                continue;
            };
            let mut ops = vec![FamilyOp::Delete(key)];
            issuer_ops(&iss, count, count.saturating_sub(1), &mut ops);
            if let Some(peer) = &from {
                let n = read_u64(self.family.get(&source_key(peer))?);
                ops.push(counter_op(source_key(peer), n.saturating_sub(1)));
            }
            ops.push(counter_op(
                COUNT_KEY.to_vec(),
                self.len()?.saturating_sub(1),
            ));
            self.family.write(ops)?;
            tracing::debug!(%iss, "endorsements full: took a statement of the largest issuer");
            return Ok(true);
        }
        Ok(false)
    }

    fn kept(&self, key: &[u8]) -> Result<Option<Kept>, StoreError> {
        Ok(self.family.get(key)?.and_then(|v| {
            serde_json::from_slice(&v)
                .map_err(|e| tracing::warn!(error = %e, "skipping an unreadable endorsement"))
                .ok()
        }))
    }

    /// The statement `iss` made of `sub`, if one is kept (a revocation included).
    pub fn get(&self, iss: &str, sub: &str) -> Result<Option<Kept>, StoreError> {
        self.kept(&pair_key(iss, sub))
    }

    /// How many statements are kept.
    pub fn len(&self) -> Result<u64, StoreError> {
        Ok(read_u64(self.family.get(COUNT_KEY)?))
    }

    /// Whether none is.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// Keep a statement verified at `now` ([`endorsement::verify`]), within the bounds of the
    /// module documentation.
    pub fn put(&self, jws: &str, e: &Endorsement, now: u64) -> Result<Put, StoreError> {
        self.put_from(jws, e, now, None)
    }

    /// [`Endorsements::put`] of a statement the gossip peer `from` delivered.
    pub fn put_from(
        &self,
        jws: &str,
        e: &Endorsement,
        now: u64,
        from: Option<&str>,
    ) -> Result<Put, StoreError> {
        let endorsers = self.trusted(now)?;
        let trusted = endorsers.contains_key(&e.iss);
        // Only strangers' statements count against the peer that brought them.
        let from = from.filter(|_| !trusted);
        let mut last_sweep = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let key = pair_key(&e.iss, &e.sub);
        let old = self.kept(&key)?;
        if let Some(old) = &old {
            if old.jws == jws {
                return Ok(Put::Same);
            }
            if old.endorsement.iat >= e.iat {
                return Ok(Put::Stale);
            }
        }
        let old_from = old.as_ref().and_then(|k| k.from.as_deref());
        if let Some(peer) = from.filter(|p| old_from != Some(*p)) {
            let n = read_u64(self.family.get(&source_key(peer))?);
            if n >= MAX_PER_SOURCE {
                return Ok(Put::Full(format!(
                    "peer {peer} brought {MAX_PER_SOURCE} statements of issuers this node does \
                     not trust"
                )));
            }
        }
        let value = serde_json::to_vec(&Kept {
            jws: jws.to_string(),
            endorsement: e.clone(),
            from: from.map(str::to_owned),
        })
        .map_err(|_| StoreError::InvalidInput {
            what: "endorsement",
            value: e.sub.chars().take(100).collect(),
            reason: "does not serialize",
        })?;
        let mut ops = vec![FamilyOp::Put(key, value)];
        let mut room_made = false;
        if old.is_none() {
            let per = read_u64(self.family.get(&issuer_key(&e.iss))?);
            if per >= MAX_PER_ISSUER {
                return Ok(Put::Full(format!(
                    "{} already has {MAX_PER_ISSUER} statements kept",
                    e.iss
                )));
            }
            let cap = if trusted { MAX_TOTAL } else { OPEN_SHARE };
            let mut total = self.len()?;
            if total >= cap && last_sweep.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
                *last_sweep = Some(Instant::now());
                self.sweep_locked(now)?;
                total = self.len()?;
            }
            if total >= cap {
                // Trusted or not, the newcomer's issuer is taken from only when it holds the
                // most; a trusted one's count is no floor (it takes from any stranger).
                let floor = if trusted { 0 } else { per + 1 };
                room_made = self.make_room(&e.iss, floor, &endorsers)?;
                total = self.len()?;
            }
            if total >= cap {
                return Ok(Put::Full(format!(
                    "{total} statements kept, the most for {} issuers",
                    if trusted { "all" } else { "untrusted" }
                )));
            }
            // Read again: making room may have taken one of this issuer's.
            let per = if room_made {
                read_u64(self.family.get(&issuer_key(&e.iss))?)
            } else {
                per
            };
            issuer_ops(&e.iss, per, per + 1, &mut ops);
            ops.push(FamilyOp::Put(
                COUNT_KEY.to_vec(),
                (total + 1).to_be_bytes().to_vec(),
            ));
        }
        // The peers' counts, read after any room was made.
        if old_from != from {
            if let Some(peer) = old_from {
                let n = read_u64(self.family.get(&source_key(peer))?);
                ops.push(counter_op(source_key(peer), n.saturating_sub(1)));
            }
            if let Some(peer) = from {
                let n = read_u64(self.family.get(&source_key(peer))?);
                ops.push(counter_op(source_key(peer), n + 1));
            }
        }
        self.family.write(ops)?;
        if trusted {
            // What a trusted issuer says changes who the endorsers are.
            self.forget_trusted();
        }
        Ok(Put::Stored)
    }

    /// Verify `jws` at `now` and keep it.
    pub fn accept(
        &self,
        jws: &str,
        now: u64,
    ) -> Result<Result<(Endorsement, Put), EndorseError>, StoreError> {
        self.accept_from(jws, now, None)
    }

    /// [`Endorsements::accept`] of a statement the gossip peer `from` delivered.
    pub fn accept_from(
        &self,
        jws: &str,
        now: u64,
        from: Option<&str>,
    ) -> Result<Result<(Endorsement, Put), EndorseError>, StoreError> {
        let e = match endorsement::verify(jws, now) {
            Ok(e) => e,
            Err(err) => return Ok(Err(err)),
        };
        let put = self.put_from(jws, &e, now, from)?;
        Ok(Ok((e, put)))
    }

    /// Sign (with `key`, the issuer's) and keep the issuer's statement on `sub`: an
    /// endorsement for `skills` (normalized tags) for `for_secs`, or with `revoke` the
    /// revocation of what it said, standing as long as that could. Its `iat` is later than the
    /// issuer's last statement on `sub`, even within the same second (the later `iat` stands;
    /// a second or two ahead is within the skew every node allows). Blocking.
    pub fn issue(
        &self,
        key: &agentnet_did::SecretKey,
        sub: &str,
        skills: Vec<String>,
        for_secs: u64,
        revoke: bool,
        now: u64,
    ) -> Result<(Endorsement, String, Result<Put, EndorseError>), StoreError> {
        let iss = key.did_key().to_string();
        let old = self.get(&iss, sub)?;
        let iat = old.as_ref().map_or(now, |k| now.max(k.endorsement.iat + 1));
        let e = if revoke {
            let until = old
                .as_ref()
                .map(|k| k.endorsement.exp)
                .filter(|exp| *exp > iat)
                .unwrap_or(iat + for_secs);
            Endorsement::revocation(&iss, sub, iat, until)
        } else {
            Endorsement::new(&iss, sub, skills, iat, iat + for_secs)
        };
        let jws = endorsement::sign(&e, key);
        let put = self.accept(&jws, now)?.map(|(_, put)| put);
        Ok((e, jws, put))
    }

    /// Remove the expired statements; how many.
    pub fn sweep(&self, now: u64) -> Result<usize, StoreError> {
        let _w = self.write.lock().unwrap_or_else(|p| p.into_inner());
        self.sweep_locked(now)
    }

    fn sweep_locked(&self, now: u64) -> Result<usize, StoreError> {
        let mut due: Vec<(Vec<u8>, String, Option<String>)> = Vec::new();
        self.family.scan(b"e", b"f", usize::MAX, |k, v| {
            match serde_json::from_slice::<Kept>(v) {
                Ok(kept) if kept.endorsement.exp > now => {}
                Ok(kept) => due.push((k.to_vec(), kept.endorsement.iss, kept.from)),
                // An unreadable record is removed too: it can never count.
                Err(_) => {
                    let iss = k[1..].split(|b| *b == 0).next().unwrap_or_default();
                    due.push((k.to_vec(), String::from_utf8_lossy(iss).into_owned(), None));
                }
            }
            true
        })?;
        if due.is_empty() {
            return Ok(0);
        }
        let mut per: HashMap<String, u64> = HashMap::new();
        let mut peers: HashMap<String, u64> = HashMap::new();
        for (_, iss, from) in &due {
            *per.entry(iss.clone()).or_default() += 1;
            if let Some(p) = from {
                *peers.entry(p.clone()).or_default() += 1;
            }
        }
        let mut ops: Vec<FamilyOp> = due
            .iter()
            .map(|(k, _, _)| FamilyOp::Delete(k.clone()))
            .collect();
        for (iss, gone) in per {
            let had = read_u64(self.family.get(&issuer_key(&iss))?);
            issuer_ops(&iss, had, had.saturating_sub(gone), &mut ops);
        }
        for (peer, gone) in peers {
            let had = read_u64(self.family.get(&source_key(&peer))?);
            ops.push(counter_op(source_key(&peer), had.saturating_sub(gone)));
        }
        let total = self.len()?.saturating_sub(due.len() as u64);
        ops.push(FamilyOp::Put(
            COUNT_KEY.to_vec(),
            total.to_be_bytes().to_vec(),
        ));
        self.family.write(ops)?;
        self.forget_trusted();
        Ok(due.len())
    }

    /// The live statements `iss` made, at most [`MAX_PER_ISSUER`].
    pub fn issued_by(&self, iss: &str, now: u64) -> Result<Vec<Kept>, StoreError> {
        let start = pair_key(iss, "");
        let mut end = start.clone();
        if let Some(last) = end.last_mut() {
            *last = 1;
        }
        let mut out = Vec::new();
        self.family
            .scan(&start, &end, MAX_PER_ISSUER as usize, |_, v| {
                if let Ok(k) = serde_json::from_slice::<Kept>(v) {
                    if k.endorsement.exp > now {
                        out.push(k);
                    }
                }
                true
            })?;
        Ok(out)
    }

    /// The endorsers whose statements count, each with its distance from a root (0: a root),
    /// walked from the roots to the depth set, at most [`MAX_ENDORSERS`].
    pub fn trusted(&self, now: u64) -> Result<Endorsers, StoreError> {
        {
            let t = self.trusted.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, set)) = t.as_ref() {
                if at.elapsed() < TRUSTED_TTL {
                    return Ok(set.clone());
                }
            }
        }
        let mut set: HashMap<String, u8> = self.roots.iter().map(|r| (r.clone(), 0)).collect();
        let mut frontier: Vec<String> = self.roots.clone();
        for hop in 1..self.depth {
            let mut next = Vec::new();
            for iss in &frontier {
                for k in self.issued_by(iss, now)? {
                    if set.len() >= MAX_ENDORSERS {
                        break;
                    }
                    let sub = k.endorsement.sub;
                    if !k.endorsement.revoked && !set.contains_key(&sub) {
                        set.insert(sub.clone(), hop);
                        next.push(sub);
                    }
                }
            }
            frontier = next;
        }
        let set = Arc::new(set);
        *self.trusted.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), set.clone()));
        Ok(set)
    }

    /// The endorsement of `did` that counts for every one of `skills` (none: for anything),
    /// the closest to a root first; `None` when no endorser the operator trusts vouches for it.
    pub fn vouch(
        &self,
        did: &str,
        skills: &[String],
        now: u64,
    ) -> Result<Option<Vouch>, StoreError> {
        if !self.vouched_set(now)?.contains(did) {
            return Ok(None);
        }
        let trusted = self.trusted(now)?;
        let mut best: Option<Vouch> = None;
        for (iss, hop) in trusted.iter() {
            if iss == did || best.as_ref().is_some_and(|b| b.hops <= hop + 1) {
                continue;
            }
            let Some(k) = self.get(iss, did)? else {
                continue;
            };
            let e = k.endorsement;
            let covered = e.covers(None) && skills.iter().all(|s| e.covers(Some(s)));
            if e.exp > now && covered {
                best = Some(Vouch {
                    by: e.iss,
                    skills: e.skills,
                    until: e.exp,
                    hops: hop + 1,
                });
            }
        }
        Ok(best)
    }

    /// What a trusted issuer said changed who the endorsers are and whom they vouch for.
    fn forget_trusted(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        *self.trusted.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.vouched.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// [`Endorsements::vouched`], read again at most every [`TRUSTED_TTL`] or after a trusted
    /// issuer's statement: a DID outside it has no vouch ([`Endorsements::vouch`] reads no
    /// statement for it). A statement that lapses meanwhile is checked by `vouch` itself.
    fn vouched_set(&self, now: u64) -> Result<Arc<std::collections::HashSet<String>>, StoreError> {
        {
            let v = self.vouched.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, set)) = v.as_ref() {
                if at.elapsed() < TRUSTED_TTL {
                    return Ok(set.clone());
                }
            }
        }
        let epoch = self.epoch.load(std::sync::atomic::Ordering::Acquire);
        let set: Arc<std::collections::HashSet<String>> =
            Arc::new(self.vouched(now)?.into_iter().collect());
        let mut v = self.vouched.lock().unwrap_or_else(|p| p.into_inner());
        if self.epoch.load(std::sync::atomic::Ordering::Acquire) == epoch {
            *v = Some((Instant::now(), set.clone()));
        }
        Ok(set)
    }

    /// Every DID an endorser the operator trusts vouches for now (not revoked, not expired), for
    /// any skill: at most the statements kept ([`MAX_TOTAL`]). What a discovery ranks whether
    /// or not its walk of the index reached them.
    pub fn vouched(&self, now: u64) -> Result<Vec<String>, StoreError> {
        let mut out = std::collections::BTreeSet::new();
        for iss in self.trusted(now)?.keys() {
            for k in self.issued_by(iss, now)? {
                if !k.endorsement.revoked {
                    out.insert(k.endorsement.sub);
                }
            }
        }
        Ok(out.into_iter().collect())
    }
}

/// The check of [`ENDORSE_TOPIC`](agentnet_discovery::net::ENDORSE_TOPIC) messages: verify,
/// keep, and forward what was kept (or was kept already).
pub struct Gossip(pub Arc<Endorsements>);

impl TopicCheck for Gossip {
    fn check(
        &self,
        source: PeerId,
        data: Vec<u8>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send + 'static>> {
        let store = self.0.clone();
        Box::pin(async move {
            let r = tokio::task::spawn_blocking(move || {
                let jws = std::str::from_utf8(&data)
                    .map_err(|_| EndorseError::Malformed("not UTF-8".into()));
                match jws {
                    Ok(jws) => store.accept_from(jws, unix_now(), Some(&source.to_string())),
                    Err(e) => Ok(Err(e)),
                }
            })
            .await;
            match r {
                Ok(Ok(Ok((e, Put::Stored | Put::Same)))) => {
                    tracing::debug!(iss = %e.iss, sub = %e.sub, peer = %source, "accepted endorsement");
                    Verdict::Accept
                }
                Ok(Ok(Ok((e, why)))) => {
                    tracing::debug!(iss = %e.iss, ?why, peer = %source, "ignored endorsement");
                    Verdict::Ignore
                }
                Ok(Ok(Err(err))) if err.penalize() => {
                    tracing::info!(peer = %source, error = %err, "rejected endorsement");
                    Verdict::Reject
                }
                Ok(Ok(Err(err))) => {
                    tracing::debug!(peer = %source, error = %err, "ignored endorsement");
                    Verdict::Ignore
                }
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "keeping an endorsement");
                    Verdict::Ignore
                }
                Err(_) => Verdict::Ignore,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentnet_did::SecretKey;

    const NOW: u64 = 1_800_000_000;

    fn open(dir: &std::path::Path, roots: &[&SecretKey], depth: u8) -> Endorsements {
        let store = Store::open_with_families(dir, Default::default(), &[CF_ENDORSEMENTS]).unwrap();
        let roots = roots.iter().map(|k| k.did_key().to_string()).collect();
        Endorsements::open(&store, roots, depth).unwrap()
    }

    fn endorse(by: &SecretKey, sub: &str, skills: &[&str], iat: u64) -> String {
        let e = Endorsement::new(
            by.did_key().as_str(),
            sub,
            skills.iter().map(|s| s.to_string()).collect(),
            iat,
            iat + 3600,
        );
        endorsement::sign(&e, by)
    }

    fn key(i: u32) -> SecretKey {
        let mut seed = [0u8; 32];
        seed[..4].copy_from_slice(&i.to_be_bytes());
        seed[31] = 1;
        SecretKey::from_seed(&seed)
    }

    #[test]
    fn only_endorsers_reached_from_a_root_count_and_a_ring_of_strangers_counts_for_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (root, mid, agent) = (key(1), key(2), key(3));
        let e = open(dir.path(), &[&root], 2);
        let agent_did = agent.did_key().to_string();
        // A ring of 50 fresh DIDs, each endorsing the next and the agent.
        let ring: Vec<SecretKey> = (100..150).map(key).collect();
        for (i, k) in ring.iter().enumerate() {
            let next = ring[(i + 1) % ring.len()].did_key().to_string();
            assert!(matches!(
                e.accept(&endorse(k, &next, &[], NOW), NOW).unwrap(),
                Ok((_, Put::Stored))
            ));
            assert!(matches!(
                e.accept(&endorse(k, &agent_did, &[], NOW), NOW).unwrap(),
                Ok((_, Put::Stored))
            ));
        }
        assert_eq!(e.len().unwrap(), 100);
        assert_eq!(e.vouch(&agent_did, &[], NOW).unwrap(), None);
        for k in &ring {
            assert_eq!(e.vouch(k.did_key().as_str(), &[], NOW).unwrap(), None);
        }
        // The root vouches for mid (any skill), mid for the agent's weather skill: 2 hops.
        e.accept(&endorse(&root, mid.did_key().as_str(), &[], NOW), NOW)
            .unwrap()
            .unwrap();
        e.accept(&endorse(&mid, &agent_did, &["weather"], NOW), NOW)
            .unwrap()
            .unwrap();
        let v = e
            .vouch(&agent_did, &["weather".into()], NOW)
            .unwrap()
            .unwrap();
        assert_eq!((v.by.as_str(), v.hops), (mid.did_key().as_str(), 2));
        assert!(v.reason().contains("skills weather"), "{}", v.reason());
        assert_eq!(e.vouch(&agent_did, &["books".into()], NOW).unwrap(), None);
        // At depth 1 only the root's own statements count.
        drop(e);
        let e1 = open(dir.path(), &[&root], 1);
        assert_eq!(
            e1.vouch(&agent_did, &["weather".into()], NOW).unwrap(),
            None
        );
        assert_eq!(
            e1.vouch(mid.did_key().as_str(), &[], NOW)
                .unwrap()
                .unwrap()
                .hops,
            1
        );
    }

    /// The set of vouched DIDs that lets a discovery skip the agents nobody vouches for is
    /// read again as soon as a trusted issuer speaks: an endorsement counts at once, and so
    /// does its revocation, though the set was read (and kept) just before each.
    #[test]
    fn what_a_trusted_issuer_says_counts_at_once_for_a_discovery() {
        let dir = tempfile::tempdir().unwrap();
        let (root, agent) = (key(1), key(3));
        let e = open(dir.path(), &[&root], 1);
        let sub = agent.did_key().to_string();
        assert_eq!(e.vouch(&sub, &[], NOW).unwrap(), None);
        e.accept(&endorse(&root, &sub, &[], NOW), NOW)
            .unwrap()
            .unwrap();
        assert!(e.vouch(&sub, &[], NOW).unwrap().is_some());
        let r = endorsement::sign(
            &Endorsement::revocation(root.did_key().as_str(), &sub, NOW + 10, NOW + 3600),
            &root,
        );
        e.accept(&r, NOW + 10).unwrap().unwrap();
        assert_eq!(e.vouch(&sub, &[], NOW + 10).unwrap(), None);
    }

    #[test]
    fn a_revocation_stands_and_a_replay_of_what_it_revoked_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (root, agent) = (key(1), key(3));
        let e = open(dir.path(), &[&root], 1);
        let sub = agent.did_key().to_string();
        let first = endorse(&root, &sub, &["weather"], NOW);
        assert!(matches!(
            e.accept(&first, NOW).unwrap(),
            Ok((_, Put::Stored))
        ));
        assert!(matches!(e.accept(&first, NOW).unwrap(), Ok((_, Put::Same))));
        assert!(e.vouch(&sub, &["weather".into()], NOW).unwrap().is_some());
        let r = Endorsement::revocation(root.did_key().as_str(), &sub, NOW + 10, NOW + 3600);
        let r = endorsement::sign(&r, &root);
        assert!(matches!(
            e.accept(&r, NOW + 10).unwrap(),
            Ok((_, Put::Stored))
        ));
        assert_eq!(e.vouch(&sub, &["weather".into()], NOW + 10).unwrap(), None);
        assert!(matches!(
            e.accept(&first, NOW + 20).unwrap(),
            Ok((_, Put::Stale))
        ));
        assert_eq!(e.vouch(&sub, &[], NOW + 20).unwrap(), None);
        assert_eq!(e.len().unwrap(), 1);
        // Expired statements are swept, and the counts follow.
        assert_eq!(e.sweep(NOW + 3601).unwrap(), 1);
        assert_eq!(e.len().unwrap(), 0);
    }

    #[test]
    fn strangers_fill_only_their_share_and_one_issuer_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let root = key(1);
        let e = open(dir.path(), &[&root], 1);
        let flood = key(7);
        let mut full = None;
        for i in 0..=MAX_PER_ISSUER as u32 {
            let sub = key(10_000 + i).did_key().to_string();
            let e2 = Endorsement::new(flood.did_key().as_str(), &sub, vec![], NOW, NOW + 60);
            let (_, put) = e
                .accept(&endorsement::sign(&e2, &flood), NOW)
                .unwrap()
                .unwrap();
            if put != Put::Stored {
                full = Some((i, put));
                break;
            }
        }
        let (i, put) = full.expect("a bound");
        assert_eq!(i as u64, MAX_PER_ISSUER);
        assert!(
            matches!(put, Put::Full(ref w) if w.contains("256")),
            "{put:?}"
        );
        // The total: write the counter as if strangers filled their share.
        e.family
            .write(vec![FamilyOp::Put(
                COUNT_KEY.to_vec(),
                OPEN_SHARE.to_be_bytes().to_vec(),
            )])
            .unwrap();
        // A new stranger takes the place of one statement of the issuer holding the most.
        let stranger = key(8);
        let sub = key(9).did_key().to_string();
        let s = endorse(&stranger, &sub, &[], NOW);
        assert!(matches!(e.accept(&s, NOW).unwrap(), Ok((_, Put::Stored))));
        let held =
            |iss: &SecretKey| read_u64(e.family.get(&issuer_key(iss.did_key().as_str())).unwrap());
        assert_eq!(held(&flood), MAX_PER_ISSUER - 1);
        assert_eq!(e.len().unwrap(), OPEN_SHARE);
        // No stranger holds more than the next one would: refused, nothing taken.
        let dir2 = tempfile::tempdir().unwrap();
        let e2 = open(dir2.path(), &[&root], 1);
        assert!(matches!(e2.accept(&s, NOW).unwrap(), Ok((_, Put::Stored))));
        e2.family
            .write(vec![FamilyOp::Put(
                COUNT_KEY.to_vec(),
                OPEN_SHARE.to_be_bytes().to_vec(),
            )])
            .unwrap();
        let s2 = endorse(&key(10), &sub, &[], NOW);
        assert!(matches!(
            e2.accept(&s2, NOW).unwrap(),
            Ok((_, Put::Full(_)))
        ));
        assert!(e2.get(stranger.did_key().as_str(), &sub).unwrap().is_some());
        // The root still has room.
        let r = endorse(&root, &sub, &[], NOW);
        assert!(matches!(e.accept(&r, NOW).unwrap(), Ok((_, Put::Stored))));
        assert!(e.vouch(&sub, &[], NOW).unwrap().is_some());
    }

    /// 48 fresh keys at 256 statements each filled strangers' share on every relay, for as
    /// long as the statements lived; then a statement by an endorser another node trusts was
    /// refused here (and so never forwarded). A full share now makes room from the issuer
    /// holding the most: the newcomer is kept, the flood is cut back.
    #[test]
    fn a_full_open_share_makes_room_from_the_largest_issuer() {
        let dir = tempfile::tempdir().unwrap();
        let root = key(1);
        let e = open(dir.path(), &[&root], 1);
        let flood = |i: u32, n: u32| {
            let iss = format!("did:key:zFlood{i}");
            let sub = format!("did:key:zSub{n}");
            (
                Endorsement::new(&iss, &sub, vec![], NOW, NOW + 3600),
                format!("jws-{i}-{n}"),
            )
        };
        let mut stored = 0;
        for i in 0..(OPEN_SHARE / MAX_PER_ISSUER) as u32 {
            for n in 0..MAX_PER_ISSUER as u32 {
                let (st, jws) = flood(i, n);
                if e.put(&jws, &st, NOW).unwrap() == Put::Stored {
                    stored += 1;
                }
            }
        }
        assert_eq!(stored, OPEN_SHARE);
        // A statement by an endorser this node does not trust (another node may).
        let honest = key(5);
        let sub = key(6).did_key().to_string();
        let s = endorse(&honest, &sub, &[], NOW);
        assert!(
            matches!(e.accept(&s, NOW).unwrap(), Ok((_, Put::Stored))),
            "a new issuer's statement is kept on a full share"
        );
        assert!(e.get(honest.did_key().as_str(), &sub).unwrap().is_some());
        assert!(e.len().unwrap() <= OPEN_SHARE);
        // The flooders keep going: they cut each other back, never the newcomer.
        for i in 100..110u32 {
            for n in 0..MAX_PER_ISSUER as u32 {
                let (st, jws) = flood(i, n);
                e.put(&jws, &st, NOW).unwrap();
            }
        }
        assert!(e.get(honest.did_key().as_str(), &sub).unwrap().is_some());
        assert!(e.len().unwrap() <= OPEN_SHARE);
        // The root still has room.
        let r = endorse(&root, &sub, &[], NOW);
        assert!(matches!(e.accept(&r, NOW).unwrap(), Ok((_, Put::Stored))));
    }

    /// One gossip peer brings at most its share of strangers' statements, whatever the keys;
    /// another peer, and a trusted issuer's statement through the same peer, still get in.
    #[test]
    fn one_peer_brings_at_most_its_share_of_strangers_statements() {
        let dir = tempfile::tempdir().unwrap();
        let root = key(1);
        let e = open(dir.path(), &[&root], 1);
        let st = |i: u64| {
            let iss = format!("did:key:zPeerFlood{}", i / MAX_PER_ISSUER);
            let sub = format!("did:key:zSub{i}");
            (
                Endorsement::new(&iss, &sub, vec![], NOW, NOW + 3600),
                format!("jws-{i}"),
            )
        };
        for i in 0..MAX_PER_SOURCE {
            let (x, jws) = st(i);
            assert_eq!(
                e.put_from(&jws, &x, NOW, Some("peerA")).unwrap(),
                Put::Stored
            );
        }
        let (x, jws) = st(MAX_PER_SOURCE);
        assert!(
            matches!(e.put_from(&jws, &x, NOW, Some("peerA")).unwrap(), Put::Full(ref w) if w.contains("peerA")),
        );
        assert_eq!(
            e.put_from(&jws, &x, NOW, Some("peerB")).unwrap(),
            Put::Stored
        );
        let sub = key(6).did_key().to_string();
        let r = endorse(&root, &sub, &[], NOW);
        let (rx, _) = e.accept(&r, NOW).unwrap().unwrap();
        assert_eq!(e.put_from(&r, &rx, NOW, Some("peerA")).unwrap(), Put::Same);
        let r2 = endorse(&root, &key(7).did_key().to_string(), &[], NOW);
        assert!(matches!(
            e.accept_from(&r2, NOW, Some("peerA")).unwrap(),
            Ok((_, Put::Stored))
        ));
        // Swept, the peer's count goes with its statements.
        assert_eq!(e.sweep(NOW + 3601).unwrap() as u64, MAX_PER_SOURCE + 3);
        assert_eq!(read_u64(e.family.get(&source_key("peerA")).unwrap()), 0);
        let (x, jws) = st(0);
        assert_eq!(
            e.put_from(&jws, &x, NOW, Some("peerA")).unwrap(),
            Put::Stored
        );
    }
}
