//! What the operator trusts, and what the node shows about it: the policy (`[trust]`, this
//! file), card and tool [`pins`], [`flags`] on text meant for a model, [`endorsements`].
//!
//! The operator's trust policy (`[trust]`): what discovery returns and in what order.
//! Every agent shown gets a **level** and the reasons for it; denied agents and agents below
//! `min_level` are not returned by `discover`, `call --skill` or the MCP tools, and the rest are
//! ranked by level, then by how long the node has known them (docs/PROTOCOL.md, "How discover
//! ranks").
//!
//! Levels, weakest first: `self-asserted` (a did:key, or a did:wba `e1_` DID: no domain vouched
//! for the key), `domain-verified` (a did:web or did:wba whose key the node read from a
//! document its domain served), `endorsed` (vouched for by an endorser the operator trusts:
//! [`crate::trust::endorsements`], `[trust] endorsers` and `endorse_depth`), `allow-listed` (named in
//! `allow`, by DID, or by a domain that verified it).

pub mod endorsements;
pub mod flags;
pub mod pins;
pub mod shown;

use agentnet_did::{Did, Method};
use serde::{Deserialize, Serialize};

/// How far an agent is trusted, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// No one but the key's holder vouches for it.
    SelfAsserted,
    /// A domain served the document with its key.
    DomainVerified,
    /// A DID the operator trusts endorsed it.
    Endorsed,
    /// The operator named it.
    AllowListed,
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Level::SelfAsserted => "self-asserted",
            Level::DomainVerified => "domain-verified",
            Level::Endorsed => "endorsed",
            Level::AllowListed => "allow-listed",
        })
    }
}

/// An agent as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judged {
    /// Its level.
    pub level: Level,
    /// Why, a sentence each.
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Did(String),
    Domain(String),
}

impl Entry {
    fn parse(s: &str, what: &str) -> Result<Entry, String> {
        if s.starts_with("did:") {
            Did::parse(s).map_err(|e| format!("{what}: {s:?} is not a DID: {e}"))?;
            return Ok(Entry::Did(s.to_string()));
        }
        let d = s.trim_end_matches('.').to_ascii_lowercase();
        let ok = !d.is_empty()
            && d.len() <= 253
            && d.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !ok {
            return Err(format!("{what}: {s:?} is neither a DID nor a domain name"));
        }
        Ok(Entry::Domain(d))
    }

    /// Whether this entry names `did` (a domain: the DID's domain, or a parent of it).
    fn names(&self, did: &str, domain: Option<&str>) -> bool {
        match self {
            Entry::Did(d) => d == did,
            Entry::Domain(d) => domain.is_some_and(|h| h == d || h.ends_with(&format!(".{d}"))),
        }
    }

    fn show(&self) -> &str {
        match self {
            Entry::Did(d) | Entry::Domain(d) => d,
        }
    }
}

/// The policy of `[trust]`.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    allow: Vec<Entry>,
    deny: Vec<Entry>,
    min_level: Option<Level>,
}

/// Most entries in `allow` and in `deny`.
pub const MAX_ENTRIES: usize = 10_000;
/// Most entries in `endorsers`.
pub const MAX_ENDORSERS: usize = 256;

impl Policy {
    /// The policy with these lists (DIDs or domain names) and minimum level.
    pub fn new(
        allow: &[String],
        deny: &[String],
        min_level: Option<Level>,
    ) -> Result<Policy, String> {
        if allow.len() > MAX_ENTRIES || deny.len() > MAX_ENTRIES {
            return Err(format!(
                "at most {MAX_ENTRIES} entries in allow and in deny"
            ));
        }
        let parse = |v: &[String], what: &str| {
            v.iter()
                .map(|s| Entry::parse(s, what))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Policy {
            allow: parse(allow, "allow")?,
            deny: parse(deny, "deny")?,
            min_level,
        })
    }

    /// The DIDs `allow` names (not its domains).
    pub fn allowed_dids(&self) -> impl Iterator<Item = &str> {
        self.allow.iter().filter_map(|e| match e {
            Entry::Did(d) => Some(d.as_str()),
            Entry::Domain(_) => None,
        })
    }

