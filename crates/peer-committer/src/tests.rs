//! Validation on real Fabric 2.5 blocks, and on those blocks tampered with
//! and re-signed by the fixture's own keys so that exactly one check fails.

use std::collections::HashSet;
use std::path::PathBuf;

use bytes::Bytes;
use prost::Message;
use weft_msp::{Signer, now};
use weft_protos::common::{Block, ChannelHeader, Envelope, Payload};
use weft_protos::protos::{ChaincodeId, Response};
use weft_protos::tx::{Invocation, Proposal, SimulationResult, endorse};
use weft_protos::view::{DecodedBlock, Limits, TxBody};

use crate::checks::check_block;
use crate::mvcc::mark_duplicate_tx_ids;
use crate::{ChannelContext, TxValidationCode};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fabric-2.5")
}

fn block(name: &str) -> Block {
    Block::decode(std::fs::read(fixtures().join(name)).unwrap().as_slice()).unwrap()
}

fn decoded(block: Block) -> DecodedBlock {
    DecodedBlock::from_block(block, Limits::default()).unwrap()
}

/// The channel context of a fixture channel, from its genesis block.
fn context(channel: &str) -> ChannelContext {
    let genesis = decoded(block(&format!("{channel}-block-0.block")));
    let transaction = genesis.transactions[0].as_ref().unwrap();
    let TxBody::Config(config) = &transaction.body else {
        panic!("genesis holds a config")
    };
    ChannelContext::from_config(channel, 0, config.config.as_ref().unwrap()).unwrap()
}

fn user1() -> Signer {
    let dir = fixtures()
        .join("crypto/peerOrganizations/org1.example.com/users/User1@org1.example.com/msp");
    weft_msp::folder::load(&dir, "Org1MSP")
        .unwrap()
        .signer
        .unwrap()
}

/// Rewrites the payload of an envelope with `change`, then signs it again
/// as User1 (the fixture's submitting client).
fn resigned(raw: &Bytes, change: impl FnOnce(&mut Payload)) -> Bytes {
    let envelope = Envelope::decode(raw.clone()).unwrap();
    let mut payload = Payload::decode(envelope.payload).unwrap();
    change(&mut payload);
    let payload_bytes = payload.encode_to_vec();
    let signature = user1().sign(&payload_bytes).unwrap();
    Envelope {
        payload: payload_bytes.into(),
        signature: signature.into(),
    }
    .encode_to_vec()
    .into()
}

fn with_envelopes(template: &Block, envelopes: Vec<Bytes>) -> DecodedBlock {
    let mut block = template.clone();
    block.data.as_mut().unwrap().data = envelopes;
    decoded(block)
}

/// A `kv` transaction on ch10 proposed by User1, whose simulation gave
/// `results` (a serialized read/write set) and `events`, endorsed by
/// `endorsers`, as an envelope's bytes.
fn kv_transaction_by(results: Bytes, events: Bytes, endorsers: &[&Signer]) -> Bytes {
    let user = user1();
    let invocation = Invocation {
        channel_id: "ch10",
        chaincode: "kv",
        args: vec![Bytes::from_static(b"put")],
        nonce: user.new_nonce().unwrap(),
        timestamp_seconds: now(),
    };
    let proposal = Proposal::new(&invocation, user.serialized_identity().clone());
    let simulation = SimulationResult {
        results,
        events,
        response: Response {
            status: 200,
            ..Response::default()
        },
        chaincode_id: ChaincodeId {
            name: "kv".to_owned(),
            ..ChaincodeId::default()
        },
    };
    let responses: Vec<_> = endorsers
        .iter()
        .map(|endorser| endorse(&proposal, &simulation, *endorser).unwrap())
        .collect();
    proposal
        .transaction(&responses, &user)
        .unwrap()
        .encode_to_vec()
        .into()
}

#[test]
fn every_fabric_transaction_passes_stage_1() {
    // Goal: the transactions that Fabric 2.5 committed as VALID pass weft's
    // parallel checks with the MSPs and policies of their channel's genesis
    // block: creators, TxIDs, proposal hashes, endorsements against the
    // default and _lifecycle endorsement policies.
    for (channel, blocks) in [
        (
            "ch10",
            vec![
                "ch10-block-1.block",
                "ch10-block-2.block",
                "ch10-block-3.block",
                "ch10-block-4.block",
            ],
        ),
        (
            "ch100",
            vec![
                "ch100-block-1.block",
                "ch100-block-2.block",
                "extra/ch100-block-3.block",
                "extra/ch100-block-4.block",
            ],
        ),
    ] {
        let context = context(channel);
        for name in blocks {
            let block = decoded(block(name));
            let codes = check_block(&block, &context, now());
            assert!(!codes.is_empty());
            assert!(
                codes.iter().all(|code| *code == TxValidationCode::Valid),
                "{name}: {codes:?}"
            );
        }
        let stats = context.msps.cache_stats();
        assert!(
            stats.hits > stats.misses,
            "{channel}: identity cache {stats:?}"
        );
    }
}

#[test]
fn tampered_transactions_get_fabrics_codes() {
    // Goal: each kind of tampering is caught by the check Fabric assigns it to.
    let context = context("ch10");
    let template = block("ch10-block-3.block");
    let original = template.data.as_ref().unwrap().data[0].clone();

    let mut bad_signature = Envelope::decode(original.clone()).unwrap();
    let last = bad_signature.signature.len() - 2;
    let mut signature = bad_signature.signature.to_vec();
    signature[last] ^= 1;
    bad_signature.signature = signature.into();

    let wrong_tx_id = resigned(&original, |payload| {
        let header = payload.header.as_mut().unwrap();
        let mut channel_header = ChannelHeader::decode(header.channel_header.clone()).unwrap();
        channel_header.tx_id = "0".repeat(64);
        header.channel_header = channel_header.encode_to_vec().into();
    });
    let no_endorsements = resigned(&original, |payload| {
        let mut transaction =
            weft_protos::protos::Transaction::decode(payload.data.clone()).unwrap();
        let action = &mut transaction.actions[0];
        let mut action_payload =
            weft_protos::protos::ChaincodeActionPayload::decode(action.payload.clone()).unwrap();
        action_payload.action.as_mut().unwrap().endorsements.clear();
        action.payload = action_payload.encode_to_vec().into();
        payload.data = transaction.encode_to_vec().into();
    });
    let changed_result = resigned(&original, |payload| {
        // Changing what was endorsed breaks the endorsement signatures.
        let mut transaction =
            weft_protos::protos::Transaction::decode(payload.data.clone()).unwrap();
        let action = &mut transaction.actions[0];
        let mut action_payload =
            weft_protos::protos::ChaincodeActionPayload::decode(action.payload.clone()).unwrap();
        let endorsed = action_payload.action.as_mut().unwrap();
        let mut response = weft_protos::protos::ProposalResponsePayload::decode(
            endorsed.proposal_response_payload.clone(),
        )
        .unwrap();
        let mut chaincode_action =
            weft_protos::protos::ChaincodeAction::decode(response.extension.clone()).unwrap();
        chaincode_action.response.as_mut().unwrap().message = "tampered".to_owned();
        response.extension = chaincode_action.encode_to_vec().into();
        endorsed.proposal_response_payload = response.encode_to_vec().into();
        action.payload = action_payload.encode_to_vec().into();
        payload.data = transaction.encode_to_vec().into();
    });
    let changed_proposal = resigned(&original, |payload| {
        let mut transaction =
            weft_protos::protos::Transaction::decode(payload.data.clone()).unwrap();
        let action = &mut transaction.actions[0];
        let mut action_payload =
            weft_protos::protos::ChaincodeActionPayload::decode(action.payload.clone()).unwrap();
        let mut proposal = action_payload.chaincode_proposal_payload.to_vec();
        proposal.extend_from_slice(&[0x2a, 0x00]); // an extra empty field 5
        action_payload.chaincode_proposal_payload = proposal.into();
        action.payload = action_payload.encode_to_vec().into();
        payload.data = transaction.encode_to_vec().into();
    });

    let cases: Vec<(Bytes, TxValidationCode)> = vec![
        (original.clone(), TxValidationCode::Valid),
        (
            bad_signature.encode_to_vec().into(),
            TxValidationCode::BadCreatorSignature,
        ),
        (wrong_tx_id, TxValidationCode::BadProposalTxid),
        (no_endorsements, TxValidationCode::EndorsementPolicyFailure),
        (changed_result, TxValidationCode::EndorsementPolicyFailure),
        (
            changed_proposal,
            TxValidationCode::InvalidEndorserTransaction,
        ),
        (
            Bytes::from_static(b"\xff\x01garbage"),
            TxValidationCode::BadPayload,
        ),
        (Bytes::new(), TxValidationCode::NilEnvelope),
    ];
    let (envelopes, expected): (Vec<Bytes>, Vec<TxValidationCode>) = cases.into_iter().unzip();
    let block = with_envelopes(&template, envelopes);
    let codes = check_block(&block, &context, now());
    assert_eq!(codes, expected);

    // A peer that endorsed the original (peer0.org1, whose key signed its
    // endorsement) recognises that signature wherever it comes back over
    // the same bytes, and reaches the same verdict on every case: a
    // remembered signature over a changed result is still a failure.
    let own = endorser_memory(&original);
    let recognising = context.with_own_signatures(own.clone());
    assert_eq!(check_block(&block, &recognising, now()), expected);
    // Only the original reaches the endorsement check with the endorsed
    // bytes unchanged.
    assert_eq!(own.recognised(), 1);
}

