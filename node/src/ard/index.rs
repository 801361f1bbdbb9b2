//! The registry's full-text index: the store's live adverts as ARD catalog entries, with an
//! inverted index of their words. A plain struct, built from a list of stored adverts
//! ([`Index::build`]); [`super::Registry`] rebuilds it from the store when it is older than
//! [`super::REBUILD_AFTER`].
//!
//! Bounded by construction: at most [`MAX_INDEXED`] entries (the store's newest, as
//! `Store::find` returns them); of each card only a bounded summary is kept (name, description
//! cut to [`MAX_TEXT`] characters, at most [`MAX_LIST`] tags and capabilities (cut to [`MAX_ID`]
//! characters), [`MAX_QUERIES`] representative queries (cut to [`MAX_SHORT`])), at most
//! [`MAX_TERMS_PER_ENTRY`] distinct words of at most [`MAX_TERM_LEN`] bytes: about 7 000
//! characters and 256 postings an entry at most.
//! The card itself stays in the store and is read back by DID when one entry is asked for.

use std::collections::{BTreeMap, HashMap, HashSet};

use agentnet_discovery::advert::Advertisement;
use agentnet_discovery::store::StoredAdvert;
use serde_json::{json, Map, Value};

/// Most entries indexed: the store's `MAX_FIND_LIMIT`, its newest adverts.
pub const MAX_INDEXED: usize = agentnet_discovery::store::MAX_FIND_LIMIT;
/// Longest name or description kept, characters.
pub const MAX_TEXT: usize = crate::network::directory::MAX_SUMMARY;
/// Most tags, capabilities, representative queries kept per entry.
pub const MAX_LIST: usize = 32;
/// Most representative queries kept per entry (5 are shown).
pub const MAX_QUERIES: usize = 8;
/// Longest representative query kept, characters.
pub const MAX_SHORT: usize = 200;
/// Longest capability (skill id) kept, characters: a tag's length.
pub const MAX_ID: usize = agentnet_discovery::tags::MAX_TAG_LEN;
/// Most distinct words indexed per entry.
pub const MAX_TERMS_PER_ENTRY: usize = 256;
/// Longest word indexed, bytes (longer ones are cut there).
pub const MAX_TERM_LEN: usize = 32;
/// Most words of a query used.
pub const MAX_QUERY_TERMS: usize = 32;

/// The media type of every entry: each advert carries a signed A2A Agent Card.
pub const A2A_TYPE: &str = "application/a2a-agent-card+json";

/// Words no query should match on.
const STOP: &[&str] = &[
    "a", "an", "and", "are", "can", "find", "for", "i", "in", "is", "me", "my", "of", "on", "or",
    "please", "some", "that", "the", "to", "with",
];

/// Which field a word came from; the weights rank a name match above a description match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// The card's name.
    Name = 3,
    /// A skill tag or id.
    Skill = 2,
    /// The description, a skill's name or description, an example query.
    Text = 1,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::Skill => "skills",
            Field::Text => "description",
        }
    }
}

/// One indexed advert.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `urn:air:…` ([`super::urn::of_did`]).
    pub identifier: String,
    /// The agent's DID.
    pub did: String,
    /// The URN's publisher segment.
    pub publisher: String,
    /// The card's name.
    pub name: String,
    /// The card's description, cut.
    pub description: String,
    /// The advert's skill tags (normalized).
    pub tags: Vec<String>,
    /// The skills' ids.
    pub capabilities: Vec<String>,
    /// The skills' `examples`.
    pub queries: Vec<String>,
    /// The card's `version`.
    pub version: Option<String>,
    /// Unix seconds.
    pub issued_at: u64,
    /// Unix seconds.
    pub expires_at: u64,
    /// Its seq.
    pub seq: u64,
    /// The publishing node.
    pub peer_id: String,
    /// Whether the DID's domain vouched for the key.
    pub domain_verified: bool,
}

/// Cut `s` to [`MAX_TEXT`] characters.
fn cut(s: &str) -> String {
    s.chars().take(MAX_TEXT).collect()
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(cut)
}