    /// `did`'s level and why, or why it is not returned.
    pub fn judge(&self, did: &str) -> Result<Judged, String> {
        self.judge_with(did, None)
    }

    /// The level [`Policy::judge_with`] gives `did`, `None` where it refuses it, without the
    /// reasons: what a discovery works out for every match it ranks
    /// (`network::directory::rank`), most of them did:keys. A did:key names no domain, so only
    /// `deny` and `allow` entries by DID can name it, and it is read by its prefix, not parsed
    /// (the index holds only DIDs that were parsed and verified as they came in); other
    /// methods go through `judge_with`. A test holds the two to the same answer.
    pub fn level(
        &self,
        did: &str,
        vouch: Option<&crate::trust::endorsements::Vouch>,
    ) -> Option<Level> {
        if !did.starts_with("did:key:") {
            return self.judge_with(did, vouch).ok().map(|j| j.level);
        }
        if self.deny.iter().any(|e| e.names(did, None)) {
            return None;
        }
        let mut level = Level::SelfAsserted;
        if vouch.is_some() {
            level = level.max(Level::Endorsed);
        }
        if self
            .allow
            .iter()
            .any(|e| matches!(e, Entry::Did(_)) && e.names(did, None))
        {
            level = Level::AllowListed;
        }
        match self.min_level {
            Some(min) if level < min => None,
            _ => Some(level),
        }
    }

    /// [`judge`](Self::judge), with the endorsement that counts for `did`, if one does
    /// ([`crate::trust::endorsements::Endorsements::vouch`]): it raises a weaker level to `endorsed`.
    pub fn judge_with(
        &self,
        did: &str,
        vouch: Option<&crate::trust::endorsements::Vouch>,
    ) -> Result<Judged, String> {
        let parsed = Did::parse(did).map_err(|e| format!("not a DID: {e}"))?;
        let domain = domain_of(&parsed);
        let verified = agentnet_discovery::advert::domain_verified(did);
        if let Some(e) = self.deny.iter().find(|e| e.names(did, domain.as_deref())) {
            return Err(format!("denied by [trust] deny ({})", e.show()));
        }
        let mut reasons = Vec::new();
        let level = match parsed.method() {
            Method::Key => {
                reasons.push("did:key: self-asserted, no domain vouches for the key".to_string());
                Level::SelfAsserted
            }
            Method::Web | Method::Wba if verified => {
                reasons.push(format!(
                    "did:{}: the key is in a document {} served",
                    parsed.method().as_str(),
                    domain.as_deref().unwrap_or("its domain")
                ));
                Level::DomainVerified
            }
            Method::Wba => {
                reasons.push(
                    "did:wba e1_: bound to its key by fingerprint; the domain never vouched for it"
                        .to_string(),
                );
                Level::SelfAsserted
            }
            _ => {
                reasons.push("a DID method that names no domain: self-asserted".to_string());
                Level::SelfAsserted
            }
        };
        let allowed = self.allow.iter().find(|e| match e {
            Entry::Did(_) => e.names(did, None),
            // A domain vouches only where it served the key.
            Entry::Domain(_) => verified && e.names(did, domain.as_deref()),
        });
        let level = match vouch {
            Some(v) => {
                reasons.push(v.reason());
                level.max(Level::Endorsed)
            }
            None => level,
        };
        let level = match allowed {
            Some(e) => {
                reasons.push(format!("allow-listed by [trust] allow ({})", e.show()));
                Level::AllowListed
            }
            None => level,
        };
        if let Some(min) = self.min_level {
            if level < min {
                return Err(format!("{level}, below [trust] min_level {min}"));
            }
        }
        Ok(Judged { level, reasons })
    }
}