/// The memory of peer0.org1 after it endorsed the transaction `envelope`:
/// its signatures over the endorsed bytes.
fn endorser_memory(envelope: &Bytes) -> std::sync::Arc<weft_msp::OwnSignatures> {
    let dir = fixtures()
        .join("crypto/peerOrganizations/org1.example.com/peers/peer0.org1.example.com/msp");
    let peer = weft_msp::folder::load(&dir, "Org1MSP")
        .unwrap()
        .signer
        .unwrap();
    let own = std::sync::Arc::new(weft_msp::OwnSignatures::new(&peer, 16));
    let decoded = decoded(Block {
        data: Some(weft_protos::common::BlockData {
            data: vec![envelope.clone()],
        }),
        ..block("ch10-block-3.block")
    });
    let Ok(transaction) = &decoded.transactions[0] else {
        panic!("the envelope decodes")
    };
    let TxBody::Endorser(endorser) = &transaction.body else {
        panic!("an endorser transaction")
    };
    let action = &endorser.actions[0];
    let mut remembered = 0;
    for endorsement in &action.endorsements {
        if endorsement.endorser == *peer.serialized_identity() {
            let mut message = action.proposal_response_payload_bytes.to_vec();
            message.extend_from_slice(&endorsement.endorser);
            own.remember(&message, &endorsement.signature);
            remembered += 1;
        }
    }
    assert_eq!(remembered, 1, "peer0.org1 endorsed the transaction");
    own
}

#[test]
fn transactions_of_another_channel_or_unknown_creators_are_rejected() {
    // Goal: a ch100 transaction is not valid on ch10, and a creator whose
    // MSP the channel does not know fails the creator check.
    let ch10 = context("ch10");
    let foreign = block("extra/ch100-block-3.block");
    let codes = check_block(&decoded(foreign.clone()), &ch10, now());
    assert_eq!(codes, [TxValidationCode::TargetChainNotFound]);

    let template = block("ch10-block-3.block");
    let original = template.data.as_ref().unwrap().data[0].clone();
    let stranger = resigned(&original, |payload| {
        let header = payload.header.as_mut().unwrap();
        let mut signature_header =
            weft_protos::common::SignatureHeader::decode(header.signature_header.clone()).unwrap();
        let mut creator =
            weft_protos::msp::SerializedIdentity::decode(signature_header.creator.clone()).unwrap();
        creator.mspid = "Org9MSP".to_owned();
        signature_header.creator = creator.encode_to_vec().into();
        header.signature_header = signature_header.encode_to_vec().into();
    });
    let codes = check_block(&with_envelopes(&template, vec![stranger]), &ch10, now());
    assert_eq!(codes, [TxValidationCode::BadCreatorSignature]);
}

#[test]
fn repeated_tx_ids_are_duplicates() {
    // Goal: a TxID seen earlier in the block, in a block ahead in the
    // pipeline, or already committed marks the transaction DUPLICATE_TXID.
    let context = context("ch10");
    let template = block("ch10-block-3.block");
    let envelopes = template.data.as_ref().unwrap().data.clone();
    let block = with_envelopes(
        &template,
        vec![
            envelopes[0].clone(),
            envelopes[1].clone(),
            envelopes[0].clone(),
        ],
    );
    let mut codes = check_block(&block, &context, now());
    let committed = block.transactions[1].as_ref().unwrap().tx_id().to_owned();
    let mut in_flight = HashSet::new();
    mark_duplicate_tx_ids(
        &block,
        &mut codes,
        |tx_id| tx_id == committed,
        &mut in_flight,
    );
    assert_eq!(
        codes,
        [
            TxValidationCode::Valid,
            TxValidationCode::DuplicateTxid,
            TxValidationCode::DuplicateTxid
        ]
    );
    assert_eq!(in_flight.len(), 2);

    let mut again = check_block(&block, &context, now());
    mark_duplicate_tx_ids(&block, &mut again, |_| false, &mut in_flight);
    assert!(
        again
            .iter()
            .all(|code| *code == TxValidationCode::DuplicateTxid),
        "{again:?}"
    );
}

#[test]
fn a_broken_copy_claims_its_tx_id_only_across_blocks() {
    // Goal: as in Fabric, a transaction that failed stage 1 does not make a
    // later one of its block with the same TxID a duplicate (so a corrupted
    // copy cannot knock out the original), but once stored it does for
    // later blocks (the ledger indexes every TxID).
    let context = context("ch10");
    let template = block("ch10-block-3.block");
    let original = template.data.as_ref().unwrap().data[0].clone();
    let mut copy = Envelope::decode(original.clone()).unwrap();
    let mut signature = copy.signature.to_vec();
    signature[10] ^= 1;
    copy.signature = signature.into();
    let block = with_envelopes(&template, vec![copy.encode_to_vec().into(), original]);
    let mut codes = check_block(&block, &context, now());
    let mut in_flight = HashSet::new();
    mark_duplicate_tx_ids(&block, &mut codes, |_| false, &mut in_flight);
    assert_eq!(
        codes,
        [
            TxValidationCode::BadCreatorSignature,
            TxValidationCode::Valid
        ]
    );
    assert_eq!(in_flight.len(), 1);

    let mut next = check_block(&block, &context, now());
    mark_duplicate_tx_ids(&block, &mut next, |_| false, &mut in_flight);
    assert_eq!(
        next,
        [
            TxValidationCode::BadCreatorSignature,
            TxValidationCode::DuplicateTxid
        ]
    );
}

/// Key-level endorsement policies (Fabric's state-based endorsement) on
/// the fixture's channel ch10, whose chaincode rule is
/// `OR('Org1MSP.peer')`: keys guarded by `OR('Org1MSP.admin')`, endorsed
/// by the fixture's peer and admin.
mod key_level_policies {
    use std::collections::BTreeMap;

    use weft_protos::tx::{ReadWriteSetBuilder, VALIDATION_PARAMETER};
    use weft_statedb::memory::{MemoryOptions, MemoryState};
    use weft_statedb::{Height, StateReader, UpdateBatch, VersionedState, key_metadata_namespace};

    use super::*;
    use crate::key_policies::check_key_level_policies;
    use crate::mvcc::{update_batch, validate_block};

    use TxValidationCode::{EndorsementPolicyFailure, Valid};

    fn signer(path: &str) -> Signer {
        let dir = fixtures()
            .join("crypto/peerOrganizations/org1.example.com")
            .join(path);
        weft_msp::folder::load(&dir, "Org1MSP")
            .unwrap()
            .signer
            .unwrap()
    }

    pub(super) fn peer() -> Signer {
        signer("peers/peer0.org1.example.com/msp")
    }

    fn admin() -> Signer {
        signer("users/Admin@org1.example.com/msp")
    }

    fn admins_only() -> Bytes {
        weft_policy::dsl::parse("OR('Org1MSP.admin')")
            .unwrap()
            .encode_to_vec()
            .into()
    }

    /// A `kv` transaction by User1 that writes `writes` (`None` deletes)
    /// and sets the key-level policy of `policies` (`None` removes it),
    /// endorsed by `endorsers`.
    fn transaction(
        writes: &[(&str, Option<&str>)],
        policies: &[(&str, Option<Bytes>)],
        endorsers: &[&Signer],
    ) -> Bytes {
        let mut rwset = ReadWriteSetBuilder::new();
        for (key, value) in writes {
            match value {
                Some(value) => rwset.write("kv", key, Bytes::copy_from_slice(value.as_bytes())),
                None => rwset.delete("kv", key),
            };
        }
        for (key, policy) in policies {
            let entries = policy
                .iter()
                .map(|policy| (VALIDATION_PARAMETER.to_owned(), policy.clone()))
                .collect::<BTreeMap<_, _>>();
            rwset.write_metadata("kv", key, entries);
        }
        kv_transaction_by(rwset.encode(), Bytes::new(), endorsers)
    }

    /// Validates `envelopes` as block `number` against `state` and commits
    /// the valid ones' writes; their codes.
    fn commit(
        state: &MemoryState,
        context: &ChannelContext,
        number: u64,
        envelopes: Vec<Bytes>,
    ) -> Vec<TxValidationCode> {
        let mut template = block("ch10-block-3.block");
        template.header.as_mut().unwrap().number = number;
        let block = with_envelopes(&template, envelopes);
        let mut codes = check_block(&block, context, now());
        check_key_level_policies(&block, &mut codes, state, context, now()).unwrap();
        validate_block(&block, &mut codes, state).unwrap();
        let batch = update_batch(&block, &codes, state).unwrap();
        let last = block.transactions.len() as u64 - 1;
        state.apply(&batch, Height::new(number, last)).unwrap();
        codes
    }

