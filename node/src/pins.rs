//! Pinned Agent Cards (issue 19, "discovery is not approval"): the first card the node shows
//! for a DID is pinned, and a later card under the same DID whose name, description, skills,
//! interfaces or security differ is shown as **changed**, with a short diff, until the operator
//! accepts it (`agentnet trust accept DID`). A signature says who published a card; a pin says
//! whether it is still the card the operator saw.
//!
//! # What is pinned
//! The card's *pinned parts* ([`pinned_parts`]): `name`, `description`, `url`,
//! `supportedInterfaces`, `securitySchemes`, `security`, and each skill's `id`, `name`,
//! `description`, `tags`, `examples`, `inputModes` and `outputModes`. Their digest is the
//! SHA-256 of their RFC 8785 bytes, so a re-signed card with a later `seq` and the same parts
//! is the same pin. A card is pinned when [`Pins::observe`] first sees it: when the node shows
//! it (`discover`, MCP `discover_agents`), not when gossip delivers it (the node relays cards it
//! never shows, and a pin is what the operator saw).
//!
//! The same for the MCP tools of agents ([`Pins::observe_tool`]): each tool object as
//! `tools/list` gave it (not the text a person was shown), keyed by the agent's DID and the
//! tool's name; `agentnet tool` does not call a changed tool.
//!
//! # Layout and bounds
//! One column family, [`CF_PINS`], of the node's store: key `p` ‖ DID (a card) or `t` ‖ DID ‖
//! `0x00` ‖ tool name (a tool), value the JSON of a [`Pin`]; key `n`, the number of pins
//! (u64 BE), written in the same batch. Anyone can mint
//! DIDs and publish cards for them, so pins are bounded in all: at most [`MAX_PINS`] DIDs,
//! whose accepted parts are kept whole up to [`MAX_PARTS_BYTES`] (a larger card's pin keeps its
//! digest only; a change is then shown without the diff). A DID seen when the pins are full is
//! shown as `unpinned`, with why: nothing pinned is dropped to make room (a pin silently
//! forgotten would accept the next card unseen). The history of digests seen per DID is the
//! last [`MAX_SEEN`].

use std::collections::BTreeMap;
use std::sync::Mutex;

use agentnet_discovery::store::{Family, FamilyOp, Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The column family of the pins.
pub const CF_PINS: &str = "card_pins";
/// Most DIDs pinned.
pub const MAX_PINS: u64 = 4096;
/// Largest pinned parts kept whole for a diff (RFC 8785 bytes).
pub const MAX_PARTS_BYTES: usize = 16 * 1024;
/// Digests remembered per DID.
pub const MAX_SEEN: usize = 4;
/// Most tools of one agent pinned in one request.
pub const MAX_TOOLS: usize = 256;
/// Most lines in a diff.
pub const MAX_DIFF_LINES: usize = 12;

const COUNT_KEY: &[u8] = b"n";

/// The stored pin of one DID.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// Digest of the accepted pinned parts.
    pub digest: String,
    /// The accepted parts, `None` when they were larger than [`MAX_PARTS_BYTES`].
    pub parts: Option<Value>,
    /// When they were pinned or accepted (Unix seconds).
    pub since: u64,
    /// The digests seen, newest last, at most [`MAX_SEEN`], each with when first seen.
    pub seen: Vec<(String, u64)>,
    /// The parts of the latest changed version seen, when they fit in [`MAX_PARTS_BYTES`]:
    /// what `agentnet trust accept` accepts for an agent the node holds no advertisement of
    /// (the upstream of a `proxy` agent, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<Value>,
}

impl Pin {
    /// Note digest `d` seen at `now` (the last [`MAX_SEEN`] kept); `false` if it was already.
    fn saw(&mut self, d: &str, now: u64) -> bool {
        if self.seen.iter().any(|(s, _)| s == d) {
            return false;
        }
        self.seen.push((d.to_string(), now));
        let excess = self.seen.len().saturating_sub(MAX_SEEN);
        self.seen.drain(..excess);
        true
    }
}

