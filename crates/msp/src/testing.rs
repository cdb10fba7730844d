//! Real X.509 organisations for tests and benchmarks.
//!
//! A [`TestOrg`] is a P-256 certificate authority with NodeOUs enabled (or
//! not) that issues end-entity identities with real keys, so that tests of
//! the MSP, policies, validation and endorsement run on genuine certificates
//! and ECDSA signatures rather than fakes. Available with the `testing`
//! feature; nothing here is compiled into the node.

#![allow(clippy::expect_used, clippy::missing_panics_doc)]

use bytes::Bytes;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType, IsCa, Issuer,
    KeyIdMethod, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, RevokedCertParams, SerialNumber,
    date_time_ymd,
};
use weft_protos::msp::{FabricMspConfig, FabricNodeOUs, FabricOuIdentifier};

use crate::{Msp, NodeRole, Signer, UnixTime};

/// A test certificate authority for one MSP.
pub struct TestOrg {
    msp_id: String,
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    node_ous: bool,
    next_serial: std::cell::Cell<u64>,
}

impl std::fmt::Debug for TestOrg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestOrg")
            .field("msp_id", &self.msp_id)
            .finish_non_exhaustive()
    }
}

/// An identity issued by a [`TestOrg`]: PEM certificate and PKCS#8 key.
#[derive(Debug, Clone)]
pub struct TestIdentity {
    pub msp_id: String,
    pub certificate_pem: String,
    pub key_pem: String,
    pub serial: u64,
}

impl TestIdentity {
    /// A signer for this identity.
    pub fn signer(&self) -> Signer {
        Signer::from_pem(
            &self.msp_id,
            self.certificate_pem.as_bytes(),
            self.key_pem.as_bytes(),
            "test identity",
        )
        .expect("test identity key matches its certificate")
    }
}

/// How a test certificate deviates from a normal one.
#[derive(Debug, Clone, Copy, Default)]
pub struct IssueOptions {
    /// Validity as (not-before year, not-after year); default 2020–2099.
    pub validity_years: Option<(i32, i32)>,
    /// A not-after time to the second, overriding the year above: a
    /// certificate that expires while a test runs.
    pub not_after: Option<UnixTime>,
    /// Issue a CA certificate instead of an end-entity one.
    pub is_ca: bool,
}

impl TestOrg {
    /// A new organisation with NodeOUs enabled.
    pub fn new(msp_id: &str) -> Self {
        Self::build(msp_id, true)
    }

    /// A new organisation without NodeOUs (roles other than member and admin
    /// cannot be told apart).
    pub fn without_node_ous(msp_id: &str) -> Self {
        Self::build(msp_id, false)
    }

    /// The organisation whose CA is the certificate and PKCS#8 key in
    /// `ca_certificate_pem` and `ca_key_pem` (such as `weft crypto
    /// generate` writes in `ca/`), with NodeOUs enabled: to issue
    /// identities a real network's MSP accepts, or an expired, a
    /// not-yet-valid or a revoked one. Serial numbers start at
    /// `first_serial`, apart from those the CA issued before.
    pub fn from_ca(
        msp_id: &str,
        ca_certificate_pem: &str,
        ca_key_pem: &str,
        first_serial: u64,
    ) -> Self {
        let ca_key = KeyPair::from_pem(ca_key_pem).expect("a PKCS#8 CA key");
        let issuer =
            Issuer::from_ca_cert_pem(ca_certificate_pem, ca_key).expect("a CA certificate");
        Self {
            msp_id: msp_id.to_owned(),
            issuer,
            ca_pem: ca_certificate_pem.to_owned(),
            node_ous: true,
            next_serial: std::cell::Cell::new(first_serial),
        }
    }

