//! TLS towards Redis servers (and Sentinels): the `tls_*` arguments are
//! read and checked once, at `vcl.load`, into a rustls client
//! configuration that every connection of the database shares.
//!
//! - `tls_cafile` (a PEM file) and `tls_capath` (a directory of PEM files
//!   under hashed names, as `openssl rehash` makes them) give the CA
//!   certificates that verify the server; with neither, the
//!   system's roots are used (Debian: /etc/ssl/certs, `ca-certificates`).
//! - `tls_certfile` + `tls_keyfile`: the client certificate (chain) and its
//!   key, both or neither; the key must match the certificate.
//! - `tls_sni`: the name sent in SNI (none for an IP address), which the
//!   server's certificate should be valid for; by default the host of the
//!   location (an IP address against the certificate's IP addresses). As
//!   in hiredis, a certificate that is not is taken, its chain verified,
//!   and said once per server (name.rs); `tls_verify_name=true` [ext]
//!   refuses it.
//!
//! Every error names the argument and the file, never their contents.
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

mod anchor;
mod name;
#[cfg(test)]
mod test_certs;
mod verifier;

pub(crate) use name::take_let_through;
pub use name::NameMismatch;

/// The TLS arguments of `redis.db()` and `redis.sentinels()` (the same
/// six in both) as given in VCL ("" = not set).
#[derive(Clone, Copy, Debug, Default)]
pub struct TlsArgs<'a> {
    /// `tls`: without it the other arguments are ignored, as the C VMOD
    /// does.
    pub enabled: bool,
    pub cafile: &'a str,
    pub capath: &'a str,
    pub certfile: &'a str,
    pub keyfile: &'a str,
    pub sni: &'a str,
    /// [ext] `tls_verify_name`: refuse a certificate not valid for the
    /// server's name (hiredis does not check it).
    pub verify_name: bool,
}

/// Why TLS material was refused.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TlsError {
    #[error("{arg} \"{path}\": {reason}")]
    File {
        arg: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("tls_certfile and tls_keyfile go together: {given} is set, {missing} is empty")]
    HalfClientCert {
        given: &'static str,
        missing: &'static str,
    },
    #[error("tls_keyfile \"{keyfile}\" does not match tls_certfile \"{certfile}\": {reason}")]
    KeyMismatch {
        certfile: PathBuf,
        keyfile: PathBuf,
        reason: String,
    },
    #[error("tls_sni \"{sni}\": not a valid DNS name or IP address")]
    BadSni { sni: String },
    #[error("the CA certificates cannot verify servers: {reason}")]
    Verifier { reason: String },
    #[error("no CA certificates: the system has none (install ca-certificates) and neither tls_cafile nor tls_capath is set")]
    NoSystemRoots,
}

/// A checked TLS configuration, shared by every connection of a database.
#[derive(Clone)]
pub struct Tls {
    config: Arc<ClientConfig>,
    sni: Option<ServerName<'static>>,
    /// The name policy, and the servers whose mismatch was said.
    names: Arc<name::NameCheck>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("sni", &self.sni).finish()
    }
}

impl PartialEq for Tls {
    /// Same configuration object: TLS settings are compared by identity.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config) && self.sni == other.sni
    }
}

