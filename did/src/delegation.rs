//! Delegation chains (issue 18): who may act for whom, with what limits.
//!
//! A chain is a JSON array of **links**, root first. Each link is a W3C Verifiable Credential
//! 2.0 with a Data Integrity proof (`eddsa-jcs-2022`, [`crate::di`]) by its `issuer`: the
//! issuer grants its `credentialSubject.id` (the **audience**) a [`Capability`]. The root's
//! issuer is the **principal**; every later link is issued by the audience of the link before
//! it, names that link's digest as its `parent`, and is no wider than it ([`Capability::within`]).
//! The wire format is specified in docs/PROTOCOL.md, "Delegation".
//!
//! ```json
//! {"@context": ["https://www.w3.org/ns/credentials/v2"],
//!  "type": ["VerifiableCredential", "AgentnetDelegation"],
//!  "id": "urn:uuid:…", "issuer": "did:web:acme.example",
//!  "validFrom": "2026-12-01T19:00:00Z", "validUntil": "2026-12-01T21:00:00Z",
//!  "credentialSubject": {"id": "did:key:z6Mk…",
//!    "capability": {"ops": ["send", "get"], "skills": ["books"], "depth": 1},
//!    "parent": "sha256:…"},
//!  "proof": {"type": "DataIntegrityProof", "cryptosuite": "eddsa-jcs-2022", …}}
//! ```
//!
//! Checking a chain for a request ([`Chain::check`]) needs no I/O; the proofs are verified
//! against the issuers' DID documents after ([`Chain::verify_link`], or [`verify`] which
//! resolves them). The caller's binding: the last link's audience is the caller whose request
//! signature verified (it acts on the chain's authority), or the last link is issued by the
//! caller to the agent being called (a **hand-off**: the caller acts on the link before, and
//! gives the callee the authority to go on). A chain copied by anyone else binds to nobody.
//!
//! Bounds: [`MAX_LINKS`] links, [`MAX_LINK_BYTES`] per link, [`MAX_LIST`] entries in each list
//! of a capability.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::key::SecretKey;
use crate::{Did, DidUrl, Document, ResolveError, Resolver};

/// The credential context.
pub const CONTEXT: &str = "https://www.w3.org/ns/credentials/v2";
/// The credential type beside `VerifiableCredential`.
pub const TYPE: &str = "AgentnetDelegation";
/// The member of A2A `Message.metadata` (and MCP `_meta`) that carries a chain, after the
/// actor-chain proposal (a2aproject/A2A#2028).
pub const METADATA_MEMBER: &str = "actorChain";
/// The extension URI agents declare in `capabilities.extensions`.
pub const EXTENSION: &str = "urn:agentnet:a2a:delegation:v1";
/// Most links in a chain.
pub const MAX_LINKS: usize = 8;
/// Largest link, as RFC 8785 bytes.
pub const MAX_LINK_BYTES: usize = 8 * 1024;
/// Most entries in one list of a capability, and the longest entry.
pub const MAX_LIST: usize = 64;
const MAX_ENTRY: usize = 512;

/// The operations a capability can name: A2A `send` (`SendMessage`, streaming too), `get`
/// (`GetTask`, `ListTasks`, `SubscribeToTask`), `cancel`, and MCP tools as `tool:NAME` or
/// `tool:*`.
pub const A2A_OPS: [&str; 3] = ["send", "get", "cancel"];

/// What a link grants. A list that is absent does not restrict (any agent, any skill); `ops`
/// is always present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Capability {
    /// Agents (DIDs) it may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    /// Domains whose did:web / did:wba agents it may call (the domain or below it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Vec<String>>,
    /// Skill tags: the agent called must have one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// Operations.
    pub ops: Vec<String>,
    /// How many more links may follow this one.
    #[serde(default)]
    pub depth: u32,
}

/// What a request asks of a chain.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The agent called (its DID).
    pub agent: &'a str,
    /// The agent's skill tags.
    pub skills: &'a [String],
    /// The operation (`send`, `get`, `cancel`, `tool:NAME`).
    pub op: &'a str,
}

impl Capability {
    fn check_shape(&self) -> Result<(), String> {
        if self.ops.is_empty() {
            return Err("capability.ops is empty".into());
        }
        for (name, list) in [
            ("agents", self.agents.as_deref()),
            ("domains", self.domains.as_deref()),
            ("skills", self.skills.as_deref()),
            ("ops", Some(self.ops.as_slice())),
        ] {
            let Some(list) = list else { continue };
            if list.len() > MAX_LIST {
                return Err(format!(
                    "capability.{name} has more than {MAX_LIST} entries"
                ));
            }
            if let Some(e) = list.iter().find(|e| e.is_empty() || e.len() > MAX_ENTRY) {
                return Err(format!(
                    "capability.{name} has an entry of {} bytes (1 to {MAX_ENTRY})",
                    e.len()
                ));
            }
        }
        if let Some(op) = self
            .ops
            .iter()
            .find(|o| !A2A_OPS.contains(&o.as_str()) && !o.starts_with("tool:"))
        {
            return Err(format!(
                "capability.ops: unknown operation {op:?} (send, get, cancel, tool:NAME, tool:*)"
            ));
        }
        if self.depth as usize >= MAX_LINKS {
            return Err(format!("capability.depth over {}", MAX_LINKS - 1));
        }
        Ok(())
    }

