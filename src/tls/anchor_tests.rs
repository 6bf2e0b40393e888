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

/// `tls_capath` as `dir`: the number of trust anchors read, or the error
/// `vcl.load` gives.
fn anchors_of_capath(dir: &std::path::Path) -> Result<usize, String> {
    let args = crate::tls::TlsArgs {
        capath: crate::tls::testing::text(dir),
        ..crate::tls::TlsArgs::default()
    };
    crate::tls::roots(&args)
        .map(|(store, _)| store.len())
        .map_err(|e| e.to_string())
}

/// A directory `tag` in `m`'s holding only `files`: copies, by name, of
/// the files given.
fn capath_with(
    m: &crate::tls::testing::Material,
    tag: &str,
    files: &[(&str, &std::path::Path)],
) -> std::path::PathBuf {
    let dir = m.dir.join(tag);
    std::fs::create_dir(&dir).unwrap();
    for (name, from) in files {
        std::fs::copy(from, dir.join(name)).unwrap();
    }
    dir
}

fn subject_hash_of(path: &std::path::Path) -> u32 {
    X509::from_pem(&std::fs::read(path).unwrap())
        .unwrap()
        .subject_name_hash()
}

/// As OpenSSL (`redis-cli --cacertdir`, hiredis): a CA directory is read
/// by hashed names only. A CA as `ca.pem` is no anchor; the same file
/// named by its subject hash (`<hash>.0`) is. A name whose hash is not the
/// certificate's, or a `.1` with no `.0`, finds nothing, as OpenSSL's
/// lookup by issuer name would not.
#[test]
fn a_capath_is_read_by_hashed_names_only() {
    let m = crate::tls::testing::material("capath-hashed");
    let hash = subject_hash_of(&m.ca);

    let unhashed = capath_with(&m, "unhashed", &[("ca.pem", &m.ca)]);
    let err = anchors_of_capath(&unhashed).unwrap_err();
    assert!(
        err.contains("no certificate under a hashed name")
            && err.contains("1 file(s), none named by its subject name hash")
            && err.contains("run `openssl rehash` on the directory"),
        "{err}"
    );

    let hashed = capath_with(&m, "hashed", &[(&format!("{hash:08x}.0"), &m.ca)]);
    assert_eq!(anchors_of_capath(&hashed), Ok(1));

    let wrong = capath_with(&m, "wrong", &[("00000000.0", &m.ca)]);
    let err = anchors_of_capath(&wrong).unwrap_err();
    assert!(
        err.contains("00000000.0 hold no certificate whose subject name hash is the file's name"),
        "{err}"
    );

    let gap = capath_with(&m, "gap", &[(&format!("{hash:08x}.1"), &m.ca)]);
    assert!(anchors_of_capath(&gap).is_err());
    // Upper-case hex is not the name OpenSSL opens.
    let upper = format!("{hash:08X}.0");
    if upper != format!("{hash:08x}.0") {
        let upper = capath_with(&m, "upper", &[(&upper, &m.ca)]);
        assert!(anchors_of_capath(&upper).is_err());
    }

    // Two CAs, each under its hash, and a file that is no certificate.
    let other = subject_hash_of(&m.other_ca);
    let both = capath_with(
        &m,
        "both",
        &[
            (&format!("{hash:08x}.0"), &m.ca),
            (&format!("{other:08x}.0"), &m.other_ca),
            ("README", &m.server_key),
        ],
    );
    assert_eq!(anchors_of_capath(&both), Ok(2));
}

/// The names the real `openssl rehash` makes are the names read (and the
/// test material's own rehash makes the same), when the openssl binary
/// is there (Debian: package openssl).
#[test]
fn openssl_rehash_makes_the_names_that_are_read() {
    let m = crate::tls::testing::material("capath-rehash");
    let dir = capath_with(
        &m,
        "rehashed",
        &[("ca.pem", &m.ca), ("v1-ca.crt", &m.v1_ca)],
    );
    let rehash = std::process::Command::new("openssl")
        .arg("rehash")
        .arg(&dir)
        .status();
    let Ok(status) = rehash else {
        eprintln!("no openssl binary: skipped");
        return;
    };
    assert!(status.success());
    assert!(dir
        .join(format!("{:08x}.0", subject_hash_of(&m.ca)))
        .exists());
    assert_eq!(anchors_of_capath(&dir), Ok(2));
    // The material's directory, rehashed by the tests' own rehash: every
    // CA in it (ca, other-ca, v1-ca) is an anchor.
    assert_eq!(anchors_of_capath(&m.dir), Ok(3));
}
