//! The node's HTTP server: the well-known files and the admin API.
//!
//! - `GET /.well-known/did.json`: the node's did:key document.
//! - `GET /.well-known/agent-card.json`: the node's own A2A Agent Card, signed by the node key.
//! - `/admin/v1/…`: see [`crate::admin`].

use std::net::SocketAddr;

use agentnet_did::{card, didkey, SecretKey};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, AdminState};

/// The skill id and tag of the node's own card.
pub const NODE_SKILL: &str = "agentnet-node";

/// The node's own Agent Card, unsigned: it describes the node and points at `url`.
pub fn node_card(url: &str) -> Value {
    json!({
        "name": "agentnet node",
        "description": "A peer node of agentnet, the open network of AI agents: it publishes and discovers signed Agent Cards.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {},
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": [{
            "id": NODE_SKILL,
            "name": "agentnet node",
            "description": "Publishes and discovers Agent Cards on the agentnet network.",
            "tags": ["agentnet"]
        }]
    })
}

/// The well-known documents, built once at start.
#[derive(Debug, Clone)]
pub struct WellKnown {
    did_json: String,
    card_json: String,
}

impl WellKnown {
    /// The documents of the node with `key`, reachable at `url`.
    pub fn new(key: &SecretKey, url: &str) -> Result<Self, card::CardSignatureError> {
        let did = key.did_key();
        let doc = didkey::document(&key.public(), Default::default()).to_json();
        let signed = card::sign(
            &node_card(url),
            key,
            &did.with_fragment(did.method_specific_id()),
        )?;
        Ok(Self {
            did_json: doc.to_string(),
            card_json: signed.to_string(),
        })
    }
}

/// The whole HTTP surface.
pub fn router(well_known: WellKnown, admin: AdminState) -> Router {
    let did_json = well_known.did_json;
    let card_json = well_known.card_json;
    Router::new()
        .route(
            "/.well-known/did.json",
            get(move || async move {
                ([(header::CONTENT_TYPE, "application/did+json")], did_json).into_response()
            }),
        )
        .route(
            "/.well-known/agent-card.json",
            get(move || async move {
                ([(header::CONTENT_TYPE, "application/json")], card_json).into_response()
            }),
        )
        .merge(admin::router(admin))
}

/// Serve `router` on the already bound `listener` until `shutdown`; in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.cancelled_owned())
    .await
}
