//! Test helpers: the real Fabric fixture blocks and synthetic chains.
//! Available with the `testing` feature (for benches and other crates'
//! tests); nothing here is compiled into the node.

#![allow(clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use bytes::Bytes;
use prost::Message;
use weft_protos::common::{
    Block, BlockData, BlockHeader, BlockMetadata, ChannelHeader, Envelope, Header, HeaderType,
    Payload,
};
use weft_protos::hash::{block_data_hash, block_header_hash};

#[cfg(test)]
use crate::config::{Durability, StoreConfig};

/// A real Fabric 2.5 block from `tests/fixtures/fabric-2.5/`.
pub fn fixture(name: &str) -> Block {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/fabric-2.5")
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Block::decode(Bytes::from(bytes)).expect("fixture decodes")
}

/// Channel ch10 as the peer holds it: blocks 0–4, with the peer's copies
/// (which carry a TRANSACTIONS_FILTER) where the fixtures have them.
pub fn ch10_peer_chain() -> Vec<Block> {
    [
        "ch10-block-0.block",
        "ch10-block-1.from-peer.block",
        "ch10-block-2.block",
        "extra/ch10-block-3.from-peer.block",
        "ch10-block-4.block",
    ]
    .into_iter()
    .map(fixture)
    .collect()
}

/// Channel ch100 as the orderer serves it: blocks 0–4, no filters.
pub fn ch100_orderer_chain() -> Vec<Block> {
    [
        "ch100-block-0.block",
        "ch100-block-1.block",
        "ch100-block-2.block",
        "extra/ch100-block-3.block",
        "extra/ch100-block-4.block",
    ]
    .into_iter()
    .map(fixture)
    .collect()
}

/// A store config in `dir` with the given durability.
#[cfg(test)]
pub fn config(dir: &tempfile::TempDir, durability: Durability) -> StoreConfig {
    StoreConfig::new(dir.path().join("ledger")).with_durability(durability)
}

/// An envelope whose channel header carries `tx_id`, padded with
/// `padding_bytes` of payload data. Not signed: the store does not check.
pub fn envelope(tx_id: &str, padding_bytes: usize) -> Bytes {
    let channel_header = ChannelHeader {
        r#type: HeaderType::EndorserTransaction as i32,
        channel_id: "testchannel".into(),
        tx_id: tx_id.into(),
        ..ChannelHeader::default()
    };
    let payload = Payload {
        header: Some(Header {
            channel_header: channel_header.encode_to_vec().into(),
            signature_header: Bytes::new(),
        }),
        data: vec![0x5a; padding_bytes].into(),
    };
    Envelope {
        payload: payload.encode_to_vec().into(),
        signature: Bytes::from_static(b"not a signature"),
    }
    .encode_to_vec()
    .into()
}

/// A well-formed block `number` after `previous` (None for block 0)
/// holding one envelope per TxID, with a TRANSACTIONS_FILTER if `filter`
/// is given.
pub fn synthetic_block(
    number: u64,
    previous: Option<&Block>,
    tx_ids: &[&str],
    filter: Option<&[u8]>,
) -> Block {
    let data = BlockData {
        data: tx_ids.iter().map(|tx_id| envelope(tx_id, 64)).collect(),
    };
    let previous_hash = previous
        .map(|block| block_header_hash(block.header.as_ref().expect("header")).to_vec())
        .unwrap_or_default();
    let mut metadata = vec![Bytes::new(); 5];
    if let Some(filter) = filter {
        metadata[2] = Bytes::copy_from_slice(filter);
    }
    Block {
        header: Some(BlockHeader {
            number,
            previous_hash: previous_hash.into(),
            data_hash: block_data_hash(&data).to_vec().into(),
        }),
        data: Some(data),
        metadata: Some(BlockMetadata { metadata }),
    }
}

/// A chain of `count` synthetic blocks with `txs_per_block` unique TxIDs
/// each (`{prefix}-{block}-{tx}`).
pub fn synthetic_chain(prefix: &str, count: u64, txs_per_block: usize) -> Vec<Block> {
    let mut chain: Vec<Block> = Vec::new();
    for number in 0..count {
        let ids: Vec<String> = (0..txs_per_block)
            .map(|tx| format!("{prefix}-{number}-{tx}"))
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let block = synthetic_block(number, chain.last(), &ids, None);
        chain.push(block);
    }
    chain
}

/// The header of a block, which every test block has.
pub fn header(block: &Block) -> &BlockHeader {
    block.header.as_ref().expect("block has a header")
}