    fn build(msp_id: &str, node_ous: bool) -> Self {
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("P-256 key generation");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("no SANs");
        ca_params
            .distinguished_name
            .push(DnType::OrganizationName, msp_id);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("ca.{msp_id}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        ca_params.key_identifier_method = KeyIdMethod::Sha256;
        ca_params.not_before = date_time_ymd(2020, 1, 1);
        ca_params.not_after = date_time_ymd(2099, 1, 1);
        ca_params.serial_number = Some(SerialNumber::from(1u64));
        let ca_pem = ca_params
            .self_signed(&ca_key)
            .expect("self-signed CA")
            .pem();
        Self {
            msp_id: msp_id.to_owned(),
            issuer: Issuer::new(ca_params, ca_key),
            ca_pem,
            node_ous,
            next_serial: std::cell::Cell::new(2),
        }
    }

    pub fn msp_id(&self) -> &str {
        &self.msp_id
    }

    /// The CA certificate in PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The organisation's MSP configuration, as a channel config carries it.
    pub fn msp_config(&self) -> FabricMspConfig {
        let ou = |name: &str| {
            Some(FabricOuIdentifier {
                certificate: Bytes::from(self.ca_pem.clone()),
                organizational_unit_identifier: name.to_owned(),
            })
        };
        FabricMspConfig {
            name: self.msp_id.clone(),
            root_certs: vec![Bytes::from(self.ca_pem.clone())],
            fabric_node_ous: self.node_ous.then(|| FabricNodeOUs {
                enable: true,
                client_ou_identifier: ou("client"),
                peer_ou_identifier: ou("peer"),
                admin_ou_identifier: ou("admin"),
                orderer_ou_identifier: ou("orderer"),
            }),
            ..FabricMspConfig::default()
        }
    }

    /// The organisation's MSP.
    pub fn msp(&self) -> Msp {
        Msp::from_config(self.msp_config()).expect("test MSP config is valid")
    }

    /// Issues an identity with the NodeOU of `role`.
    pub fn identity(&self, role: NodeRole) -> TestIdentity {
        let ou = match role {
            NodeRole::Client => "client",
            NodeRole::Peer => "peer",
            NodeRole::Admin => "admin",
            NodeRole::Orderer => "orderer",
        };
        self.issue(
            &format!("{ou}{}.{}", self.next_serial.get(), self.msp_id),
            &[ou],
            IssueOptions::default(),
        )
    }

    /// Issues a signer with the NodeOU of `role`.
    pub fn signer(&self, role: NodeRole) -> Signer {
        self.identity(role).signer()
    }

    /// Issues a certificate with the given common name and OUs.
    pub fn issue(&self, common_name: &str, ous: &[&str], options: IssueOptions) -> TestIdentity {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("P-256 key generation");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no SANs");
        params
            .distinguished_name
            .push(DnType::OrganizationName, self.msp_id.as_str());
        for ou in ous {
            params
                .distinguished_name
                .push(DnType::OrganizationalUnitName, *ou);
        }
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let (from, to) = options.validity_years.unwrap_or((2020, 2099));
        params.not_before = date_time_ymd(from, 1, 1);
        params.not_after = date_time_ymd(to, 1, 1);
        if let Some(not_after) = options.not_after {
            let since_epoch = std::time::Duration::from_secs(u64::try_from(not_after).unwrap_or(0));
            params.not_after = date_time_ymd(1970, 1, 1) + since_epoch;
        }
        params.is_ca = if options.is_ca {
            IsCa::Ca(BasicConstraints::Unconstrained)
        } else {
            IsCa::ExplicitNoCa
        };
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        let serial = self.next_serial.get();
        self.next_serial.set(serial + 1);
        params.serial_number = Some(SerialNumber::from(serial));
        let certificate = params
            .signed_by(&key, &self.issuer)
            .expect("CA signs the certificate");
        TestIdentity {
            msp_id: self.msp_id.clone(),
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
            serial,
        }
    }

    /// A PEM CRL, signed by this CA, revoking the given serial numbers.
    pub fn crl(&self, revoked_serials: &[u64]) -> String {
        let params = CertificateRevocationListParams {
            this_update: date_time_ymd(2021, 1, 1),
            next_update: date_time_ymd(2099, 1, 1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: revoked_serials
                .iter()
                .map(|&serial| RevokedCertParams {
                    serial_number: SerialNumber::from(serial),
                    revocation_time: date_time_ymd(2021, 1, 1),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        params
            .signed_by(&self.issuer)
            .expect("CA signs the CRL")
            .pem()
            .expect("CRL PEM")
    }
}

/// The high-S twin of a DER ECDSA P-256 signature made by a [`Signer`]:
/// (r, n − s), which verifies mathematically but which Fabric (and weft)
/// refuse, since accepting both forms would let anyone alter a signed
/// transaction's bytes.
pub fn high_s_twin(signature: &[u8]) -> Vec<u8> {
    crate::crypto::mirrored_s(signature).expect("a DER ECDSA signature")
}
