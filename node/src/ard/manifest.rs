//! The node's capability manifest (ARD spec section 4.1) at `/.well-known/ard.json` and
//! `/.well-known/ai-catalog.json` (the same document): the node's hosted agents, each with its
//! DID-anchored identifier ([`super::urn`]) and a signed `trustManifest`, the list signed by the
//! node in `host.trustManifest`. Built once at start, served as is.
//!
//! The signatures (docs/ARD.md): the spec gives `trustManifest.signature` as a detached JWS over
//! the trust manifest's content. Here it is a compact JWS with detached payload
//! (`<protected>..<signature>`, RFC 7515 appendix F), `alg` EdDSA, `kid` the DID URL of the key,
//! over the JCS (RFC 8785) of the trust manifest without `signature`. So that it covers the entry
//! too, the trust manifest carries a `provenance` link `publishedFrom` the entry's identifier
//! whose `sourceDigest` is `sha256:<hex>` of the JCS of the entry without `trustManifest` (for
//! the host: of the `entries` array).

use agentnet_did::{jcs, DidUrl, Relationship, Resolver, SecretKey};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Map, Value};
use sha2::Digest as _;

use crate::hosted::Hosted;

/// Where the manifest is served (the ARD name, then the ai-catalog one).
pub const PATHS: [&str; 2] = ["/.well-known/ard.json", "/.well-known/ai-catalog.json"];
/// The media type of a signed Agent Card entry.
const A2A_TYPE: &str = super::index::A2A_TYPE;
/// Longest signature string read, bytes.
const MAX_SIGNATURE: usize = 8192;

/// `sha256:<hex>` of the JCS of `v`.
pub fn digest(v: &Value) -> String {
    let h = sha2::Sha256::digest(jcs::canonicalize(v));
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The key's DID URL as its signatures name it (`did:key:z…#z…`).
fn kid_of(key: &SecretKey) -> DidUrl {
    let did = key.did_key();
    did.with_fragment(did.method_specific_id())
}

/// The signed trust manifest of `covered` (an entry without `trustManifest`, or the host's
/// entries), published by `identity` under `source_id`.
pub fn trust_manifest(covered: &Value, source_id: &str, key: &SecretKey) -> Value {
    let kid = kid_of(key);
    let mut tm = json!({
        "identity": kid.did().to_string(),
        "identityType": "did",
        "provenance": [{
            "relation": "publishedFrom",
            "sourceId": source_id,
            "sourceDigest": digest(covered),
        }],
    });
    let protected = URL_SAFE_NO_PAD
        .encode(json!({"alg": "EdDSA", "kid": kid.to_string(), "typ": "JOSE"}).to_string());
    let input = format!(
        "{protected}.{}",
        URL_SAFE_NO_PAD.encode(jcs::canonicalize(&tm))
    );
    let sig = URL_SAFE_NO_PAD.encode(key.sign(input.as_bytes()));
    tm["signature"] = json!(format!("{protected}..{sig}"));
    tm
}

/// What checking an entry's trust manifest found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Signed by the key of this DID, and the signature covers the entry.
    Verified(String),
    /// No trust manifest, or one without a DID identity or signature.
    Unsigned,
    /// A signature that does not hold: why.
    Invalid(String),
}

/// Check `entry`'s trust manifest: its DID identity resolved with `resolver`, the signature
/// by a key of that DID under `assertionMethod`, the provenance digest that of the entry.
pub async fn verify_entry(entry: &Value, resolver: &Resolver) -> Trust {
    let mut covered = entry.clone();
    if let Some(m) = covered.as_object_mut() {
        m.remove("trustManifest");
    }
    match entry.get("trustManifest") {
        Some(tm) => verify(tm, &covered, resolver).await,
        None => Trust::Unsigned,
    }
}