/// What a shown card is, against its pin.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum PinState {
    /// First seen now, and pinned.
    New,
    /// The accepted card.
    Pinned {
        /// Pinned since (Unix seconds).
        since: u64,
    },
    /// Differs from the accepted card: not approved until `agentnet trust accept DID`.
    Changed {
        /// The accepted card's time (Unix seconds).
        since: u64,
        /// What differs, a line each (at most [`MAX_DIFF_LINES`]).
        diff: Vec<String>,
    },
    /// Not pinned (the pins are full, or the store failed): shown, never approved.
    Unpinned {
        /// Why.
        why: String,
    },
}

impl PinState {
    /// The word a table shows: `new`, `pinned`, `CHANGED`, `unpinned`.
    pub fn word(&self) -> &'static str {
        match self {
            PinState::New => "new",
            PinState::Pinned { .. } => "pinned",
            PinState::Changed { .. } => "CHANGED",
            PinState::Unpinned { .. } => "unpinned",
        }
    }

    /// Whether the card is not the one accepted.
    pub fn is_changed(&self) -> bool {
        matches!(self, PinState::Changed { .. })
    }
}

/// The node's pins.
pub struct Pins {
    family: Family,
    max: u64,
    lock: Mutex<()>,
}

impl std::fmt::Debug for Pins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pins")
    }
}

fn key(did: &str) -> Vec<u8> {
    [b"p", did.as_bytes()].concat()
}

/// `t` ‖ DID ‖ `0x00` ‖ tool name (a DID has no NUL).
fn tool_key(did: &str, tool: &Value) -> Vec<u8> {
    let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
    [b"t", did.as_bytes(), b"\0", name.as_bytes()].concat()
}

