use openssl::hash::MessageDigest;

use super::*;
use crate::tls::test_certs::{make, Spec};

#[test]
fn only_self_signed_cas_are_anchors() {
    let ca = make(Spec {
        cn: "CA",
        ca: Some(true),
        ..Spec::default()
    });
    assert!(is_trust_anchor(&ca.der()));
    // OpenSSL's v1 root: self-signed, no extension.
    let v1_root = make(Spec {
        cn: "v1 root",
        version: 0,
        ..Spec::default()
    });
    assert!(is_trust_anchor(&v1_root.der()));
    // No basicConstraints, keyUsage keyCertSign: a CA to OpenSSL too.
    let by_usage = make(Spec {
        cn: "by usage",
        key_cert_sign: Some(true),
        ..Spec::default()
    });
    assert!(is_trust_anchor(&by_usage.der()));

    let refused = [
        // An intermediate CA: not self-signed.
        make(Spec {
            cn: "intermediate",
            ca: Some(true),
            issuer: Some(&ca),
            ..Spec::default()
        }),
        // Leaves, v3 and v1.
        make(Spec {
            cn: "leaf",
            ca: Some(false),
            issuer: Some(&ca),
            ..Spec::default()
        }),
        make(Spec {
            cn: "v1 leaf",
            version: 0,
            issuer: Some(&ca),
            ..Spec::default()
        }),
        // Self-signed, but no CA: cA false, no extension at all (v3), or
        // a keyUsage without keyCertSign despite cA.
        make(Spec {
            cn: "self-signed leaf",
            ca: Some(false),
            ..Spec::default()
        }),
        make(Spec {
            cn: "bare v3",
            ..Spec::default()
        }),
        make(Spec {
            cn: "no keyCertSign",
            ca: Some(true),
            key_cert_sign: Some(false),
            ..Spec::default()
        }),
    ];
    for made in &refused {
        assert!(
            !is_trust_anchor(&made.der()),
            "{:?}",
            made.cert.subject_name()
        );
    }
    // Made by rcgen (the shared test material): its CA is one, its leaf not.
    let m = crate::tls::testing::material("anchor");
    let first = |path: &std::path::Path| {
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_file(path).expect("PEM")
    };
    assert!(is_trust_anchor(&first(&m.ca)));
    assert!(is_trust_anchor(&first(&m.v1_ca)));
    assert!(!is_trust_anchor(&first(&m.server_cert)));
    assert!(!is_trust_anchor(&first(&m.v1_client_cert)));
}

#[test]
fn truncated_or_garbled_der_is_no_anchor_and_no_panic() {
    let ca = make(Spec {
        cn: "CA",
        ca: Some(true),
        digest: MessageDigest::sha256(),
        ..Spec::default()
    });
    let der = ca.der().to_vec();
    assert_eq!(basic_constraints_ca(&der), Some(true));
    for len in 0..der.len() {
        assert!(!is_trust_anchor(&CertificateDer::from(&der[..len])));
        let _ = basic_constraints_ca(&der[..len]);
    }
    for at in 0..der.len() {
        let mut garbled = der.clone();
        garbled[at] ^= 0xff;
        let _ = basic_constraints_ca(&garbled);
    }
    assert_eq!(
        basic_constraints_ca(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
        None
    );
}
