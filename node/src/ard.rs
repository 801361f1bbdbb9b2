//! The ARD registry API (Agentic Resource Discovery, spec v0.9 section 7) on the public listener,
//! answered from the node's P2P index: every entry is an advertisement the node validated
//! (signature, DID, seq) and holds in its store. See docs/ARD.md.
//!
//! - `POST /search`: `query.text` (required) and `query.filter`, `pageSize` (alias `limit`),
//!   `pageToken`; results ranked by relevance, then freshness, each with
//!   `score` (0–100), `source` (this registry) and why it matched (`metadata.matched`, e.g.
//!   `"weather: name, forecast: skills"`).
//! - `POST /explore`: facets (`resultType.facets`) over the same matched set.
//! - `GET /agents`: deterministic listing (`filter`, `orderBy`, `pageSize`, `pageToken`).
//! - `GET /.well-known/ard.json` (and `ai-catalog.json`): the node's own manifest ([`manifest`]).
//! - `GET /agents/{identifier}`: one entry by its `urn:air:` identifier ([`urn`]) or its DID;
//!   `GET /agents/{identifier}/card`: the signed A2A Agent Card the entry references.
//!
//! Errors are the spec's envelope `{"errorCode", "message"}` (its Appendix B codes, and
//! `PAYLOAD_TOO_LARGE`, `METHOD_NOT_ALLOWED`, `NOT_FOUND` for a wrong method or size).
//!
//! Bounded like every public route (DESIGN.md section 5): the listener's connection and time
//! caps ([`crate::http::server`]); a body of at most [`MAX_BODY`] bytes (413); a query text of at
//! most [`MAX_TEXT_LEN`] bytes, at most [`MAX_FILTER_KEYS`] filter keys of
//! [`MAX_FILTER_VALUES`] values, a page of at most [`MAX_PAGE`] (400 past them); a token bucket
//! per source ([`RATE_PER_SECOND`], 429); and the index itself ([`index`]): at most
//! [`index::MAX_INDEXED`] entries, rebuilt from the store at most every [`REBUILD_AFTER`], one
//! rebuild at a time.

pub mod index;
pub mod manifest;
pub mod urn;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentnet_a2a::auth::Source;
use agentnet_discovery::advert::Advertisement;
use agentnet_discovery::net::unix_now;
use agentnet_discovery::store::Store;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use serde_json::{json, Map, Value};

use index::{Filter, Index};

/// Largest request body, bytes: a query and its filters fit in far less.
pub const MAX_BODY: usize = 16 * 1024;
/// Longest `query.text`, bytes.
pub const MAX_TEXT_LEN: usize = 1024;
/// Most keys in `query.filter`.
pub const MAX_FILTER_KEYS: usize = 16;
/// Most values of one filter key.
pub const MAX_FILTER_VALUES: usize = 32;
/// Longest filter value or identifier, bytes.
pub const MAX_VALUE_LEN: usize = 512;
/// Largest `pageSize` (the spec's maximum).
pub const MAX_PAGE: usize = 100;
/// Default `pageSize` of `/search` (the spec's).
pub const DEFAULT_SEARCH_PAGE: usize = 10;
/// Default `pageSize` of `/agents` (the spec's).
pub const DEFAULT_LIST_PAGE: usize = 20;
/// Most facets in one `/explore`.
pub const MAX_FACETS: usize = 8;
/// Requests a second per source, bursts of ten seconds' worth.
pub const RATE_PER_SECOND: u32 = 20;
/// The index is rebuilt from the store when older than this.
pub const REBUILD_AFTER: Duration = Duration::from_secs(3);

/// An error in the spec's envelope.
#[derive(Debug)]
pub struct ArdError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ArdError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ArdError {
            status,
            code,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
    }

    fn internal(e: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %e, "ARD registry");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            "the registry could not read its index; try again later",
        )
    }
}

impl IntoResponse for ArdError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            axum::Json(json!({"errorCode": self.code, "message": self.message})),
        )
            .into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        r
    }
}

