//! One organisation's MSP, built from its `msp.FabricMSPConfig`.

use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use weft_protos::msp::{FabricMspConfig, FabricNodeOUs, FabricOuIdentifier};
use x509_parser::prelude::FromDer;
use x509_parser::revocation_list::CertificateRevocationList;

use crate::crypto::FrequentKey;
use crate::{Certificate, Identity, IdentityError, MspError, NodeRole, UnixTime};

/// The longest certificate chain (identity to root) we follow.
const CHAIN_DEPTH_MAX: usize = 8;

/// An X.509 MSP: trusted roots and intermediates, revocation lists, admins
/// and the NodeOU rules of one organisation.
#[derive(Debug, Clone)]
pub struct Msp {
    id: String,
    roots: Vec<Certificate>,
    intermediates: Vec<Certificate>,
    admins: Vec<Certificate>,
    revocations: Vec<Revocations>,
    node_ous: Option<NodeOus>,
    /// When non-empty, an identity must carry one of these OUs.
    allowed_ous: Vec<OuIdentifier>,
    config: FabricMspConfig,
}

/// The serial numbers revoked by one CRL, and the CA that signed it.
#[derive(Debug, Clone)]
struct Revocations {
    issuer: Certificate,
    serials: Vec<Vec<u8>>,
}

#[derive(Debug, Clone)]
struct NodeOus {
    client: Option<OuIdentifier>,
    peer: Option<OuIdentifier>,
    admin: Option<OuIdentifier>,
    orderer: Option<OuIdentifier>,
}

/// An OU name, optionally pinned to the chain of a given CA certificate.
#[derive(Debug, Clone)]
struct OuIdentifier {
    name: String,
    certifiers_id: Vec<u8>,
}

impl Msp {
    /// Builds an MSP from its Fabric configuration, as carried in a channel
    /// config's `MSP` value or read from an MSP folder.
    pub fn from_config(config: FabricMspConfig) -> Result<Self, MspError> {
        let id = config.name.clone();
        let invalid = |reason: String| MspError::Invalid {
            msp_id: id.clone(),
            reason,
        };
        if id.is_empty() {
            return Err(invalid("the MSP has no name".to_owned()));
        }
        let certificates = |field: &str, pems: &[Bytes]| -> Result<Vec<Certificate>, MspError> {
            pems.iter()
                .enumerate()
                .map(|(index, pem)| {
                    Certificate::from_pem(pem).map_err(|e| MspError::Certificate {
                        origin: format!("MSP {id}: {field}[{index}]"),
                        reason: e.to_string(),
                    })
                })
                .collect()
        };
        let roots = certificates("root_certs", &config.root_certs)?;
        if roots.is_empty() {
            return Err(invalid("the MSP has no root CA certificate".to_owned()));
        }
        for (index, root) in roots.iter().enumerate() {
            if !root.is_ca() || !root.is_self_signed() {
                return Err(invalid(format!(
                    "root_certs[{index}] is not a self-signed CA certificate"
                )));
            }
        }
        let intermediates = certificates("intermediate_certs", &config.intermediate_certs)?;
        let admins = certificates("admins", &config.admins)?;

        let mut msp = Self {
            id: id.clone(),
            roots,
            intermediates,
            admins,
            revocations: Vec::new(),
            node_ous: None,
            allowed_ous: Vec::new(),
            config: FabricMspConfig::default(),
        };
        for (index, intermediate) in msp.intermediates.iter().enumerate() {
            if !intermediate.is_ca() || msp.chain_of(intermediate).is_err() {
                return Err(invalid(format!(
                    "intermediate_certs[{index}] is not a CA certificate that chains to a root"
                )));
            }
        }
        msp.revocations = config
            .revocation_list
            .iter()
            .enumerate()
            .map(|(index, pem)| {
                msp.parse_crl(pem).map_err(|reason| MspError::Certificate {
                    origin: format!("MSP {id}: revocation_list[{index}]"),
                    reason,
                })
            })
            .collect::<Result<_, _>>()?;
        msp.node_ous = match &config.fabric_node_ous {
            Some(node_ous) if node_ous.enable => Some(msp.parse_node_ous(node_ous)?),
            _ => None,
        };
        msp.allowed_ous = config
            .organizational_unit_identifiers
            .iter()
            .map(|ou| msp.parse_ou_identifier("organizational_unit_identifiers", ou))
            .collect::<Result<_, _>>()?;
        msp.config = config;
        Ok(msp)
    }

