//! The local admin API (`/admin/v1/…`) the `publish`, `discover` and `peers` commands use, and
//! its client.
//!
//! It has a listener of its own (`--admin`, loopback only, see [`crate::daemon`]) and every
//! route requires the credential from the data directory ([`crate::data_dir::token`]): `Authorization:
//! Bearer <token>` with the token of `<data-dir>/admin.token`. In order, a request is refused
//! - `403 forbidden` if the peer address is not loopback, the `Host` is not a loopback name
//!   (DNS rebinding), or an `Origin` is present and is not exactly the admin listener's own
//!   origin (a web page);
//! - `401 unauthorized` without the right token (compared in constant time);
//! - `415 unsupported_media_type` if it has a body (any method but `GET`/`HEAD`) whose
//!   `Content-Type` is not `application/json`: a browser's "simple" cross-site `text/plain` POST
//!   never reaches a handler.
//!
//! Private keys never travel over HTTP: `agentnet publish --key` installs the agent's key into
//! `<data-dir>/agents/` ([`AgentKeys`]) and the request names the agent's DID.
//!
//! | route | body / query | answer |
//! |---|---|---|
//! | `POST /admin/v1/publish` | [`PublishRequest`] | [`Published`] (kept, published again at every start) |
//! | `POST /admin/v1/unpublish` | [`UnpublishRequest`] | [`Unpublished`]; 404 `not_found` if this node does not publish it |
//! | `GET /admin/v1/discover?skill=a&skill=b&limit=N` | | `[`[`Found`]`]` |
//! | `GET /admin/v1/peers` | | [`Peers`] |
//! | `POST /admin/v1/adverts` | a signed advertisement | [`Published`] |
//! | `GET /admin/v1/adverts/{did}` | | the stored advertisement, as received |
//! | `GET /admin/v1/metrics` | | libp2p metrics (gossipsub, bandwidth) and the node's own counters (`agentnet_*`) in the Prometheus text format |
//! | `GET /admin/v1/status` | | what the status page (`GET /status`, no token) shows (the status page's report) |
//!
//! Errors are [`ApiError`] bodies: `{"error": "...", "reason": "..."}`, where `reason` is the
//! validator's short reason (`stale_seq`, `bad_card`, …) when it refused an advertisement, and
//! otherwise one of `bad_request` (400: bad input), `unknown_agent` (400: no key for that DID),
//! `unauthorized` (401), `forbidden` (403), `not_found` (404), `unsupported_media_type` (415),
//! `too_many` (429), `internal` (500: the node's own failure) or `unavailable` (503: the network
//! is stopped or unreachable).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentnet_did::SecretKey;
use agentnet_discovery::net::{self, unix_now};
use agentnet_discovery::store::{StoreError, StoredAdvert};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path as UrlPath, RawQuery, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::data_dir::token::Token;
use crate::data_dir::{AgentKeyError, AgentKeys};
use crate::network::directory::{
    self, check_tags, AgentSummary, BoxFuture, Directory, Peer, Stats, TagError,
};
use crate::network::publisher::{PublishError, Published, Publisher, Unpublished};

mod client;
mod server;
pub mod status_page;

/// The JSON's path (behind the admin guard).
pub const STATUS_PATH: &str = "/admin/v1/status";

pub use client::Client;
pub use server::{router, router_with, AdminState, EndorseBody, EndorsementView, Guard};

pub use crate::network::directory::{Error as ClientError, Found, Peers, DEFAULT_LIMIT, MAX_LIMIT};

/// Default lifetime of a publication, seconds.
pub const DEFAULT_TTL: u64 = 3600;
/// Largest admin request body.
pub const MAX_BODY: usize = 256 * 1024;
/// Largest admin response the client reads.
pub const MAX_RESPONSE: usize = 8 * 1024 * 1024;

/// `POST /admin/v1/publish`. Unknown members are refused, a private `key` included.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// The A2A Agent Card, signed or not.
    pub card: Value,
    /// Lifetime of each advertisement, seconds; re-announced at 2/3 of it.
    #[serde(default = "default_ttl")]
    pub ttl_secs: u64,
    /// The agent's did:key, whose private key is installed in `<data-dir>/agents/`; default:
    /// the node's own DID and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub did: Option<String>,
}

/// `POST /admin/v1/unpublish`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnpublishRequest {
    /// The agent's DID.
    pub did: String,
}

fn default_ttl() -> u64 {
    DEFAULT_TTL
}

/// An error answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong, for people.
    pub error: String,
    /// Short machine reason (validator reasons, `not_found`, `bad_request`, …).
    pub reason: String,
    #[serde(skip)]
    status: u16,
}

impl ApiError {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> u16 {
        self.status
    }

    fn new(status: StatusCode, reason: &str, error: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            reason: reason.into(),
            status: status.as_u16(),
        }
    }

    fn bad_request(error: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", error)
    }

    fn internal(error: impl std::fmt::Display) -> Self {
        tracing::warn!(%error, "admin request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            error.to_string(),
        )
    }

    fn forbidden(error: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", error)
    }

    fn rejected(r: &agentnet_discovery::advert::Reject, error: String) -> Self {
        let status = if r.penalize() {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::CONFLICT
        };
        Self::new(status, r.reason(), error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (status, Json(self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

impl From<PublishError> for ApiError {
    fn from(e: PublishError) -> Self {
        if let Some(r) = e.reject() {
            return Self::rejected(r, e.to_string());
        }
        match &e {
            PublishError::Card(_) | PublishError::Interfaces(_) => {
                Self::new(StatusCode::BAD_REQUEST, "bad_card", e.to_string())
            }
            PublishError::Ttl { .. } => Self::bad_request(e.to_string()),
            PublishError::TooMany => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many", e.to_string())
            }
            PublishError::Seq {
                source: StoreError::InvalidInput { .. },
                ..
            } => Self::bad_request(e.to_string()),
            PublishError::Keep {
                source: StoreError::InvalidInput { .. },
                ..
            } => Self::bad_request(e.to_string()),
            PublishError::Net { source, .. } => from_net_kind(source, e.to_string()),
            _ => Self::internal(&e),
        }
    }
}

impl From<TagError> for ApiError {
    fn from(e: TagError) -> Self {
        Self::bad_request(e.to_string())
    }
}

impl From<AgentKeyError> for ApiError {
    fn from(e: AgentKeyError) -> Self {
        match &e {
            AgentKeyError::NotDidKey(_) | AgentKeyError::Identity { .. } => {
                Self::bad_request(e.to_string())
            }
            AgentKeyError::Unknown { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "unknown_agent", e.to_string())
            }
            _ => Self::internal(&e),
        }
    }
}

/// The status of a network-layer failure: the validator's refusal is the caller's, a stopped
/// or unreachable network is 503, a store failure is ours.
fn from_net_kind(e: &net::Error, error: String) -> ApiError {
    match e {
        net::Error::Rejected(r) => ApiError::rejected(r, error),
        net::Error::Stopped | net::Error::Network(_) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", error)
        }
        _ => ApiError::internal(error),
    }
}

fn from_net(e: net::Error) -> ApiError {
    from_net_kind(&e, e.to_string())
}

impl From<ApiError> for ClientError {
    /// The in-process answer as the HTTP client would have reported it.
    fn from(e: ApiError) -> Self {
        ClientError::Refused {
            status: e.status,
            reason: e.reason,
            error: e.error,
        }
    }
}
