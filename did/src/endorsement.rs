//! Signed endorsements (issue 19): "I, DID A, vouch for DID B for skills S until T", or the
//! revocation of that statement.
//!
//! An endorsement is a compact JWS (RFC 7515) with `alg: EdDSA`, `typ:
//! agentnet-endorsement+jws` and `kid` = a DID URL of the issuer; its payload is the RFC 8785
//! ([`crate::jcs`]) bytes of an [`Endorsement`]. The issuer is a `did:key` (this version): its
//! key is in its name, so checking one costs a signature and never a fetch, and a stranger who
//! floods the network with endorsements costs each node signatures it bounds, not requests to
//! domains it picks. `docs/PROTOCOL.md`, "Endorsements", is the specification; what a node does
//! with them (whose it counts) is the operator's policy, not this format's.
//!
//! ```
//! use agentnet_did::{endorsement, SecretKey};
//!
//! let issuer = SecretKey::from_seed(&[1; 32]);
//! let subject = SecretKey::from_seed(&[2; 32]).did_key();
//! let e = endorsement::Endorsement::new(issuer.did_key().as_str(), subject.as_str(),
//!     vec!["weather".into()], 1_700_000_000, 1_700_086_400);
//! let jws = endorsement::sign(&e, &issuer);
//! let got = endorsement::verify(&jws, 1_700_000_100).unwrap();
//! assert_eq!(got.sub, subject.as_str());
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::key::{PublicKey, SecretKey};
use crate::{Did, Method};

/// The JWS `typ`.
pub const TYP: &str = "agentnet-endorsement+jws";
/// The payload version, member `v`.
pub const VERSION: u64 = 1;
/// Largest compact JWS accepted (4 KiB).
pub const MAX_BYTES: usize = 4 << 10;
/// Most skills one endorsement names (none: every skill).
pub const MAX_SKILLS: usize = 16;
/// Longest skill tag, in bytes (the tag length of discovery).
pub const MAX_SKILL_LEN: usize = 64;
/// Longest lifetime, `exp - iat`: a year and a day.
pub const MAX_LIFETIME: u64 = 366 * 24 * 3600;
/// How far in the future `iat` may be (clock skew).
pub const MAX_SKEW: u64 = 300;

const PAYLOAD_LIMITS: crate::json::Limits = crate::json::Limits {
    max_depth: 3,
    max_values: 64,
};

/// The signed statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endorsement {
    /// Payload version, [`VERSION`].
    pub v: u64,
    /// The issuer, a did:key (the `kid`'s DID).
    pub iss: String,
    /// The endorsed DID.
    pub sub: String,
    /// The skill tags vouched for, normalized (lowercase, NFC), sorted, no duplicates; empty:
    /// every skill.
    pub skills: Vec<String>,
    /// Issued at (Unix seconds). Of two statements by one issuer on one subject, the later
    /// `iat` stands.
    pub iat: u64,
    /// Expires at (Unix seconds).
    pub exp: u64,
    /// `true`: the issuer withdraws what it said of `sub` before `iat`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revoked: bool,
}

impl Endorsement {
    /// An endorsement of `sub` by `iss` for `skills` (sorted and deduplicated here).
    pub fn new(iss: &str, sub: &str, mut skills: Vec<String>, iat: u64, exp: u64) -> Self {
        skills.sort();
        skills.dedup();
        Endorsement {
            v: VERSION,
            iss: iss.to_string(),
            sub: sub.to_string(),
            skills,
            iat,
            exp,
            revoked: false,
        }
    }

    /// The revocation of what `iss` said of `sub`, at `iat`, standing until `exp` (the
    /// revoked endorsement's own expiry, so that a replay of it is refused while it could
    /// still count).
    pub fn revocation(iss: &str, sub: &str, iat: u64, exp: u64) -> Self {
        Endorsement {
            revoked: true,
            ..Endorsement::new(iss, sub, Vec::new(), iat, exp)
        }
    }

