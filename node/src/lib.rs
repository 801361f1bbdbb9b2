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
//! One room per subsystem (`foo.rs` beside `foo/`). Each room uses only rooms above it in this
//! list (`scripts/tests/module-cycles.sh` checks that no two import each other in a circle;
//! `scripts/layout.sh` measures the rooms):
//! - [`db`]: the node's one RocksDB: every column family with the room that owns it, how it is
//!   opened, the counters and rank keys the rooms' layouts share.
//! - [`audit`]: the caller's hash-chained audit log of verified task receipts, its admin routes
//!   and the [`audit::Recorder`] that `call`, the MCP server and `proxy` use (a CLI process
//!   sends to the node through an [`audit::ReceiptSink`]).
//! - [`identity`]: did:key, did:web and did:wba identities (a key and its DID URL), and
//!   [`identity::signer`]: RFC 9421 request signing as an identity ([`DidSigner`]).
//! - [`data_dir`]: where the node keeps its key, the agents' keys, `node.json`
//!   ([`data_dir::NodeFile`]) and the admin token ([`data_dir::token`]).
//! - [`trust`]: the operator's policy (`[trust]`), card and tool [`trust::pins`],
//!   [`trust::flags`] on text meant for a model, [`trust::endorsements`].
//! - [`network`]: the read model of the network ([`network::directory`]: [`Directory`],
//!   [`Found`], [`Peers`], the MCP summaries) and the [`network::publisher`].
//! - [`call`]: every client: A2A (find, verify, sign, follow: [`Caller`]), [`call::anp`],
//!   [`call::mcp`], and the delegation a caller holds and presents.
//! - [`mcp`]: the node's MCP server for MCP hosts (`agentnet mcp` on stdio, `/mcp` on the
//!   admin listener) and the MCP session bounds the hosted agents' MCP faces share.
//! - [`hosted`]: every face of a hosted agent (A2A at `/a2a/<id>`, [`hosted::mcp`],
//!   [`hosted::anp`]), who may call ([`hosted::a2a_auth`], the delegation gate
//!   [`hosted::authority`]), its task store ([`hosted::tasks`]), its kinds (echo, command,
//!   proxy) and its configuration section ([`hosted::config`]).
//! - [`admin`]: the admin API (its own loopback listener, bearer token), its client, and the
//!   status page ([`admin::status_page`]).
//! - [`ard`]: the Agent Registry Discovery face: manifest, index, search.
//! - [`http`]: the bounded HTTP server both listeners run ([`http::server`]) and the public
//!   listener's well-known files.
//! - [`config`]: the `--config` file ([`FileConfig`]): it composes the sections, checks them
//!   and merges the flags of `agentnet up` (`--local` included) over them.
//! - [`daemon`]: `agentnet up`: checks, start, `node.json`, shutdown order.
//! - [`cli`]: argument parsing and the commands (`init`, `key new`, `resolve`, `card
//!   sign|verify`, `up`, `identity`, `publish`, `unpublish`, `discover`, `peers`, `status`,
//!   `config check`, `call`, `mcp`, `tools`, `tool`, and [`cli::testnet`], several nodes in one
//!   process or in processes; [`cli::netns`], the network namespaces `testnet --netns` and the
//!   simulator's `shadowgen --run-netns` run node processes in): the only code that prints.

#![warn(missing_docs, unreachable_pub)]

pub mod admin;
pub mod ard;
pub mod audit;
pub mod call;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod data_dir;
pub mod db;
pub mod hosted;
pub mod http;
pub mod identity;
pub mod mcp;
pub mod network;
pub mod trust;

pub use call::{CallError, CallOptions, Caller, Target};
pub use config::{ConfigError, FileConfig};
pub use daemon::Running;
pub use identity::signer::DidSigner;
pub use identity::Identity;
pub use network::directory::{Directory, Found, Peers};