    /// The key-level policy stored for `key`, if any.
    fn policy_of(state: &MemoryState, key: &str) -> Option<Bytes> {
        let stored = state.get(&key_metadata_namespace("kv"), key).unwrap()?;
        let metadata = weft_protos::kvrwset::KvMetadataWrite::decode(stored.value).unwrap();
        metadata
            .entries
            .into_iter()
            .find(|entry| entry.name == VALIDATION_PARAMETER)
            .map(|entry| entry.value)
    }

    #[test]
    fn a_key_with_a_policy_is_written_only_as_its_policy_says() {
        // Goal: a key guarded by a key-level policy needs that policy
        // instead of the chaincode's; other keys of the same transaction
        // still need the chaincode's rule; a key whose policy an earlier
        // transaction of the block changed cannot be written after it; and
        // the metadata is kept, moved and removed as Fabric keeps it.
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let mut seed = UpdateBatch::new();
        for key in ["guarded", "plain", "other"] {
            seed.put("kv", key, Bytes::from_static(b"v0"), Height::new(2, 0));
        }
        let metadata = weft_protos::tx::metadata_write(
            "",
            &BTreeMap::from([(VALIDATION_PARAMETER.to_owned(), admins_only())]),
        );
        seed.put(
            &key_metadata_namespace("kv"),
            "guarded",
            metadata.encode_to_vec().into(),
            Height::new(2, 0),
        );
        state.apply(&seed, Height::new(2, 0)).unwrap();
        let context = context("ch10");
        let (peer, admin) = (peer(), admin());

        let codes = commit(
            &state,
            &context,
            3,
            vec![
                // The key's policy alone: the chaincode's rule is not needed.
                transaction(&[("guarded", Some("by admin"))], &[], &[&admin]),
                // The chaincode's rule does not satisfy the key's policy.
                transaction(&[("guarded", Some("by peer"))], &[], &[&peer]),
                // A key without a policy still needs the chaincode's rule.
                transaction(
                    &[("guarded", Some("x")), ("plain", Some("x"))],
                    &[],
                    &[&admin],
                ),
                transaction(
                    &[("guarded", Some("both")), ("plain", Some("both"))],
                    &[],
                    &[&admin, &peer],
                ),
                // Setting a policy needs the key's current rule: the
                // chaincode's here.
                transaction(&[], &[("other", Some(admins_only()))], &[&peer]),
                // Its policy changed earlier in the block: refused whatever
                // the endorsements.
                transaction(&[("other", Some("too soon"))], &[], &[&admin, &peer]),
            ],
        );
        assert_eq!(
            codes,
            [
                Valid,
                EndorsementPolicyFailure,
                EndorsementPolicyFailure,
                Valid,
                Valid,
                EndorsementPolicyFailure
            ]
        );
        assert_eq!(
            &state.get("kv", "guarded").unwrap().unwrap().value[..],
            b"both"
        );
        assert_eq!(
            &state.get("kv", "plain").unwrap().unwrap().value[..],
            b"both"
        );
        // The policy set alone keeps the value and moves it to the height
        // of the transaction that set it.
        let other = state.get("kv", "other").unwrap().unwrap();
        assert_eq!(
            (&other.value[..], other.version),
            (&b"v0"[..], Height::new(3, 4))
        );
        assert_eq!(policy_of(&state, "other"), Some(admins_only()));
        // A value written alone keeps the key's policy.
        assert_eq!(policy_of(&state, "guarded"), Some(admins_only()));

        let codes = commit(
            &state,
            &context,
            4,
            vec![
                transaction(&[("other", Some("by admin"))], &[], &[&admin]),
                transaction(&[("other", Some("by peer"))], &[], &[&peer]),
                // Removing the policy needs the policy.
                transaction(&[], &[("guarded", None)], &[&admin]),
            ],
        );
        assert_eq!(codes, [Valid, EndorsementPolicyFailure, Valid]);
        assert_eq!(
            &state.get("kv", "other").unwrap().unwrap().value[..],
            b"by admin"
        );
        assert_eq!(policy_of(&state, "guarded"), None);

        // With its policy gone, the chaincode's rule is back; a delete
        // takes the key's metadata with it.
        let codes = commit(
            &state,
            &context,
            5,
            vec![
                transaction(&[("guarded", Some("by peer"))], &[], &[&peer]),
                transaction(&[("other", None)], &[], &[&admin]),
            ],
        );
        assert_eq!(codes, [Valid, Valid]);
        assert!(state.get("kv", "other").unwrap().is_none());
        assert_eq!(policy_of(&state, "other"), None);
        // A policy that does not decode is satisfied by nothing.
        let garbage = weft_protos::tx::metadata_write(
            "",
            &BTreeMap::from([(VALIDATION_PARAMETER.to_owned(), Bytes::from_static(b"\xff"))]),
        );
        let mut batch = UpdateBatch::new();
        batch.put(
            &key_metadata_namespace("kv"),
            "plain",
            garbage.encode_to_vec().into(),
            Height::new(6, 0),
        );
        state.apply(&batch, Height::new(6, 0)).unwrap();
        let codes = commit(
            &state,
            &context,
            7,
            vec![transaction(&[("plain", Some("x"))], &[], &[&admin, &peer])],
        );
        assert_eq!(codes, [EndorsementPolicyFailure]);
    }

    /// A `kv` transaction by User1 that writes private `writes` of
    /// collection `c` and sets the key-level policy of private `policies`,
    /// endorsed by `endorsers`.
    fn private_transaction(
        writes: &[(&str, &str)],
        policies: &[(&str, Bytes)],
        endorsers: &[&Signer],
    ) -> Bytes {
        let mut rwset = ReadWriteSetBuilder::new();
        for (key, value) in writes {
            rwset.write_private("kv", "c", key, Bytes::copy_from_slice(value.as_bytes()));
        }
        for (key, policy) in policies {
            let entries = BTreeMap::from([(VALIDATION_PARAMETER.to_owned(), policy.clone())]);
            rwset.write_private_metadata("kv", "c", key, entries);
        }
        kv_transaction_by(rwset.encode(), Bytes::new(), endorsers)
    }

    #[test]
    fn a_private_key_with_a_policy_is_written_only_as_its_policy_says() {
        // Goal: a private key's policy (Fabric's
        // SetPrivateDataValidationParameter), kept under the key's hash on
        // every peer, is enforced on writes of the key as a public key's
        // is; a policy set alone keeps the key's hash at the new height;
        // and a key whose policy changed earlier in the block is refused.
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let hashed = weft_statedb::hashed_namespace("kv", "c");
        let hash_of = |key: &str| hex::encode(weft_protos::hash::sha256(key.as_bytes()));
        let mut seed = UpdateBatch::new();
        for key in ["guarded", "open"] {
            seed.put(
                &hashed,
                &hash_of(key),
                Bytes::from_static(b"h0"),
                Height::new(2, 0),
            );
        }
        let metadata = weft_protos::tx::metadata_write(
            "",
            &BTreeMap::from([(VALIDATION_PARAMETER.to_owned(), admins_only())]),
        );
        seed.put(
            &key_metadata_namespace(&hashed),
            &hash_of("guarded"),
            metadata.encode_to_vec().into(),
            Height::new(2, 0),
        );
        state.apply(&seed, Height::new(2, 0)).unwrap();
        let context = context("ch10");
        let (peer, admin) = (peer(), admin());

        let codes = commit(
            &state,
            &context,
            3,
            vec![
                private_transaction(&[("guarded", "by peer")], &[], &[&peer]),
                private_transaction(&[("guarded", "by admin")], &[], &[&admin]),
                // A key without a policy needs the collection's rule (here
                // the chaincode's), which the admin alone does not meet.
                private_transaction(&[("open", "by admin")], &[], &[&admin]),
                private_transaction(&[], &[("open", admins_only())], &[&peer]),
                private_transaction(&[("open", "too soon")], &[], &[&admin, &peer]),
            ],
        );
        assert_eq!(
            codes,
            [
                EndorsementPolicyFailure,
                Valid,
                EndorsementPolicyFailure,
                Valid,
                EndorsementPolicyFailure
            ]
        );
        let guarded = state.get(&hashed, &hash_of("guarded")).unwrap().unwrap();
        assert_eq!(guarded.version, Height::new(3, 1));
        let open = state.get(&hashed, &hash_of("open")).unwrap().unwrap();
        assert_eq!(
            (&open.value[..], open.version),
            (&b"h0"[..], Height::new(3, 3)),
            "the policy set alone moves the hash, keeping it"
        );
        let stored = state
            .get(&key_metadata_namespace(&hashed), &hash_of("open"))
            .unwrap()
            .unwrap();
        let entries = weft_protos::kvrwset::KvMetadataWrite::decode(stored.value)
            .unwrap()
            .entries;
        assert_eq!(entries[0].value, admins_only());

        // Now the admin alone may write it; the peer alone may not.
        let codes = commit(
            &state,
            &context,
            4,
            vec![
                private_transaction(&[("open", "by peer")], &[], &[&peer]),
                private_transaction(&[("open", "by admin")], &[], &[&admin]),
            ],
        );
        assert_eq!(codes, [EndorsementPolicyFailure, Valid]);
    }
}

