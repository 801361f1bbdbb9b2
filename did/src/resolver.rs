//! DID resolution: did:key locally, did:web and did:wba over HTTPS, other methods through `ssi`
//! when that feature is on; results cached with a TTL, failures cached briefly.
//!
//! The cache is `moka`'s: bounded by the estimated bytes of the parsed documents (not by their
//! count, since one 256 KiB document can cost more than a thousand small ones), each entry with
//! its own lifetime (a failure is kept for [`Options::negative_ttl`]), and concurrent lookups of
//! one DID share one fetch.
//!
//! Whoever names a did:web or did:wba DID (a gossiped advert, a request signer, the issuer of
//! a delegation link) chooses where the node fetches from, and fresh paths of one host are
//! free to mint. So every fetch spends a token of its host's budget ([`HostBudget`]:
//! [`Options::host_fetch_burst`], refilled at [`Options::host_fetches_per_minute`]), kept in
//! the resolver and shared by every clone of it, and so by every path that resolves DIDs
//! through it. The host is the document URL's, as [`host_key`] gives it: every path and every
//! port of a host spend one budget. A DID whose host's budget is spent fails with
//! [`ResolveError::Throttled`] without a fetch (remembered as failures are).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::document::Document;
/// Defined in [`crate::resolution`], below the method modules that return it.
pub use crate::resolution::ResolveError;
use crate::web::{HttpFetcher, HttpOptions};
use crate::{didkey, Did, Method};

/// Resolver settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// HTTP rules for did:web and did:wba.
    pub http: HttpOptions,
    /// How the did:key documents look.
    pub did_key: didkey::Options,
    /// How long a fetched document is reused.
    pub ttl: Duration,
    /// How long a failure is remembered before the DID is fetched again.
    pub negative_ttl: Duration,
    /// Most bytes the cached documents may hold, by their estimated parsed size (see
    /// [`crate::json::Stats::estimated_heap`]).
    pub cache_bytes: u64,
    /// Most HTTP resolutions in flight at once.
    pub max_concurrent_fetches: usize,
    /// Fetches one host may be sent before its budget refills: 32.
    pub host_fetch_burst: u32,
    /// The refill of a host's budget, per minute: 120.
    pub host_fetches_per_minute: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            http: HttpOptions::default(),
            did_key: didkey::Options::default(),
            ttl: Duration::from_secs(300),
            negative_ttl: Duration::from_secs(30),
            // A typical document weighs 5-20 KB parsed, the largest accepted about 1 MiB: room
            // for a few thousand agents' documents, or 32 of the largest.
            cache_bytes: 32 * 1024 * 1024,
            max_concurrent_fetches: 16,
            host_fetch_burst: 32,
            host_fetches_per_minute: 120,
        }
    }
}

/// Hosts whose fetch budget is tracked at once; past them, a new host waits until a tracked
/// one's budget is full again (a full budget is the same as none). About a megabyte.
pub const MAX_BUDGET_HOSTS: usize = 10_000;

/// The key a DID's fetches are counted under: its document URL's host, lowercased, without a
/// trailing dot and without the port (every port of a host is the same machine).
pub fn host_key(did: &Did) -> Result<String, ResolveError> {
    let url = crate::web::document_url(did)?;
    url.host_str()
        .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
        .ok_or_else(|| ResolveError::InvalidDid {
            did: did.to_string(),
            reason: "names no host".into(),
        })
}

/// A token bucket per host: a policy that takes `now` and answers, with no I/O.
#[derive(Debug)]
pub struct HostBudget {
    burst: f64,
    per_second: f64,
    max_hosts: usize,
    hosts: std::collections::HashMap<String, (f64, Instant)>,
}

impl HostBudget {
    /// `burst` fetches per host, refilled at `per_minute`, for at most `max_hosts` hosts.
    pub fn new(burst: u32, per_minute: u32, max_hosts: usize) -> Self {
        HostBudget {
            burst: f64::from(burst),
            per_second: f64::from(per_minute) / 60.0,
            max_hosts,
            hosts: Default::default(),
        }
    }

    fn level(burst: f64, per_second: f64, (tokens, at): (f64, Instant), now: Instant) -> f64 {
        burst.min(tokens + now.saturating_duration_since(at).as_secs_f64() * per_second)
    }

    /// Take one fetch of `host` at `now`; whether there was one.
    pub fn take(&mut self, host: &str, now: Instant) -> bool {
        let (burst, per_second) = (self.burst, self.per_second);
        if !self.hosts.contains_key(host) && self.hosts.len() >= self.max_hosts {
            // A full budget is the same as none: forget those.
            self.hosts
                .retain(|_, b| Self::level(burst, per_second, *b, now) < burst);
            if self.hosts.len() >= self.max_hosts {
                return false;
            }
        }
        let b = self.hosts.get(host).copied().unwrap_or((self.burst, now));
        let level = Self::level(burst, per_second, b, now);
        if level < 1.0 {
            return false;
        }
        self.hosts.insert(host.to_owned(), (level - 1.0, now));
        true
    }
}

