//! Who is calling: the authentication hook and the per-agent policy.
//!
//! The server hands every request (method, URI, headers, the body bytes as received) to an
//! [`Authenticator`] before it runs the operation. The authenticator answers with the caller's
//! identity (`Ok(Some(did))`), with `Ok(None)` when the request carries no identity at all, or
//! with an error when it carries one that does not verify: that is always a 401, whatever the
//! policy, so that a bad signature is never silently downgraded to "anonymous". The node plugs
//! its RFC 9421 DID verifier in here; this crate only has [`NoAuth`] (everyone is anonymous)
//! and the test authenticator of the tests.
//!
//! The [`Policy`] of an agent then decides what an anonymous caller may do: with
//! [`Policy::Did`] (the default) nothing, 401; with [`Policy::Open`] everything, its tasks
//! owned by [`Owner::Anonymous`].

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;

use axum::http::{HeaderMap, Method, Uri};

/// A boxed, sendable future: what the hook traits return, so they stay object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The longest caller identity accepted from an authenticator, in bytes: a DID URL with a key
/// fragment fits many times over, and the identity is part of every task key.
pub const MAX_CALLER_LEN: usize = 512;

/// Where a request comes from, as a network block: an IPv4 address, or an IPv6 /64 (the block
/// one subscriber line is given, so the smallest a stranger cannot cheaply multiply). Shares of
/// every total (tasks, bytes, streams, turns) are counted per source as well as per owner,
/// because DIDs and addresses inside one block cost nothing to mint (DESIGN.md section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Source {
    /// An IPv4 address (IPv4-mapped IPv6 addresses count as their IPv4 address).
    V4(Ipv4Addr),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
    /// A call that did not come over the network (in-process, tests).
    Local,
}

impl Source {
    /// The block `ip` belongs to.
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4),
                None => Source::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }

    /// A key unique to this block, for stores that count per source.
    pub fn key(&self) -> String {
        self.to_string()
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::V4(a) => write!(f, "{a}"),
            Source::V6(p) => write!(f, "{}/64", std::net::Ipv6Addr::from(u128::from(*p) << 64)),
            Source::Local => f.write_str("local"),
        }
    }
}

/// Who sends a request: the owner of the tasks it reaches, and the block it came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller {
    /// Whose tasks the request reaches.
    pub owner: Owner,
    /// Where it came from.
    pub source: Source,
}

impl Caller {
    /// A caller identified as `owner`, from `source`.
    pub fn new(owner: Owner, source: Source) -> Self {
        Caller { owner, source }
    }

    /// An identified caller of an in-process call (tests, examples).
    pub fn local(id: impl Into<String>) -> Self {
        Caller::new(Owner::Caller(id.into()), Source::Local)
    }
}

/// Whose a task is: the identity the authenticator returned, or nobody.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Owner {
    /// An identified caller (for the node, a DID).
    Caller(String),
    /// A caller without identity, on an agent whose policy is [`Policy::Open`], owned by the
    /// network block it called from ([`Source`]): one block's anonymous tasks and quotas are
    /// not another's. An anonymous task is reachable by any anonymous caller of that block who
    /// knows its id (a random UUID: the id is the capability), and never listed.
    Anonymous(Source),
}

impl Owner {
    /// The identity, if any.
    pub fn caller(&self) -> Option<&str> {
        match self {
            Owner::Caller(c) => Some(c),
            Owner::Anonymous(_) => None,
        }
    }

    /// A key prefix unique to this owner (`c:<id>` or `a:<source>`), for stores that keep
    /// tasks under owner-scoped keys.
    pub fn key(&self) -> String {
        match self {
            Owner::Caller(c) => format!("c:{c}"),
            Owner::Anonymous(s) => format!("a:{s}"),
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Caller(c) => f.write_str(c),
            Owner::Anonymous(s) => write!(f, "anonymous ({s})"),
        }
    }
}

/// What an agent requires of its callers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// Every request must carry an identity the authenticator verifies; otherwise 401.
    #[default]
    Did,
    /// Anonymous callers are served too (their tasks are [`Owner::Anonymous`]); a request that
    /// carries an identity that does not verify is still refused.
    Open,
}

/// The parts of a request an authenticator sees.
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    /// The HTTP method.
    pub method: &'a Method,
    /// The request target as received (path and query).
    pub uri: &'a Uri,
    /// All request headers.
    pub headers: &'a HeaderMap,
    /// The body bytes exactly as received (for a content digest).
    pub body: &'a [u8],
}

/// Why an authenticator refused a request. The message goes back to the caller in the 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

/// The authentication hook.
pub trait Authenticator: Send + Sync + 'static {
    /// The caller's identity, `None` when the request carries none, an error when it carries
    /// one that does not verify.
    fn authenticate<'a>(
        &'a self,
        request: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<String>, AuthError>>;
}

/// An authenticator that identifies nobody: every caller is anonymous.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAuth;

impl Authenticator for NoAuth {
    fn authenticate<'a>(
        &'a self,
        _request: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<String>, AuthError>> {
        Box::pin(async { Ok(None) })
    }
}

