//! The verifier on X.509 v1 certificates made as Redis's
//! utils/gen-test-certs.sh makes them (tests/support/tls_material.rs):
//! taken with the right CA and name, refused otherwise; v3 chains still go
//! to webpki.
use std::time::Duration;

use super::*;
use openssl::hash::MessageDigest;

use crate::tls::test_certs::{make, Made, Spec};
use crate::tls::testing::{material, text, Material, V1_SERVER_CN};
use crate::tls::{roots, Tls, TlsArgs};

/// A verifier that refuses a name mismatch (`tls_verify_name=true`): the
/// verdicts of the certificates themselves.
fn verifier(cafile: &std::path::Path) -> ServerVerifier {
    verifier_naming(cafile, true)
}

fn verifier_naming(cafile: &std::path::Path, strict_name: bool) -> ServerVerifier {
    let (store, cas) = roots(&TlsArgs {
        cafile: text(cafile),
        ..TlsArgs::default()
    })
    .expect("CA file");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ServerVerifier::new(store, &cas, &provider, strict_name).expect("verifier")
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

/// What the verifier makes of `cert` for `name`: `Ok(None)` verified,
/// `Ok(Some(names))` verified but for the name (the names it has).
fn checked(
    verifier: &ServerVerifier,
    cert: &std::path::Path,
    name: &str,
    now: UnixTime,
) -> Result<Option<Vec<String>>, String> {
    let name = ServerName::try_from(name.to_owned()).expect("server name");
    verifier
        .check(&der(cert), &[], &name, now)
        .map(|mismatch| mismatch.map(|m| m.presented))
        .map_err(|e| e.to_string())
}

/// By default (as hiredis): a certificate whose chain is good is taken
/// whatever its name, the mismatch told with every name it has; the
/// chain itself is verified as strictly as with the name (OpenSSL checks
/// the name before the dates, so the chain is verified again without it).
#[test]
fn by_default_the_name_is_not_held_against_a_good_chain() {
    let m = v1_material("lenient");
    let now = UnixTime::now();
    let v1 = verifier_naming(&m.v1_ca, false);
    let cn = || Ok(Some(vec![format!("CN={V1_SERVER_CN}")]));
    assert_eq!(checked(&v1, &m.v1_server_cert, V1_SERVER_CN, now), Ok(None));
    assert_eq!(checked(&v1, &m.v1_server_cert, "127.0.0.1", now), cn());
    assert_eq!(checked(&v1, &m.v1_server_cert, "redis.example", now), cn());
    // Through rustls's interface: taken, the mismatch left for the
    // thread that drives the handshake.
    let _ = crate::tls::take_let_through();
    assert_eq!(verify(&v1, &m.v1_server_cert, "127.0.0.1", now), Ok(()));
    let left = crate::tls::take_let_through().expect("the mismatch");
    assert_eq!(left.expected, "127.0.0.1");
    assert_eq!(crate::tls::take_let_through(), None);
    assert_eq!(verify(&v1, &m.v1_server_cert, V1_SERVER_CN, now), Ok(()));
    assert_eq!(crate::tls::take_let_through(), None);
    // Expired (for any name), another CA: refused.
    for name in [V1_SERVER_CN, "127.0.0.1", "redis.example"] {
        let err = checked(&v1, &m.v1_expired_cert, name, now).unwrap_err();
        assert!(err.contains("certificate expired"), "{name}: {err}");
        assert_eq!(
            checked(&verifier_naming(&m.ca, false), &m.v1_server_cert, name, now),
            Err("invalid peer certificate: UnknownIssuer".into()),
            "{name}"
        );
    }
    // What not checking the name means (hiredis's rule, docs/migrating.md):
    // any certificate of the CA that may serve TLS is taken, here the v1
    // client certificate (no extension, so no usage restriction).
    assert_eq!(
        checked(&v1, &m.v1_client_cert, "127.0.0.1", now),
        Ok(Some(vec!["CN=Client-only".into()]))
    );
    let later = UnixTime::since_unix_epoch(Duration::from_secs(now.as_secs() + 3 * 366 * 86_400));
    let err = checked(&v1, &m.v1_server_cert, "127.0.0.1", later).unwrap_err();
    assert!(err.contains("certificate expired"), "{err}");
    // A v3 chain (webpki): its DNS names and IP addresses, then its CN.
    let v3 = verifier_naming(&m.ca, false);
    assert_eq!(checked(&v3, &m.server_cert, "127.0.0.1", now), Ok(None));
    assert_eq!(
        checked(&v3, &m.server_cert, "redis.example", now),
        Ok(Some(vec![
            "127.0.0.1".into(),
            "localhost".into(),
            "127.0.0.2".into(),
            "127.0.1.1".into(),
            "127.0.1.2".into(),
            "CN=127.0.0.1".into()
        ]))
    );
    let err = checked(&v3, &m.expired_cert, "redis.example", now).unwrap_err();
    assert!(err.contains("certificate expired"), "{err}");
    assert_eq!(
        checked(
            &verifier_naming(&m.other_ca, false),
            &m.server_cert,
            "redis.example",
            now
        ),
        Err("invalid peer certificate: UnknownIssuer".into())
    );
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
    let by_dir = ServerVerifier::new(store, &cas, &provider, true).unwrap();
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

/// A verifier with these certificates as its `tls_cafile`.
fn verifier_of(tag: &str, cas: &[&Made]) -> (ServerVerifier, TempFile) {
    verifier_of_naming(tag, cas, true)
}

fn verifier_of_naming(tag: &str, cas: &[&Made], strict_name: bool) -> (ServerVerifier, TempFile) {
    let file = TempFile(std::env::temp_dir().join(format!(
        "vmod-redis-cafile-{}-{tag}.pem",
        std::process::id()
    )));
    let pem: String = cas.iter().map(|c| c.pem()).collect();
    std::fs::write(&file.0, pem).expect("CA file");
    (verifier_naming(&file.0, strict_name), file)
}

struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn check(verifier: &ServerVerifier, cert: &Made, name: &str) -> Result<(), String> {
    let name = ServerName::try_from(name.to_owned()).expect("server name");
    verifier
        .verify_server_cert(&cert.der(), &[], &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn root() -> Made {
    make(Spec {
        cn: "root",
        ca: Some(true),
        ..Spec::default()
    })
}

/// A leaf certificate in the CA file (a client certificate kept in the
/// same bundle, say) is no authority: a server certificate its key signed
/// is refused, as OpenSSL refuses it.
#[test]
fn a_leaf_in_the_ca_file_signs_nothing() {
    let root = root();
    let server = |issuer: &Made| {
        make(Spec {
            cn: "server",
            ca: Some(false),
            issuer: Some(issuer),
            san_loopback: true,
            ..Spec::default()
        })
    };
    let (by_root, _f) = verifier_of("leaf-control", &[&root]);
    assert_eq!(check(&by_root, &server(&root), "127.0.0.1"), Ok(()));

    let leaf = make(Spec {
        cn: "client",
        ca: Some(false),
        issuer: Some(&root),
        ..Spec::default()
    });
    let forged = server(&leaf);
    let (alone, _f1) = verifier_of("leaf-alone", &[&leaf]);
    let err = check(&alone, &forged, "127.0.0.1").unwrap_err();
    assert_eq!(err, "invalid peer certificate: UnknownIssuer");
    let (with_root, _f2) = verifier_of("leaf-with-root", &[&root, &leaf]);
    let err = check(&with_root, &forged, "127.0.0.1").unwrap_err();
    assert!(err.contains("invalid CA certificate"), "{err}");

    // The same with a v1 leaf, as Redis's script makes client certificates.
    let v1_leaf = make(Spec {
        cn: "v1 client",
        version: 0,
        issuer: Some(&root),
        ..Spec::default()
    });
    let v1_forged = make(Spec {
        cn: "127.0.0.1",
        version: 0,
        issuer: Some(&v1_leaf),
        ..Spec::default()
    });
    let (v1_alone, _f3) = verifier_of("v1-leaf-alone", &[&v1_leaf]);
    assert!(check(&v1_alone, &v1_forged, "redis.test").is_err());
    let (v1_with_root, _f4) = verifier_of("v1-leaf-with-root", &[&root, &v1_leaf]);
    assert!(check(&v1_with_root, &v1_forged, "redis.test").is_err());
    // Nor when the name is not checked (tls_verify_name=false).
    let (lenient, _f5) = verifier_of_naming("leaf-lenient", &[&root, &leaf, &v1_leaf], false);
    for name in ["127.0.0.1", "redis.test"] {
        assert!(check(&lenient, &forged, name).is_err(), "{name}");
        assert!(check(&lenient, &v1_forged, name).is_err(), "{name}");
    }
    assert_eq!(check(&lenient, &server(&root), "redis.test"), Ok(()));
}

/// An intermediate CA in the CA file completes a chain the server sends
/// without it (OpenSSL looks it up there); alone, without its root, it
/// anchors nothing.
#[test]
fn intermediates_of_the_ca_file_complete_chains_under_their_root() {
    let root = root();
    let intermediate = make(Spec {
        cn: "intermediate",
        ca: Some(true),
        issuer: Some(&root),
        ..Spec::default()
    });
    let server = make(Spec {
        cn: "server",
        ca: Some(false),
        issuer: Some(&intermediate),
        san_loopback: true,
        ..Spec::default()
    });
    let (both, _f1) = verifier_of("chain-both", &[&root, &intermediate]);
    assert_eq!(check(&both, &server, "127.0.0.1"), Ok(()));
    assert!(check(&both, &server, "redis.example").is_err());
    let (alone, _f2) = verifier_of("chain-intermediate", &[&intermediate]);
    assert_eq!(
        check(&alone, &server, "127.0.0.1"),
        Err("invalid peer certificate: UnknownIssuer".into())
    );
}

/// A v1 chain is held to OpenSSL's security level 2, as libssl's default
/// on Debian: no MD5 or SHA-1 signature, no RSA key under 2048 bits.
#[test]
fn weak_v1_chains_are_refused() {
    let root = root();
    let (verifier, _f) = verifier_of("weak", &[&root]);
    let leaf = |digest: MessageDigest, rsa_bits: u32| {
        make(Spec {
            cn: "redis.test",
            version: 0,
            issuer: Some(&root),
            digest,
            rsa_bits,
            ..Spec::default()
        })
    };
    assert_eq!(
        check(
            &verifier,
            &leaf(MessageDigest::sha256(), 2048),
            "redis.test"
        ),
        Ok(())
    );
    for (what, weak) in [
        ("SHA-1", leaf(MessageDigest::sha1(), 2048)),
        ("MD5", leaf(MessageDigest::md5(), 2048)),
        ("RSA-1024", leaf(MessageDigest::sha256(), 1024)),
    ] {
        let err = check(&verifier, &weak, "redis.test").unwrap_err();
        assert!(err.starts_with("invalid peer certificate"), "{what}: {err}");
    }
}
