//! A throw-away public key infrastructure for TLS tests: a certificate authority made by the
//! test, and server and client certificates it signs (or not), written as PEM files.
//!
//! Nothing here is fit for production: keys are ECDSA P-256 made on the spot, kept unencrypted
//! on disk in a directory of the test's own, which is removed when the [`TestPki`] is dropped.
//!
//! ```no_run
//! use mesh_testkit::TestPki;
//! # fn demo() -> anyhow::Result<()> {
//! let pki = TestPki::generate("tls")?;
//! let server = pki.server("rabbit", &["localhost", "127.0.0.1"])?;
//! let client = pki.client("billing")?; // subject CN = billing, for EXTERNAL authentication
//! let stranger = TestPki::generate("other")?; // a CA the server does not trust
//! # let _ = (server, client, stranger);
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8, unencrypted).
    pub key: PathBuf,
}

/// A test certificate authority and the directory its files live in (removed on drop).
pub struct TestPki {
    dir: PathBuf,
    ca_file: PathBuf,
    ca_params: CertificateParams,
    ca_key: KeyPair,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl TestPki {
    /// A new CA named `mesh test CA <label>`, in a fresh directory under the system's
    /// temporary directory.
    pub fn generate(label: &str) -> anyhow::Result<TestPki> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mesh-pki-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("mesh test CA {label}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca_params.not_before = OffsetDateTime::now_utc() - Duration::days(1);
        ca_params.not_after = OffsetDateTime::now_utc() + Duration::days(365);
        let ca = ca_params.self_signed(&ca_key)?;
        let ca_file = dir.join("ca.pem");
        write(&ca_file, &ca.pem())?;
        Ok(TestPki {
            dir,
            ca_file,
            ca_params,
            ca_key,
        })
    }

    /// The CA's certificate (PEM): what a client names as `cacertfile`.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// The directory the files are written to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid now, signed by
    /// this CA; written as `<file>.pem` and `<file>.key`.
    pub fn server(&self, file: &str, names: &[&str]) -> anyhow::Result<CertFiles> {
        let now = OffsetDateTime::now_utc();
        self.issue(
            file,
            names,
            ExtendedKeyUsagePurpose::ServerAuth,
            now - Duration::days(1),
            now + Duration::days(30),
        )
    }

    /// A server certificate for `names` that expired yesterday.
    pub fn expired_server(&self, file: &str, names: &[&str]) -> anyhow::Result<CertFiles> {
        let now = OffsetDateTime::now_utc();
        self.issue(
            file,
            names,
            ExtendedKeyUsagePurpose::ServerAuth,
            now - Duration::days(30),
            now - Duration::days(1),
        )
    }

    /// A client certificate whose subject's common name is `name` (what RabbitMQ's EXTERNAL
    /// mechanism takes as the user name by default), valid now, signed by this CA.
    pub fn client(&self, name: &str) -> anyhow::Result<CertFiles> {
        let now = OffsetDateTime::now_utc();
        self.issue(
            name,
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
            now - Duration::days(1),
            now + Duration::days(30),
        )
    }

    fn issue(
        &self,
        file: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> anyhow::Result<CertFiles> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        // A server is named by its first name; a client (no names) by `file`, its identity.
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or(file));
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        params.not_before = not_before;
        params.not_after = not_after;
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer)?;
        let files = CertFiles {
            cert: self.dir.join(format!("{file}.pem")),
            key: self.dir.join(format!("{file}.key")),
        };
        write(&files.cert, &cert.pem())?;
        write(&files.key, &key.serialize_pem())?;
        Ok(files)
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write(path: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_ca_and_the_certificates_it_signs() -> anyhow::Result<()> {
        let pki = TestPki::generate("unit")?;
        let server = pki.server("rabbit", &["localhost", "127.0.0.1"])?;
        let expired = pki.expired_server("old", &["localhost"])?;
        let client = pki.client("billing")?;
        for path in [
            pki.ca_file(),
            &server.cert,
            &server.key,
            &expired.cert,
            &client.cert,
            &client.key,
        ] {
            let text = std::fs::read_to_string(path)?;
            assert!(
                text.starts_with("-----BEGIN "),
                "{}: {text}",
                path.display()
            );
        }
        assert_ne!(
            std::fs::read(&server.cert)?,
            std::fs::read(&expired.cert)?,
            "two certificates are not the same"
        );
        let dir = pki.dir().to_owned();
        drop(pki);
        assert!(!dir.exists(), "the directory goes with the PKI");
        Ok(())
    }
}
