//! The peer's committer: turns ordered blocks into validated, committed
//! blocks.
//!
//! Validation is a pipeline whose only serial step is MVCC plus apply
//! (FastFabric P-II; Thakkar's parallel VSCC):
//!
//! 1. **Decode once** ([`weft_protos::view::DecodedBlock`]): every layer of
//!    every envelope, shared by all later stages.
//! 2. **Checks, in parallel** ([`checks`]): per transaction, independent of
//!    the others: structure, channel header, TxID, creator identity (cached)
//!    and signature, proposal hash, endorsement signatures and policy.
//! 3. **Key-level policies, serially** ([`key_policies`]): the
//!    transactions that write keys with a key-level endorsement policy
//!    (Fabric's state-based endorsement) judged again against the state.
//! 4. **MVCC, serially** ([`mvcc`]): reads against committed state (bulk
//!    read) and against earlier valid transactions of the block; range-query
//!    phantom checks; builds the block's update batch.
//! 5. **Apply**: the batch to world state, the block (with its
//!    TRANSACTIONS_FILTER) to the block store; on a peer of a collection's
//!    member organisation, the private values behind the block's hashes
//!    ([`private`]) with both, and data found since for earlier blocks
//!    ([`reconcile`]).
//!
//! [`Intake`] feeds a channel's committer from the orderers' Deliver, with
//! failover; [`DeliverService`] serves the committed chain to clients;
//! [`CommitterMetrics`] exposes the stages to Prometheus.
//!
//! Outcomes are Fabric's validation codes; a bad transaction is a value,
//! not an error. Stages 2 to 4 are pure functions of their inputs plus a
//! read-only view ([`ChannelContext`], a [`weft_statedb::StateReader`]), so
//! tests drive them without sockets or disks.

mod channel;
pub mod checks;
mod commit;
pub mod deliver;
mod error;
mod indexes;
pub mod intake;
pub mod key_policies;
pub mod lifecycle;
pub mod metrics;
pub mod mvcc;
mod private;
pub mod reconcile;
#[cfg(test)]
mod tests;

pub use channel::ChannelContext;
pub use commit::{BlockFeed, ChannelCommitter, CommittedBlock, StageTimings};
pub use deliver::{ChannelHandle, Channels, DeliverService};
pub use error::{Error, Result};
pub use indexes::{DeclaredIndex, DeclaredIndexes};
pub use intake::{BlockSource, Intake, IntakeConfig, IntakeStatus};
pub use lifecycle::{ChaincodeDefinitions, EndorsementRule};
pub use metrics::CommitterMetrics;
pub use private::{Missing, PrivateWritesSource};
pub use reconcile::{ReconciledQueue, Reconciler};
pub use weft_protos::protos::TxValidationCode;
