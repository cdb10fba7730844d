//! Policy evaluation on real identities and signatures.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message;
use weft_msp::testing::TestOrg;
use weft_msp::{MspManager, NodeRole, Signer, now};
use weft_protos::common::implicit_meta_policy::Rule as MetaRule;
use weft_protos::common::policy::PolicyType;
use weft_protos::common::{ConfigGroup, ConfigPolicy, ImplicitMetaPolicy};

use crate::{PeerOf, PolicyError, PolicyTree, SignaturePolicy, SignedData, dsl};

const DATA: &[u8] = b"proposal response payload";

struct Network {
    orgs: Vec<TestOrg>,
    manager: MspManager,
}

impl Network {
    fn new(count: usize) -> Self {
        let orgs: Vec<TestOrg> = (1..=count)
            .map(|i| TestOrg::new(&format!("Org{i}MSP")))
            .collect();
        let manager = MspManager::new(orgs.iter().map(TestOrg::msp));
        Self { orgs, manager }
    }

    fn signer(&self, org: usize, role: NodeRole) -> Signer {
        self.orgs[org].signer(role)
    }
}

fn signed(signer: &Signer) -> SignedData {
    SignedData {
        data: Bytes::from_static(DATA),
        identity: signer.serialized_identity().clone(),
        signature: signer.sign(DATA).unwrap().into(),
    }
}

fn policy(expression: &str) -> SignaturePolicy {
    SignaturePolicy::compile(expression, &dsl::parse(expression).unwrap()).unwrap()
}

/// Thakkar et al. 2018, Table III: four AND/OR policies and four NOutOf
/// policies over organisations a–d, with how many organisations each needs.
fn table_iii() -> Vec<(&'static str, usize)> {
    vec![
        (
            "OR('Org1MSP.peer', 'Org2MSP.peer', 'Org3MSP.peer', 'Org4MSP.peer')",
            1,
        ),
        (
            "OR(AND('Org1MSP.peer', 'Org2MSP.peer'), AND('Org1MSP.peer', 'Org3MSP.peer'), \
             AND('Org1MSP.peer', 'Org4MSP.peer'), AND('Org2MSP.peer', 'Org3MSP.peer'), \
             AND('Org2MSP.peer', 'Org4MSP.peer'), AND('Org3MSP.peer', 'Org4MSP.peer'))",
            2,
        ),
        (
            "OR(AND('Org1MSP.peer', 'Org2MSP.peer', 'Org3MSP.peer'), \
             AND('Org1MSP.peer', 'Org2MSP.peer', 'Org4MSP.peer'), \
             AND('Org2MSP.peer', 'Org3MSP.peer', 'Org4MSP.peer'), \
             AND('Org1MSP.peer', 'Org3MSP.peer', 'Org4MSP.peer'))",
            3,
        ),
        (
            "AND('Org1MSP.peer', 'Org2MSP.peer', 'Org3MSP.peer', 'Org4MSP.peer')",
            4,
        ),
        (
            "OutOf(1, 'Org1MSP.peer', 'Org2MSP.peer', 'Org3MSP.peer', 'Org4MSP.peer')",
            1,
        ),
        (
            "OutOf(2, 'Org1MSP.peer', 'Org2MSP.peer', 'Org3MSP.peer', 'Org4MSP.peer')",
            2,
        ),
        (
            "OutOf(3, 'Org1MSP.peer', 'Org2MSP.peer', 'Org3MSP.peer', 'Org4MSP.peer')",
            3,
        ),
        (
            "OutOf(4, 'Org1MSP.peer', 'Org2MSP.peer', 'Org3MSP.peer', 'Org4MSP.peer')",
            4,
        ),
    ]
}

#[test]
fn table_iii_policies_accept_exactly_enough_endorsements() {
    let network = Network::new(4);
    let peers: Vec<Signer> = (0..4)
        .map(|org| network.signer(org, NodeRole::Peer))
        .collect();
    for (expression, required) in table_iii() {
        let policy = policy(expression);
        // Every subset of organisations: satisfied iff it has enough of them.
        for mask in 0u32..16 {
            let endorsements: Vec<SignedData> = (0..4)
                .filter(|org| mask & (1 << org) != 0)
                .map(|org| signed(&peers[org]))
                .collect();
            let outcome = policy.evaluate(&endorsements, &network.manager, now());
            let enough = endorsements.len() >= required;
            assert_eq!(
                outcome.is_ok(),
                enough,
                "{expression} with orgs {mask:04b}: {outcome:?}"
            );
        }
    }
}

