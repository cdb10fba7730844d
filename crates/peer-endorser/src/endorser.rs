//! `ProcessProposal`: a signed proposal checked as Fabric's endorser checks
//! it, simulated by its chaincode on a snapshot of the channel's world
//! state, and endorsed with the peer's identity.
//!
//! Checks, in Fabric's order: the proposal decodes; it is an
//! ENDORSER_TRANSACTION for a channel this peer has joined; its TxID is
//! the one its nonce and creator give; the creator is a valid member whose
//! signature verifies; the creator satisfies the channel's
//! `/Channel/Application/Writers` (Fabric's default ACL for `peer/Propose`);
//! the TxID is not already in the ledger; the chaincode exists. A refusal
//! is a `ProposalResponse` with status 500 and a message, as Fabric
//! answers; so is a chaincode that fails or panics. A chaincode response of
//! 400 or more is returned without an endorsement.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::RwLock;
use prost::Message;
use weft_ledger::BlockStore;
use weft_msp::UnixTime;
use weft_protos::common::{ChannelHeader, Header, HeaderType};
use weft_protos::hash::compute_tx_id;
use weft_protos::protos::{ChaincodeId, Proposal, ProposalResponse, Response, SignedProposal};
use weft_protos::tx::{ReceivedProposal, Sign, SimulationResult, endorse};
use weft_statedb::VersionedState;

use crate::chaincode::{Callees, Chaincode, ChannelView, PrivateWrites, Stub};
use crate::external::{ExternalChaincode, ExternalConfig};
use crate::metrics::{EndorserMetrics, ProposalTrace};
use crate::package::InstalledPackages;

/// The policy a proposer must satisfy (Fabric's default ACL for
/// `peer/Propose`).
const PROPOSER_POLICY: &str = "/Channel/Application/Writers";
/// The chaincode version weft reports for built-ins.
const BUILTIN_VERSION: &str = "1.0";
/// The version Fabric reports for system chaincodes (`_lifecycle`).
const SYSTEM_VERSION: &str = "syscc";

/// What the endorser needs of a channel the peer has joined. The peer's
/// committer provides it; the endorser never validates or commits blocks.
pub trait JoinedChannel: ChannelView + Send + Sync {
    /// Checks that `creator` is a valid member of the channel, that its
    /// signature over `data` verifies and that it satisfies the channel
    /// policy at `policy` (the signature is verified once); the error says
    /// why not.
    fn check_signer(
        &self,
        policy: &str,
        creator: &Bytes,
        data: &Bytes,
        signature: &Bytes,
        now: UnixTime,
    ) -> Result<(), String>;

    /// Whether endorsements by one peer of each of `organisations` (MSP
    /// IDs) would satisfy the endorsement policy of `chaincode`.
    fn satisfies_endorsement(&self, chaincode: &str, organisations: &[String]) -> bool;

    /// The channel's world state, to simulate on a snapshot of it.
    fn state(&self) -> &dyn VersionedState;

    /// The channel's committed blocks: replayed TxIDs, commit status,
    /// events.
    fn blocks(&self) -> &Arc<BlockStore>;

    /// The height of the blocks whose writes are in the state: a block
    /// below it is committed in full.
    fn committed_height(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Keeps the private writes of endorsed transaction `tx_id` until its
    /// block commits (the transient store), and hands them to the other
    /// peers the collections' dissemination settings ask for; the error
    /// says why the endorsement cannot be given.
    fn keep_private_writes(&self, tx_id: &str, writes: &PrivateWrites) -> Result<(), String>;

    /// Whether the peers of organisation `msp_id` keep the private values
    /// of `collection` of chaincode `namespace` (it is a member of it).
    fn is_collection_member(&self, namespace: &str, collection: &str, msp_id: &str) -> bool;
}

/// The peer's endorser: its channels, chaincodes and signing identity.
pub struct Endorser {
    channels: RwLock<HashMap<String, Arc<dyn JoinedChannel>>>,
    chaincodes: HashMap<String, Arc<dyn Chaincode>>,
    signer: Arc<dyn Sign + Send + Sync>,
    now: fn() -> UnixTime,
    metrics: Option<EndorserMetrics>,
    installed: Option<Installed>,
    /// How long a proposal asked after a height waits for this peer to
    /// reach it ([`Endorser::answer_at_height`]).
    catch_up_timeout: Duration,
    /// Per channel, the height of the last wait that ran out: asks beyond
    /// it are refused at once until the peer has reached it.
    gave_up_at: parking_lot::Mutex<HashMap<String, u64>>,
}

/// This peer had not committed the blocks a Gateway asked it to endorse
/// after ([`Endorser::answer_at_height`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behind {
    /// Blocks this peer has committed.
    pub reached: u64,
    /// Blocks the asking Gateway's peer had committed.
    pub asked: u64,
}

