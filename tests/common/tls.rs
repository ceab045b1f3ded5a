//! TLS for tests: a CA and certificates made here (rcgen), clients that trust that CA, and
//! a TLS front that relays to a plain upstream (to stand in for an HTTPS server that
//! demands client certificates).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};

/// A certificate and key written to files, and the certificate's DER (to compare with what
/// a server presented).
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub der: Vec<u8>,
}

/// A throwaway certificate authority in a directory of its own.
pub struct Pki {
    pub dir: PathBuf,
    pub ca_pem: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    n: AtomicUsize,
}

impl Pki {
    pub fn new() -> Pki {
        let _ = rustls::crypto::ring::default_provider().install_default();
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mcp-edge-pki-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "mcp-edge test CA");
        let ca = params.self_signed(&ca_key).unwrap();
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, ca.pem()).unwrap();
        Pki {
            dir,
            ca_pem,
            ca,
            ca_key,
            n: AtomicUsize::new(0),
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn issue(&self, names: &[&str]) -> Issued {
        self.issue_with(names, |_| {})
    }

    /// A server certificate that expired in 2021.
    pub fn issue_expired(&self, names: &[&str]) -> Issued {
        self.issue_with(names, |p| {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    /// A client certificate (for mutual TLS).
    pub fn issue_client(&self, name: &str) -> Issued {
        self.issue_with(&[name], |p| {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        })
    }

    fn issue_with(&self, names: &[&str], tweak: impl FnOnce(&mut CertificateParams)) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("x"));
        tweak(&mut params);
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let i = self.n.fetch_add(1, Ordering::Relaxed);
        let issued = Issued {
            cert: self.dir.join(format!("cert-{i}.pem")),
            key: self.dir.join(format!("key-{i}.pem")),
            der: cert.der().to_vec(),
        };
        std::fs::write(&issued.cert, cert.pem()).unwrap();
        std::fs::write(&issued.key, key.serialize_pem()).unwrap();
        issued
    }

    /// The CA as a rustls root store.
    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.ca.der().to_vec()))
            .unwrap();
        roots
    }

    /// A reqwest client that trusts this CA; `pooled: false` opens a new connection (and
    /// handshake) per request.
    pub fn client(&self, pooled: bool) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&self.ca_pem).unwrap()).unwrap();
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .timeout(std::time::Duration::from_secs(20));
        if !pooled {
            b = b.pool_max_idle_per_host(0);
        }
        b.build().unwrap()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Replace a file the way a Kubernetes Secret update does: write aside, rename over.
pub fn replace_file(path: &Path, bytes: &[u8]) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, bytes).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// Handshake with `addr` sending `sni`; the leaf certificate the server presented, and the
/// ALPN protocol it chose.
pub async fn presented(
    roots: rustls::RootCertStore,
    addr: SocketAddr,
    sni: &str,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (_, conn) = tls.get_ref();
    let leaf = conn.peer_certificates().unwrap()[0].to_vec();
    (leaf, conn.alpn_protocol().map(|p| p.to_vec()))
}

/// A TLS server on 127.0.0.1 that demands a client certificate signed by `pki`, then
/// relays bytes to `backend`. Returns its address and a count of relayed connections.
pub async fn mtls_front(
    pki: &Pki,
    server: &Issued,
    backend: SocketAddr,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(pki.roots()))
        .build()
        .unwrap();
    let chain = CertificateDer::pem_file_iter(&server.cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&server.key).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let relayed = Arc::new(AtomicUsize::new(0));
    let count = relayed.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(backend).await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (addr, relayed)
}
