//! The admin API's credential: a random bearer token in `<data-dir>/admin.token`.
//!
//! `agentnet up` writes a fresh token at every start (32 bytes from the OS, base64url, mode
//! 0600, written to a temporary file and renamed into place, so a reader never sees half a
//! token and never a file with looser permissions). The commands read it from the data
//! directory and send it as `Authorization: Bearer <token>`; the node compares in constant time.
//! Whoever can read the data directory (the node's key is there too) can use the admin API;
//! nobody else can, whatever port they can reach. A new token per start means a token that
//! leaked stops working at the next restart.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand_core::{OsRng, RngCore as _};
use subtle::ConstantTimeEq as _;

/// File name of the token inside the data directory.
pub const TOKEN_FILE: &str = "admin.token";
/// Random bytes in a token: 256 bits, beyond guessing.
const TOKEN_BYTES: usize = 32;
/// Largest token file read: a token is 43 characters.
const MAX_TOKEN_FILE: u64 = 1024;

/// Why the token could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The OS gave no randomness.
    #[error("generating the admin token: {0}")]
    Random(rand_core::Error),
    /// Reading or writing the file failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// "reading", "writing".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file does not hold a token.
    #[error("{} does not hold an admin token", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

/// An admin bearer token.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// The token file in `dir`.
pub fn token_file(dir: &Path) -> PathBuf {
    dir.join(TOKEN_FILE)
}

impl Token {
    /// A new random token.
    pub fn generate() -> Result<Self, TokenError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(TokenError::Random)?;
        Ok(Self(URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// A new token, written to `<dir>/admin.token` (mode 0600), replacing any older one.
    pub fn create(dir: &Path) -> Result<Self, TokenError> {
        let token = Self::generate()?;
        let path = token_file(dir);
        let io = |source| TokenError::Io {
            action: "writing",
            path: path.clone(),
            source,
        };
        let tmp = dir.join(format!(".{TOKEN_FILE}.{}", std::process::id()));
        // A leftover of a crashed start with our pid; create_new below must not meet it.
        let _ = std::fs::remove_file(&tmp);
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp).map_err(io)?;
        let written = f
            .write_all(token.0.as_bytes())
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(e));
        }
        Ok(token)
    }

    /// The token in `<dir>/admin.token`.
    pub fn read(dir: &Path) -> Result<Self, TokenError> {
        let path = token_file(dir);
        let mut text = String::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_TOKEN_FILE).read_to_string(&mut text))
            .map_err(|source| TokenError::Io {
                action: "reading",
                path: path.clone(),
                source,
            })?;
        let t = text.trim();
        if t.is_empty()
            || !t
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(TokenError::Malformed { path });
        }
        Ok(Self(t.to_owned()))
    }

    /// The token, as sent after `Bearer `.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `Authorization` header value `header` carries this token (constant time in the
    /// token's content).
    pub fn accepts(&self, header: &[u8]) -> bool {
        let Some(given) = header
            .strip_prefix(b"Bearer ")
            .or_else(|| header.strip_prefix(b"bearer "))
        else {
            return false;
        };
        given.ct_eq(self.0.as_bytes()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_read_accept() {
        let dir = tempfile::tempdir().unwrap();
        let t = Token::create(dir.path()).unwrap();
        assert_eq!(t.as_str().len(), 43);
        let r = Token::read(dir.path()).unwrap();
        assert_eq!(r.as_str(), t.as_str());
        assert!(t.accepts(format!("Bearer {}", t.as_str()).as_bytes()));
        assert!(!t.accepts(t.as_str().as_bytes()));
        assert!(!t.accepts(b"Bearer "));
        assert!(!t.accepts(format!("Bearer {}x", t.as_str()).as_bytes()));
        assert!(!t.accepts(format!("Basic {}", t.as_str()).as_bytes()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(token_file(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Rotated at each start.
        let t2 = Token::create(dir.path()).unwrap();
        assert_ne!(t2.as_str(), t.as_str());
        assert_eq!(Token::read(dir.path()).unwrap().as_str(), t2.as_str());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file stays behind");
    }

    #[test]
    fn read_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            Token::read(dir.path()),
            Err(TokenError::Io { .. })
        ));
        std::fs::write(token_file(dir.path()), "not a token\n").unwrap();
        assert!(matches!(
            Token::read(dir.path()),
            Err(TokenError::Malformed { .. })
        ));
    }
}