mod expiry {
    use weft_protos::lifecycle::{StateData, state_data};
    use weft_protos::protos::collection_config::Payload as CollectionPayload;
    use weft_protos::protos::collection_policy_config::Payload as MemberPolicy;
    use weft_protos::protos::{
        CollectionConfig, CollectionConfigPackage, CollectionPolicyConfig, StaticCollectionConfig,
    };
    use weft_statedb::memory::{MemoryOptions, MemoryState};
    use weft_statedb::{Height, UpdateBatch, VersionedState};

    use super::*;
    use crate::ChaincodeDefinitions;
    use crate::private::{EXPIRY_NAMESPACE, schedule_expiry};

    #[test]
    fn a_policy_set_alone_on_a_private_key_starts_its_blocktolive_again() {
        // Goal: as Fabric's expiry keeper counts it, a private key whose
        // metadata alone a transaction writes counts as written by it:
        // its hash (now at that transaction's version) expires
        // `blockToLive` blocks after that, not after its value's write.
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let member_policy = weft_policy::dsl::parse("OR('Org1MSP.member')").unwrap();
        let package = CollectionConfigPackage {
            config: vec![CollectionConfig {
                payload: Some(CollectionPayload::StaticCollectionConfig(
                    StaticCollectionConfig {
                        name: "c".to_owned(),
                        member_orgs_policy: Some(CollectionPolicyConfig {
                            payload: Some(MemberPolicy::SignaturePolicy(member_policy)),
                        }),
                        block_to_live: 2,
                        maximum_peer_count: 1,
                        ..StaticCollectionConfig::default()
                    },
                )),
            }],
        };
        let stored = StateData {
            r#type: Some(state_data::Type::Bytes(package.encode_to_vec().into())),
        };
        let mut batch = UpdateBatch::new();
        batch.put(
            "_lifecycle",
            "namespaces/fields/kv/Collections",
            stored.encode_to_vec().into(),
            Height::new(1, 0),
        );
        state.apply(&batch, Height::new(1, 0)).unwrap();
        let definitions = ChaincodeDefinitions::load(&state).unwrap();

        let mut rwset = weft_protos::tx::ReadWriteSetBuilder::new();
        let entries = std::collections::BTreeMap::from([(
            weft_protos::tx::VALIDATION_PARAMETER.to_owned(),
            Bytes::from_static(b"a policy"),
        )]);
        rwset.write_private_metadata("kv", "c", "k", entries);
        let envelope =
            kv_transaction_by(rwset.encode(), Bytes::new(), &[&key_level_policies::peer()]);
        let mut template = block("ch10-block-3.block");
        template.header.as_mut().unwrap().number = 5;
        let decoded = with_envelopes(&template, vec![envelope]);

        let mut batch = UpdateBatch::new();
        schedule_expiry(
            &mut batch,
            &decoded,
            &[TxValidationCode::Valid],
            &definitions,
            &[],
        );
        let hash = hex::encode(weft_protos::hash::sha256(b"k"));
        let scheduled = batch.get(
            EXPIRY_NAMESPACE,
            &format!("{:016x}/h/kv/c/{hash}", 5 + 2 + 1),
        );
        assert_eq!(
            scheduled.map(|write| write.version),
            Some(Height::new(5, 0)),
            "{batch:?}"
        );
    }
}

mod commit {
    //! The whole committer on the real ch10 chain: RocksDB block store and
    //! the in-memory world state, both on disk in a temporary directory.

    use std::sync::Arc;

    use weft_ledger::{BlockStore, StoreConfig};
    use weft_protos::common::BlockMetadataIndex;
    use weft_statedb::memory::{MemoryOptions, MemoryState};
    use weft_statedb::{StateReader, VersionedState};

    use super::*;
    use crate::ChannelCommitter;

    struct Peer {
        dir: tempfile::TempDir,
    }

