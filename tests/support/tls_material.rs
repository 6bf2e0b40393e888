//! TLS material made for tests (rcgen): a CA, a server certificate for
//! 127.0.0.1 and `localhost`, and 127.0.0.2, 127.0.1.1, 127.0.1.2 (the
//! other addresses of vtc servers), and one that expired in 2021, a client
//! certificate, and a second CA that
//! signed nothing here (a "wrong CA"), written as PEM files into a
//! directory. Besides, the same as Redis's utils/gen-test-certs.sh makes
//! them (the `v1_*` files): a v3 CA, and X.509 v1 server and client
//! certificates, which name no host but in their CN. The directory is
//! rehashed as `openssl rehash` does it (`tls_capath`). Used by the unit
//! tests of src/tls.rs and by the vtc harness (`#@ tls`).
use std::path::{Path, PathBuf};

use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::error::ErrorStack;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::x509::extension::{BasicConstraints as CaConstraints, SubjectKeyIdentifier};
use openssl::x509::{X509Builder, X509Name, X509};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// The CN of the v1 server certificate (Redis's script: "Server-only").
pub const V1_SERVER_CN: &str = "Server-only";

pub struct Material {
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub expired_cert: PathBuf,
    pub expired_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// The CA of the `v1_*` certificates, made like `openssl req -x509`.
    pub v1_ca: PathBuf,
    /// CN=[`V1_SERVER_CN`], no extension; its key in PKCS#8.
    pub v1_server_cert: PathBuf,
    pub v1_server_key: PathBuf,
    /// The same, valid in 2020 only.
    pub v1_expired_cert: PathBuf,
    pub v1_expired_key: PathBuf,
    /// CN=Client-only, no extension; its key in PKCS#1 (`BEGIN RSA PRIVATE
    /// KEY`, as `openssl genrsa` wrote it before OpenSSL 3).
    pub v1_client_cert: PathBuf,
    pub v1_client_key: PathBuf,
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
    // The other loopback addresses vtc files bind servers to (`--bind`),
    // which the vtc harness's TLS mode reaches over TLS.
    let server_names = || {
        [
            "127.0.0.1",
            "localhost",
            "127.0.0.2",
            "127.0.1.1",
            "127.0.1.2",
        ]
        .map(String::from)
        .to_vec()
    };
    let (server_cert, server_key) = issue(server_names(), false)?;
    let (expired_cert, expired_key) = issue(server_names(), true)?;
    let (client_cert, client_key) = issue(vec!["client".into()], false)?;
    let v1 = redis_style().map_err(|e| format!("openssl: {e}"))?;
    let material = Material {
        ca: write("ca.crt", &ca.pem())?,
        other_ca: write("other-ca.crt", &other_ca.pem())?,
        server_cert: write("server.crt", &server_cert)?,
        server_key: write("server.key", &server_key)?,
        expired_cert: write("expired.crt", &expired_cert)?,
        expired_key: write("expired.key", &expired_key)?,
        client_cert: write("client.crt", &client_cert)?,
        client_key: write("client.key", &client_key)?,
        v1_ca: write("v1-ca.crt", &v1.ca)?,
        v1_server_cert: write("v1-server.crt", &v1.server.0)?,
        v1_server_key: write("v1-server.key", &v1.server.1)?,
        v1_expired_cert: write("v1-expired.crt", &v1.expired.0)?,
        v1_expired_key: write("v1-expired.key", &v1.expired.1)?,
        v1_client_cert: write("v1-client.crt", &v1.client.0)?,
        v1_client_key: write("v1-client.key", &v1.client.1)?,
    };
    rehash(dir)?;
    Ok(material)
}

