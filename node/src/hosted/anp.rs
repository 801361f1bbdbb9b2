//! The ANP face of a hosted agent: its Agent Description, its OpenRPC interface and a JSON-RPC
//! endpoint, beside its A2A routes (`docs/ANP.md`).
//!
//! | route (under `/a2a/<id>`) | what |
//! | --- | --- |
//! | `GET /ad.json` | the Agent Description (JSON-LD, `ad:AgentDescription`): DID, name, description, skills, the interface list, security `didwba` |
//! | `GET /anp/interface.json` | the OpenRPC 1.3 document of the endpoint (also embedded in `ad.json`, as the ANP SDK reads it) |
//! | `POST /anp/rpc` | JSON-RPC 2.0: `send` (`text`, optional `taskId`, `contextId`) and `getTask` (`taskId`) |
//!
//! and on the node, `GET /.well-known/agent-descriptions`: a `CollectionPage` listing every hosted
//! agent's `ad.json`.
//!
//! A call runs the agent's A2A engine (the same turn, task store and bounds: per owner, per
//! source, in all) as the caller the node's DID authenticator identifies: RFC 9421 signatures
//! as ANP makes them, and the access tokens it hands out. The legacy `Authorization: DIDWba`
//! header signs no request, so it is refused here (the A2A routes take it only to start a task).
//! An agent whose policy is `did` refuses an unsigned call, and any agent a call whose
//! signature does not verify, with HTTP 401 and a JSON-RPC error. The body is read within the
//! engine's `max_body_bytes` (413), and must be `application/json` (415).

use std::sync::Arc;

use agentnet_a2a::auth::{Authenticator, Caller, Policy, RequestParts, Source};
use agentnet_a2a::server::Server;
use agentnet_a2a::types::{GetTaskRequest, SendMessageRequest, SendMessageResponse};
use agentnet_a2a::ProtocolError;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

/// The Agent Description's path under the agent's URL.
pub const AD_PATH: &str = "/ad.json";
/// The OpenRPC document's path under the agent's URL.
pub const INTERFACE_PATH: &str = "/anp/interface.json";
/// The JSON-RPC endpoint's path under the agent's URL.
pub const RPC_PATH: &str = "/anp/rpc";
pub use crate::call::anp::EXTENSION;
/// Where the node lists its agents' descriptions.
pub const WELL_KNOWN: &str = "/.well-known/agent-descriptions";
/// The JSON-LD context of the documents.
fn context() -> Value {
    json!({
        "@vocab": "https://schema.org/",
        "did": "https://w3id.org/did#",
        "ad": "https://agent-network-protocol.com/ad#",
    })
}

/// The ANP face of one agent.
pub struct Face {
    ad: Value,
    interface: Value,
    ad_url: String,
    name: String,
    require_did: bool,
    auth: Arc<dyn Authenticator>,
}

impl std::fmt::Debug for Face {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Face")
            .field("ad_url", &self.ad_url)
            .finish_non_exhaustive()
    }
}

/// The card extension linking the description at `ad_url` ([`EXTENSION`]).
pub fn extension(ad_url: &str) -> Value {
    json!({
        "uri": EXTENSION,
        "description": "This agent's ANP Agent Description (JSON-LD): an OpenRPC interface and a JSON-RPC endpoint running the same agent, signed requests as on A2A.",
        "required": false,
        "params": {"url": ad_url},
    })
}

/// The OpenRPC document of an agent whose endpoint is `rpc_url`.
pub fn interface_for(name: &str, description: &str, rpc_url: &str) -> Value {
    let text = json!({"name": "text", "description": "The message to the agent", "required": true, "schema": {"type": "string"}});
    let task_id = |required: bool| json!({"name": "taskId", "description": "The task to continue (an INPUT_REQUIRED task) or to read", "required": required, "schema": {"type": "string"}});
    let context_id = json!({"name": "contextId", "description": "The conversation the task belongs to", "required": false, "schema": {"type": "string"}});
    let result = json!({"name": "turn", "schema": {"$ref": "#/components/schemas/Turn"}});
    json!({
        "openrpc": "1.3.2",
        "info": {"title": name, "version": env!("CARGO_PKG_VERSION"), "description": description},
        "servers": [{"name": "jsonrpc", "url": rpc_url}],
        "methods": [
            {
                "name": "send",
                "summary": "Send a message",
                "description": format!("Send a message to {name}: {description}. Runs one turn of the agent and answers its task's state and text."),
                "params": [text, task_id(false), context_id],
                "result": result,
            },
            {
                "name": "getTask",
                "summary": "Read a task",
                "description": "Read one of your tasks of this agent by its id.",
                "params": [task_id(true)],
                "result": result,
            },
        ],
        "components": {"schemas": {"Turn": {
            "type": "object",
            "properties": {
                "taskId": {"type": "string"},
                "contextId": {"type": "string"},
                "state": {"type": "string", "description": "The A2A task state, such as TASK_STATE_COMPLETED or TASK_STATE_INPUT_REQUIRED"},
                "text": {"type": "string", "description": "The artifacts' text, or the agent's question"},
                "task": {"type": "object", "description": "The A2A 1.0 task"},
            },
        }}},
    })
}

