//! The node's data directory: `--data-dir`, else `$AGENTNET_DATA_DIR`, else the platform data
//! directory (`$XDG_DATA_HOME/agentnet`, `~/.local/share/agentnet` on Linux).

pub mod token;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use agentnet_did::SecretKey;
use serde::{Deserialize, Serialize};

/// File the running daemon writes into its data directory so that other commands find it.
pub const NODE_FILE: &str = "node.json";
/// File name of the node's secret key inside the data directory.
pub const KEY_FILE: &str = "node.key";

/// The data directory to use. `flag` already includes the environment variable (clap reads it).
/// A path that exists but is not a directory is refused here, before anything is created in
/// it (`create_dir_all` would say only "File exists").
pub fn resolve(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = match flag {
        Some(p) => p.to_owned(),
        None => dirs::data_dir()
            .map(|d| d.join("agentnet"))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no platform data directory; pass --data-dir or set AGENTNET_DATA_DIR"
                )
            })?,
    };
    if std::fs::metadata(&dir).is_ok_and(|m| !m.is_dir()) {
        anyhow::bail!(
            "{} is not a directory; give --data-dir a directory (it is created if missing)",
            dir.display()
        );
    }
    Ok(dir)
}

/// The node key file inside `dir`.
pub fn key_file(dir: &Path) -> PathBuf {
    dir.join(KEY_FILE)
}

/// `<data-dir>/node.json`: how to reach the running node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeFile {
    /// The daemon's process id.
    pub pid: u32,
    /// The public HTTP listener's bound address.
    pub http: SocketAddr,
    /// The admin listener's bound address (loopback).
    pub admin: SocketAddr,
    /// The libp2p PeerId.
    pub peer_id: String,
    /// The node's did:key.
    pub did: String,
    /// libp2p listen addresses, each ending in `/p2p/<peer id>`.
    pub listen: Vec<String>,
    /// Started with `--local`: the commands run on this data directory allow agents and
    /// did:web/did:wba documents on loopback and private addresses, as `--local` does.
    #[serde(default)]
    pub local: bool,
}