    /// The MSP ID, e.g. `Org1MSP`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The configuration this MSP was built from.
    pub fn config(&self) -> &FabricMspConfig {
        &self.config
    }

    /// Whether identities are classified by NodeOU (client, peer, admin,
    /// orderer).
    pub fn node_ous_enabled(&self) -> bool {
        self.node_ous.is_some()
    }

    /// Validates a PEM certificate as an identity of this MSP at time `now`.
    ///
    /// The certificate must be an end-entity ECDSA P-256 certificate that
    /// chains to one of the MSP's roots (through its intermediates), with
    /// every certificate of the chain valid at `now`, none revoked by a CRL
    /// of its issuer, and — when NodeOUs are enabled — exactly one NodeOU.
    pub fn validate(
        &self,
        serialized: Bytes,
        id_bytes: &[u8],
        now: UnixTime,
    ) -> Result<Identity, IdentityError> {
        let certificate = Certificate::from_pem(id_bytes)?;
        if certificate.is_ca() {
            return Err(IdentityError::IsCertificateAuthority);
        }
        let chain = self.chain_of(&certificate)?;
        certificate.check_validity(now)?;
        for ca in &chain {
            ca.check_validity(now)?;
        }
        self.check_revocation(&certificate, &chain)?;
        let certifiers_id = certifiers_id(&chain);

        let node_role = match &self.node_ous {
            Some(node_ous) => Some(node_ous.classify(&certificate, &certifiers_id)?),
            None => None,
        };
        if !self.allowed_ous.is_empty()
            && !self
                .allowed_ous
                .iter()
                .any(|ou| ou.matches(&certificate, &certifiers_id))
        {
            return Err(IdentityError::OuNotAllowed);
        }
        let is_admin = node_role == Some(NodeRole::Admin)
            || self
                .admins
                .iter()
                .any(|admin| admin.der() == certificate.der());
        let chain_not_after = chain
            .iter()
            .map(|ca| ca.not_after())
            .fold(certificate.not_after(), i64::min);

        Ok(Identity {
            msp_id: self.id.clone(),
            serialized,
            key: Arc::new(FrequentKey::new(certificate.public_key().to_vec())),
            certificate,
            node_role,
            is_admin,
            node_ous_enabled: self.node_ous.is_some(),
            certifiers_id,
            chain_not_after,
        })
    }

    /// The CA certificates above `certificate`, issuer first, ending at a
    /// root of this MSP.
    fn chain_of(&self, certificate: &Certificate) -> Result<Vec<Certificate>, IdentityError> {
        let mut chain: Vec<&Certificate> = Vec::new();
        let mut current = certificate;
        for _ in 0..CHAIN_DEPTH_MAX {
            if let Some(root) = self.roots.iter().find(|root| current.is_issued_by(root)) {
                chain.push(root);
                return Ok(chain.into_iter().cloned().collect());
            }
            let issuer = self
                .intermediates
                .iter()
                .find(|ca| current.is_issued_by(ca) && !chain.contains(ca))
                .ok_or_else(|| IdentityError::UntrustedIssuer(self.id.clone()))?;
            chain.push(issuer);
            current = issuer;
        }
        Err(IdentityError::UntrustedIssuer(self.id.clone()))
    }

    fn check_revocation(
        &self,
        certificate: &Certificate,
        chain: &[Certificate],
    ) -> Result<(), IdentityError> {
        let subjects = std::iter::once(certificate).chain(chain.iter());
        let issuers = chain.iter();
        for (subject, issuer) in subjects.zip(issuers) {
            let revoked = self.revocations.iter().any(|crl| {
                crl.issuer.der() == issuer.der()
                    && crl.serials.iter().any(|serial| serial == subject.serial())
            });
            if revoked {
                return Err(IdentityError::Revoked {
                    serial: hex::encode(subject.serial()),
                });
            }
        }
        Ok(())
    }