/// The domain of a did:web or did:wba DID (its document's host).
fn domain_of(did: &Did) -> Option<String> {
    match did.method() {
        Method::Web | Method::Wba => agentnet_did::web::document_url(did)
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

    fn p(allow: &[&str], deny: &[&str], min: Option<Level>) -> Policy {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Policy::new(&v(allow), &v(deny), min).unwrap()
    }

    #[test]
    fn levels_come_from_the_method_and_the_lists() {
        let open = p(&[], &[], None);
        assert_eq!(open.judge(KEY).unwrap().level, Level::SelfAsserted);
        assert_eq!(
            open.judge("did:web:agents.example.com").unwrap().level,
            Level::DomainVerified
        );
        let allow = p(&["example.com", KEY], &[], None);
        let j = allow.judge("did:web:agents.example.com:books").unwrap();
        assert_eq!(j.level, Level::AllowListed, "{j:?}");
        assert!(j.reasons.iter().any(|r| r.contains("example.com")), "{j:?}");
        assert_eq!(allow.judge(KEY).unwrap().level, Level::AllowListed);
        // A look-alike domain is not a subdomain.
        assert_eq!(
            allow.judge("did:web:evilexample.com").unwrap().level,
            Level::DomainVerified
        );
    }

    /// The ranking's level of every match is the level `judge_with` gives, refusals included:
    /// for did:keys (read by prefix) and other methods, under every kind of policy, with and
    /// without a vouch.
    #[test]
    fn the_ranking_s_level_is_the_judged_level() {
        let other = "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2";
        let dids = [
            KEY,
            other,
            "did:web:agents.example.com",
            "did:web:x.bad.example",
            "did:wba:example.com:user:alice",
            "did:key:not-a-key",
        ];
        let vouch = crate::trust::endorsements::Vouch {
            by: other.into(),
            skills: vec![],
            until: u64::MAX,
            hops: 1,
        };
        let policies = [
            p(&[], &[], None),
            p(&[KEY, "example.com"], &[], None),
            p(&[], &[KEY, "bad.example"], None),
            p(&[other], &[], Some(Level::Endorsed)),
            p(&[], &[], Some(Level::DomainVerified)),
            p(&[KEY], &[KEY], Some(Level::AllowListed)),
        ];
        for (i, policy) in policies.iter().enumerate() {
            for did in dids {
                for v in [None, Some(&vouch)] {
                    let judged = policy.judge_with(did, v).ok().map(|j| j.level);
                    if did == "did:key:not-a-key" {
                        // Never in the index (refused as it came in): only the prefix is read.
                        continue;
                    }
                    assert_eq!(
                        policy.level(did, v),
                        judged,
                        "policy {i}, {did}, vouched {}",
                        v.is_some()
                    );
                }
            }
        }
    }

    #[test]
    fn deny_wins_and_min_level_hides_the_weaker() {
        let deny = p(&[KEY], &[KEY, "bad.example"], None);
        assert!(deny.judge(KEY).unwrap_err().contains("denied"));
        assert!(deny
            .judge("did:web:x.bad.example")
            .unwrap_err()
            .contains("bad.example"));
        let strict = p(&[], &[], Some(Level::DomainVerified));
        let e = strict.judge(KEY).unwrap_err();
        assert_eq!(e, "self-asserted, below [trust] min_level domain-verified");
        assert!(strict.judge("did:web:a.example").is_ok());
    }

    #[test]
    fn an_endorsement_raises_the_level_and_says_by_whom() {
        let v = crate::trust::endorsements::Vouch {
            by: KEY.into(),
            skills: vec!["weather".into()],
            until: 1_800_000_000,
            hops: 1,
        };
        let strict = p(&[], &[], Some(Level::Endorsed));
        assert!(strict.judge("did:web:a.example").is_err());
        let j = strict.judge_with("did:web:a.example", Some(&v)).unwrap();
        assert_eq!(j.level, Level::Endorsed);
        assert!(
            j.reasons[1].starts_with(&format!("endorsed by {KEY}")),
            "{j:?}"
        );
        // Deny still wins.
        assert!(p(&[], &["a.example"], None)
            .judge_with("did:web:a.example", Some(&v))
            .is_err());
    }

    #[test]
    fn bad_entries_are_named() {
        let e = Policy::new(&["did:nope".into()], &[], None).unwrap_err();
        assert!(e.starts_with("allow: \"did:nope\""), "{e}");
        let e = Policy::new(&[], &["not a domain".into()], None).unwrap_err();
        assert!(e.contains("neither a DID nor a domain"), "{e}");
    }
}
