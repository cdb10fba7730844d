//! Unit tests of MSP validation, signatures, the signer and the cache, on
//! real certificates from [`crate::testing`].

use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use weft_protos::msp::SerializedIdentity;

use crate::testing::{IssueOptions, TestOrg};
use crate::{IdentityError, MspError, MspManager, NodeRole, SignatureError, Signer, crypto, now};

const RSA_CERT: &str = include_str!("../testdata/rsa-cert.pem");
const RSA_KEY: &str = include_str!("../testdata/rsa-key.pem");

fn serialize(msp_id: &str, pem: &str) -> Bytes {
    SerializedIdentity {
        mspid: msp_id.to_owned(),
        id_bytes: Bytes::from(pem.to_owned()),
    }
    .encode_to_vec()
    .into()
}

#[test]
fn every_node_role_validates_with_its_role() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    for role in [
        NodeRole::Client,
        NodeRole::Peer,
        NodeRole::Admin,
        NodeRole::Orderer,
    ] {
        let signer = org.signer(role);
        let identity = manager
            .deserialize(signer.serialized_identity(), now())
            .unwrap();
        assert_eq!(identity.msp_id(), "Org1MSP");
        assert_eq!(identity.node_role(), Some(role));
        assert_eq!(identity.is_admin(), role == NodeRole::Admin);
    }
}

#[test]
fn signatures_from_the_signer_verify_and_are_low_s() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let signer = org.signer(NodeRole::Client);
    let identity = manager
        .deserialize(signer.serialized_identity(), now())
        .unwrap();
    // ECDSA nonces are random, so about half of raw signatures are high-S;
    // forty in a row must all come out low-S and verify.
    for round in 0..40u8 {
        let message = [round; 100];
        let signature = signer.sign(&message).unwrap();
        assert_eq!(crypto::has_low_s(&signature), Ok(true));
        identity.verify(&message, &signature).unwrap();
        assert_eq!(
            identity.verify(b"other message", &signature),
            Err(SignatureError::Invalid)
        );
    }
}

/// A cached identity's key earns a verification table after
/// [`crypto::TABLE_AFTER_USES`] verifications; its answers stay the same
/// before and after, for genuine, altered, high-S and malformed signatures.
#[test]
fn a_frequent_key_answers_the_same_with_its_table() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let signer = org.signer(NodeRole::Peer);
    let other = org.signer(NodeRole::Client);
    let identity = manager
        .deserialize(signer.serialized_identity(), now())
        .unwrap();
    assert!(!identity.key.has_table());
    for round in 0..(2 * crypto::TABLE_AFTER_USES) {
        let message = round.to_be_bytes();
        let signature = signer.sign(&message).unwrap();
        assert_eq!(
            identity.verify(&message, &signature),
            Ok(()),
            "round {round}"
        );
        let mut altered = signature.clone();
        let last = altered.len() - 1;
        altered[last] ^= 0x40;
        assert_eq!(
            identity.verify(&message, &altered),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            identity.verify(&message, &flip_s(&signature)),
            Err(SignatureError::HighS)
        );
        assert_eq!(
            identity.verify(&message, &other.sign(&message).unwrap()),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            identity.verify(&message, &signature[1..]),
            Err(SignatureError::Malformed)
        );
    }
    // The cache hands out the same key, table and all.
    let again = manager
        .deserialize(signer.serialized_identity(), now())
        .unwrap();
    assert!(identity.key.has_table() && again.key.has_table());
    // A manager of another channel (or a new config) finds the table on
    // the identity's first verification.
    let other_channel = MspManager::new([org.msp()]);
    let fresh = other_channel
        .deserialize(signer.serialized_identity(), now())
        .unwrap();
    assert!(!fresh.key.has_table());
    let signature = signer.sign(b"first").unwrap();
    assert_eq!(fresh.verify(b"first", &signature), Ok(()));
    assert!(fresh.key.has_table());
    assert_eq!(
        fresh.verify(b"second", &signature),
        Err(SignatureError::Invalid)
    );
}

