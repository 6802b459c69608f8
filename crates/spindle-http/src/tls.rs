//! TLS configuration for [`Server::tls`](crate::Server::tls) and
//! [`Client::tls_config`](crate::Client::tls_config), on rustls with the
//! `ring` crypto provider (no C toolchain beyond `cc`, no cmake).
//!
//! The handshake itself runs on the connection's own fiber (see the
//! `stream` module): the accept loop never waits for a TLS peer.
//!
//! ```no_run
//! let tls = spindle_http::tls::server_config_from_pem_files("cert.pem", "key.pem").unwrap();
//! spindle::run(move || {
//!     let server = spindle_http::Server::bind("127.0.0.1:8443").unwrap().tls(tls);
//!     server.serve(|_req| spindle_http::Response::new("secure".into())).unwrap();
//! });
//! ```

use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

pub use rustls;

/// The ALPN protocol both sides offer: HTTP/1.1 only.
const ALPN_HTTP11: &[u8] = b"http/1.1";
const ALPN_H2: &[u8] = b"h2";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static PROVIDER: OnceLock<Arc<rustls::crypto::CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

/// A server configuration from a PEM certificate chain (leaf first) and a
/// PEM private key (PKCS#8, PKCS#1 or SEC1), offering ALPN `h2` then
/// `http/1.1` (a server with [`ServerConfig::http2`](crate::ServerConfig)
/// off offers only `http/1.1`).
///
/// ```no_run
/// let cert = std::fs::read("cert.pem").unwrap();
/// let key = std::fs::read("key.pem").unwrap();
/// let config = spindle_http::tls::server_config_from_pem(&cert, &key).unwrap();
/// ```
pub fn server_config_from_pem(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
) -> io::Result<Arc<rustls::ServerConfig>> {
    let chain = CertificateDer::pem_slice_iter(cert_chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(
            "certificate chain: no CERTIFICATE block in the PEM",
        ));
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| invalid(format!("private key: {e}")))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(invalid)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| invalid(format!("certificate and key: {e}")))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// The server's ALPN offer as its HTTP/2 switch says: `h2` (first) only
/// when it is on; `http/1.1` always. A configuration that offers nothing
/// gets both: the server knows what it speaks.
pub(crate) fn server_alpn(
    config: Arc<rustls::ServerConfig>,
    http2: bool,
) -> Arc<rustls::ServerConfig> {
    let offers_h2 = config.alpn_protocols.iter().any(|p| p == ALPN_H2);
    let fits = if config.alpn_protocols.is_empty() {
        false
    } else {
        offers_h2 == http2
    };
    if fits {
        return config;
    }
    let mut config = (*config).clone();
    if config.alpn_protocols.is_empty() {
        config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    }
    if http2 && !config.alpn_protocols.iter().any(|p| p == ALPN_H2) {
        config.alpn_protocols.insert(0, ALPN_H2.to_vec());
    }
    if !http2 {
        config.alpn_protocols.retain(|p| p != ALPN_H2);
    }
    Arc::new(config)
}

/// [`server_config_from_pem`] reading the two PEM files.
///
/// ```no_run
/// let config = spindle_http::tls::server_config_from_pem_files("cert.pem", "key.pem").unwrap();
/// ```
pub fn server_config_from_pem_files(
    cert_chain: impl AsRef<Path>,
    key: impl AsRef<Path>,
) -> io::Result<Arc<rustls::ServerConfig>> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    };
    server_config_from_pem(&read(cert_chain.as_ref())?, &read(key.as_ref())?)
}

/// A client configuration trusting the Mozilla roots of `webpki-roots`,
/// offering ALPN `h2` then `http/1.1`: what
/// [`Client::new`](crate::Client::new) uses. Built once per process.
///
/// ```
/// let config = spindle_http::tls::default_client_config();
/// assert_eq!(config.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
/// ```
pub fn default_client_config() -> Arc<rustls::ClientConfig> {
    static DEFAULT: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            client_config(roots).expect("the ring provider supports the default versions")
        })
        .clone()
}

/// A client configuration trusting only the CA certificates in `ca_pem`
/// (a private CA, a test CA).
///
/// ```no_run
/// let ca = std::fs::read("ca.pem").unwrap();
/// let client = spindle_http::Client::new()
///     .tls_config(spindle_http::tls::client_config_with_ca_pem(&ca).unwrap());
/// ```
pub fn client_config_with_ca_pem(ca_pem: &[u8]) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| invalid(format!("CA certificate: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| invalid(format!("CA certificate: {e}")))?;
        added += 1;
    }
    if added == 0 {
        return Err(invalid("CA certificate: no CERTIFICATE block in the PEM"));
    }
    client_config(roots)
}

fn client_config(roots: rustls::RootCertStore) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(invalid)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// `config` offering exactly what a client connection may speak: `h2`
/// then `http/1.1` when `http2`, else `http/1.1` alone. The caller's own
/// offer is kept when it already fits.
pub(crate) fn client_alpn(
    config: Arc<rustls::ClientConfig>,
    http2: bool,
) -> Arc<rustls::ClientConfig> {
    let want: Vec<Vec<u8>> = if http2 {
        vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()]
    } else {
        vec![ALPN_HTTP11.to_vec()]
    };
    if config.alpn_protocols == want {
        return config;
    }
    let mut config = (*config).clone();
    config.alpn_protocols = want;
    Arc::new(config)
}
