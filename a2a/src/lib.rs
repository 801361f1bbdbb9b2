//! A2A 1.0 for agentnet: a task engine and server over a handler trait, serving both the
//! JSON-RPC and the HTTP+JSON bindings, a client for both bindings, and the task store trait.
//!
//! The wire types are those of the official Rust SDK's type crate (`a2a-lf`), re-exported as
//! [`types`]; `docs/A2A.md` says why, and where we do not rely on them.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use agentnet_a2a::{auth, samples, server, store};
//!
//! let card = serde_json::json!({"name": "echo", "supportedInterfaces": []});
//! let server = server::Server::new(
//!     server::Config::new(card).policy(auth::Policy::Open),
//!     Arc::new(samples::Echo),
//!     Arc::new(store::MemoryStore::default()),
//!     Arc::new(auth::NoAuth),
//! );
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! axum::serve(listener, server.router()).await
//! # }
//! ```
//!
//! # Layout
//!
//! - [`error`]: [`ProtocolError`], every error a caller can get, with its JSON-RPC code, HTTP
//!   status and `google.rpc.ErrorInfo` reason.
//! - [`auth`]: the [`auth::Authenticator`] hook, the per-agent [`auth::Policy`] and the task
//!   [`auth::Owner`].
//! - [`store`]: the blocking [`store::TaskStore`] trait (owner-scoped keys, cursor pages) and
//!   [`store::MemoryStore`].
//! - [`gate`]: the [`gate::Gate`] hook, run before any work on every operation (the node's
//!   delegation policy).
//! - [`handler`]: the [`handler::Handler`] trait an agent implements: one turn of work.
//! - [`samples`]: the built-in agents [`samples::Echo`] and [`samples::AskName`].
//! - [`engine`]: the binding-independent task engine, the state machine of a task, with its
//!   satellites beside it in `engine/` (private):
//!   - `engine::limits`: [`engine::Limits`], every bound with its default;
//!   - `engine::slots`: the running turns and open streams callers hold, in all, per owner and
//!     per source, and the check that refuses one more;
//!   - `engine::fanout`: the SSE fan-out, a bounded broadcast channel per live task and the
//!     [`engine::EventStream`] that reads it.
//! - `seen` (private): the message ids callers have sent, with the task each started, so that a
//!   retried `SendMessage` is answered with that task (exactly-once sends).
//! - [`server`]: both bindings as an `axum::Router`.
//! - [`client`]: the client for both bindings, with the [`client::Signer`] hook.
//! - [`sse`]: the bounded Server-Sent Events decoder the client reads streams with.

#![warn(missing_docs, unreachable_pub)]

pub mod auth;
pub mod client;
pub mod engine;
pub mod error;
pub mod gate;
pub mod handler;
pub mod samples;
mod seen;
pub mod server;
pub mod sse;
pub mod store;

pub use a2a as types;
pub use error::ProtocolError;
