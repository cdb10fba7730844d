//! Building blocks as a Fabric orderer does: the header over the ordered
//! envelopes, then the orderer's signature in the SIGNATURES metadata.
//!
//! The layout is the one real Fabric 2.5 orderers write (see the blocks in
//! `tests/fixtures/fabric-2.5`):
//!
//! - five metadata slots, all empty but SIGNATURES (Fabric no longer fills
//!   LAST_CONFIG; the peer fills TRANSACTIONS_FILTER when it commits);
//! - SIGNATURES holds a `common.Metadata` whose `value` is an
//!   `OrdererBlockMetadata` naming the last config block, and one
//!   `MetadataSignature` per signing orderer, with a `SignatureHeader` of
//!   its identity and a fresh nonce;
//! - each signature covers `value ‖ signature_header ‖ header DER` (the DER
//!   of [`hash::block_header_bytes`]), so it binds the last-config index and
//!   the block's contents (through the data hash) together.

use bytes::Bytes;
use prost::Message;

use crate::common::{
    Block, BlockData, BlockHeader, BlockMetadata, BlockMetadataIndex, ChannelHeader, Config,
    Envelope, HeaderType, LastConfig, Metadata, MetadataSignature, OrdererBlockMetadata, Payload,
    SignatureHeader,
};
use crate::hash;
use crate::tx::{Sign, SignError};
use crate::view::{Limits, TxBody, TxEnvelope};

/// Fabric's blocks carry five metadata slots (`common.BlockMetadataIndex`).
pub const METADATA_SLOTS: usize = 5;

const _: () = assert!(BlockMetadataIndex::CommitHash as usize == METADATA_SLOTS - 1);

/// Block `number` holding `envelopes` in order, chained to the block whose
/// header hash is `previous_hash` (empty for block 0): the header's data
/// hash is [`hash::block_data_hash`] of the data, and the metadata slots
/// are present but empty.
pub fn new_block(number: u64, previous_hash: &[u8], envelopes: Vec<Bytes>) -> Block {
    let data = BlockData { data: envelopes };
    let header = BlockHeader {
        number,
        previous_hash: Bytes::copy_from_slice(previous_hash),
        data_hash: Bytes::copy_from_slice(&hash::block_data_hash(&data)),
    };
    Block {
        header: Some(header),
        data: Some(data),
        metadata: Some(BlockMetadata {
            metadata: vec![Bytes::new(); METADATA_SLOTS],
        }),
    }
}

/// Signs `block` as an orderer: writes its SIGNATURES metadata with the
/// index of the last config block and `signer`'s signature, made with the
/// given `nonce` (Fabric uses 24 fresh random bytes). Any earlier SIGNATURES
/// content is replaced; the other slots are kept (and created if missing).
///
/// The header must already be final: the signature covers it.
pub fn sign_block(
    block: &mut Block,
    last_config: u64,
    signer: &dyn Sign,
    nonce: Bytes,
) -> Result<(), SignError> {
    sign_block_with_consenter_metadata(block, last_config, Bytes::new(), signer, nonce)
}

/// [`sign_block`], also recording the consenter's metadata in the signed
/// `OrdererBlockMetadata` (Raft: an `etcdraft.BlockMetadata` with the Raft
/// index the block was decided at).
pub fn sign_block_with_consenter_metadata(
    block: &mut Block,
    last_config: u64,
    consenter_metadata: Bytes,
    signer: &dyn Sign,
    nonce: Bytes,
) -> Result<(), SignError> {
    let header = block
        .header
        .as_ref()
        .ok_or_else(|| SignError("a block without a header cannot be signed".to_owned()))?;
    let value = orderer_block_metadata(last_config, consenter_metadata);
    let signature_header: Bytes = SignatureHeader {
        creator: signer.identity(),
        nonce,
    }
    .encode_to_vec()
    .into();
    let header_der = hash::block_header_bytes(header);
    let mut signed = Vec::with_capacity(value.len() + signature_header.len() + header_der.len());
    signed.extend_from_slice(&value);
    signed.extend_from_slice(&signature_header);
    signed.extend_from_slice(&header_der);
    let signature = signer.sign(&signed)?;

    let slot = Metadata {
        value,
        signatures: vec![MetadataSignature {
            signature_header,
            signature: signature.into(),
            identifier_header: Bytes::new(),
        }],
    }
    .encode_to_vec();
    set_metadata_slot(block, BlockMetadataIndex::Signatures, slot.into());
    Ok(())
}