impl Entry {
    /// The entry of a stored advert, `None` if its card does not read or its DID has no URN.
    pub fn of(a: &StoredAdvert) -> Option<Entry> {
        let ad: Advertisement = serde_json::from_slice(&a.bytes).ok()?;
        let card = &ad.card;
        let identifier = super::urn::of_did(&a.did)?;
        let publisher = super::urn::publisher(&identifier)?.to_owned();
        let skills = card
            .get("skills")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let short = |s: &str| s.chars().take(MAX_SHORT).collect::<String>();
        let capabilities = skills
            .iter()
            .filter_map(|s| s.get("id").and_then(Value::as_str))
            .map(|s| s.chars().take(MAX_ID).collect())
            .take(MAX_LIST)
            .collect();
        let queries = skills
            .iter()
            .filter_map(|s| s.get("examples").and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .map(short)
            .take(MAX_QUERIES)
            .collect();
        Some(Entry {
            identifier,
            did: a.did.clone(),
            publisher,
            name: str_of(card, "name").unwrap_or_else(|| a.did.clone()),
            description: str_of(card, "description").unwrap_or_default(),
            tags: a.tags.iter().take(MAX_LIST).cloned().collect(),
            capabilities,
            queries,
            version: str_of(card, "version"),
            issued_at: a.issued_at,
            expires_at: a.expires_at,
            seq: a.seq,
            peer_id: a.peer_id.clone(),
            domain_verified: agentnet_discovery::advert::domain_verified(&a.did),
        })
    }

    /// The words of each field, for the index.
    fn words(&self, skill_text: &[String]) -> Vec<(String, Field)> {
        let mut out: Vec<(String, Field)> = Vec::new();
        let mut seen = HashSet::new();
        let mut add = |text: &str, f: Field, out: &mut Vec<(String, Field)>| {
            for t in terms(text) {
                if out.len() >= MAX_TERMS_PER_ENTRY {
                    return;
                }
                if seen.insert(t.clone()) {
                    out.push((t, f));
                }
            }
        };
        // Strongest field first: a word keeps the weight of the first field it is found in.
        add(&self.name, Field::Name, &mut out);
        for t in self.tags.iter().chain(&self.capabilities) {
            add(t, Field::Skill, &mut out);
        }
        add(&self.description, Field::Text, &mut out);
        for t in self.queries.iter().chain(skill_text) {
            add(t, Field::Text, &mut out);
        }
        out
    }

    /// The ARD catalog entry (spec section 4.2): the card by reference at `card_url`, the
    /// advert's facts under `metadata`, the DID as the trust identity.
    pub fn to_json(&self, card_url: &str) -> Value {
        let mut e = json!({
            "identifier": self.identifier,
            "displayName": self.name,
            "type": A2A_TYPE,
            "url": card_url,
            "tags": self.tags,
            "capabilities": self.capabilities,
            "updatedAt": iso(self.issued_at),
            "metadata": {
                "did": self.did,
                "seq": self.seq,
                "peerId": self.peer_id,
                "domainVerified": self.domain_verified,
                "expiresAt": iso(self.expires_at),
            },
            "trustManifest": {"identity": self.did, "identityType": "did"},
        });
        if let Some(m) = e.as_object_mut() {
            if !self.description.is_empty() {
                m.insert("description".into(), json!(self.description));
            }
            // The schema wants 2 to 5 of them; all are indexed.
            if self.queries.len() >= 2 {
                let q: Vec<&String> = self.queries.iter().take(5).collect();
                m.insert("representativeQueries".into(), json!(q));
            }
            if let Some(v) = &self.version {
                m.insert("version".into(), json!(v));
            }
        }
        e
    }

    /// The values of a filter or facet field, `None` for a field the registry does not know.
    pub fn values(&self, field: &str) -> Option<Vec<&str>> {
        Some(match field {
            "type" => vec![A2A_TYPE],
            "publisher" | "publisherId" => vec![self.publisher.as_str()],
            "identifier" => vec![self.identifier.as_str()],
            "tags" => self.tags.iter().map(String::as_str).collect(),
            "capabilities" => self.capabilities.iter().map(String::as_str).collect(),
            "version" => self.version.iter().map(String::as_str).collect(),
            "displayName" => vec![self.name.as_str()],
            "metadata.did" | "trustManifest.identity" => vec![self.did.as_str()],
            "metadata.peerId" => vec![self.peer_id.as_str()],
            "metadata.domainVerified" => vec![if self.domain_verified {
                "true"
            } else {
                "false"
            }],
            "trustManifest.identityType" => vec!["did"],
            _ => return None,
        })
    }
}

/// ISO 8601 of unix seconds.
pub fn iso(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// The words of `text`: lower-case letters and digits, stop words dropped, a plural `s` cut,
/// each at most [`MAX_TERM_LEN`] bytes.
pub fn terms(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut w = w.to_lowercase();
            if w.len() > 4 && w.ends_with('s') && !w.ends_with("ss") {
                w.pop();
            }
            if w.len() > MAX_TERM_LEN {
                let mut end = MAX_TERM_LEN;
                while !w.is_char_boundary(end) {
                    end -= 1;
                }
                w.truncate(end);
            }
            w
        })
        .filter(|w| !STOP.contains(&w.as_str()))
}