/// The Agent Description of an agent with `card` (its A2A card, unsigned fields read), `did`,
/// served at `agent_url`.
pub fn ad_for(card: &Value, did: &str, agent_url: &str, require_did: bool) -> (Value, Value) {
    let name = card["name"].as_str().unwrap_or("agent");
    let description = card["description"].as_str().unwrap_or("");
    let rpc_url = format!("{agent_url}{RPC_PATH}");
    let interface = interface_for(name, description, &rpc_url);
    let skills: Vec<Value> = card["skills"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|k| {
                    json!({
                        "@type": "ad:Skill",
                        "identifier": k["id"],
                        "name": k["name"],
                        "description": k["description"],
                        "keywords": k["tags"],
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let keywords: Vec<Value> = skills
        .iter()
        .filter_map(|s| s["keywords"].as_array())
        .flatten()
        .cloned()
        .collect();
    let mut ad = json!({
        "@context": context(),
        "@type": "ad:AgentDescription",
        "@id": format!("{agent_url}{AD_PATH}"),
        "protocolType": "ANP",
        "protocolVersion": "1.0.0",
        "type": "AgentDescription",
        "url": format!("{agent_url}{AD_PATH}"),
        "name": name,
        "did": did,
        "description": description,
        "version": card["version"],
        "keywords": keywords,
        "ad:skills": skills,
        "securityDefinitions": {"didwba_sc": {"scheme": "didwba", "in": "header", "name": "Authorization"}},
        "security": "didwba_sc",
        "interfaces": [
            {
                "@type": "ad:StructuredInterface",
                "type": "StructuredInterface",
                "protocol": "openrpc",
                "url": format!("{agent_url}{INTERFACE_PATH}"),
                "description": format!("JSON-RPC 2.0 interface of {name} (OpenRPC)"),
                "content": interface,
            },
            {
                "@type": "ad:StructuredInterface",
                "type": "StructuredInterface",
                "protocol": "A2A",
                "url": format!("{agent_url}/.well-known/agent-card.json"),
                "description": "The same agent over A2A 1.0 (JSON-RPC and HTTP+JSON): its signed Agent Card",
            },
        ],
    });
    if !require_did {
        ad["ad:anonymousCallers"] = json!(true);
    }
    (ad, interface)
}

impl Face {
    /// The face of the agent with `card`, `did`, at `agent_url`.
    pub fn new(
        card: &Value,
        did: &str,
        agent_url: &str,
        require_did: bool,
        auth: Arc<dyn Authenticator>,
    ) -> Face {
        let (ad, interface) = ad_for(card, did, agent_url, require_did);
        Face {
            name: card["name"].as_str().unwrap_or("agent").to_string(),
            ad_url: format!("{agent_url}{AD_PATH}"),
            ad,
            interface,
            require_did,
            auth,
        }
    }

    /// The Agent Description, as served.
    pub fn ad(&self) -> &Value {
        &self.ad
    }
}

/// The node's list of agent descriptions (`/.well-known/agent-descriptions`), served at
/// `public_base`.
pub fn well_known(public_base: &str, faces: &[&Face]) -> Value {
    json!({
        "@context": context(),
        "@type": "CollectionPage",
        "url": format!("{}{WELL_KNOWN}", public_base.trim_end_matches('/')),
        "items": faces.iter().map(|f| json!({
            "@type": "ad:AgentDescription",
            "name": f.name,
            "@id": f.ad_url,
        })).collect::<Vec<_>>(),
    })
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The routes of one agent's face, relative to the agent's URL, over its A2A `server`.
pub fn router(face: Arc<Face>, server: Arc<Server>) -> Router {
    let ad = face.ad.clone();
    let interface = face.interface.clone();
    Router::new()
        .route(
            AD_PATH,
            get(move || async move { json_response(StatusCode::OK, &ad) }),
        )
        .route(
            INTERFACE_PATH,
            get(move || async move { json_response(StatusCode::OK, &interface) }),
        )
        .route(RPC_PATH, post(rpc))
        .with_state((face, server))
}

fn rpc_error(status: StatusCode, id: &Value, e: &ProtocolError) -> Response {
    let mut r = json_response(
        status,
        &json!({"jsonrpc": "2.0", "id": id, "error": e.to_jsonrpc()}),
    );
    if matches!(e, ProtocolError::Unauthenticated(_)) {
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("DIDWba"));
    }
    r
}

async fn rpc(State((face, server)): State<(Arc<Face>, Arc<Server>)>, req: Request) -> Response {
    let null = Value::Null;
    let (parts, body) = req.into_parts();
    let limit = server.engine().limits().max_body_bytes;
    let too_large = || {
        rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &null,
            &ProtocolError::TooLarge(limit),
        )
    };
    if parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|len| len > limit as u64)
    {
        return too_large();
    }
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return too_large();
    };
    let ct = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &null,
            &ProtocolError::MediaType(ct.chars().take(100).collect()),
        );
    }
    let source = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| Source::of(c.0.ip()))
        .unwrap_or(Source::Local);
    let parsed: Result<Value, _> = serde_json::from_slice(&bytes);
    let request = match parsed {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            return rpc_error(
                StatusCode::OK,
                &null,
                &ProtocolError::InvalidRequest(
                    "a JSON-RPC request must be an object (batches are not supported)".into(),
                ),
            )
        }
        Err(e) => return rpc_error(StatusCode::OK, &null, &ProtocolError::Parse(e.to_string())),
    };
    let id = match &request["id"] {
        v @ (Value::String(_) | Value::Number(_) | Value::Null) => v.clone(),
        _ => {
            return rpc_error(
                StatusCode::OK,
                &null,
                &ProtocolError::InvalidRequest("id must be a string, a number or null".into()),
            )
        }
    };
    // Who calls: the same authenticator and policy as the agent's A2A routes.
    let identity = face
        .auth
        .authenticate(RequestParts {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
            body: &bytes,
        })
        .await;
    let policy = if face.require_did {
        Policy::Did
    } else {
        Policy::Open
    };
    let caller = match policy.admit(identity, source) {
        Ok(caller) => caller,
        Err(refusal) => {
            return rpc_error(
                StatusCode::UNAUTHORIZED,
                &id,
                &ProtocolError::Unauthenticated(refusal.message(
                    "this agent serves DID-signed calls only: sign the request with RFC 9421 \
                     HTTP Message Signatures (Signature-Input, Signature, Content-Digest) as a \
                     DID, as the ANP SDK does",
                )),
            )
        }
    };
    if request["jsonrpc"] != "2.0" {
        return rpc_error(
            StatusCode::OK,
            &id,
            &ProtocolError::InvalidRequest("jsonrpc must be \"2.0\"".into()),
        );
    }
    let params = match &request["params"] {
        Value::Null => json!({}),
        p @ Value::Object(_) => p.clone(),
        _ => {
            return rpc_error(
                StatusCode::OK,
                &id,
                &ProtocolError::InvalidParams("params must be an object".into()),
            )
        }
    };
    let result = match request["method"].as_str() {
        Some("send") => send(&server, &caller, &params).await,
        Some("getTask") => get_task(&server, &caller, &params).await,
        Some(m) => Err(ProtocolError::MethodNotFound(m.chars().take(64).collect())),
        None => Err(ProtocolError::InvalidRequest(
            "method must be a string".into(),
        )),
    };
    match result {
        Ok(r) => json_response(
            StatusCode::OK,
            &json!({"jsonrpc": "2.0", "id": id, "result": r}),
        ),
        Err(e) => rpc_error(StatusCode::OK, &id, &e),
    }
}