impl Tls {
    /// The TLS settings the arguments ask for: `None` without `tls=true`,
    /// else the material read and checked. The one check of the `tls*`
    /// arguments, for `redis.db()` and `redis.sentinels()` alike.
    pub fn from_args(args: &TlsArgs) -> Result<Option<Tls>, TlsError> {
        if args.enabled {
            Tls::load(args).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Reads and checks the material, whatever `enabled` says.
    pub(crate) fn load(args: &TlsArgs) -> Result<Tls, TlsError> {
        let (roots, cas) = roots(args)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = verifier::ServerVerifier::new(roots, &cas, &provider, args.verify_name)
            .map_err(|reason| TlsError::Verifier { reason })?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier));
        let config = match (args.certfile.is_empty(), args.keyfile.is_empty()) {
            (true, true) => builder.with_no_client_auth(),
            (false, true) => {
                return Err(TlsError::HalfClientCert {
                    given: "tls_certfile",
                    missing: "tls_keyfile",
                })
            }
            (true, false) => {
                return Err(TlsError::HalfClientCert {
                    given: "tls_keyfile",
                    missing: "tls_certfile",
                })
            }
            (false, false) => {
                let chain = certificates("tls_certfile", Path::new(args.certfile))?;
                let key = private_key(Path::new(args.keyfile))?;
                let certified = verifier::client_cert(&provider, chain, key).map_err(|reason| {
                    TlsError::KeyMismatch {
                        certfile: args.certfile.into(),
                        keyfile: args.keyfile.into(),
                        reason,
                    }
                })?;
                builder.with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(
                    certified,
                )))
            }
        };
        let sni = if args.sni.is_empty() {
            None
        } else {
            Some(
                ServerName::try_from(args.sni.to_owned()).map_err(|_| TlsError::BadSni {
                    sni: args.sni.to_owned(),
                })?,
            )
        };
        Ok(Tls {
            config: Arc::new(config),
            sni,
            names: Arc::new(name::NameCheck::new(args.verify_name)),
        })
    }

    /// [ext] `tls_verify_name=true`: a name mismatch refuses the server.
    pub fn verifies_name(&self) -> bool {
        self.names.strict
    }

    /// Where a server whose certificate does not name it is reported,
    /// once per server: set by the owner of the configuration (the first
    /// call only).
    pub(crate) fn report_name_mismatches_to(&self, report: crate::logger::Log) {
        self.names.report_to(report);
    }

    /// The handshake with the server at `server` let `mismatch` through:
    /// reported if it is the first time for that server.
    pub(crate) fn name_mismatch_seen(&self, server: &str, mismatch: &NameMismatch) {
        self.names.seen(server, mismatch);
    }

    /// The name of the server of `host`, sent as SNI (not an IP address)
    /// and matched against its certificate (name.rs): `tls_sni`, else the
    /// host itself. `None` when the host is no valid name.
    pub fn server_name(&self, host: &str) -> Option<ServerName<'static>> {
        self.sni
            .clone()
            .or_else(|| ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).ok())
    }

    /// A client session towards `name`.
    pub fn session(&self, name: ServerName<'static>) -> Result<rustls::ClientConnection, String> {
        rustls::ClientConnection::new(self.config.clone(), name).map_err(|e| e.to_string())
    }
}

/// The CAs that verify the server: rustls's store of trust anchors, and
/// every certificate given, for OpenSSL (see verifier.rs). Of a
/// `tls_cafile` or `tls_capath`, only self-signed CAs are anchors (see
/// anchor.rs); the others (intermediates, leaves) go to OpenSSL only.
fn roots(args: &TlsArgs) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), TlsError> {
    let mut store = RootCertStore::empty();
    let mut cas = Vec::new();
    if args.cafile.is_empty() && args.capath.is_empty() {
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = store.add_parsable_certificates(found.certs.iter().cloned());
        if added == 0 {
            return Err(TlsError::NoSystemRoots);
        }
        return Ok((store, found.certs));
    }
    if !args.cafile.is_empty() {
        let path = Path::new(args.cafile);
        add_cas(&mut store, &mut cas, certificates("tls_cafile", path)?).map_err(|reason| {
            TlsError::File {
                arg: "tls_cafile",
                path: path.into(),
                reason,
            }
        })?;
    }
    if !args.capath.is_empty() {
        let dir = Path::new(args.capath);
        let file_error = |reason: String| TlsError::File {
            arg: "tls_capath",
            path: dir.into(),
            reason,
        };
        // As OpenSSL's CApath: only hashed names (see anchor.rs).
        let before = cas.len();
        for cert in anchor::hashed_certificates(dir).map_err(file_error)? {
            let _ = add_cas(&mut store, &mut cas, vec![cert]);
        }
        if cas.len() == before {
            return Err(file_error(
                "no usable CA certificate in the directory".into(),
            ));
        }
    }
    Ok((store, cas))
}

/// Adds the trust anchors of `certs` to `store`, and all of them to `cas`.
fn add_cas(
    store: &mut RootCertStore,
    cas: &mut Vec<CertificateDer<'static>>,
    certs: Vec<CertificateDer<'static>>,
) -> Result<(), String> {
    for cert in certs {
        if anchor::is_trust_anchor(&cert) {
            store
                .add(cert.clone())
                .map_err(|e| format!("not a usable CA certificate: {e}"))?;
        }
        cas.push(cert);
    }
    Ok(())
}

/// The PEM certificates of a file; at least one.
fn certificates(arg: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |reason: String| TlsError::File {
        arg,
        path: path.into(),
        reason,
    };
    let text = fs::read(path).map_err(|e| file_error(io_reason(&e)))?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(format!("not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_error("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let file_error = |reason: String| TlsError::File {
        arg: "tls_keyfile",
        path: path.into(),
        reason,
    };
    let text = fs::read(path).map_err(|e| file_error(io_reason(&e)))?;
    PrivateKeyDer::from_pem_slice(&text)
        .map_err(|_| file_error("no PEM private key (PKCS#8, PKCS#1 or SEC1) in the file".into()))
}

fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file or directory".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
#[path = "../tests/support/tls_material.rs"]
#[allow(
    dead_code,
    reason = "shared with the vtc harness, which uses the expired and other-CA files"
)]
mod tls_material;

#[cfg(test)]
pub(crate) mod testing {
    use std::path::{Path, PathBuf};

    pub use super::tls_material::V1_SERVER_CN;

