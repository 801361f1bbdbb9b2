//! The node's HTTP: the bounded server both listeners run ([`server`]: timeouts, connection
//! caps, trusted proxies), and the public listener's (`--http`) own routes, the well-known
//! files. Hosted agents ([`crate::hosted`]) and ARD ([`crate::ard`]) add theirs to it. The admin
//! API has a listener of its own ([`crate::admin`]), so no route of this router can expose it.
//!
//! - `GET /.well-known/did.json`: the node's did:key document.
//! - `GET /.well-known/agent-card.json`: the node's own A2A Agent Card, signed by the node key,
//!   with the caching headers of every card we serve (`Cache-Control`, `ETag`,
//!   `Last-Modified`, 304 on a matching validator: [`agentnet_a2a::server::ServedCard`]).

pub mod server;

use std::sync::Arc;

use agentnet_a2a::server::ServedCard;
use agentnet_did::{card, didkey, SecretKey};
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

/// The skill id and tag of the node's own card.
pub const NODE_SKILL: &str = "agentnet-node";

/// The node's own Agent Card, unsigned. It advertises only what exists: the node serves no A2A
/// interface yet, so `supportedInterfaces` is empty (a client finds no binding to call instead
/// of one that answers 404); the A2A interfaces are listed here when the node serves them.
pub fn node_card() -> Value {
    json!({
        "name": "agentnet node",
        "description": "A peer node of agentnet, the open network of AI agents: it publishes and discovers signed Agent Cards.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [],
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
    /// The documents of the node with `key`.
    pub fn new(key: &SecretKey) -> Result<Self, card::CardSignatureError> {
        let did = key.did_key();
        let doc = didkey::document(&key.public(), Default::default()).to_json();
        let signed = card::sign(
            &node_card(),
            key,
            &did.with_fragment(did.method_specific_id()),
        )?;
        Ok(Self {
            did_json: doc.to_string(),
            card_json: signed.to_string(),
        })
    }

    /// The signed node card, as served.
    pub fn card_json(&self) -> &str {
        &self.card_json
    }
}

/// The public HTTP surface: the well-known files.
pub fn router(well_known: WellKnown) -> Router {
    let did_json = well_known.did_json;
    let card = Arc::new(ServedCard::new(
        &serde_json::from_str::<Value>(&well_known.card_json).unwrap_or_default(),
    ));
    Router::new()
        .route(
            "/.well-known/did.json",
            get(move || async move {
                ([(header::CONTENT_TYPE, "application/did+json")], did_json).into_response()
            }),
        )
        .route(
            "/.well-known/agent-card.json",
            get(move |headers: HeaderMap| async move { card.response(&headers) }),
        )
}