/// A cached resolution and its weight in bytes.
#[derive(Clone)]
struct CacheEntry {
    result: Result<Arc<Document>, ResolveError>,
    weight: u32,
}

/// Weight of a document that was not parsed from JSON (did:key, ssi): about what a small
/// parsed document costs.
const BUILT_DOCUMENT_WEIGHT: usize = 4096;
/// Weight of a remembered failure, besides its message.
const FAILURE_WEIGHT: usize = 256;

impl CacheEntry {
    fn new(result: Result<(Arc<Document>, usize), ResolveError>) -> Self {
        let weight = match &result {
            Ok((_, w)) => *w,
            Err(e) => FAILURE_WEIGHT + e.to_string().len(),
        };
        Self {
            result: result.map(|(doc, _)| doc),
            weight: u32::try_from(weight).unwrap_or(u32::MAX),
        }
    }
}

/// Each entry lives for the TTL of its kind: documents `ttl`, failures `negative_ttl`.
struct EntryTtl {
    ttl: Duration,
    negative_ttl: Duration,
}

impl moka::Expiry<String, CacheEntry> for EntryTtl {
    fn expire_after_create(&self, _: &String, v: &CacheEntry, _: Instant) -> Option<Duration> {
        Some(if v.result.is_ok() {
            self.ttl
        } else {
            self.negative_ttl
        })
    }
}

/// Resolves DIDs to checked documents.
#[derive(Clone)]
pub struct Resolver {
    opts: Options,
    http: HttpFetcher,
    cache: moka::future::Cache<String, CacheEntry>,
    fetches: Arc<tokio::sync::Semaphore>,
    budget: Arc<Mutex<HostBudget>>,
    pinned: Arc<Mutex<std::collections::HashMap<String, Arc<Document>>>>,
}

/// Most documents [`Resolver::pin`] holds.
const MAX_PINNED: usize = 1024;

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("opts", &self.opts)
            .finish()
    }
}