#[test]
fn high_s_signatures_are_rejected() {
    let org = TestOrg::new("Org1MSP");
    let signer = org.signer(NodeRole::Client);
    let message = b"payload";
    let low = signer.sign(message).unwrap();
    let high = flip_s(&low);
    assert_eq!(crypto::has_low_s(&high), Ok(false));
    let point = signer.certificate().public_key();
    assert_eq!(crypto::verify(point, message, &low), Ok(()));
    assert_eq!(
        crypto::verify(point, message, &high),
        Err(SignatureError::HighS)
    );
}

#[test]
fn expired_and_not_yet_valid_certificates_are_rejected() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let expired = org.issue(
        "old",
        &["client"],
        IssueOptions {
            validity_years: Some((2020, 2021)),
            ..IssueOptions::default()
        },
    );
    let error = manager
        .deserialize(&serialize("Org1MSP", &expired.certificate_pem), now())
        .unwrap_err();
    assert!(matches!(error, IdentityError::Expired { .. }), "{error}");

    let future = org.issue(
        "future",
        &["client"],
        IssueOptions {
            validity_years: Some((2090, 2095)),
            ..IssueOptions::default()
        },
    );
    let serialized = serialize("Org1MSP", &future.certificate_pem);
    let error = manager.deserialize(&serialized, now()).unwrap_err();
    assert!(
        matches!(error, IdentityError::NotYetValid { .. }),
        "{error}"
    );
    // "Not yet valid" is not cached: the same identity is fine later on.
    let in_2091 = 3_820_000_000;
    assert!(manager.deserialize(&serialized, in_2091).is_ok());
}

#[test]
fn an_identity_expires_with_its_certificate_to_the_second() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let not_after = now() + 3_600;
    let hour = org.issue(
        "an-hour",
        &["client"],
        IssueOptions {
            not_after: Some(not_after),
            ..IssueOptions::default()
        },
    );
    let identity = manager
        .deserialize(&serialize("Org1MSP", &hour.certificate_pem), now())
        .unwrap();
    assert_eq!(identity.expires_at(), not_after);
    assert!(identity.check_validity(not_after).is_ok());
    assert!(identity.check_validity(not_after + 1).is_err());
}

#[test]
fn cached_identities_are_rechecked_for_expiry() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let short = org.issue(
        "short",
        &["client"],
        IssueOptions {
            validity_years: Some((2020, 2030)),
            ..IssueOptions::default()
        },
    );
    let serialized = serialize("Org1MSP", &short.certificate_pem);
    let in_2025 = 1_750_000_000;
    let in_2031 = 1_940_000_000;
    assert!(manager.deserialize(&serialized, in_2025).is_ok());
    let error = manager.deserialize(&serialized, in_2031).unwrap_err();
    assert!(matches!(error, IdentityError::Expired { .. }), "{error}");
    assert_eq!(manager.cache_stats().hits, 1);
}

#[test]
fn identities_from_a_foreign_ca_are_rejected() {
    let org1 = TestOrg::new("Org1MSP");
    let impostor = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org1.msp()]);
    let signer = impostor.signer(NodeRole::Client);
    let error = manager
        .deserialize(signer.serialized_identity(), now())
        .unwrap_err();
    assert_eq!(error, IdentityError::UntrustedIssuer("Org1MSP".to_owned()));
}

#[test]
fn identities_under_the_wrong_or_an_unknown_msp_id_are_rejected() {
    let org1 = TestOrg::new("Org1MSP");
    let org2 = TestOrg::new("Org2MSP");
    let manager = MspManager::new([org1.msp(), org2.msp()]);
    let org1_user = org1.identity(NodeRole::Client);
    let claimed_as_org2 = serialize("Org2MSP", &org1_user.certificate_pem);
    assert_eq!(
        manager.deserialize(&claimed_as_org2, now()).unwrap_err(),
        IdentityError::UntrustedIssuer("Org2MSP".to_owned())
    );
    let unknown = serialize("Org9MSP", &org1_user.certificate_pem);
    assert_eq!(
        manager.deserialize(&unknown, now()).unwrap_err(),
        IdentityError::UnknownMsp("Org9MSP".to_owned())
    );
}

