//! The node's data directory: `--data-dir`, else `$AGENTNET_DATA_DIR`, else the platform data
//! directory (`$XDG_DATA_HOME/agentnet`, `~/.local/share/agentnet` on Linux).

use std::path::{Path, PathBuf};

/// File name of the node's secret key inside the data directory.
pub const KEY_FILE: &str = "node.key";

/// The data directory to use. `flag` already includes the environment variable (clap reads it).
pub fn resolve(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_owned());
    }
    dirs::data_dir().map(|d| d.join("agentnet")).ok_or_else(|| {
        anyhow::anyhow!("no platform data directory; pass --data-dir or set AGENTNET_DATA_DIR")
    })
}

/// The node key file inside `dir`.
pub fn key_file(dir: &Path) -> PathBuf {
    dir.join(KEY_FILE)
}
