//! On whose behalf: the delegation policy of the hosted agents ([`Authority`], an A2A
//! [`Gate`]), checked on every operation before any work (issue 18; the format is
//! [`agentnet_did::delegation`], specified in docs/PROTOCOL.md, "Delegation").
//!
//! An agent with `require_delegation_from = [DID, …]` serves only requests that present a
//! chain rooted at one of those principals, bound to the caller whose request signature
//! verified, and covering the operation on this agent (its DID, its skill tags). Any agent
//! checks a chain that is presented, and refuses one that does not hold: a task's receipt
//! names the chain it ran under, so an unchecked chain would be a false claim.
//!
//! Where the chain is read: `Message.metadata.actorChain` of a `SendMessage`; for a message
//! that continues a task without one, and for `GetTask`, `SubscribeToTask` and `CancelTask`,
//! the chain the task was created under (kept in `Task.metadata.actorChain`), checked again
//! (expired links, the operation). A refusal is `PERMISSION_DENIED` (HTTP 403, JSON-RPC -32000)
//! naming the failing link.
//!
//! # Bounds
//! A chain is at most [`agentnet_did::delegation::MAX_LINKS`] links of
//! [`agentnet_did::delegation::MAX_LINK_BYTES`] (the request body bound comes first). Shape,
//! links, attenuation, times and binding are checked before any signature or document work.
//! An issuer whose document is not cached (did:web, did:wba) costs the request's source one
//! token of a fetch budget ([`FETCH_BURST`], refilled at [`FETCHES_PER_MINUTE`], for at most
//! [`MAX_SOURCES`] sources in all): DIDs are free to mint, so the budget is per network block.
//! A verified link is remembered by its digest ([`MAX_VERIFIED`] links in all, for
//! [`VERIFIED_TTL`]), so a chain presented again costs its checks and no signature.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentnet_a2a::auth::{BoxFuture, Owner};
use agentnet_a2a::gate::{Admit, Admitted, Gate, Operation};
use agentnet_a2a::ProtocolError;
use agentnet_did::delegation::{self, Chain, Request, Target, METADATA_MEMBER};
use agentnet_did::Resolver;
use serde_json::{json, Value};

use crate::hosted::a2a_auth::Budgets;

/// Issuer documents fetched per source before the budget refills.
pub const FETCH_BURST: u32 = 16;
/// Refill of that budget.
pub const FETCHES_PER_MINUTE: u32 = 30;
/// Sources with a budget in use.
pub const MAX_SOURCES: usize = 10_000;
/// Verified links remembered.
pub const MAX_VERIFIED: usize = 4096;
/// How long a verified link is remembered.
pub const VERIFIED_TTL: Duration = Duration::from_secs(300);

/// The card extension an agent declares: it checks chains, and requires one when
/// `principals` is not empty.
pub fn extension(principals: &[String]) -> Value {
    json!({
        "uri": delegation::EXTENSION,
        "description": "Requests may carry a delegation chain in Message.metadata.actorChain: W3C VC 2.0 credentials with eddsa-jcs-2022 proofs, root first, each granting its subject what it may call (agents, domains, skills, operations, depth); the last link is to the signed caller, or from it to this agent. Checked before any work; PERMISSION_DENIED names the failing link.",
        "required": !principals.is_empty(),
        "params": {"principals": principals, "member": METADATA_MEMBER},
    })
}

/// Digests of verified links, oldest first.
#[derive(Debug, Default)]
struct Verified {
    at: HashMap<String, Instant>,
    order: VecDeque<String>,
}

impl Verified {
    fn has(&mut self, digest: &str, now: Instant) -> bool {
        match self.at.get(digest) {
            Some(t) if now.duration_since(*t) < VERIFIED_TTL => true,
            Some(_) => {
                self.at.remove(digest);
                false
            }
            None => false,
        }
    }

    fn put(&mut self, digest: String, now: Instant) {
        while self.order.len() >= MAX_VERIFIED {
            if let Some(old) = self.order.pop_front() {
                self.at.remove(&old);
            }
        }
        if self.at.insert(digest.clone(), now).is_none() {
            self.order.push_back(digest);
        }
    }
}

/// One hosted agent's delegation policy.
pub struct Authority {
    agent: String,
    skills: Vec<String>,
    principals: Vec<String>,
    resolver: Resolver,
    budgets: std::sync::Arc<Mutex<Budgets>>,
    verified: std::sync::Arc<Mutex<Verified>>,
    memo: std::sync::Arc<delegation::Memo>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("agent", &self.agent)
            .field("principals", &self.principals)
            .finish_non_exhaustive()
    }
}

/// What the agents of one node share: the resolver, the fetch budgets, the verified links,
/// the links parsed before ([`delegation::Memo`], which the receipts' chain digests read too).
#[derive(Clone)]
pub struct Shared {
    resolver: Resolver,
    budgets: std::sync::Arc<Mutex<Budgets>>,
    verified: std::sync::Arc<Mutex<Verified>>,
    memo: std::sync::Arc<delegation::Memo>,
}

impl Shared {
    /// Shared state resolving issuers with `resolver`.
    pub fn new(resolver: Resolver) -> Self {
        Shared {
            resolver,
            budgets: Default::default(),
            verified: Default::default(),
            memo: Default::default(),
        }
    }

    /// The links parsed before.
    pub fn memo(&self) -> &std::sync::Arc<delegation::Memo> {
        &self.memo
    }