#[test]
fn table_iii_policies_reject_wrong_roles_bad_signatures_and_repeats() {
    let network = Network::new(4);
    for (expression, required) in table_iii() {
        let policy = policy(expression);
        let mut endorsements: Vec<SignedData> = (0..required)
            .map(|org| signed(&network.signer(org, NodeRole::Peer)))
            .collect();
        assert!(
            policy
                .evaluate(&endorsements, &network.manager, now())
                .is_ok(),
            "{expression}"
        );

        // A client of the last organisation does not count as its peer.
        let mut wrong_role = endorsements.clone();
        wrong_role[required - 1] = signed(&network.signer(required - 1, NodeRole::Client));
        assert!(
            policy
                .evaluate(&wrong_role, &network.manager, now())
                .is_err(),
            "{expression}"
        );

        // A signature that does not verify does not count.
        let mut bad_signature = endorsements.clone();
        bad_signature[required - 1].data = Bytes::from_static(b"something else");
        assert!(
            policy
                .evaluate(&bad_signature, &network.manager, now())
                .is_err(),
            "{expression}"
        );

        // The same peer twice counts once.
        if required >= 2 {
            let mut repeated = endorsements.clone();
            repeated[required - 1] = repeated[0].clone();
            assert!(
                policy.evaluate(&repeated, &network.manager, now()).is_err(),
                "{expression}"
            );
        }

        // Extra endorsements from outsiders do not hurt.
        let outsider = TestOrg::new("Org9MSP");
        endorsements.push(signed(&outsider.signer(NodeRole::Peer)));
        assert!(
            policy
                .evaluate(&endorsements, &network.manager, now())
                .is_ok(),
            "{expression}"
        );
    }
}

#[test]
fn an_identity_satisfies_at_most_one_principal() {
    let network = Network::new(2);
    let admin = network.signer(0, NodeRole::Admin);
    // An admin is both a member and an admin of Org1, but one signature can
    // stand for only one of the two principals.
    let policy = policy("AND('Org1MSP.member', 'Org1MSP.admin')");
    assert!(
        policy
            .evaluate(&[signed(&admin)], &network.manager, now())
            .is_err()
    );
    let member = network.signer(0, NodeRole::Client);
    assert!(
        policy
            .evaluate(&[signed(&member), signed(&admin)], &network.manager, now())
            .is_ok()
    );
}

#[test]
fn greedy_evaluation_matches_fabric() {
    // Fabric takes, for each principal in order, the first unused identity
    // that satisfies it, without backtracking. With the admin's signature
    // first, 'member' consumes the admin and 'admin' is left unsatisfied,
    // although the other assignment would satisfy both. Fabric rejects that
    // set, so weft must too, or the two would disagree on validity.
    let network = Network::new(1);
    let admin = network.signer(0, NodeRole::Admin);
    let client = network.signer(0, NodeRole::Client);
    let member_first = policy("AND('Org1MSP.member', 'Org1MSP.admin')");
    assert!(
        member_first
            .evaluate(&[signed(&client), signed(&admin)], &network.manager, now())
            .is_ok()
    );
    assert!(
        member_first
            .evaluate(&[signed(&admin), signed(&client)], &network.manager, now())
            .is_err()
    );
    // Written the other way round, the policy accepts both orders.
    let admin_first = policy("AND('Org1MSP.admin', 'Org1MSP.member')");
    assert!(
        admin_first
            .evaluate(&[signed(&admin), signed(&client)], &network.manager, now())
            .is_ok()
    );
    assert!(
        admin_first
            .evaluate(&[signed(&client), signed(&admin)], &network.manager, now())
            .is_ok()
    );
}

#[test]
fn malformed_envelopes_are_errors() {
    let envelope = dsl::parse("OR('A.member')").unwrap();
    let mut out_of_range = envelope.clone();
    out_of_range.identities.clear();
    let error = SignaturePolicy::compile("p", &out_of_range).unwrap_err();
    assert!(matches!(error, PolicyError::Malformed { .. }), "{error}");
    let error = SignaturePolicy::decode("p", b"\xff\xff").unwrap_err();
    assert!(matches!(error, PolicyError::Malformed { .. }), "{error}");
}

fn signature_config_policy(expression: &str) -> ConfigPolicy {
    ConfigPolicy {
        version: 0,
        policy: Some(weft_protos::common::Policy {
            r#type: PolicyType::Signature as i32,
            value: dsl::parse(expression).unwrap().encode_to_vec().into(),
        }),
        mod_policy: "Admins".to_owned(),
    }
}