#[test]
fn revoked_certificates_are_rejected() {
    let org = TestOrg::new("Org1MSP");
    let revoked = org.identity(NodeRole::Client);
    let kept = org.identity(NodeRole::Client);
    let mut config = org.msp_config();
    config.revocation_list = vec![Bytes::from(org.crl(&[revoked.serial]))];
    let manager = MspManager::new([crate::Msp::from_config(config).unwrap()]);
    let error = manager
        .deserialize(&serialize("Org1MSP", &revoked.certificate_pem), now())
        .unwrap_err();
    assert!(matches!(error, IdentityError::Revoked { .. }), "{error}");
    assert!(
        manager
            .deserialize(&serialize("Org1MSP", &kept.certificate_pem), now())
            .is_ok()
    );
}

#[test]
fn a_crl_from_another_ca_is_refused_when_building_the_msp() {
    let org = TestOrg::new("Org1MSP");
    let other = TestOrg::new("OtherMSP");
    let mut config = org.msp_config();
    config.revocation_list = vec![Bytes::from(other.crl(&[5]))];
    let error = crate::Msp::from_config(config).unwrap_err();
    assert!(error.to_string().contains("revocation_list[0]"), "{error}");
}

#[test]
fn node_ou_rules_are_enforced() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let none = org.issue("no-ou", &[], IssueOptions::default());
    let error = manager
        .deserialize(&serialize("Org1MSP", &none.certificate_pem), now())
        .unwrap_err();
    assert!(matches!(error, IdentityError::NodeOu(_)), "{error}");
    // An OU outside the NodeOU set gives no role either.
    let other = org.issue("other-ou", &["accounting"], IssueOptions::default());
    let error = manager
        .deserialize(&serialize("Org1MSP", &other.certificate_pem), now())
        .unwrap_err();
    assert!(matches!(error, IdentityError::NodeOu(_)), "{error}");
    // (rcgen writes one value per attribute type, so the two-role case is
    // not constructible here.)
}

#[test]
fn without_node_ous_identities_have_no_role_and_admins_come_from_the_list() {
    let org = TestOrg::without_node_ous("Org1MSP");
    let admin = org.issue("admin", &[], IssueOptions::default());
    let user = org.issue("user", &[], IssueOptions::default());
    let mut config = org.msp_config();
    config.admins = vec![Bytes::from(admin.certificate_pem.clone())];
    let manager = MspManager::new([crate::Msp::from_config(config).unwrap()]);
    let admin = manager
        .deserialize(&serialize("Org1MSP", &admin.certificate_pem), now())
        .unwrap();
    let user = manager
        .deserialize(&serialize("Org1MSP", &user.certificate_pem), now())
        .unwrap();
    assert!(admin.is_admin());
    assert!(!user.is_admin());
    assert_eq!(user.node_role(), None);
}

#[test]
fn a_ca_certificate_cannot_be_an_identity() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let ca = serialize("Org1MSP", org.ca_pem());
    assert_eq!(
        manager.deserialize(&ca, now()).unwrap_err(),
        IdentityError::IsCertificateAuthority
    );
    let sub_ca = org.issue(
        "sub-ca",
        &["client"],
        IssueOptions {
            is_ca: true,
            ..IssueOptions::default()
        },
    );
    let error = manager
        .deserialize(&serialize("Org1MSP", &sub_ca.certificate_pem), now())
        .unwrap_err();
    assert_eq!(error, IdentityError::IsCertificateAuthority);
}

#[test]
fn rsa_and_p384_keys_are_rejected_with_a_clear_error() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let error = manager
        .deserialize(&serialize("Org1MSP", RSA_CERT), now())
        .unwrap_err();
    assert!(matches!(error, IdentityError::UnsupportedKey(_)), "{error}");

    let error = Signer::from_pem(
        "Org1MSP",
        RSA_CERT.as_bytes(),
        RSA_KEY.as_bytes(),
        "rsa-key.pem",
    )
    .unwrap_err();
    assert!(error.to_string().contains("rsa-key.pem"), "{error}");

    let p384_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let p384_cert = rcgen::CertificateParams::new(vec!["x".to_owned()])
        .unwrap()
        .self_signed(&p384_key)
        .unwrap();
    let error = manager
        .deserialize(&serialize("Org1MSP", &p384_cert.pem()), now())
        .unwrap_err();
    assert!(error.to_string().contains("EC curve"), "{error}");
    let user = org.identity(NodeRole::Client);
    let error = Signer::from_pem(
        "Org1MSP",
        user.certificate_pem.as_bytes(),
        p384_key.serialize_pem().as_bytes(),
        "p384.pem",
    )
    .unwrap_err();
    assert!(error.to_string().contains("P-384"), "{error}");
}

