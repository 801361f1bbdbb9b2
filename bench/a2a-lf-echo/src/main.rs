//! Bench baseline: an echo agent on the official Rust A2A server crate, `a2a-server-lf` 0.5,
//! with its in-memory task store and its JSON-RPC binding.
//!
//! Every `SendMessage` completes its task at once, as agentnet's sample `Echo` does: status
//! `TASK_STATE_COMPLETED` with the agent message `echo: <text>`, one artifact `echo` holding the
//! text, the user's message in the history.
//!
//! Usage: `a2a-lf-echo [ADDR]` (default `127.0.0.1:0`). Prints the JSON-RPC URL on stdout once
//! listening, then serves until killed.

use std::sync::Arc;

use a2a::{A2AError, Artifact, Message, Part, Role, StreamResponse, Task, TaskState, TaskStatus};
use a2a_server::{AgentExecutor, DefaultRequestHandler, ExecutorContext, InMemoryTaskStore};
use futures::stream::BoxStream;

/// The echo agent.
struct Echo;

impl AgentExecutor for Echo {
    fn execute(
        &self,
        ctx: ExecutorContext,
    ) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        let text: String = ctx
            .message
            .as_ref()
            .map(|m| {
                m.parts
                    .iter()
                    .filter_map(|p| p.as_text())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let mut reply = Message::new(Role::Agent, vec![Part::text(format!("echo: {text}"))]);
        reply.task_id = Some(ctx.task_id.clone());
        reply.context_id = Some(ctx.context_id.clone());
        let task = Task {
            id: ctx.task_id.clone(),
            context_id: ctx.context_id.clone(),
            status: TaskStatus {
                state: TaskState::Completed,
                message: Some(reply),
                timestamp: None,
            },
            artifacts: Some(vec![Artifact {
                artifact_id: format!("{}-echo", ctx.task_id),
                name: Some("echo".into()),
                description: None,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: None,
            }]),
            history: ctx.message.map(|m| vec![m]),
            metadata: None,
        };
        Box::pin(futures::stream::once(async move {
            Ok(StreamResponse::Task(task))
        }))
    }

    fn cancel(&self, ctx: ExecutorContext) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        let task = Task {
            id: ctx.task_id.clone(),
            context_id: ctx.context_id.clone(),
            status: TaskStatus {
                state: TaskState::Canceled,
                message: None,
                timestamp: None,
            },
            artifacts: None,
            history: None,
            metadata: None,
        };
        Box::pin(futures::stream::once(async move {
            Ok(StreamResponse::Task(task))
        }))
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let handler = Arc::new(DefaultRequestHandler::new(Echo, InMemoryTaskStore::new()));
    let app =
        axum::Router::new().nest_service("/rpc", a2a_server::jsonrpc::jsonrpc_router(handler));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("http://{}/rpc", listener.local_addr()?);
    axum::serve(listener, app).await
}