    impl Peer {
        fn new() -> Self {
            Self {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn stores(&self) -> (Arc<MemoryState>, Arc<BlockStore>) {
            let state = MemoryState::open(&self.dir.path().join("state"), MemoryOptions::default())
                .unwrap();
            let ledger =
                BlockStore::open(&StoreConfig::new(self.dir.path().join("blocks"))).unwrap();
            (Arc::new(state), Arc::new(ledger))
        }
    }

    fn filter_of(block: &Block) -> Bytes {
        block.metadata.as_ref().unwrap().metadata[BlockMetadataIndex::TransactionsFilter as usize]
            .clone()
    }

    /// Keys written in ch10 blocks 3 and 4, with the height that wrote them.
    fn written_keys() -> Vec<(String, u64, u64)> {
        let mut keys = Vec::new();
        for number in [3u64, 4] {
            let block = decoded(block(&format!("ch10-block-{number}.block")));
            for (index, transaction) in block.transactions.iter().enumerate() {
                let TxBody::Endorser(endorser) = &transaction.as_ref().unwrap().body else {
                    continue;
                };
                for namespace in &endorser.actions[0].namespaces {
                    for write in &namespace.kv.writes {
                        if namespace.namespace == "kv" {
                            keys.push((write.key.clone(), number, index as u64));
                        }
                    }
                }
            }
        }
        keys
    }

    fn commit_chain(committer: &mut ChannelCommitter, numbers: std::ops::Range<u64>) {
        for number in numbers {
            let committed = committer
                .commit(block(&format!("ch10-block-{number}.block")), now())
                .unwrap();
            assert_eq!(committed.number, number);
            assert!(
                committed
                    .codes
                    .iter()
                    .all(|code| *code == TxValidationCode::Valid),
                "{committed:?}"
            );
        }
    }

    #[test]
    fn the_fabric_chain_commits_as_fabric_committed_it() {
        // Goal: weft commits ch10 blocks 0–4 with the validation codes the
        // Fabric peer recorded, and the world state holds every key written
        // at the height of the transaction that wrote it.
        let peer = Peer::new();
        let (state, ledger) = peer.stores();
        let mut committer =
            ChannelCommitter::create(block("ch10-block-0.block"), state.clone(), ledger.clone())
                .unwrap();
        commit_chain(&mut committer, 1..5);
        assert_eq!(committer.height(), 5);

        for (name, number) in [
            ("ch10-block-1.from-peer.block", 1),
            ("extra/ch10-block-3.from-peer.block", 3),
        ] {
            let fabric = block(name);
            let ours = ledger.block(number).unwrap().unwrap();
            assert_eq!(filter_of(&ours), filter_of(&fabric), "{name}");
            assert_eq!(ours.header, fabric.header, "{name}");
            assert_eq!(ours.data, fabric.data, "{name}");
        }
        let keys = written_keys();
        assert_eq!(keys.len(), 20);
        for (key, number, index) in &keys {
            let value = state
                .get("kv", key)
                .unwrap()
                .unwrap_or_else(|| panic!("{key} missing"));
            assert_eq!(
                value.version,
                weft_statedb::Height::new(*number, *index),
                "{key}"
            );
            assert_eq!(value.value.len(), 8, "{key}");
        }
        assert!(!state.range("_lifecycle", "", "", 100).unwrap().is_empty());
        // Block 2 committed kv's definition: its policy is the channel's
        // Endorsement policy, by reference, as Fabric's peer defaulted it.
        let context = committer.context();
        assert_eq!(context.definitions.names().collect::<Vec<_>>(), ["kv"]);
        assert!(matches!(
            context.endorsement_rule("kv"),
            crate::EndorsementRule::Channel(path) if path == "/Channel/Application/Endorsement"
        ));
        // Org1's approval (block 1) needed Org1's own Endorsement policy.
        assert!(matches!(
            context.collection_rule("_lifecycle", "_implicit_org_Org1MSP"),
            crate::EndorsementRule::Channel(path) if path == "/Channel/Application/Org1MSP/Endorsement"
        ));
        assert!(matches!(
            context.collection_rule("_lifecycle", "_implicit_org_Nobody"),
            crate::EndorsementRule::Unreadable(_)
        ));
        // Reopened, the peer reads the definition back from its state.
        drop(committer);
        let reopened = ChannelCommitter::open("ch10", state, ledger).unwrap();
        assert_eq!(
            reopened.context().definitions.names().collect::<Vec<_>>(),
            ["kv"]
        );
    }

    /// Block `number` on top of `ledger` holding `envelopes`, every one
    /// marked VALID: what a replica applies as it is. Its other metadata
    /// (signatures, the last config's index) is its predecessor's.
    fn validated_block(ledger: &BlockStore, number: u64, envelopes: Vec<Bytes>) -> Block {
        let previous = ledger.block(number - 1).unwrap().unwrap();
        let mut metadata = previous.metadata.unwrap().metadata;
        metadata[BlockMetadataIndex::TransactionsFilter as usize] =
            Bytes::from(vec![0u8; envelopes.len()]);
        Block {
            header: Some(weft_protos::common::BlockHeader {
                number,
                previous_hash: Bytes::copy_from_slice(&ledger.last_header_hash().unwrap()),
                data_hash: Bytes::copy_from_slice(&weft_protos::hash::data_hash_of(
                    envelopes.iter().map(|e| e.as_ref()),
                )),
            }),
            data: Some(weft_protos::common::BlockData { data: envelopes }),
            metadata: Some(weft_protos::common::BlockMetadata { metadata }),
        }
    }

    /// Org1's implicit collection of `kv` (defined in block 2 of ch10).
    const ORG1_COLLECTION: &str = "_implicit_org_Org1MSP";

    /// A committer of Org1's peer on `peer`'s stores, keeping Org1's
    /// private data (from its transient store), with ch10's blocks 1..5
    /// committed.
    fn member_committer(state: &Arc<MemoryState>, ledger: &Arc<BlockStore>) -> ChannelCommitter {
        let mut committer =
            ChannelCommitter::create(block("ch10-block-0.block"), state.clone(), ledger.clone())
                .unwrap()
                .keeping_private_data_of("Org1MSP", ledger.clone());
        commit_chain(&mut committer, 1..5);
        committer
    }

    /// A `kv` transaction endorsed by Org1's peer whose simulation `build`
    /// recorded: the envelope, its TxID and its private writes.
    fn private_envelope(
        build: impl FnOnce(&mut weft_protos::tx::ReadWriteSetBuilder),
    ) -> (Bytes, String, weft_protos::rwset::TxPvtReadWriteSet) {
        let mut rwset = weft_protos::tx::ReadWriteSetBuilder::new();
        build(&mut rwset);
        let endorser = super::key_level_policies::peer();
        let envelope = kv_transaction_by(rwset.encode(), Bytes::new(), &[&endorser]);
        let tx_id = weft_protos::view::TxEnvelope::decode(envelope.clone(), Limits::default())
            .unwrap()
            .tx_id()
            .to_owned();
        (envelope, tx_id, rwset.private_writes().unwrap())
    }

    /// [`private_envelope`] writing `value` to `key` of Org1's collection.
    fn private_write(
        key: &str,
        value: &'static [u8],
    ) -> (Bytes, String, weft_protos::rwset::TxPvtReadWriteSet) {
        private_envelope(|rwset| {
            rwset.write_private("kv", ORG1_COLLECTION, key, Bytes::from_static(value));
        })
    }

    #[test]
    fn a_member_peer_commits_the_private_values_behind_a_blocks_hashes_and_replays_them() {
        // Goal: Org1's peer commits the plaintext of a private write it
        // holds in its transient store and whose hash the block carries,
        // at the transaction's version; a write it never received, or
        // whose plaintext does not match the hash, leaves only the hash;
        // the block settles the transient entries; and a restart replays
        // the committed values from the block store.
        let peer = Peer::new();
        let (state, ledger) = peer.stores();
        let mut committer = member_committer(&state, &ledger);
        let collection = ORG1_COLLECTION;
        let (kept, kept_id, kept_writes) = private_write("k1", b"v1");
        let (lost, lost_id, _) = private_write("k2", b"v2");
        let (forged, forged_id, _) = private_write("k3", b"v3");
        let (_, _, other_writes) = private_write("k3", b"not v3");
        ledger
            .keep_transient(&kept_id, 5, &kept_writes.encode_to_vec())
            .unwrap();
        ledger
            .keep_transient(&forged_id, 5, &other_writes.encode_to_vec())
            .unwrap();

        let block5 = validated_block(&ledger, 5, vec![kept, lost, forged]);
        let committed = committer.apply_validated(block5).unwrap();
        assert_eq!(committed.codes, [TxValidationCode::Valid; 3]);
        let private = weft_statedb::private_namespace("kv", collection);
        let hashed = weft_statedb::hashed_namespace("kv", collection);
        let check = |state: &MemoryState| {
            let value = state.get(&private, "k1").unwrap().unwrap();
            assert_eq!(value.value, Bytes::from_static(b"v1"));
            assert_eq!(value.version, weft_statedb::Height::new(5, 0));
            assert!(
                state.get(&private, "k2").unwrap().is_none(),
                "never received"
            );
            assert!(
                state.get(&private, "k3").unwrap().is_none(),
                "does not match"
            );
            for key in ["k1", "k2", "k3"] {
                let key_hash = hex::encode(weft_protos::hash::sha256(key.as_bytes()));
                assert!(
                    state.get(&hashed, &key_hash).unwrap().is_some(),
                    "{key}'s hash"
                );
            }
        };
        check(&state);
        for tx_id in [&kept_id, &forged_id] {
            assert!(ledger.transient(tx_id).unwrap().is_none(), "settled");
        }
        assert!(ledger.transient(&lost_id).unwrap().is_none());
        assert_eq!(ledger.private_data(5).unwrap().len(), 1);

        // Reopened without a checkpoint: block 5 is replayed, with its
        // private values from the block store.
        drop(committer);
        drop((state, ledger));
        let (state, ledger) = peer.stores();
        assert_eq!(state.durable_height(), None, "nothing was checkpointed");
        ChannelCommitter::open("ch10", state.clone(), ledger).unwrap();
        check(&state);
    }

    #[test]
    fn a_purge_removes_every_committed_copy_of_a_private_key() {
        // Goal: Fabric 2.5's PurgePrivateData on a member peer. Once the
        // purge commits, the key's value and hash are gone from the state
        // and no copy of it stays in the block store (so no pull answers
        // it), while the other keys written beside it stay; a policy set
        // alone on a private key moves its value with its hash.
        let peer = Peer::new();
        let (state, ledger) = peer.stores();
        let mut committer = member_committer(&state, &ledger);
        let collection = ORG1_COLLECTION;
        // A transaction whose private writes `build` records, its private
        // writes kept in the transient store when `kept`.
        let transaction = |build: &dyn Fn(&mut weft_protos::tx::ReadWriteSetBuilder),
                           kept: bool| {
            let (envelope, tx_id, writes) = private_envelope(build);
            if kept {
                ledger
                    .keep_transient(&tx_id, 5, &writes.encode_to_vec())
                    .unwrap();
            }
            envelope
        };
        let write = |pairs: &'static [(&'static str, &'static str)]| {
            move |rwset: &mut weft_protos::tx::ReadWriteSetBuilder| {
                for (key, value) in pairs {
                    rwset.write_private(
                        "kv",
                        collection,
                        key,
                        Bytes::from_static(value.as_bytes()),
                    );
                }
            }
        };
        let both = transaction(&write(&[("k1", "v1"), ("k2", "v2")]), true);
        let block5 = validated_block(&ledger, 5, vec![both]);
        committer.apply_validated(block5).unwrap();
        let again = transaction(&write(&[("k1", "v1 again")]), true);
        let policy = transaction(
            &|rwset| {
                let entries = std::collections::BTreeMap::from([(
                    weft_protos::tx::VALIDATION_PARAMETER.to_owned(),
                    Bytes::from_static(b"a policy"),
                )]);
                rwset.write_private_metadata("kv", collection, "k2", entries);
            },
            true,
        );
        let block6 = validated_block(&ledger, 6, vec![again, policy]);
        committer.apply_validated(block6).unwrap();
        let private = weft_statedb::private_namespace("kv", collection);
        let k2 = state.get(&private, "k2").unwrap().unwrap();
        assert_eq!(
            (&k2.value[..], k2.version),
            (&b"v2"[..], weft_statedb::Height::new(6, 1)),
            "the value moves with its hash"
        );

        // The purge's own private write set never reached this peer: the
        // block store's copies still tell it which key to remove. (The
        // state is durable up to block 6: a restart replays the purge.)
        state.checkpoint().unwrap();
        let purge = transaction(
            &|rwset| {
                rwset.purge_private("kv", collection, "k1");
            },
            false,
        );
        let block7 = validated_block(&ledger, 7, vec![purge]);
        assert_eq!(
            committer.apply_validated(block7).unwrap().codes,
            [TxValidationCode::Valid]
        );
        assert!(state.get(&private, "k1").unwrap().is_none());
        let hashed = weft_statedb::hashed_namespace("kv", collection);
        let hash_of = |key: &str| weft_protos::hash::sha256(key.as_bytes());
        assert!(
            state
                .get(&hashed, &hex::encode(hash_of("k1")))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            state.get(&private, "k2").unwrap().unwrap().value,
            Bytes::from_static(b"v2")
        );
        // Block 5's copy keeps k2 alone; block 6's first copy is gone.
        let keys_in = |block: u64| -> Vec<(u64, Vec<String>)> {
            ledger
                .private_data(block)
                .unwrap()
                .into_iter()
                .map(|(tx, bytes)| {
                    let set = weft_protos::rwset::TxPvtReadWriteSet::decode(bytes).unwrap();
                    let rwset = weft_protos::kvrwset::KvrwSet::decode(
                        set.ns_pvt_rwset[0].collection_pvt_rwset[0].rwset.clone(),
                    )
                    .unwrap();
                    let keys = rwset.writes.into_iter().map(|w| w.key);
                    (
                        tx,
                        keys.chain(rwset.metadata_writes.into_iter().map(|w| w.key))
                            .collect(),
                    )
                })
                .collect()
        };
        assert_eq!(keys_in(5), [(0, vec!["k2".to_owned()])]);
        assert_eq!(keys_in(6), [(1, vec!["k2".to_owned()])]);
        let k1 = weft_ledger::PrivateKeyRef {
            namespace: "kv".to_owned(),
            collection: collection.to_owned(),
            key_hash: hash_of("k1"),
        };
        assert!(ledger.private_key_writes(&k1).unwrap().is_empty());

        // Replayed, the purge removes the value again, though no copy
        // names it any more.
        drop(committer);
        drop((state, ledger));
        let (state, ledger) = peer.stores();
        assert!(
            state.get(&private, "k1").unwrap().is_some(),
            "before the replay"
        );
        ChannelCommitter::open("ch10", state.clone(), ledger).unwrap();
        assert!(state.get(&private, "k1").unwrap().is_none());
    }