/// The members of an MCP tool object that are pinned.
const TOOL_MEMBERS: [&str; 6] = [
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// A tool's pinned parts: [`TOOL_MEMBERS`] as received.
pub fn tool_parts(tool: &Value) -> Value {
    Value::Object(
        TOOL_MEMBERS
            .iter()
            .filter_map(|k| tool.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect(),
    )
}

/// What differs between two pinned tools, a line per member.
pub fn tool_diff(old: &Value, new: &Value) -> Vec<String> {
    let mut out: Vec<String> = TOOL_MEMBERS
        .iter()
        .filter(|k| old.get(**k) != new.get(**k))
        .map(|k| match *k {
            "title" | "description" => {
                format!("{k}: {} → {}", short(old.get(*k)), short(new.get(*k)))
            }
            other => format!("{other} changed"),
        })
        .collect();
    out.truncate(MAX_DIFF_LINES);
    out
}

/// A card's pinned parts (see the module documentation). Members absent from the card are
/// absent here; skills are keyed by id (else by position), so reordering them is no change.
pub fn pinned_parts(card: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for k in [
        "name",
        "description",
        "url",
        "supportedInterfaces",
        "securitySchemes",
        "security",
        "securityRequirements",
    ] {
        if let Some(v) = card.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(skills) = card.get("skills").and_then(Value::as_array) {
        let mut by_id = serde_json::Map::new();
        for (i, s) in skills.iter().enumerate() {
            let id = s
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("#{i}"));
            let mut kept = serde_json::Map::new();
            for k in [
                "name",
                "description",
                "tags",
                "examples",
                "inputModes",
                "outputModes",
            ] {
                if let Some(v) = s.get(k) {
                    kept.insert(k.into(), v.clone());
                }
            }
            by_id.insert(id, Value::Object(kept));
        }
        out.insert("skills".into(), Value::Object(by_id));
    }
    Value::Object(out)
}

/// Digest of pinned parts: SHA-256 hex of their RFC 8785 bytes.
pub fn digest(parts: &Value) -> String {
    agentnet_did::receipt::digest_json(parts)
}

/// The interface URLs of a card's parts (`url` and each `supportedInterfaces[].url`).
fn urls(parts: &Value) -> Vec<String> {
    let mut v: Vec<String> = parts
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("url").and_then(Value::as_str))
        .chain(parts.get("url").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

fn short(v: Option<&Value>) -> String {
    match v {
        None => "(none)".into(),
        Some(Value::String(s)) => format!(
            "{:?}",
            agentnet_did::text::shorten(&agentnet_did::text::sanitize(s), 60)
        ),
        Some(other) => {
            agentnet_did::text::shorten(&agentnet_did::text::sanitize(&other.to_string()), 60)
        }
    }
}

/// What differs between pinned parts `old` and `new`, a line each (interfaces first: a moved
/// endpoint is the change that matters most), at most [`MAX_DIFF_LINES`].
pub fn diff(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let (ou, nu) = (urls(old), urls(new));
    for u in nu.iter().filter(|u| !ou.contains(u)) {
        out.push(format!("interface added: {u}"));
    }
    for u in ou.iter().filter(|u| !nu.contains(u)) {
        out.push(format!("interface removed: {u}"));
    }
    if ou == nu && (old.get("supportedInterfaces") != new.get("supportedInterfaces")) {
        out.push("interfaces changed (bindings or versions)".into());
    }
    for k in ["securitySchemes", "security", "securityRequirements"] {
        if old.get(k) != new.get(k) {
            out.push(format!("{k} changed"));
        }
    }
    for k in ["name", "description"] {
        if old.get(k) != new.get(k) {
            out.push(format!(
                "{k}: {} → {}",
                short(old.get(k)),
                short(new.get(k))
            ));
        }
    }
    let empty = serde_json::Map::new();
    let skills = |p: &Value| p.get("skills").and_then(Value::as_object).cloned();
    let (os, ns) = (
        skills(old).unwrap_or_else(|| empty.clone()),
        skills(new).unwrap_or(empty),
    );
    let ids: BTreeMap<&String, ()> = os.keys().chain(ns.keys()).map(|k| (k, ())).collect();
    for id in ids.keys() {
        match (os.get(*id), ns.get(*id)) {
            (None, Some(_)) => out.push(format!("skill added: {id}")),
            (Some(_), None) => out.push(format!("skill removed: {id}")),
            (Some(a), Some(b)) if a != b => {
                let what: Vec<&str> = [
                    "name",
                    "description",
                    "tags",
                    "examples",
                    "inputModes",
                    "outputModes",
                ]
                .into_iter()
                .filter(|k| a.get(k) != b.get(k))
                .collect();
                out.push(format!("skill {id}: {} changed", what.join(", ")));
            }
            _ => {}
        }
    }
    if out.is_empty() {
        out.push("the card changed".into());
    }
    if out.len() > MAX_DIFF_LINES {
        let more = out.len() - (MAX_DIFF_LINES - 1);
        out.truncate(MAX_DIFF_LINES - 1);
        out.push(format!("… and {more} more"));
    }
    out
}

fn backend(e: StoreError) -> String {
    format!("the pin store failed: {e}")
}

impl Pins {
    /// The pins in `store` (opened with [`CF_PINS`]).
    pub fn open(store: &Store) -> Result<Pins, StoreError> {
        Self::open_with(store, MAX_PINS)
    }

    /// The same, with at most `max` pins.
    pub fn open_with(store: &Store, max: u64) -> Result<Pins, StoreError> {
        Ok(Pins {
            family: store.family(CF_PINS)?,
            max,
            lock: Mutex::new(()),
        })
    }

    fn read(&self, key: &[u8]) -> Result<Option<Pin>, String> {
        match self.family.get(key).map_err(backend)? {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
                format!("a stored pin does not read ({e}); `agentnet trust accept` pins what is shown now")
            }),
        }
    }

    fn count(&self) -> Result<u64, String> {
        Ok(self
            .family
            .get(COUNT_KEY)
            .map_err(backend)?
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0))
    }

    fn write(&self, key: &[u8], pin: &Pin, count: Option<u64>) -> Result<(), String> {
        let bytes = serde_json::to_vec(pin).map_err(|e| e.to_string())?;
        let mut ops = vec![FamilyOp::Put(key.to_vec(), bytes)];
        if let Some(n) = count {
            ops.push(FamilyOp::Put(COUNT_KEY.to_vec(), n.to_be_bytes().to_vec()));
        }
        self.family.write(ops).map_err(backend)
    }

    /// The state of `card`, shown now for `did`: pinned if it is the first seen (room
    /// permitting). Blocking (RocksDB).
    pub fn observe(&self, did: &str, card: &Value, now: u64) -> PinState {
        let accept = format!("`agentnet trust accept {did}` pins it");
        self.observe_parts(key(did), pinned_parts(card), diff, &accept, now)
    }

    /// The state of MCP tool `tool` (the object as it came in `tools/list`) of agent `did`,
    /// pinned if first seen: its `name`, `title`, `description`, `inputSchema`,
    /// `outputSchema` and `annotations` as received, not the text a person was shown.
    pub fn observe_tool(&self, did: &str, tool: &Value, now: u64) -> PinState {
        let accept = format!("`agentnet trust accept {did} --tools` pins it");
        self.observe_parts(
            tool_key(did, tool),
            tool_parts(tool),
            tool_diff,
            &accept,
            now,
        )
    }

    fn observe_parts(
        &self,
        key: Vec<u8>,
        parts: Value,
        differ: fn(&Value, &Value) -> Vec<String>,
        accept: &str,
        now: u64,
    ) -> PinState {
        let d = digest(&parts);
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let stored = match self.read(&key) {
            Ok(p) => p,
            Err(why) => return PinState::Unpinned { why },
        };
        let Some(mut pin) = stored else {
            let n = match self.count() {
                Ok(n) => n,
                Err(why) => return PinState::Unpinned { why },
            };
            if n >= self.max {
                return PinState::Unpinned {
                    why: format!("{n} pins are kept, the most this node keeps; {accept}"),
                };
            }
            let pin = new_pin(&parts, d, now);
            return match self.write(&key, &pin, Some(n + 1)) {
                Ok(()) => PinState::New,
                Err(why) => PinState::Unpinned { why },
            };
        };
        let latest = (pin.digest != d
            && agentnet_did::jcs::canonicalize(&parts).len() <= MAX_PARTS_BYTES)
            .then(|| parts.clone());
        let note_latest = latest.is_some() && pin.latest != latest;
        if pin.saw(&d, now) || note_latest {
            if note_latest {
                pin.latest = latest;
            }
            if let Err(why) = self.write(&key, &pin, None) {
                tracing::warn!(%why, "pin history not updated");
            }
        }
        if pin.digest == d {
            return PinState::Pinned { since: pin.since };
        }
        let diff = match &pin.parts {
            Some(old) => differ(old, &parts),
            None => vec!["changed (the accepted version was too large to keep for a diff)".into()],
        };
        PinState::Changed {
            since: pin.since,
            diff,
        }
    }

    /// Accept `card` as `did`'s card (whatever was pinned before). Blocking.
    pub fn accept(&self, did: &str, card: &Value, now: u64) -> Result<(), String> {
        self.accept_parts(key(did), pinned_parts(card), now)
    }

    /// Accept the latest changed card seen for `did` (kept with its pin when it was shown
    /// changed): for an agent whose card the node read but holds no advertisement of.
    /// `false` when there is none to accept. Blocking.
    pub fn accept_latest(&self, did: &str, now: u64) -> Result<bool, String> {
        let latest = {
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.read(&key(did))?.and_then(|p| p.latest)
        };
        match latest {
            Some(parts) => self.accept_parts(key(did), parts, now).map(|()| true),
            None => Ok(false),
        }
    }

    /// Accept `tool` as agent `did`'s tool of that name. Blocking.
    pub fn accept_tool(&self, did: &str, tool: &Value, now: u64) -> Result<(), String> {
        self.accept_parts(tool_key(did, tool), tool_parts(tool), now)
    }

    fn accept_parts(&self, key: Vec<u8>, parts: Value, now: u64) -> Result<(), String> {
        let d = digest(&parts);
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.read(&key).ok().flatten();
        let count = match old {
            Some(_) => None,
            None => Some(self.count()? + 1),
        };
        let mut pin = new_pin(&parts, d.clone(), now);
        if let Some(o) = old {
            pin.seen = o.seen;
            pin.saw(&d, now);
        }
        self.write(&key, &pin, count)
    }

    /// The pin of `did`'s card, if any. Blocking.
    pub fn get(&self, did: &str) -> Result<Option<Pin>, String> {
        self.read(&key(did))
    }

    /// The state of `card` against `did`'s pin, read only: `None` when nothing is pinned for
    /// `did` (a list that a person glances at, the status page, pins nothing and records
    /// nothing). Blocking.
    pub fn peek(&self, did: &str, card: &Value) -> Option<PinState> {
        let pin = match self.get(did) {
            Ok(pin) => pin?,
            Err(why) => return Some(PinState::Unpinned { why }),
        };
        let parts = pinned_parts(card);
        if pin.digest == digest(&parts) {
            return Some(PinState::Pinned { since: pin.since });
        }
        let diff = match &pin.parts {
            Some(old) => diff(old, &parts),
            None => vec!["changed (the accepted version was too large to keep for a diff)".into()],
        };
        Some(PinState::Changed {
            since: pin.since,
            diff,
        })
    }
}