/// Why an entry matched a query: the query's words it has and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Index into [`Index::entries`].
    pub entry: usize,
    /// 0–100: the weighted share of the query's words found.
    pub score: u8,
    /// `word: field` for each word found.
    pub reasons: Vec<String>,
}

/// Structured constraints (spec section 7.1): field → accepted values (OR within, AND across).
pub type Filter = BTreeMap<String, Vec<String>>;

/// The index. See the module documentation.
#[derive(Debug, Default)]
pub struct Index {
    /// Newest first, as the store gave them.
    pub entries: Vec<Entry>,
    by_identifier: HashMap<String, usize>,
    by_did: HashMap<String, usize>,
    postings: HashMap<String, Vec<(u32, Field)>>,
}

impl Index {
    /// Index `adverts` (newest first), at most [`MAX_INDEXED`]; `skill_text` are the skills'
    /// names and descriptions, read from the card here.
    pub fn build(adverts: &[StoredAdvert]) -> Index {
        let mut ix = Index::default();
        for a in adverts.iter().take(MAX_INDEXED) {
            let Some(e) = Entry::of(a) else { continue };
            if ix.by_identifier.contains_key(&e.identifier) {
                continue;
            }
            let skill_text = skill_text(&a.bytes);
            let n = ix.entries.len() as u32;
            for (w, f) in e.words(&skill_text) {
                ix.postings.entry(w).or_default().push((n, f));
            }
            ix.by_identifier.insert(e.identifier.clone(), n as usize);
            ix.by_did.insert(e.did.clone(), n as usize);
            ix.entries.push(e);
        }
        ix
    }

    /// The entry of an identifier (a `urn:air:` one or the DID itself), if it is live at `now`.
    pub fn get(&self, identifier: &str, now: u64) -> Option<&Entry> {
        self.by_identifier
            .get(identifier)
            .or_else(|| self.by_did.get(identifier))
            .and_then(|&i| self.entries.get(i))
            .filter(|e| e.expires_at > now)
    }

    /// Live entries matching `text` (none: all, score 100) and `filter`, best first: score, then
    /// freshness (newest `issued_at`), then identifier. An entry matching
    /// none of the query's words is not in the matched set (the relevance cutoff).
    pub fn search(&self, text: Option<&str>, filter: &Filter, now: u64) -> Vec<Hit> {
        let mut hits: Vec<Hit> = match text.map(query_terms).filter(|q| !q.is_empty()) {
            None => (0..self.entries.len())
                .map(|entry| Hit {
                    entry,
                    score: 100,
                    reasons: Vec::new(),
                })
                .collect(),
            Some(q) => {
                let mut found: HashMap<usize, Vec<(String, Field)>> = HashMap::new();
                for w in &q {
                    for (i, f) in self.postings.get(w).into_iter().flatten() {
                        found.entry(*i as usize).or_default().push((w.clone(), *f));
                    }
                }
                // A name match of every word scores 100, a description match of each a third.
                let best = (q.len() * Field::Name as usize) as f64;
                found
                    .into_iter()
                    .map(|(entry, words)| {
                        let sum: usize = words.iter().map(|(_, f)| *f as usize).sum();
                        let score = ((sum as f64 / best) * 100.0).round().clamp(1.0, 100.0) as u8;
                        let reasons = words
                            .iter()
                            .map(|(w, f)| format!("{w}: {}", f.name()))
                            .collect();
                        Hit {
                            entry,
                            score,
                            reasons,
                        }
                    })
                    .collect()
            }
        };
        hits.retain(|h| {
            self.entries.get(h.entry).is_some_and(|e| {
                e.expires_at > now
                    && filter.iter().all(|(k, want)| {
                        e.values(k).is_some_and(|have| {
                            have.iter()
                                .any(|h| want.iter().any(|w| w.eq_ignore_ascii_case(h)))
                        })
                    })
            })
        });
        hits.sort_by(|a, b| {
            let (ea, eb) = (&self.entries[a.entry], &self.entries[b.entry]);
            b.score
                .cmp(&a.score)
                .then(eb.issued_at.cmp(&ea.issued_at))
                .then(ea.identifier.cmp(&eb.identifier))
        });
        hits
    }
}