impl Resolver {
    /// A resolver with these options. Fails only on a bad extra root certificate or a TLS
    /// backend that cannot start.
    pub fn new(opts: Options) -> Result<Self, crate::web::BuildError> {
        let http = HttpFetcher::new(opts.http.clone())?;
        let cache = moka::future::Cache::builder()
            .max_capacity(opts.cache_bytes)
            .weigher(|k: &String, v: &CacheEntry| {
                v.weight
                    .saturating_add(u32::try_from(k.len()).unwrap_or(u32::MAX))
            })
            .expire_after(EntryTtl {
                ttl: opts.ttl,
                negative_ttl: opts.negative_ttl,
            })
            .build();
        Ok(Self {
            http,
            cache,
            fetches: Arc::new(tokio::sync::Semaphore::new(
                opts.max_concurrent_fetches.max(1),
            )),
            budget: Arc::new(Mutex::new(HostBudget::new(
                opts.host_fetch_burst,
                opts.host_fetches_per_minute,
                MAX_BUDGET_HOSTS,
            ))),
            pinned: Default::default(),
            opts,
        })
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Resolve a DID given as a string.
    pub async fn resolve_str(&self, did: &str) -> Result<Arc<Document>, ResolveError> {
        self.resolve(&Did::parse(did)?).await
    }

    /// Resolve a DID to its document, checked to belong to it. Concurrent calls for one DID
    /// share one resolution (one fetch for did:web and did:wba).
    pub async fn resolve(&self, did: &Did) -> Result<Arc<Document>, ResolveError> {
        if did.method() != &Method::Key {
            if let Some(doc) = self
                .pinned
                .lock()
                .expect("pinned lock poisoned")
                .get(did.as_str())
            {
                return Ok(doc.clone());
            }
        }
        // did:key is local and deterministic, but cached all the same: the cached document keeps
        // its decoded key, which makes repeated verifications by one agent cheaper.
        let fresh = async { CacheEntry::new(self.resolve_fresh(did).await) };
        self.cache
            .get_with(did.as_str().to_owned(), fresh)
            .await
            .result
    }

    async fn resolve_fresh(&self, did: &Did) -> Result<(Arc<Document>, usize), ResolveError> {
        if did.method() == &Method::Key {
            return didkey::resolve(did, self.opts.did_key)
                .map(|doc| (Arc::new(doc), BUILT_DOCUMENT_WEIGHT));
        }
        if matches!(did.method(), Method::Web | Method::Wba) {
            let host = host_key(did)?;
            let spent = !self
                .budget
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(&host, Instant::now());
            if spent {
                return Err(ResolveError::Throttled {
                    did: did.to_string(),
                    host,
                });
            }
        }
        let _permit = self
            .fetches
            .acquire()
            .await
            .expect("the semaphore is never closed");
        self.resolve_uncached(did)
            .await
            .map(|(doc, weight)| (Arc::new(doc), weight))
    }

    /// The estimated bytes the cache holds now (after its pending evictions ran).
    pub async fn cache_weight(&self) -> u64 {
        self.cache.run_pending_tasks().await;
        self.cache.weighted_size()
    }

    /// Serve `doc` for its DID without fetching: the node's own DID, or a document obtained out
    /// of band. It is checked as a fetched one would be (its `id`, the did:wba rules) and served
    /// until replaced; at most 1024 are held.
    pub fn pin(&self, doc: Document) -> Result<(), ResolveError> {
        let did = Did::parse(&doc.id)?;
        let invalid = |source| ResolveError::InvalidDocument {
            did: did.to_string(),
            source,
        };
        doc.check_belongs_to(&did).map_err(invalid)?;
        if did.method() == &Method::Wba {
            crate::wba::check_document(&did, &doc).map_err(invalid)?;
        }
        let mut pinned = self.pinned.lock().expect("pinned lock poisoned");
        if pinned.len() >= MAX_PINNED && !pinned.contains_key(did.as_str()) {
            return Err(ResolveError::Http {
                did: did.to_string(),
                reason: format!("more than {MAX_PINNED} pinned documents"),
            });
        }
        pinned.insert(did.to_string(), Arc::new(doc));
        Ok(())
    }

    /// Whether `did` would be answered without a fetch (pinned, did:key, or a fresh cache entry).
    pub fn is_cached(&self, did: &Did) -> bool {
        did.method() == &Method::Key
            || self
                .pinned
                .lock()
                .expect("pinned lock poisoned")
                .contains_key(did.as_str())
            || self.cache.contains_key(did.as_str())
    }

    async fn resolve_uncached(&self, did: &Did) -> Result<(Document, usize), ResolveError> {
        match did.method() {
            Method::Web => self.http.fetch(did).await,
            Method::Wba => {
                let (doc, weight) = self.http.fetch(did).await?;
                crate::wba::check_document(did, &doc).map_err(|source| {
                    ResolveError::InvalidDocument {
                        did: did.to_string(),
                        source,
                    }
                })?;
                Ok((doc, weight))
            }
            Method::Key => {
                didkey::resolve(did, self.opts.did_key).map(|d| (d, BUILT_DOCUMENT_WEIGHT))
            }
            Method::Other(method) => self.resolve_other(did, method).await,
        }
    }

    #[cfg(not(feature = "ssi"))]
    async fn resolve_other(
        &self,
        did: &Did,
        method: &str,
    ) -> Result<(Document, usize), ResolveError> {
        Err(ResolveError::MethodNotSupported {
            did: did.to_string(),
            method: method.to_owned(),
        })
    }

    #[cfg(feature = "ssi")]
    async fn resolve_other(
        &self,
        did: &Did,
        method: &str,
    ) -> Result<(Document, usize), ResolveError> {
        // The document ssi produced, weighed like a fetched one for the cache.
        crate::ssi_bridge::resolve(did, method).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_budget_refills_and_is_per_host() {
        let mut b = HostBudget::new(2, 60, 2);
        let t0 = Instant::now();
        assert!(b.take("a.example", t0) && b.take("a.example", t0));
        assert!(!b.take("a.example", t0), "the burst is spent");
        assert!(b.take("b.example", t0), "another host has its own");
        assert!(b.take("b.example", t0));
        // One a second comes back.
        assert!(b.take("a.example", t0 + Duration::from_secs(1)));
        assert!(!b.take("a.example", t0 + Duration::from_secs(1)));
        // Two hosts tracked, both in use: a third waits until one is full again.
        assert!(!b.take("c.example", t0 + Duration::from_secs(1)));
        assert!(b.take("c.example", t0 + Duration::from_secs(10)));
    }

    #[test]
    fn every_path_and_port_of_a_host_is_one_key() {
        let key = |d: &str| host_key(&Did::parse(d).unwrap()).unwrap();
        assert_eq!(key("did:web:Victim.com%3A8443:a:b"), "victim.com");
        assert_eq!(key("did:web:victim.com:x"), "victim.com");
        assert_eq!(key("did:wba:victim.com:y"), "victim.com");
    }
}
