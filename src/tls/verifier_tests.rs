//! The verifier on X.509 v1 certificates made as Redis's
//! utils/gen-test-certs.sh makes them (tests/support/tls_material.rs):
//! taken with the right CA and name, refused otherwise; v3 chains still go
//! to webpki.
use std::time::Duration;

use super::*;
use crate::tls::testing::{material, text, Material, V1_SERVER_CN};
use crate::tls::{roots, Tls, TlsArgs};

fn verifier(cafile: &std::path::Path) -> ServerVerifier {
    let (store, cas) = roots(&TlsArgs {
        cafile: text(cafile),
        ..TlsArgs::default()
    })
    .expect("CA file");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ServerVerifier::new(store, &cas, &provider).expect("verifier")
}

fn der(path: &std::path::Path) -> CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_file(path).expect("PEM certificate")
}

fn verify(
    verifier: &ServerVerifier,
    cert: &std::path::Path,
    name: &str,
    now: UnixTime,
) -> Result<(), String> {
    let name = ServerName::try_from(name.to_owned()).expect("server name");
    verifier
        .verify_server_cert(&der(cert), &[], &name, &[], now)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn v1_material(tag: &str) -> Material {
    material(&format!("verifier-{tag}"))
}

#[test]
fn webpki_refuses_v1_for_its_version_only() {
    let m = v1_material("webpki");
    // X.509 v1 (0) leaves under a v3 (2) CA, as Redis's script makes them.
    let version = |path: &std::path::Path| X509::from_der(&der(path)).unwrap().version();
    assert_eq!(version(&m.v1_ca), 2);
    for leaf in [&m.v1_server_cert, &m.v1_client_cert, &m.v1_expired_cert] {
        assert_eq!(version(leaf), 0, "{}", leaf.display());
    }
    let name = ServerName::try_from(V1_SERVER_CN).unwrap();
    let (store, _) = roots(&TlsArgs {
        cafile: text(&m.v1_ca),
        ..TlsArgs::default()
    })
    .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
        .build()
        .unwrap();
    let err = webpki
        .verify_server_cert(&der(&m.v1_server_cert), &[], &name, &[], UnixTime::now())
        .unwrap_err();
    assert!(refused_for_version(&err), "{err}");
    let err = webpki
        .verify_server_cert(&der(&m.server_cert), &[], &name, &[], UnixTime::now())
        .unwrap_err();
    assert!(!refused_for_version(&err), "{err}");
}

#[test]
fn a_v1_server_certificate_is_taken_with_its_ca_and_its_name() {
    let m = v1_material("taken");
    let verifier = verifier(&m.v1_ca);
    assert_eq!(
        verify(&verifier, &m.v1_server_cert, V1_SERVER_CN, UnixTime::now()),
        Ok(())
    );
    // The CN matches without regard to case, as OpenSSL does.
    assert_eq!(
        verify(&verifier, &m.v1_server_cert, "server-only", UnixTime::now()),
        Ok(())
    );
    // A v1 certificate as a CA of a directory (tls_capath) is read too.
    let (store, cas) = roots(&TlsArgs {
        capath: text(&m.dir),
        ..TlsArgs::default()
    })
    .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let by_dir = ServerVerifier::new(store, &cas, &provider).unwrap();
    assert_eq!(
        verify(&by_dir, &m.v1_server_cert, V1_SERVER_CN, UnixTime::now()),
        Ok(())
    );
}

#[test]
fn a_v1_server_certificate_is_refused_as_a_v3_one_would_be() {
    let m = v1_material("refused");
    let now = UnixTime::now();
    // Another CA.
    assert_eq!(
        verify(&verifier(&m.ca), &m.v1_server_cert, V1_SERVER_CN, now),
        Err("invalid peer certificate: UnknownIssuer".into())
    );
    let verifier = verifier(&m.v1_ca);
    // Expired, and valid but verified three years on.
    let err = verify(&verifier, &m.v1_expired_cert, V1_SERVER_CN, now).unwrap_err();
    assert!(
        err.starts_with("invalid peer certificate: certificate expired: verification time"),
        "{err}"
    );
    let later = UnixTime::since_unix_epoch(Duration::from_secs(now.as_secs() + 3 * 366 * 86_400));
    let err = verify(&verifier, &m.v1_server_cert, V1_SERVER_CN, later).unwrap_err();
    assert!(err.contains("certificate expired"), "{err}");
    // Another name, and an IP address (never matched against a CN).
    assert_eq!(
        verify(&verifier, &m.v1_server_cert, "redis.example", now),
        Err(
            "invalid peer certificate: certificate not valid for name \"redis.example\"; \
             certificate is only valid for CN=Server-only"
                .into()
        )
    );
    let err = verify(&verifier, &m.v1_server_cert, "127.0.0.1", now).unwrap_err();
    assert!(
        err.starts_with("invalid peer certificate: certificate not valid for name \"127.0.0.1\""),
        "{err}"
    );
    // A v1 client certificate is no server certificate of that CA's
    // either by name.
    let err = verify(&verifier, &m.v1_client_cert, V1_SERVER_CN, now).unwrap_err();
    assert!(err.contains("not valid for name"), "{err}");
}

#[test]
fn v3_chains_still_go_to_webpki() {
    let m = v1_material("v3");
    let verifier = verifier(&m.ca);
    let now = UnixTime::now();
    assert_eq!(verify(&verifier, &m.server_cert, "localhost", now), Ok(()));
    assert_eq!(verify(&verifier, &m.server_cert, "127.0.0.1", now), Ok(()));
    let err = verify(&verifier, &m.server_cert, "redis.example", now).unwrap_err();
    assert!(
        err.starts_with(
            "invalid peer certificate: certificate not valid for name \"redis.example\""
        ),
        "{err}"
    );
    let err = verify(&verifier, &m.expired_cert, "localhost", now).unwrap_err();
    assert!(err.contains("certificate expired"), "{err}");
}

#[test]
fn a_v1_client_certificate_loads_and_its_key_must_match() {
    let m = v1_material("client");
    let load = |certfile: &std::path::Path, keyfile: &std::path::Path| {
        Tls::load(&TlsArgs {
            cafile: text(&m.v1_ca),
            certfile: text(certfile),
            keyfile: text(keyfile),
            ..TlsArgs::default()
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    // PKCS#1 (client) and PKCS#8 (server) keys.
    assert_eq!(load(&m.v1_client_cert, &m.v1_client_key), Ok(()));
    assert_eq!(load(&m.v1_server_cert, &m.v1_server_key), Ok(()));
    // The words rustls has for a v3 certificate.
    let mismatch = Error::InconsistentKeys(InconsistentKeys::KeyMismatch).to_string();
    assert_eq!(
        load(&m.v1_client_cert, &m.v1_server_key),
        Err(format!(
            "tls_keyfile \"{}\" does not match tls_certfile \"{}\": {mismatch}",
            m.v1_server_key.display(),
            m.v1_client_cert.display(),
        ))
    );
    // An EC key against the v1 RSA certificate, and the v3 case as before.
    let err = load(&m.v1_client_cert, &m.client_key).unwrap_err();
    assert!(err.ends_with(&mismatch), "{err}");
    let err = load(&m.client_cert, &m.v1_client_key).unwrap_err();
    assert!(err.ends_with(&mismatch), "{err}");
}