    /// A source of private writes for the reconciler that answers each
    /// pull with the next of its `answers` (a unit test's stand-in for
    /// the members' peers).
    struct Answers(parking_lot::Mutex<Vec<Vec<(String, weft_protos::rwset::TxPvtReadWriteSet)>>>);

    impl crate::PrivateWritesSource for Answers {
        fn private_writes(&self, _tx_id: &str) -> Option<Bytes> {
            None
        }

        fn pull(
            &self,
            _missing: &[crate::Missing],
        ) -> Vec<(String, weft_protos::rwset::TxPvtReadWriteSet)> {
            let mut answers = self.0.lock();
            if answers.is_empty() {
                Vec::new()
            } else {
                answers.remove(0)
            }
        }
    }

    #[test]
    fn missing_private_data_found_later_is_committed_with_the_next_block_and_replayed() {
        // Goal: Fabric's reconciliation. A member peer that found no
        // private writes for a transaction at commit records them as
        // missing; a reconciler round asks for them and checks them
        // against the transaction's hash (a forged set is refused); the
        // next block commits them at the transaction's version, into the
        // state and into the stored copy of the transaction's block, and
        // settles the missing entry; a restart replays that block with
        // them.
        let peer = Peer::new();
        let (state, ledger) = peer.stores();
        let queue = Arc::new(crate::ReconciledQueue::new());
        let mut committer = member_committer(&state, &ledger).reconciling(queue.clone());
        let collection = ORG1_COLLECTION;
        let write = private_write;
        let (lost, lost_id, lost_writes) = write("k1", b"v1");
        committer
            .apply_validated(validated_block(&ledger, 5, vec![lost]))
            .unwrap();
        let private = weft_statedb::private_namespace("kv", collection);
        assert!(state.get(&private, "k1").unwrap().is_none());
        // Besides the lifecycle approval of Fabric's chain whose values
        // this peer never had (block 1).
        let missing_blocks = || -> Vec<u64> {
            let missing = ledger.missing_private_data(None, 10).unwrap();
            missing.iter().map(|entry| entry.block).collect()
        };
        assert_eq!(missing_blocks(), [1, 5]);
        assert_eq!(
            ledger.missing_private_data(None, 10).unwrap()[1],
            weft_ledger::MissingPrivateData {
                block: 5,
                tx_index: 0,
                tx_id: lost_id.clone(),
                namespace: "kv".to_owned(),
                collection: collection.to_owned(),
            }
        );
        // The state is durable up to block 5: a restart replays block 6
        // alone.
        state.checkpoint().unwrap();

        let (_, _, forged) = write("k1", b"not v1");
        let source = Arc::new(Answers(parking_lot::Mutex::new(vec![
            vec![(lost_id.clone(), forged)],
            vec![(lost_id.clone(), lost_writes)],
        ])));
        let reconciler = crate::Reconciler::new(&committer.handle(), source, queue.clone(), 10);
        assert_eq!(reconciler.round().unwrap(), 0, "the forged set is refused");
        assert_eq!(reconciler.round().unwrap(), 1);
        assert_eq!(
            reconciler.round().unwrap(),
            0,
            "found already, not asked again"
        );
        assert_eq!(queue.len(), 1);

        let (next, next_id, next_writes) = write("k2", b"v2");
        ledger
            .keep_transient(&next_id, 6, &next_writes.encode_to_vec())
            .unwrap();
        committer
            .apply_validated(validated_block(&ledger, 6, vec![next]))
            .unwrap();
        assert!(queue.is_empty());
        let check = |state: &MemoryState| {
            let found = state.get(&private, "k1").unwrap().unwrap();
            assert_eq!(found.value, Bytes::from_static(b"v1"));
            assert_eq!(found.version, weft_statedb::Height::new(5, 0));
        };
        check(&state);
        assert_eq!(missing_blocks(), [1]);
        assert_eq!(ledger.private_data(5).unwrap().len(), 1, "block 5's copy");
        assert_eq!(ledger.reconciled_with(6).unwrap(), [(5, 0)]);

        drop((committer, reconciler));
        drop((state, ledger));
        let (state, ledger) = peer.stores();
        ChannelCommitter::open("ch10", state.clone(), ledger).unwrap();
        check(&state);
    }

    #[test]
    fn a_policy_set_alone_never_passes_an_older_value_off_as_current() {
        // Goal: Fabric's rules when a private key's metadata changes alone
        // on a peer missing the key's latest value. The older value it
        // holds does not move to the new version (reads answer that the
        // value is not available); once the latest value is found, it is
        // committed at the hash's new version, since the hash is still
        // that value's.
        let peer = Peer::new();
        let (state, ledger) = peer.stores();
        let queue = Arc::new(crate::ReconciledQueue::new());
        let mut committer = member_committer(&state, &ledger).reconciling(queue.clone());
        let keep =
            |(envelope, tx_id, writes): (Bytes, String, weft_protos::rwset::TxPvtReadWriteSet)| {
                ledger
                    .keep_transient(&tx_id, 5, &writes.encode_to_vec())
                    .unwrap();
                envelope
            };
        let first = keep(private_write("k1", b"v1"));
        committer
            .apply_validated(validated_block(&ledger, 5, vec![first]))
            .unwrap();
        let (second, second_id, second_writes) = private_write("k1", b"v2");
        committer
            .apply_validated(validated_block(&ledger, 6, vec![second]))
            .unwrap();
        let policy = keep(private_envelope(|rwset| {
            let entries = std::collections::BTreeMap::from([(
                weft_protos::tx::VALIDATION_PARAMETER.to_owned(),
                Bytes::from_static(b"a policy"),
            )]);
            rwset.write_private_metadata("kv", ORG1_COLLECTION, "k1", entries);
        }));
        committer
            .apply_validated(validated_block(&ledger, 7, vec![policy]))
            .unwrap();
        let private = weft_statedb::private_namespace("kv", ORG1_COLLECTION);
        let held = state.get(&private, "k1").unwrap().unwrap();
        assert_eq!(
            (&held.value[..], held.version),
            (&b"v1"[..], weft_statedb::Height::new(5, 0)),
            "the older value stays where it was"
        );

        let source = Arc::new(Answers(parking_lot::Mutex::new(vec![vec![(
            second_id,
            second_writes,
        )]])));
        let reconciler = crate::Reconciler::new(&committer.handle(), source, queue.clone(), 10);
        assert_eq!(reconciler.round().unwrap(), 1);
        let tick = keep(private_write("k2", b"tick"));
        committer
            .apply_validated(validated_block(&ledger, 8, vec![tick]))
            .unwrap();
        let found = state.get(&private, "k1").unwrap().unwrap();
        assert_eq!(
            (&found.value[..], found.version),
            (&b"v2"[..], weft_statedb::Height::new(7, 0)),
            "found, at the version its hash has now"
        );
    }