impl NodeFile {
    /// The node file path in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(NODE_FILE)
    }

    /// Read `<dir>/node.json`.
    pub fn read(dir: &Path) -> Result<Self, NodeFileError> {
        let path = Self::path(dir);
        let io = |source| NodeFileError {
            path: path.clone(),
            source,
        };
        let bytes = std::fs::read(&path).map_err(io)?;
        serde_json::from_slice(&bytes).map_err(|e| io(std::io::Error::other(e)))
    }

    /// Write it atomically (temporary file, then rename).
    pub(crate) fn write(&self, dir: &Path) -> Result<(), NodeFileError> {
        let path = Self::path(dir);
        let tmp = dir.join(format!(".{NODE_FILE}.{}", self.pid));
        let io = |source| NodeFileError {
            path: path.clone(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(self).expect("a NodeFile always serializes");
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// Remove it if it is still ours (a newer daemon may have replaced it).
    pub(crate) fn remove_if_ours(dir: &Path, pid: u32) {
        if Self::read(dir).is_ok_and(|f| f.pid == pid) {
            if let Err(error) = std::fs::remove_file(Self::path(dir)) {
                tracing::warn!(%error, "removing {NODE_FILE}");
            }
        }
    }
}

/// `node.json` could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct NodeFileError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// Directory of the agents' private keys inside the data directory.
pub const AGENTS_DIR: &str = "agents";

/// Longest did:web/did:wba the agents directory holds a key for: the file name
/// (`<did>.did.json`) must stay under the usual 255-byte limit.
pub const MAX_DOMAIN_DID: usize = 200;

/// Largest DID document file read back from the agents directory.
const MAX_DOCUMENT: u64 = 256 * 1024;

/// Why an agent key could not be installed or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentKeyError {
    /// The name is not a DID this node can hold a key for (did:key, did:web, did:wba).
    #[error("{0:?} is not a did:key, did:web or did:wba this node can hold a key for")]
    NotDidKey(String),
    /// A domain identity's files exist already: they are never replaced.
    #[error("{} exists already; refusing to replace it", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// The identity's document is missing, unreadable or does not fit its key.
    #[error("the identity {did}: {reason}")]
    Identity {
        /// The agent.
        did: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing the document failed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Listing the agents directory failed.
    #[error("reading {}: {source}", path.display())]
    List {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
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
/// with mode 0600, named by the DID it signs for: a did:key it derives, or a did:web/did:wba
/// whose DID document is beside it as `<did>.did.json` (what the operator serves; the key
/// is checked against it at every load). The CLI installs them (it runs on the same machine
/// with access to the data directory), the node loads them; keys never travel over HTTP.
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
    /// no path separators, no dots), or a did:web/did:wba made only of DID characters (no path
    /// separator can appear; the name starts with `did:`, so it is never `.` or `..`), short
    /// enough for a file name.
    fn file(&self, did: &str) -> Result<PathBuf, AgentKeyError> {
        let not = || AgentKeyError::NotDidKey(did.chars().take(120).collect());
        let parsed = agentnet_did::Did::parse(did).map_err(|_| not())?;
        let id = parsed.method_specific_id();
        let ok = if did.starts_with("did:key:") {
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric())
        } else if did.starts_with("did:web:") || did.starts_with("did:wba:") {
            did.len() <= MAX_DOMAIN_DID
                && !id.is_empty()
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-:%".contains(&b))
        } else {
            false
        };
        if !ok {
            return Err(not());
        }
        Ok(self.dir.join(format!("{did}.jwk")))
    }

    /// The DID document beside the key file of a domain identity.
    pub fn document_file(&self, did: &str) -> Result<PathBuf, AgentKeyError> {
        let key = self.file(did)?;
        Ok(key.with_extension("did.json"))
    }

    /// Install a new domain identity: `key` and `doc` (which must list the key), never
    /// replacing either file. Returns the key file and the document file.
    pub fn install_domain(
        &self,
        key: &SecretKey,
        doc: &agentnet_did::Document,
    ) -> Result<(PathBuf, PathBuf), AgentKeyError> {
        let did = agentnet_did::Did::parse(&doc.id)
            .map_err(|_| AgentKeyError::NotDidKey(doc.id.chars().take(120).collect()))?;
        crate::identity::Identity::from_document(did, doc, SecretKey::from_seed(&key.seed()))
            .map_err(|e| AgentKeyError::Identity {
                did: doc.id.clone(),
                reason: e.to_string(),
            })?;
        let key_path = self.file(&doc.id)?;
        let doc_path = self.document_file(&doc.id)?;
        for path in [&key_path, &doc_path] {
            if path.exists() {
                return Err(AgentKeyError::Exists { path: path.clone() });
            }
        }
        create_private_dir(&self.dir)?;
        let body = serde_json::to_vec_pretty(&doc.to_json()).map_err(|e| AgentKeyError::Write {
            path: doc_path.clone(),
            source: std::io::Error::other(e),
        })?;
        // The document is public: write it first, so that a key never exists without it.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&doc_path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &body))
            .map_err(|source| AgentKeyError::Write {
                path: doc_path.clone(),
                source,
            })?;
        key.save(&key_path)?;
        Ok((key_path, doc_path))
    }

    /// The domain identities (did:web, did:wba) whose document is in the agents directory,
    /// sorted; at most `max` of them, and whether there were more. An absent directory holds
    /// none.
    pub fn domain_identities(&self, max: usize) -> Result<(Vec<String>, bool), AgentKeyError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), false)),
            Err(source) => {
                return Err(AgentKeyError::List {
                    path: self.dir.clone(),
                    source,
                })
            }
        };
        let mut dids = Vec::new();
        let mut more = false;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(did) = name.to_str().and_then(|n| n.strip_suffix(".did.json")) else {
                continue;
            };
            if !(did.starts_with("did:web:") || did.starts_with("did:wba:")) {
                continue;
            }
            if dids.len() == max {
                more = true;
                break;
            }
            dids.push(did.to_owned());
        }
        dids.sort();
        Ok((dids, more))
    }

    /// The identity `did`: the node's agents directory holds its key (and, for did:web and
    /// did:wba, its document, which must list that key).
    pub fn load_identity(&self, did: &str) -> Result<crate::identity::Identity, AgentKeyError> {
        use crate::identity::Identity;
        if did.starts_with("did:key:") {
            return self.load(did).map(Identity::did_key);
        }
        let path = self.file(did)?;
        if !path.exists() {
            return Err(AgentKeyError::Unknown {
                did: did.to_owned(),
                dir: self.dir.clone(),
            });
        }
        let key = SecretKey::load(&path)?;
        let bad = |reason: String| AgentKeyError::Identity {
            did: did.to_owned(),
            reason,
        };
        let doc_path = self.document_file(did)?;
        let mut bytes = Vec::new();
        std::fs::File::open(&doc_path)
            .and_then(|f| {
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(f, MAX_DOCUMENT + 1),
                    &mut bytes,
                )
            })
            .map_err(|e| bad(format!("reading {}: {e}", doc_path.display())))?;
        if bytes.len() as u64 > MAX_DOCUMENT {
            return Err(bad(format!(
                "{} is over {MAX_DOCUMENT} bytes",
                doc_path.display()
            )));
        }
        let doc = agentnet_did::Document::from_json(&bytes)
            .map_err(|e| bad(format!("{}: {e}", doc_path.display())))?;
        let parsed = agentnet_did::Did::parse(did).map_err(|e| bad(e.to_string()))?;
        Identity::from_document(parsed, &doc, key).map_err(|e| bad(e.to_string()))
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
        if !did.starts_with("did:key:") {
            return Err(AgentKeyError::NotDidKey(did.chars().take(120).collect()));
        }
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
