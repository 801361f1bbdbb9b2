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
//! Embedded, the daemon is [`daemon::start`] with [`daemon::Options`]; it prints nothing and
//! returns a [`Running`] that owns every task it started (dropping it stops them):
//!
//! ```no_run
//! # async fn example() -> Result<(), agentnet_node::daemon::Error> {
//! let node = agentnet_node::daemon::start(agentnet_node::daemon::Options::local("/tmp/a".into()))
//!     .await?;
//! println!("admin API on http://{}", node.info.admin);
//! node.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//! Modules import one way, from the bottom of this list up (`scripts/tests/module-cycles.sh`
//! checks that no two import each other in a circle):
//! - [`auth`]: the admin token in the data directory.
//! - [`identity`]: did:key, did:web and did:wba identities (a key and its DID URL).
//! - [`signer`]: [`DidSigner`], RFC 9421 request signing as an identity, and the access tokens
//!   servers answer with.
//! - [`db`]: the node's one RocksDB: every column family and the module that owns it, how it
//!   is opened, the counters and rank keys the rooms' layouts share.
//! - [`data_dir`]: where the node keeps its key, the agents' keys and `node.json`
//!   ([`data_dir::NodeFile`]).
//! - [`directory`]: the node's read model of the network ([`Directory`], [`Found`], [`Peers`],
//!   MCP summaries) and the one skill-tag check.
//! - [`server`]: the bounded HTTP server both listeners run (timeouts, connection caps).
//! - [`http`]: the public HTTP surface: the well-known files.
//! - [`publisher`]: signing and publishing cards, re-announcing them before they expire.
//! - [`tasks`]: the hosted agents' A2A tasks in the node's RocksDB.
//! - [`a2a_auth`]: the DID authenticator of the hosted agents (RFC 9421, `DIDWba`), bounded.
//! - [`authority`]: on whose behalf: the hosted agents' delegation policy, an A2A gate run
//!   before any work (issue 18).
//! - [`config`]: the `--config` file ([`FileConfig`]), its checks and defaults (`[tasks]` as
//!   [`tasks::Retention`], `[auth]` as the authenticator's bounds), and the flag-over-file
//!   merge of `agentnet up`, `--local` included.
//! - [`admin`]: the admin API (its own loopback listener, bearer token) and its client.
//! - [`audit`]: the caller's hash-chained audit log of verified task receipts (issue 18), its
//!   admin routes and the [`audit::Recorder`] that `call`, the MCP server and `proxy` use.
//! - [`status_page`]: the status page on the admin listener (`/status`, `/admin/v1/status`).
//! - [`call`]: calling agents over A2A: find, verify, sign, follow ([`Caller`]).
//! - [`mcp`]: the MCP server (`agentnet mcp` on stdio, `/mcp` on the admin listener), the MCP
//!   endpoints of hosted agents, and the signed MCP client.
//! - [`hosted`]: the hosted A2A agents of the configuration file, mounted at `/a2a/<id>`.
//! - [`daemon`]: `agentnet up`: checks, start, `node.json`, shutdown order.
//! - [`cli`]: argument parsing and the commands (`init`, `key new`, `resolve`, `card
//!   sign|verify`, `up`, `identity`, `publish`, `unpublish`, `discover`, `peers`, `status`,
//!   `config check`, `call`, `mcp`, `tools`, `tool`, and [`cli::testnet`], several nodes in one
//!   process or in processes; [`cli::netns`], the network namespaces `testnet --netns` and the
//!   simulator's `shadowgen --run-netns` run node processes in): the only code that prints.

#![warn(missing_docs, unreachable_pub)]

pub mod a2a_auth;
pub mod admin;
pub mod ard;
pub mod audit;
pub mod auth;
pub mod authority;
pub mod call;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod data_dir;
pub mod db;
pub mod directory;
pub mod endorsements;
pub mod flags;
pub mod hosted;
pub mod http;
pub mod identity;
pub mod mcp;
pub mod pins;
pub mod publisher;
pub mod server;
pub mod signer;
pub mod status_page;
pub mod tasks;
pub mod trust;

pub use call::{CallError, CallOptions, Caller, Target};
pub use config::{ConfigError, FileConfig};
pub use daemon::Running;
pub use directory::{Directory, Found, Peers};
pub use identity::Identity;
pub use signer::DidSigner;