    /// Parses a PEM CRL and attributes it to the CA of this MSP that signed it.
    fn parse_crl(&self, pem: &[u8]) -> Result<Revocations, String> {
        let (_, block) =
            x509_parser::pem::parse_x509_pem(pem).map_err(|e| format!("malformed PEM: {e}"))?;
        let (_, crl) = CertificateRevocationList::from_der(&block.contents)
            .map_err(|e| format!("malformed CRL: {e}"))?;
        let signature = crate::crypto::normalize_low_s(&crl.signature_value.data)
            .map_err(|e| format!("CRL signature: {e}"))?;
        let issuer = self
            .roots
            .iter()
            .chain(self.intermediates.iter())
            .find(|ca| {
                ca.subject() == crl.issuer().as_raw()
                    && crate::crypto::verify(
                        ca.public_key(),
                        crl.tbs_cert_list.as_ref(),
                        &signature,
                    )
                    .is_ok()
            })
            .ok_or("CRL is not signed by a CA of this MSP")?;
        Ok(Revocations {
            issuer: issuer.clone(),
            serials: crl
                .iter_revoked_certificates()
                .map(|revoked| revoked.raw_serial().to_vec())
                .collect(),
        })
    }

    fn parse_node_ous(&self, config: &FabricNodeOUs) -> Result<NodeOus, MspError> {
        let parse = |field: &str, ou: &Option<FabricOuIdentifier>| {
            ou.as_ref()
                .map(|ou| self.parse_ou_identifier(field, ou))
                .transpose()
        };
        Ok(NodeOus {
            client: parse(
                "fabric_node_ous.client_ou_identifier",
                &config.client_ou_identifier,
            )?,
            peer: parse(
                "fabric_node_ous.peer_ou_identifier",
                &config.peer_ou_identifier,
            )?,
            admin: parse(
                "fabric_node_ous.admin_ou_identifier",
                &config.admin_ou_identifier,
            )?,
            orderer: parse(
                "fabric_node_ous.orderer_ou_identifier",
                &config.orderer_ou_identifier,
            )?,
        })
    }

    /// An OU identifier's certificate pins it to that CA: its certifiers id
    /// is the hash of the CA's own chain (the CA first).
    fn parse_ou_identifier(
        &self,
        field: &str,
        ou: &FabricOuIdentifier,
    ) -> Result<OuIdentifier, MspError> {
        let certifiers_id = if ou.certificate.is_empty() {
            Vec::new()
        } else {
            let error = |reason: String| MspError::Certificate {
                origin: format!("MSP {}: {field}.certificate", self.id),
                reason,
            };
            let ca = Certificate::from_pem(&ou.certificate).map_err(|e| error(e.to_string()))?;
            let mut chain = vec![ca.clone()];
            if !self.roots.contains(&ca) {
                chain.extend(self.chain_of(&ca).map_err(|e| error(e.to_string()))?);
            }
            certifiers_id(&chain)
        };
        Ok(OuIdentifier {
            name: ou.organizational_unit_identifier.clone(),
            certifiers_id,
        })
    }
}

impl OuIdentifier {
    fn matches(&self, certificate: &Certificate, certifiers_id: &[u8]) -> bool {
        (self.certifiers_id.is_empty() || self.certifiers_id == certifiers_id)
            && certificate.organizational_units().contains(&self.name)
    }
}

impl NodeOus {
    /// The identity's role: exactly one of the configured NodeOUs must match.
    fn classify(
        &self,
        certificate: &Certificate,
        certifiers_id: &[u8],
    ) -> Result<NodeRole, IdentityError> {
        let candidates = [
            (NodeRole::Client, &self.client),
            (NodeRole::Peer, &self.peer),
            (NodeRole::Admin, &self.admin),
            (NodeRole::Orderer, &self.orderer),
        ];
        let mut matched = candidates.iter().filter_map(|(role, ou)| {
            ou.as_ref()
                .filter(|ou| ou.matches(certificate, certifiers_id))
                .map(|_| *role)
        });
        match (matched.next(), matched.next()) {
            (Some(role), None) => Ok(role),
            (None, _) => Err(IdentityError::NodeOu(format!(
                "certificate OUs {:?} include none of the MSP's client, peer, admin or orderer OUs",
                certificate.organizational_units()
            ))),
            (Some(_), Some(_)) => Err(IdentityError::NodeOu(
                "certificate carries more than one NodeOU role".to_owned(),
            )),
        }
    }
}

/// Fabric's certifiers identifier: SHA-256 over the DER of a chain.
fn certifiers_id(chain: &[Certificate]) -> Vec<u8> {
    let mut hasher = Sha256::new();
    for certificate in chain {
        hasher.update(certificate.der());
    }
    hasher.finalize().to_vec()
}
