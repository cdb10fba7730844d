//! `_lifecycle`: Fabric's chaincode lifecycle system chaincode, writing
//! exactly what Fabric writes (docs/fabric-lifecycle.md), so that every
//! peer validates a chaincode with the policy its organisations agreed.
//!
//! - `ApproveChaincodeDefinitionForMyOrg`: an admin of this peer's
//!   organisation approves a definition; the approval goes to the
//!   organisation's implicit collection `_implicit_org_<MSP ID>` (the
//!   transaction carries the hashes; the endorsing peer keeps the values,
//!   see `chaincode/private.rs`); only the hashes matter to a later
//!   commit.
//! - `CommitChaincodeDefinition`: reads every organisation's approval
//!   hashes, requires this peer's organisation's, and writes the
//!   definition to the public `_lifecycle` state; the channel's
//!   `LifecycleEndorsement` policy over the endorsements decides whether
//!   enough organisations agreed.
//! - `QueryChaincodeDefinition`, `CheckCommitReadiness`: the committed
//!   definition, and which organisations approved a definition.
//!
//! - Outside any channel, for an admin of the peer's organisation:
//!   `InstallChaincode` of a chaincode-as-a-service package,
//!   `QueryInstalledChaincode(s)`, `GetInstalledChaincodePackage`
//!   ([`answer_installation`]). Once a definition is committed whose
//!   approval by this organisation names an installed package
//!   ([`approved_package`]), the endorser dials the address in the
//!   package's `connection.json`: no restart, as in Fabric.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message;
use weft_protos::hash::sha256;
use weft_protos::lifecycle::query_installed_chaincodes_result::InstalledChaincode;
use weft_protos::lifecycle::{
    ApproveChaincodeDefinitionForMyOrgArgs, ChaincodeEndorsementInfo, ChaincodeValidationInfo,
    CheckCommitReadinessArgs, CheckCommitReadinessResult, CommitChaincodeDefinitionArgs,
    GetInstalledChaincodePackageArgs, GetInstalledChaincodePackageResult, InstallChaincodeArgs,
    InstallChaincodeResult, QueryChaincodeDefinitionArgs, QueryChaincodeDefinitionResult,
    QueryInstalledChaincodeArgs, QueryInstalledChaincodeResult, QueryInstalledChaincodesResult,
    StateData, StateMetadata, chaincode_source, state_data,
};
use weft_protos::lifecycle::{query_installed_chaincode_result, query_installed_chaincodes_result};
use weft_protos::protos::application_policy::Type as PolicyType;
use weft_protos::protos::{ApplicationPolicy, CollectionConfigPackage, Response};

use weft_policy::collection::implicit_collection;
use weft_statedb::hashed_namespace;

use crate::chaincode::{Chaincode, StateError, Stub, error, key_hash, success};
use crate::package::{InstalledPackages, Package};

/// The namespace and name of the lifecycle chaincode.
pub const LIFECYCLE: &str = "_lifecycle";
const DEFAULT_ENDORSEMENT: &str = "/Channel/Application/Endorsement";
const PARAMETERS_FIELDS: [&str; 3] = ["EndorsementInfo", "ValidationInfo", "Collections"];
const DEFINITION_FIELDS: [&str; 4] = [
    "Sequence",
    "EndorsementInfo",
    "ValidationInfo",
    "Collections",
];

/// The `_lifecycle` system chaincode of a peer of `local_msp_id`.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    local_msp_id: String,
}

impl Lifecycle {
    pub fn new(local_msp_id: impl Into<String>) -> Self {
        Self {
            local_msp_id: local_msp_id.into(),
        }
    }
}

