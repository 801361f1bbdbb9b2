//! The agentnet node: the `agentnet` daemon and command line.
//!
//! # Layout
//! - [`cli`]: argument parsing and the commands (`init`, `resolve`, `card sign|verify`).
//! - [`data_dir`]: where the node keeps its key and state.

pub mod cli;
pub mod data_dir;
