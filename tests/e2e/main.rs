//! The end-to-end tests of the `agentnet` binary and the node library, in one test binary
//! (one link instead of one per file): each module is one surface, [`common`] the fixtures
//! they share (a node started as a process or in this one, the CLI, an HTTP client).
//!
//! `cargo test -p agentnet --test e2e [MODULE::]` runs them (all, or one module's).

mod a2a_attacks;
mod a2a_node;
mod a2a_tck_behaviours;
mod anp_interop;
mod ard;
mod bounds;
mod call;
mod cli;
mod common;
mod daemon;
mod delegation;
mod endorse;
mod hosted_agents;
mod interop;
mod local_network;
mod mcp;
mod mcp_client;
mod mcp_interop;
mod network_ops;
mod operator;
mod ops;
mod receipts;
mod sim_node;
mod status_page;
mod testnet;
mod trust;