impl Chaincode for Lifecycle {
    fn invoke(&self, stub: &mut Stub<'_>) -> Response {
        let argument = stub.parameters().first().cloned().unwrap_or_default();
        let outcome = match stub.function() {
            "ApproveChaincodeDefinitionForMyOrg" => self.approve(stub, &argument),
            "CommitChaincodeDefinition" => self.commit(stub, &argument),
            "CheckCommitReadiness" => readiness(stub, &argument),
            "QueryChaincodeDefinition" => query(stub, &argument),
            other => Err(Failure::Usage(format!(
                "function {other:?} of _lifecycle is not supported by weft"
            ))),
        };
        match outcome {
            Ok(payload) => success(payload),
            Err(failure) => error(failure.to_string()),
        }
    }
}

/// Why a lifecycle call failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    State(#[from] StateError),
}

/// A definition's parameters, encoded as Fabric stores them.
struct Parameters {
    endorsement_info: Bytes,
    validation_info: Bytes,
    collections: Bytes,
}

impl Parameters {
    fn new(
        version: &str,
        init_required: bool,
        endorsement_plugin: &str,
        validation_plugin: &str,
        validation_parameter: &Bytes,
        collections: Option<&CollectionConfigPackage>,
    ) -> Self {
        let plugin =
            |given: &str, default: &str| if given.is_empty() { default } else { given }.to_owned();
        let validation_parameter = if validation_parameter.is_empty() {
            ApplicationPolicy {
                r#type: Some(PolicyType::ChannelConfigPolicyReference(
                    DEFAULT_ENDORSEMENT.to_owned(),
                )),
            }
            .encode_to_vec()
            .into()
        } else {
            validation_parameter.clone()
        };
        Self {
            endorsement_info: bytes_field(&ChaincodeEndorsementInfo {
                version: version.to_owned(),
                init_required,
                endorsement_plugin: plugin(endorsement_plugin, "escc"),
            }),
            validation_info: bytes_field(&ChaincodeValidationInfo {
                validation_plugin: plugin(validation_plugin, "vscc"),
                validation_parameter,
            }),
            collections: bytes_field(&collections.cloned().unwrap_or_default()),
        }
    }

    /// The three parameter fields, by name.
    fn fields(&self) -> [(&'static str, &Bytes); 3] {
        [
            ("EndorsementInfo", &self.endorsement_info),
            ("ValidationInfo", &self.validation_info),
            ("Collections", &self.collections),
        ]
    }
}

impl Lifecycle {
    fn approve(&self, stub: &mut Stub<'_>, argument: &Bytes) -> Result<Bytes, Failure> {
        let args = ApproveChaincodeDefinitionForMyOrgArgs::decode(argument.clone())
            .map_err(|e| Failure::Usage(format!("malformed approve arguments: {e}")))?;
        let channel = stub
            .channel()
            .ok_or_else(|| Failure::Usage("_lifecycle needs its channel".to_owned()))?;
        if !channel.is_admin(stub.creator(), &self.local_msp_id) {
            return Err(Failure::Usage(format!(
                "access denied: approving a definition needs an admin of {}",
                self.local_msp_id
            )));
        }
        let name = check_name(&args.name)?;
        // Approving the committed sequence again is allowed, as in Fabric.
        check_sequence(stub, name, args.sequence, true)?;
        let parameters = Parameters::new(
            &args.version,
            args.init_required,
            &args.endorsement_plugin,
            &args.validation_plugin,
            &args.validation_parameter,
            args.collections.as_ref(),
        );
        let package_id = match args.source.and_then(|source| source.r#type) {
            Some(chaincode_source::Type::LocalPackage(local)) => local.package_id,
            _ => String::new(),
        };
        let collection = implicit_collection(&self.local_msp_id);
        let versioned = format!("{name}#{}", args.sequence);
        // Fabric reads each metadata key before writing its fields.
        for space in ["namespaces", "chaincode-sources"] {
            stub.get_private_data_hash(&collection, &format!("{space}/metadata/{versioned}"))?;
        }
        stub.put_private_data(
            &collection,
            &format!("namespaces/metadata/{versioned}"),
            metadata("ChaincodeParameters", &PARAMETERS_FIELDS),
        )?;
        for (field, value) in parameters.fields() {
            stub.put_private_data(
                &collection,
                &format!("namespaces/fields/{versioned}/{field}"),
                value.clone(),
            )?;
        }
        stub.put_private_data(
            &collection,
            &format!("chaincode-sources/metadata/{versioned}"),
            metadata("ChaincodeLocalPackage", &["PackageID"]),
        )?;
        stub.put_private_data(
            &collection,
            &format!("chaincode-sources/fields/{versioned}/PackageID"),
            state_field(state_data::Type::String(package_id)),
        )?;
        Ok(Bytes::new())
    }