fn string_param(params: &Value, name: &str) -> Result<Option<String>, ProtocolError> {
    match &params[name] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(ProtocolError::InvalidParams(format!(
            "{name} must be a string"
        ))),
    }
}

async fn send(server: &Server, caller: &Caller, params: &Value) -> Result<Value, ProtocolError> {
    let text = string_param(params, "text")?
        .ok_or_else(|| ProtocolError::InvalidParams("send needs text (a string)".into()))?;
    let mut message = json!({
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        "messageId": uuid::Uuid::new_v4().to_string(),
    });
    for name in ["taskId", "contextId"] {
        if let Some(v) = string_param(params, name)? {
            message[name] = Value::String(v);
        }
    }
    let req: SendMessageRequest = serde_json::from_value(json!({"message": message}))
        .map_err(|e| ProtocolError::InvalidParams(e.to_string()))?;
    let task = match server.engine().send_message(caller, req).await? {
        SendMessageResponse::Task(t) => serde_json::to_value(&t),
        SendMessageResponse::Message(m) => {
            return Ok(json!({"text": text_of(&serde_json::to_value(&m).unwrap_or_default()), "message": m}))
        }
    }
    .map_err(|e| ProtocolError::Internal(format!("serializing: {e}")))?;
    Ok(turn(task))
}