type Answer = Result<axum::Json<Value>, ArdError>;

/// The registry's state: the store it indexes, where it is reached, the per-source rate.
pub struct Registry {
    store: Store,
    public_base: String,
    index: tokio::sync::Mutex<(Arc<Index>, Option<Instant>)>,
    rate: Mutex<crate::hosted::tasks::CreationRate>,
}

impl Registry {
    /// The registry of `store`, reached at `public_base` (`http://host:port`, no path).
    pub fn new(store: Store, public_base: &str) -> Self {
        Registry {
            store,
            public_base: public_base.trim_end_matches('/').to_owned(),
            index: tokio::sync::Mutex::new((Arc::new(Index::default()), None)),
            rate: Mutex::new(crate::hosted::tasks::CreationRate::new(RATE_PER_SECOND)),
        }
    }

    /// The index, rebuilt first if older than [`REBUILD_AFTER`]; concurrent callers wait for
    /// the one rebuild.
    async fn index(&self) -> Result<Arc<Index>, ArdError> {
        let mut held = self.index.lock().await;
        if held.1.is_some_and(|t| t.elapsed() < REBUILD_AFTER) {
            return Ok(held.0.clone());
        }
        let store = self.store.clone();
        let ix = tokio::task::spawn_blocking(move || {
            store
                .find(&[], index::MAX_INDEXED, unix_now())
                .map(|adverts| Index::build(&adverts))
        })
        .await
        .map_err(ArdError::internal)?
        .map_err(ArdError::internal)?;
        let ix = Arc::new(ix);
        *held = (ix.clone(), Some(Instant::now()));
        Ok(ix)
    }

    fn card_url(&self, identifier: &str) -> String {
        let enc: String = url::form_urlencoded::byte_serialize(identifier.as_bytes()).collect();
        format!("{}/agents/{enc}/card", self.public_base)
    }

    fn entry(&self, e: &index::Entry) -> Value {
        e.to_json(&self.card_url(&e.identifier))
    }
}

/// The routes, to merge into the public router: the registry over `store`, and the manifest
/// of the node with `node_key` hosting `hosted` ([`manifest`]).
pub fn router(
    store: Store,
    public_base: &str,
    node_key: &agentnet_did::SecretKey,
    hosted: &[crate::hosted::Hosted],
) -> Router {
    let well_known = manifest::router(&manifest::manifest(node_key, hosted, public_base));
    let reg = Arc::new(Registry::new(store, public_base));
    let only = |m: MethodRouter<Arc<Registry>>| m.fallback(wrong_method);
    Router::new()
        .route("/search", only(post(search)))
        .route("/explore", only(post(explore)))
        .route("/agents", only(get(list)))
        .route("/agents/{identifier}", only(get(lookup)))
        .route("/agents/{identifier}/card", only(get(card)))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(reg.clone(), rate))
        .with_state(reg)
        .merge(well_known)
}

async fn wrong_method() -> ArdError {
    ArdError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        "use POST for /search and /explore, GET for /agents",
    )
}

/// The per-source token bucket.
async fn rate(State(reg): State<Arc<Registry>>, req: Request, next: Next) -> Response {
    let source = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| Source::of(c.0.ip()).key());
    if let Some(source) = source {
        let ok = reg
            .rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(source.as_bytes(), Instant::now());
        if !ok {
            return ArdError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "RATE_LIMIT_EXCEEDED",
                format!("more than {RATE_PER_SECOND} requests a second from your address; retry in a second"),
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The body as a JSON object, or the envelope of why not.
fn body_object(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Value>, ArdError> {
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ArdError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PAYLOAD_TOO_LARGE",
                format!("the request body is over {MAX_BODY} bytes"),
            )
        } else {
            ArdError::invalid(format!("the request body could not be read: {r}"))
        }
    })?;
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ArdError::invalid("the request body must be a JSON object")),
        Err(e) => Err(ArdError::invalid(format!(
            "the request body is not JSON: {e}"
        ))),
    }
}