    fn commit(&self, stub: &mut Stub<'_>, argument: &Bytes) -> Result<Bytes, Failure> {
        let args = CommitChaincodeDefinitionArgs::decode(argument.clone())
            .map_err(|e| Failure::Usage(format!("malformed commit arguments: {e}")))?;
        let name = check_name(&args.name)?;
        check_sequence(stub, name, args.sequence, false)?;
        let parameters = Parameters::new(
            &args.version,
            args.init_required,
            &args.endorsement_plugin,
            &args.validation_plugin,
            &args.validation_parameter,
            args.collections.as_ref(),
        );
        let approvals = approvals(stub, name, args.sequence, &parameters)?;
        if approvals.get(&self.local_msp_id) != Some(&true) {
            return Err(Failure::Usage(format!(
                "chaincode definition not agreed to by this org ({})",
                self.local_msp_id
            )));
        }
        stub.put_state(
            &format!("namespaces/fields/{name}/Sequence"),
            state_field(state_data::Type::Int64(args.sequence)),
        )?;
        for (field, value) in parameters.fields() {
            stub.put_state(&format!("namespaces/fields/{name}/{field}"), value.clone())?;
        }
        stub.put_state(
            &format!("namespaces/metadata/{name}"),
            metadata("ChaincodeDefinition", &DEFINITION_FIELDS),
        )?;
        Ok(Bytes::new())
    }
}

/// Which organisations approved a definition.
fn readiness(stub: &mut Stub<'_>, argument: &Bytes) -> Result<Bytes, Failure> {
    let args = CheckCommitReadinessArgs::decode(argument.clone())
        .map_err(|e| Failure::Usage(format!("malformed readiness arguments: {e}")))?;
    let name = check_name(&args.name)?;
    let parameters = Parameters::new(
        &args.version,
        args.init_required,
        &args.endorsement_plugin,
        &args.validation_plugin,
        &args.validation_parameter,
        args.collections.as_ref(),
    );
    let approvals = approvals(stub, name, args.sequence, &parameters)?;
    Ok(CheckCommitReadinessResult {
        approvals,
        ..CheckCommitReadinessResult::default()
    }
    .encode_to_vec()
    .into())
}

/// The committed definition of a chaincode.
fn query(stub: &mut Stub<'_>, argument: &Bytes) -> Result<Bytes, Failure> {
    let args = QueryChaincodeDefinitionArgs::decode(argument.clone())
        .map_err(|e| Failure::Usage(format!("malformed query arguments: {e}")))?;
    let name = check_name(&args.name)?;
    let sequence = current_sequence(stub, name)?;
    if sequence == 0 {
        return Err(Failure::Usage(format!("namespace {name} is not defined")));
    }
    let field = |stub: &mut Stub<'_>, field: &str| -> Result<Bytes, Failure> {
        let stored = stub
            .get_state(&format!("namespaces/fields/{name}/{field}"))?
            .unwrap_or_default();
        match StateData::decode(stored).ok().and_then(|data| data.r#type) {
            Some(state_data::Type::Bytes(bytes)) => Ok(bytes),
            _ => Err(Failure::Usage(format!(
                "stored field {field} of {name} is malformed"
            ))),
        }
    };
    let endorsement = ChaincodeEndorsementInfo::decode(field(stub, "EndorsementInfo")?)
        .map_err(|e| Failure::Usage(format!("EndorsementInfo: {e}")))?;
    let validation = ChaincodeValidationInfo::decode(field(stub, "ValidationInfo")?)
        .map_err(|e| Failure::Usage(format!("ValidationInfo: {e}")))?;
    let collections = CollectionConfigPackage::decode(field(stub, "Collections")?)
        .map_err(|e| Failure::Usage(format!("Collections: {e}")))?;
    Ok(QueryChaincodeDefinitionResult {
        sequence,
        version: endorsement.version,
        endorsement_plugin: endorsement.endorsement_plugin,
        validation_plugin: validation.validation_plugin,
        validation_parameter: validation.validation_parameter,
        collections: Some(collections),
        init_required: endorsement.init_required,
        approvals: BTreeMap::new(),
    }
    .encode_to_vec()
    .into())
}

