//! The commands' trust for an `https://` controller: the CA file named by
//! `GSCHED_TLS_CA` (jobs get the node's), else the public roots ureq
//! carries.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// A client configuration that trusts the certificates in `ca` (PEM) only.
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>> {
    let shown = ca.display();
    let certs = CertificateDer::pem_file_iter(ca)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("cannot read the CA certificates in {shown}"))?;
    if certs.is_empty() {
        bail!("{shown} holds no certificate (PEM `BEGIN CERTIFICATE` blocks)");
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .with_context(|| format!("a certificate in {shown} is unusable"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(Arc::new(
        ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("the TLS provider offers no protocol version")?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}
