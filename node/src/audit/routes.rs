//! The admin API's audit routes: append a verified entry, read pages of the log, verify it.

use std::sync::Arc;

use agentnet_did::Resolver;
use serde_json::{json, Value};

use super::{verify_and_append, AuditError, AuditLog, NewEntry, MAX_PAGE};

#[derive(Clone)]
struct RouteState {
    log: Arc<AuditLog>,
    resolver: Resolver,
}

fn api_error(status: u16, reason: &str, error: impl std::fmt::Display) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_REQUEST),
        axum::Json(json!({"error": error.to_string(), "reason": reason})),
    )
        .into_response()
}

/// The admin routes (mounted behind the admin guard by the daemon): `POST /admin/v1/audit`
/// appends a [`NewEntry`] whose receipt verifies; `GET /admin/v1/audit?after=N&limit=M`
/// returns `{entries: [...], head: {seq, digest, checkpoint}, strangersRefused: n}`; `GET /admin/v1/audit/verify` a [`Report`].
pub fn router(log: Arc<AuditLog>, resolver: Resolver) -> axum::Router {
    use axum::extract::{RawQuery, State};
    use axum::response::IntoResponse;
    use axum::routing::get;
    async fn append(
        State(s): State<RouteState>,
        axum::Json(new): axum::Json<NewEntry>,
    ) -> axum::response::Response {
        match verify_and_append(&s.log, &s.resolver, new).await {
            Ok(e) => axum::Json(e).into_response(),
            Err(
                e @ (AuditError::Receipt(_) | AuditError::NoRequest | AuditError::NotSent { .. }),
            ) => api_error(400, "receipt_invalid", e),
            Err(e @ AuditError::Full(_)) => api_error(507, "audit_full", e),
            Err(e @ AuditError::StrangersFull(_)) => api_error(507, "audit_strangers_full", e),
            Err(e) => api_error(500, "internal", e),
        }
    }
    async fn page(State(s): State<RouteState>, RawQuery(q): RawQuery) -> axum::response::Response {
        let log = s.log.clone();
        let (mut after, mut limit) = (0u64, MAX_PAGE);
        for (k, v) in url::form_urlencoded::parse(q.unwrap_or_default().as_bytes()) {
            match (&*k, v.parse::<u64>()) {
                ("after", Ok(n)) => after = n,
                ("limit", Ok(n)) => limit = (n as usize).clamp(1, MAX_PAGE),
                _ => {
                    return api_error(
                        400,
                        "bad_request",
                        format!("bad query parameter {k}={v}: after and limit take numbers"),
                    )
                }
            }
        }
        let r = tokio::task::spawn_blocking(move || log.raw_page(after, limit)).await;
        match r {
            Ok(Ok(page)) => {
                let entries: Vec<Value> = page
                    .into_iter()
                    .map(|(seq, b)| json!({"seq": seq, "raw": String::from_utf8_lossy(&b)}))
                    .collect();
                let (seq, digest, checkpoint) = s.log.signed_head();
                axum::Json(json!({"entries": entries,
                    "head": {"seq": seq, "digest": digest, "checkpoint": checkpoint},
                    "strangersRefused": s.log.strangers_refused()}))
                .into_response()
            }
            Ok(Err(e)) => api_error(500, "internal", e),
            Err(e) => api_error(500, "internal", e),
        }
    }
    async fn verify(State(s): State<RouteState>) -> axum::response::Response {
        axum::Json(s.log.verify(&s.resolver).await).into_response()
    }
    axum::Router::new()
        .route("/admin/v1/audit", get(page).post(append))
        .route("/admin/v1/audit/verify", get(verify))
        .layer(axum::extract::DefaultBodyLimit::max(2 << 20))
        .with_state(RouteState { log, resolver })
}