/// Each application organisation's approval of `name` at `sequence` with
/// `parameters`: its stored hashes equal those of the expected values.
fn approvals(
    stub: &mut Stub<'_>,
    name: &str,
    sequence: i64,
    parameters: &Parameters,
) -> Result<BTreeMap<String, bool>, Failure> {
    let organisations = stub
        .channel()
        .ok_or_else(|| Failure::Usage("_lifecycle needs its channel".to_owned()))?
        .organisations();
    let versioned = format!("{name}#{sequence}");
    let mut expected: Vec<(String, Bytes)> = parameters
        .fields()
        .iter()
        .map(|(field, value)| {
            (
                format!("namespaces/fields/{versioned}/{field}"),
                (*value).clone(),
            )
        })
        .collect();
    expected.push((
        format!("namespaces/metadata/{versioned}"),
        metadata("ChaincodeParameters", &PARAMETERS_FIELDS),
    ));
    let mut approvals = BTreeMap::new();
    for msp_id in organisations {
        let collection = implicit_collection(&msp_id);
        let mut approved = true;
        for (key, value) in &expected {
            let stored = stub.get_private_data_hash(&collection, key)?;
            approved &= stored.as_deref() == Some(&sha256(value)[..]);
        }
        approvals.insert(msp_id, approved);
    }
    Ok(approvals)
}

/// Checks that `requested` is the next sequence of `name` (or, when
/// `current_allowed`, the committed one), reading what Fabric reads for
/// it: the sequence, the definition's metadata and the legacy `lscc` entry.
fn check_sequence(
    stub: &mut Stub<'_>,
    name: &str,
    requested: i64,
    current_allowed: bool,
) -> Result<(), Failure> {
    let current = current_sequence(stub, name)?;
    stub.get_state(&format!("namespaces/metadata/{name}"))?;
    stub.get_state_of("lscc", name)?;
    let acceptable = requested == current + 1 || (current_allowed && requested == current);
    if requested < 1 || !acceptable {
        return Err(Failure::Usage(format!(
            "requested sequence is {requested}, but new definition must be sequence {}",
            current + 1
        )));
    }
    Ok(())
}

