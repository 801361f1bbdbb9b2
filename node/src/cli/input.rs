//! Files given on the command line (cards, DID documents, keys, certificates), read bounded.

use std::io::Read as _;
use std::path::Path;

use agentnet_did::json;
use anyhow::{bail, Context as _};
use serde_json::Value;

/// Largest card, DID document or JWK file we read.
const MAX_INPUT: u64 = 1024 * 1024;

/// The bytes of `path` (`-`: standard input), at most [`MAX_INPUT`].
pub(super) fn read_bounded(path: &Path) -> anyhow::Result<Vec<u8>> {
    let mut buf = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut buf)
            .context("reading standard input")?;
    } else {
        let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        f.take(MAX_INPUT + 1)
            .read_to_end(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
    }
    if buf.len() as u64 > MAX_INPUT {
        bail!("{} is larger than {} bytes", path.display(), MAX_INPUT);
    }
    Ok(buf)
}

/// A JSON file read strictly: bounded size, depth and values, no member named twice (a card
/// with a repeated member could be read one way here and another way by a verifier).
pub(super) fn read_json(path: &Path) -> anyhow::Result<Value> {
    let bytes = read_bounded(path)?;
    json::from_slice(&bytes, FILE_JSON).map_err(|e| match e {
        json::JsonError::Syntax(why) => anyhow::anyhow!("{} is not JSON: {why}", path.display()),
        e => anyhow::anyhow!("{}: {e}", path.display()),
    })
}

/// Bounds of JSON files given on the command line (cards, DID documents).
const FILE_JSON: json::Limits = json::Limits {
    max_depth: 128,
    max_values: 1 << 20,
};
