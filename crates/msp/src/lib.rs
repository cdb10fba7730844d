//! Membership service providers (MSPs): who may sign what on a channel.
//!
//! An MSP is an organisation's set of trusted certificate authorities plus
//! the rules for reading roles out of certificates. This crate follows
//! Fabric's X.509 MSP:
//!
//! - [`Msp`] is built from a `msp.FabricMSPConfig` (as found in a channel's
//!   config block) and validates identities: the certificate chains to one
//!   of its roots or intermediates, is inside its validity period, is not
//!   revoked by a CRL of its issuer, and carries exactly one NodeOU role when
//!   NodeOUs are enabled. See [`Msp::validate`].
//! - [`MspManager`] holds a channel's MSPs and turns serialized identities
//!   (`msp.SerializedIdentity` bytes) into validated [`Identity`] values,
//!   through an [`IdentityCache`]: deserializing and validating X.509
//!   identities dominated Fabric's validation cost (Thakkar et al. 2018), so
//!   results are cached by the serialized bytes.
//! - [`crypto`] verifies ECDSA P-256/SHA-256 signatures (DER, low-S only)
//!   and [`Signer`] produces them from a PKCS#8 key, always low-S. The key
//!   of a cached identity that verifies often gets a precomputed table of
//!   its multiples (`p256`), with which a verification costs about a
//!   quarter of ring's.
//! - [`folder`] reads an MSP folder in Fabric's layout (`cacerts`,
//!   `signcerts`, `keystore`, `config.yaml`, …). It is the only module that
//!   touches the file system; everything else is pure.
//! - [`own`] remembers the signatures a node made, so that a peer's
//!   committer recognises its own endorsements instead of verifying them.
//!
//! Start with [`MspManager::deserialize`] and [`Identity::verify`].

mod cache;
mod cert;
pub mod crypto;
mod error;
pub mod folder;
mod identity;
mod manager;
mod msp;
pub mod own;
mod p256;
mod signer;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use cache::{CacheStats, IdentityCache};
pub use cert::{Certificate, certificate_der};
pub use error::{IdentityError, MspError, SignatureError};
pub use identity::{Identity, NodeRole};
pub use manager::MspManager;
pub use msp::Msp;
pub use own::{OwnSignatures, RememberingSigner};
pub use signer::Signer;

/// Seconds since the Unix epoch. Validation takes the time as an argument so
/// that tests can move the clock and every peer evaluates the same instant.
pub type UnixTime = i64;

/// The current time as [`UnixTime`].
pub fn now() -> UnixTime {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}
