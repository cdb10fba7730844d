//! A validated identity: the result of checking a serialized identity
//! against its MSP.

use std::sync::Arc;

use bytes::Bytes;

use crate::crypto::FrequentKey;
use crate::{Certificate, IdentityError, SignatureError, UnixTime};

/// The NodeOU classification of an identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeRole {
    Client,
    Peer,
    Admin,
    Orderer,
}

/// An identity that has passed its MSP's validation.
///
/// Holds what policy evaluation asks about: the MSP, the roles, the OUs with
/// the chain that certified them, and the key to verify signatures with.
#[derive(Debug, Clone)]
pub struct Identity {
    pub(crate) msp_id: String,
    pub(crate) serialized: Bytes,
    pub(crate) certificate: Certificate,
    pub(crate) node_role: Option<NodeRole>,
    pub(crate) is_admin: bool,
    pub(crate) node_ous_enabled: bool,
    /// SHA-256 over the DER of the certificate chain above this identity
    /// (issuer first, root last): Fabric's "certifiers identifier".
    pub(crate) certifiers_id: Vec<u8>,
    /// The not-after time of the identity's whole chain (the earliest one).
    pub(crate) chain_not_after: UnixTime,
    /// The certificate's public key, shared by the clones of the identity
    /// so that the cached identity's key earns its verification table.
    pub(crate) key: Arc<FrequentKey>,
}

impl Identity {
    /// The MSP that validated this identity.
    pub fn msp_id(&self) -> &str {
        &self.msp_id
    }

    /// The serialized `msp.SerializedIdentity` this identity came from.
    pub fn serialized(&self) -> &Bytes {
        &self.serialized
    }

    pub fn certificate(&self) -> &Certificate {
        &self.certificate
    }

    /// The identity's NodeOU role, when the MSP has NodeOUs enabled.
    pub fn node_role(&self) -> Option<NodeRole> {
        self.node_role
    }

    /// Whether the identity is an administrator of its MSP: it carries the
    /// admin NodeOU, or its certificate is listed among the MSP's admins.
    pub fn is_admin(&self) -> bool {
        self.is_admin
    }

    /// Whether the identity's MSP classifies identities by NodeOU.
    pub fn node_ous_enabled(&self) -> bool {
        self.node_ous_enabled
    }

    /// Whether the identity has OU `ou` certified by exactly the chain
    /// `certifiers_id`, as an `OrganizationUnit` principal requires.
    pub fn has_organizational_unit(&self, ou: &str, certifiers_id: &[u8]) -> bool {
        certifiers_id == self.certifiers_id
            && self
                .certificate
                .organizational_units()
                .iter()
                .any(|own| own == ou)
    }

    /// Fabric's certifiers identifier of this identity's chain.
    pub fn certifiers_id(&self) -> &[u8] {
        &self.certifiers_id
    }

    /// When the identity stops being valid: the earliest not-after time of
    /// its certificate and the chain above it. A Deliver stream ends then,
    /// as Fabric's ends at its client certificate's expiry.
    pub fn expires_at(&self) -> UnixTime {
        self.certificate.not_after().min(self.chain_not_after)
    }

    /// Checks that the identity and its chain are valid at `now`. Cached
    /// identities are re-checked with this on every use.
    pub fn check_validity(&self, now: UnixTime) -> Result<(), IdentityError> {
        self.certificate.check_validity(now)?;
        if now > self.chain_not_after {
            return Err(IdentityError::Expired {
                not_after: self.chain_not_after,
                now,
            });
        }
        Ok(())
    }

    /// Verifies an ECDSA P-256/SHA-256 DER signature (low-S only) over
    /// `message` with this identity's key.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), SignatureError> {
        self.key.verify(message, signature)
    }
}
