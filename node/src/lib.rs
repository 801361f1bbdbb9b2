//! The agentnet node: the `agentnet` daemon and command line.
//!
//! `agentnet up` runs the node; `publish`, `discover` and `peers` talk to it through its local
//! admin API, found through `<data-dir>/node.json` and authenticated with the token in
//! `<data-dir>/admin.token`:
//!
//! ```text
//! agentnet up --data-dir /tmp/a --listen /ip4/127.0.0.1/tcp/4001 --http 127.0.0.1:7878
//! agentnet publish --data-dir /tmp/a --card card.json --ttl 3600
//! agentnet discover --data-dir /tmp/a --skill translation
//! ```
//!
//! # Layout
//! - [`cli`]: argument parsing and the commands (`init`, `resolve`, `card sign|verify`, `up`,
//!   `publish`, `discover`, `peers`, `testnet`).
//! - [`daemon`]: `agentnet up`: start, `node.json`, shutdown order.
//! - [`hosted`]: the hosted A2A agents from the configuration file, mounted at `/a2a/<id>`.
//! - [`http`]: the public HTTP surface: the well-known files.
//! - [`a2a_auth`]: the DID authenticator of the hosted agents (RFC 9421, `DIDWba`), bounded.
//! - [`admin`]: the admin API (its own loopback listener, bearer token) and its client.
//! - [`auth`]: the admin token in the data directory.
//! - [`server`]: the bounded HTTP server both listeners run (timeouts, connection caps).
//! - [`publisher`]: signing and publishing cards, re-announcing them before they expire.
//! - [`data_dir`]: where the node keeps its key, the agents' keys and its state.
//! - [`mcp`]: the MCP server (`agentnet mcp` on stdio, `/mcp` on the admin listener).
//! - [`tasks`]: the hosted agents' A2A tasks in the node's RocksDB.
//! - [`testnet`]: `agentnet testnet`: several nodes in one process, discovery end to end.

pub mod a2a_auth;
pub mod admin;
pub mod auth;
pub mod call;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod data_dir;
pub mod directory;
pub mod hosted;
pub mod http;
pub mod identity;
pub mod mcp;
pub mod publisher;
pub mod server;
pub mod signer;
pub mod tasks;
pub mod testnet;