/// The package this organisation approved for the definition of `name`
/// committed in `state`, among the `installed` ones: the one whose
/// `PackageID` field hashes to what the organisation's implicit
/// collection holds for the committed sequence (weft keeps the hashes of
/// private data, not the values). `None` if `name` is not defined, or the
/// organisation approved no installed package for it. Also returns the
/// committed sequence, which the caller may cache against.
pub fn approved_package(
    state: &dyn weft_statedb::StateReader,
    local_msp_id: &str,
    name: &str,
    installed: &[Package],
) -> Option<(i64, Package)> {
    let stored = state
        .get(LIFECYCLE, &format!("namespaces/fields/{name}/Sequence"))
        .ok()??;
    let Some(state_data::Type::Int64(sequence)) = StateData::decode(stored.value)
        .ok()
        .and_then(|data| data.r#type)
    else {
        return None;
    };
    let namespace = hashed_namespace(LIFECYCLE, &implicit_collection(local_msp_id));
    let key = format!("chaincode-sources/fields/{name}#{sequence}/PackageID");
    let approved = state.get(&namespace, &key_hash(&key)).ok()??;
    installed
        .iter()
        .find(|package| {
            let field = state_field(state_data::Type::String(package.id.clone()));
            weft_protos::hash::sha256(&field)[..] == approved.value[..]
        })
        .map(|package| (sequence, package.clone()))
}

/// The chaincodes defined in `state` (a channel's) that run `package`
/// for this organisation: their names and versions, as
/// `QueryInstalledChaincode`'s references list them.
fn references(
    state: &dyn weft_statedb::StateReader,
    local_msp_id: &str,
    package: &Package,
) -> Vec<(String, String)> {
    // Every `namespaces/fields/<name>/Sequence` key: '0' follows '/'.
    let Ok(fields) = state.range(
        LIFECYCLE,
        "namespaces/fields/",
        "namespaces/fields0",
        100_000,
    ) else {
        return Vec::new();
    };
    let installed = std::slice::from_ref(package);
    fields
        .iter()
        .filter_map(|(key, _)| {
            key.strip_prefix("namespaces/fields/")?
                .strip_suffix("/Sequence")
        })
        .filter(|name| approved_package(state, local_msp_id, name, installed).is_some())
        .map(|name| {
            let version = state
                .get(
                    LIFECYCLE,
                    &format!("namespaces/fields/{name}/EndorsementInfo"),
                )
                .ok()
                .flatten()
                .and_then(|stored| StateData::decode(stored.value).ok()?.r#type)
                .and_then(|field| match field {
                    state_data::Type::Bytes(bytes) => ChaincodeEndorsementInfo::decode(bytes).ok(),
                    _ => None,
                })
                .map(|info| info.version)
                .unwrap_or_default();
            (name.to_owned(), version)
        })
        .collect()
}

/// `package`'s references on each of `channels` (ID and world state), by
/// channel, as the result message wants them: `chaincode` builds one
/// chaincode of a name and version, `references` a channel's list. The
/// two installed-chaincode results each have their own such types.
fn references_by_channel<C, R>(
    channels: &[(
        String,
        Box<dyn weft_statedb::StateReader + Send + Sync + '_>,
    )],
    local_msp_id: &str,
    package: &Package,
    chaincode: impl Fn(String, String) -> C,
    references: impl Fn(Vec<C>) -> R,
) -> BTreeMap<String, R> {
    channels
        .iter()
        .filter_map(|(channel_id, state)| {
            let found = self::references(state.as_ref(), local_msp_id, package);
            (!found.is_empty()).then(|| {
                let chaincodes = found
                    .into_iter()
                    .map(|(name, version)| chaincode(name, version))
                    .collect();
                (channel_id.clone(), references(chaincodes))
            })
        })
        .collect()
}

/// The `_lifecycle` functions a peer answers outside any channel, for an
/// admin of its organisation (`local_msp_id`): installing chaincode
/// packages and querying them. `packages` holds what is installed;
/// `channels` (ID and world state) are where references are looked for.
pub fn answer_installation(
    packages: &InstalledPackages,
    local_msp_id: &str,
    channels: &[(
        String,
        Box<dyn weft_statedb::StateReader + Send + Sync + '_>,
    )],
    function: &str,
    argument: &Bytes,
) -> Result<Bytes, String> {
    let malformed = |e: prost::DecodeError| format!("malformed {function} arguments: {e}");
    let installed = |id: &str| {
        packages
            .get(id)
            .ok_or_else(|| format!("chaincode install package '{id}' not found"))
    };
    Ok(match function {
        "InstallChaincode" => {
            let args = InstallChaincodeArgs::decode(argument.clone()).map_err(malformed)?;
            let package = packages
                .install(args.chaincode_install_package)
                .map_err(|e| format!("could not install the chaincode package: {e}"))?;
            InstallChaincodeResult {
                package_id: package.id,
                label: package.label,
            }
            .encode_to_vec()
        }
        "QueryInstalledChaincode" => {
            let args = QueryInstalledChaincodeArgs::decode(argument.clone()).map_err(malformed)?;
            let package = installed(&args.package_id)?;
            let references = references_by_channel(
                channels,
                local_msp_id,
                &package,
                |name, version| query_installed_chaincode_result::Chaincode { name, version },
                |chaincodes| query_installed_chaincode_result::References { chaincodes },
            );
            QueryInstalledChaincodeResult {
                references,
                package_id: package.id,
                label: package.label,
            }
            .encode_to_vec()
        }
        "QueryInstalledChaincodes" => QueryInstalledChaincodesResult {
            installed_chaincodes: packages
                .all()
                .into_iter()
                .map(|package| InstalledChaincode {
                    references: references_by_channel(
                        channels,
                        local_msp_id,
                        &package,
                        |name, version| query_installed_chaincodes_result::Chaincode {
                            name,
                            version,
                        },
                        |chaincodes| query_installed_chaincodes_result::References { chaincodes },
                    ),
                    package_id: package.id,
                    label: package.label,
                })
                .collect(),
        }
        .encode_to_vec(),
        "GetInstalledChaincodePackage" => {
            let args =
                GetInstalledChaincodePackageArgs::decode(argument.clone()).map_err(malformed)?;
            GetInstalledChaincodePackageResult {
                chaincode_install_package: installed(&args.package_id)?.bytes,
            }
            .encode_to_vec()
        }
        other => {
            return Err(format!(
                "function {other:?} of _lifecycle needs a channel (or is not supported by weft)"
            ));
        }
    }
    .into())
}

/// The committed sequence of `name` (0: not defined), recorded as read.
fn current_sequence(stub: &mut Stub<'_>, name: &str) -> Result<i64, Failure> {
    let stored = stub.get_state(&format!("namespaces/fields/{name}/Sequence"))?;
    let Some(stored) = stored else {
        return Ok(0);
    };
    match StateData::decode(stored).ok().and_then(|data| data.r#type) {
        Some(state_data::Type::Int64(sequence)) => Ok(sequence),
        _ => Err(Failure::Usage(format!(
            "the stored sequence of {name} is malformed"
        ))),
    }
}

/// Fabric's rule for chaincode names.
fn check_name(name: &str) -> Result<&str, Failure> {
    let valid = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
    if valid && name != LIFECYCLE {
        Ok(name)
    } else {
        Err(Failure::Usage(format!("invalid chaincode name {name:?}")))
    }
}

fn metadata(datatype: &str, fields: &[&str]) -> Bytes {
    StateMetadata {
        datatype: datatype.to_owned(),
        fields: fields.iter().map(|field| (*field).to_owned()).collect(),
    }
    .encode_to_vec()
    .into()
}

fn state_field(value: state_data::Type) -> Bytes {
    StateData {
        r#type: Some(value),
    }
    .encode_to_vec()
    .into()
}

fn bytes_field(message: &impl Message) -> Bytes {
    state_field(state_data::Type::Bytes(message.encode_to_vec().into()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::path::PathBuf;

    use weft_protos::common::{Block, Envelope, Payload};
    use weft_protos::kvrwset::HashedRwSet;
    use weft_protos::protos::{
        ChaincodeAction, ChaincodeActionPayload, Proposal, ProposalResponsePayload, SignedProposal,
        Transaction,
    };
    use weft_protos::rwset::TxReadWriteSet;
    use weft_protos::tx::ReceivedProposal;
    use weft_statedb::memory::{MemoryOptions, MemoryState};
    use weft_statedb::{Height, UpdateBatch, VersionedState};

    use super::*;
    use crate::chaincode::ChannelView;

    /// The ch10 channel as its `_lifecycle` sees it: one organisation,
    /// whose admin proposed the fixture's lifecycle transactions.
    struct Ch10;

    impl ChannelView for Ch10 {
        fn organisations(&self) -> Vec<String> {
            vec!["Org1MSP".to_owned()]
        }

        fn is_admin(&self, _creator: &Bytes, msp_id: &str) -> bool {
            msp_id == "Org1MSP"
        }

        fn creator_satisfies(
            &self,
            _creator: &Bytes,
            _policy: &weft_policy::SignaturePolicy,
        ) -> bool {
            false
        }
    }

    /// The proposal of the fixture block's only transaction, and the
    /// read/write set Fabric's peer endorsed for it.
    fn fabric_transaction(number: u64) -> (ReceivedProposal, TxReadWriteSet) {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
            "../../tests/fixtures/fabric-2.5/ch10-block-{number}.block"
        ));
        let block = Block::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
        let envelope = Envelope::decode(block.data.unwrap().data[0].clone()).unwrap();
        let payload = Payload::decode(envelope.payload).unwrap();
        let transaction = Transaction::decode(payload.data).unwrap();
        let action =
            ChaincodeActionPayload::decode(transaction.actions[0].payload.clone()).unwrap();
        let endorsed = action.action.unwrap();
        let response = ProposalResponsePayload::decode(endorsed.proposal_response_payload).unwrap();
        let results = ChaincodeAction::decode(response.extension).unwrap().results;
        let proposal = Proposal {
            header: payload.header.unwrap().encode_to_vec().into(),
            payload: action.chaincode_proposal_payload,
            extension: Bytes::new(),
        };
        let signed = SignedProposal {
            proposal_bytes: proposal.encode_to_vec().into(),
            signature: Bytes::new(),
        };
        (
            ReceivedProposal::decode(&signed).unwrap(),
            TxReadWriteSet::decode(results).unwrap(),
        )
    }

    /// The world state after the genesis block: empty.
    fn genesis_state() -> (tempfile::TempDir, MemoryState) {
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        state.apply(&UpdateBatch::new(), Height::new(0, 0)).unwrap();
        (dir, state)
    }

    fn run(proposal: &ReceivedProposal, state: &MemoryState) -> (Response, TxReadWriteSet) {
        let snapshot = state.snapshot();
        let mut stub = Stub::new(proposal, LIFECYCLE, snapshot.as_ref()).with_channel(&Ch10);
        let response = Lifecycle::new("Org1MSP").invoke(&mut stub);
        let (results, _) = stub.results();
        (response, TxReadWriteSet::decode(results).unwrap())
    }

    #[test]
    fn approve_and_commit_write_what_fabric_wrote_byte_for_byte() {
        // Goal: the lifecycle transactions of the real Fabric chain (ch10
        // blocks 1 and 2), simulated by weft's _lifecycle on the state
        // Fabric's peer had, give the very read/write sets Fabric's peer
        // endorsed: hashes of the private approval, the public definition.
        let (_dir, state) = genesis_state();
        let (approve, fabric_approval) = fabric_transaction(1);
        let (response, ours) = run(&approve, &state);
        assert_eq!(response.status, 200, "{}", response.message);
        assert_eq!(ours, fabric_approval);

        // Block 1 committed: the approval's hashes are in the state.
        let mut batch = UpdateBatch::new();
        for namespace in &fabric_approval.ns_rwset {
            for collection in &namespace.collection_hashed_rwset {
                let hashed = HashedRwSet::decode(collection.hashed_rwset.clone()).unwrap();
                for write in hashed.hashed_writes {
                    batch.put(
                        &hashed_namespace(&namespace.namespace, &collection.collection_name),
                        &hex::encode(&write.key_hash),
                        write.value_hash,
                        Height::new(1, 0),
                    );
                }
            }
        }
        state.apply(&batch, Height::new(1, 0)).unwrap();
        let (commit, fabric_definition) = fabric_transaction(2);
        let (response, ours) = run(&commit, &state);
        assert_eq!(response.status, 200, "{}", response.message);
        assert_eq!(ours, fabric_definition);
    }

    #[test]
    fn a_commit_without_this_organisations_approval_is_refused() {
        let (_dir, state) = genesis_state();
        let (commit, _) = fabric_transaction(2);
        let (response, _) = run(&commit, &state);
        assert_eq!(response.status, 500);
        assert!(
            response.message.contains("not agreed to by this org"),
            "{}",
            response.message
        );
    }
}
