//! Fabric policies: who must sign for something to be allowed.
//!
//! - [`dsl`] parses Fabric's policy language
//!   (`OR('Org1.member', AND('Org2.peer', 'Org3.admin'))`,
//!   `OutOf(2, 'A.member', 'B.member', 'C.member')`) into a
//!   `common.SignaturePolicyEnvelope` encoded exactly as Fabric encodes it,
//!   and prints an envelope back in that language.
//! - [`SignaturePolicy`] evaluates a compiled envelope against a set of
//!   signatures with Fabric's semantics: an identity satisfies at most one
//!   principal, each signature is verified at most once, and `n`-out-of
//!   gates are evaluated greedily in order, as Fabric does, so that weft and
//!   Fabric peers reach the same verdict on the same transaction.
//! - [`PolicyTree`] holds the policies of a channel configuration (a
//!   `common.ConfigGroup` tree) by path, such as `/Channel/Application/Writers`,
//!   and evaluates `ImplicitMeta` policies (ANY / ALL / MAJORITY of the
//!   sub-groups' policies of a name).
//!
//! - [`ChannelAuthority`] is a channel config's MSPs and policy tree
//!   together: what orderers and peers consult to authorise requests.
//! - [`collection`] reads a chaincode's private data collections: their
//!   member organisations, access flags and endorsement policies.
//!
//! This crate does no I/O: identities are resolved through a
//! [`weft_msp::MspManager`] and the time is an argument.

mod channel;
pub mod collection;
pub mod dsl;
mod error;
mod plan;
mod signature;
#[cfg(test)]
mod tests;
mod tree;

pub use channel::{ChannelAuthority, ConfigError};
pub use error::{ParseError, PolicyError};
pub use plan::smallest_satisfying;
pub use signature::{
    PeerOf, Principal, Signatory, SignaturePolicy, SignedData, valid_identities,
    valid_identities_checked_by,
};
pub use tree::{Policy, PolicyTree};
