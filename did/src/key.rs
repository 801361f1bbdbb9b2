//! Keys: the node's Ed25519 secret key (generated, saved as a JWK file with mode 0600, loaded),
//! and the public keys we verify with (Ed25519, and P-256 for ES256 card signatures).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use ed25519_dalek::Signer as _;
// ES256 keys verify through p256, whose `signature` crate is an older major than ed25519-dalek's.
use p256::ecdsa::signature::Verifier as _;
use serde::{Deserialize, Serialize};

/// Multicodec prefix of an Ed25519 public key (0xed as an unsigned varint).
pub const MULTICODEC_ED25519_PUB: [u8; 2] = [0xed, 0x01];
/// Multicodec prefix of an X25519 public key (0xec as an unsigned varint).
pub const MULTICODEC_X25519_PUB: [u8; 2] = [0xec, 0x01];
/// Multicodec prefix of a compressed P-256 public key (0x1200 as an unsigned varint).
pub const MULTICODEC_P256_PUB: [u8; 2] = [0x80, 0x24];

/// Largest key file we read: a JWK is about 150 bytes.
const MAX_KEY_FILE: u64 = 16 * 1024;

/// Errors loading, saving or decoding keys.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Reading or writing the key file failed.
    #[error("{action} key file {path}: {source}")]
    Io {
        /// What we were doing: "reading", "writing", ...
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The key file exists but is not an Ed25519 private JWK.
    #[error("key file {path}: {reason}")]
    BadKeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A public key encoding could not be decoded.
    #[error("invalidPublicKey: {0}")]
    InvalidPublicKey(String),
    /// A public key had the wrong length for its type.
    #[error("invalidPublicKeyLength: {kind} key must be {expected} bytes, got {got}")]
    InvalidPublicKeyLength {
        /// The key type.
        kind: &'static str,
        /// Expected length in bytes.
        expected: usize,
        /// Length found.
        got: usize,
    },
    /// A key type we do not verify with.
    #[error("unsupportedPublicKeyType: {0}")]
    UnsupportedType(String),
}

/// A JSON Web Key, the subset we read and write (OKP/Ed25519, EC/P-256).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    /// Key type: "OKP" or "EC".
    pub kty: String,
    /// Curve: "Ed25519", "X25519", "P-256".
    pub crv: String,
    /// Public x coordinate (or the whole OKP public key), base64url.
    pub x: String,
    /// EC y coordinate, base64url.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    /// Private key, base64url. Present only in secret key files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub d: Option<String>,
}

/// The did:key of an Ed25519 public key (`didkey::did_for`; defined here, below `didkey`, so that
/// [`SecretKey::did_key`] needs nothing from a module that uses this one).
pub(crate) fn did_key_of(key: &ed25519_dalek::VerifyingKey) -> crate::Did {
    crate::Did::parse(&format!("did:key:{}", encode_multikey(key)))
        .expect("a multibase key is always a valid method-specific id")
}

/// The node's (or an agent's) Ed25519 secret key.
pub struct SecretKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SecretKey({})",
            crate::key::encode_multikey(&self.public())
        )
    }
}