    fn any_agent(&self) -> bool {
        self.agents.is_none() && self.domains.is_none()
    }

    /// Whether this capability lets its holder call `agent`.
    pub fn allows_agent(&self, agent: &str) -> bool {
        if self.any_agent() {
            return true;
        }
        self.agents
            .as_deref()
            .is_some_and(|a| a.iter().any(|d| d == agent))
            || domain_of(agent).is_some_and(|d| {
                self.domains
                    .as_deref()
                    .is_some_and(|ds| ds.iter().any(|p| under(&d, p)))
            })
    }

    fn allows_op(&self, op: &str) -> bool {
        self.ops
            .iter()
            .any(|o| o == op || (o == "tool:*" && op.starts_with("tool:")))
    }

    /// Whether this capability covers `target`; the reason when it does not.
    pub fn covers(&self, target: &Target<'_>) -> Result<(), String> {
        if !self.allows_op(target.op) {
            return Err(format!(
                "operation {} is not granted (ops {:?})",
                target.op, self.ops
            ));
        }
        if !self.allows_agent(target.agent) {
            return Err(format!(
                "agent {} is not among the agents granted",
                target.agent
            ));
        }
        if let Some(skills) = &self.skills {
            if !target.skills.iter().any(|s| skills.contains(s)) {
                return Err(format!(
                    "the agent has none of the skills granted ({skills:?})"
                ));
            }
        }
        Ok(())
    }

