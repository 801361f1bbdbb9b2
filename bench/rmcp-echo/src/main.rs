//! A bare `rmcp` Streamable HTTP server with one `echo` tool, the baseline of
//! `scripts/bench_mcp.sh`: stateless (2026-07-28 requests carry their own envelope; 2025-11-25
//! clients are served without sessions), JSON responses, rmcp's default loopback Host allowlist.
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

#[derive(Clone)]
struct EchoServer;

#[tool_router]
impl EchoServer {
    #[tool(description = "Return the given text unchanged.")]
    fn echo(&self, Parameters(e): Parameters<Echo>) -> Json<Echo> {
        Json(e)
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
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let service: StreamableHttpService<EchoServer, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(EchoServer), Default::default(), config);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("READY http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, axum::Router::new().nest_service("/mcp", service)).await
}