impl SecretKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        // ed25519-dalek 3 takes rand_core 0.10's generators; the seed comes from the same source.
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, seed.as_mut());
        Self(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// The key with this 32-byte seed (deterministic; tests and test vectors).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self(ed25519_dalek::SigningKey::from_bytes(seed))
    }

    /// The 32-byte seed.
    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The public key.
    pub fn public(&self) -> ed25519_dalek::VerifyingKey {
        self.0.verifying_key()
    }

    /// Sign `msg` (Ed25519, 64-byte signature).
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.0.sign(msg).to_bytes()
    }

    /// This key's did:key.
    pub fn did_key(&self) -> crate::Did {
        did_key_of(&self.public())
    }

    /// The private JWK (with `d`).
    pub fn to_jwk(&self) -> Jwk {
        Jwk {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            x: B64URL.encode(self.public().as_bytes()),
            y: None,
            d: Some(B64URL.encode(self.0.to_bytes())),
        }
    }

    /// Read a key from a private JWK.
    pub fn from_jwk(jwk: &Jwk) -> Result<Self, String> {
        if jwk.kty != "OKP" || jwk.crv != "Ed25519" {
            return Err(format!(
                "expected an OKP/Ed25519 JWK, found {}/{}",
                jwk.kty, jwk.crv
            ));
        }
        let d = jwk.d.as_deref().ok_or("JWK has no private part \"d\"")?;
        let d = B64URL
            .decode(d)
            .map_err(|e| format!("\"d\" is not base64url: {e}"))?;
        let seed: [u8; 32] = d
            .as_slice()
            .try_into()
            .map_err(|_| format!("\"d\" must be 32 bytes, got {}", d.len()))?;
        let key = Self::from_seed(&seed);
        if B64URL.encode(key.public().as_bytes()) != jwk.x {
            return Err("\"x\" does not match the private key \"d\"".into());
        }
        Ok(key)
    }

    /// Load a key file written by [`save`](Self::save).
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let io = |source| KeyError::Io {
            action: "reading",
            path: path.to_owned(),
            source,
        };
        let meta = fs::metadata(path).map_err(io)?;
        if meta.len() > MAX_KEY_FILE {
            return Err(KeyError::BadKeyFile {
                path: path.to_owned(),
                reason: format!("{} bytes, larger than any key file", meta.len()),
            });
        }
        let text = fs::read(path).map_err(io)?;
        let jwk: Jwk = serde_json::from_slice(&text).map_err(|e| KeyError::BadKeyFile {
            path: path.to_owned(),
            reason: format!("not a JWK: {e}"),
        })?;
        Self::from_jwk(&jwk).map_err(|reason| KeyError::BadKeyFile {
            path: path.to_owned(),
            reason,
        })
    }

    /// Write the key as a private JWK, readable by the owner only (mode 0600). Refuses to
    /// overwrite an existing file; the write goes to a temporary file renamed into place, so a
    /// crash never leaves a half-written key.
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let io = |source| KeyError::Io {
            action: "writing",
            path: path.to_owned(),
            source,
        };
        if path.exists() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "refusing to overwrite an existing key",
            )));
        }
        let tmp = path.with_extension("tmp");
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp).map_err(io)?;
        let body = serde_json::to_vec_pretty(&self.to_jwk()).expect("a JWK always serializes");
        f.write_all(&body).map_err(io)?;
        f.sync_all().map_err(io)?;
        drop(f);
        fs::rename(&tmp, path).map_err(io)
    }

    /// Load the key at `path`, or create and save a new one if there is none.
    /// Returns the key and whether it was created.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool), KeyError> {
        if path.exists() {
            return Ok((Self::load(path)?, false));
        }
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|source| KeyError::Io {
                action: "creating the directory of",
                path: path.to_owned(),
                source,
            })?;
        }
        let key = Self::generate();
        key.save(path)?;
        Ok((key, true))
    }
}

/// A public key we can verify signatures with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublicKey {
    /// Ed25519 (EdDSA).
    Ed25519(ed25519_dalek::VerifyingKey),
    /// NIST P-256 (ES256).
    P256(p256::ecdsa::VerifyingKey),
}

impl PublicKey {
    /// Verify a signature. Ed25519 uses `verify_strict` (no small-order keys, canonical `S`);
    /// P-256 takes a 64-byte `r || s` signature as JWS does.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        match self {
            PublicKey::Ed25519(k) => {
                let Ok(sig) = ed25519_dalek::Signature::from_slice(sig) else {
                    return false;
                };
                k.verify_strict(msg, &sig).is_ok()
            }
            PublicKey::P256(k) => {
                let Ok(sig) = p256::ecdsa::Signature::from_slice(sig) else {
                    return false;
                };
                k.verify(msg, &sig).is_ok()
            }
        }
    }

    /// The Ed25519 key, if it is one.
    pub fn ed25519(&self) -> Option<&ed25519_dalek::VerifyingKey> {
        match self {
            PublicKey::Ed25519(k) => Some(k),
            _ => None,
        }
    }

    /// The JWS `alg` that goes with this key.
    pub fn jws_alg(&self) -> &'static str {
        match self {
            PublicKey::Ed25519(_) => "EdDSA",
            PublicKey::P256(_) => "ES256",
        }
    }

    /// Decode a public JWK (OKP/Ed25519 or EC/P-256).
    pub fn from_jwk(jwk: &Jwk) -> Result<Self, KeyError> {
        let b64 = |s: &str, what: &str| {
            B64URL
                .decode(s)
                .map_err(|e| KeyError::InvalidPublicKey(format!("JWK \"{what}\": {e}")))
        };
        match (jwk.kty.as_str(), jwk.crv.as_str()) {
            ("OKP", "Ed25519") => ed25519_from_bytes(&b64(&jwk.x, "x")?),
            ("EC", "P-256") => {
                let x = b64(&jwk.x, "x")?;
                let y = b64(
                    jwk.y
                        .as_deref()
                        .ok_or_else(|| KeyError::InvalidPublicKey("EC JWK without \"y\"".into()))?,
                    "y",
                )?;
                if x.len() != 32 || y.len() != 32 {
                    return Err(KeyError::InvalidPublicKeyLength {
                        kind: "P-256 coordinate",
                        expected: 32,
                        got: x.len().max(y.len()),
                    });
                }
                let mut sec1 = Vec::with_capacity(65);
                sec1.push(4);
                sec1.extend_from_slice(&x);
                sec1.extend_from_slice(&y);
                let k = p256::ecdsa::VerifyingKey::from_sec1_bytes(&sec1)
                    .map_err(|_| KeyError::InvalidPublicKey("P-256 point not on curve".into()))?;
                Ok(PublicKey::P256(k))
            }
            (kty, crv) => Err(KeyError::UnsupportedType(format!("JWK {kty}/{crv}"))),
        }
    }

    /// Decode a Multikey `publicKeyMultibase` (`z6Mk…` Ed25519, `zDn…` P-256).
    pub fn from_multikey(s: &str) -> Result<Self, KeyError> {
        let bytes = decode_base58btc_multibase(s)?;
        if let Some(raw) = bytes.strip_prefix(&MULTICODEC_ED25519_PUB) {
            return ed25519_from_bytes(raw);
        }
        if let Some(raw) = bytes.strip_prefix(&MULTICODEC_P256_PUB) {
            let k = p256::ecdsa::VerifyingKey::from_sec1_bytes(raw)
                .map_err(|_| KeyError::InvalidPublicKey("bad P-256 point".into()))?;
            return Ok(PublicKey::P256(k));
        }
        Err(KeyError::UnsupportedType(format!(
            "multikey with multicodec prefix {:02x?}",
            &bytes[..bytes.len().min(2)]
        )))
    }
}