/// `query.text` and `query.filter` (spec section 7.1).
fn parse_query(body: &Map<String, Value>) -> Result<(Option<String>, Filter), ArdError> {
    let q = match body.get("query") {
        None | Some(Value::Null) => return Ok((None, Filter::new())),
        Some(Value::Object(q)) => q,
        // The brief form `"query": "text"` is taken as the text.
        Some(Value::String(s)) => return Ok((Some(check_text(s)?), Filter::new())),
        Some(_) => return Err(ArdError::invalid("query must be an object {text, filter}")),
    };
    let text = match q.get("text") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(check_text(s)?),
        Some(_) => return Err(ArdError::invalid("query.text must be a string")),
    };
    let filter = match q.get("filter") {
        None | Some(Value::Null) => Filter::new(),
        Some(Value::Object(f)) => parse_filter(f)?,
        Some(_) => return Err(ArdError::invalid("query.filter must be an object")),
    };
    Ok((text, filter))
}

fn check_text(s: &str) -> Result<String, ArdError> {
    if s.len() > MAX_TEXT_LEN {
        return Err(ArdError::invalid(format!(
            "query.text is {} bytes, over {MAX_TEXT_LEN}",
            s.len()
        )));
    }
    Ok(s.to_owned())
}

fn parse_filter(f: &Map<String, Value>) -> Result<Filter, ArdError> {
    if f.len() > MAX_FILTER_KEYS {
        return Err(ArdError::invalid(format!(
            "query.filter has {} keys, over {MAX_FILTER_KEYS}",
            f.len()
        )));
    }
    let mut out = Filter::new();
    for (k, v) in f {
        if !index::known_field(k) {
            return Err(ArdError::invalid(format!(
                "filter key {k:?} is not supported; use type, publisher, tags, capabilities, \
                 identifier, version, displayName, trustManifest.identity or metadata.did"
            )));
        }
        let vals: Vec<&Value> = match v {
            Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        if vals.len() > MAX_FILTER_VALUES {
            return Err(ArdError::invalid(format!(
                "filter key {k:?} has {} values, over {MAX_FILTER_VALUES}",
                vals.len()
            )));
        }
        let mut strs = Vec::new();
        for v in vals {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                _ => {
                    return Err(ArdError::invalid(format!(
                        "filter key {k:?}: values must be strings"
                    )))
                }
            };
            if s.len() > MAX_VALUE_LEN {
                return Err(ArdError::invalid(format!(
                    "filter key {k:?}: a value is over {MAX_VALUE_LEN} bytes"
                )));
            }
            strs.push(s);
        }
        out.insert(k.clone(), strs);
    }
    Ok(out)
}

/// A page size: absent → `default`, else 1..=[`MAX_PAGE`].
fn page_size(v: Option<&Value>, default: usize) -> Result<usize, ArdError> {
    match v {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| ArdError::invalid(format!("pageSize must be 1..={MAX_PAGE}, got {v}"))),
    }
}

/// A page token: the offset of the page, as this registry wrote it.
fn page_token(v: Option<&str>) -> Result<usize, ArdError> {
    match v {
        None | Some("") => Ok(0),
        Some(t) => t
            .strip_prefix("o")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= index::MAX_INDEXED)
            .ok_or_else(|| ArdError::invalid("pageToken is not one this registry gave")),
    }
}

fn next_token(offset: usize, taken: usize, total: usize) -> Option<String> {
    (offset + taken < total).then(|| format!("o{}", offset + taken))
}