    /// The test material in a directory removed on drop.
    pub struct Material {
        pub dir: PathBuf,
        pub files: super::tls_material::Material,
    }

    impl std::ops::Deref for Material {
        type Target = super::tls_material::Material;
        fn deref(&self) -> &Self::Target {
            &self.files
        }
    }

    impl Drop for Material {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    pub fn material(tag: &str) -> Material {
        let dir = std::env::temp_dir().join(format!("vmod-redis-tls-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let files = super::tls_material::write_material(&dir).expect("TLS material");
        Material { dir, files }
    }

    pub fn text(path: &Path) -> &str {
        path.to_str().expect("UTF-8 path")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{material, text};
    use super::*;

    fn load(args: TlsArgs) -> Result<Tls, String> {
        Tls::load(&args).map_err(|e| e.to_string())
    }

    #[test]
    fn good_material_loads() {
        let m = material("good");
        let tls = load(TlsArgs {
            cafile: text(&m.ca),
            certfile: text(&m.client_cert),
            keyfile: text(&m.client_key),
            ..TlsArgs::default()
        })
        .unwrap();
        assert_eq!(
            tls.server_name("127.0.0.1"),
            Some(ServerName::try_from("127.0.0.1").unwrap())
        );
        assert!(tls.session(tls.server_name("localhost").unwrap()).is_ok());
        // A directory of CAs, with a file that is no certificate in it.
        std::fs::write(m.dir.join("README"), "not a certificate").unwrap();
        assert!(load(TlsArgs {
            capath: text(&m.dir),
            ..TlsArgs::default()
        })
        .is_ok());
    }

    #[test]
    fn sni_overrides_the_host() {
        let m = material("sni");
        let tls = load(TlsArgs {
            cafile: text(&m.ca),
            sni: "redis.example",
            ..TlsArgs::default()
        })
        .unwrap();
        assert_eq!(
            tls.server_name("127.0.0.1"),
            Some(ServerName::try_from("redis.example").unwrap())
        );
        let err = load(TlsArgs {
            cafile: text(&m.ca),
            sni: "bad name!",
            ..TlsArgs::default()
        })
        .unwrap_err();
        assert_eq!(
            err,
            "tls_sni \"bad name!\": not a valid DNS name or IP address"
        );
    }

    #[test]
    fn bad_material_names_the_argument_and_the_file() {
        let m = material("bad");
        let missing = m.dir.join("missing.crt");
        let cases: Vec<(TlsArgs, String)> = vec![
            (
                TlsArgs {
                    cafile: text(&missing),
                    ..TlsArgs::default()
                },
                format!("tls_cafile \"{}\": no such file or directory", missing.display()),
            ),
            (
                TlsArgs {
                    cafile: text(&m.client_key),
                    ..TlsArgs::default()
                },
                format!("tls_cafile \"{}\": no PEM certificate in the file", m.client_key.display()),
            ),
            (
                TlsArgs {
                    capath: text(&missing),
                    ..TlsArgs::default()
                },
                format!("tls_capath \"{}\": no such file or directory", missing.display()),
            ),
            (
                TlsArgs {
                    cafile: text(&m.ca),
                    certfile: text(&m.client_cert),
                    ..TlsArgs::default()
                },
                "tls_certfile and tls_keyfile go together: tls_certfile is set, tls_keyfile is empty".into(),
            ),
            (
                TlsArgs {
                    cafile: text(&m.ca),
                    certfile: text(&m.client_cert),
                    keyfile: text(&m.ca),
                    ..TlsArgs::default()
                },
                format!(
                    "tls_keyfile \"{}\": no PEM private key (PKCS#8, PKCS#1 or SEC1) in the file",
                    m.ca.display()
                ),
            ),
        ];
        for (args, want) in cases {
            assert_eq!(load(args).unwrap_err(), want);
        }
        // A key that is not the certificate's.
        let err = load(TlsArgs {
            cafile: text(&m.ca),
            certfile: text(&m.client_cert),
            keyfile: text(&m.server_key),
            ..TlsArgs::default()
        })
        .unwrap_err();
        assert!(
            err.starts_with(&format!(
                "tls_keyfile \"{}\" does not match tls_certfile \"{}\"",
                m.server_key.display(),
                m.client_cert.display()
            )),
            "{err}"
        );
        // Not PEM at all.
        let garbage = m.dir.join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = load(TlsArgs {
            cafile: text(&garbage),
            ..TlsArgs::default()
        })
        .unwrap_err();
        assert!(
            err.starts_with(&format!("tls_cafile \"{}\": not PEM", garbage.display())),
            "{err}"
        );
    }

    #[test]
    fn system_roots_by_default() {
        // Debian's ca-certificates is on every machine this runs on.
        assert!(load(TlsArgs::default()).is_ok());
    }
}
