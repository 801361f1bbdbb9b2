//! Serve the sample agents (echo and ask-name) with in-memory task stores, for interop tests
//! with other A2A SDKs.
//!
//! Callers are identified by the `x-test-caller` header (a test stand-in for the DID signature
//! the node verifies); the agents' policy is `did`, so a request without it gets 401.
//!
//! ```text
//! cargo run -p agentnet-a2a --example a2a_samples -- 8080 [work-ms]
//! ```
//!
//! Cards: `http://127.0.0.1:<port>/echo/.well-known/agent-card.json` and
//! `http://127.0.0.1:<port>/ask-name/.well-known/agent-card.json`.

use std::sync::Arc;
use std::time::Duration;

use agentnet_a2a::auth::{AuthError, Authenticator, BoxFuture, RequestParts};
use agentnet_a2a::{auth, samples, server};

/// The caller is whatever `x-test-caller` says. For tests only: it proves nothing.
struct HeaderAuth;

impl Authenticator for HeaderAuth {
    fn authenticate<'a>(
        &'a self,
        r: RequestParts<'a>,
    ) -> BoxFuture<'a, Result<Option<String>, AuthError>> {
        Box::pin(async move {
            match r.headers.get("x-test-caller") {
                None => Ok(None),
                Some(v) => v
                    .to_str()
                    .map(|s| Some(s.to_string()))
                    .map_err(|_| AuthError("x-test-caller is not text".into())),
            }
        })
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let work_ms: u64 = args.next().and_then(|p| p.parse().ok()).unwrap_or(300);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let base = format!("http://{addr}");
    let (router, _, _) = samples::router(
        &base,
        Duration::from_millis(work_ms),
        |card| server::Config::new(card).policy(auth::Policy::Did),
        Arc::new(HeaderAuth),
    );
    println!("{base}");
    axum::serve(listener, router).await
}
