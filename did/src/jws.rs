//! The compact JWS (RFC 7515) that receipts ([`crate::receipt`]) and endorsements
//! ([`crate::endorsement`]) share: `alg: EdDSA`, a DID URL `kid`, no `crit` or `b64`, and a
//! payload that is JSON in its RFC 8785 form (so that its bytes, and any digest of them, are
//! stable). The signature is over the ASCII of `header "." payload`, both base64url.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use serde_json::Value;

use crate::key::SecretKey;
use crate::DidUrl;

/// A compact JWS taken apart, its signature not yet checked.
#[derive(Debug, Clone)]
pub(crate) struct Compact {
    /// The protected header.
    pub header: Value,
    /// Its `kid`.
    pub kid: DidUrl,
    /// The payload, parsed (and canonical).
    pub payload: Value,
    /// Bytes of the signing input at the start of the JWS.
    pub input_len: usize,
    /// The signature.
    pub sig: Vec<u8>,
}

/// Why a JWS does not parse.
#[derive(Debug)]
pub(crate) enum JwsError {
    /// Its shape, base64, JSON, size or canonical form.
    Malformed(String),
    /// `alg` is not `EdDSA`: what it is.
    Algorithm(String),
}

/// Take `jws` apart: at most `max_bytes`, three base64url parts, the header within
/// [`crate::json::JWS_HEADER`], the payload within `limits` and canonical.
pub(crate) fn parse(
    jws: &str,
    max_bytes: usize,
    limits: crate::json::Limits,
) -> Result<Compact, JwsError> {
    let bad = |m: String| JwsError::Malformed(m);
    if jws.len() > max_bytes {
        return Err(bad(format!("larger than {} KiB", max_bytes >> 10)));
    }
    let mut parts = jws.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad(
            "not a compact JWS (three parts separated by dots)".into()
        ));
    };
    let header = B64URL
        .decode(h)
        .map_err(|_| bad("header is not base64url".into()))?;
    let header = crate::json::from_slice(&header, crate::json::JWS_HEADER)
        .map_err(|e| bad(format!("header: {e}")))?;
    match header.get("alg").and_then(Value::as_str) {
        Some("EdDSA") => {}
        other => return Err(JwsError::Algorithm(other.unwrap_or("").to_string())),
    }
    if header.get("crit").is_some() || header.get("b64").is_some() {
        return Err(bad(
            "header has crit or b64, which we do not implement".into()
        ));
    }
    let kid = header
        .get("kid")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("header has no kid".into()))?;
    let kid = DidUrl::parse(kid).map_err(|e| bad(format!("kid is not a DID URL: {e}")))?;
    let bytes = B64URL
        .decode(p)
        .map_err(|_| bad("payload is not base64url".into()))?;
    let payload =
        crate::json::from_slice(&bytes, limits).map_err(|e| bad(format!("payload: {e}")))?;
    if crate::jcs::canonicalize(&payload) != bytes {
        return Err(bad("payload is not in its RFC 8785 canonical form".into()));
    }
    let sig = B64URL
        .decode(s)
        .map_err(|_| bad("signature is not base64url".into()))?;
    Ok(Compact {
        header,
        kid,
        payload,
        input_len: h.len() + 1 + p.len(),
        sig,
    })
}

/// Sign `payload` (RFC 8785 bytes) under the protected `header` with `key`.
pub(crate) fn sign(header: &Value, payload: &[u8], key: &SecretKey) -> String {
    let input = format!(
        "{}.{}",
        B64URL.encode(crate::jcs::canonicalize(header)),
        B64URL.encode(payload)
    );
    let sig = B64URL.encode(key.sign(input.as_bytes()));
    format!("{input}.{sig}")
}
