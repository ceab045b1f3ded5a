//! TLS at both ends: the certificates a TLS listener serves, and what a pool of HTTPS
//! members is trusted with.
//!
//! - [`Certificates`]: one listener's certificates, chosen by SNI against each
//!   certificate's DNS names (wildcards one label deep); the first is the default. It is
//!   the rustls certificate resolver itself, so [`Certificates::reload`] swaps what new
//!   handshakes get while open connections keep theirs (SIGHUP, or a changed file: see
//!   [`crate::ops::reload`]). A reload that cannot read or parse the files keeps what is served.
//! - [`UpstreamTls`]: a pool's SNI, verification, CA bundle and client certificate, in the
//!   form Pingora's connector takes (checked when the configuration loads).

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use pingora::protocols::tls::CaType;
use pingora::utils::tls::{CertKey, WrappedX509};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::metrics;

/// A certificate chain file and its key file, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: String,
    pub key: String,
}

/// One loaded certificate.
struct Served {
    /// Lower-cased DNS names from the leaf (subjectAltName, else the common name).
    names: Vec<String>,
    key: Arc<CertifiedKey>,
    /// The leaf's notAfter, seconds since the epoch.
    not_after: i64,
}

/// Each certificate file's and key file's bytes.
type FileBytes = Vec<(Vec<u8>, Vec<u8>)>;

struct Loaded {
    served: Vec<Served>,
    /// The files' bytes, to tell a changed file from an untouched one.
    bytes: FileBytes,
}

/// The certificates of one TLS listener.
pub struct Certificates {
    /// The listener's address (metric label).
    listener: String,
    files: Vec<CertFiles>,
    loaded: ArcSwap<Loaded>,
    /// The bytes of the last files that failed to load: reported once, not every poll.
    failed: std::sync::Mutex<Option<FileBytes>>,
}

impl fmt::Debug for Certificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificates")
            .field("listener", &self.listener)
            .field("files", &self.files)
            .finish()
    }
}

impl Certificates {
    /// Read and check every certificate; an error names the file.
    pub fn load(listener: String, files: Vec<CertFiles>) -> Result<Certificates, String> {
        let loaded = read_all(&files)?;
        let certificates = Certificates {
            listener,
            files,
            loaded: ArcSwap::from_pointee(loaded),
            failed: std::sync::Mutex::new(None),
        };
        certificates.publish();
        Ok(certificates)
    }

    /// Read the files again and serve them if they changed. `Ok(true)`: new certificates
    /// are served; `Ok(false)`: nothing changed (or the same broken files as last time);
    /// `Err`: the old ones are still served.
    pub fn reload(&self) -> Result<bool, String> {
        let bytes = read_bytes(&self.files)?;
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if bytes == self.loaded.load().bytes || failed.as_ref() == Some(&bytes) {
            return Ok(false);
        }
        let loaded = match parse_all(&self.files, bytes.clone()) {
            Ok(l) => l,
            Err(e) => {
                *failed = Some(bytes);
                return Err(e);
            }
        };
        *failed = None;
        self.loaded.store(Arc::new(loaded));
        self.publish();
        Ok(true)
    }

    /// The rustls configuration for this listener: TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by
    /// ALPN, certificates from `self` (so a reload reaches new handshakes).
    pub fn server_config(self: &Arc<Self>) -> Arc<ServerConfig> {
        pingora::tls::install_default_crypto_provider();
        let mut config = ServerConfig::builder_with_protocol_versions(&[
            &rustls::version::TLS12,
            &rustls::version::TLS13,
        ])
        .with_no_client_auth()
        .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// The files this listener serves from.
    pub fn files(&self) -> &[CertFiles] {
        &self.files
    }

    /// The names served (every certificate's), for logs.
    pub fn names(&self) -> Vec<String> {
        self.loaded
            .load()
            .served
            .iter()
            .flat_map(|s| s.names.iter().cloned())
            .collect()
    }

    fn publish(&self) {
        let loaded = self.loaded.load();
        for s in &loaded.served {
            let name = s.names.first().map_or("", String::as_str);
            metrics::get()
                .tls
                .certificate_expiry
                .with_label_values(&[self.listener.as_str(), name])
                .set(s.not_after);
        }
    }

    fn choose(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let loaded = self.loaded.load();
        let chosen = sni.and_then(|sni| {
            let sni = sni.to_ascii_lowercase();
            loaded
                .served
                .iter()
                .find(|s| s.names.contains(&sni))
                .or_else(|| {
                    loaded
                        .served
                        .iter()
                        .find(|s| s.names.iter().any(|n| wildcard_matches(n, &sni)))
                })
        });
        chosen.or(loaded.served.first()).map(|s| s.key.clone())
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(hello.server_name())
    }
}

/// `*.example.com` covers `a.example.com`, not `example.com` nor `a.b.example.com`.
fn wildcard_matches(pattern: &str, name: &str) -> bool {
    let Some(suffix) = pattern.strip_prefix("*.") else {
        return false;
    };
    name.split_once('.')
        .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix)
}

fn read_bytes(files: &[CertFiles]) -> Result<FileBytes, String> {
    files
        .iter()
        .map(|f| {
            let read = |path: &str| std::fs::read(path).map_err(|e| format!("{path}: {e}"));
            Ok((read(&f.cert)?, read(&f.key)?))
        })
        .collect()
}