#[test]
fn a_key_that_does_not_match_the_certificate_is_rejected() {
    let org = TestOrg::new("Org1MSP");
    let one = org.identity(NodeRole::Client);
    let other = org.identity(NodeRole::Client);
    let error = Signer::from_pem(
        "Org1MSP",
        one.certificate_pem.as_bytes(),
        other.key_pem.as_bytes(),
        "k",
    )
    .unwrap_err();
    assert!(error.to_string().contains("does not match"), "{error}");
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::new([org.msp()]);
    let cases: [&[u8]; 4] = [
        b"\xff\xff\xff",
        &serialize("Org1MSP", "not a pem"),
        &serialize(
            "Org1MSP",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        ),
        &serialize(
            "Org1MSP",
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        ),
    ];
    for case in cases {
        let error = manager
            .deserialize(&Bytes::copy_from_slice(case), now())
            .unwrap_err();
        assert!(
            matches!(
                error,
                IdentityError::Malformed(_) | IdentityError::BadCertificate(_)
            ),
            "{error}"
        );
    }
    let error = Signer::from_pem("Org1MSP", b"garbage", b"garbage", "keyfile").unwrap_err();
    assert!(matches!(error, MspError::Certificate { .. }), "{error}");
}

#[test]
fn the_cache_counts_hits_and_misses_and_dies_with_its_manager() {
    let org = TestOrg::new("Org1MSP");
    let signer = org.signer(NodeRole::Peer);
    let manager = MspManager::new([org.msp()]);
    for _ in 0..5 {
        manager
            .deserialize(signer.serialized_identity(), now())
            .unwrap();
    }
    let stats = manager.cache_stats();
    assert_eq!((stats.misses, stats.hits, stats.entries), (1, 4, 1));

    // A config change (here: the org's CA is replaced) builds a new manager,
    // whose empty cache cannot answer from the old configuration.
    let replacement = TestOrg::new("Org1MSP");
    let manager = MspManager::new([replacement.msp()]);
    assert!(
        manager
            .deserialize(signer.serialized_identity(), now())
            .is_err()
    );
    assert_eq!(manager.cache_stats().hits, 0);
}

#[test]
fn a_cached_identity_does_not_keep_the_buffer_it_came_in() {
    let org = TestOrg::new("Org1MSP");
    let signer = org.signer(NodeRole::Client);
    let manager = MspManager::new([org.msp()]);
    let serialized = signer.serialized_identity();
    let mut block = b"the block around it|".to_vec();
    let start = block.len();
    block.extend_from_slice(serialized);
    let block: Arc<[u8]> = Arc::from(block);
    let buffer = Arc::downgrade(&block);
    let arrived = Bytes::from_owner(block);
    let identity = manager
        .deserialize(&arrived.slice(start..start + serialized.len()), now())
        .unwrap();
    drop(arrived);

    assert_eq!(buffer.strong_count(), 0, "the arrival buffer is still held");
    assert_eq!(identity.msp_id(), "Org1MSP");
    manager.deserialize(serialized, now()).unwrap();
    let stats = manager.cache_stats();
    assert_eq!((stats.misses, stats.hits), (1, 1));
}

#[test]
fn the_cache_is_bounded() {
    let org = TestOrg::new("Org1MSP");
    let manager = MspManager::with_cache_capacity([org.msp()], 16);
    for _ in 0..40 {
        let signer = org.signer(NodeRole::Client);
        manager
            .deserialize(signer.serialized_identity(), now())
            .unwrap();
    }
    assert!(
        manager.cache_stats().entries <= 16,
        "{:?}",
        manager.cache_stats()
    );
}