/// Why [`Policy::admit`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The request carried an identity that does not verify: the authenticator's reason.
    Invalid(String),
    /// The verified identity is empty or longer than [`MAX_CALLER_LEN`].
    Length,
    /// No identity, under [`Policy::Did`].
    Unsigned,
}

impl Refusal {
    /// What the caller is told; `unsigned`: how this face asks for a signature.
    pub fn message(self, unsigned: &str) -> String {
        match self {
            Refusal::Invalid(reason) => reason,
            Refusal::Length => format!("caller identity must be 1 to {MAX_CALLER_LEN} bytes"),
            Refusal::Unsigned => unsigned.to_string(),
        }
    }
}

impl Policy {
    /// Who is calling, and may they: the one decision every face of an agent (A2A, its MCP
    /// endpoint, its ANP endpoint) applies to what its authenticator said. An identity that
    /// does not verify is refused whatever the policy; a verified one is held to
    /// [`MAX_CALLER_LEN`]; no identity is served as [`Owner::Anonymous`] of its `source` under
    /// [`Policy::Open`] only.
    pub fn admit(
        self,
        identity: Result<Option<String>, AuthError>,
        source: Source,
    ) -> Result<Caller, Refusal> {
        match identity {
            Err(e) => Err(Refusal::Invalid(e.0)),
            Ok(Some(id)) if id.is_empty() || id.len() > MAX_CALLER_LEN => Err(Refusal::Length),
            Ok(Some(id)) => Ok(Caller::new(Owner::Caller(id), source)),
            Ok(None) => match self {
                Policy::Open => Ok(Caller::new(Owner::Anonymous(source), source)),
                Policy::Did => Err(Refusal::Unsigned),
            },
        }
    }
}

/// [`Policy::admit`], as the A2A routes answer a refusal.
pub(crate) fn decide(
    policy: Policy,
    identity: Result<Option<String>, AuthError>,
    source: Source,
) -> Result<Caller, crate::ProtocolError> {
    policy.admit(identity, source).map_err(|r| {
        crate::ProtocolError::Unauthenticated(
            r.message("this agent serves identified callers only (sign the request with your DID)"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_decisions() {
        let src = Source::of("192.0.2.7".parse().unwrap());
        assert_eq!(
            decide(Policy::Open, Ok(None), src),
            Ok(Caller::new(Owner::Anonymous(src), src))
        );
        assert!(decide(Policy::Did, Ok(None), src).is_err());
        assert!(decide(Policy::Open, Err(AuthError("bad signature".into())), src).is_err());
        assert_eq!(
            decide(Policy::Did, Ok(Some("did:key:z".into())), src),
            Ok(Caller::new(Owner::Caller("did:key:z".into()), src))
        );
        assert!(decide(Policy::Did, Ok(Some(String::new())), src).is_err());
        assert!(decide(Policy::Did, Ok(Some("x".repeat(MAX_CALLER_LEN + 1))), src).is_err());
    }
    #[test]
    fn every_face_admits_through_one_decision() {
        let src = Source::of("192.0.2.7".parse().unwrap());
        let long = "d".repeat(MAX_CALLER_LEN + 1);
        for policy in [Policy::Did, Policy::Open] {
            assert_eq!(
                policy.admit(Ok(Some(long.clone())), src),
                Err(Refusal::Length)
            );
            assert_eq!(
                policy.admit(Ok(Some(String::new())), src),
                Err(Refusal::Length)
            );
            assert_eq!(
                policy.admit(Err(AuthError("bad signature".into())), src),
                Err(Refusal::Invalid("bad signature".into()))
            );
            let ok = policy.admit(Ok(Some("did:key:z6Mk".into())), src).unwrap();
            assert_eq!(ok.owner.caller(), Some("did:key:z6Mk"));
        }
        assert_eq!(Policy::Did.admit(Ok(None), src), Err(Refusal::Unsigned));
        assert_eq!(
            Policy::Open.admit(Ok(None), src).unwrap().owner.caller(),
            None
        );
        assert_eq!(
            Refusal::Length.message("sign"),
            format!("caller identity must be 1 to {MAX_CALLER_LEN} bytes")
        );
        assert_eq!(Refusal::Unsigned.message("sign it"), "sign it");
    }

    #[test]
    fn sources_are_network_blocks() {
        let s = |a: &str| Source::of(a.parse().unwrap());
        assert_eq!(s("2001:db8:1:2::1"), s("2001:db8:1:2:ffff::9"));
        assert_ne!(s("2001:db8:1:2::1"), s("2001:db8:1:3::1"));
        assert_eq!(s("::ffff:192.0.2.1"), s("192.0.2.1"));
        assert_ne!(s("192.0.2.1"), s("192.0.2.2"));
        assert_eq!(s("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
        assert_ne!(
            Owner::Anonymous(s("192.0.2.1")).key(),
            Owner::Anonymous(s("192.0.2.2")).key()
        );
    }
}