fn read_all(files: &[CertFiles]) -> Result<Loaded, String> {
    parse_all(files, read_bytes(files)?)
}

fn parse_all(files: &[CertFiles], bytes: FileBytes) -> Result<Loaded, String> {
    let served = files
        .iter()
        .zip(&bytes)
        .map(|(f, (cert, key))| parse_one(f, cert, key))
        .collect::<Result<_, _>>()?;
    Ok(Loaded { served, bytes })
}

fn parse_one(files: &CertFiles, cert: &[u8], key: &[u8]) -> Result<Served, String> {
    let chain = pem_certificates(cert).map_err(|e| format!("{}: {e}", files.cert))?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("{}: no private key ({e})", files.key))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("{}: {e}", files.key))?;
    let (names, not_after) = leaf_facts(&chain[0]).map_err(|e| format!("{}: {e}", files.cert))?;
    let certified = CertifiedKey::new(chain, signer);
    certified
        .keys_match()
        .map_err(|e| format!("{} does not belong to {}: {e}", files.key, files.cert))?;
    Ok(Served {
        names,
        key: Arc::new(certified),
        not_after,
    })
}

/// Every certificate in a PEM file (at least one).
fn pem_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate chain ({e})"))?;
    if certs.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(certs)
}

/// The leaf's DNS names and its notAfter.
fn leaf_facts(der: &[u8]) -> Result<(Vec<String>, i64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("cannot parse the certificate: {e}"))?;
    let mut names: Vec<String> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(str::to_ascii_lowercase),
        );
    }
    Ok((names, cert.validity().not_after.timestamp()))
}

/// What a pool of HTTPS members is trusted with.
#[derive(Clone)]
pub struct UpstreamTls {
    /// SNI and the name checked; `None`: each member's IP (or the DNS name of the pool).
    pub sni: Option<String>,
    pub verify: bool,
    /// The CA bundle to trust instead of the system roots.
    pub ca: Option<Arc<CaType>>,
    /// The client certificate for mutual TLS.
    pub client: Option<Arc<CertKey>>,
    /// Keeps pooled connections apart from those of pools trusting other CAs (Pingora's
    /// connection reuse does not look at the CA).
    pub group: u64,
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("sni", &self.sni)
            .field("verify", &self.verify)
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .field("client_cert", &self.client.is_some())
            .finish()
    }
}

impl UpstreamTls {
    /// Load the CA bundle and client certificate files; errors name the file.
    pub fn load(
        sni: Option<String>,
        verify: bool,
        ca_file: Option<&str>,
        client: Option<(&str, &str)>,
    ) -> Result<UpstreamTls, String> {
        let mut group = std::hash::DefaultHasher::new();
        let ca = match ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
                std::hash::Hash::hash(&pem, &mut group);
                let certs = pem_certificates(&pem).map_err(|e| format!("{path}: {e}"))?;
                let mut wrapped = Vec::with_capacity(certs.len());
                for der in certs {
                    leaf_facts(&der).map_err(|e| format!("{path}: {e}"))?;
                    wrapped.push(WrappedX509::new(der.to_vec(), |raw| {
                        pingora::utils::tls::parse_x509(raw)
                    }));
                }
                Some(Arc::from(wrapped.into_boxed_slice()))
            }
            None => None,
        };
        let client = match client {
            Some((cert_path, key_path)) => {
                let files = CertFiles {
                    cert: cert_path.into(),
                    key: key_path.into(),
                };
                let bytes = read_bytes(std::slice::from_ref(&files))?;
                let (cert, key) = &bytes[0];
                // The same checks as a listener's (parses, key belongs to the leaf).
                parse_one(&files, cert, key)?;
                let chain = pem_certificates(cert).map_err(|e| format!("{cert_path}: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| format!("{key_path}: no private key ({e})"))?;
                Some(Arc::new(CertKey::new(
                    chain.iter().map(|c| c.to_vec()).collect(),
                    key.secret_der().to_vec(),
                )))
            }
            None => None,
        };
        Ok(UpstreamTls {
            sni,
            verify,
            ca,
            client,
            group: std::hash::Hasher::finish(&group),
        })
    }
}

/// A pool's handshake failures with a member (bad certificate, wrong name, expired):
/// counted in `mcp_edge_upstream_tls_failures_total`.
pub fn is_handshake_failure(e: &pingora::Error) -> bool {
    use pingora::ErrorType::*;
    matches!(
        e.etype(),
        TLSHandshakeFailure | TLSHandshakeTimedout | InvalidCert | HandshakeError
    )
}

#[cfg(test)]
mod tests {
    use super::wildcard_matches;

    #[test]
    fn wildcards_cover_one_label() {
        assert!(wildcard_matches("*.example.com", "a.example.com"));
        assert!(!wildcard_matches("*.example.com", "example.com"));
        assert!(!wildcard_matches("*.example.com", "a.b.example.com"));
        assert!(!wildcard_matches("*.example.com", ".example.com"));
        assert!(!wildcard_matches("a.example.com", "a.example.com"));
    }
}
