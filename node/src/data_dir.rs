//! The node's data directory: `--data-dir`, else `$AGENTNET_DATA_DIR`, else the platform data
//! directory (`$XDG_DATA_HOME/agentnet`, `~/.local/share/agentnet` on Linux).

use std::path::{Path, PathBuf};

use agentnet_did::SecretKey;

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

/// Directory of the agents' private keys inside the data directory.
pub const AGENTS_DIR: &str = "agents";

/// Why an agent key could not be installed or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentKeyError {
    /// The name is not a did:key this node can hold a key for.
    #[error("{0:?} is not a did:key")]
    NotDidKey(String),
    /// The node holds no key for this agent.
    #[error("no key for {did} in {}; publish once with `--key` to install it", dir.display())]
    Unknown {
        /// The agent.
        did: String,
        /// The agents directory.
        dir: PathBuf,
    },
    /// A file named after the agent holds another key (or is not a key): it is never replaced.
    #[error("{} does not hold the key of {did}; refusing to replace it", path.display())]
    Mismatch {
        /// The agent.
        did: String,
        /// The file.
        path: PathBuf,
    },
    /// Reading or writing failed.
    #[error(transparent)]
    Key(#[from] agentnet_did::key::KeyError),
    /// Creating the agents directory failed.
    #[error("creating {}: {source}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The agents' keys of one data directory: `<data-dir>/agents/<did>.jwk`, each a private JWK
/// with mode 0600, named by the did:key it derives. The CLI installs them (it runs on the same
/// machine with access to the data directory), the node loads them; keys never travel over HTTP.
#[derive(Debug, Clone)]
pub struct AgentKeys {
    dir: PathBuf,
}

impl AgentKeys {
    /// The agent keys of data directory `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join(AGENTS_DIR),
        }
    }

    /// The file of `did`, after checking that `did` is a did:key (whose identifier is base58:
    /// no path separators, no dots).
    fn file(&self, did: &str) -> Result<PathBuf, AgentKeyError> {
        let not = || AgentKeyError::NotDidKey(did.chars().take(120).collect());
        let parsed = agentnet_did::Did::parse(did).map_err(|_| not())?;
        let id = parsed.method_specific_id();
        if !did.starts_with("did:key:")
            || id.is_empty()
            || !id.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(not());
        }
        Ok(self.dir.join(format!("{did}.jwk")))
    }

    /// Install `key` (atomically, mode 0600) unless it is already there; returns its DID. A
    /// file of that name holding anything else is an error, never overwritten.
    pub fn install(&self, key: &SecretKey) -> Result<String, AgentKeyError> {
        let did = key.did_key().to_string();
        let path = self.file(&did)?;
        if path.exists() {
            return match SecretKey::load(&path) {
                Ok(k) if k.did_key().as_str() == did => Ok(did),
                _ => Err(AgentKeyError::Mismatch { did, path }),
            };
        }
        create_private_dir(&self.dir)?;
        match key.save(&path) {
            Ok(()) => Ok(did),
            // Installed meanwhile by another command: fine if it is the same key.
            Err(_) if SecretKey::load(&path).is_ok_and(|k| k.did_key().as_str() == did) => Ok(did),
            Err(e) => Err(e.into()),
        }
    }

    /// The key of `did`, checked to derive `did`.
    pub fn load(&self, did: &str) -> Result<SecretKey, AgentKeyError> {
        let path = self.file(did)?;
        if !path.exists() {
            return Err(AgentKeyError::Unknown {
                did: did.to_owned(),
                dir: self.dir.clone(),
            });
        }
        let key = SecretKey::load(&path)?;
        if key.did_key().as_str() != did {
            return Err(AgentKeyError::Mismatch {
                did: did.to_owned(),
                path,
            });
        }
        Ok(key)
    }
}

/// Create `dir` (and parents), readable by the owner only on Unix.
fn create_private_dir(dir: &Path) -> Result<(), AgentKeyError> {
    let err = |source| AgentKeyError::Dir {
        path: dir.to_owned(),
        source,
    };
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_load_and_never_replace() {
        let tmp = tempfile::tempdir().unwrap();
        let keys = AgentKeys::new(tmp.path());
        let k = SecretKey::generate();
        let did = keys.install(&k).unwrap();
        assert_eq!(did, k.did_key().to_string());
        assert_eq!(keys.load(&did).unwrap().seed(), k.seed());
        // Installing the same key again is a no-op.
        assert_eq!(keys.install(&k).unwrap(), did);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let path = tmp.path().join(AGENTS_DIR).join(format!("{did}.jwk"));
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let mode = std::fs::metadata(tmp.path().join(AGENTS_DIR))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700);
        }

        // A file under k's name holding another key is refused, and left alone.
        let other = SecretKey::generate();
        let path = tmp.path().join(AGENTS_DIR).join(format!("{did}.jwk"));
        std::fs::remove_file(&path).unwrap();
        other.save(&path).unwrap();
        assert!(matches!(
            keys.install(&k),
            Err(AgentKeyError::Mismatch { .. })
        ));
        assert!(matches!(
            keys.load(&did),
            Err(AgentKeyError::Mismatch { .. })
        ));
        assert_eq!(SecretKey::load(&path).unwrap().seed(), other.seed());
    }

    #[test]
    fn names_that_are_not_did_keys_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let keys = AgentKeys::new(tmp.path());
        for bad in [
            "../node",
            "did:key:../../node",
            "did:key:z6Mk/../x",
            "did:web:example.com",
            "did:key:",
            "",
        ] {
            assert!(
                matches!(keys.load(bad), Err(AgentKeyError::NotDidKey(_))),
                "{bad}"
            );
        }
        let unknown = SecretKey::generate().did_key().to_string();
        assert!(matches!(
            keys.load(&unknown),
            Err(AgentKeyError::Unknown { .. })
        ));
    }
}
