//! Errors of the msp crate.

use std::path::PathBuf;

/// An MSP could not be loaded or built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum MspError {
    /// A file or folder of an MSP could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file that must hold PEM blocks holds none, or a malformed one.
    #[error("{path}: malformed PEM: {reason}")]
    Pem { path: PathBuf, reason: String },
    /// A certificate in the MSP is unusable.
    #[error("{origin}: {reason}")]
    Certificate { origin: String, reason: String },
    /// A private key is unusable (wrong format, curve or algorithm).
    #[error("{origin}: {reason}")]
    Key { origin: String, reason: String },
    /// `config.yaml` (or another configuration source) has a bad field.
    #[error("{origin}: field `{field}`: {reason}")]
    Config {
        origin: String,
        field: String,
        reason: String,
    },
    /// The MSP configuration names no root CA, or is of a type we do not
    /// support (Idemix).
    #[error("MSP {msp_id}: {reason}")]
    Invalid { msp_id: String, reason: String },
}

/// An identity was rejected. Cloneable, because validation results are cached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("malformed serialized identity: {0}")]
    Malformed(String),
    #[error("identity belongs to unknown MSP {0:?}")]
    UnknownMsp(String),
    #[error("malformed certificate: {0}")]
    BadCertificate(String),
    #[error("unsupported public key: {0} (only ECDSA P-256 is accepted)")]
    UnsupportedKey(String),
    #[error("a CA certificate cannot be used as an identity")]
    IsCertificateAuthority,
    #[error("certificate is not valid before {not_before} (now {now})")]
    NotYetValid { not_before: i64, now: i64 },
    #[error("certificate expired at {not_after} (now {now})")]
    Expired { not_after: i64, now: i64 },
    #[error("certificate does not chain to a CA of MSP {0}")]
    UntrustedIssuer(String),
    #[error("certificate with serial {serial} is revoked")]
    Revoked { serial: String },
    #[error("NodeOU check failed: {0}")]
    NodeOu(String),
    #[error("identity carries none of the MSP's organizational units")]
    OuNotAllowed,
}

/// A signature did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("signature is not a DER ECDSA signature")]
    Malformed,
    #[error("signature has a high S value (Fabric accepts low-S only)")]
    HighS,
    #[error("signature does not verify")]
    Invalid,
    /// Signing needs fresh randomness and the system could not supply it.
    #[error("the system random generator failed")]
    RandomSource,
}
