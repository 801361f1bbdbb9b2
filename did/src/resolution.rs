//! What every DID method's resolution returns: [`ResolveError`], and [`checked_document`], the
//! check every fetched document passes. Apart from the resolver so that the methods (`didkey`,
//! `web`, `ssi_bridge`) need nothing from the module that calls them.

use crate::document::{Document, DocumentError};
use crate::id::Did;

/// Why a DID could not be resolved. [`code`](Self::code) gives the DID Resolution error name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The DID is malformed (`invalidDid`).
    #[error("invalidDid: {did}: {reason}")]
    InvalidDid {
        /// The DID as given.
        did: String,
        /// What is wrong.
        reason: String,
    },
    /// A key in the identifier has the wrong length (`invalidPublicKeyLength`).
    #[error("invalidPublicKeyLength: {did}: Ed25519 key must be 32 bytes, got {len}")]
    InvalidPublicKeyLength {
        /// The DID.
        did: String,
        /// Length found.
        len: usize,
    },
    /// A key in the identifier does not decode (`invalidPublicKey`).
    #[error("invalidPublicKey: {did}: {reason}")]
    InvalidPublicKey {
        /// The DID.
        did: String,
        /// Why.
        reason: String,
    },
    /// We do not resolve this method (`methodNotSupported`).
    #[error("methodNotSupported: {did}: method {method:?} is not supported")]
    MethodNotSupported {
        /// The DID.
        did: String,
        /// Its method.
        method: String,
    },
    /// The document does not exist (`notFound`).
    #[error("notFound: resolving {did}: {reason}")]
    NotFound {
        /// The DID.
        did: String,
        /// Where we looked.
        reason: String,
    },
    /// The document was fetched but is not acceptable (`invalidDidDocument`).
    #[error("resolving {did}: {source}")]
    InvalidDocument {
        /// The DID.
        did: String,
        /// Why it was refused.
        source: DocumentError,
    },
    /// The document is larger than the cap (`invalidDidDocument`).
    #[error("invalidDidDocument: resolving {did}: body larger than {limit} bytes")]
    TooLarge {
        /// The DID.
        did: String,
        /// The cap in bytes.
        limit: usize,
    },
    /// The fetch would reach an address or scheme we refuse (`notAllowedUrl`).
    #[error("notAllowedUrl: resolving {did}: {reason}")]
    NotAllowed {
        /// The DID.
        did: String,
        /// What was refused.
        reason: String,
    },
    /// Network or HTTP failure (`internalError`).
    #[error("internalError: resolving {did}: {reason}")]
    Http {
        /// The DID.
        did: String,
        /// What happened.
        reason: String,
    },
    /// The fetch budget of the document's host is spent: nothing was fetched
    /// (`internalError`; try again later).
    #[error(
        "internalError: resolving {did}: the fetch budget of host {host} is spent; try again later"
    )]
    Throttled {
        /// The DID.
        did: String,
        /// The host whose budget is spent.
        host: String,
    },
}

impl ResolveError {
    /// The DID Resolution error name of this error (`invalidDid`, `notFound`, ...).
    /// `notAllowedUrl` is ours: the DID Resolution spec has no name for an SSRF refusal.
    pub fn code(&self) -> &'static str {
        match self {
            ResolveError::InvalidDid { .. } => "invalidDid",
            ResolveError::InvalidPublicKeyLength { .. } => "invalidPublicKeyLength",
            ResolveError::InvalidPublicKey { .. } => "invalidPublicKey",
            ResolveError::MethodNotSupported { .. } => "methodNotSupported",
            ResolveError::NotFound { .. } => "notFound",
            ResolveError::InvalidDocument { .. } | ResolveError::TooLarge { .. } => {
                "invalidDidDocument"
            }
            ResolveError::NotAllowed { .. } => "notAllowedUrl",
            ResolveError::Http { .. } | ResolveError::Throttled { .. } => "internalError",
        }
    }

    /// Whether a retry later could succeed (network trouble), as opposed to a final answer.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ResolveError::Http { .. } | ResolveError::Throttled { .. }
        )
    }
}

/// Parse `bytes` as the document of `did` and check that it describes `did`; with the estimated
/// heap bytes it holds.
pub(crate) fn checked_document(did: &Did, bytes: &[u8]) -> Result<(Document, usize), ResolveError> {
    let invalid = |source| ResolveError::InvalidDocument {
        did: did.to_string(),
        source,
    };
    let (doc, weight) = Document::from_json_weighed(bytes).map_err(invalid)?;
    doc.check_belongs_to(did).map_err(invalid)?;
    Ok((doc, weight))
}

impl From<crate::id::InvalidDid> for ResolveError {
    fn from(e: crate::id::InvalidDid) -> Self {
        ResolveError::InvalidDid {
            did: e.input,
            reason: e.reason.to_owned(),
        }
    }
}
