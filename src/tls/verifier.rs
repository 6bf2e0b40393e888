//! X.509 v1 certificates, as OpenSSL (so hiredis and the C VMOD) takes
//! them: Redis's utils/gen-test-certs.sh makes v1 leaf certificates
//! (`openssl x509 -req` without extensions), and deployments that follow
//! Redis's TLS guide have them. webpki, rustls's verifier, refuses any
//! certificate that is not v3 as it parses it.
//!
//! The session stays rustls's. The server's chain goes to webpki as
//! before, with the self-signed CAs of the CA files as its anchors
//! (anchor.rs); a chain that webpki refuses for its version, or for want
//! of an issuer, is verified by OpenSSL's X509 store instead (every
//! certificate of the CA files, intermediates found there as OpenSSL
//! finds them, expiry, the host or IP address, the TLS-server purpose),
//! and the handshake signature with the certificate's public key
//! (webpki's raw-key check). The client
//! certificate's key match compares public keys through OpenSSL when webpki
//! cannot parse the certificate. Nothing here validates a chain or a
//! signature by itself: OpenSSL and webpki do. A certificate refused for
//! its name only is taken unless `tls_verify_name` (name.rs), its chain
//! verified again without the name.
use std::sync::Arc;

use openssl::asn1::{Asn1Time, Asn1TimeRef};
use openssl::pkey::PKey;
use openssl::stack::Stack;
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::verify::{X509CheckFlags, X509VerifyParam};
use openssl::x509::{X509PurposeId, X509StoreContext, X509StoreContextRef, X509};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, DigitallySignedStruct, Error, InconsistentKeys, OtherError, PeerMisbehaved,
    RootCertStore, SignatureScheme,
};

use super::name::{self, NameMismatch};

/// Verifies the server's certificate: webpki for v3 chains, OpenSSL for
/// the chains webpki refuses only for their version, or for want of an
/// issuer (OpenSSL also finds intermediates in the CA file).
pub(super) struct ServerVerifier {
    /// `None` when the CA files hold no trust anchor (OpenSSL then refuses
    /// every chain, as it would).
    webpki: Option<Arc<WebPkiServerVerifier>>,
    /// webpki's trust anchors, for a chain verified without the name.
    anchors: Arc<RootCertStore>,
    /// Every certificate of the CA files (anchors or not), for OpenSSL.
    roots: Vec<X509>,
    algorithms: WebPkiSupportedAlgorithms,
    /// `tls_verify_name=true`: a certificate not valid for the server's
    /// name is refused; else it is taken once its chain is (name.rs).
    strict_name: bool,
}

impl std::fmt::Debug for ServerVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerVerifier")
            .field("roots", &self.roots.len())
            .field("webpki", &self.webpki.is_some())
            .field("strict_name", &self.strict_name)
            .finish()
    }
}