/// The query's distinct words, at most [`MAX_QUERY_TERMS`].
fn query_terms(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    terms(text)
        .filter(|w| seen.insert(w.clone()))
        .take(MAX_QUERY_TERMS)
        .collect()
}

/// The skills' names and descriptions of an advert's card, cut.
fn skill_text(bytes: &[u8]) -> Vec<String> {
    let Ok(ad) = serde_json::from_slice::<Advertisement>(bytes) else {
        return Vec::new();
    };
    let empty = Vec::new();
    let skills = ad
        .card
        .get("skills")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    skills
        .iter()
        .take(MAX_LIST)
        .flat_map(|s| [str_of(s, "name"), str_of(s, "description")])
        .flatten()
        .collect()
}

/// Facet buckets of `field` over `hits` (spec section 7.3): most frequent first (ties by
/// value), at most `limit`, those under `min_count` dropped; `None` for an unknown field.
pub fn facet(ix: &Index, hits: &[Hit], field: &str, limit: usize, min_count: u64) -> Option<Value> {
    // Known field? Asked of a dummy-free path: any entry answers the same Some/None.
    if !known_field(field) {
        return None;
    }
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for h in hits {
        if let Some(vals) = ix.entries.get(h.entry).and_then(|e| e.values(field)) {
            for v in vals.into_iter().collect::<HashSet<_>>() {
                *counts.entry(v).or_default() += 1;
            }
        }
    }
    let mut buckets: Vec<(&str, u64)> = counts
        .into_iter()
        .filter(|(_, c)| *c >= min_count)
        .collect();
    buckets.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let other: u64 = buckets.iter().skip(limit).map(|(_, c)| c).sum();
    let mut m = Map::new();
    m.insert(
        "buckets".into(),
        buckets
            .iter()
            .take(limit)
            .map(|(v, c)| json!({"value": v, "count": c}))
            .collect(),
    );
    if other > 0 {
        m.insert("otherCount".into(), json!(other));
    }
    Some(Value::Object(m))
}

