//! DID resolution: did:key locally, did:web and did:wba over HTTPS, other methods through `ssi`
//! when that feature is on; results cached with a TTL, failures cached briefly.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::document::{Document, DocumentError};
use crate::web::{HttpFetcher, HttpOptions};
use crate::{didkey, Did, Method};

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
            ResolveError::Http { .. } => "internalError",
        }
    }

    /// Whether a retry later could succeed (network trouble), as opposed to a final answer.
    pub fn is_transient(&self) -> bool {
        matches!(self, ResolveError::Http { .. })
    }
}

/// Parse `bytes` as the document of `did` and check that it describes `did`.
pub(crate) fn checked_document(did: &Did, bytes: &[u8]) -> Result<Document, ResolveError> {
    let invalid = |source| ResolveError::InvalidDocument {
        did: did.to_string(),
        source,
    };
    let doc = Document::from_json(bytes).map_err(invalid)?;
    doc.check_belongs_to(did).map_err(invalid)?;
    Ok(doc)
}

impl From<crate::id::InvalidDid> for ResolveError {
    fn from(e: crate::id::InvalidDid) -> Self {
        ResolveError::InvalidDid {
            did: e.input,
            reason: e.reason.to_owned(),
        }
    }
}

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
    /// Most cache entries.
    pub cache_entries: usize,
    /// Most HTTP resolutions in flight at once.
    pub max_concurrent_fetches: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            http: HttpOptions::default(),
            did_key: didkey::Options::default(),
            ttl: Duration::from_secs(300),
            negative_ttl: Duration::from_secs(30),
            cache_entries: 4096,
            max_concurrent_fetches: 16,
        }
    }
}

type CacheEntry = (Instant, Result<Arc<Document>, ResolveError>);

/// Resolves DIDs to checked documents.
#[derive(Clone)]
pub struct Resolver {
    opts: Options,
    http: HttpFetcher,
    cache: Arc<Mutex<lru::LruCache<String, CacheEntry>>>,
    fetches: Arc<tokio::sync::Semaphore>,
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
    /// A resolver with these options. Fails only on a bad extra root certificate.
    pub fn new(opts: Options) -> Result<Self, String> {
        let http = HttpFetcher::new(opts.http.clone())?;
        let entries = NonZeroUsize::new(opts.cache_entries.max(1)).expect("max(1) is non-zero");
        Ok(Self {
            http,
            cache: Arc::new(Mutex::new(lru::LruCache::new(entries))),
            fetches: Arc::new(tokio::sync::Semaphore::new(
                opts.max_concurrent_fetches.max(1),
            )),
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

    /// Resolve a DID to its document, checked to belong to it.
    pub async fn resolve(&self, did: &Did) -> Result<Arc<Document>, ResolveError> {
        let key = did.as_str().to_owned();
        if did.method() == &Method::Key {
            // Local and deterministic, but cached all the same: the cached document keeps its
            // decoded key, which makes repeated verifications by one agent cheaper.
            if let Some(hit) = self.cached(&key, Instant::now()) {
                return hit;
            }
            let result = didkey::resolve(did, self.opts.did_key).map(Arc::new);
            if result.is_ok() {
                let mut cache = self.cache.lock().expect("cache lock poisoned");
                cache.put(key, (Instant::now(), result.clone()));
            }
            return result;
        }
        if let Some(doc) = self.pinned.lock().expect("pinned lock poisoned").get(&key) {
            return Ok(doc.clone());
        }
        let now = Instant::now();
        if let Some(hit) = self.cached(&key, now) {
            return hit;
        }
        let result = {
            let _permit = self
                .fetches
                .acquire()
                .await
                .expect("the semaphore is never closed");
            // Another task may have filled the cache while we waited.
            if let Some(hit) = self.cached(&key, Instant::now()) {
                return hit;
            }
            self.resolve_uncached(did).await.map(Arc::new)
        };
        let mut cache = self.cache.lock().expect("cache lock poisoned");
        cache.put(key, (Instant::now(), result.clone()));
        result
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
            || self.cached(did.as_str(), Instant::now()).is_some()
    }

    fn cached(&self, key: &str, now: Instant) -> Option<Result<Arc<Document>, ResolveError>> {
        let mut cache = self.cache.lock().expect("cache lock poisoned");
        let (at, result) = cache.get(key)?;
        let ttl = if result.is_ok() {
            self.opts.ttl
        } else {
            self.opts.negative_ttl
        };
        if now.duration_since(*at) < ttl {
            Some(result.clone())
        } else {
            cache.pop(key);
            None
        }
    }

    async fn resolve_uncached(&self, did: &Did) -> Result<Document, ResolveError> {
        match did.method() {
            Method::Web => self.http.fetch(did).await,
            Method::Wba => {
                let doc = self.http.fetch(did).await?;
                crate::wba::check_document(did, &doc).map_err(|source| {
                    ResolveError::InvalidDocument {
                        did: did.to_string(),
                        source,
                    }
                })?;
                Ok(doc)
            }
            Method::Key => didkey::resolve(did, self.opts.did_key),
            Method::Other(method) => self.resolve_other(did, method).await,
        }
    }

    #[cfg(not(feature = "ssi"))]
    async fn resolve_other(&self, did: &Did, method: &str) -> Result<Document, ResolveError> {
        Err(ResolveError::MethodNotSupported {
            did: did.to_string(),
            method: method.to_owned(),
        })
    }

    #[cfg(feature = "ssi")]
    async fn resolve_other(&self, did: &Did, method: &str) -> Result<Document, ResolveError> {
        crate::ssi_bridge::resolve(did, method).await
    }
}