fn implicit_config_policy(rule: MetaRule, sub_policy: &str) -> ConfigPolicy {
    ConfigPolicy {
        version: 0,
        policy: Some(weft_protos::common::Policy {
            r#type: PolicyType::ImplicitMeta as i32,
            value: ImplicitMetaPolicy {
                sub_policy: sub_policy.to_owned(),
                rule: rule as i32,
            }
            .encode_to_vec()
            .into(),
        }),
        mod_policy: "Admins".to_owned(),
    }
}

/// A channel config tree like configtxgen's: three organisations under
/// Application, with Readers/Writers/Admins, and implicit-meta policies above.
fn channel_group(orgs: &[TestOrg]) -> ConfigGroup {
    let mut application = ConfigGroup::default();
    for org in orgs {
        let id = org.msp_id();
        let group = ConfigGroup {
            policies: BTreeMap::from([
                (
                    "Readers".to_owned(),
                    signature_config_policy(&format!("OR('{id}.member')")),
                ),
                (
                    "Writers".to_owned(),
                    signature_config_policy(&format!("OR('{id}.client', '{id}.admin')")),
                ),
                (
                    "Admins".to_owned(),
                    signature_config_policy(&format!("OR('{id}.admin')")),
                ),
            ]),
            ..ConfigGroup::default()
        };
        application.groups.insert(id.to_owned(), group);
    }
    application.policies = BTreeMap::from([
        (
            "Readers".to_owned(),
            implicit_config_policy(MetaRule::Any, "Readers"),
        ),
        (
            "Writers".to_owned(),
            implicit_config_policy(MetaRule::Any, "Writers"),
        ),
        (
            "Admins".to_owned(),
            implicit_config_policy(MetaRule::Majority, "Admins"),
        ),
        (
            "Everyone".to_owned(),
            implicit_config_policy(MetaRule::All, "Readers"),
        ),
    ]);
    let mut channel = ConfigGroup::default();
    channel.groups.insert("Application".to_owned(), application);
    channel.policies = BTreeMap::from([(
        "Writers".to_owned(),
        implicit_config_policy(MetaRule::Any, "Writers"),
    )]);
    channel
}

#[test]
fn implicit_meta_policies_count_sub_groups() {
    let network = Network::new(3);
    let tree = PolicyTree::from_config(&channel_group(&network.orgs)).unwrap();
    let evaluate = |path: &str, signers: &[Signer]| {
        let set: Vec<SignedData> = signers.iter().map(signed).collect();
        tree.evaluate(path, &set, &network.manager, now())
    };
    let client1 = network.signer(0, NodeRole::Client);
    let peer1 = network.signer(0, NodeRole::Peer);
    let admins: Vec<Signer> = (0..3)
        .map(|org| network.signer(org, NodeRole::Admin))
        .collect();

    // ANY Writers: one organisation's client is enough; a peer is not a writer.
    assert!(
        evaluate(
            "/Channel/Application/Writers",
            std::slice::from_ref(&client1)
        )
        .is_ok()
    );
    assert!(evaluate("/Channel/Application/Writers", std::slice::from_ref(&peer1)).is_err());
    // Nested implicit-meta: /Channel/Writers = ANY Application/Writers.
    assert!(evaluate("/Channel/Writers", std::slice::from_ref(&client1)).is_ok());
    // MAJORITY Admins of three organisations needs two.
    assert!(evaluate("/Channel/Application/Admins", &admins[..1]).is_err());
    assert!(evaluate("/Channel/Application/Admins", &admins[..2]).is_ok());
    // ALL Readers needs a member of every organisation.
    assert!(evaluate("/Channel/Application/Everyone", &admins[..2]).is_err());
    assert!(evaluate("/Channel/Application/Everyone", &admins).is_ok());
    // Organisation-level policies are addressable too.
    assert!(evaluate("/Channel/Application/Org2MSP/Admins", &admins[1..2]).is_ok());
    assert_eq!(
        evaluate("/Channel/Application/Nope", &admins),
        Err(PolicyError::NotFound(
            "/Channel/Application/Nope".to_owned()
        ))
    );
    assert!(tree.get("/Channel/Application/Org1MSP/Readers").is_some());
    assert!(tree.get("/Other/Readers").is_none());
}

fn envelope_with(
    principal: weft_protos::common::MspPrincipal,
) -> weft_protos::common::SignaturePolicyEnvelope {
    let mut envelope = dsl::parse("OR('placeholder.member')").unwrap();
    envelope.identities = vec![principal];
    envelope
}