    #[test]
    fn a_restarted_peer_replays_what_the_state_had_not_made_durable() {
        // Goal: after a restart, the state equals what it was, whether the
        // state was checkpointed (replay from there) or not (replay all).
        let peer = Peer::new();
        let (state, ledger) = peer.stores();
        let mut committer =
            ChannelCommitter::create(block("ch10-block-0.block"), state, ledger).unwrap();
        commit_chain(&mut committer, 1..3);
        assert_eq!(
            committer.checkpoint().unwrap().map(|h| h.block_num),
            Some(2)
        );
        commit_chain(&mut committer, 3..5);
        drop(committer);

        let (state, ledger) = peer.stores();
        assert_eq!(state.durable_height().map(|h| h.block_num), Some(2));
        let mut committer = ChannelCommitter::open("ch10", state.clone(), ledger).unwrap();
        assert_eq!(committer.height(), 5);
        for (key, number, index) in written_keys() {
            let value = state.get("kv", &key).unwrap().unwrap();
            assert_eq!(
                value.version,
                weft_statedb::Height::new(number, index),
                "{key}"
            );
        }
        // It goes on committing: block 4 again is the wrong number.
        let error = committer
            .commit(block("ch10-block-4.block"), now())
            .unwrap_err();
        assert!(error.to_string().contains("expected block 5"), "{error}");
    }

    #[test]
    fn a_block_that_breaks_the_chain_is_refused_and_nothing_is_written() {
        // Goal: a block whose previous hash, data hash or orderer signature
        // is wrong is refused, and neither the chain nor the state moves.
        let peer = Peer::new();
        let (state, ledger) = peer.stores();
        let mut committer =
            ChannelCommitter::create(block("ch10-block-0.block"), state.clone(), ledger.clone())
                .unwrap();
        commit_chain(&mut committer, 1..3);
        let mut wrong_previous = block("ch10-block-3.block");
        wrong_previous.header.as_mut().unwrap().previous_hash = Bytes::from_static(&[0; 32]);
        assert!(committer.commit(wrong_previous, now()).is_err());
        let mut wrong_data = block("ch10-block-3.block");
        wrong_data.data.as_mut().unwrap().data.pop();
        assert!(committer.commit(wrong_data, now()).is_err());
        let mut forged = block("ch10-block-3.block");
        let metadata = &mut forged.metadata.as_mut().unwrap().metadata
            [BlockMetadataIndex::Signatures as usize];
        let mut signatures = weft_protos::common::Metadata::decode(metadata.clone()).unwrap();
        let mut signature = signatures.signatures[0].signature.to_vec();
        let last = signature.len() - 1;
        signature[last] ^= 1;
        signatures.signatures[0].signature = signature.into();
        *metadata = signatures.encode_to_vec().into();
        let error = committer.commit(forged, now()).unwrap_err();
        assert!(error.to_string().contains("orderer signatures"), "{error}");
        let mut unsigned = block("ch10-block-3.block");
        unsigned.metadata.as_mut().unwrap().metadata[BlockMetadataIndex::Signatures as usize] =
            Bytes::new();
        assert!(committer.commit(unsigned, now()).is_err());

        assert_eq!(ledger.height(), 3);
        assert_eq!(state.height().map(|h| h.block_num), Some(2));
        commit_chain(&mut committer, 3..5);
    }

    #[test]
    fn a_replica_applies_validated_blocks_as_they_are_and_refuses_what_breaks_its_chain() {
        // Goal: the endorser replica's path. Blocks a validating peer
        // committed, codes included, applied without validation give the
        // same chain and state; a block that does not extend the chain or
        // carries no codes is refused and nothing is written.
        let validating = Peer::new();
        let (state, ledger) = validating.stores();
        let mut committer =
            ChannelCommitter::create(block("ch10-block-0.block"), state.clone(), ledger.clone())
                .unwrap();
        commit_chain(&mut committer, 1..5);

        let replica_peer = Peer::new();
        let (replica_state, replica_ledger) = replica_peer.stores();
        let mut replica = ChannelCommitter::create(
            ledger.block(0).unwrap().unwrap(),
            replica_state.clone(),
            replica_ledger.clone(),
        )
        .unwrap();
        let validated = |number: u64| ledger.block(number).unwrap().unwrap();
        let mut skipped = validated(2);
        assert!(replica.apply_validated(skipped.clone()).is_err());
        let mut no_codes = validated(1);
        no_codes.metadata.as_mut().unwrap().metadata
            [BlockMetadataIndex::TransactionsFilter as usize] = Bytes::new();
        let error = replica.apply_validated(no_codes).unwrap_err();
        assert!(error.to_string().contains("TRANSACTIONS_FILTER"), "{error}");
        assert_eq!(replica_ledger.height(), 1);

        for number in 1..5 {
            let applied = replica.apply_validated(validated(number)).unwrap();
            assert_eq!(applied.timings.validate, std::time::Duration::ZERO);
        }
        for number in 0..5 {
            assert_eq!(
                replica_ledger.block(number).unwrap(),
                ledger.block(number).unwrap()
            );
        }
        for (key, _, _) in written_keys() {
            assert_eq!(
                replica_state.get("kv", &key).unwrap(),
                state.get("kv", &key).unwrap()
            );
        }
        skipped.header.as_mut().unwrap().number = 5;
        let error = replica.apply_validated(skipped).unwrap_err();
        assert!(error.to_string().contains("previous hash"), "{error}");
    }

    #[test]
    fn the_pipeline_commits_the_chain_as_commit_does() {
        // Goal: with several blocks prepared in parallel ahead of the one
        // committing, the outcome equals committing one block at a time.
        for depth in [1, 2, 4] {
            let peer = Peer::new();
            let (state, ledger) = peer.stores();
            let mut committer = ChannelCommitter::create(
                block("ch10-block-0.block"),
                state.clone(),
                ledger.clone(),
            )
            .unwrap();
            let blocks = (1..5).map(|number| block(&format!("ch10-block-{number}.block")));
            let mut outcomes = Vec::new();
            committer.commit_stream(blocks, depth, now, |outcome| {
                outcomes.push(
                    outcome
                        .as_ref()
                        .map(|c| (c.number, c.codes.clone()))
                        .map_err(|e| e.to_string()),
                );
                true
            });
            assert_eq!(outcomes.len(), 4, "depth {depth}");
            for (index, outcome) in outcomes.iter().enumerate() {
                let (number, codes) = outcome.as_ref().unwrap();
                assert_eq!(*number, index as u64 + 1);
                assert!(codes.iter().all(|code| *code == TxValidationCode::Valid));
            }
            assert_eq!(ledger.height(), 5);
            for (key, number, index) in written_keys() {
                assert_eq!(
                    state.get("kv", &key).unwrap().unwrap().version,
                    weft_statedb::Height::new(number, index)
                );
            }
        }
    }

    #[test]
    fn the_pipeline_refuses_a_forged_block_and_what_follows_it() {
        // Goal: a forged block in the stream is refused, nothing after it is
        // committed (the blocks behind it no longer extend the chain), and
        // the committer can go on from the last good block.
        let peer = Peer::new();
        let (state, ledger) = peer.stores();
        let mut committer =
            ChannelCommitter::create(block("ch10-block-0.block"), state, ledger.clone()).unwrap();
        let mut forged = block("ch10-block-2.block");
        forged.data.as_mut().unwrap().data[0] = Bytes::from_static(b"not what the orderer signed");
        let blocks = vec![
            block("ch10-block-1.block"),
            forged,
            block("ch10-block-3.block"),
        ];
        let mut outcomes = Vec::new();
        committer.commit_stream(blocks.into_iter(), 3, now, |outcome| {
            outcomes.push(outcome.is_ok());
            true
        });
        assert_eq!(outcomes, [true, false, false]);
        assert_eq!(ledger.height(), 2);
        commit_chain(&mut committer, 2..5);
    }

    mod deliver {
        //! The peer's Deliver over real gRPC on 127.0.0.1.

        use tokio_stream::wrappers::TcpListenerStream;
        use weft_protos::common::BlockMetadataIndex;
        use weft_protos::common::{Envelope, Header, HeaderType, SignatureHeader, Status};
        use weft_protos::orderer::seek_position::Type as Position;
        use weft_protos::orderer::{SeekInfo, SeekNewest, SeekOldest, SeekPosition};
        use weft_protos::protos::ChaincodeEvent;
        use weft_protos::protos::deliver_client::DeliverClient;
        use weft_protos::protos::deliver_response::Type as ResponseType;
        use weft_protos::protos::deliver_server::DeliverServer;
        use weft_protos::protos::filtered_transaction::Data as FilteredData;
        use weft_protos::tx::Sign;

        use super::*;
        use crate::{Channels, DeliverService};

        fn seek_envelope(channel: &str, signer: &dyn Sign) -> Envelope {
            seek_envelope_at(channel, signer, Some(weft_msp::now()))
        }

