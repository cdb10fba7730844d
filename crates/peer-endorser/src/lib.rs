//! The peer's endorser: it answers `protos.Endorser/ProcessProposal`.
//!
//! A proposal is checked as Fabric checks it (creator, signature, TxID,
//! the channel's Writers policy, replays), run by its chaincode on a
//! snapshot of the channel's world state ([`chaincode::Stub`] records the
//! read/write set exactly as Fabric encodes it, Merkle-summarised range
//! results included), and the result signed as Fabric's ESCC signs it, so
//! that clients and committers accept the endorsement.
//!
//! The endorser never validates or commits blocks: it reads a channel
//! through [`JoinedChannel`], which the peer's committer provides, so that
//! the two roles can run in one process or apart (FastFabric's
//! endorser/committer separation).
//!
//! Chaincodes: [`builtin`] holds the native `kv`, `transfer` and
//! `smallbank`; [`external`] reaches chaincode servers written with
//! Fabric's shims (chaincode as a service). [`gateway`] serves Fabric's Gateway (endorse, submit,
//! commit status, evaluate, chaincode events) on top of the endorser.
//! [`dissemination`] hands endorsed private data to the peers of the
//! collections' other members, and receives theirs.

mod broadcast_lines;
pub mod builtin;
pub mod chaincode;
mod commit_status;
pub mod dissemination;
mod endorser;
pub mod external;
pub mod gateway;
pub mod lifecycle;
pub mod mango;
mod metrics;
pub mod package;
mod service;
mod silent_nodes;

pub use chaincode::{Chaincode, ChannelView, PrivateWrites, StateError, Stub};
pub use endorser::{Behind, CATCH_UP_TIMEOUT_DEFAULT, Endorser, JoinedChannel};
pub use external::{ChaincodeTls, ExternalChaincode, ExternalConfig};
pub use gateway::{GatewayConfig, GatewayService};
pub use lifecycle::Lifecycle;
pub use metrics::EndorserMetrics;
pub use service::EndorserService;