/// Whether `field` is one [`Entry::values`] answers.
pub fn known_field(field: &str) -> bool {
    const KNOWN: &[&str] = &[
        "type",
        "publisher",
        "publisherId",
        "identifier",
        "tags",
        "capabilities",
        "version",
        "displayName",
        "metadata.did",
        "trustManifest.identity",
        "metadata.peerId",
        "metadata.domainVerified",
        "trustManifest.identityType",
    ];
    KNOWN.contains(&field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advert(did: &str, issued_at: u64, card: Value, tags: &[&str]) -> StoredAdvert {
        let ad = json!({
            "v": 1, "did": did, "card": card, "peerId": "12D3KooWtest", "addrs": [],
            "seq": 1, "issuedAt": issued_at, "expiresAt": issued_at + 3600,
            "proof": {"protected": "x", "signature": "x"}
        });
        StoredAdvert {
            did: did.into(),
            seq: 1,
            issued_at,
            expires_at: issued_at + 3600,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            peer_id: "12D3KooWtest".into(),
            bytes: serde_json::to_vec(&ad).unwrap(),
        }
    }

    fn card(name: &str, description: &str, examples: &[&str]) -> Value {
        json!({"name": name, "description": description, "skills": [
            {"id": "s1", "name": "Skill", "description": "does it", "tags": ["x"], "examples": examples}
        ]})
    }

    fn ix() -> Index {
        Index::build(&[
            advert(
                "did:key:z6MkNew",
                200,
                card("Weather Agent", "Forecasts for any city.", &[]),
                &["weather"],
            ),
            advert(
                "did:key:z6MkOld",
                100,
                card(
                    "Helper",
                    "General help.",
                    &["what is the wind speed in Chicago"],
                ),
                &["misc"],
            ),
            advert(
                "did:web:acme.example",
                150,
                card("Translator", "Translates weather reports.", &[]),
                &["translation"],
            ),
        ])
    }

    #[test]
    fn words_rank_name_over_description_then_freshness() {
        let ix = ix();
        if ix.entries.len() != 3 {
            // The advert format did not read: the other assertions would mislead.
            panic!("indexed {} of 3", ix.entries.len());
        }
        let hits = ix.search(Some("find me a weather forecast"), &Filter::new(), 0);
        let names: Vec<&str> = hits
            .iter()
            .map(|h| ix.entries[h.entry].name.as_str())
            .collect();
        assert_eq!(names, ["Weather Agent", "Translator"]);
        assert!(hits[0].score > hits[1].score);
        assert!(
            hits[0].reasons.contains(&"weather: name".to_string()),
            "{:?}",
            hits[0]
        );
        // Representative queries are searched.
        let hits = ix.search(Some("wind speed"), &Filter::new(), 0);
        assert_eq!(ix.entries[hits[0].entry].name, "Helper");
        // Stop words alone match nothing; no text matches everything, newest first.
        assert!(ix.search(Some("find me a"), &Filter::new(), 0).len() == 3);
        let all = ix.search(None, &Filter::new(), 0);
        assert_eq!(ix.entries[all[0].entry].did, "did:key:z6MkNew");
    }

    #[test]
    fn filters_and_lookups() {
        let ix = ix();
        let f: Filter = [("publisher".to_string(), vec!["acme.example".to_string()])].into();
        let hits = ix.search(Some("weather"), &f, 0);
        assert_eq!(hits.len(), 1);
        assert_eq!(ix.entries[hits[0].entry].did, "did:web:acme.example");
        let id = &ix.entries[hits[0].entry].identifier;
        assert!(ix.get(id, 0).is_some());
        assert!(ix.get("did:web:acme.example", 0).is_some());
        // Expired entries are not found.
        assert!(ix.get(id, 10_000).is_none());
        assert!(ix.search(None, &Filter::new(), 10_000).is_empty());
        let facet = facet(&ix, &ix.search(None, &Filter::new(), 0), "publisher", 1, 1).unwrap();
        assert_eq!(
            facet["buckets"][0],
            json!({"value": "key.did.invalid", "count": 2})
        );
        assert_eq!(facet["otherCount"], 1);
        assert!(super::facet(&ix, &[], "nope", 1, 1).is_none());
    }

    #[test]
    fn a_huge_card_is_indexed_within_bounds() {
        let long = "word ".repeat(100_000);
        let many: Vec<String> = (0..10_000).map(|i| format!("w{i}")).collect();
        let mut c = card(&long, &many.join(" "), &[]);
        c["skills"] = (0..1000)
            .map(|i| json!({"id": format!("s{i}"), "examples": [long.clone()]}))
            .collect();
        let ix = Index::build(&[advert("did:key:z6MkBig", 1, c, &[])]);
        let e = &ix.entries[0];
        assert!(e.name.chars().count() <= MAX_TEXT);
        assert!(e.capabilities.len() <= MAX_LIST && e.queries.len() <= MAX_QUERIES);
        assert!(e.queries.iter().all(|q| q.chars().count() <= MAX_SHORT));
        let postings: usize = ix.postings.values().map(Vec::len).sum();
        assert!(postings <= MAX_TERMS_PER_ENTRY, "{postings}");
        // A query of many words is cut too.
        let hits = ix.search(Some(&many.join(" ")), &Filter::new(), 0);
        assert_eq!(hits.len(), 1);
    }
}