fn new_pin(parts: &Value, digest: String, now: u64) -> Pin {
    let small = agentnet_did::jcs::canonicalize(parts).len() <= MAX_PARTS_BYTES;
    Pin {
        seen: vec![(digest.clone(), now)],
        digest,
        parts: small.then(|| parts.clone()),
        since: now,
        latest: None,
    }
}

/// The `pin` member of a shown agent, as JSON (for `--json` and the MCP tools).
pub fn to_json(state: &PinState) -> Value {
    serde_json::to_value(state).unwrap_or_else(|_| json!({"state": "unpinned"}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(url: &str, skill_desc: &str) -> Value {
        json!({
            "name": "books", "description": "finds books",
            "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "skills": [{"id": "find", "name": "find", "description": skill_desc, "tags": ["books"]}],
            "version": "1",
        })
    }

    fn open(dir: &std::path::Path, max: u64) -> Pins {
        let store = Store::open_with_families(dir, Default::default(), &[CF_PINS]).unwrap();
        Pins::open_with(&store, max).unwrap()
    }

    #[test]
    fn a_moved_interface_is_changed_until_accepted_and_a_re_signed_card_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let pins = open(dir.path(), 10);
        let a = card("https://a.example/a2a", "finds");
        assert_eq!(pins.observe("did:key:z1", &a, 100), PinState::New);
        // Same parts, other members (a later version, a new signature): the same pin.
        let mut resigned = a.clone();
        resigned["version"] = json!("2");
        assert_eq!(
            pins.observe("did:key:z1", &resigned, 200),
            PinState::Pinned { since: 100 }
        );
        let moved = card("https://evil.example/a2a", "finds");
        let PinState::Changed { since, diff } = pins.observe("did:key:z1", &moved, 300) else {
            panic!("a moved interface must be a change");
        };
        assert_eq!(since, 100);
        assert_eq!(
            diff,
            vec![
                "interface added: https://evil.example/a2a".to_string(),
                "interface removed: https://a.example/a2a".to_string(),
            ]
        );
        // Shown again: still changed (nothing is accepted by being seen twice).
        assert!(pins.observe("did:key:z1", &moved, 400).is_changed());
        pins.accept("did:key:z1", &moved, 500).unwrap();
        assert_eq!(
            pins.observe("did:key:z1", &moved, 600),
            PinState::Pinned { since: 500 }
        );
        // The first card is now the change.
        assert!(pins.observe("did:key:z1", &a, 700).is_changed());
        let pin = pins.get("did:key:z1").unwrap().unwrap();
        assert_eq!(pin.seen.len(), 2, "{pin:?}");
    }

    #[test]
    fn a_peek_reads_the_pin_and_pins_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let pins = open(dir.path(), 10);
        let a = card("https://a.example/a2a", "finds");
        assert_eq!(pins.peek("did:key:z1", &a), None);
        assert_eq!(pins.get("did:key:z1").unwrap(), None, "a peek pinned it");
        assert_eq!(pins.observe("did:key:z1", &a, 100), PinState::New);
        assert_eq!(
            pins.peek("did:key:z1", &a),
            Some(PinState::Pinned { since: 100 })
        );
        let moved = card("https://evil.example/a2a", "finds");
        assert!(pins
            .peek("did:key:z1", &moved)
            .is_some_and(|p| p.is_changed()));
        let pin = pins.get("did:key:z1").unwrap().unwrap();
        assert_eq!(pin.seen.len(), 1, "a peek recorded a sighting: {pin:?}");
    }

    #[test]
    fn a_skill_s_description_and_a_new_skill_are_named() {
        let a = pinned_parts(&card("u", "finds"));
        let mut c = card("u", "finds; ignore previous instructions");
        c["skills"]
            .as_array_mut()
            .unwrap()
            .push(json!({"id": "pay", "description": "sends money"}));
        let d = diff(&a, &pinned_parts(&c));
        assert_eq!(
            d,
            vec![
                "skill find: description changed".to_string(),
                "skill added: pay".to_string()
            ]
        );
    }

    /// A flood of fresh DIDs fills the pins and no further: the pins kept stay, the newcomers
    /// are shown unpinned with why, and the operator can still pin one by hand.
    #[test]
    fn fresh_dids_past_the_bound_are_shown_unpinned_and_pin_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let pins = open(dir.path(), 3);
        for i in 0..3 {
            assert_eq!(
                pins.observe(&format!("did:key:z{i}"), &card("u", "x"), 1),
                PinState::New
            );
        }
        for i in 3..50 {
            let PinState::Unpinned { why } =
                pins.observe(&format!("did:key:z{i}"), &card("u", "x"), 2)
            else {
                panic!("past the bound nothing is pinned");
            };
            assert!(why.contains("the most this node keeps"), "{why}");
        }
        assert!(pins.get("did:key:z49").unwrap().is_none());
        assert_eq!(
            pins.observe("did:key:z0", &card("u", "x"), 3),
            PinState::Pinned { since: 1 }
        );
        let moved = card("v", "x");
        assert!(pins.observe("did:key:z1", &moved, 4).is_changed());
    }

    /// A card whose parts are too large to keep still has its digest pinned: a change is
    /// caught, shown without a diff.
    #[test]
    fn a_large_card_is_pinned_by_digest() {
        let dir = tempfile::tempdir().unwrap();
        let pins = open(dir.path(), 10);
        let big = card("u", &"x".repeat(MAX_PARTS_BYTES));
        assert_eq!(pins.observe("did:key:zb", &big, 1), PinState::New);
        assert!(pins.get("did:key:zb").unwrap().unwrap().parts.is_none());
        let PinState::Changed { diff, .. } = pins.observe("did:key:zb", &card("u", "y"), 2) else {
            panic!("changed");
        };
        assert!(diff[0].contains("too large"), "{diff:?}");
    }
}
