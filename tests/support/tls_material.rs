//! TLS material made for tests (rcgen): a CA, a server certificate for
//! 127.0.0.1 and `localhost` (and one that expired in 2021), a client
//! certificate, and a second CA that
//! signed nothing here (a "wrong CA"), written as PEM files into a
//! directory. Used by the unit tests of src/tls.rs and by the vtc harness
//! (`#@ tls`).
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

pub struct Material {
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub expired_cert: PathBuf,
    pub expired_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Writes the material into `dir` (which must exist).
pub fn write_material(dir: &Path) -> Result<Material, String> {
    let write = |name: &str, text: &str| -> Result<PathBuf, String> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
        Ok(path)
    };
    let err = |e: rcgen::Error| format!("rcgen: {e}");
    // Distinct names: verifiers find a certificate's issuer by name.
    let authority = |name: &str| -> Result<(rcgen::Certificate, KeyPair), String> {
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::new()).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Ok((params.self_signed(&key).map_err(err)?, key))
    };
    let (ca, ca_key) = authority("vmod-redis test CA")?;
    let (other_ca, _) = authority("vmod-redis other CA")?;
    let issue = |names: Vec<String>, expired: bool| -> Result<(String, String), String> {
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(names.clone()).map_err(err)?;
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        params
            .distinguished_name
            .push(DnType::CommonName, names[0].as_str());
        let cert = params.signed_by(&key, &ca, &ca_key).map_err(err)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let server_names = || vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let (server_cert, server_key) = issue(server_names(), false)?;
    let (expired_cert, expired_key) = issue(server_names(), true)?;
    let (client_cert, client_key) = issue(vec!["client".into()], false)?;
    Ok(Material {
        ca: write("ca.crt", &ca.pem())?,
        other_ca: write("other-ca.crt", &other_ca.pem())?,
        server_cert: write("server.crt", &server_cert)?,
        server_key: write("server.key", &server_key)?,
        expired_cert: write("expired.crt", &expired_cert)?,
        expired_key: write("expired.key", &expired_key)?,
        client_cert: write("client.crt", &client_cert)?,
        client_key: write("client.key", &client_key)?,
    })
}