/// Chaincode installed through `_lifecycle` and run once defined.
struct Installed {
    packages: Arc<InstalledPackages>,
    /// The peer's own organisation, as its MSP folder defines it: whose
    /// admins may install.
    local_msp: weft_msp::MspManager,
    local_msp_id: String,
    runtime: tokio::runtime::Handle,
    /// The chaincodes dialled so far, by channel and name.
    running: parking_lot::Mutex<HashMap<(String, String), Running>>,
}

/// An installed chaincode being run: the definition sequence and package
/// it was resolved for.
struct Running {
    sequence: i64,
    package_id: String,
    chaincode: Arc<dyn Chaincode>,
}

impl std::fmt::Debug for Endorser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endorser")
            .field("channels", &self.channels.read().keys().collect::<Vec<_>>())
            .field("chaincodes", &self.chaincodes.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Endorser {
    /// An endorser signing with `signer`, running `chaincodes` (by name)
    /// on every channel.
    pub fn new<Name: Into<String>>(
        signer: Arc<dyn Sign + Send + Sync>,
        chaincodes: impl IntoIterator<Item = (Name, Arc<dyn Chaincode>)>,
    ) -> Self {
        Self {
            channels: RwLock::new(HashMap::new()),
            chaincodes: chaincodes
                .into_iter()
                .map(|(name, chaincode)| (name.into(), chaincode))
                .collect(),
            signer,
            now: weft_msp::now,
            metrics: None,
            installed: None,
            catch_up_timeout: CATCH_UP_TIMEOUT_DEFAULT,
            gave_up_at: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// Bounds the wait of [`Endorser::answer_at_height`] (default
    /// [`CATCH_UP_TIMEOUT_DEFAULT`]).
    pub fn with_catch_up_timeout(mut self, timeout: Duration) -> Self {
        self.catch_up_timeout = timeout;
        self
    }

    /// Installs chaincode packages into `packages` for admins of the
    /// peer's own organisation, `local_msp` (proposals to `_lifecycle`
    /// outside any channel, answered whether or not the peer has joined a
    /// channel, as Fabric's peer checks them against its local MSP), and
    /// runs a chaincode whose committed definition this organisation
    /// approved with an installed package, dialling its server through
    /// `runtime`.
    pub fn with_installed_packages(
        mut self,
        packages: Arc<InstalledPackages>,
        local_msp: weft_msp::Msp,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        self.installed = Some(Installed {
            packages,
            local_msp_id: local_msp.id().to_owned(),
            local_msp: weft_msp::MspManager::new([local_msp]),
            runtime,
            running: parking_lot::Mutex::default(),
        });
        self
    }

    /// The chaincode `name` on `channel`: built in or configured, or else
    /// installed and defined (dialled on first use, and again when a new
    /// definition names another package).
    fn chaincode_for(
        &self,
        channel_id: &str,
        channel: &dyn JoinedChannel,
        name: &str,
    ) -> Option<Arc<dyn Chaincode>> {
        if let Some(chaincode) = self.chaincodes.get(name) {
            return Some(chaincode.clone());
        }
        let installed = self.installed.as_ref()?;
        let snapshot = channel.state().snapshot();
        let (sequence, package) = crate::lifecycle::approved_package(
            snapshot.as_ref(),
            &installed.local_msp_id,
            name,
            &installed.packages.all(),
        )?;
        let key = (channel_id.to_owned(), name.to_owned());
        let mut running = installed.running.lock();
        if let Some(known) = running.get(&key)
            && known.sequence == sequence
            && known.package_id == package.id
        {
            return Some(known.chaincode.clone());
        }
        let config = ExternalConfig {
            dial_timeout: package.dial_timeout,
            tls: package.tls.clone(),
            ..ExternalConfig::new(name, &package.address)
        };
        tracing::info!(channel = channel_id, chaincode = name, sequence, package_id = %package.id, address = %package.address, "running an installed chaincode");
        let chaincode: Arc<dyn Chaincode> =
            Arc::new(ExternalChaincode::new(config, installed.runtime.clone()));
        running.insert(
            key,
            Running {
                sequence,
                package_id: package.id,
                chaincode: chaincode.clone(),
            },
        );
        Some(chaincode)
    }

    /// Answers a proposal outside any channel (its TxID already checked):
    /// `_lifecycle`'s package installation and queries, for an admin of
    /// this peer's organisation (checked against the peer's local MSP,
    /// with a valid signature). The answer carries no endorsement, as
    /// Fabric's.
    fn answer_outside_channels(
        &self,
        proposal: &ReceivedProposal,
        signed: &SignedProposal,
    ) -> Result<ProposalResponse, String> {
        if proposal.chaincode_id.name != crate::lifecycle::LIFECYCLE {
            return Err("channel \"\" not found: only _lifecycle answers outside a channel".into());
        }
        let installed = self
            .installed
            .as_ref()
            .ok_or("this peer does not install chaincode packages")?;
        let creator = &proposal.signature_header.creator;
        let identity = installed
            .local_msp
            .deserialize(creator, (self.now)())
            .map_err(|e| {
                format!(
                    "access denied: installing and querying chaincode packages needs an admin of {}: {e}",
                    installed.local_msp_id
                )
            })?;
        identity
            .verify(&signed.proposal_bytes, &signed.signature)
            .map_err(|e| format!("access denied: the creator's signature does not verify: {e}"))?;
        if !identity.is_admin() {
            return Err(format!(
                "access denied: installing and querying chaincode packages needs an admin of {}",
                installed.local_msp_id
            ));
        }
        let function = proposal
            .args
            .first()
            .map(|name| String::from_utf8_lossy(name).into_owned())
            .unwrap_or_default();
        let argument = proposal.args.get(1).cloned().unwrap_or_default();
        let joined: Vec<(String, Arc<dyn JoinedChannel>)> = self
            .channels
            .read()
            .iter()
            .map(|(id, channel)| (id.clone(), channel.clone()))
            .collect();
        let states: Vec<_> = joined
            .iter()
            .map(|(id, channel)| (id.clone(), channel.state().snapshot()))
            .collect();
        let payload = crate::lifecycle::answer_installation(
            &installed.packages,
            &installed.local_msp_id,
            &states,
            &function,
            &argument,
        )?;
        Ok(ProposalResponse {
            version: 1,
            response: Some(Response {
                status: 200,
                message: String::new(),
                payload,
            }),
            ..ProposalResponse::default()
        })
    }

    /// Reports every answered proposal to `metrics`.
    pub fn with_metrics(mut self, metrics: EndorserMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Endorses proposals on `channel_id` from now on.
    pub fn join(&self, channel_id: &str, channel: Arc<dyn JoinedChannel>) {
        self.channels.write().insert(channel_id.to_owned(), channel);
    }

    /// The channel `channel_id`, if the peer has joined it.
    pub fn channel(&self, channel_id: &str) -> Option<Arc<dyn JoinedChannel>> {
        self.channels.read().get(channel_id).cloned()
    }

    /// Answers one signed proposal, as `protos.Endorser/ProcessProposal`.
    ///
    /// **Where the work runs.** Checks, simulation and signing run on the
    /// task that received the proposal: a tenth of a millisecond or two,
    /// where handing every proposal to the blocking pool grew the peer to
    /// hundreds of threads under load and spent a sixth of its CPU on
    /// switching between them. Two kinds go to the blocking pool: an
    /// external chaincode's invocation, which waits on its server
    /// ([`Chaincode::runs_remotely`]), and a proposal of more than
    /// [`INLINE_PROPOSAL_BYTES_MAX`], whose hashing alone would hold up the
    /// tasks sharing the thread. A panic in any of it is answered as a
    /// refusal, as a chaincode's is.
    pub async fn answer(self: &Arc<Self>, signed: SignedProposal) -> ProposalResponse {
        let received = Instant::now();
        let mut trace = ProposalTrace::default();
        if signed.proposal_bytes.len() > INLINE_PROPOSAL_BYTES_MAX {
            let endorser = self.clone();
            return self
                .off_task(move || {
                    let answer =
                        unpanicked(|| match endorser.check(&signed, &mut trace, received)? {
                            Step::Execute(checked) => endorser.execute(*checked, &mut trace),
                            Step::Answered(response) => Ok(*response),
                        });
                    endorser.finish(answer, &trace, received)
                })
                .await;
        }
        let checked = match unpanicked(|| self.check(&signed, &mut trace, received)) {
            Ok(Step::Execute(checked)) => *checked,
            Ok(Step::Answered(response)) => return self.finish(Ok(*response), &trace, received),
            Err(message) => return self.finish(Err(message), &trace, received),
        };
        if checked.chaincode.runs_remotely() {
            let endorser = self.clone();
            return self
                .off_task(move || {
                    let answer = unpanicked(|| endorser.execute(checked, &mut trace));
                    endorser.finish(answer, &trace, received)
                })
                .await;
        }
        let answer = unpanicked(|| self.execute(checked, &mut trace));
        self.finish(answer, &trace, received)
    }

    /// Answers `signed` as [`Endorser::answer`] does, once this peer has
    /// committed `height` blocks of the proposal's channel; refused
    /// ([`Behind`]) when it has not within
    /// [`Endorser::with_catch_up_timeout`].
    ///
    /// Another organisation's Gateway asks this way after its own peer
    /// committed `height` blocks: its client may just have seen a
    /// transaction committed there and now proposes one that reads what
    /// it wrote. This peer, a block behind, would simulate on older state,
    /// and the two endorsements would disagree. A peer that does not get
    /// there in time (far behind, catching up after a restart) refuses,
    /// and the Gateway asks another peer of the organisation, or this one
    /// again without a height, to be answered where it is, as Fabric's
    /// peer always answers. Once a wait has run out, asks beyond the
    /// height it waited for are refused at once until the peer has reached
    /// it, so that a peer far behind costs each Gateway one wait, not one
    /// per proposal. A proposal that names no channel this peer has joined
    /// is answered at once (it is refused).
    pub async fn answer_at_height(
        self: &Arc<Self>,
        signed: SignedProposal,
        height: u64,
    ) -> Result<ProposalResponse, Behind> {
        let joined = proposed_channel(&signed).and_then(|id| Some((self.channel(&id)?, id)));
        if let Some((channel, channel_id)) = joined {
            let mut committed = channel.committed_height();
            let reached = *committed.borrow_and_update();
            if reached < height {
                let gave_up_at = self.gave_up_at.lock().get(&channel_id).copied();
                if gave_up_at.is_some_and(|at| reached < at) {
                    return Err(Behind {
                        reached,
                        asked: height,
                    });
                }
                let caught_up = tokio::time::timeout(
                    self.catch_up_timeout,
                    committed.wait_for(|&reached| reached >= height),
                )
                .await
                .is_ok_and(|reached| reached.is_ok());
                if !caught_up {
                    let reached = *committed.borrow();
                    tracing::info!(
                        channel = %channel_id,
                        reached,
                        asked = height,
                        waited_ms = self.catch_up_timeout.as_millis() as u64,
                        "refusing to endorse below the height the asking Gateway's peer had \
                         committed, until this peer has reached it"
                    );
                    self.gave_up_at.lock().insert(channel_id, height);
                    return Err(Behind {
                        reached,
                        asked: height,
                    });
                }
            }
        }
        Ok(self.answer(signed).await)
    }

    /// Runs `answer` (which logs and counts its response) on the blocking
    /// pool; it completes even if the client stops waiting.
    async fn off_task(
        &self,
        answer: impl FnOnce() -> ProposalResponse + Send + 'static,
    ) -> ProposalResponse {
        tokio::task::spawn_blocking(answer)
            .await
            .unwrap_or_else(|e| refusal(format!("the endorsement task failed: {e}")))
    }

    /// The response to a proposal, logged and counted.
    fn finish(
        &self,
        answer: Result<ProposalResponse, String>,
        trace: &ProposalTrace,
        received: Instant,
    ) -> ProposalResponse {
        let response = answer.unwrap_or_else(|message| {
            tracing::info!(%message, "proposal refused");
            refusal(message)
        });
        if let Some(metrics) = &self.metrics {
            let endorsed = response.endorsement.is_some();
            metrics.proposal_answered(trace, endorsed, received.elapsed());
        }
        response
    }

    /// Fabric's checks before simulation: the proposal decodes, carries a
    /// TxID its nonce and creator give, is for a joined channel (or else
    /// is answered outside channels), is signed by a member allowed to
    /// propose, is not a replay, and names a chaincode this peer runs.
    fn check(
        &self,
        signed: &SignedProposal,
        trace: &mut ProposalTrace,
        received: Instant,
    ) -> Result<Step, String> {
        let proposal =
            ReceivedProposal::decode(signed).map_err(|e| format!("malformed proposal: {e}"))?;
        let header = &proposal.channel_header;
        if header.r#type != HeaderType::EndorserTransaction as i32 {
            return Err(format!(
                "invalid header type {}: a proposal is an ENDORSER_TRANSACTION",
                header.r#type
            ));
        }
        let channel_id = header.channel_id.as_str();
        trace.channel = channel_id.to_owned();
        trace.chaincode = proposal.chaincode_id.name.clone();
        let creator = &proposal.signature_header.creator;
        let expected_tx_id = compute_tx_id(&proposal.signature_header.nonce, creator);
        if header.tx_id != expected_tx_id {
            return Err(format!(
                "invalid txID {:?}: the nonce and creator give {expected_tx_id}",
                header.tx_id
            ));
        }
        if channel_id.is_empty() {
            return Ok(Step::Answered(Box::new(
                self.answer_outside_channels(&proposal, signed)?,
            )));
        }
        let channel = self
            .channels
            .read()
            .get(channel_id)
            .cloned()
            .ok_or_else(|| format!("channel {channel_id:?} not found"))?;
        let now = (self.now)();
        channel
            .check_signer(
                PROPOSER_POLICY,
                creator,
                &signed.proposal_bytes,
                &signed.signature,
                now,
            )
            .map_err(|reason| format!("access denied: channel {channel_id}: {reason}"))?;
        let replayed = channel
            .blocks()
            .contains_tx_id(&header.tx_id)
            .map_err(|e| format!("reading the ledger failed: {e}"))?;
        if replayed {
            return Err(format!("duplicate transaction found [{}]", header.tx_id));
        }
        let name = proposal.chaincode_id.name.as_str();
        let chaincode = self
            .chaincode_for(channel_id, channel.as_ref(), name)
            .ok_or_else(|| {
                format!("chaincode definition for {name:?} not found on channel {channel_id}")
            })?;
        let checked_at = Instant::now();
        trace.check = checked_at - received;
        Ok(Step::Execute(Box::new(Checked {
            proposal,
            channel,
            chaincode,
            checked_at,
        })))
    }

    /// Simulates a checked proposal on a snapshot of the world state and
    /// endorses the result.
    fn execute(
        &self,
        checked: Checked,
        trace: &mut ProposalTrace,
    ) -> Result<ProposalResponse, String> {
        let Checked {
            proposal,
            channel,
            chaincode,
            checked_at,
        } = checked;
        let name = proposal.chaincode_id.name.as_str();
        let snapshot = channel.state().snapshot();
        let callees = ChannelCallees {
            endorser: self,
            channel_id: &proposal.channel_header.channel_id,
            channel: channel.as_ref(),
        };
        let mut stub = Stub::new(&proposal, name, snapshot.as_ref())
            .with_channel(channel.as_ref())
            .with_blocks(channel.blocks())
            .with_callees(&callees, chaincode.runs_remotely());
        stub.read_definition()
            .map_err(|e| format!("reading the chaincode definition failed: {e}"))?;
        let invoked = std::panic::catch_unwind(AssertUnwindSafe(|| chaincode.invoke(&mut stub)));
        let simulated = Instant::now();
        trace.simulate = Some(simulated - checked_at);
        let response = invoked.map_err(|_| format!("chaincode {name} panicked"))?;
        if response.status >= 400 {
            tracing::debug!(chaincode = name, status = response.status, message = %response.message, "chaincode refused");
            return Ok(ProposalResponse {
                version: 1,
                response: Some(response),
                ..ProposalResponse::default()
            });
        }
        let (results, events) = stub.results();
        if let Some(private) = stub.private_writes() {
            channel
                .keep_private_writes(&proposal.channel_header.tx_id, &private)
                .map_err(|reason| format!("private data of the transaction: {reason}"))?;
        }
        let simulation = SimulationResult {
            results,
            events,
            response: Response {
                status: response.status,
                message: response.message,
                payload: response.payload,
            },
            chaincode_id: ChaincodeId {
                path: String::new(),
                name: name.to_owned(),
                version: if name.starts_with('_') {
                    SYSTEM_VERSION
                } else {
                    BUILTIN_VERSION
                }
                .to_owned(),
            },
        };
        let endorsed = endorse(&proposal.proposal, &simulation, self.signer.as_ref())
            .map_err(|e| format!("signing the endorsement failed: {e}"));
        trace.sign = Some(simulated.elapsed());
        endorsed
    }
}

/// The chaincodes one chaincode may call on its channel: those the
/// endorser runs there, built in, configured or installed.
struct ChannelCallees<'a> {
    endorser: &'a Endorser,
    channel_id: &'a str,
    channel: &'a dyn JoinedChannel,
}

impl Callees for ChannelCallees<'_> {
    fn callee(&self, name: &str) -> Option<Arc<dyn Chaincode>> {
        self.endorser
            .chaincode_for(self.channel_id, self.channel, name)
    }
}

/// What the checks leave to do.
enum Step {
    /// Simulate and endorse.
    Execute(Box<Checked>),
    /// Nothing: the proposal was answered without a channel.
    Answered(Box<ProposalResponse>),
}

/// A proposal that passed the checks, with what executing it needs.
struct Checked {
    proposal: ReceivedProposal,
    channel: Arc<dyn JoinedChannel>,
    chaincode: Arc<dyn Chaincode>,
    checked_at: Instant,
}

/// The largest proposal answered on the task that received it; larger
/// ones are answered on the blocking pool (see [`Endorser::answer`]).
pub const INLINE_PROPOSAL_BYTES_MAX: usize = 256 * 1024;

/// How long [`Endorser::answer_at_height`] waits for this peer to reach
/// the asked height, unless configured otherwise: longer than a lagging
/// peer under load takes to commit the blocks it is behind by, short
/// enough that a peer far behind (catching up after a restart) answers
/// while the client still waits.
pub const CATCH_UP_TIMEOUT_DEFAULT: Duration = Duration::from_secs(1);

/// The channel `signed` proposes on, read from its header alone; `None`
/// if it does not decode (the full checks then refuse it).
fn proposed_channel(signed: &SignedProposal) -> Option<String> {
    let proposal = Proposal::decode(signed.proposal_bytes.clone()).ok()?;
    let header = Header::decode(proposal.header).ok()?;
    Some(
        ChannelHeader::decode(header.channel_header)
            .ok()?
            .channel_id,
    )
}

/// `work`'s result, or a refusal if it panicked: a bug in the endorser
/// fails one proposal, never the connection it came on.
fn unpanicked<T>(work: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|_| {
        Err("the endorser failed on this proposal (a bug: see the peer's log)".to_owned())
    })
}