async fn search(State(reg): State<Arc<Registry>>, body: Result<Bytes, BytesRejection>) -> Answer {
    let body = body_object(body)?;
    let (text, filter) = parse_query(&body)?;
    let text = text
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| ArdError::invalid("query.text is required for /search"))?;
    let size = page_size(
        body.get("pageSize").or_else(|| body.get("limit")),
        DEFAULT_SEARCH_PAGE,
    )?;
    match body.get("federation") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if ["auto", "referrals", "none"].contains(&f.as_str()) => {}
        Some(f) => {
            return Err(ArdError::invalid(format!(
                "federation must be auto, referrals or none, got {f}"
            )))
        }
    }
    let offset = page_token(body.get("pageToken").and_then(Value::as_str))?;
    let ix = reg.index().await?;
    let hits = ix.search(Some(&text), &filter, unix_now());
    let page: Vec<Value> = hits
        .iter()
        .skip(offset)
        .take(size)
        .map(|h| {
            let mut e = reg.entry(&ix.entries[h.entry]);
            e["score"] = json!(h.score);
            e["source"] = json!(format!("{}/", reg.public_base));
            // A metadata value is a scalar (the schema's `metadata`): the reasons as one string.
            e["metadata"]["matched"] = json!(h.reasons.join(", "));
            e
        })
        .collect();
    let mut out = json!({"results": page, "referrals": []});
    if let Some(t) = next_token(offset, size, hits.len()) {
        out["pageToken"] = json!(t);
    }
    Ok(axum::Json(out))
}

async fn explore(State(reg): State<Arc<Registry>>, body: Result<Bytes, BytesRejection>) -> Answer {
    let body = body_object(body)?;
    let (text, filter) = parse_query(&body)?;
    let facets = body
        .get("resultType")
        .and_then(|r| r.get("facets"))
        .and_then(Value::as_array)
        .filter(|f| !f.is_empty())
        .ok_or_else(|| {
            ArdError::invalid("resultType.facets is required: a list of {field, limit, minCount}")
        })?;
    if facets.len() > MAX_FACETS {
        return Err(ArdError::invalid(format!(
            "{} facets asked, at most {MAX_FACETS}",
            facets.len()
        )));
    }
    let ix = reg.index().await?;
    let hits = ix.search(text.as_deref(), &filter, unix_now());
    let mut out = Map::new();
    for f in facets {
        let field = f
            .get("field")
            .and_then(Value::as_str)
            .ok_or_else(|| ArdError::invalid("each facet needs a field"))?;
        let limit = page_size(f.get("limit"), 20)?;
        let min = match f.get("minCount") {
            None | Some(Value::Null) => 1,
            Some(v) => v
                .as_u64()
                .ok_or_else(|| ArdError::invalid("minCount must be a non-negative integer"))?,
        };
        let facet = index::facet(&ix, &hits, field, limit, min).ok_or_else(|| {
            ArdError::invalid(format!(
                "facet field {field:?} is not supported; use type, publisher, tags or capabilities"
            ))
        })?;
        out.insert(field.to_owned(), facet);
    }
    Ok(axum::Json(
        json!({"resultType": "facets", "facets": out, "total": hits.len()}),
    ))
}

