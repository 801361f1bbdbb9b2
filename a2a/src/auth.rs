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
use std::pin::Pin;

use axum::http::{HeaderMap, Method, Uri};

/// A boxed, sendable future: what the hook traits return, so they stay object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The longest caller identity accepted from an authenticator, in bytes: a DID URL with a key
/// fragment fits many times over, and the identity is part of every task key.
pub const MAX_CALLER_LEN: usize = 512;

/// Whose a task is: the identity the authenticator returned, or nobody.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Owner {
    /// An identified caller (for the node, a DID).
    Caller(String),
    /// A caller without identity, on an agent whose policy is [`Policy::Open`]. An anonymous
    /// task is reachable by any anonymous caller who knows its id (a random UUID: the id is the
    /// capability), and never listed.
    Anonymous,
}

impl Owner {
    /// The identity, if any.
    pub fn caller(&self) -> Option<&str> {
        match self {
            Owner::Caller(c) => Some(c),
            Owner::Anonymous => None,
        }
    }

    /// A key prefix unique to this owner (`c:<id>` or `a:`), for stores that keep tasks under
    /// owner-scoped keys.
    pub fn key(&self) -> String {
        match self {
            Owner::Caller(c) => format!("c:{c}"),
            Owner::Anonymous => "a:".to_string(),
        }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Caller(c) => f.write_str(c),
            Owner::Anonymous => f.write_str("anonymous"),
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

/// Apply `policy` to what the authenticator said.
pub(crate) fn decide(
    policy: Policy,
    identity: Result<Option<String>, AuthError>,
) -> Result<Owner, crate::ProtocolError> {
    use crate::ProtocolError::Unauthenticated;
    match identity {
        Err(e) => Err(Unauthenticated(e.0)),
        Ok(Some(id)) if id.is_empty() || id.len() > MAX_CALLER_LEN => Err(Unauthenticated(
            format!("caller identity must be 1 to {MAX_CALLER_LEN} bytes"),
        )),
        Ok(Some(id)) => Ok(Owner::Caller(id)),
        Ok(None) => match policy {
            Policy::Open => Ok(Owner::Anonymous),
            Policy::Did => Err(Unauthenticated(
                "this agent serves identified callers only (sign the request with your DID)".into(),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_decisions() {
        assert_eq!(decide(Policy::Open, Ok(None)), Ok(Owner::Anonymous));
        assert!(decide(Policy::Did, Ok(None)).is_err());
        assert!(decide(Policy::Open, Err(AuthError("bad signature".into()))).is_err());
        assert_eq!(
            decide(Policy::Did, Ok(Some("did:key:z".into()))),
            Ok(Owner::Caller("did:key:z".into()))
        );
        assert!(decide(Policy::Did, Ok(Some(String::new()))).is_err());
        assert!(decide(Policy::Did, Ok(Some("x".repeat(MAX_CALLER_LEN + 1)))).is_err());
    }
}