/// Check a manifest's `host.trustManifest`, which covers its `entries`.
pub async fn verify_host(manifest: &Value, resolver: &Resolver) -> Trust {
    match manifest.get("host").and_then(|h| h.get("trustManifest")) {
        Some(tm) => verify(tm, &manifest["entries"], resolver).await,
        None => Trust::Unsigned,
    }
}

/// Check trust manifest `tm` over `covered`.
pub async fn verify(tm: &Value, covered: &Value, resolver: &Resolver) -> Trust {
    let Some(tm) = tm.as_object() else {
        return Trust::Unsigned;
    };
    let (Some(identity), Some(sig)) = (
        tm.get("identity").and_then(Value::as_str),
        tm.get("signature").and_then(Value::as_str),
    ) else {
        return Trust::Unsigned;
    };
    if !identity.starts_with("did:") {
        return Trust::Unsigned;
    }
    match check(tm, identity, sig, covered, resolver).await {
        Ok(()) => Trust::Verified(identity.to_owned()),
        Err(why) => Trust::Invalid(why),
    }
}

async fn check(
    tm: &Map<String, Value>,
    identity: &str,
    sig: &str,
    covered: &Value,
    resolver: &Resolver,
) -> Result<(), String> {
    if sig.len() > MAX_SIGNATURE {
        return Err("the signature is too long".into());
    }
    let want = digest(covered);
    let bound = tm
        .get("provenance")
        .and_then(Value::as_array)
        .is_some_and(|p| {
            p.iter().any(|l| {
                l.get("relation").and_then(Value::as_str) == Some("publishedFrom")
                    && l.get("sourceDigest").and_then(Value::as_str) == Some(want.as_str())
            })
        });
    if !bound {
        return Err(
            "the trust manifest does not cover this entry (no publishedFrom \
                    provenance with the entry's sha256 digest): the entry was changed or \
                    signed by other means"
                .into(),
        );
    }
    let mut parts = sig.split('.');
    let (Some(protected), Some(""), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(
            "the signature is not a detached compact JWS (<protected>..<signature>)".into(),
        );
    };
    let header: Value = URL_SAFE_NO_PAD
        .decode(protected)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("the JWS header is not base64url JSON")?;
    let kid = header
        .get("kid")
        .and_then(Value::as_str)
        .ok_or("the JWS header names no kid")?;
    let kid_url = DidUrl::parse(kid).map_err(|e| format!("the kid is not a DID URL: {e}"))?;
    if kid_url.did().as_str() != identity {
        return Err(format!(
            "the signing key {kid} is not a key of the identity {identity}"
        ));
    }
    let doc = resolver
        .resolve_str(identity)
        .await
        .map_err(|e| format!("resolving {identity}: {e}"))?;
    let key = doc
        .key_for(kid, Relationship::AssertionMethod)
        .map_err(|e| e.to_string())?;
    if header.get("alg").and_then(Value::as_str) != Some(key.jws_alg()) {
        return Err(format!("the JWS alg is not {}", key.jws_alg()));
    }
    let mut unsigned = tm.clone();
    unsigned.remove("signature");
    let input = format!(
        "{protected}.{}",
        URL_SAFE_NO_PAD.encode(jcs::canonicalize(&Value::Object(unsigned)))
    );
    let sig = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| "the JWS signature is not base64url")?;
    if !key.verify(input.as_bytes(), &sig) {
        return Err(format!("the signature by {kid} does not verify"));
    }
    Ok(())
}