/// What `openssl rehash` does to `dir` (a CA directory, `tls_capath`):
/// a link `<subject name hash>.<n>` to each certificate file (`.crt`,
/// `.pem`), `n` counting files whose subjects hash alike.
pub fn rehash(dir: &Path) -> Result<(), String> {
    let err = |e: std::io::Error| format!("rehash {}: {e}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(err)?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".crt") || name.ends_with(".pem"))
        .collect();
    files.sort();
    for name in files {
        let pem = std::fs::read(dir.join(&name)).map_err(err)?;
        let Ok(cert) = X509::from_pem(&pem) else {
            continue;
        };
        let hash = cert.subject_name_hash();
        let link = (0..)
            .map(|n| dir.join(format!("{hash:08x}.{n}")))
            .find(|link| std::fs::symlink_metadata(link).is_err())
            .expect("a free name");
        std::os::unix::fs::symlink(&name, link).map_err(err)?;
    }
    Ok(())
}

/// PEM texts: the CA, and (certificate, key) of each leaf.
struct RedisStyle {
    ca: String,
    server: (String, String),
    expired: (String, String),
    client: (String, String),
}

/// What utils/gen-test-certs.sh makes (RSA keys, SHA-256): the CA by
/// `openssl req -x509` (v3, basicConstraints CA), each leaf by `openssl
/// x509 -req` without extensions, so X.509 v1. Made with the openssl crate
/// because `openssl x509 -req` adds key identifiers since OpenSSL 3.2
/// (Debian 13), which makes v3.
fn redis_style() -> Result<RedisStyle, ErrorStack> {
    let name = |cn: &str| -> Result<X509Name, ErrorStack> {
        let mut name = X509Name::builder()?;
        name.append_entry_by_text("O", "Redis Test")?;
        name.append_entry_by_text("CN", cn)?;
        Ok(name.build())
    };
    let serial = |n: u32| BigNum::from_u32(n).and_then(|n| n.to_asn1_integer());
    let ca_key = PKey::from_rsa(Rsa::generate(2048)?)?;
    let ca_name = name("Certificate Authority")?;
    let mut ca = X509Builder::new()?;
    ca.set_version(2)?;
    ca.set_serial_number(serial(1)?.as_ref())?;
    ca.set_subject_name(&ca_name)?;
    ca.set_issuer_name(&ca_name)?;
    ca.set_pubkey(&ca_key)?;
    ca.set_not_before(Asn1Time::days_from_now(0)?.as_ref())?;
    ca.set_not_after(Asn1Time::days_from_now(3650)?.as_ref())?;
    ca.append_extension(CaConstraints::new().critical().ca().build()?)?;
    let key_id = SubjectKeyIdentifier::new().build(&ca.x509v3_context(None, None))?;
    ca.append_extension(key_id)?;
    ca.sign(&ca_key, MessageDigest::sha256())?;
    let ca = ca.build();
    let leaf = |cn: &str, n: u32, valid: Option<(i64, i64)>, pkcs1: bool| {
        let key = PKey::from_rsa(Rsa::generate(2048)?)?;
        let cert = v1_leaf(&ca, &ca_key, &key, &name(cn)?, &serial(n)?, valid)?;
        let key = match pkcs1 {
            true => key.rsa()?.private_key_to_pem()?,
            false => key.private_key_to_pem_pkcs8()?,
        };
        let text = |pem: Vec<u8>| String::from_utf8(pem).expect("PEM is ASCII");
        Ok::<_, ErrorStack>((text(cert.to_pem()?), text(key)))
    };
    // 2020-01-01 to 2021-01-01.
    let year_2020 = Some((1_577_836_800, 1_609_459_200));
    Ok(RedisStyle {
        ca: String::from_utf8(ca.to_pem()?).expect("PEM is ASCII"),
        server: leaf(V1_SERVER_CN, 2, None, false)?,
        expired: leaf(V1_SERVER_CN, 3, year_2020, false)?,
        client: leaf("Client-only", 4, None, true)?,
    })
}

/// A v1 certificate (no extensions) signed by `ca`, valid a year from now
/// or between the given UNIX times.
fn v1_leaf(
    ca: &X509,
    ca_key: &PKey<Private>,
    key: &PKey<Private>,
    subject: &X509Name,
    serial: &openssl::asn1::Asn1Integer,
    valid: Option<(i64, i64)>,
) -> Result<X509, ErrorStack> {
    let mut cert = X509Builder::new()?;
    cert.set_version(0)?;
    cert.set_serial_number(serial)?;
    cert.set_subject_name(subject)?;
    cert.set_issuer_name(ca.subject_name())?;
    cert.set_pubkey(key)?;
    let (not_before, not_after) = match valid {
        Some((from, to)) => (Asn1Time::from_unix(from)?, Asn1Time::from_unix(to)?),
        None => (Asn1Time::days_from_now(0)?, Asn1Time::days_from_now(365)?),
    };
    cert.set_not_before(&not_before)?;
    cert.set_not_after(&not_after)?;
    cert.sign(ca_key, MessageDigest::sha256())?;
    Ok(cert.build())
}