    /// Whether it vouches for `sub` for `skill` (`None`: for anything).
    pub fn covers(&self, skill: Option<&str>) -> bool {
        !self.revoked
            && (self.skills.is_empty() || skill.is_none_or(|s| self.skills.iter().any(|k| k == s)))
    }

    /// The payload bytes: RFC 8785 of the statement as JSON.
    pub fn payload(&self) -> Vec<u8> {
        let v = serde_json::to_value(self).unwrap_or(Value::Null);
        crate::jcs::canonicalize(&v)
    }
}

/// Why an endorsement is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndorseError {
    /// Not an endorsement we read: parts, base64, header, payload shape or canonical form,
    /// size, skills.
    #[error("malformed endorsement: {0}")]
    Malformed(String),
    /// The issuer is not a did:key, or the `kid` is not its key.
    #[error("endorsement issuer not accepted: {0}")]
    Issuer(String),
    /// Expired, issued in the future, or living longer than [`MAX_LIFETIME`].
    #[error("endorsement out of date: {0}")]
    Time(String),
    /// The signature does not verify.
    #[error(
        "endorsement signature does not verify (kid {0}): modified, or signed with another key"
    )]
    Invalid(String),
}

impl EndorseError {
    /// Whether the sender is at fault (a peer that forwarded it should be scored down): not
    /// for a statement that merely expired on the way.
    pub fn penalize(&self) -> bool {
        !matches!(self, EndorseError::Time(_))
    }
}

/// Sign `e` with `key`, the issuer's did:key key.
pub fn sign(e: &Endorsement, key: &SecretKey) -> String {
    let did = key.did_key();
    let kid = did.with_fragment(did.method_specific_id());
    let header = serde_json::json!({"alg": "EdDSA", "kid": kid.to_string(), "typ": TYP});
    crate::jws::sign(&header, &e.payload(), key)
}

fn check_skills(skills: &[String]) -> Result<(), EndorseError> {
    let bad = |m: String| EndorseError::Malformed(m);
    if skills.len() > MAX_SKILLS {
        return Err(bad(format!(
            "{} skills, more than {MAX_SKILLS}",
            skills.len()
        )));
    }
    for s in skills {
        let normal = crate::text::nfc(&s.trim().to_lowercase()).into_owned();
        if s.is_empty()
            || s.len() > MAX_SKILL_LEN
            || *s != normal
            || s.chars().any(crate::text::is_hidden)
        {
            return Err(bad(format!(
                "skill {:?} is not a normalized tag (lowercase, NFC, 1 to {MAX_SKILL_LEN} bytes, nothing hidden)",
                crate::text::sanitize(&s.chars().take(64).collect::<String>())
            )));
        }
    }
    if skills.windows(2).any(|w| w[0] >= w[1]) {
        return Err(bad("skills are not sorted without duplicates".into()));
    }
    Ok(())
}

