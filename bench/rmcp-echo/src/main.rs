//! A bare `rmcp` Streamable HTTP server, the baseline of `scripts/bench_mcp.sh`: stateless
//! (2026-07-28 requests carry their own envelope; 2025-11-25 clients are served without
//! sessions), JSON responses, rmcp's default loopback Host allowlist. Two tools:
//! - `echo`: the text it is given;
//! - `discover_agents`: the same answer every time, read at start from the file named by
//!   `ANSWER_FILE` (the `structuredContent` of one of the node's own `discover_agents` answers,
//!   `{"agents": [...]}`), so that rmcp serves an answer of the node's size with no work behind
//!   it: the floor for the node's `/mcp`.
//!
//! `rmcp-echo [ADDR]` (default `127.0.0.1:0`) prints `READY http://ADDR/mcp` once it listens.

use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ServerHandler};

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Echo {
    /// The text to return.
    text: String,
}

/// What `discover_agents` takes (ignored: the answer is fixed).
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Query {
    /// Skill tags.
    #[allow(dead_code)]
    tags: Vec<String>,
}

/// A `discover_agents` answer: the agents, as the node's answer holds them.
#[derive(Clone, serde::Serialize, schemars::JsonSchema)]
struct Found {
    /// The agents.
    agents: Vec<serde_json::Value>,
}

#[derive(Clone)]
struct EchoServer {
    answer: std::sync::Arc<Found>,
}

#[tool_router]
impl EchoServer {
    #[tool(description = "Return the given text unchanged.")]
    fn echo(&self, Parameters(e): Parameters<Echo>) -> Json<Echo> {
        Json(e)
    }

    #[tool(description = "Return the answer read from ANSWER_FILE.")]
    fn discover_agents(&self, Parameters(_q): Parameters<Query>) -> Json<Found> {
        Json(Found::clone(&self.answer))
    }
}

#[tool_handler]
impl ServerHandler for EchoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let answer = match std::env::var_os("ANSWER_FILE") {
        Some(path) => {
            let bytes = std::fs::read(&path)?;
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            let agents = v["agents"].as_array().cloned().unwrap_or_default();
            Found { agents }
        }
        None => Found { agents: Vec::new() },
    };
    let answer = std::sync::Arc::new(answer);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let service: StreamableHttpService<EchoServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || {
                Ok(EchoServer {
                    answer: answer.clone(),
                })
            },
            Default::default(),
            config,
        );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("READY http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, axum::Router::new().nest_service("/mcp", service)).await
}