/// Records in `block`'s SIGNATURES slot the index of the last config block
/// and the consenter's metadata, as [`sign_block_with_consenter_metadata`]
/// does, but no signature: a stream channel's block between checkpoints,
/// which the next checkpoint's signature covers through the hash chain.
pub fn seal_block_unsigned(block: &mut Block, last_config: u64, consenter_metadata: Bytes) {
    let slot = Metadata {
        value: orderer_block_metadata(last_config, consenter_metadata),
        signatures: Vec::new(),
    }
    .encode_to_vec();
    set_metadata_slot(block, BlockMetadataIndex::Signatures, slot.into());
}

fn orderer_block_metadata(last_config: u64, consenter_metadata: Bytes) -> Bytes {
    OrdererBlockMetadata {
        last_config: Some(LastConfig { index: last_config }),
        consenter_metadata,
    }
    .encode_to_vec()
    .into()
}

/// How many signatures `block`'s SIGNATURES slot holds: 0 for a stream
/// channel's block between checkpoints (and for a malformed slot).
pub fn signature_count(block: &Block) -> usize {
    metadata_slot(block, BlockMetadataIndex::Signatures)
        .and_then(|slot| Metadata::decode(slot.clone()).ok())
        .map_or(0, |metadata| metadata.signatures.len())
}

/// The bytes of one metadata slot of `block`; `None` when the block has
/// fewer slots.
pub fn metadata_slot(block: &Block, index: BlockMetadataIndex) -> Option<&Bytes> {
    block.metadata.as_ref()?.metadata.get(index as usize)
}

/// The number of the last config block as `block` records it: the
/// `last_config` of the `OrdererBlockMetadata` in its SIGNATURES slot
/// (where Fabric 2.x orderers write it; the LAST_CONFIG slot stays empty).
/// `None` when the slot is absent or malformed.
pub fn last_config_index(block: &Block) -> Option<u64> {
    let slot = metadata_slot(block, BlockMetadataIndex::Signatures)?;
    let metadata = Metadata::decode(slot.clone()).ok()?;
    let orderer = OrdererBlockMetadata::decode(metadata.value).ok()?;
    Some(orderer.last_config?.index)
}

/// The consenter metadata `block` records in the `OrdererBlockMetadata`
/// of its SIGNATURES slot (empty for solo). `None` when the slot is absent
/// or malformed.
pub fn consenter_metadata(block: &Block) -> Option<Bytes> {
    let slot = metadata_slot(block, BlockMetadataIndex::Signatures)?;
    let metadata = Metadata::decode(slot.clone()).ok()?;
    let orderer = OrdererBlockMetadata::decode(metadata.value).ok()?;
    Some(orderer.consenter_metadata)
}

/// The channel ID and configuration a config block carries in its first
/// envelope; `None` when the block is not a config block.
pub fn config_of_block(block: &Block) -> Option<(String, Config)> {
    config_of_envelope(block.data.as_ref()?.data.first()?.clone())
}

/// The channel ID and configuration a CONFIG envelope carries; `None` when
/// it is not one.
pub fn config_of_envelope(raw: Bytes) -> Option<(String, Config)> {
    let envelope = TxEnvelope::decode(raw, Limits::default()).ok()?;
    match envelope.body {
        TxBody::Config(config_envelope) => {
            Some((envelope.channel_header.channel_id, config_envelope.config?))
        }
        _ => None,
    }
}

/// The channel header of a raw envelope, decoding only the layers above
/// it (envelope, payload, header); `None` if any of them fails to decode.
pub fn channel_header_of(envelope: Bytes) -> Option<ChannelHeader> {
    let payload = Payload::decode(Envelope::decode(envelope).ok()?.payload).ok()?;
    ChannelHeader::decode(payload.header?.channel_header).ok()
}