/// `GET /agents?filter=…&orderBy=…&pageSize=…&pageToken=…` (spec section 7.4, Appendix A).
async fn list(State(reg): State<Arc<Registry>>, RawQuery(q): RawQuery) -> Answer {
    let q = q.unwrap_or_default();
    if q.len() > MAX_BODY {
        return Err(ArdError::invalid(format!(
            "the query string is over {MAX_BODY} bytes"
        )));
    }
    let (mut filter, mut order, mut size, mut token) = (None, None, None, None);
    for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
        let slot = match &*k {
            "filter" => &mut filter,
            "orderBy" => &mut order,
            "pageSize" => &mut size,
            "pageToken" => &mut token,
            other => {
                return Err(ArdError::invalid(format!(
                    "unknown parameter {other:?}; use filter, orderBy, pageSize, pageToken"
                )))
            }
        };
        *slot = Some(v.into_owned());
    }
    let size = match size {
        None => DEFAULT_LIST_PAGE,
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                ArdError::invalid(format!("pageSize must be 1..={MAX_PAGE}, got {s:?}"))
            })?,
    };
    let offset = page_token(token.as_deref())?;
    let conds = match filter.as_deref() {
        None | Some("") => Vec::new(),
        Some(f) => parse_ebnf(f)?,
    };
    let ix = reg.index().await?;
    let now = unix_now();
    let mut entries: Vec<&index::Entry> = ix
        .search(None, &Filter::new(), now)
        .into_iter()
        .map(|h| &ix.entries[h.entry])
        .filter(|e| conds.iter().all(|c| c.holds(e)))
        .collect();
    match order.as_deref().map(str::trim) {
        None | Some("") | Some("updatedAt DESC") => {}
        Some("updatedAt") | Some("updatedAt ASC") => entries.reverse(),
        Some("displayName") | Some("displayName ASC") | Some("name") => {
            entries.sort_by(|a, b| a.name.cmp(&b.name).then(a.identifier.cmp(&b.identifier)))
        }
        Some("displayName DESC") | Some("name DESC") => {
            entries.sort_by(|a, b| b.name.cmp(&a.name).then(a.identifier.cmp(&b.identifier)))
        }
        Some(o) => {
            return Err(ArdError::invalid(format!(
                "orderBy {o:?} is not supported; use displayName or updatedAt, ASC or DESC"
            )))
        }
    }
    let total = entries.len();
    let items: Vec<Value> = entries
        .iter()
        .skip(offset)
        .take(size)
        .map(|e| reg.entry(e))
        .collect();
    let mut out = json!({"items": items, "total": total});
    if let Some(t) = next_token(offset, size, total) {
        out["pageToken"] = json!(t);
    }
    Ok(axum::Json(out))
}

/// One condition of a `GET /agents` filter.
#[derive(Debug, PartialEq)]
enum Cond {
    /// `type`, `publisherId`: one of the values.
    Any(&'static str, Vec<String>),
    /// `displayName`: contains, case-insensitive.
    Name(String),
    /// `updatedAfter`/`createdAfter`: issued after, unix seconds.
    After(u64),
}

impl Cond {
    fn holds(&self, e: &index::Entry) -> bool {
        match self {
            Cond::Any(field, want) => e
                .values(field)
                .is_some_and(|have| have.iter().any(|h| want.iter().any(|w| w == h))),
            Cond::Name(n) => e.name.to_lowercase().contains(n),
            Cond::After(t) => e.issued_at > *t,
        }
    }
}

/// Appendix A's filter: `field = value` (value quoted or not; comma-separated values are ORed;
/// `>` for the timestamps), conditions joined by `AND`.
fn parse_ebnf(f: &str) -> Result<Vec<Cond>, ArdError> {
    let bad = |why: &str| {
        ArdError::invalid(format!(
            "filter {f:?}: {why}; write e.g. type = 'application/a2a-agent-card+json' AND \
             updatedAfter > '2026-01-01T00:00:00Z'"
        ))
    };
    let mut out = Vec::new();
    for part in f.split(" AND ").take(MAX_FILTER_KEYS + 1) {
        if out.len() >= MAX_FILTER_KEYS {
            return Err(bad("too many conditions"));
        }
        let (key, op, val) = if let Some((k, v)) = part.split_once('=') {
            (k.trim(), '=', v.trim())
        } else if let Some((k, v)) = part.split_once('>') {
            (k.trim(), '>', v.trim())
        } else {
            return Err(bad("each condition is field = value"));
        };
        let unquote = |s: &str| s.trim().trim_matches(|c| c == '\'' || c == '"').to_owned();
        let vals: Vec<String> = val
            .split(',')
            .map(unquote)
            .take(MAX_FILTER_VALUES)
            .collect();
        out.push(match (key, op) {
            ("type", '=') => Cond::Any("type", vals),
            ("publisherId", '=') | ("publisher", '=') => Cond::Any("publisher", vals),
            ("displayName", '=') => Cond::Name(unquote(val).to_lowercase()),
            ("updatedAfter" | "createdAfter", '>') => {
                let t = chrono::DateTime::parse_from_rfc3339(&unquote(val))
                    .map(|t| t.timestamp())
                    .or_else(|_| {
                        chrono::NaiveDate::parse_from_str(&unquote(val), "%Y-%m-%d").map(|d| {
                            d.and_hms_opt(0, 0, 0)
                                .unwrap_or_default()
                                .and_utc()
                                .timestamp()
                        })
                    })
                    .map_err(|_| bad("the timestamp is not ISO 8601"))?;
                Cond::After(u64::try_from(t).unwrap_or(0))
            }
            _ => {
                return Err(bad(
                    "the fields are type, publisherId, displayName, updatedAfter",
                ))
            }
        });
    }
    Ok(out)
}

/// The entry's DID: the identifier as given, a `urn:air:` one or a DID.
fn check_identifier(identifier: &str) -> Result<(), ArdError> {
    if identifier.len() > MAX_VALUE_LEN
        || !(identifier.starts_with("urn:air:") || identifier.starts_with("did:"))
    {
        return Err(ArdError::invalid(format!(
            "{:?} is not an identifier of this registry: use the urn:air: identifier of an \
             entry (percent-encoded in the path) or its DID",
            identifier.chars().take(80).collect::<String>()
        )));
    }
    Ok(())
}

fn not_found(identifier: &str) -> ArdError {
    ArdError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("no live entry {identifier:?} in this registry; search for it with POST /search"),
    )
}

