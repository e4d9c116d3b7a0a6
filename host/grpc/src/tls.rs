//! TLS on both listeners, with rustls (no OpenSSL).
//!
//! The peer listener always requires a client certificate signed by the
//! cluster CA (mutual TLS): only members of the cluster may send Raft
//! messages. The client listener requires a client certificate, signed by
//! the client CA or the cluster CA, when `client_cert_auth` is on; the
//! certificate's common name is then the caller's identity (see
//! [`crate::auth`]). Nodes use their own certificate as client identity
//! when they dial peers and when they forward requests to the leader.
//!
//! Handshakes run here rather than inside tonic, so that a refused one is
//! logged (rate-limited) with the address it came from and counted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's TLS material and client-port policy, read from PEM files.
#[derive(Clone)]
pub struct TlsSettings {
    /// This node's certificate chain (PEM), served on both ports.
    pub cert_pem: Vec<u8>,
    /// Its private key (PEM).
    pub key_pem: Vec<u8>,
    /// The cluster CA (PEM): signs node certificates; trusted by the peer
    /// port, and to verify peers and the leader when this node dials them.
    pub ca_pem: Vec<u8>,
    /// The CA that signs client certificates (PEM); the cluster CA when
    /// `None`.
    pub client_ca_pem: Option<Vec<u8>>,
    /// The client port requires a certificate from a trusted CA.
    pub client_cert_auth: bool,
    /// Common names of the client certificates allowed to administer the
    /// cluster (used when `client_cert_auth` is on).
    pub admins: Vec<String>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("client_cert_auth", &self.client_cert_auth)
            .field("admins", &self.admins)
            .finish_non_exhaustive()
    }
}

/// A TLS setting that cannot be used, with what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("tls: {0}")]
pub struct TlsError(String);

fn certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError(format!("{what}: not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{what}: no certificate in the file")));
    }
    Ok(certs)
}

fn roots(pems: &[&[u8]]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for pem in pems {
        for cert in certs(pem, "CA")? {
            store
                .add(cert)
                .map_err(|e| TlsError(format!("CA certificate refused: {e}")))?;
        }
    }
    Ok(Arc::new(store))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsSettings {
    fn server_config(
        &self,
        verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
    ) -> Result<rustls::ServerConfig, TlsError> {
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem)
            .map_err(|e| TlsError(format!("key: {e}")))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs(&self.cert_pem, "cert")?, key)
            .map_err(|e| TlsError(format!("cert and key: {e}")))?;
        // gRPC is HTTP/2; tonic's clients insist on negotiating it.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }

    /// The peer port's configuration: mutual TLS with the cluster CA.
    pub fn peer_server(&self) -> Result<TlsAcceptor, TlsError> {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(roots(&[&self.ca_pem])?, provider())
                .build()
                .map_err(|e| TlsError(format!("peer verifier: {e}")))?;
        Ok(TlsAcceptor::from(Arc::new(self.server_config(verifier)?)))
    }

    /// The client port's configuration: a client certificate from the
    /// client CA or the cluster CA (nodes forwarding requests) is required
    /// with `client_cert_auth`, and not asked for otherwise.
    pub fn client_server(&self) -> Result<TlsAcceptor, TlsError> {
        let verifier: Arc<dyn rustls::server::danger::ClientCertVerifier> = if self.client_cert_auth
        {
            let client_ca = self.client_ca_pem.as_deref().unwrap_or(&self.ca_pem);
            WebPkiClientVerifier::builder_with_provider(
                roots(&[client_ca, &self.ca_pem])?,
                provider(),
            )
            .build()
            .map_err(|e| TlsError(format!("client verifier: {e}")))?
        } else {
            WebPkiClientVerifier::no_client_auth()
        };
        Ok(TlsAcceptor::from(Arc::new(self.server_config(verifier)?)))
    }

    /// How this node dials its peers and the leader: it trusts the cluster
    /// CA and presents its own certificate.
    pub fn dialer(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
    }

    /// Checks every file parses and fits together, so that a bad setting
    /// fails at start rather than on the first connection.
    pub fn validate(&self) -> Result<(), TlsError> {
        self.peer_server()?;
        self.client_server()?;
        Ok(())
    }
}

/// TLS handshakes refused so far, per listener kind (for metrics).
#[derive(Debug, Default)]
pub struct HandshakeFailures {
    /// On the peer port.
    pub peer: AtomicU64,
    /// On the client port.
    pub client: AtomicU64,
}

/// Handshake failures of this process.
pub static HANDSHAKE_FAILURES: HandshakeFailures = HandshakeFailures {
    peer: AtomicU64::new(0),
    client: AtomicU64::new(0),
};

/// Accepts TCP connections on `listener` and yields those whose TLS
/// handshake succeeds; refused handshakes are logged (at most one line per
/// second per listener) and counted.
pub fn incoming(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    peer_port: bool,
) -> ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    let what = if peer_port { "peer" } else { "client" };
    let counter = if peer_port {
        &HANDSHAKE_FAILURES.peer
    } else {
        &HANDSHAKE_FAILURES.client
    };
    tokio::spawn(async move {
        let last_log = Arc::new(parking_lot::Mutex::new(None::<tokio::time::Instant>));
        loop {
            let (tcp, addr) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(listener = what, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            if tx.is_closed() {
                return; // the server stopped
            }
            let (acceptor, tx, last_log) = (acceptor.clone(), tx.clone(), last_log.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => refused(counter, &last_log, what, addr, &e.to_string()),
                    Err(_) => refused(counter, &last_log, what, addr, "handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

fn refused(
    counter: &AtomicU64,
    last_log: &parking_lot::Mutex<Option<tokio::time::Instant>>,
    what: &str,
    addr: SocketAddr,
    error: &str,
) {
    let total = counter.fetch_add(1, Ordering::Relaxed) + 1;
    let now = tokio::time::Instant::now();
    let mut last = last_log.lock();
    if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
        *last = Some(now);
        tracing::warn!(listener = what, from = %addr, error, refused_so_far = total, "refused a TLS handshake");
    }
}

/// The URI to dial `addr` (`host:port`, or a URI) at: `https` with TLS.
pub fn uri(addr: &str, tls: bool) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else if tls {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files from an operator may be anything: garbage, empty, a key where a
    /// certificate belongs. Each is a clear error at start, never a panic.
    #[test]
    fn unusable_files_are_clear_errors() {
        let settings = |cert: &[u8], key: &[u8], ca: &[u8]| TlsSettings {
            cert_pem: cert.to_vec(),
            key_pem: key.to_vec(),
            ca_pem: ca.to_vec(),
            client_ca_pem: None,
            client_cert_auth: true,
            admins: vec![],
        };
        let garbage = b"-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n";
        for (cert, key, ca) in [
            (&b""[..], &b""[..], &b""[..]),
            (&garbage[..], &b"not a key"[..], &garbage[..]),
            (&[0xffu8; 4096][..], &[0u8; 10][..], &[0x2du8; 100][..]),
        ] {
            let err = settings(cert, key, ca).validate().unwrap_err();
            assert!(err.to_string().starts_with("tls: "), "{err}");
        }
    }
}