/// Fabric's answer to a proposal it will not endorse.
fn refusal(message: String) -> ProposalResponse {
    ProposalResponse {
        version: 0,
        response: Some(Response {
            status: 500,
            message,
            payload: Bytes::new(),
        }),
        ..ProposalResponse::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use weft_ledger::StoreConfig;
    use weft_msp::testing::TestOrg;
    use weft_msp::{MspManager, NodeRole};
    use weft_protos::tx::{Invocation, Proposal};
    use weft_statedb::memory::{MemoryOptions, MemoryState};

    use super::*;
    use crate::builtin::builtins;
    use crate::chaincode::success;
    use weft_policy::SignaturePolicy;

    /// A channel of one organisation on a real block store and state, with
    /// every member allowed to propose.
    struct OneOrg {
        msps: MspManager,
        state: MemoryState,
        blocks: Arc<BlockStore>,
        committed: Arc<tokio::sync::watch::Sender<u64>>,
    }

    impl ChannelView for OneOrg {
        fn organisations(&self) -> Vec<String> {
            self.msps.msp_ids().into_iter().map(str::to_owned).collect()
        }

        fn is_admin(&self, _creator: &Bytes, _msp_id: &str) -> bool {
            false
        }

        fn creator_satisfies(&self, creator: &Bytes, policy: &SignaturePolicy) -> bool {
            self.msps
                .deserialize(creator, weft_msp::now())
                .is_ok_and(|identity| policy.is_satisfied_by(&[identity]))
        }
    }

    impl JoinedChannel for OneOrg {
        fn check_signer(
            &self,
            _policy: &str,
            creator: &Bytes,
            data: &Bytes,
            signature: &Bytes,
            now: UnixTime,
        ) -> Result<(), String> {
            let identity = self
                .msps
                .deserialize(creator, now)
                .map_err(|e| e.to_string())?;
            identity.verify(data, signature).map_err(|e| e.to_string())
        }

        fn satisfies_endorsement(&self, _chaincode: &str, _organisations: &[String]) -> bool {
            true
        }

        fn state(&self) -> &dyn VersionedState {
            &self.state
        }

        fn blocks(&self) -> &Arc<BlockStore> {
            &self.blocks
        }

        fn committed_height(&self) -> tokio::sync::watch::Receiver<u64> {
            self.committed.subscribe()
        }

        fn keep_private_writes(&self, tx_id: &str, writes: &PrivateWrites) -> Result<(), String> {
            writes.keep_in(tx_id, &self.blocks)
        }

        fn is_collection_member(&self, _namespace: &str, _collection: &str, _msp: &str) -> bool {
            false
        }
    }

    struct Panics;

    impl Chaincode for Panics {
        fn invoke(&self, stub: &mut Stub<'_>) -> Response {
            if stub.function() == "panic" {
                panic!("a bug in the chaincode");
            }
            success("fine")
        }
    }

    /// An endorser with the built-in chaincodes and `extra`, joined to a
    /// [`OneOrg`] channel "ch", and a client of that organisation.
    struct Harness {
        _dir: tempfile::TempDir,
        client: weft_msp::Signer,
        endorser: Arc<Endorser>,
        /// The height channel "ch" has committed.
        committed: Arc<tokio::sync::watch::Sender<u64>>,
    }

    impl Harness {
        fn new(extra: Vec<(String, Arc<dyn Chaincode>)>) -> Self {
            Self::with_catch_up_timeout(extra, CATCH_UP_TIMEOUT_DEFAULT)
        }

        fn with_catch_up_timeout(
            extra: Vec<(String, Arc<dyn Chaincode>)>,
            catch_up_timeout: Duration,
        ) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let org = TestOrg::new("Org1MSP");
            let channel = OneOrg {
                msps: MspManager::new([org.msp()]),
                state: MemoryState::open(&dir.path().join("state"), MemoryOptions::default())
                    .unwrap(),
                blocks: Arc::new(
                    BlockStore::open(&StoreConfig::new(dir.path().join("blocks"))).unwrap(),
                ),
                committed: Arc::new(tokio::sync::watch::Sender::new(0)),
            };
            let committed = channel.committed.clone();
            let chaincodes: Vec<(String, Arc<dyn Chaincode>)> = builtins()
                .into_iter()
                .map(|(name, chaincode)| (name.to_owned(), chaincode))
                .chain(extra)
                .collect();
            let endorser = Endorser::new(Arc::new(org.signer(NodeRole::Peer)), chaincodes)
                .with_catch_up_timeout(catch_up_timeout);
            endorser.join("ch", Arc::new(channel));
            Self {
                _dir: dir,
                client: org.signer(NodeRole::Client),
                endorser: Arc::new(endorser),
                committed,
            }
        }

        /// The endorser's answer to a signed proposal invoking `chaincode`.
        async fn propose(&self, chaincode: &str, args: &[&str]) -> ProposalResponse {
            let signed = self.signed_proposal(chaincode, args);
            self.endorser.answer(signed).await
        }

        /// The status and message of the endorser's answer.
        async fn status_of(&self, chaincode: &str, args: &[&str]) -> (i32, String) {
            let answer = self.propose(chaincode, args).await.response.unwrap();
            (answer.status, answer.message)
        }

        /// A client's signed proposal invoking `chaincode` with `args`.
        fn signed_proposal(&self, chaincode: &str, args: &[&str]) -> SignedProposal {
            let invocation = Invocation {
                channel_id: "ch",
                chaincode,
                args: args
                    .iter()
                    .map(|arg| Bytes::from(arg.to_string()))
                    .collect(),
                nonce: self.client.new_nonce().unwrap(),
                timestamp_seconds: weft_msp::now(),
            };
            let proposal = Proposal::new(&invocation, self.client.serialized_identity().clone());
            proposal.signed(&self.client).unwrap()
        }
    }

    /// A chaincode that notes the thread each invocation ran on.
    struct NotesThread {
        remote: bool,
        ran_on: parking_lot::Mutex<Vec<std::thread::ThreadId>>,
    }

    impl Chaincode for NotesThread {
        fn invoke(&self, _stub: &mut Stub<'_>) -> Response {
            self.ran_on.lock().push(std::thread::current().id());
            success(Bytes::new())
        }

        fn runs_remotely(&self) -> bool {
            self.remote
        }
    }

    #[tokio::test]
    async fn a_builtin_chaincode_runs_on_the_calling_task_an_external_one_or_a_large_proposal_off_it()
     {
        let local = Arc::new(NotesThread {
            remote: false,
            ran_on: Default::default(),
        });
        let remote = Arc::new(NotesThread {
            remote: true,
            ran_on: Default::default(),
        });
        let harness = Harness::new(vec![
            ("local".to_owned(), local.clone()),
            ("remote".to_owned(), remote.clone()),
        ]);
        let large = "x".repeat(INLINE_PROPOSAL_BYTES_MAX);
        for (chaincode, argument) in [("local", "run"), ("remote", "run"), ("local", &large)] {
            let answer = harness.propose(chaincode, &[argument]).await;
            assert_eq!(answer.response.unwrap().status, 200, "{chaincode}");
            assert!(answer.endorsement.is_some(), "{chaincode}");
        }
        // A current-thread runtime: every task runs on this thread.
        let here = std::thread::current().id();
        let local_threads = local.ran_on.lock().clone();
        assert_eq!(local_threads[0], here, "a small proposal, built-in");
        assert_ne!(local_threads[1], here, "a large proposal");
        let remote_threads = remote.ran_on.lock().clone();
        assert_eq!(remote_threads.len(), 1);
        assert_ne!(remote_threads[0], here);
    }

    #[tokio::test]
    async fn a_proposal_asked_after_a_height_waits_for_it_within_the_timeout() {
        let harness = Harness::with_catch_up_timeout(Vec::new(), Duration::from_secs(60));
        harness.committed.send_replace(3);
        let endorser = harness.endorser.clone();
        let signed = harness.signed_proposal("kv", &["put", "k", "v"]);
        let waiting = tokio::spawn(async move { endorser.answer_at_height(signed, 5).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "answered at height 3, asked 5");
        harness.committed.send_replace(5);
        let answer = waiting.await.unwrap().unwrap();
        assert_eq!(answer.response.unwrap().status, 200);
        // A height already reached is answered at once.
        let signed = harness.signed_proposal("kv", &["put", "k", "v"]);
        let answer = tokio::time::timeout(
            Duration::from_secs(30),
            harness.endorser.answer_at_height(signed, 4),
        )
        .await
        .expect("height 4 is reached: no wait")
        .unwrap();
        assert!(answer.endorsement.is_some());

        // A peer that does not get there refuses once the timeout has
        // passed, and at once after that until it has reached the height
        // it waited for; then it waits again.
        let harness = Harness::with_catch_up_timeout(Vec::new(), Duration::from_millis(100));
        let ask = |height: u64| {
            let signed = harness.signed_proposal("kv", &["put", "k", "v"]);
            let endorser = harness.endorser.clone();
            async move {
                let asked = Instant::now();
                let answer = endorser.answer_at_height(signed, height).await;
                (answer, asked.elapsed())
            }
        };
        let (answer, took) = ask(1_000).await;
        assert_eq!(
            answer.unwrap_err(),
            Behind {
                reached: 0,
                asked: 1_000
            }
        );
        assert!(took >= Duration::from_millis(100));
        let (answer, took) = ask(2_000).await;
        assert_eq!(answer.unwrap_err().reached, 0);
        assert!(took < Duration::from_millis(100), "{took:?}");
        harness.committed.send_replace(1_000);
        let (answer, took) = ask(2_000).await;
        assert_eq!(answer.unwrap_err().reached, 1_000);
        assert!(took >= Duration::from_millis(100));
        let (answer, _) = ask(900).await;
        assert!(answer.unwrap().endorsement.is_some());
    }

    #[tokio::test]
    async fn a_panicking_chaincode_is_an_error_response_and_the_endorser_goes_on() {
        let harness = Harness::new(vec![("buggy".to_owned(), Arc::new(Panics))]);
        let panicked = harness.propose("buggy", &["panic"]).await;
        let answer = panicked.response.unwrap();
        assert_eq!(answer.status, 500);
        assert!(
            answer.message.contains("chaincode buggy panicked"),
            "{}",
            answer.message
        );
        assert!(panicked.endorsement.is_none());
        let fine = harness.propose("buggy", &["work"]).await;
        assert_eq!(fine.response.unwrap().payload, &b"fine"[..]);
        assert!(fine.endorsement.is_some());
    }

    #[tokio::test]
    async fn kv_writes_key_value_pairs_and_updates_keys_it_reads() {
        let harness = Harness::new(Vec::new());
        let ok = |(status, message): (i32, String)| assert_eq!(status, 200, "{message}");
        let refused = |(status, message): (i32, String), expected: &str| {
            assert_eq!(status, 500);
            assert!(message.contains(expected), "{message}");
        };
        ok(harness
            .status_of("kv", &["put", "a", "1", "b", "2", "c", "3"])
            .await);
        let odd = harness.status_of("kv", &["put", "a", "1", "b"]).await;
        refused(odd, "key value pairs");
        refused(harness.status_of("kv", &["put"]).await, "key value pairs");
        ok(harness.status_of("kv", &["update", "v", "a", "b"]).await);
        let no_key = harness.status_of("kv", &["update", "v"]).await;
        refused(no_key, "at least one key");
        // The memo is taken; the accounts do not exist.
        let unknown = ["transfer", "x", "y", "0", "memo"];
        refused(
            harness.status_of("transfer", &unknown).await,
            "does not exist",
        );
        let short = harness.status_of("transfer", &["transfer", "x"]).await;
        refused(short, "takes 3 arguments");
    }
}