/// Decode a multibase string that must use base58btc (`z`).
pub(crate) fn decode_base58btc_multibase(s: &str) -> Result<Vec<u8>, KeyError> {
    if s.len() > 512 {
        return Err(KeyError::InvalidPublicKey(
            "multibase value too long".into(),
        ));
    }
    if !s.starts_with('z') {
        return Err(KeyError::InvalidPublicKey(format!(
            "multibase value must be base58btc ('z'), found {:?}",
            s.chars().next()
        )));
    }
    let (_, bytes) =
        multibase::decode(s).map_err(|e| KeyError::InvalidPublicKey(format!("multibase: {e}")))?;
    Ok(bytes)
}

pub(crate) fn ed25519_from_bytes(raw: &[u8]) -> Result<PublicKey, KeyError> {
    let arr: [u8; 32] = raw
        .try_into()
        .map_err(|_| KeyError::InvalidPublicKeyLength {
            kind: "Ed25519",
            expected: 32,
            got: raw.len(),
        })?;
    let k = ed25519_dalek::VerifyingKey::from_bytes(&arr)
        .map_err(|_| KeyError::InvalidPublicKey("Ed25519 point does not decompress".into()))?;
    Ok(PublicKey::Ed25519(k))
}

/// `z` + base58btc(0xed01 || key): the Multikey form of an Ed25519 public key.
pub fn encode_multikey(key: &ed25519_dalek::VerifyingKey) -> String {
    let mut bytes = Vec::with_capacity(34);
    bytes.extend_from_slice(&MULTICODEC_ED25519_PUB);
    bytes.extend_from_slice(key.as_bytes());
    multibase::encode(multibase::Base::Base58Btc, bytes)
}

/// The public JWK of an Ed25519 key.
pub fn ed25519_public_jwk(key: &ed25519_dalek::VerifyingKey) -> Jwk {
    Jwk {
        kty: "OKP".into(),
        crv: "Ed25519".into(),
        x: B64URL.encode(key.as_bytes()),
        y: None,
        d: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_then_load_gives_the_same_key_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        let (k, created) = SecretKey::load_or_create(&path).unwrap();
        assert!(created);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let (again, created) = SecretKey::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(k.seed(), again.seed());
        assert!(k.save(&path).is_err(), "must not overwrite a key");
    }

    #[test]
    fn load_refuses_broken_files_with_the_path_in_the_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.key");
        fs::write(&path, b"{not json").unwrap();
        let e = SecretKey::load(&path).unwrap_err().to_string();
        assert!(e.contains("bad.key") && e.contains("not a JWK"), "{e}");
        let mut jwk = SecretKey::generate().to_jwk();
        jwk.x = SecretKey::generate().to_jwk().x;
        fs::write(&path, serde_json::to_vec(&jwk).unwrap()).unwrap();
        let e = SecretKey::load(&path).unwrap_err().to_string();
        assert!(e.contains("does not match"), "{e}");
    }

    #[test]
    fn verify_is_strict() {
        let k = SecretKey::from_seed(&[7; 32]);
        let sig = k.sign(b"hello");
        let pk = PublicKey::Ed25519(k.public());
        assert!(pk.verify(b"hello", &sig));
        assert!(!pk.verify(b"hellO", &sig));
        assert!(!pk.verify(b"hello", &sig[..63]));
        // A small-order public key (the identity point) must never verify anything.
        let mut id = [0u8; 32];
        id[0] = 1;
        let weak = ed25519_from_bytes(&id).unwrap();
        let mut zero_sig = [0u8; 64];
        zero_sig[0] = 1;
        assert!(!weak.verify(b"anything", &zero_sig));
    }
}