/// Verify `jws` at time `now`: its shape and bounds, that the issuer is a did:key whose key is
/// the `kid`, the times, and the signature. No I/O.
pub fn verify(jws: &str, now: u64) -> Result<Endorsement, EndorseError> {
    let bad = |m: &str| EndorseError::Malformed(m.to_string());
    let c = crate::jws::parse(jws, MAX_BYTES, PAYLOAD_LIMITS).map_err(|e| match e {
        crate::jws::JwsError::Malformed(m) => EndorseError::Malformed(m),
        crate::jws::JwsError::Algorithm(a) => {
            EndorseError::Malformed(format!("alg {a:?} is not EdDSA"))
        }
    })?;
    if c.header.get("typ").and_then(Value::as_str) != Some(TYP) {
        return Err(EndorseError::Malformed(format!("typ is not {TYP}")));
    }
    let (kid, value) = (c.kid, c.payload);
    let e: Endorsement = serde_json::from_value(value).map_err(|e| {
        EndorseError::Malformed(format!(
            "payload: {}",
            crate::text::sanitize(&e.to_string())
        ))
    })?;
    if e.v != VERSION {
        return Err(EndorseError::Malformed(format!(
            "version {} (this node reads {VERSION})",
            e.v
        )));
    }
    let iss = Did::parse(&e.iss)
        .map_err(|err| EndorseError::Malformed(format!("iss is not a DID: {err}")))?;
    Did::parse(&e.sub)
        .map_err(|err| EndorseError::Malformed(format!("sub is not a DID: {err}")))?;
    if *iss.method() != Method::Key {
        return Err(EndorseError::Issuer(format!(
            "{} is not a did:key (endorsements are signed by did:key issuers)",
            e.iss
        )));
    }
    if kid.did().as_str() != e.iss {
        return Err(EndorseError::Issuer(format!(
            "kid {kid} is not a key of the issuer {}",
            e.iss
        )));
    }
    if e.iss == e.sub {
        return Err(bad("an issuer cannot endorse itself"));
    }
    if e.revoked && !e.skills.is_empty() {
        return Err(bad("a revocation names no skills"));
    }
    check_skills(&e.skills)?;
    if e.iat > now.saturating_add(MAX_SKEW) {
        return Err(EndorseError::Time(format!(
            "issued {} s in the future",
            e.iat - now
        )));
    }
    if e.exp <= now {
        return Err(EndorseError::Time(format!("expired at {}", e.exp)));
    }
    if e.exp <= e.iat || e.exp - e.iat > MAX_LIFETIME {
        return Err(EndorseError::Time(format!(
            "lifetime {}..{} is not within {MAX_LIFETIME} s",
            e.iat, e.exp
        )));
    }
    let key = crate::didkey::decode(&iss).map_err(|err| EndorseError::Issuer(err.to_string()))?;
    if !PublicKey::Ed25519(key).verify(&jws.as_bytes()[..c.input_len], &c.sig) {
        return Err(EndorseError::Invalid(kid.to_string()));
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
    use base64::Engine as _;

    const NOW: u64 = 1_800_000_000;

    fn keys() -> (SecretKey, String) {
        let k = SecretKey::from_seed(&[9; 32]);
        let sub = SecretKey::from_seed(&[8; 32]).did_key().to_string();
        (k, sub)
    }

    fn signed_payload(key: &SecretKey, payload: &Value, typ: &str) -> String {
        let did = key.did_key();
        let kid = did.with_fragment(did.method_specific_id());
        let header = serde_json::json!({"alg": "EdDSA", "kid": kid.to_string(), "typ": typ});
        let input = format!(
            "{}.{}",
            B64URL.encode(crate::jcs::canonicalize(&header)),
            B64URL.encode(crate::jcs::canonicalize(payload))
        );
        let sig = B64URL.encode(key.sign(input.as_bytes()));
        format!("{input}.{sig}")
    }

    #[test]
    fn a_signed_endorsement_verifies_and_says_what_it_covers() {
        let (k, sub) = keys();
        let e = Endorsement::new(
            k.did_key().as_str(),
            &sub,
            vec!["weather".into(), "maps".into(), "weather".into()],
            NOW,
            NOW + 3600,
        );
        assert_eq!(e.skills, vec!["maps", "weather"]);
        let got = verify(&sign(&e, &k), NOW + 10).unwrap();
        assert_eq!(got, e);
        assert!(got.covers(Some("weather")) && got.covers(None) && !got.covers(Some("books")));
        let r = Endorsement::revocation(k.did_key().as_str(), &sub, NOW + 5, NOW + 3600);
        let got = verify(&sign(&r, &k), NOW + 10).unwrap();
        assert!(got.revoked && !got.covers(None));
    }

    #[test]
    fn every_forgery_and_bad_statement_is_refused_with_its_reason() {
        let (k, sub) = keys();
        let iss = k.did_key().to_string();
        let good = sign(&Endorsement::new(&iss, &sub, vec![], NOW, NOW + 60), &k);
        // Another key's signature under the issuer's kid.
        let other = SecretKey::from_seed(&[7; 32]);
        let (input, _) = good.rsplit_once('.').unwrap();
        let forged = format!("{input}.{}", B64URL.encode(other.sign(input.as_bytes())));
        assert!(matches!(
            verify(&forged, NOW),
            Err(EndorseError::Invalid(_))
        ));
        // One payload byte changed.
        let mut parts: Vec<String> = good.split('.').map(str::to_string).collect();
        let payload = String::from_utf8(B64URL.decode(&parts[1]).unwrap()).unwrap();
        let later = payload.replace(&format!("{}", NOW + 60), &format!("{}", NOW + 99));
        assert_ne!(later, payload);
        parts[1] = B64URL.encode(later);
        assert!(matches!(
            verify(&parts.join("."), NOW),
            Err(EndorseError::Invalid(_))
        ));
        // Signed by another did:key than the issuer it names.
        let p = serde_json::json!({"v":1,"iss":iss,"sub":sub,"skills":[],"iat":NOW,"exp":NOW+60});
        let e = verify(&signed_payload(&other, &p, TYP), NOW).unwrap_err();
        assert!(matches!(e, EndorseError::Issuer(_)), "{e}");
        // Times.
        let late = sign(&Endorsement::new(&iss, &sub, vec![], NOW, NOW + 60), &k);
        assert!(matches!(
            verify(&late, NOW + 61),
            Err(EndorseError::Time(_))
        ));
        let future = sign(
            &Endorsement::new(&iss, &sub, vec![], NOW + 1000, NOW + 2000),
            &k,
        );
        assert!(matches!(verify(&future, NOW), Err(EndorseError::Time(_))));
        let long = sign(
            &Endorsement::new(&iss, &sub, vec![], NOW, NOW + MAX_LIFETIME + 1),
            &k,
        );
        assert!(matches!(verify(&long, NOW), Err(EndorseError::Time(_))));
        assert!(!EndorseError::Time(String::new()).penalize());
        // Self-endorsement, a did:web issuer, unnormalized or too many skills, unknown members,
        // another typ, oversize, garbage.
        let own = sign(&Endorsement::new(&iss, &iss, vec![], NOW, NOW + 60), &k);
        assert!(verify(&own, NOW)
            .unwrap_err()
            .to_string()
            .contains("itself"));
        let web = serde_json::json!({"v":1,"iss":"did:web:a.example","sub":sub,"skills":[],"iat":NOW,"exp":NOW+60});
        assert!(matches!(
            verify(&signed_payload(&k, &web, TYP), NOW),
            Err(EndorseError::Issuer(_))
        ));
        for skills in [
            serde_json::json!(["Weather"]),
            serde_json::json!(["wea\u{200b}ther"]),
            serde_json::json!(["b", "a"]),
            serde_json::json!([""]),
            serde_json::json!((0..17).map(|i| format!("s{i:02}")).collect::<Vec<_>>()),
        ] {
            let p = serde_json::json!({"v":1,"iss":iss,"sub":sub,"skills":skills,"iat":NOW,"exp":NOW+60});
            let e = verify(&signed_payload(&k, &p, TYP), NOW).unwrap_err();
            assert!(matches!(e, EndorseError::Malformed(_)), "{skills}: {e}");
        }
        let extra =
            serde_json::json!({"v":1,"iss":iss,"sub":sub,"skills":[],"iat":NOW,"exp":NOW+60,"x":1});
        assert!(verify(&signed_payload(&k, &extra, TYP), NOW).is_err());
        assert!(verify(&signed_payload(&k, &p, "JOSE"), NOW).is_err());
        assert!(verify(&"a".repeat(MAX_BYTES + 1), NOW).is_err());
        for junk in ["", "..", "a.b.c", "\u{0}.\u{0}.\u{0}"] {
            assert!(
                matches!(verify(junk, NOW), Err(EndorseError::Malformed(_))),
                "{junk:?}"
            );
        }
    }
}