    /// The resolver.
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// The policy of the agent `agent` (its DID) with skill tags `skills`, requiring a chain
    /// from one of `principals` when there are any.
    pub fn authority(
        &self,
        agent: String,
        skills: Vec<String>,
        principals: Vec<String>,
    ) -> Authority {
        Authority {
            agent,
            skills,
            principals,
            resolver: self.resolver.clone(),
            budgets: self.budgets.clone(),
            verified: self.verified.clone(),
            memo: self.memo.clone(),
        }
    }
}

fn chain_in(meta: Option<&HashMap<String, Value>>) -> Option<&Value> {
    meta.and_then(|m| m.get(METADATA_MEMBER))
}

impl Authority {
    fn refuse(&self, why: impl std::fmt::Display) -> ProtocolError {
        if self.principals.is_empty() {
            ProtocolError::PermissionDenied(why.to_string())
        } else {
            ProtocolError::PermissionDenied(format!(
                "{why} (this agent acts on a delegation from {})",
                self.principals.join(", ")
            ))
        }
    }

    /// Check `chain` for `caller` doing `op` from `source`.
    pub async fn check(
        &self,
        chain: &Value,
        caller: &Owner,
        op: &str,
        source: agentnet_a2a::auth::Source,
    ) -> Result<(), ProtocolError> {
        let Some(caller) = caller.caller() else {
            return Err(
                self.refuse("a delegation binds to a DID: sign the request as the chain's holder")
            );
        };
        let parsed = Chain::parse_with(chain, Some(&self.memo)).map_err(|e| self.refuse(e))?;
        let req = Request {
            principals: (!self.principals.is_empty()).then_some(self.principals.as_slice()),
            caller,
            target: Target {
                agent: &self.agent,
                skills: &self.skills,
                op,
            },
            now: delegation::now(),
        };
        parsed.check(&req).map_err(|e| self.refuse(e))?;
        // Resolve the issuers of the links not verified before (the async part), then verify
        // their proofs on a blocking thread: up to eight Ed25519 verifications and their RFC
        // 8785 hashing are too much for an async worker.
        let now = Instant::now();
        let mut todo = Vec::new();
        for (i, link) in parsed.links().iter().enumerate() {
            if self.lock_verified().has(&link.digest, now) {
                continue;
            }
            if !self.resolver.is_cached(&link.issuer)
                && *link.issuer.method() != agentnet_did::Method::Key
            {
                let ok = self.budgets.lock().unwrap_or_else(|p| p.into_inner()).take(
                    source,
                    FETCH_BURST,
                    FETCHES_PER_MINUTE,
                    MAX_SOURCES,
                    now,
                );
                if !ok {
                    return Err(ProtocolError::Busy(format!(
                        "too many DID resolutions for delegations from {source}; try again in a minute"
                    )));
                }
            }
            let doc = self.resolver.resolve(&link.issuer).await.map_err(|e| {
                self.refuse(format!(
                    "delegation link {i}: its issuer {} did not resolve: {e}",
                    link.issuer
                ))
            })?;
            todo.push((i, doc));
        }
        if todo.is_empty() {
            return Ok(());
        }
        let digests: Vec<String> = todo
            .iter()
            .map(|(i, _)| parsed.links()[*i].digest.clone())
            .collect();
        tokio::task::spawn_blocking(move || {
            todo.iter()
                .try_for_each(|(i, doc)| parsed.verify_link(*i, doc))
        })
        .await
        .map_err(|e| ProtocolError::Internal(format!("verifying a delegation: {e}")))?
        .map_err(|e| self.refuse(e))?;
        let mut verified = self.lock_verified();
        for d in digests {
            verified.put(d, now);
        }
        Ok(())
    }

    /// Whether this agent requires a delegation.
    pub fn requires(&self) -> bool {
        !self.principals.is_empty()
    }

    /// No chain was presented (`where_` says where one goes): refused if one is required.
    pub fn none_presented(&self, where_: &str) -> Result<(), ProtocolError> {
        if self.principals.is_empty() {
            Ok(())
        } else {
            Err(self.refuse(format!("no delegation: present one in {where_}")))
        }
    }

    fn lock_verified(&self) -> std::sync::MutexGuard<'_, Verified> {
        self.verified.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Gate for Authority {
    fn admit<'a>(&'a self, ask: Admit<'a>) -> BoxFuture<'a, Result<Admitted, ProtocolError>> {
        Box::pin(async move {
            let from_message = ask.message.and_then(|m| chain_in(m.metadata.as_ref()));
            let from_task = ask.task.and_then(|t| chain_in(t.metadata.as_ref()));
            let chain = match ask.op {
                Operation::Send => from_message.or(from_task),
                _ => from_task,
            };
            let Some(chain) = chain else {
                self.none_presented(
                    "Message.metadata.actorChain (agentnet call --delegation FILE)",
                )?;
                return Ok(Admitted::default());
            };
            self.check(chain, &ask.caller.owner, ask.op.as_str(), ask.caller.source)
                .await?;
            // A new task keeps the chain it was admitted under (echoed on Task.metadata), and
            // keeps it once: its history holds the message without it, as it holds a
            // follow-up that presented the task's chain again.
            let new_task = ask.op == Operation::Send && ask.task.is_none();
            let Some(presented) = from_message else {
                return Ok(Admitted::default());
            };
            if new_task {
                return Ok(Admitted {
                    metadata: Some(HashMap::from([(
                        METADATA_MEMBER.to_string(),
                        presented.clone(),
                    )])),
                    held: Some(METADATA_MEMBER),
                });
            }
            Ok(Admitted {
                metadata: None,
                held: (from_task == Some(presented)).then_some(METADATA_MEMBER),
            })
        })
    }
}