/// The path's identifier, percent-decoded; a bad encoding in the envelope too.
fn identifier_of(p: Result<Path<String>, PathRejection>) -> Result<String, ArdError> {
    let Path(identifier) =
        p.map_err(|e| ArdError::invalid(format!("the identifier in the path: {e}")))?;
    check_identifier(&identifier)?;
    Ok(identifier)
}

async fn lookup(
    State(reg): State<Arc<Registry>>,
    p: Result<Path<String>, PathRejection>,
) -> Answer {
    let identifier = identifier_of(p)?;
    let ix = reg.index().await?;
    let e = ix
        .get(&identifier, unix_now())
        .ok_or_else(|| not_found(&identifier))?;
    Ok(axum::Json(reg.entry(e)))
}

async fn card(State(reg): State<Arc<Registry>>, p: Result<Path<String>, PathRejection>) -> Answer {
    let identifier = identifier_of(p)?;
    let did = if identifier.starts_with("did:") {
        identifier.clone()
    } else {
        urn::to_did(&identifier).ok_or_else(|| not_found(&identifier))?
    };
    let store = reg.store.clone();
    let stored = tokio::task::spawn_blocking(move || store.get(&did, unix_now()))
        .await
        .map_err(ArdError::internal)?
        .map_err(|e| ArdError::invalid(e.to_string()))?
        .ok_or_else(|| not_found(&identifier))?;
    let ad: Advertisement = serde_json::from_slice(&stored.bytes).map_err(ArdError::internal)?;
    Ok(axum::Json(ad.card))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_filters_parse() {
        let c =
            parse_ebnf("type = 'application/a2a-agent-card+json' AND publisherId = a.com,b.com")
                .unwrap();
        assert_eq!(
            c,
            vec![
                Cond::Any("type", vec!["application/a2a-agent-card+json".into()]),
                Cond::Any("publisher", vec!["a.com".into(), "b.com".into()]),
            ]
        );
        assert_eq!(
            parse_ebnf("updatedAfter > '2026-01-01'").unwrap(),
            vec![Cond::After(1_767_225_600)]
        );
        assert!(parse_ebnf("secret = x").is_err());
        assert!(parse_ebnf("nonsense").is_err());
        let many = vec!["type = x"; 100].join(" AND ");
        assert!(parse_ebnf(&many).is_err());
    }

    #[test]
    fn page_bounds() {
        assert_eq!(page_size(None, 10).unwrap(), 10);
        assert!(page_size(Some(&json!(101)), 10).is_err());
        assert!(page_size(Some(&json!(0)), 10).is_err());
        assert!(page_size(Some(&json!(-1)), 10).is_err());
        assert!(page_token(Some("o99999999")).is_err());
        assert_eq!(page_token(Some("o20")).unwrap(), 20);
    }
}
