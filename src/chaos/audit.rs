//! After a chaos run, with the network stopped: every node's chain (and
//! each peer's world state) read back from its data directory, and held
//! against what the clients were told.
//!
//! The promise checked is Fabric's to its clients: a transaction whose
//! commit status came back is on every peer's chain, in one place, with
//! that code; and the nodes agree on one chain and one state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::Serialize;
use weft_ledger::{BlockStore, StoreConfig};
use weft_peer_committer::ChannelCommitter;
use weft_protos::block::{channel_header_of, metadata_slot};
use weft_protos::common::BlockMetadataIndex;
use weft_protos::hash::{Hash, block_header_hash, sha256};
use weft_protos::protos::TxValidationCode;
use weft_protos::view::{DecodedBlock, Limits, TxBody};
use weft_statedb::StateReader;
use weft_statedb::memory::{MemoryOptions, MemoryState};

/// One node's copy of a channel.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    pub node: String,
    /// The header hash of each block, by number.
    pub hashes: Vec<Hash>,
    /// Where each TxID sits: block number and, on a peer, its code.
    pub placements: HashMap<String, Vec<Placement>>,
    /// A peer's world state, hashed key by key (namespaces in order).
    pub state_hash: Option<Hash>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub block: u64,
    pub code: Option<i32>,
}

/// Reads a peer's copy of `channel` from its data directory (its
/// `fileSystemPath`), bringing its world state up to its chain first as
/// the peer would on start. The state is the in-memory engine's, which
/// `weft network up` configures.
pub fn read_peer(node: &str, data_dir: &Path, channel: &str) -> Result<Chain> {
    let dir = data_dir.join("ledgers").join(channel);
    let store = Arc::new(
        BlockStore::open(&StoreConfig::new(dir.join("blocks")).with_history(true))
            .with_context(|| format!("opening {node}'s block store of {channel}"))?,
    );
    let mut namespaces = BTreeSet::new();
    let mut chain = read_blocks(node, &store, Some(&mut namespaces))?;
    let state = Arc::new(
        MemoryState::open(&dir.join("state"), MemoryOptions::default())
            .with_context(|| format!("opening {node}'s world state of {channel}"))?,
    );
    // Replays what the state's last checkpoint lacks.
    ChannelCommitter::open(channel, state.clone(), store.clone())
        .with_context(|| format!("reopening {node}'s channel {channel}"))?;
    chain.state_hash = Some(state_hash(state.as_ref(), &namespaces)?);
    Ok(chain)
}

/// Reads an orderer's copy of `channel` from its data directory.
pub fn read_orderer(node: &str, data_dir: &Path, channel: &str) -> Result<Chain> {
    let path = data_dir.join("ledgers").join(channel);
    let store = BlockStore::open(&StoreConfig::new(path).without_tx_index())
        .with_context(|| format!("opening {node}'s block store of {channel}"))?;
    read_blocks(node, &store, None)
}

/// The chain in `store`. A peer's (`namespaces` given) records the codes of
/// its TRANSACTIONS_FILTER, and the namespaces its valid transactions wrote
/// go into `namespaces`.
fn read_blocks(
    node: &str,
    store: &BlockStore,
    mut namespaces: Option<&mut BTreeSet<String>>,
) -> Result<Chain> {
    let with_codes = namespaces.is_some();
    let mut chain = Chain {
        node: node.to_owned(),
        ..Chain::default()
    };
    for number in 0..store.height() {
        let block = store
            .block(number)?
            .with_context(|| format!("{node} lacks block {number} below its height"))?;
        let header = block.header.clone().unwrap_or_default();
        chain.hashes.push(block_header_hash(&header));
        let codes = metadata_slot(&block, BlockMetadataIndex::TransactionsFilter)
            .cloned()
            .unwrap_or_default();
        if let Some(namespaces) = namespaces.as_deref_mut() {
            written_namespaces(&block, &codes, namespaces)?;
        }
        let envelopes = block.data.map(|data| data.data).unwrap_or_default();
        for (index, envelope) in envelopes.into_iter().enumerate() {
            let Some(header) = channel_header_of(envelope) else {
                continue;
            };
            if header.tx_id.is_empty() {
                continue;
            }
            let code = with_codes.then(|| codes.get(index).map_or(-1, |code| i32::from(*code)));
            chain
                .placements
                .entry(header.tx_id)
                .or_default()
                .push(Placement {
                    block: number,
                    code,
                });
        }
    }
    Ok(chain)
}

