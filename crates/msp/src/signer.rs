//! Signing with an MSP's private key: ECDSA P-256/SHA-256, always low-S.

use bytes::Bytes;
use prost::Message;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use weft_protos::msp::SerializedIdentity;

use crate::{Certificate, MspError, SignatureError, crypto};

/// OID bytes used only to name the algorithm of a rejected key.
const OID_RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_SECP384R1: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];

/// The nonce size Fabric's SDKs and nodes use.
const NONCE_BYTES: usize = 24;

/// A signing identity: a P-256 private key with its certificate, as found
/// in an MSP folder's `keystore` and `signcerts`.
pub struct Signer {
    key_pair: EcdsaKeyPair,
    rng: SystemRandom,
    certificate: Certificate,
    serialized_identity: Bytes,
    msp_id: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("msp_id", &self.msp_id)
            .field("subject", &self.certificate.common_name())
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// Builds a signer from a PEM certificate and a PEM PKCS#8 private key.
    /// `origin` names where they came from, for error messages.
    pub fn from_pem(
        msp_id: &str,
        certificate_pem: &[u8],
        key_pem: &[u8],
        origin: &str,
    ) -> Result<Self, MspError> {
        let key_error = |reason: String| MspError::Key {
            origin: origin.to_owned(),
            reason,
        };
        let certificate =
            Certificate::from_pem(certificate_pem).map_err(|e| MspError::Certificate {
                origin: origin.to_owned(),
                reason: e.to_string(),
            })?;
        let (_, block) = x509_parser::pem::parse_x509_pem(key_pem)
            .map_err(|e| key_error(format!("malformed PEM: {e}")))?;
        if block.label != "PRIVATE KEY" {
            return Err(key_error(format!(
                "PEM block is {:?}; a PKCS#8 \"PRIVATE KEY\" is required",
                block.label
            )));
        }
        let rng = SystemRandom::new();
        let key_pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &block.contents, &rng)
                .map_err(|_| key_error(describe_rejected_key(&block.contents)))?;
        if key_pair.public_key().as_ref() != certificate.public_key() {
            return Err(key_error(
                "the private key does not match the certificate's public key".to_owned(),
            ));
        }
        let serialized_identity = SerializedIdentity {
            mspid: msp_id.to_owned(),
            id_bytes: Bytes::copy_from_slice(certificate_pem),
        }
        .encode_to_vec()
        .into();
        Ok(Self {
            key_pair,
            rng,
            certificate,
            serialized_identity,
            msp_id: msp_id.to_owned(),
        })
    }

    /// Signs `message`; the DER signature is always in low-S form.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignatureError> {
        let signature = self
            .key_pair
            .sign(&self.rng, message)
            .map_err(|_| SignatureError::RandomSource)?;
        crypto::normalize_low_s(signature.as_ref())
    }

    /// A fresh random nonce of Fabric's size (24 bytes), for the signature
    /// headers this signer writes.
    pub fn new_nonce(&self) -> Result<Bytes, SignatureError> {
        let mut nonce = [0u8; NONCE_BYTES];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| SignatureError::RandomSource)?;
        Ok(Bytes::copy_from_slice(&nonce))
    }

    /// The `msp.SerializedIdentity` bytes of this signer: what goes into a
    /// signature header's `creator` or an endorsement's `endorser`.
    pub fn serialized_identity(&self) -> &Bytes {
        &self.serialized_identity
    }

    pub fn msp_id(&self) -> &str {
        &self.msp_id
    }

    pub fn certificate(&self) -> &Certificate {
        &self.certificate
    }
}

fn describe_rejected_key(pkcs8: &[u8]) -> String {
    let contains = |needle: &[u8]| pkcs8.windows(needle.len()).any(|window| window == needle);
    if contains(OID_RSA_ENCRYPTION) {
        "RSA keys are not supported; MSP keys must be ECDSA P-256".to_owned()
    } else if contains(OID_SECP384R1) {
        "P-384 keys are not supported; MSP keys must be ECDSA P-256".to_owned()
    } else {
        "not a PKCS#8 ECDSA P-256 private key".to_owned()
    }
}

impl weft_protos::tx::Sign for Signer {
    fn identity(&self) -> Bytes {
        self.serialized_identity.clone()
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, weft_protos::tx::SignError> {
        Signer::sign(self, message).map_err(|e| weft_protos::tx::SignError(e.to_string()))
    }
}