async fn get_task(
    server: &Server,
    caller: &Caller,
    params: &Value,
) -> Result<Value, ProtocolError> {
    let id = string_param(params, "taskId")?
        .ok_or_else(|| ProtocolError::InvalidParams("getTask needs taskId (a string)".into()))?;
    let task = server
        .engine()
        .get_task(
            caller,
            GetTaskRequest {
                id,
                history_length: Some(0),
                tenant: None,
            },
        )
        .await?;
    let task = serde_json::to_value(&task)
        .map_err(|e| ProtocolError::Internal(format!("serializing: {e}")))?;
    Ok(turn(task))
}

/// The text parts of a message or artifact value, joined by newlines.
fn text_of(v: &Value) -> String {
    v["parts"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A task as an ANP caller reads it: its ids, state, and text (the artifacts', else the
/// status message's), with the A2A task beside.
fn turn(task: Value) -> Value {
    let mut text: Vec<String> = task["artifacts"]
        .as_array()
        .map(|a| a.iter().map(text_of).filter(|t| !t.is_empty()).collect())
        .unwrap_or_default();
    if text.is_empty() {
        let t = text_of(&task["status"]["message"]);
        if !t.is_empty() {
            text.push(t);
        }
    }
    json!({
        "taskId": task["id"],
        "contextId": task["contextId"],
        "state": task["status"]["state"],
        "text": text.join("\n"),
        "task": task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_embeds_an_openrpc_interface_the_sdk_parses() {
        let card = json!({"name": "Echo", "description": "Echoes", "version": "1",
            "skills": [{"id": "echo", "name": "Echo", "description": "Echoes", "tags": ["echo", "test"]}]});
        let (ad, interface) = ad_for(&card, "did:key:z6Mk", "http://127.0.0.1:1/a2a/echo", true);
        assert_eq!(ad["did"], "did:key:z6Mk");
        assert_eq!(ad["url"], "http://127.0.0.1:1/a2a/echo/ad.json");
        assert_eq!(ad["keywords"], json!(["echo", "test"]));
        let i = &ad["interfaces"][0];
        assert_eq!(
            (i["type"].as_str(), i["protocol"].as_str()),
            (Some("StructuredInterface"), Some("openrpc"))
        );
        assert_eq!(i["content"], interface);
        assert_eq!(
            interface["servers"][0]["url"],
            "http://127.0.0.1:1/a2a/echo/anp/rpc"
        );
        for m in interface["methods"].as_array().unwrap() {
            assert!(m["description"].as_str().is_some_and(|d| !d.is_empty()));
            assert!(m["result"].is_object());
            assert!(m["params"].is_array());
        }
    }

    #[test]
    fn a_turn_reads_artifacts_then_the_question() {
        let t = turn(
            json!({"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"parts": [{"text": "hi"}]}]}),
        );
        assert_eq!(
            (t["text"].as_str(), t["state"].as_str()),
            (Some("hi"), Some("TASK_STATE_COMPLETED"))
        );
        let t = turn(
            json!({"id": "t", "status": {"state": "TASK_STATE_INPUT_REQUIRED",
            "message": {"parts": [{"text": "What is your name?"}]}}}),
        );
        assert_eq!(t["text"], "What is your name?");
    }
}
