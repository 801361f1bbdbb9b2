//! agentnet simulation: many discovery nodes in one process, to measure how fast advertisements
//! spread, what churn, partitions and attackers do to that, and what it costs. The `simulate`
//! binary (`src/main.rs`, whose documentation says what each figure means) parses its command
//! line into [`Args`] and hands it to [`simulate`]; the other binaries (`src/bin/`) stand alone.
//!
//! # Layout
//!
//! The modules in the order they are built on, each using only those above it:
//! - `process`: the process the run lives in: its temporary directory, `/proc` readings (CPU,
//!   memory, load), the memory watchdog, the limit on open files.
//! - `scenario`: scenario files (`--scenario`) and the link model they describe (latency,
//!   bandwidth, a partition's cut).
//! - `plot` (public: `shadowgen` draws with it too): the SVG line charts of `--out`.
//! - `node`: one simulated agentnet node, the network of them, their dials and summed counters.
//! - `measure`: when each node accepted each advertisement, the figures of one advertisement,
//!   percentiles.
//! - `agent`: the seeded generator, did:key agents and their advertisements, the tag vocabulary.
//! - `floor`: the bare rust-libp2p gossipsub network measured beside agentnet (`--floor`).
//! - `attack`: the adversaries: junk, replay and Sybil nodes, and eclipse attackers.
//! - `args`: the command line, merged with the scenario file, checked.
//! - `run`: one run in its phases: setup, warm-up and idle window, the advertisements (with
//!   partition and churn), the discover queries, the checks of the stores, shutdown, the floor,
//!   and the report it returns.
//! - `report`: `results.json`, the figures, and the text summary.
//! - `simulate`: one invocation: the process made ready, the run under its time bound, its output.

#![recursion_limit = "512"]

mod agent;
mod args;
mod attack;
mod floor;
mod measure;
mod node;
pub mod plot;
mod process;
mod report;
mod run;
mod scenario;
mod simulate;

pub use args::Args;
pub use simulate::simulate;
