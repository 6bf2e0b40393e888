//! Which certificates of `tls_cafile` / `tls_capath` may end a chain, by
//! OpenSSL's rules (so hiredis's and the C VMOD's): a self-signed CA. A
//! bundle may also hold intermediates or leaves; webpki would take every
//! certificate it is given as a trust anchor, so a leaf's key (a client
//! certificate's, say) could sign server certificates. Those stay in the
//! OpenSSL store only, where OpenSSL uses them as it would.
//!
//! A `tls_capath` directory is read as OpenSSL reads a CApath (and so
//! `redis-cli --cacertdir` and hiredis): by hashed names only.
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use openssl::x509::{X509KeyUsage, X509};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// The certificates of a `tls_capath` directory that OpenSSL's hashed
/// lookup (`X509_LOOKUP_hash_dir`) can find: only files named
/// `<hash>.<n>`, the subject name hash (`X509_NAME_hash`) in 8 lower-case
/// hex digits, as `openssl rehash` (or `c_rehash`) names them; for each
/// hash `.0`, `.1`... up to the first missing or unreadable one. Of each
/// file only the certificates whose subject hashes to its name are kept:
/// OpenSSL opens the file to find an issuer of that name, and another
/// certificate in it would be used only by chance. The error says what was
/// found instead (`Err`: the reason, for the directory).
pub(super) fn hashed_certificates(dir: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let names: BTreeSet<String> = fs::read_dir(dir)
        .map_err(|e| super::io_reason(&e))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    let hashes: BTreeSet<u32> = names.iter().filter_map(|name| hash_of_name(name)).collect();
    let mut found = Vec::new();
    let mut mismatched = Vec::new();
    for hash in hashes {
        for n in 0.. {
            let name = format!("{hash:08x}.{n}");
            let path = dir.join(&name);
            if !names.contains(&name) || !path.is_file() {
                break;
            }
            let Some(certs) = fs::read(&path).ok().and_then(|pem| {
                CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<Vec<_>, _>>()
                    .ok()
                    .filter(|certs| !certs.is_empty())
            }) else {
                break;
            };
            let before = found.len();
            found.extend(
                certs
                    .into_iter()
                    .filter(|cert| subject_hash(cert) == Some(hash)),
            );
            if found.len() == before {
                mismatched.push(name);
            }
        }
    }
    if !found.is_empty() {
        return Ok(found);
    }
    let what = if !mismatched.is_empty() {
        format!(
            "{} hold no certificate whose subject name hash is the file's name",
            mismatched.join(", ")
        )
    } else {
        let others = names.len();
        format!("{others} file(s), none named by its subject name hash")
    };
    Err(format!(
        "no certificate under a hashed name (<subject hash>.0, as OpenSSL reads a CA \
         directory): {what}; run `openssl rehash` on the directory"
    ))
}

/// The hash of a name as OpenSSL's hashed lookup opens it, `%08lx.%d`
/// (`5ed36f99.0`).
fn hash_of_name(name: &str) -> Option<u32> {
    let (hash, n) = name.split_once('.')?;
    let lower_hex = hash.len() == 8 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let number: u32 = n.parse().ok()?;
    if !lower_hex || number.to_string() != n {
        return None;
    }
    u32::from_str_radix(hash, 16).ok()
}

/// `X509_NAME_hash` of `der`'s subject, as `openssl x509 -hash` prints it.
fn subject_hash(der: &CertificateDer<'_>) -> Option<u32> {
    X509::from_der(der)
        .ok()
        .map(|cert| cert.subject_name_hash())
}

/// Whether OpenSSL would end a chain at `der` (`X509_check_ca` on a
/// self-signed certificate): basicConstraints with cA set, or no
/// basicConstraints and either X.509 v1 or a keyUsage with keyCertSign. A
/// keyUsage without keyCertSign is never a CA.
pub(super) fn is_trust_anchor(der: &CertificateDer<'_>) -> bool {
    let Ok(cert) = X509::from_der(der) else {
        return false;
    };
    if !self_signed(&cert) {
        return false;
    }
    let signs_certs = cert
        .key_usage()
        .map(|usage| usage.contains(X509KeyUsage::KEY_CERT_SIGN));
    if signs_certs == Some(false) {
        return false;
    }
    match basic_constraints_ca(der) {
        Some(ca) => ca,
        None => cert.version() == 0 || signs_certs == Some(true),
    }
}

/// Issuer and subject the same, and the signature made by its own key.
fn self_signed(cert: &X509) -> bool {
    let same_name = match (cert.subject_name().to_der(), cert.issuer_name().to_der()) {
        (Ok(subject), Ok(issuer)) => subject == issuer,
        _ => false,
    };
    same_name
        && cert
            .public_key()
            .and_then(|key| cert.verify(&key))
            .unwrap_or(false)
}

/// The cA flag of the basicConstraints extension (`None`: no such
/// extension, or a certificate too malformed to tell).
fn basic_constraints_ca(der: &[u8]) -> Option<bool> {
    const SEQUENCE: u8 = 0x30;
    const EXTENSIONS: u8 = 0xa3; // [3] EXPLICIT, in TBSCertificate
    const OID: u8 = 0x06;
    const BOOLEAN: u8 = 0x01;
    const OCTET_STRING: u8 = 0x04;
    const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13]; // 2.5.29.19
    let (certificate, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut fields = tbs;
    let extensions = loop {
        let (tag, content, rest) = element(fields)?;
        if tag == EXTENSIONS {
            break expect(content, SEQUENCE)?.0;
        }
        fields = rest;
    };
    let mut list = extensions;
    while !list.is_empty() {
        let (tag, extension, rest) = element(list)?;
        list = rest;
        if tag != SEQUENCE {
            return None;
        }
        let (id, mut value) = expect(extension, OID)?;
        if id != BASIC_CONSTRAINTS {
            continue;
        }
        if let Some((BOOLEAN, _, after_critical)) = element(value) {
            value = after_critical;
        }
        let (octets, _) = expect(value, OCTET_STRING)?;
        let (constraints, _) = expect(octets, SEQUENCE)?;
        return Some(match element(constraints) {
            Some((BOOLEAN, flag, _)) => flag.first().is_some_and(|&b| b != 0),
            _ => false,
        });
    }
    None
}

/// The content of the element at the start of `der` if it has `tag`, and
/// what follows it.
fn expect(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match element(der)? {
        (found, content, rest) if found == tag => Some((content, rest)),
        _ => None,
    }
}

/// The DER element at the start of `der`: tag, content, rest. Only what
/// certificates use: one-byte tags, lengths of up to four bytes.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        let len = bytes.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (len, rest)
    };
    if tag & 0x1f == 0x1f || rest.len() < len {
        return None;
    }
    let (content, rest) = rest.split_at(len);
    Some((tag, content, rest))
}

#[cfg(test)]
#[path = "anchor_tests.rs"]
mod tests;