/// Adds the namespaces the valid transactions of `block` (their codes
/// `codes`) wrote to `namespaces`.
fn written_namespaces(
    block: &weft_protos::common::Block,
    codes: &[u8],
    namespaces: &mut BTreeSet<String>,
) -> Result<()> {
    let decoded = DecodedBlock::from_block(block.clone(), Limits::default())?;
    for (index, transaction) in decoded.transactions.iter().enumerate() {
        let valid = codes.get(index) == Some(&(TxValidationCode::Valid as u8));
        if let (true, Ok(transaction)) = (valid, transaction)
            && let TxBody::Endorser(endorser) = &transaction.body
        {
            for action in &endorser.actions {
                namespaces.extend(action.namespaces.iter().map(|ns| ns.namespace.clone()));
            }
        }
    }
    Ok(())
}

/// A hash over every live key of `namespaces`: namespace, key, value and
/// version, in order.
fn state_hash(state: &dyn StateReader, namespaces: &BTreeSet<String>) -> Result<Hash> {
    let mut all = Vec::new();
    for namespace in namespaces {
        for (key, value) in state.range(namespace, "", "", usize::MAX)? {
            for part in [namespace.as_bytes(), key.as_bytes(), &value.value] {
                all.extend_from_slice(&(part.len() as u64).to_be_bytes());
                all.extend_from_slice(part);
            }
            all.extend_from_slice(&value.version.block_num.to_be_bytes());
            all.extend_from_slice(&value.version.tx_num.to_be_bytes());
        }
    }
    Ok(sha256(&all))
}

/// What the audit found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// Transactions whose commit status came back, and of those VALID.
    pub confirmed: usize,
    pub confirmed_valid: usize,
    /// Confirmed transactions missing from a peer's chain, or there with
    /// another code: `tx_id on node`.
    pub lost: Vec<String>,
    /// Confirmed transactions VALID in more than one place on a chain.
    pub duplicated: Vec<String>,
    /// Further copies of confirmed transactions, marked invalid (Fabric's
    /// DUPLICATE_TXID): ordered twice, harmless to the state.
    pub extra_copies: usize,
    /// Where nodes disagree on the chain or the state.
    pub disagreements: Vec<String>,
    /// The chain's height, when every node agrees on it.
    pub height: Option<u64>,
}

impl Verdict {
    /// Whether the network kept its promise.
    pub fn passed(&self) -> bool {
        self.lost.is_empty() && self.duplicated.is_empty() && self.disagreements.is_empty()
    }
}

/// Holds the peers' and orderers' chains against the confirmed
/// transactions (TxID and the code their commit status gave).
pub fn judge(confirmed: &BTreeMap<String, i32>, peers: &[Chain], orderers: &[Chain]) -> Verdict {
    let mut verdict = Verdict {
        confirmed: confirmed.len(),
        confirmed_valid: confirmed
            .values()
            .filter(|code| **code == TxValidationCode::Valid as i32)
            .count(),
        ..Verdict::default()
    };
    for (tx_id, &code) in confirmed {
        for peer in peers {
            let placements = peer.placements.get(tx_id).map_or(&[][..], Vec::as_slice);
            let with_code = placements.iter().filter(|p| p.code == Some(code)).count();
            if with_code == 0 {
                verdict.lost.push(format!("{tx_id} on {}", peer.node));
            }
            let valid = placements
                .iter()
                .filter(|p| p.code == Some(TxValidationCode::Valid as i32))
                .count();
            if valid > 1 {
                verdict.duplicated.push(format!("{tx_id} on {}", peer.node));
            }
            verdict.extra_copies += placements.len().saturating_sub(1);
        }
    }
    let nodes: Vec<&Chain> = peers.iter().chain(orderers).collect();
    if let Some((reference, others)) = nodes.split_first() {
        for other in others {
            if let Some(difference) = chain_difference(reference, other) {
                verdict.disagreements.push(difference);
            }
        }
        if verdict.disagreements.is_empty() {
            verdict.height = Some(reference.hashes.len() as u64);
        }
    }
    if let Some((reference, others)) = peers.split_first() {
        for other in others {
            if other.state_hash != reference.state_hash {
                verdict.disagreements.push(format!(
                    "the world states of {} and {} differ",
                    reference.node, other.node
                ));
            }
        }
    }
    verdict
}

