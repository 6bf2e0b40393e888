//! Certificates made to order for the verifier's tests (the shared
//! material in tests/support/tls_material.rs is the usual kind only).
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::x509::extension::{BasicConstraints, KeyUsage, SubjectAlternativeName};
use openssl::x509::{X509Builder, X509Name, X509};
use rustls::pki_types::CertificateDer;

/// What to make.
pub(crate) struct Spec<'a> {
    pub cn: &'a str,
    /// 0 for X.509 v1 (then no extension at all), 2 for v3.
    pub version: i32,
    /// basicConstraints with this cA flag; `None`: no such extension.
    pub ca: Option<bool>,
    /// keyUsage with (true) or without (false) keyCertSign.
    pub key_cert_sign: Option<bool>,
    /// Signed by this certificate's key; `None`: self-signed.
    pub issuer: Option<&'a Made>,
    pub digest: MessageDigest,
    pub rsa_bits: u32,
    /// A subjectAltName of IP 127.0.0.1 (v3 only).
    pub san_loopback: bool,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Spec {
            cn: "test",
            version: 2,
            ca: None,
            key_cert_sign: None,
            issuer: None,
            digest: MessageDigest::sha256(),
            rsa_bits: 2048,
            san_loopback: false,
        }
    }
}

pub(crate) struct Made {
    pub cert: X509,
    pub key: PKey<Private>,
}

impl Made {
    pub fn der(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.cert.to_der().expect("DER"))
    }

    pub fn pem(&self) -> String {
        String::from_utf8(self.cert.to_pem().expect("PEM")).expect("ASCII")
    }
}

pub(crate) fn make(spec: Spec<'_>) -> Made {
    let key = PKey::from_rsa(Rsa::generate(spec.rsa_bits).expect("RSA key")).expect("key");
    let mut name = X509Name::builder().expect("name");
    name.append_entry_by_text("CN", spec.cn).expect("CN");
    let name = name.build();
    let mut cert = X509Builder::new().expect("builder");
    cert.set_version(spec.version).expect("version");
    let serial = BigNum::from_u32(rand_serial()).and_then(|n| n.to_asn1_integer());
    cert.set_serial_number(&serial.expect("serial"))
        .expect("serial");
    cert.set_subject_name(&name).expect("subject");
    let issuer_name = spec.issuer.map_or(&*name, |i| i.cert.subject_name());
    cert.set_issuer_name(issuer_name).expect("issuer");
    cert.set_pubkey(&key).expect("public key");
    let from = Asn1Time::days_from_now(0).expect("time");
    let to = Asn1Time::days_from_now(365).expect("time");
    cert.set_not_before(&from).expect("not before");
    cert.set_not_after(&to).expect("not after");
    if spec.version == 2 {
        if let Some(ca) = spec.ca {
            let mut constraints = BasicConstraints::new();
            if ca {
                constraints.critical().ca();
            }
            cert.append_extension(constraints.build().expect("BC"))
                .expect("BC");
        }
        if let Some(sign) = spec.key_cert_sign {
            let mut usage = KeyUsage::new();
            usage.digital_signature();
            if sign {
                usage.key_cert_sign();
            }
            cert.append_extension(usage.build().expect("KU"))
                .expect("KU");
        }
        if spec.san_loopback {
            let san = SubjectAlternativeName::new()
                .ip("127.0.0.1")
                .build(&cert.x509v3_context(spec.issuer.map(|i| &*i.cert), None))
                .expect("SAN");
            cert.append_extension(san).expect("SAN");
        }
    }
    let signer = spec.issuer.map_or(&key, |i| &i.key);
    cert.sign(signer, spec.digest).expect("sign");
    Made {
        cert: cert.build(),
        key,
    }
}

/// Distinct serials: OpenSSL may take two certificates with the same
/// issuer and serial for one.
fn rand_serial() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1000);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