    /// Whether this capability is no wider than `parent`, which must allow one more link.
    pub fn within(&self, parent: &Capability) -> Result<(), String> {
        if parent.depth == 0 {
            return Err("its parent allows no further delegation (depth 0)".into());
        }
        if self.depth >= parent.depth {
            return Err(format!(
                "depth {} is not below its parent's {}",
                self.depth, parent.depth
            ));
        }
        if let Some(op) = self.ops.iter().find(|o| {
            let star_ok = o.as_str() != "tool:*" || parent.ops.iter().any(|p| p == "tool:*");
            !(star_ok && parent.allows_op(o))
        }) {
            return Err(format!(
                "widens its parent: operation {op} is not in {:?}",
                parent.ops
            ));
        }
        if !parent.any_agent() {
            if self.any_agent() {
                return Err("widens its parent: any agent, where the parent names agents".into());
            }
            if let Some(a) = self
                .agents
                .iter()
                .flatten()
                .find(|a| !parent.allows_agent(a))
            {
                return Err(format!("widens its parent: agent {a} is not granted there"));
            }
            if let Some(d) = self.domains.iter().flatten().find(|d| {
                !parent
                    .domains
                    .as_deref()
                    .is_some_and(|ps| ps.iter().any(|p| under(d, p)))
            }) {
                return Err(format!(
                    "widens its parent: domain {d} is not granted there"
                ));
            }
        }
        if let Some(ps) = &parent.skills {
            match &self.skills {
                None => {
                    return Err(
                        "widens its parent: any skill, where the parent names skills".into(),
                    )
                }
                Some(s) => {
                    if let Some(x) = s.iter().find(|x| !ps.contains(x)) {
                        return Err(format!("widens its parent: skill {x} is not granted there"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The host of a did:web or did:wba DID (lowercase, port dropped).
pub fn domain_of(did: &str) -> Option<String> {
    let rest = did
        .strip_prefix("did:web:")
        .or_else(|| did.strip_prefix("did:wba:"))?;
    let host = rest.split(':').next()?;
    let host = host.split("%3A").next()?.split("%3a").next()?;
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

fn under(domain: &str, parent: &str) -> bool {
    let d = domain.to_ascii_lowercase();
    let p = parent.to_ascii_lowercase();
    d == p || d.ends_with(&format!(".{p}"))
}

/// Why a chain does not hold. `link` is the index of the failing link, when one is to blame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", match link { Some(i) => format!("delegation link {i}: "), None => "delegation: ".to_owned() })]
pub struct ChainError {
    /// Which link (0 = the root).
    pub link: Option<usize>,
    /// What is wrong, in words.
    pub reason: String,
}

impl ChainError {
    fn at(link: usize, reason: impl Into<String>) -> Self {
        ChainError {
            link: Some(link),
            reason: reason.into(),
        }
    }
    fn whole(reason: impl Into<String>) -> Self {
        ChainError {
            link: None,
            reason: reason.into(),
        }
    }
}

/// One link, parsed (its proof not yet verified).
#[derive(Debug, Clone)]
pub struct Link {
    /// The credential as received.
    pub value: Value,
    /// `issuer`.
    pub issuer: Did,
    /// `credentialSubject.id`.
    pub audience: Did,
    /// The grant.
    pub capability: Capability,
    /// `credentialSubject.parent`.
    pub parent: Option<String>,
    /// `validFrom`, Unix seconds.
    pub valid_from: i64,
    /// `validUntil`, Unix seconds.
    pub valid_until: i64,
    /// The proof's verification method.
    pub method: DidUrl,
    /// `sha256:<hex>` of the link's RFC 8785 bytes, proof included.
    pub digest: String,
    /// Those bytes (the chain's digest is built from them).
    bytes: Vec<u8>,
}

/// `sha256:<hex>` of a chain's RFC 8785 bytes from its links' bytes: RFC 8785 writes an array
/// as `[`, its members' bytes joined by `,`, then `]`.
fn chain_digest<'a>(links: impl Iterator<Item = &'a Link>) -> String {
    let mut whole = Sha256::new();
    whole.update(b"[");
    for (i, l) in links.enumerate() {
        if i > 0 {
            whole.update(b",");
        }
        whole.update(&l.bytes);
    }
    whole.update(b"]");
    format!("sha256:{}", hex::encode(whole.finalize()))
}

/// `sha256:<hex>` of `v`'s RFC 8785 bytes.
pub fn digest(v: &Value) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(crate::jcs::canonicalize(v)))
    )
}

fn time(v: &Value, name: &str, i: usize) -> Result<i64, ChainError> {
    let s = v
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ChainError::at(i, format!("{name} is missing")))?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp())
        .map_err(|e| ChainError::at(i, format!("{name} {s:?} is not an RFC 3339 time: {e}")))
}

/// An RFC 3339 UTC time of Unix seconds.
pub fn rfc3339(secs: i64) -> String {
    DateTime::<Utc>::from_timestamp(secs, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The time now, Unix seconds.
pub fn now() -> i64 {
    Utc::now().timestamp()
}

impl Link {
    /// The link `v` at index `i`.
    fn parse(v: &Value, i: usize) -> Result<Link, ChainError> {
        let bytes = crate::jcs::canonicalize(v);
        if bytes.len() > MAX_LINK_BYTES {
            return Err(ChainError::at(i, format!("over {MAX_LINK_BYTES} bytes")));
        }
        let o = v
            .as_object()
            .ok_or_else(|| ChainError::at(i, "not a JSON object"))?;
        let ctx_ok = match o.get("@context") {
            Some(Value::Array(a)) => a.first().and_then(Value::as_str) == Some(CONTEXT),
            _ => false,
        };
        if !ctx_ok {
            return Err(ChainError::at(
                i,
                format!("@context must start with {CONTEXT}"),
            ));
        }
        let typed = o.get("type").and_then(Value::as_array).is_some_and(|t| {
            t.iter().any(|x| x == TYPE) && t.iter().any(|x| x == "VerifiableCredential")
        });
        if !typed {
            return Err(ChainError::at(
                i,
                format!("type must include VerifiableCredential and {TYPE}"),
            ));
        }
        let issuer = match o.get("issuer") {
            Some(Value::String(s)) => s.as_str(),
            Some(Value::Object(m)) => m.get("id").and_then(Value::as_str).unwrap_or_default(),
            _ => "",
        };
        let issuer = Did::parse(issuer)
            .map_err(|e| ChainError::at(i, format!("issuer is not a DID: {e}")))?;
        let subject = o
            .get("credentialSubject")
            .and_then(Value::as_object)
            .ok_or_else(|| ChainError::at(i, "credentialSubject must be one object"))?;
        let audience = subject
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let audience = Did::parse(audience)
            .map_err(|e| ChainError::at(i, format!("credentialSubject.id is not a DID: {e}")))?;
        let capability = subject
            .get("capability")
            .ok_or_else(|| ChainError::at(i, "credentialSubject.capability is missing"))
            .and_then(|c| {
                Capability::deserialize(c)
                    .map_err(|e| ChainError::at(i, format!("credentialSubject.capability: {e}")))
            })?;
        capability.check_shape().map_err(|e| ChainError::at(i, e))?;
        let parent = match subject.get("parent") {
            None => None,
            Some(Value::String(s)) if s.len() <= 80 => Some(s.clone()),
            Some(_) => {
                return Err(ChainError::at(
                    i,
                    "credentialSubject.parent must be a digest string",
                ))
            }
        };
        let valid_from = time(v, "validFrom", i)?;
        let valid_until = time(v, "validUntil", i)?;
        let method = crate::di::parts(v)
            .map_err(|e| ChainError::at(i, e.to_string()))?
            .method;
        if method.did() != &issuer {
            return Err(ChainError::at(
                i,
                format!(
                    "signed by {}, which is not a key of the issuer {issuer}",
                    method
                ),
            ));
        }
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        Ok(Link {
            value: v.clone(),
            issuer,
            audience,
            capability,
            parent,
            valid_from,
            valid_until,
            method,
            digest,
            bytes,
        })
    }

    fn names(&self) -> String {
        format!("({} → {})", self.issuer.short(), self.audience.short())
    }
}

/// Links parsed before, for [`Chain::parse_with`]: the digest of a chain an agent sees on every
/// request (RFC 8785 of each link, SHA-256) is computed once, not per request.
///
/// Keyed by the link's `proof.proofValue`, and a link is reused only for a credential equal to
/// the one it was parsed from (what is parsed is a function of the JSON alone; times, the
/// principal, the binding and the proof are still checked per request). Bounded in total:
/// [`MEMO_LINKS`] links and [`MEMO_BYTES`] of their RFC 8785 bytes, oldest evicted first.
/// Anyone may fill it with links of their own: that costs the others a parse, never a
/// wrong answer.
#[derive(Debug, Default)]
pub struct Memo(Mutex<MemoInner>);

#[derive(Debug, Default)]
struct MemoInner {
    by_proof: HashMap<String, Arc<Link>>,
    order: VecDeque<String>,
    bytes: usize,
}

/// Most links a [`Memo`] holds.
pub const MEMO_LINKS: usize = 4096;
/// Most RFC 8785 bytes of the links a [`Memo`] holds (their JSON in memory is a few times
/// that).
pub const MEMO_BYTES: usize = 4 << 20;

fn proof_value(v: &Value) -> Option<&str> {
    v.get("proof")?.get("proofValue")?.as_str()
}

impl Memo {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The link parsed from a credential equal to `v`, if held.
    fn get(&self, v: &Value) -> Option<Arc<Link>> {
        let key = proof_value(v)?;
        let known = self.lock().by_proof.get(key).cloned()?;
        (known.value == *v).then_some(known)
    }

    fn put(&self, link: &Arc<Link>) {
        let Some(key) = proof_value(&link.value) else {
            return;
        };
        let mut m = self.lock();
        if let Some(old) = m.by_proof.insert(key.to_string(), link.clone()) {
            // The same proof value on another credential: the newer replaces it in place.
            m.bytes -= old.bytes.len();
        } else {
            m.order.push_back(key.to_string());
        }
        m.bytes += link.bytes.len();
        while m.order.len() > MEMO_LINKS || m.bytes > MEMO_BYTES {
            let Some(old) = m.order.pop_front() else {
                break;
            };
            if let Some(l) = m.by_proof.remove(&old) {
                m.bytes -= l.bytes.len();
            }
        }
    }

    /// Links held.
    pub fn len(&self) -> usize {
        self.lock().by_proof.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `sha256:<hex>` of `chain`'s RFC 8785 bytes (what [`digest`] gives), from the bytes
    /// held for its links when all are held.
    pub fn digest(&self, chain: &Value) -> String {
        let held: Option<Vec<Arc<Link>>> = chain
            .as_array()
            .filter(|a| !a.is_empty())
            .and_then(|a| a.iter().map(|v| self.get(v)).collect());
        match held {
            Some(links) => chain_digest(links.iter().map(|l| &**l)),
            None => digest(chain),
        }
    }
}

/// A parsed chain: shape, bounds, links and attenuation checked; proofs not yet verified.
#[derive(Debug, Clone)]
pub struct Chain {
    links: Vec<Arc<Link>>,
    digest: String,
}

/// What a chain proved for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The principal (the root's issuer).
    pub principal: String,
    /// The link the caller acts on.
    pub acting: usize,
    /// Whether the last link hands authority to the agent called.
    pub handed_off: bool,
}

/// What a chain must prove.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The principals accepted as root issuers; `None` accepts any.
    pub principals: Option<&'a [String]>,
    /// The caller whose request signature verified.
    pub caller: &'a str,
    /// What the caller does.
    pub target: Target<'a>,
    /// Now, Unix seconds.
    pub now: i64,
}

impl Chain {
    /// Parse `v` (the JSON array) and check every link's shape, its parent and its attenuation.
    pub fn parse(v: &Value) -> Result<Chain, ChainError> {
        Chain::parse_with(v, None)
    }

    /// [`Chain::parse`], taking from `memo` the links parsed before (and putting there the
    /// others): a link seen again costs a comparison, not its RFC 8785 bytes and digest.
    pub fn parse_with(v: &Value, memo: Option<&Memo>) -> Result<Chain, ChainError> {
        let arr = v.as_array().ok_or_else(|| {
            ChainError::whole(format!("{METADATA_MEMBER} must be a JSON array of links"))
        })?;
        if arr.is_empty() {
            return Err(ChainError::whole("the chain has no links"));
        }
        if arr.len() > MAX_LINKS {
            return Err(ChainError::whole(format!(
                "the chain has {} links; at most {MAX_LINKS}",
                arr.len()
            )));
        }
        let mut links: Vec<Arc<Link>> = Vec::with_capacity(arr.len());
        for (i, v) in arr.iter().enumerate() {
            let link = match memo.and_then(|m| m.get(v)) {
                Some(known) => known,
                None => {
                    let link = Arc::new(Link::parse(v, i)?);
                    if let Some(m) = memo {
                        m.put(&link);
                    }
                    link
                }
            };
            if link.valid_until < link.valid_from {
                return Err(ChainError::at(i, "validUntil is before validFrom"));
            }
            match links.last() {
                None => {
                    if link.parent.is_some() {
                        return Err(ChainError::at(0, "the root link names a parent"));
                    }
                }
                Some(parent) => {
                    if link.issuer != parent.audience {
                        return Err(ChainError::at(
                            i,
                            format!(
                                "issued by {}, but its parent grants {}",
                                link.issuer, parent.audience
                            ),
                        ));
                    }
                    if link.parent.as_deref() != Some(parent.digest.as_str()) {
                        return Err(ChainError::at(
                            i,
                            "its parent digest does not name the link before it",
                        ));
                    }
                    link.capability
                        .within(&parent.capability)
                        .map_err(|e| ChainError::at(i, format!("{} {e}", link.names())))?;
                    if link.valid_until > parent.valid_until {
                        return Err(ChainError::at(
                            i,
                            format!(
                                "{} widens its parent: valid until after its parent",
                                link.names()
                            ),
                        ));
                    }
                }
            }
            links.push(link);
        }
        // The chain's digest from the links' bytes, without canonicalizing it all again.
        let digest = chain_digest(links.iter().map(|l| &**l));
        Ok(Chain { links, digest })
    }

    /// The links, root first.
    pub fn links(&self) -> &[Arc<Link>] {
        &self.links
    }

    /// `sha256:<hex>` of the chain's RFC 8785 bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The chain as it travels.
    pub fn to_value(&self) -> Value {
        Value::Array(self.links.iter().map(|l| l.value.clone()).collect())
    }

    /// Check the chain for `req`: times, the principal, the caller's binding, and that the
    /// link the caller acts on covers the target. No I/O; proofs are checked after.
    pub fn check(&self, req: &Request<'_>) -> Result<Checked, ChainError> {
        for (i, l) in self.links.iter().enumerate() {
            if req.now < l.valid_from {
                return Err(ChainError::at(
                    i,
                    format!("{} not valid before {}", l.names(), rfc3339(l.valid_from)),
                ));
            }
            if req.now > l.valid_until {
                return Err(ChainError::at(
                    i,
                    format!("{} expired at {}", l.names(), rfc3339(l.valid_until)),
                ));
            }
        }
        let root = &self.links[0];
        if let Some(p) = req.principals {
            if !p.iter().any(|p| p == root.issuer.as_str()) {
                return Err(ChainError::at(
                    0,
                    format!(
                        "the principal {} is not one this agent accepts",
                        root.issuer
                    ),
                ));
            }
        }
        let n = self.links.len();
        let last = &self.links[n - 1];
        let (acting, handed_off) = if last.audience.as_str() == req.caller {
            (n - 1, false)
        } else if last.issuer.as_str() == req.caller
            && last.audience.as_str() == req.target.agent
            && n >= 2
        {
            (n - 2, true)
        } else {
            return Err(ChainError::at(
                n - 1,
                format!(
                    "{} binds neither to the caller {} nor hands off from it to this agent (a chain copied by someone else is worthless)",
                    last.names(),
                    req.caller
                ),
            ));
        };
        self.links[acting]
            .capability
            .covers(&req.target)
            .map_err(|e| ChainError::at(acting, format!("{} {e}", self.links[acting].names())))?;
        Ok(Checked {
            principal: root.issuer.to_string(),
            acting,
            handed_off,
        })
    }

    /// Verify link `i`'s proof with its issuer's DID document.
    pub fn verify_link(&self, i: usize, issuer: &Document) -> Result<(), ChainError> {
        let l = &self.links[i];
        crate::di::verify(&l.value, issuer)
            .map(|_| ())
            .map_err(|e| ChainError::at(i, format!("{} {e}", l.names())))
    }
}

/// Parse, check and verify `v` for `req`, resolving each issuer with `resolver`.
pub async fn verify(
    v: &Value,
    req: &Request<'_>,
    resolver: &Resolver,
) -> Result<Checked, ChainError> {
    let chain = Chain::parse(v)?;
    let checked = chain.check(req)?;
    for i in 0..chain.links.len() {
        let doc: Arc<Document> =
            resolver
                .resolve(&chain.links[i].issuer)
                .await
                .map_err(|e: ResolveError| {
                    ChainError::at(i, format!("its issuer did not resolve: {e}"))
                })?;
        chain.verify_link(i, &doc)?;
    }
    Ok(checked)
}

/// What [`issue`] writes.
#[derive(Debug, Clone)]
pub struct Grant<'a> {
    /// The audience.
    pub audience: &'a Did,
    /// What it may do.
    pub capability: &'a Capability,
    /// From, Unix seconds.
    pub valid_from: i64,
    /// Until, Unix seconds.
    pub valid_until: i64,
}

/// Issue a link signed with `key` as `method` (whose DID is the issuer). With `chain`, the
/// link extends it (the issuer must be its last audience, the grant no wider); the chain with
/// the new link is returned. Without, a root link, alone in a new chain.
pub fn issue(
    key: &SecretKey,
    method: &DidUrl,
    grant: &Grant<'_>,
    chain: Option<&Value>,
) -> Result<Value, ChainError> {
    grant.capability.check_shape().map_err(ChainError::whole)?;
    let mut links = match chain {
        Some(c) => c
            .as_array()
            .cloned()
            .ok_or_else(|| ChainError::whole("the chain to extend is not a JSON array"))?,
        None => Vec::new(),
    };
    let i = links.len();
    let parent = match chain {
        Some(c) => {
            let parsed = Chain::parse(c)?;
            let last = parsed.links.last().cloned();
            last
        }
        None => None,
    };
    let mut subject = json!({"id": grant.audience.as_str(), "capability": grant.capability});
    if let Some(p) = &parent {
        subject["parent"] = Value::String(p.digest.clone());
    }
    let mut id = [0u8; 16];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut id);
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    let h = hex::encode(id);
    let cred = json!({
        "@context": [CONTEXT],
        "type": ["VerifiableCredential", TYPE],
        "id": format!("urn:uuid:{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]),
        "issuer": method.did().as_str(),
        "validFrom": rfc3339(grant.valid_from),
        "validUntil": rfc3339(grant.valid_until),
        "credentialSubject": subject,
    });
    let signed = crate::di::sign(&cred, key, method, &rfc3339(now()))
        .map_err(|e| ChainError::at(i, e.to_string()))?;
    links.push(signed);
    let out = Value::Array(links);
    // The new chain must parse: this catches a widened grant or a wrong issuer here, at the
    // issuer, rather than at the agent called.
    Chain::parse(&out)?;
    Ok(out)
}

/// Extend `chain` (held by `key`'s DID) with a hand-off to `agent`: the same grant as the
/// holder's link, one level shallower, until no later than it. `None` when the holder's link
/// allows no further link.
pub fn hand_off(
    key: &SecretKey,
    method: &DidUrl,
    chain: &Value,
    agent: &Did,
) -> Result<Option<Value>, ChainError> {
    let parsed = Chain::parse(chain)?;
    let last = parsed
        .links
        .last()
        .ok_or_else(|| ChainError::whole("empty chain"))?;
    if last.audience != *method.did() {
        return Ok(None);
    }
    if last.capability.depth == 0 {
        return Ok(None);
    }
    let mut cap = last.capability.clone();
    cap.depth -= 1;
    let grant = Grant {
        audience: agent,
        capability: &cap,
        valid_from: last.valid_from.max(now() - 60).min(last.valid_until),
        valid_until: last.valid_until,
    };
    issue(key, method, &grant, Some(chain)).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(seed: u8) -> (SecretKey, DidUrl, Document) {
        let key = SecretKey::from_seed(&[seed; 32]);
        let did = key.did_key();
        let vm = did.with_fragment(did.method_specific_id());
        let doc = crate::didkey::document(&key.public(), Default::default());
        (key, vm, doc)
    }

    fn cap(ops: &[&str], depth: u32) -> Capability {
        Capability {
            ops: ops.iter().map(|s| s.to_string()).collect(),
            depth,
            ..Default::default()
        }
    }

    /// One instant for every grant of a test run: links issued a second apart must not end
    /// a second apart, or a child outlives its parent (CI caught the clock ticking between
    /// two `now()` calls).
    fn t0() -> i64 {
        static T0: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
        *T0.get_or_init(now)
    }

    fn grant<'a>(to: &'a Did, c: &'a Capability) -> Grant<'a> {
        Grant {
            audience: to,
            capability: c,
            valid_from: t0() - 10,
            valid_until: t0() + 3600,
        }
    }

    fn req<'a>(caller: &'a str, agent: &'a str, op: &'a str, skills: &'a [String]) -> Request<'a> {
        Request {
            principals: None,
            caller,
            target: Target { agent, skills, op },
            now: now(),
        }
    }

    /// principal → a (depth 2) → b: the chain b holds.
    fn two_links() -> (Value, [(SecretKey, DidUrl, Document); 3]) {
        let p = who(1);
        let a = who(2);
        let b = who(3);
        let c0 = cap(&["send", "get"], 2);
        let chain = issue(&p.0, &p.1, &grant(a.1.did(), &c0), None).unwrap();
        let c1 = cap(&["send"], 1);
        let chain = issue(&a.0, &a.1, &grant(b.1.did(), &c1), Some(&chain)).unwrap();
        (chain, [p, a, b])
    }

    #[test]
    fn a_chain_verifies_for_its_holder_and_for_nobody_else() {
        let (chain, [p, _a, b]) = two_links();
        let parsed = Chain::parse(&chain).unwrap();
        let agent = who(9);
        let r = req(b.1.did().as_str(), agent.1.did().as_str(), "send", &[]);
        let checked = parsed.check(&r).unwrap();
        assert_eq!(checked.principal, p.1.did().as_str());
        assert_eq!(checked.acting, 1);
        for (i, l) in parsed.links().iter().enumerate() {
            let doc = crate::didkey::document(
                &crate::didkey::decode(&l.issuer).unwrap(),
                Default::default(),
            );
            parsed.verify_link(i, &doc).unwrap();
        }
        // A thief presenting b's chain binds to nobody.
        let thief = who(10);
        let r = req(thief.1.did().as_str(), agent.1.did().as_str(), "send", &[]);
        let e = parsed.check(&r).unwrap_err();
        assert_eq!(e.link, Some(1), "{e}");
        // b may not get: the second link narrowed ops to send.
        let r = req(b.1.did().as_str(), agent.1.did().as_str(), "get", &[]);
        assert!(parsed
            .check(&r)
            .unwrap_err()
            .reason
            .contains("operation get"));
    }

    #[test]
    fn a_widened_link_is_refused_even_when_signed() {
        let p = who(1);
        let a = who(2);
        let b = who(3);
        let chain = issue(&p.0, &p.1, &grant(a.1.did(), &cap(&["send"], 1)), None).unwrap();
        // issue() refuses to write it…
        let wide = cap(&["send", "cancel"], 0);
        let e = issue(&a.0, &a.1, &grant(b.1.did(), &wide), Some(&chain)).unwrap_err();
        assert!(e.reason.contains("cancel"), "{e}");
        // …and a hand-built one (signed properly) fails to parse at the agent.
        let parent = Chain::parse(&chain).unwrap().links()[0].digest.clone();
        let cred = json!({"@context": [CONTEXT], "type": ["VerifiableCredential", TYPE],
            "issuer": a.1.did().as_str(), "validFrom": rfc3339(now() - 5), "validUntil": rfc3339(now() + 60),
            "credentialSubject": {"id": b.1.did().as_str(), "parent": parent, "capability": wide}});
        let signed = crate::di::sign(&cred, &a.0, &a.1, &rfc3339(now())).unwrap();
        let mut arr = chain.as_array().unwrap().clone();
        arr.push(signed);
        let e = Chain::parse(&Value::Array(arr)).unwrap_err();
        assert_eq!(e.link, Some(1));
        assert!(e.reason.contains("widens"), "{e}");
    }

    #[test]
    fn depth_expiry_and_parent_links_are_enforced() {
        let p = who(1);
        let a = who(2);
        let b = who(3);
        let c = who(4);
        // depth 0: a may not delegate at all.
        let chain = issue(&p.0, &p.1, &grant(a.1.did(), &cap(&["send"], 0)), None).unwrap();
        let e = issue(
            &a.0,
            &a.1,
            &grant(b.1.did(), &cap(&["send"], 0)),
            Some(&chain),
        )
        .unwrap_err();
        assert!(e.reason.contains("depth"), "{e}");
        // expired root.
        let g = Grant {
            audience: a.1.did(),
            capability: &cap(&["send"], 1),
            valid_from: now() - 100,
            valid_until: now() - 50,
        };
        let chain = issue(&p.0, &p.1, &g, None).unwrap();
        let e = Chain::parse(&chain)
            .unwrap()
            .check(&req(a.1.did().as_str(), "did:key:zX", "send", &[]))
            .unwrap_err();
        assert!(e.reason.contains("expired"), "{e}");
        // a link whose parent digest names another chain's link.
        let (other, _) = two_links();
        let chain = issue(&p.0, &p.1, &grant(a.1.did(), &cap(&["send"], 2)), None).unwrap();
        let chain = issue(
            &a.0,
            &a.1,
            &grant(b.1.did(), &cap(&["send"], 1)),
            Some(&chain),
        )
        .unwrap();
        let mut arr = chain.as_array().unwrap().clone();
        arr[1]["credentialSubject"]["parent"] = other[0]["credentialSubject"]["id"].clone();
        assert!(Chain::parse(&Value::Array(arr)).is_err());
        // a link issued by someone the parent did not grant.
        let root = issue(&p.0, &p.1, &grant(a.1.did(), &cap(&["send"], 2)), None).unwrap();
        let e = issue(
            &c.0,
            &c.1,
            &grant(b.1.did(), &cap(&["send"], 1)),
            Some(&root),
        )
        .unwrap_err();
        assert!(e.reason.contains("issued by"), "{e}");
    }

    #[test]
    fn the_chain_digest_is_that_of_its_rfc_8785_bytes() {
        let (chain, _) = two_links();
        assert_eq!(Chain::parse(&chain).unwrap().digest(), digest(&chain));
    }

    /// A link seen again is taken from the memo: the same chain, the same digests; a link
    /// that keeps another's proof value but says something else is parsed as what it says.
    #[test]
    fn the_memo_gives_what_a_parse_gives_and_no_more() {
        let (chain, [_p, a, _b]) = two_links();
        let memo = Memo::default();
        let plain = Chain::parse(&chain).unwrap();
        let first = Chain::parse_with(&chain, Some(&memo)).unwrap();
        assert_eq!(memo.len(), 2);
        let again = Chain::parse_with(&chain, Some(&memo)).unwrap();
        for c in [&first, &again] {
            assert_eq!(c.digest(), plain.digest());
            assert_eq!(c.digest(), digest(&chain));
            let ds = |c: &Chain| {
                c.links()
                    .iter()
                    .map(|l| l.digest.clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(ds(c), ds(&plain));
        }
        assert!(Arc::ptr_eq(&first.links()[1], &again.links()[1]), "reused");
        assert_eq!(memo.digest(&chain), digest(&chain));

        // The second link widened (ops send → send, cancel), its proof value kept: the memo
        // must not answer for it. Its proof fails, and its digest is its own.
        let mut forged = chain.clone();
        forged[1]["credentialSubject"]["capability"]["ops"] = json!(["send", "cancel"]);
        assert_eq!(memo.digest(&forged), digest(&forged));
        assert_ne!(memo.digest(&forged), digest(&chain));
        // Wider than its parent? No: the root grants cancel-less "send, get"; refused.
        let err = Chain::parse_with(&forged, Some(&memo)).unwrap_err();
        assert_eq!(err.link, Some(1), "{err}");
        // A narrower forgery parses, as itself, and its proof does not verify.
        let mut narrowed = chain.clone();
        narrowed[1]["credentialSubject"]["capability"]["depth"] = json!(0);
        let n = Chain::parse_with(&narrowed, Some(&memo)).unwrap();
        assert_eq!(n.links()[1].capability.depth, 0);
        assert_eq!(n.digest(), digest(&narrowed));
        assert!(n.verify_link(1, &a.2).is_err());
        assert!(Chain::parse(&chain).unwrap().verify_link(1, &a.2).is_ok());
        // And the memo still answers for the genuine link.
        let g = Chain::parse_with(&chain, Some(&memo)).unwrap();
        assert_eq!(g.links()[1].capability.depth, 1);
    }

    /// Filling the memo with links of one's own evicts the oldest: it stays within its bounds.
    #[test]
    fn the_memo_is_bounded_in_links_and_bytes() {
        let memo = Memo::default();
        let p = who(1);
        let mut first = None;
        for i in 0..(MEMO_LINKS + 50) {
            let c = Capability {
                ops: vec!["send".into()],
                skills: Some(vec![format!("s{i}")]),
                depth: 0,
                ..Default::default()
            };
            let chain = issue(&p.0, &p.1, &grant(p.1.did(), &c), None).unwrap();
            Chain::parse_with(&chain, Some(&memo)).unwrap();
            first.get_or_insert(chain);
        }
        assert_eq!(memo.len(), MEMO_LINKS);
        assert!(memo.lock().bytes <= MEMO_BYTES);
        let held: usize = memo.lock().by_proof.values().map(|l| l.bytes.len()).sum();
        assert_eq!(held, memo.lock().bytes);
        // The first is gone; its digest is still right, computed afresh.
        let first = first.unwrap();
        assert!(memo.get(&first[0]).is_none());
        assert_eq!(memo.digest(&first), digest(&first));
    }

    #[test]
    fn a_chain_too_long_is_refused_before_any_link_is_read() {
        let v = Value::Array(vec![json!({}); MAX_LINKS + 1]);
        let e = Chain::parse(&v).unwrap_err();
        assert_eq!(e.link, None);
        assert!(e.reason.contains("at most"), "{e}");
    }

    #[test]
    fn a_tampered_link_fails_its_proof() {
        let (chain, [p, _, _]) = two_links();
        let mut v = chain.clone();
        v[0]["validUntil"] = json!(rfc3339(now() + 7200));
        // The change breaks the child's parent digest first…
        assert!(Chain::parse(&v).is_err());
        // …and the root's own proof.
        let one = Value::Array(vec![v[0].clone()]);
        let parsed = Chain::parse(&one).unwrap();
        assert!(parsed
            .verify_link(0, &p.2)
            .unwrap_err()
            .reason
            .contains("does not verify"));
    }

    #[test]
    fn hand_off_binds_the_callee_and_narrows_depth() {
        let (chain, [_p, _a, b]) = two_links();
        let agent = who(11);
        let longer = hand_off(&b.0, &b.1, &chain, agent.1.did())
            .unwrap()
            .unwrap();
        let parsed = Chain::parse(&longer).unwrap();
        assert_eq!(parsed.links().len(), 3);
        assert_eq!(parsed.links()[2].capability.depth, 0);
        let r = req(b.1.did().as_str(), agent.1.did().as_str(), "send", &[]);
        let c = parsed.check(&r).unwrap();
        assert!(c.handed_off);
        assert_eq!(c.acting, 1);
        // The callee itself may act on it onward (to anyone the grant allows)…
        let next = who(12);
        let r = req(agent.1.did().as_str(), next.1.did().as_str(), "send", &[]);
        assert!(!parsed.check(&r).unwrap().handed_off);
        // …but may not hand off again: depth 0.
        assert!(hand_off(&agent.0, &agent.1, &longer, next.1.did())
            .unwrap()
            .is_none());
    }

    #[test]
    fn agents_domains_and_skills_narrow() {
        let parent = Capability {
            domains: Some(vec!["acme.example".into()]),
            skills: Some(vec!["books".into(), "search".into()]),
            ops: vec!["send".into(), "tool:*".into()],
            depth: 2,
            ..Default::default()
        };
        let ok = Capability {
            agents: Some(vec!["did:web:shop.acme.example".into()]),
            skills: Some(vec!["books".into()]),
            ops: vec!["tool:search".into()],
            depth: 1,
            ..Default::default()
        };
        ok.within(&parent).unwrap();
        let bad_agent = Capability {
            agents: Some(vec!["did:web:evil.example".into()]),
            ..ok.clone()
        };
        assert!(bad_agent.within(&parent).is_err());
        let any_skill = Capability {
            skills: None,
            ..ok.clone()
        };
        assert!(any_skill.within(&parent).is_err());
        let t = Target {
            agent: "did:web:shop.acme.example",
            skills: &["books".to_string()],
            op: "tool:search",
        };
        ok.covers(&t).unwrap();
        let t2 = Target {
            skills: &["music".to_string()],
            ..t
        };
        assert!(ok.covers(&t2).is_err());
        assert_eq!(
            domain_of("did:web:shop.acme.example%3A8443:agents:x").as_deref(),
            Some("shop.acme.example")
        );
        assert_eq!(domain_of("did:key:z6Mk"), None);
    }
}
