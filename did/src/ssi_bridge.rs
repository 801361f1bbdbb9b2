//! Other DID methods through spruceid's `ssi` (feature `ssi`), with our checks around it.
//!
//! Only methods that resolve offline, from the identifier alone, go through `ssi`: `did:jwk`,
//! `did:pkh` and `did:ethr`. Network methods (`did:ion`, `did:tz`, ...) would fetch without our
//! address policy, body cap and redirect rules, so they are refused; did:key, did:web and did:wba
//! never reach here (ours are stricter: see the identity issue's notes in `docs/IDENTITY.md`).
//! Whatever `ssi` returns is parsed with our depth and size bounds and must describe the DID.

use ssi::dids::{AnyDidMethod, DIDResolver, DID};

use crate::resolution::ResolveError;
use crate::{Did, Document};

/// The methods we let `ssi` resolve.
pub const METHODS: &[&str] = &["jwk", "pkh", "ethr"];

/// Largest document we accept from `ssi`.
const MAX_DOC: usize = 256 * 1024;

pub(crate) async fn resolve(did: &Did, method: &str) -> Result<(Document, usize), ResolveError> {
    if !METHODS.contains(&method) {
        return Err(ResolveError::MethodNotSupported {
            did: did.to_string(),
            method: method.to_owned(),
        });
    }
    let ssi_did = DID::new(did.as_str()).map_err(|e| ResolveError::InvalidDid {
        did: did.to_string(),
        reason: format!("ssi: {e}"),
    })?;
    let out = AnyDidMethod::default()
        .resolve_representation(ssi_did, Default::default())
        .await
        .map_err(|e| match e {
            ssi::dids::resolution::Error::NotFound => ResolveError::NotFound {
                did: did.to_string(),
                reason: "ssi: not found".into(),
            },
            ssi::dids::resolution::Error::MethodNotSupported(m) => {
                ResolveError::MethodNotSupported {
                    did: did.to_string(),
                    method: m,
                }
            }
            other => ResolveError::InvalidDid {
                did: did.to_string(),
                reason: format!("ssi: {other}"),
            },
        })?;
    if out.document.len() > MAX_DOC {
        return Err(ResolveError::TooLarge {
            did: did.to_string(),
            limit: MAX_DOC,
        });
    }
    crate::resolution::checked_document(did, &out.document)
}

// Tested through the public resolver in `did/tests/ssi.rs`.
