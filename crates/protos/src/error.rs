//! Errors from decoding Fabric's layered messages.

/// The layer of a Fabric message that failed to decode, so that an error can
/// say exactly where a transaction is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Block,
    Envelope,
    Payload,
    Header,
    ChannelHeader,
    SignatureHeader,
    Transaction,
    TransactionAction,
    ChaincodeActionPayload,
    ChaincodeProposalPayload,
    Proposal,
    ChaincodeInvocationSpec,
    ProposalResponsePayload,
    ChaincodeAction,
    ChaincodeHeaderExtension,
    TxReadWriteSet,
    KvReadWriteSet,
    HashedReadWriteSet,
    ChaincodeEvent,
    ConfigEnvelope,
    ConfigUpdateEnvelope,
    SerializedIdentity,
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// A Fabric message could not be decoded into its typed view.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes of a layer are not a valid protobuf encoding of its message.
    #[error("malformed {layer}: {reason}")]
    Malformed { layer: Layer, reason: String },
    /// A layer that Fabric requires is absent or empty.
    #[error("{layer} is missing")]
    Missing { layer: Layer },
    /// A layer is larger than the configured limit.
    #[error("{layer} is {size} bytes, over the limit of {limit}")]
    TooLarge {
        layer: Layer,
        size: usize,
        limit: usize,
    },
    /// The envelope's header type is not one this view decodes.
    #[error("unsupported header type {0}")]
    UnsupportedHeaderType(i32),
}

impl DecodeError {
    pub(crate) fn malformed(layer: Layer, error: prost::DecodeError) -> Self {
        Self::Malformed {
            layer,
            reason: error.to_string(),
        }
    }
}
