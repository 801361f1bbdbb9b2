//! The one way agentnet builds HTTP clients: reqwest with rustls on ring and the webpki roots,
//! the TLS configuration handed to each client ([`reqwest::ClientBuilder::tls_backend_preconfigured`]).
//!
//! reqwest is built with `rustls-no-provider` (no aws-lc-rs, no OpenSSL). A client built the
//! plain way (`reqwest::Client::new()`, `reqwest::get`, `Client::builder().build()`) would look
//! for a process-wide rustls crypto provider and panic when none is installed; the builders here
//! never do. Build every client through them.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// An extra root certificate is not a PEM certificate rustls accepts.
    #[error("extra root certificate {index}: {reason}")]
    RootCertificate {
        /// Its position in the list given.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// A rustls client configuration: ring, rustls' default protocol versions (TLS 1.2 and 1.3),
/// the webpki roots plus `extra_root_pems` (one PEM certificate each), HTTP/1.1 by ALPN.
pub fn tls_config(extra_root_pems: &[Vec<u8>]) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for (index, pem) in extra_root_pems.iter().enumerate() {
        let bad = |reason: String| TlsError::RootCertificate { index, reason };
        let cert = CertificateDer::from_pem_slice(pem).map_err(|e| bad(e.to_string()))?;
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // ring implements every version rustls offers by default.
        .expect("ring supports rustls' default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // What reqwest offers itself when it builds the configuration (no `http2` feature here).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A client builder with our TLS configuration and the webpki roots. Set timeouts, redirects,
/// proxy and DNS on it as usual; do not call its root-certificate methods, which a preconfigured
/// TLS backend ignores (use [`client_builder_with_roots`]).
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config(&[]).expect("no extra roots, nothing to refuse"))
}

/// [`client_builder`], also trusting `extra_root_pems` (test servers, private CAs).
pub fn client_builder_with_roots(
    extra_root_pems: &[Vec<u8>],
) -> Result<reqwest::ClientBuilder, TlsError> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(tls_config(extra_root_pems)?))
}

/// A client with default settings, in place of `reqwest::Client::new()`.
///
/// # Panics
/// Like `reqwest::Client::new()`, if the client cannot be built (it has no setting that can
/// fail); code that can report an error uses `client_builder().build()`.
pub fn client() -> reqwest::Client {
    client_builder()
        .build()
        .expect("a client with default settings builds")
}

/// `GET url` with [`client`], in place of `reqwest::get`.
pub async fn get<U: reqwest::IntoUrl>(url: U) -> reqwest::Result<reqwest::Response> {
    client().get(url).send().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_build_without_a_process_wide_crypto_provider() {
        // reqwest's own TLS setup would panic here: nothing installs a provider in this
        // test binary.
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
        client_builder().build().unwrap();
        client();
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    }

    #[test]
    fn a_bad_extra_root_is_named_by_position() {
        let e = client_builder_with_roots(&[b"not a certificate".to_vec()]).unwrap_err();
        assert!(
            e.to_string().starts_with("extra root certificate 0:"),
            "{e}"
        );
    }

    // With `ssi`, its dependencies turn on a reqwest TLS feature that brings a default
    // provider, so a plain client builds there: the trap exists in the default build only.
    #[cfg(not(feature = "ssi"))]
    #[test]
    fn plain_reqwest_clients_would_panic() {
        // Why the builders above exist: reqwest's default TLS setup needs a provider.
        let built = std::panic::catch_unwind(|| reqwest::Client::builder().build());
        assert!(built.is_err());
    }
}

/// Why [`read_limited`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The body is longer than the limit (by its `Content-Length`, or as it came).
    #[error("the body is over {0} bytes")]
    TooLarge(usize),
    /// Reading it failed.
    #[error("reading the body: {0}")]
    Http(#[source] reqwest::Error),
}

/// `resp`'s body, at most `limit` bytes: refused by a larger `Content-Length` before anything
/// is read, and as soon as what came passes `limit` (so a peer cannot make us hold more).
pub async fn read_limited(mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, ReadError> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(ReadError::TooLarge(limit));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(ReadError::Http)? {
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