impl ServerVerifier {
    /// `roots`: the trust anchors among `cas`, every certificate given.
    pub(super) fn new(
        roots: RootCertStore,
        cas: &[CertificateDer<'static>],
        provider: &Arc<CryptoProvider>,
        strict_name: bool,
    ) -> Result<ServerVerifier, String> {
        let anchors = Arc::new(roots);
        let webpki = match anchors.is_empty() {
            true => None,
            false => Some(
                WebPkiServerVerifier::builder_with_provider(anchors.clone(), provider.clone())
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
        };
        Ok(ServerVerifier {
            webpki,
            anchors,
            // Those OpenSSL cannot read could not verify anything there.
            roots: cas.iter().filter_map(|c| X509::from_der(c).ok()).collect(),
            algorithms: provider.signature_verification_algorithms,
            strict_name,
        })
    }

    /// The server's certificate checked: refused (the error says why),
    /// verified, or, unless `strict_name`, verified but for the name
    /// (`Some`: its chain verified as hiredis verifies it, the name not
    /// matched).
    pub(super) fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<Option<NameMismatch>, Error> {
        match self.verify(end_entity, intermediates, Some(server_name), now) {
            Ok(()) => Ok(None),
            Err(e) if !self.strict_name && is_name_error(&e) => {
                // Both verifiers may stop at the name (OpenSSL before the
                // signatures and dates): the chain alone, all of it.
                self.verify(end_entity, intermediates, None, now)?;
                Ok(Some(NameMismatch {
                    expected: server_name.to_str().into_owned(),
                    presented: X509::from_der(end_entity)
                        .map(|cert| certificate_names(&cert))
                        .unwrap_or_default(),
                }))
            }
            Err(e) => Err(e),
        }
    }

    /// The chain verified, and the name too when there is one: by webpki,
    /// else (a v1 certificate, an issuer webpki does not know) by OpenSSL.
    fn verify(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: Option<&ServerName<'_>>,
        now: UnixTime,
    ) -> Result<(), Error> {
        let Some(webpki) = &self.webpki else {
            return self.verify_with_openssl(end_entity, intermediates, server_name, now);
        };
        let by_webpki = match server_name {
            Some(name) => webpki
                .verify_server_cert(end_entity, intermediates, name, &[], now)
                .map(|_| ()),
            None => ParsedCertificate::try_from(end_entity).and_then(|cert| {
                verify_server_cert_signed_by_trust_anchor(
                    &cert,
                    &self.anchors,
                    intermediates,
                    now,
                    self.algorithms.all,
                )
            }),
        };
        match by_webpki {
            Err(e) if refused_for_version(&e) || e == CertificateError::UnknownIssuer.into() => {
                self.verify_with_openssl(end_entity, intermediates, server_name, now)
            }
            verified => verified,
        }
    }

    /// The chain verified by OpenSSL, as its TLS client does (purpose
    /// "SSL server"), and the name if any (the host name falling back to
    /// the subject's CN when the certificate has no DNS name, never for an
    /// IP address).
    fn verify_with_openssl(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: Option<&ServerName<'_>>,
        now: UnixTime,
    ) -> Result<(), Error> {
        let parse = |der: &CertificateDer<'_>| {
            X509::from_der(der).map_err(|_| Error::from(CertificateError::BadEncoding))
        };
        let leaf = parse(end_entity)?;
        let mut chain = Stack::new().map_err(openssl_error)?;
        for der in intermediates {
            chain.push(parse(der)?).map_err(openssl_error)?;
        }
        let mut param = X509VerifyParam::new().map_err(openssl_error)?;
        param
            .set_purpose(X509PurposeId::SSL_SERVER)
            .map_err(openssl_error)?;
        param.set_time(now.as_secs().try_into().unwrap_or(libc::time_t::MAX));
        param.set_hostflags(X509CheckFlags::NO_PARTIAL_WILDCARDS);
        // Security level 2, as libssl's default on Debian: no MD5 or SHA-1
        // signatures, no RSA key under 2048 bits anywhere in the chain.
        param.set_auth_level(2);
        match server_name {
            None => Ok(()),
            Some(ServerName::DnsName(name)) => param.set_host(name.as_ref()),
            Some(ServerName::IpAddress(ip)) => param.set_ip((*ip).into()),
            Some(_) => return Err(CertificateError::NotValidForName.into()),
        }
        .map_err(openssl_error)?;
        let mut store = X509StoreBuilder::new().map_err(openssl_error)?;
        for ca in &self.roots {
            store.add_cert(ca.clone()).map_err(openssl_error)?;
        }
        store.set_param(&param).map_err(openssl_error)?;
        let store = store.build();
        let mut context = X509StoreContext::new().map_err(openssl_error)?;
        let refused = context
            .init(&store, &leaf, &chain, |ctx| {
                Ok(match ctx.verify_cert()? {
                    true => None,
                    false => Some(refusal(ctx, &leaf, server_name, now)),
                })
            })
            .map_err(openssl_error)?;
        match refused {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        // No OCSP stapling asked for, none checked (neither does hiredis).
        let _ = ocsp_response;
        if let Some(mismatch) = self.check(end_entity, intermediates, server_name, now)? {
            name::let_through(mismatch);
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        match rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms) {
            Err(e) if refused_for_version(&e) => {
                verify_tls12_with_key(message, &public_key(cert)?, dss, &self.algorithms)
            }
            verified => verified,
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        match rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms) {
            Err(e) if refused_for_version(&e) => {
                rustls::crypto::verify_tls13_signature_with_raw_key(
                    message,
                    &public_key(cert)?,
                    dss,
                    &self.algorithms,
                )
            }
            verified => verified,
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The client certificate and its key, the key checked against the
/// certificate: by rustls (webpki) for v3, by OpenSSL for what webpki
/// refuses for its version. The error says why they do not match.
pub(super) fn client_cert(
    provider: &CryptoProvider,
    chain: Vec<CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| e.to_string())?;
    let certified = CertifiedKey::new(chain, key);
    match certified.keys_match() {
        // As rustls's own `with_client_auth_cert`: a key that cannot tell
        // its public key is taken.
        Ok(()) | Err(Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(certified),
        Err(e) if refused_for_version(&e) => {
            let Some(key_spki) = certified.key.public_key() else {
                return Ok(certified);
            };
            let cert = certified.end_entity_cert().map_err(|e| e.to_string())?;
            let unreadable = |_| "the certificate's or the key's public key is unreadable";
            let cert_key = X509::from_der(cert)
                .and_then(|c| c.public_key())
                .map_err(unreadable)?;
            let key_public = PKey::public_key_from_der(&key_spki).map_err(unreadable)?;
            if cert_key.public_eq(&key_public) {
                Ok(certified)
            } else {
                Err(Error::InconsistentKeys(InconsistentKeys::KeyMismatch).to_string())
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Whether webpki refused a certificate for its X.509 version only.
fn refused_for_version(error: &Error) -> bool {
    match error {
        Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => matches!(
            inner.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::UnsupportedCertVersion)
        ),
        _ => false,
    }
}

/// The certificate's SubjectPublicKeyInfo, read by OpenSSL.
fn public_key(cert: &CertificateDer<'_>) -> Result<SubjectPublicKeyInfoDer<'static>, Error> {
    X509::from_der(cert)
        .and_then(|c| c.public_key())
        .and_then(|k| k.public_key_to_der())
        .map(SubjectPublicKeyInfoDer::from)
        .map_err(|_| CertificateError::BadEncoding.into())
}

/// rustls's `verify_tls12_signature` with the public key instead of the
/// certificate (rustls has the raw-key form for TLS 1.3 only): every
/// algorithm of the scheme is tried, the check itself is webpki's.
fn verify_tls12_with_key(
    message: &[u8],
    spki: &SubjectPublicKeyInfoDer<'_>,
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    let unadvertised = || Error::from(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme);
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, algs)| *algs)
        .ok_or_else(unadvertised)?;
    let key = webpki::RawPublicKeyEntity::try_from(spki).map_err(webpki_error)?;
    let mut last = None;
    for alg in candidates {
        match key.verify_signature(*alg, message, dss.signature()) {
            Ok(()) => return Ok(HandshakeSignatureValid::assertion()),
            Err(e @ webpki::Error::UnsupportedSignatureAlgorithmForPublicKeyContext(_)) => {
                last = Some(e)
            }
            Err(e) => return Err(webpki_error(e)),
        }
    }
    Err(last.map_or_else(unadvertised, webpki_error))
}

fn webpki_error(error: webpki::Error) -> Error {
    match error {
        webpki::Error::InvalidSignatureForPublicKey => CertificateError::BadSignature.into(),
        other => CertificateError::Other(OtherError(Arc::new(other))).into(),
    }
}

fn openssl_error(error: openssl::error::ErrorStack) -> Error {
    CertificateError::Other(OtherError(Arc::new(error))).into()
}

/// OpenSSL's verdict as the error rustls gives for the same fault, so
/// that a v1 chain fails with the words a v3 chain would.
fn refusal(
    ctx: &X509StoreContextRef,
    leaf: &X509,
    server_name: Option<&ServerName<'_>>,
    now: UnixTime,
) -> Error {
    use openssl_sys as sys;
    let failed = ctx.current_cert().unwrap_or(leaf);
    let error = match ctx.error().as_raw() {
        sys::X509_V_ERR_CERT_HAS_EXPIRED => match unix_time(failed.not_after()) {
            Some(not_after) => CertificateError::ExpiredContext {
                time: now,
                not_after,
            },
            None => CertificateError::Expired,
        },
        sys::X509_V_ERR_CERT_NOT_YET_VALID => match unix_time(failed.not_before()) {
            Some(not_before) => CertificateError::NotValidYetContext {
                time: now,
                not_before,
            },
            None => CertificateError::NotValidYet,
        },
        sys::X509_V_ERR_HOSTNAME_MISMATCH | sys::X509_V_ERR_IP_ADDRESS_MISMATCH => {
            match server_name {
                Some(name) => CertificateError::NotValidForNameContext {
                    expected: name.to_owned(),
                    presented: presented_names(leaf),
                },
                None => CertificateError::NotValidForName,
            }
        }
        sys::X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT
        | sys::X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
        | sys::X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE
        | sys::X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT
        | sys::X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN => CertificateError::UnknownIssuer,
        sys::X509_V_ERR_CERT_SIGNATURE_FAILURE => CertificateError::BadSignature,
        sys::X509_V_ERR_INVALID_PURPOSE => CertificateError::InvalidPurpose,
        _ => CertificateError::Other(OtherError(Arc::new(Refused(ctx.error().error_string())))),
    };
    error.into()
}

/// Any other refusal of OpenSSL's, in its words.
#[derive(Debug)]
struct Refused(&'static str);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OpenSSL: {}", self.0)
    }
}

impl std::error::Error for Refused {}

/// The names the certificate is valid for: its DNS names and IP addresses,
/// or else its subject's CN (which OpenSSL checks DNS names against).
fn presented_names(cert: &X509) -> Vec<String> {
    let names = alt_names(cert);
    match names.is_empty() {
        true => common_names(cert),
        false => names,
    }
}

/// Every name in the certificate, for the log: its DNS names and IP
/// addresses, then its subject's CNs.
fn certificate_names(cert: &X509) -> Vec<String> {
    let mut names = alt_names(cert);
    names.extend(common_names(cert));
    names
}

/// The DNS names and IP addresses of its subjectAltName.
fn alt_names(cert: &X509) -> Vec<String> {
    cert.subject_alt_names()
        .into_iter()
        .flatten()
        .filter_map(|name| {
            name.dnsname().map(str::to_owned).or_else(|| {
                name.ipaddress().and_then(|ip| match ip.len() {
                    4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(ip).ok()?).to_string()),
                    16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(ip).ok()?).to_string()),
                    _ => None,
                })
            })
        })
        .collect()
}

/// Its subject's CNs, as `CN=<name>`.
fn common_names(cert: &X509) -> Vec<String> {
    cert.subject_name()
        .entries_by_nid(openssl::nid::Nid::COMMONNAME)
        .filter_map(|cn| cn.data().to_string().ok())
        .map(|cn| format!("CN={cn}"))
        .collect()
}

/// A refusal for the name (OpenSSL may not have verified the whole chain
/// yet: it checks the name before the signatures and dates).
fn is_name_error(error: &Error) -> bool {
    matches!(
        error,
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    )
}

fn unix_time(time: &Asn1TimeRef) -> Option<UnixTime> {
    let epoch = Asn1Time::from_unix(0).ok()?;
    let since = epoch.diff(time).ok()?;
    let secs = i64::from(since.days) * 86_400 + i64::from(since.secs);
    Some(UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        u64::try_from(secs).ok()?,
    )))
}

#[cfg(test)]
#[path = "verifier_tests.rs"]
mod tests;