        /// A request for the whole chain made at `timestamp` (seconds since
        /// the Unix epoch; `None`: without a timestamp).
        fn seek_envelope_at(channel: &str, signer: &dyn Sign, timestamp: Option<i64>) -> Envelope {
            let seek = SeekInfo {
                start: Some(SeekPosition {
                    r#type: Some(Position::Oldest(SeekOldest {})),
                }),
                stop: Some(SeekPosition {
                    r#type: Some(Position::Newest(SeekNewest {})),
                }),
                ..SeekInfo::default()
            };
            let payload = Payload {
                header: Some(Header {
                    channel_header: ChannelHeader {
                        r#type: HeaderType::DeliverSeekInfo as i32,
                        channel_id: channel.to_owned(),
                        timestamp: timestamp
                            .map(|seconds| prost_types::Timestamp { seconds, nanos: 0 }),
                        ..ChannelHeader::default()
                    }
                    .encode_to_vec()
                    .into(),
                    signature_header: SignatureHeader {
                        creator: signer.identity(),
                        nonce: Bytes::from_static(b"0123456789abcdef01234567"),
                    }
                    .encode_to_vec()
                    .into(),
                }),
                data: seek.encode_to_vec().into(),
            }
            .encode_to_vec();
            Envelope {
                signature: signer.sign(&payload).unwrap().into(),
                payload: payload.into(),
            }
        }

        /// Sends one request and collects the responses up to its status.
        async fn request(
            client: &mut DeliverClient<tonic::transport::Channel>,
            envelope: Envelope,
            filtered: bool,
        ) -> Vec<ResponseType> {
            let requests = tokio_stream::iter(vec![envelope]);
            let mut stream = if filtered {
                client
                    .deliver_filtered(requests)
                    .await
                    .unwrap()
                    .into_inner()
            } else {
                client.deliver(requests).await.unwrap().into_inner()
            };
            let mut responses = Vec::new();
            while let Some(response) = stream.message().await.unwrap() {
                let response = response.r#type.unwrap();
                let done = matches!(response, ResponseType::Status(_));
                responses.push(response);
                if done {
                    break;
                }
            }
            responses
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn deliver_serves_committed_blocks_to_readers_only() {
            // Goal: a Fabric client of Org1 reads the committed ch10 chain,
            // whole and filtered with validation codes; an unknown channel is
            // NOT_FOUND and a creator the channel does not know is FORBIDDEN.
            let peer = Peer::new();
            let (state, ledger) = peer.stores();
            let mut committer =
                ChannelCommitter::create(block("ch10-block-0.block"), state, ledger).unwrap();
            commit_chain(&mut committer, 1..5);
            let channels = Channels::default();
            channels.insert("ch10", committer.handle());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(DeliverServer::new(DeliverService::new(channels)))
                    .serve_with_incoming(TcpListenerStream::new(listener)),
            );
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut client = DeliverClient::new(channel);
            let user = user1();

            let responses = request(&mut client, seek_envelope("ch10", &user), false).await;
            assert_eq!(responses.len(), 6);
            for (number, response) in responses[..5].iter().enumerate() {
                let ResponseType::Block(served) = response else {
                    panic!("{response:?}")
                };
                let stored = block(&format!("ch10-block-{number}.block"));
                assert_eq!(served.header, stored.header);
                assert_eq!(served.data, stored.data);
            }
            assert_eq!(responses[5], ResponseType::Status(Status::Success as i32));

            let responses = request(&mut client, seek_envelope("ch10", &user), true).await;
            let ResponseType::FilteredBlock(filtered) = &responses[3] else {
                panic!("{:?}", responses[3])
            };
            assert_eq!(filtered.number, 3);
            assert_eq!(filtered.filtered_transactions.len(), 10);
            assert!(
                filtered
                    .filtered_transactions
                    .iter()
                    .all(|tx| tx.tx_validation_code == 0 && tx.txid.len() == 64)
            );

            let responses = request(&mut client, seek_envelope("nochannel", &user), false).await;
            assert_eq!(responses, [ResponseType::Status(Status::NotFound as i32)]);
            let stranger =
                weft_msp::testing::TestOrg::new("Org1MSP").signer(weft_msp::NodeRole::Client);
            let responses = request(&mut client, seek_envelope("ch10", &stranger), false).await;
            assert_eq!(responses, [ResponseType::Status(Status::Forbidden as i32)]);

            // Fabric's time window (15 minutes by default): a request
            // without a timestamp, or one 16 minutes off this peer's clock
            // either way, is BAD_REQUEST.
            let now = weft_msp::now();
            for timestamp in [None, Some(now - 960), Some(now + 960)] {
                let stale = seek_envelope_at("ch10", &user, timestamp);
                let responses = request(&mut client, stale, false).await;
                assert_eq!(
                    responses,
                    [ResponseType::Status(Status::BadRequest as i32)],
                    "{timestamp:?}"
                );
            }

            // As Fabric's handler: a refused request ends its stream, so
            // the valid request sent after it is not answered.
            let requests = tokio_stream::iter([
                seek_envelope("nochannel", &user),
                seek_envelope("ch10", &user),
            ]);
            let mut stream = client.deliver(requests).await.unwrap().into_inner();
            let mut responses = Vec::new();
            while let Some(response) = stream.message().await.unwrap() {
                responses.push(response.r#type.unwrap());
            }
            assert_eq!(responses, [ResponseType::Status(Status::NotFound as i32)]);
        }

        /// A `kv` transaction by User1 whose chaincode set `event`, as an
        /// envelope's bytes (only its shape matters to filtering).
        fn kv_transaction(event: Option<ChaincodeEvent>) -> Bytes {
            let events = event.map(|e| e.encode_to_vec().into()).unwrap_or_default();
            kv_transaction_by(Bytes::new(), events, &[&user1()])
        }

        #[test]
        fn filtered_blocks_take_the_shape_fabric_gives_them() {
            // Goal: event listeners that read filtered blocks see what a
            // Fabric peer sends: a config transaction carries no actions;
            // an endorser transaction carries one chaincode action per
            // event its chaincode set, without the payload, and none for
            // an action without an event or with an event naming no
            // chaincode; validation codes come from the block's filter. A
            // transaction whose read/write set does not decode (committed
            // as BAD_RWSET) is listed too: only headers and events are
            // read, as Fabric reads them; and an action that carries no
            // endorsed action is skipped, as Fabric skips it.
            let event = |chaincode_id: &str| ChaincodeEvent {
                chaincode_id: chaincode_id.to_owned(),
                tx_id: "tx".to_owned(),
                event_name: "put".to_owned(),
                payload: Bytes::from_static(b"the key"),
            };
            let mut block = block("ch10-block-0.block");
            let config = block.data.as_ref().unwrap().data[0].clone();
            block.data.as_mut().unwrap().data = vec![
                config,
                kv_transaction(None),
                kv_transaction(Some(event("kv"))),
                kv_transaction(Some(event(""))),
                kv_transaction_by(
                    Bytes::from_static(b"\xff not a read/write set"),
                    Bytes::new(),
                    &[&user1()],
                ),
                with_an_empty_action(kv_transaction(Some(event("kv")))),
            ];
            block.metadata.as_mut().unwrap().metadata
                [BlockMetadataIndex::TransactionsFilter as usize] =
                Bytes::from_static(&[0, 0, 11, 0, 22, 0]);

            let filtered = crate::deliver::filtered("ch10", block);
            let shapes: Vec<_> = filtered
                .filtered_transactions
                .iter()
                .map(|tx| {
                    let events = tx.data.as_ref().map(|data| {
                        let FilteredData::TransactionActions(actions) = data;
                        actions
                            .chaincode_actions
                            .iter()
                            .map(|action| action.chaincode_event.clone().unwrap())
                            .collect::<Vec<_>>()
                    });
                    (tx.r#type, tx.tx_validation_code, events)
                })
                .collect();
            let endorser = HeaderType::EndorserTransaction as i32;
            let without_payload = ChaincodeEvent {
                payload: Bytes::new(),
                ..event("kv")
            };
            assert_eq!(
                shapes,
                [
                    (HeaderType::Config as i32, 0, None),
                    (endorser, 0, Some(vec![])),
                    (endorser, 11, Some(vec![without_payload.clone()])),
                    (endorser, 0, Some(vec![])),
                    (endorser, 22, Some(vec![])),
                    (endorser, 0, Some(vec![without_payload])),
                ]
            );
            assert_eq!(filtered.channel_id, "ch10");
        }

        /// `envelope` with a second action appended whose payload holds no
        /// endorsed action (the envelope's signature no longer matches,
        /// which filtering does not look at).
        fn with_an_empty_action(envelope: Bytes) -> Bytes {
            use weft_protos::protos::{ChaincodeActionPayload, Transaction, TransactionAction};
            let mut envelope = Envelope::decode(envelope).unwrap();
            let mut payload = Payload::decode(envelope.payload).unwrap();
            let mut transaction = Transaction::decode(payload.data).unwrap();
            let empty = ChaincodeActionPayload {
                chaincode_proposal_payload: Bytes::new(),
                action: None,
            };
            transaction.actions.push(TransactionAction {
                header: transaction.actions[0].header.clone(),
                payload: empty.encode_to_vec().into(),
            });
            payload.data = transaction.encode_to_vec().into();
            envelope.payload = payload.encode_to_vec().into();
            envelope.encode_to_vec().into()
        }
    }
}