/// Whether `block` is a config block: its first envelope's channel header
/// says CONFIG. Only the headers are decoded, not the transaction.
pub fn is_config_block(block: &Block) -> bool {
    block
        .data
        .as_ref()
        .and_then(|data| data.data.first())
        .and_then(|envelope| channel_header_of(envelope.clone()))
        .is_some_and(|header| header.r#type == HeaderType::Config as i32)
}

/// Writes `value` into metadata slot `index` of `block`, creating the five
/// slots first if the block lacks them.
pub fn set_metadata_slot(block: &mut Block, index: BlockMetadataIndex, value: Bytes) {
    let metadata = block.metadata.get_or_insert_with(BlockMetadata::default);
    if metadata.metadata.len() < METADATA_SLOTS {
        metadata.metadata.resize(METADATA_SLOTS, Bytes::new());
    }
    metadata.metadata[index as usize] = value;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::path::PathBuf;

    use super::*;
    use crate::hash::{block_header_bytes, block_header_hash, sha256};

    /// A stand-in signer: its "signature" is the SHA-256 of the message, so
    /// a test can check exactly which bytes were signed.
    struct DigestSigner {
        identity: Bytes,
    }

    impl Sign for DigestSigner {
        fn identity(&self) -> Bytes {
            self.identity.clone()
        }

        fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignError> {
            Ok(sha256(message).to_vec())
        }
    }

    fn fixture(name: &str) -> Block {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/fabric-2.5")
            .join(name);
        Block::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
    }

    fn signatures_slot(block: &Block) -> Metadata {
        let slot =
            &block.metadata.as_ref().unwrap().metadata[BlockMetadataIndex::Signatures as usize];
        Metadata::decode(slot.clone()).unwrap()
    }

    #[test]
    fn a_new_block_has_the_header_a_fabric_orderer_wrote() {
        // Goal: over the same envelopes and previous hash, new_block gives
        // the header of a real Fabric 2.5 block (data hash included) and
        // five empty metadata slots.
        let fabric = fixture("ch10-block-3.block");
        let fabric_header = fabric.header.clone().unwrap();
        let block = new_block(
            fabric_header.number,
            &fabric_header.previous_hash,
            fabric.data.clone().unwrap().data,
        );
        assert_eq!(block.header, Some(fabric_header));
        assert_eq!(block.data, fabric.data);
        let metadata = block.metadata.unwrap().metadata;
        assert_eq!(metadata.len(), METADATA_SLOTS);
        assert!(metadata.iter().all(Bytes::is_empty));
    }

    #[test]
    fn config_blocks_are_told_from_transaction_blocks_by_their_header() {
        assert!(is_config_block(&fixture("ch10-block-0.block")));
        assert!(!is_config_block(&fixture("ch10-block-3.block")));
        assert!(!is_config_block(&new_block(1, b"previous", Vec::new())));
        let garbage = new_block(1, b"previous", vec![Bytes::from_static(b"\xff\xff")]);
        assert!(!is_config_block(&garbage));
    }

    #[test]
    fn an_unsigned_seal_records_the_last_config_and_no_signature() {
        // Goal: a stream block between checkpoints carries what a signed
        // block records (last config, consenter metadata) and no
        // signature; signing it later replaces the slot.
        let mut block = new_block(7, b"previous", vec![Bytes::from_static(b"tx")]);
        assert_eq!(signature_count(&block), 0);
        seal_block_unsigned(&mut block, 3, Bytes::from_static(b"raft"));
        assert_eq!(last_config_index(&block), Some(3));
        assert_eq!(
            consenter_metadata(&block),
            Some(Bytes::from_static(b"raft"))
        );
        assert_eq!(signature_count(&block), 0);
        let signer = DigestSigner {
            identity: Bytes::from_static(b"orderer"),
        };
        sign_block(&mut block, 3, &signer, Bytes::from_static(b"nonce")).unwrap();
        assert_eq!(signature_count(&block), 1);
        assert_eq!(last_config_index(&block), Some(3));
    }

    #[test]
    fn genesis_has_an_empty_previous_hash() {
        let block = new_block(0, &[], vec![Bytes::from_static(b"config")]);
        let header = block.header.unwrap();
        assert!(header.previous_hash.is_empty());
        assert_eq!(header.data_hash.as_ref(), sha256(b"config"));
    }

    #[test]
    fn the_signature_metadata_round_trips_with_fabrics_layout() {
        // Goal: the SIGNATURES slot decodes back to the last-config index,
        // the signer's identity and nonce, and a signature over
        // value ‖ signature header ‖ header DER, laid out slot for slot as
        // in a real Fabric block (which differs only in its Raft consenter
        // metadata and its signature).
        let fabric = fixture("ch10-block-3.block");
        let fabric_slot = signatures_slot(&fabric);
        let fabric_signature_header =
            SignatureHeader::decode(fabric_slot.signatures[0].signature_header.clone()).unwrap();
        let signer = DigestSigner {
            identity: fabric_signature_header.creator.clone(),
        };
        let header = fabric.header.clone().unwrap();
        let mut block = new_block(
            header.number,
            &header.previous_hash,
            fabric.data.clone().unwrap().data,
        );
        sign_block(
            &mut block,
            0,
            &signer,
            fabric_signature_header.nonce.clone(),
        )
        .unwrap();

        let slot = signatures_slot(&block);
        assert_eq!(slot.signatures.len(), 1);
        let signature = &slot.signatures[0];
        assert!(signature.identifier_header.is_empty());
        let signature_header = SignatureHeader::decode(signature.signature_header.clone()).unwrap();
        assert_eq!(signature_header, fabric_signature_header);
        // Byte for byte the header Fabric's orderer wrote, for the same
        // identity and nonce.
        assert_eq!(
            signature.signature_header,
            fabric_slot.signatures[0].signature_header
        );

        let value = OrdererBlockMetadata::decode(slot.value.clone()).unwrap();
        assert_eq!(value.last_config, Some(LastConfig { index: 0 }));
        assert!(value.consenter_metadata.is_empty());
        let mut fabric_value = OrdererBlockMetadata::decode(fabric_slot.value.clone()).unwrap();
        fabric_value.consenter_metadata = Bytes::new();
        assert_eq!(slot.value, fabric_value.encode_to_vec());

        let mut signed = slot.value.to_vec();
        signed.extend_from_slice(&signature.signature_header);
        signed.extend_from_slice(&block_header_bytes(block.header.as_ref().unwrap()));
        assert_eq!(signature.signature.as_ref(), sha256(&signed));

        let metadata = &block.metadata.as_ref().unwrap().metadata;
        let fabric_metadata = &fabric.metadata.as_ref().unwrap().metadata;
        assert_eq!(metadata.len(), fabric_metadata.len());
        for index in 1..METADATA_SLOTS {
            assert_eq!(metadata[index], fabric_metadata[index], "slot {index}");
        }
        // Signing touches only the metadata: the chain link is unchanged.
        assert_eq!(
            block_header_hash(block.header.as_ref().unwrap()),
            block_header_hash(&header)
        );
    }

    #[test]
    fn signing_replaces_earlier_signatures_and_keeps_other_slots() {
        let signer = DigestSigner {
            identity: Bytes::from_static(b"orderer"),
        };
        let mut block = new_block(7, &[1; 32], vec![Bytes::from_static(b"tx")]);
        block.metadata.as_mut().unwrap().metadata
            [BlockMetadataIndex::TransactionsFilter as usize] = Bytes::from_static(&[0]);
        sign_block(&mut block, 3, &signer, Bytes::from_static(b"first")).unwrap();
        sign_block(&mut block, 5, &signer, Bytes::from_static(b"second")).unwrap();

        let slot = signatures_slot(&block);
        assert_eq!(slot.signatures.len(), 1);
        let value = OrdererBlockMetadata::decode(slot.value).unwrap();
        assert_eq!(value.last_config.unwrap().index, 5);
        assert_eq!(last_config_index(&block), Some(5));
        assert_eq!(last_config_index(&fixture("ch10-block-3.block")), Some(0));
        assert_eq!(last_config_index(&new_block(1, &[], Vec::new())), None);
        let header = SignatureHeader::decode(slot.signatures[0].signature_header.clone()).unwrap();
        assert_eq!(header.nonce.as_ref(), b"second");
        assert_eq!(
            block.metadata.unwrap().metadata[BlockMetadataIndex::TransactionsFilter as usize]
                .as_ref(),
            [0]
        );

        // A block without metadata gets all five slots.
        let mut bare = Block {
            header: Some(BlockHeader::default()),
            ..Block::default()
        };
        sign_block(&mut bare, 0, &signer, Bytes::new()).unwrap();
        assert_eq!(bare.metadata.unwrap().metadata.len(), METADATA_SLOTS);

        let mut headless = Block::default();
        assert!(sign_block(&mut headless, 0, &signer, Bytes::new()).is_err());
    }
}