#[test]
fn msp_folders_load_and_bad_folders_name_the_file() {
    let org = TestOrg::new("Org1MSP");
    let user = org.identity(NodeRole::Client);
    let dir = tempfile::tempdir().unwrap();
    let msp = dir.path();
    for sub in ["cacerts", "signcerts", "keystore"] {
        std::fs::create_dir(msp.join(sub)).unwrap();
    }
    std::fs::write(msp.join("cacerts/ca.pem"), org.ca_pem()).unwrap();
    std::fs::write(msp.join("signcerts/cert.pem"), &user.certificate_pem).unwrap();
    std::fs::write(msp.join("keystore/priv_sk"), &user.key_pem).unwrap();
    std::fs::write(
        msp.join("config.yaml"),
        "NodeOUs:\n  Enable: true\n  ClientOUIdentifier:\n    Certificate: cacerts/ca.pem\n    OrganizationalUnitIdentifier: client\n",
    )
    .unwrap();
    let local = crate::folder::load(msp, "Org1MSP").unwrap();
    let signer = local.signer.as_ref().unwrap();
    let manager = MspManager::new([local.msp().unwrap()]);
    let identity = manager
        .deserialize(signer.serialized_identity(), now())
        .unwrap();
    assert_eq!(identity.node_role(), Some(NodeRole::Client));

    std::fs::write(
        msp.join("config.yaml"),
        "NodeOUs:\n  Enable: true\n  ClientOUIdentifier:\n    Certificate: cacerts/missing.pem\n    OrganizationalUnitIdentifier: client\n",
    )
    .unwrap();
    let error = crate::folder::load(msp, "Org1MSP").unwrap_err().to_string();
    assert!(
        error.contains("config.yaml") && error.contains("NodeOUs.ClientOUIdentifier.Certificate"),
        "{error}"
    );

    std::fs::write(msp.join("config.yaml"), "NodeOUs: [unclosed").unwrap();
    let error = crate::folder::load(msp, "Org1MSP").unwrap_err().to_string();
    assert!(
        error.contains("config.yaml") && error.contains("line 1"),
        "{error}"
    );

    std::fs::remove_file(msp.join("config.yaml")).unwrap();
    std::fs::write(
        msp.join("cacerts/broken.pem"),
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let error = crate::folder::load(msp, "Org1MSP").unwrap_err().to_string();
    assert!(error.contains("broken.pem"), "{error}");
    std::fs::remove_file(msp.join("cacerts/broken.pem")).unwrap();

    std::fs::write(msp.join("keystore/priv_sk"), RSA_KEY).unwrap();
    let error = crate::folder::load(msp, "Org1MSP").unwrap_err().to_string();
    assert!(
        error.contains("priv_sk") && error.contains("RSA"),
        "{error}"
    );
}

/// Rewrites a DER signature's S as n − S (the high-S twin).
fn flip_s(signature: &[u8]) -> Vec<u8> {
    // SEQUENCE { INTEGER r, INTEGER s } with short lengths.
    let r_len = usize::from(signature[3]);
    let s_start = 4 + r_len + 2;
    let s: Vec<u8> = signature[s_start..]
        .iter()
        .copied()
        .skip_while(|&b| b == 0)
        .collect();
    let order = [
        0xffu8, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63,
        0x25, 0x51,
    ];
    let mut padded = [0u8; 32];
    padded[32 - s.len()..].copy_from_slice(&s);
    let mut high = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let mut digit = i16::from(order[i]) - i16::from(padded[i]) - borrow;
        borrow = i16::from(digit < 0);
        if digit < 0 {
            digit += 256;
        }
        high[i] = digit as u8;
    }
    let r = &signature[4..4 + r_len];
    let mut s_der = vec![0x02, 33, 0];
    s_der.extend_from_slice(&high);
    let mut out = vec![0x30, (2 + r.len() + s_der.len()) as u8, 0x02, r_len as u8];
    out.extend_from_slice(r);
    out.extend_from_slice(&s_der);
    out
}
