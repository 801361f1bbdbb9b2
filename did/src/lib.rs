//! Identity for agentnet: DIDs, keys, DID documents and their resolution, signed A2A Agent Cards,
//! and RFC 9421 HTTP request signatures as the Agent Network Protocol uses them.
//!
//! This is the light crate: no libp2p, no RocksDB. Everything else in agentnet depends on it.
//!
//! ```
//! use agentnet_did::{SecretKey, Resolver, Relationship};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let key = SecretKey::from_seed(&[0; 32]);
//! let did = key.did_key();
//! assert_eq!(did.as_str(), "did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp");
//!
//! // did:key resolves locally; did:web and did:wba go over HTTPS with SSRF checks.
//! let resolver = Resolver::new(Default::default()).unwrap();
//! let doc = resolver.resolve(&did).await.unwrap();
//! let vm = format!("{did}#{}", did.method_specific_id());
//! assert!(doc.key_for(&vm, Relationship::Authentication).is_ok());
//! # }
//! ```
//!
//! # Layout
//! - [`id`]: DID and DID URL syntax.
//! - [`key`]: Ed25519 secret keys (JWK files, mode 0600) and the public keys we verify with.
//! - [`document`]: DID documents, their checks, key lookup by verification relationship.
//! - [`didkey`], [`web`], [`wba`]: the three methods we implement; [`resolver`] ties them together
//!   with a cache. [`ResolveError`] and the check every fetched document passes sit below all
//!   four, so imports between the modules run one way (none depends on a module that uses it).
//! - [`json`]: strict JSON intake (depth, size, no duplicate member names).
//! - [`http`]: the HTTP client builder every agentnet crate uses (rustls on ring, per client).
//! - [`di`]: Data Integrity proofs (`eddsa-jcs-2022`); [`delegation`]: delegation chains of
//!   such credentials, and their checks (issue 18).
//! - [`receipt`]: signed task receipts (issue 18), a compact JWS over a JCS payload.
//! - [`batch`]: Ed25519 request signatures verified in batches across concurrent callers.
//! - [`text`]: NFC and hidden characters, [`text::sanitize`] for printing untrusted text.
//! - [`jcs`]: RFC 8785 canonical JSON, the bytes every signature here covers; `jws` (private):
//!   the compact JWS that receipts and endorsements share.
//! - [`card`]: A2A Agent Card signatures (JWS over the canonical card), on [`a2a`]'s
//!   canonicalization of the card as the official SDKs write it.
//! - [`httpsig`]: RFC 9421 HTTP Message Signatures with a DID URL as `keyid` (the ANP SDK's).
//! - [`endorsement`]: signed "A vouches for B" statements; [`checkpoint`]: signed checkpoints of
//!   a hash-chained log (the audit log's head).
//! - `resolution` (private): [`ResolveError`] and the check every fetched document passes.
//! - `ssi_bridge` (feature `ssi`): other DID methods through spruceid's `ssi`, with our checks.

pub mod a2a;
pub mod batch;
pub mod card;
pub mod checkpoint;
pub mod delegation;
pub mod di;
pub mod didkey;
pub mod document;
pub mod endorsement;
pub mod http;
pub mod httpsig;
pub mod id;
pub mod jcs;
pub mod json;
mod jws;
pub mod key;
pub mod receipt;
mod resolution;
pub mod resolver;
#[cfg(feature = "ssi")]
pub mod ssi_bridge;
pub mod text;
pub mod wba;
pub mod web;

pub use document::{Document, Relationship};
pub use id::{Did, DidUrl, InvalidDid, Method};
pub use key::{PublicKey, SecretKey};
pub use resolver::{ResolveError, Resolver};
