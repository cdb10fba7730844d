//! X.509 certificates reduced to what an MSP needs, parsed once.

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;
use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_SIG_ECDSA_WITH_SHA256,
};
use x509_parser::prelude::FromDer;

use crate::{IdentityError, SignatureError, UnixTime, crypto};

/// A parsed X.509 certificate with an ECDSA P-256 public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    der: Vec<u8>,
    tbs: Vec<u8>,
    signature: Vec<u8>,
    signed_with_ecdsa_sha256: bool,
    subject: Vec<u8>,
    issuer: Vec<u8>,
    public_key: Vec<u8>,
    serial: Vec<u8>,
    not_before: UnixTime,
    not_after: UnixTime,
    is_ca: bool,
    organizational_units: Vec<String>,
    subject_key_id: Option<Vec<u8>>,
    authority_key_id: Option<Vec<u8>>,
    common_name: Option<String>,
}

/// The DER of the first PEM `CERTIFICATE` block of `pem`, whatever its
/// key type: for TLS certificates, which are compared and hashed rather
/// than used to verify signatures.
pub fn certificate_der(pem: &[u8]) -> Result<Vec<u8>, IdentityError> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|e| IdentityError::BadCertificate(format!("malformed PEM: {e}")))?;
    if block.label != "CERTIFICATE" {
        return Err(IdentityError::BadCertificate(format!(
            "PEM block is {:?}, not CERTIFICATE",
            block.label
        )));
    }
    Ok(block.contents)
}

impl Certificate {
    /// Parses a DER certificate. Keys other than ECDSA P-256 are rejected.
    pub fn from_der(der: &[u8]) -> Result<Self, IdentityError> {
        let (rest, cert) = X509Certificate::from_der(der)
            .map_err(|e| IdentityError::BadCertificate(e.to_string()))?;
        if !rest.is_empty() {
            return Err(IdentityError::BadCertificate(format!(
                "{} trailing bytes after the certificate",
                rest.len()
            )));
        }
        let spki = cert.public_key();
        if spki.algorithm.algorithm != OID_KEY_TYPE_EC_PUBLIC_KEY {
            return Err(IdentityError::UnsupportedKey(format!(
                "key algorithm {}",
                spki.algorithm.algorithm
            )));
        }
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok());
        if curve.as_ref() != Some(&OID_EC_P256) {
            return Err(IdentityError::UnsupportedKey(format!(
                "EC curve {}",
                curve.map_or_else(|| "unspecified".to_owned(), |c| c.to_string())
            )));
        }
        let public_key = spki.subject_public_key.data.to_vec();
        if public_key.len() != 65 || public_key[0] != 0x04 {
            return Err(IdentityError::UnsupportedKey(
                "P-256 key is not an uncompressed point".to_owned(),
            ));
        }

        let mut subject_key_id = None;
        let mut authority_key_id = None;
        for extension in cert.extensions() {
            match extension.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => subject_key_id = Some(id.0.to_vec()),
                ParsedExtension::AuthorityKeyIdentifier(aki) => {
                    authority_key_id = aki.key_identifier.as_ref().map(|id| id.0.to_vec());
                }
                _ => {}
            }
        }
        let organizational_units = cert
            .subject()
            .iter_organizational_unit()
            .filter_map(|ou| ou.as_str().ok().map(str::to_owned))
            .collect();
        let common_name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok().map(str::to_owned));

        Ok(Self {
            der: der.to_vec(),
            tbs: cert.tbs_certificate.as_ref().to_vec(),
            signature: cert.signature_value.data.to_vec(),
            signed_with_ecdsa_sha256: cert.signature_algorithm.algorithm
                == OID_SIG_ECDSA_WITH_SHA256,
            subject: cert.subject().as_raw().to_vec(),
            issuer: cert.issuer().as_raw().to_vec(),
            public_key,
            serial: cert.raw_serial().to_vec(),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            is_ca: cert.is_ca(),
            organizational_units,
            subject_key_id,
            authority_key_id,
            common_name,
        })
    }

    /// Parses the first PEM `CERTIFICATE` block of `pem`.
    pub fn from_pem(pem: &[u8]) -> Result<Self, IdentityError> {
        Self::from_der(&certificate_der(pem)?)
    }

    /// The certificate's DER encoding.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The public key as an uncompressed SEC1 point.
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }

    /// Whether `issuer` signed this certificate: names match and the
    /// signature verifies under the issuer's key.
    pub fn is_issued_by(&self, issuer: &Certificate) -> bool {
        self.issuer == issuer.subject
            && self.signed_with_ecdsa_sha256
            && self.verify_issuer_signature(issuer).is_ok()
    }

    fn verify_issuer_signature(&self, issuer: &Certificate) -> Result<(), SignatureError> {
        // Certificates signed by CAs other than Fabric's may carry high-S
        // signatures; the low-S rule applies to transactions, not to X.509.
        let signature = crypto::normalize_low_s(&self.signature)?;
        crypto::verify(&issuer.public_key, &self.tbs, &signature)
    }

    /// Whether the certificate is self-signed (a root).
    pub fn is_self_signed(&self) -> bool {
        self.is_issued_by(self)
    }

    pub fn is_ca(&self) -> bool {
        self.is_ca
    }

    pub fn not_before(&self) -> UnixTime {
        self.not_before
    }

    pub fn not_after(&self) -> UnixTime {
        self.not_after
    }

    /// The serial number, big-endian, as encoded.
    pub fn serial(&self) -> &[u8] {
        &self.serial
    }

    /// The raw DER of the subject name.
    pub fn subject(&self) -> &[u8] {
        &self.subject
    }

    /// The raw DER of the issuer name.
    pub fn issuer(&self) -> &[u8] {
        &self.issuer
    }

    /// The subject's OU attribute values, in order.
    pub fn organizational_units(&self) -> &[String] {
        &self.organizational_units
    }

    /// The subject's common name, if any.
    pub fn common_name(&self) -> Option<&str> {
        self.common_name.as_deref()
    }

    pub fn subject_key_id(&self) -> Option<&[u8]> {
        self.subject_key_id.as_deref()
    }

    pub fn authority_key_id(&self) -> Option<&[u8]> {
        self.authority_key_id.as_deref()
    }

    /// Checks the validity period at `now`.
    pub fn check_validity(&self, now: UnixTime) -> Result<(), IdentityError> {
        if now < self.not_before {
            return Err(IdentityError::NotYetValid {
                not_before: self.not_before,
                now,
            });
        }
        if now > self.not_after {
            return Err(IdentityError::Expired {
                not_after: self.not_after,
                now,
            });
        }
        Ok(())
    }
}
