//! Hyperledger Fabric v2.5 wire types for weft, and the few computations
//! every node needs on them.
//!
//! The message and service types are generated at build time from the schema
//! in the workspace's `proto/` directory, one module per protobuf package
//! (`common`, `msp`, `protos` for the peer, `orderer`, `gateway`, `rwset`,
//! `kvrwset`, `queryresult`, `lifecycle`, `etcdraft`; note that
//! Fabric puts `MSPPrincipal` in `common`). On top of them this crate adds:
//!
//! - [`hash`]: the transaction ID rule and the block data and header hashes,
//!   exactly as Fabric computes them;
//! - [`view`]: a typed view of an envelope with every layer decoded once
//!   (payload, headers, transaction, actions, proposal response payload,
//!   chaincode action, read/write sets), which all later stages share instead
//!   of unmarshalling the same bytes again (FastFabric P-III);
//! - [`range_summary`]: how a range query's results are recorded (raw
//!   reads or Fabric's Merkle summary), for endorsers and committers;
//! - [`tx`]: building proposals, endorsements and transactions as Fabric
//!   clients and endorsers do;
//! - [`block`]: building blocks and signing them as Fabric orderers do;
//! - [`dial`]: the gRPC endpoint of another node, plaintext or TLS;
//! - [`broadcast_line`]: one Broadcast stream to an orderer that many
//!   senders share, each awaiting its own answer;
//! - [`serve`]: how a node serves gRPC and what it bounds (connections,
//!   calls per service, the wait for a first request);
//! - [`duration`]: Go's duration notation, used by config values;
//! - [`json`]: the protobuf JSON mapping of any Fabric message, with nested
//!   serialized layers expanded, for humans reading blocks.
//!
//! This crate depends on nothing else of weft's and does no I/O but
//! [`serve`]'s accepting of connections and [`broadcast_line`]'s stream.

#![allow(clippy::doc_markdown, missing_debug_implementations)]

pub mod block;
pub mod broadcast_line;
pub mod dial;
pub mod duration;
pub mod hash;
pub mod json;
pub mod range_summary;
pub mod serve;
pub mod tx;
pub mod view;

mod error;
pub use error::{DecodeError, Layer};

/// The key of the `weft.stream.StreamMode` value in a channel config's
/// `/Channel/Orderer` group: its presence makes the channel a stream
/// channel (docs/stream-mode.md).
pub const STREAM_MODE_KEY: &str = "StreamMode";

/// Generated code is not ours to lint.
macro_rules! fabric_package {
    ($(#[$doc:meta])* $name:ident, $file:literal) => {
        $(#[$doc])*
        #[allow(clippy::all, clippy::pedantic, missing_docs, missing_debug_implementations)]
        pub mod $name {
            include!(concat!(env!("OUT_DIR"), "/", $file));
        }
    };
}

fabric_package!(
    /// `common`: envelopes, blocks, headers, channel configuration, policies.
    common,
    "common.rs"
);
fabric_package!(
    /// `msp`: serialized identities, MSP configuration and principals.
    msp,
    "msp.rs"
);
fabric_package!(
    /// `protos`: the peer's proposals, transactions, chaincode shim and events.
    protos,
    "protos.rs"
);
fabric_package!(
    /// `orderer`: AtomicBroadcast and the orderer's channel configuration values.
    orderer,
    "orderer.rs"
);
fabric_package!(
    /// `etcdraft`: Raft consenter configuration and block metadata.
    etcdraft,
    "etcdraft.rs"
);
fabric_package!(
    /// `weft.cluster`: weft's own orderer-to-orderer protocol (Raft
    /// messages, forwarded envelopes, block pulls); not Fabric's.
    cluster,
    "weft.cluster.rs"
);
fabric_package!(
    /// `weft.stream`: weft's stream-mode channel value; not Fabric's.
    stream,
    "weft.stream.rs"
);
/// weft's packages that name Fabric's types, nested as their package
/// names are (`weft.kafka`), so that the generated `super::super::`
/// paths reach Fabric's packages at the crate root.
mod weft {
    fabric_package!(
        /// `weft.kafka`: weft's Kafka channel options and ID-only records;
        /// not Fabric's.
        kafka,
        "weft.kafka.rs"
    );
    fabric_package!(
        /// `weft.privatedata`: private writes handed between the peers of
        /// a collection's members; not Fabric's.
        privatedata,
        "weft.privatedata.rs"
    );
}
pub use weft::{kafka, privatedata};
fabric_package!(
    /// `gateway`: the Fabric Gateway service.
    gateway,
    "gateway.rs"
);
fabric_package!(
    /// `google.rpc`: the status gRPC error details travel in.
    rpc,
    "google.rpc.rs"
);
fabric_package!(
    /// `rwset`: transaction read/write sets by namespace.
    rwset,
    "rwset.rs"
);
fabric_package!(
    /// `kvrwset`: key-level reads, writes and range-query information.
    kvrwset,
    "kvrwset.rs"
);
fabric_package!(
    /// `queryresult`: the records a chaincode's state queries return.
    queryresult,
    "queryresult.rs"
);
fabric_package!(
    /// `lifecycle`: chaincode definitions agreed by a channel.
    lifecycle,
    "lifecycle.rs"
);

/// The serialized descriptors of every message above, for reflection
/// (used by [`json`]).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/fabric_descriptor.bin"));
