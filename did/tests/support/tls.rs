//! Test support shared by the did and node crates' tests (included with `#[path]`, as test
//! targets of two crates cannot share a module otherwise).

use std::sync::Arc;
use std::time::Duration;

/// axum's listener for HTTPS on loopback (rustls on ring, HTTP/1.1 only, as the node serves):
/// the test's certificate, a handshake a client gives up on (one that refuses the certificate)
/// is skipped, and none holds up the next connection for more than 5 s.
pub struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl TlsListener {
    pub fn new(listener: std::net::TcpListener, (cert, key): &(String, String)) -> Self {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap();
        Self {
            tcp: tokio::net::TcpListener::from_std(listener).unwrap(),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let handshake = self.acceptor.accept(tcp);
            if let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(5), handshake).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