/// How two copies of a chain differ, if they do.
fn chain_difference(a: &Chain, b: &Chain) -> Option<String> {
    if let Some(number) = a.hashes.iter().zip(&b.hashes).position(|(x, y)| x != y) {
        return Some(format!(
            "block {number} differs between {} and {}",
            a.node, b.node
        ));
    }
    (a.hashes.len() != b.hashes.len()).then(|| {
        format!(
            "{} holds {} blocks, {} holds {}",
            a.node,
            a.hashes.len(),
            b.node,
            b.hashes.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: i32 = TxValidationCode::Valid as i32;
    const DUPLICATE: i32 = TxValidationCode::DuplicateTxid as i32;

    fn chain(node: &str, blocks: &[&[(&str, Option<i32>)]]) -> Chain {
        let mut chain = Chain {
            node: node.to_owned(),
            state_hash: Some([7; 32]),
            ..Chain::default()
        };
        for (number, transactions) in blocks.iter().enumerate() {
            chain
                .hashes
                .push(sha256(format!("{transactions:?}").as_bytes()));
            for (tx_id, code) in *transactions {
                chain
                    .placements
                    .entry((*tx_id).to_owned())
                    .or_default()
                    .push(Placement {
                        block: number as u64,
                        code: *code,
                    });
            }
        }
        chain
    }

    fn confirmed(entries: &[(&str, i32)]) -> BTreeMap<String, i32> {
        entries
            .iter()
            .map(|(tx, code)| ((*tx).to_owned(), *code))
            .collect()
    }

    #[test]
    fn agreeing_nodes_holding_every_confirmed_transaction_pass() {
        let blocks: &[&[(&str, Option<i32>)]] = &[&[], &[("a", Some(VALID)), ("b", Some(VALID))]];
        let orderer_blocks: &[&[(&str, Option<i32>)]] = &[&[], &[("a", None), ("b", None)]];
        let peers = [chain("p1", blocks), chain("p2", blocks)];
        let mut orderer = chain("o1", orderer_blocks);
        orderer.hashes = peers[0].hashes.clone();
        let verdict = judge(&confirmed(&[("a", VALID)]), &peers, &[orderer]);
        assert!(verdict.passed(), "{verdict:?}");
        assert_eq!((verdict.confirmed, verdict.height), (1, Some(2)));
    }

    #[test]
    fn a_confirmed_transaction_missing_or_with_another_code_is_lost() {
        let p1 = chain("p1", &[&[("a", Some(VALID))]]);
        let p2 = chain("p2", &[&[("a", Some(11))]]);
        let mut p2_hashes = p2.clone();
        p2_hashes.hashes = p1.hashes.clone();
        let verdict = judge(
            &confirmed(&[("a", VALID), ("b", VALID)]),
            &[p1, p2_hashes],
            &[],
        );
        assert_eq!(verdict.lost, ["a on p2", "b on p1", "b on p2"]);
        assert!(!verdict.passed());
    }

    #[test]
    fn a_second_valid_copy_is_a_duplicate_and_a_marked_one_only_an_extra_copy() {
        let twice = chain("p1", &[&[("a", Some(VALID))], &[("a", Some(VALID))]]);
        let verdict = judge(&confirmed(&[("a", VALID)]), &[twice], &[]);
        assert_eq!(verdict.duplicated, ["a on p1"]);
        let marked = chain("p1", &[&[("a", Some(VALID))], &[("a", Some(DUPLICATE))]]);
        let verdict = judge(&confirmed(&[("a", VALID)]), &[marked], &[]);
        assert!(verdict.passed(), "{verdict:?}");
        assert_eq!(verdict.extra_copies, 1);
    }

    #[test]
    fn chains_or_states_that_differ_are_disagreements() {
        let p1 = chain("p1", &[&[("a", Some(VALID))], &[]]);
        let short = chain("p2", &[&[("a", Some(VALID))]]);
        let verdict = judge(&BTreeMap::new(), &[p1.clone(), short], &[]);
        assert_eq!(verdict.disagreements, ["p1 holds 2 blocks, p2 holds 1"]);
        assert_eq!(verdict.height, None);

        let mut forked = p1.clone();
        forked.node = "o1".to_owned();
        forked.hashes[1] = [9; 32];
        let verdict = judge(&BTreeMap::new(), std::slice::from_ref(&p1), &[forked]);
        assert_eq!(verdict.disagreements, ["block 1 differs between p1 and o1"]);

        let mut other_state = p1.clone();
        other_state.node = "p2".to_owned();
        other_state.state_hash = Some([8; 32]);
        let verdict = judge(&BTreeMap::new(), &[p1, other_state], &[]);
        assert_eq!(
            verdict.disagreements,
            ["the world states of p1 and p2 differ"]
        );
    }
}