/// The catalog entry of a hosted agent.
fn entry_of(h: &Hosted, public_base: &str) -> Option<Value> {
    let did = h.key.did_key().to_string();
    let identifier = super::urn::of_did(&did)?;
    let card = &h.card;
    let skills = card
        .get("skills")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let mut e = json!({
        "identifier": identifier,
        "displayName": s(card, "name").unwrap_or_else(|| h.id.clone()),
        "type": A2A_TYPE,
        "url": format!(
            "{}/.well-known/agent-card.json",
            crate::hosted::agent_url(public_base, &h.id)
        ),
    });
    let m = e.as_object_mut()?;
    if let Some(d) = s(card, "description") {
        m.insert("description".into(), json!(d));
    }
    let tags: Vec<String> = skills
        .iter()
        .filter_map(|k| k.get("tags").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if !tags.is_empty() {
        m.insert("tags".into(), json!(tags));
    }
    let caps: Vec<String> = skills.iter().filter_map(|k| s(k, "id")).collect();
    if !caps.is_empty() {
        m.insert("capabilities".into(), json!(caps));
    }
    let queries: Vec<&str> = skills
        .iter()
        .filter_map(|k| k.get("examples").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .take(5)
        .collect();
    if queries.len() >= 2 {
        m.insert("representativeQueries".into(), json!(queries));
    }
    if let Some(v) = s(card, "version") {
        m.insert("version".into(), json!(v));
    }
    m.insert("metadata".into(), json!({"did": did, "agentId": h.id}));
    let tm = trust_manifest(&e, &identifier, &h.key);
    e["trustManifest"] = tm;
    Some(e)
}

/// The manifest of the node with `node_key` hosting `hosted`, reached at `public_base`.
pub fn manifest(node_key: &SecretKey, hosted: &[Hosted], public_base: &str) -> Value {
    let base = public_base.trim_end_matches('/');
    let entries: Vec<Value> = hosted.iter().filter_map(|h| entry_of(h, base)).collect();
    let entries = Value::Array(entries);
    let tm = trust_manifest(&entries, &format!("{base}{}", PATHS[0]), node_key);
    json!({
        "specVersion": "1.0",
        "host": {
            "displayName": "agentnet node",
            "identifier": node_key.did_key().to_string(),
            "documentationUrl": format!("{base}/.well-known/agent-card.json"),
            "trustManifest": tm,
        },
        "entries": entries,
    })
}

/// The routes serving `manifest`.
pub fn router(manifest: &Value) -> Router {
    let body = manifest.to_string();
    let mut r = Router::new();
    for path in PATHS {
        let body = body.clone();
        r = r.route(
            path,
            get(move || async move {
                ([(header::CONTENT_TYPE, "application/json")], body).into_response()
            }),
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver() -> Resolver {
        Resolver::new(Default::default()).unwrap()
    }

    #[tokio::test]
    async fn a_signed_entry_verifies_and_a_changed_one_does_not() {
        let key = SecretKey::generate();
        let did = key.did_key().to_string();
        let mut e = json!({"identifier": super::super::urn::of_did(&did).unwrap(),
            "displayName": "X", "type": A2A_TYPE, "url": "https://x.example/card"});
        e["trustManifest"] = trust_manifest(&e, "id", &key);
        let r = resolver();
        assert_eq!(verify_entry(&e, &r).await, Trust::Verified(did.clone()));

        // The attacker changes where the entry points: the digest no longer holds.
        let mut moved = e.clone();
        moved["url"] = json!("https://evil.example/card");
        assert!(matches!(verify_entry(&moved, &r).await, Trust::Invalid(_)));
        // Or claims another DID for the same signature.
        let other = SecretKey::generate().did_key().to_string();
        let mut claimed = e.clone();
        claimed["trustManifest"]["identity"] = json!(other);
        assert!(matches!(
            verify_entry(&claimed, &r).await,
            Trust::Invalid(_)
        ));
        // Or re-signs the changed entry with its own key under the victim's identity.
        let evil = SecretKey::generate();
        let mut forged = moved.clone();
        forged.as_object_mut().unwrap().remove("trustManifest");
        let mut tm = trust_manifest(&forged, "id", &evil);
        tm["identity"] = json!(did);
        forged["trustManifest"] = tm;
        assert!(matches!(verify_entry(&forged, &r).await, Trust::Invalid(_)));
        // No trust manifest: unsigned, not invalid.
        let mut bare = e.clone();
        bare.as_object_mut().unwrap().remove("trustManifest");
        assert_eq!(verify_entry(&bare, &r).await, Trust::Unsigned);
    }
}