#[test]
fn identity_principals_match_one_certificate() {
    use weft_protos::common::MspPrincipal;
    use weft_protos::common::msp_principal::Classification;
    let network = Network::new(1);
    let chosen = network.signer(0, NodeRole::Client);
    let other = network.signer(0, NodeRole::Client);
    let principal = MspPrincipal {
        principal_classification: Classification::Identity as i32,
        principal: chosen.serialized_identity().clone(),
    };
    let policy = SignaturePolicy::compile("identity", &envelope_with(principal)).unwrap();
    assert!(
        policy
            .evaluate(&[signed(&chosen)], &network.manager, now())
            .is_ok()
    );
    assert!(
        policy
            .evaluate(&[signed(&other)], &network.manager, now())
            .is_err()
    );
}

#[test]
fn organization_unit_principals_need_the_ou_and_its_certifiers() {
    use weft_protos::common::msp_principal::Classification;
    use weft_protos::common::{MspPrincipal, OrganizationUnit};
    let network = Network::new(2);
    let peer = network.signer(0, NodeRole::Peer);
    let certifiers = network
        .manager
        .deserialize(peer.serialized_identity(), now())
        .unwrap()
        .certifiers_id()
        .to_vec();
    let principal = |msp: &str, ou: &str, certifiers: &[u8]| MspPrincipal {
        principal_classification: Classification::OrganizationUnit as i32,
        principal: OrganizationUnit {
            msp_identifier: msp.to_owned(),
            organizational_unit_identifier: ou.to_owned(),
            certifiers_identifier: Bytes::copy_from_slice(certifiers),
        }
        .encode_to_vec()
        .into(),
    };
    let satisfied = |p: MspPrincipal, signer: &Signer| {
        SignaturePolicy::compile("ou", &envelope_with(p))
            .unwrap()
            .evaluate(&[signed(signer)], &network.manager, now())
            .is_ok()
    };
    assert!(satisfied(principal("Org1MSP", "peer", &certifiers), &peer));
    assert!(!satisfied(
        principal("Org1MSP", "client", &certifiers),
        &peer
    ));
    assert!(!satisfied(
        principal("Org1MSP", "peer", b"another chain"),
        &peer
    ));
    assert!(!satisfied(principal("Org2MSP", "peer", &certifiers), &peer));
    assert!(!satisfied(
        principal("Org1MSP", "peer", &certifiers),
        &network.signer(1, NodeRole::Peer)
    ));
}

#[test]
fn peers_known_by_msp_id_satisfy_what_their_organisations_can_endorse() {
    // Goal: a gateway plans endorsements from a policy knowing only the
    // organisations' MSP IDs: a peer of an organisation stands for its
    // member and peer roles, and nothing that needs an admin, a client or
    // a particular certificate.
    let peers =
        |ids: &[&str]| -> Vec<PeerOf> { ids.iter().map(|id| PeerOf((*id).to_owned())).collect() };
    let either = policy("OR('Org1MSP.peer', 'Org2MSP.member')");
    assert!(either.is_satisfied_by(&peers(&["Org2MSP"])));
    assert!(!either.is_satisfied_by(&peers(&["Org3MSP"])));
    let both = policy("AND('Org1MSP.member', 'Org2MSP.peer')");
    assert!(!both.is_satisfied_by(&peers(&["Org1MSP"])));
    assert!(both.is_satisfied_by(&peers(&["Org2MSP", "Org1MSP"])));
    assert!(!policy("OR('Org1MSP.admin', 'Org1MSP.client')").is_satisfied_by(&peers(&["Org1MSP"])));
    // One peer counts once: two principals of one organisation need two.
    assert!(!policy("AND('Org1MSP.peer', 'Org1MSP.member')").is_satisfied_by(&peers(&["Org1MSP"])));

    // Through implicit-meta policies of a channel: MAJORITY Admins is out
    // of a peer's reach, ALL Readers needs a peer of every organisation.
    let network = Network::new(3);
    let tree = PolicyTree::from_config(&channel_group(&network.orgs)).unwrap();
    let all = peers(&["Org1MSP", "Org2MSP", "Org3MSP"]);
    assert!(
        tree.is_satisfied_by("/Channel/Application/Everyone", &all)
            .is_ok()
    );
    assert!(
        tree.is_satisfied_by("/Channel/Application/Everyone", &all[..2])
            .is_err()
    );
    assert!(
        tree.is_satisfied_by("/Channel/Application/Admins", &all)
            .is_err()
    );
}
