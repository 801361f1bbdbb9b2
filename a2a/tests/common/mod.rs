//! Shared harness of the integration tests: the sample agents on a real loopback listener, a
//! test authenticator and the matching signer.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use agentnet_a2a::auth::{AuthError, Authenticator, BoxFuture, Policy, RequestParts};
use agentnet_a2a::client::{Binding, Client, Endpoint, SignError, SignRequest, Signer};
use agentnet_a2a::engine::Limits;
use agentnet_a2a::samples;
use agentnet_a2a::server::{Config, Server};
use agentnet_a2a::types::{Message, Part, Role, SendMessageConfiguration, SendMessageRequest};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;

mod sdk_client;
#[allow(unused_imports)] // only the interop tests use it
pub use sdk_client::assert_sdk_client_passes;

/// The test's identity header: the test authenticator takes the caller from it ("bad" is a
/// signature that does not verify). Stands in for the node's RFC 9421 verifier.
pub const CALLER: &str = "x-test-caller";

pub struct TestAuth;

impl Authenticator for TestAuth {
    fn authenticate<'a>(
        &'a self,
        r: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<String>, AuthError>> {
        Box::pin(async move {
            match r.headers.get(CALLER).map(|v| v.to_str().unwrap_or("")) {
                None => Ok(None),
                Some("bad") => Err(AuthError("signature does not verify".into())),
                Some(c) => Ok(Some(c.to_string())),
            }
        })
    }
}

pub struct TestSigner(pub String);

impl Signer for TestSigner {
    fn sign<'a>(&'a self, _r: SignRequest<'a>) -> BoxFuture<'a, Result<HeaderMap, SignError>> {
        Box::pin(async move {
            let mut h = HeaderMap::new();
            h.insert(
                CALLER,
                HeaderValue::from_str(&self.0).map_err(|e| SignError(e.to_string()))?,
            );
            Ok(h)
        })
    }
}

pub struct Harness {
    pub base: String,
    pub echo: Arc<Server>,
    pub ask: Arc<Server>,
    pub http: reqwest::Client,
}

pub async fn start_with(policy: Policy, limits: Limits, work: Duration) -> Harness {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (router, echo, ask) = samples::router(
        &base,
        work,
        move |card| Config::new(card).policy(policy).limits(limits.clone()),
        Arc::new(TestAuth),
    );
    tokio::spawn(async move { axum::serve(listener, router).await });
    Harness {
        base,
        echo,
        ask,
        http: agentnet_did::http::client(),
    }
}

pub async fn start(policy: Policy) -> Harness {
    start_with(policy, Limits::default(), Duration::from_millis(500)).await
}

/// Wait until `server` runs no turn (at most 10 s).
pub async fn wait_idle(server: &Server) {
    for _ in 0..200 {
        if server.engine().running() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "turns still running after 10 s: {}",
        server.engine().running()
    );
}

impl Harness {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A client of `agent` over `binding`, signing as `caller` (unsigned when `None`).
    pub fn client(&self, agent: &str, binding: Binding, caller: Option<&str>) -> Client {
        let signer: Option<Arc<dyn Signer>> =
            caller.map(|c| Arc::new(TestSigner(c.to_string())) as Arc<dyn Signer>);
        Client::new(
            self.http.clone(),
            Endpoint {
                url: url::Url::parse(&self.url(&format!("/{agent}"))).unwrap(),
                binding,
            },
            signer,
        )
    }

    /// A raw JSON-RPC call: status and body.
    pub async fn rpc(
        &self,
        agent: &str,
        caller: Option<&str>,
        method: &str,
        params: Value,
    ) -> (u16, Value) {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let mut rb = self
            .http
            .post(self.url(&format!("/{agent}")))
            .header("content-type", "application/json")
            .header("A2A-Version", "1.0")
            .body(body.to_string());
        if let Some(c) = caller {
            rb = rb.header(CALLER, c);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// A raw HTTP+JSON call: status and body.
    pub async fn rest(
        &self,
        method: reqwest::Method,
        path: &str,
        caller: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut rb = self
            .http
            .request(method, self.url(path))
            .header("A2A-Version", "1.0");
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/a2a+json")
                .body(b.to_string());
        }
        if let Some(c) = caller {
            rb = rb.header(CALLER, c);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

pub fn msg(text: &str) -> SendMessageRequest {
    SendMessageRequest {
        message: Message::new(Role::User, vec![Part::text(text)]),
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

pub fn reply(task_id: &str, text: &str) -> SendMessageRequest {
    let mut r = msg(text);
    r.message.task_id = Some(task_id.to_string());
    r
}

pub fn immediately(mut r: SendMessageRequest) -> SendMessageRequest {
    r.configuration = Some(SendMessageConfiguration {
        accepted_output_modes: None,
        task_push_notification_config: None,
        history_length: None,
        return_immediately: Some(true),
    });
    r
}

pub const BINDINGS: [Binding; 2] = [Binding::JsonRpc, Binding::HttpJson];
