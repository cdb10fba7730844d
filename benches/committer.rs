//! Criterion benchmarks of the committer, stage by stage, on 100-transaction
//! blocks of channel ch100 of the Fabric 2.5 fixture network:
//!
//! - the real block 4 of ch100 (100 `kv put` transactions from tape,
//!   ordered and signed by Fabric), and
//! - a block of 100 transfers (two keys read and written each), proposed by
//!   the fixture's User1, endorsed by its peer0 and signed by its orderer
//!   with their own keys, so every signature and policy check passes.
//!
//! Stages: decode, stage-1 checks (signatures and endorsement policy, on the
//! rayon pool), MVCC with the update batch, state apply (memory, RocksDB),
//! block append (synced and not), and a whole commit.
//!
//! Run with `cargo bench --bench committer`; figures in docs/benchmarks.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use weft_ledger::{BlockStore, Durability, StoreConfig};
use weft_msp::Signer;
use weft_peer_committer::checks::check_block;
use weft_peer_committer::mvcc::{update_batch, validate_block};
use weft_peer_committer::{ChannelCommitter, ChannelContext, TxValidationCode};
use weft_protos::block::{new_block, sign_block};
use weft_protos::common::{Block, ConfigEnvelope, Envelope, Payload};
use weft_protos::hash::block_header_hash;
use weft_protos::protos::{ChaincodeId, Response};
use weft_protos::tx::{Invocation, Proposal, ReadWriteSetBuilder, SimulationResult, endorse};
use weft_protos::view::{DecodedBlock, Limits};
use weft_statedb::memory::{MemoryOptions, MemoryState};
use weft_statedb::rocks::{RocksOptions, RocksState};
use weft_statedb::{Height, UpdateBatch, VersionedState};

const TRANSACTIONS: usize = 100;
const CHANNEL: &str = "ch100";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fabric-2.5")
}

fn read_block(name: &str) -> Block {
    Block::decode(std::fs::read(fixtures().join(name)).unwrap().as_slice()).unwrap()
}

fn signer(msp_folder: &str, msp_id: &str) -> Signer {
    weft_msp::folder::load_signer(&fixtures().join("crypto").join(msp_folder), msp_id)
        .unwrap()
        .unwrap()
}

fn context_of(genesis: &Block) -> ChannelContext {
    let envelope = Envelope::decode(genesis.data.as_ref().unwrap().data[0].clone()).unwrap();
    let payload = Payload::decode(envelope.payload).unwrap();
    let config = ConfigEnvelope::decode(payload.data)
        .unwrap()
        .config
        .unwrap();
    ChannelContext::from_config(CHANNEL, 0, &config).unwrap()
}

/// The fixture network's parties, with their keys.
struct Parties {
    client: Signer,
    endorser: Signer,
    orderer: Signer,
}

impl Parties {
    fn load() -> Self {
        Self {
            client: signer(
                "peerOrganizations/org1.example.com/users/User1@org1.example.com/msp",
                "Org1MSP",
            ),
            endorser: signer(
                "peerOrganizations/org1.example.com/peers/peer0.org1.example.com/msp",
                "Org1MSP",
            ),
            orderer: signer(
                "ordererOrganizations/example.com/orderers/orderer.example.com/msp",
                "OrdererMSP",
            ),
        }
    }

    /// Block `number` of 100 transfers: slot `i` moves between accounts
    /// `2i` and `2i+1`, reading them at `read_at` (block, tx = slot).
    fn transfer_block(&self, number: u64, previous: &[u8], read_at: Option<u64>) -> Block {
        let envelopes = (0..TRANSACTIONS)
            .map(|slot| {
                let mut rwset = ReadWriteSetBuilder::new();
                for account in [2 * slot, 2 * slot + 1] {
                    let key = format!("account{account:07}");
                    if let Some(block) = read_at {
                        rwset.read("transfer", &key, Some((block, slot as u64)));
                    }
                    rwset.write("transfer", &key, Bytes::from_static(b"1000000"));
                }
                let invocation = Invocation {
                    channel_id: CHANNEL,
                    chaincode: "transfer",
                    args: vec![
                        Bytes::from_static(b"transfer"),
                        Bytes::from(vec![b'x'; 512]),
                    ],
                    nonce: self.client.new_nonce().unwrap(),
                    timestamp_seconds: weft_msp::now(),
                };
                let proposal =
                    Proposal::new(&invocation, self.client.serialized_identity().clone());
                let simulation = SimulationResult {
                    results: rwset.encode(),
                    events: Bytes::new(),
                    response: Response {
                        status: 200,
                        ..Response::default()
                    },
                    chaincode_id: ChaincodeId {
                        name: "transfer".to_owned(),
                        version: "1.0".to_owned(),
                        path: String::new(),
                    },
                };
                let endorsement = endorse(&proposal, &simulation, &self.endorser).unwrap();
                proposal
                    .transaction(&[endorsement], &self.client)
                    .unwrap()
                    .encode_to_vec()
                    .into()
            })
            .collect();
        let mut block = new_block(number, previous, envelopes);
        let nonce = self.orderer.new_nonce().unwrap();
        sign_block(&mut block, 0, &self.orderer, nonce).unwrap();
        block
    }
}

fn decode(block: &Block) -> DecodedBlock {
    DecodedBlock::from_block(block.clone(), Limits::default()).unwrap()
}

/// A state holding accounts 0..200 as block 1 wrote them.
fn seeded(state: &dyn VersionedState) {
    let mut batch = UpdateBatch::new();
    for slot in 0..TRANSACTIONS {
        for account in [2 * slot, 2 * slot + 1] {
            batch.put(
                "transfer",
                &format!("account{account:07}"),
                Bytes::from_static(b"1000000"),
                Height::new(1, slot as u64),
            );
        }
    }
    state
        .apply(&batch, Height::new(1, TRANSACTIONS as u64 - 1))
        .unwrap();
}

fn stages(c: &mut Criterion) {
    let genesis = read_block("ch100-block-0.block");
    let context = context_of(&genesis);
    let parties = Parties::load();
    let genesis_hash = block_header_hash(genesis.header.as_ref().unwrap());
    let mint = parties.transfer_block(1, &genesis_hash, None);
    let mint_hash = block_header_hash(mint.header.as_ref().unwrap());
    let transfers = parties.transfer_block(2, &mint_hash, Some(1));
    let fabric_block = read_block("extra/ch100-block-4.block");
    let now = weft_msp::now();

    let mut group = c.benchmark_group("committer");
    group.throughput(Throughput::Elements(TRANSACTIONS as u64));
    group.bench_function("decode/transfers", |b| {
        b.iter(|| decode(black_box(&transfers)))
    });
    group.bench_function("decode/fabric_kv_puts", |b| {
        b.iter(|| decode(black_box(&fabric_block)))
    });

    let decoded = decode(&transfers);
    assert!(
        check_block(&decoded, &context, now)
            .iter()
            .all(|c| *c == TxValidationCode::Valid)
    );
    group.bench_function("checks/transfers", |b| {
        b.iter(|| check_block(black_box(&decoded), &context, now))
    });
    let fabric_decoded = decode(&fabric_block);
    group.bench_function("checks/fabric_kv_puts", |b| {
        b.iter(|| check_block(black_box(&fabric_decoded), &context, now))
    });

    let dir = tempfile::tempdir().unwrap();
    let memory = MemoryState::open(&dir.path().join("memory"), MemoryOptions::default()).unwrap();
    seeded(&memory);
    let valid = vec![TxValidationCode::Valid; TRANSACTIONS];
    group.bench_function("mvcc/transfers", |b| {
        b.iter(|| {
            let mut codes = valid.clone();
            validate_block(&decoded, &mut codes, &memory).unwrap();
            update_batch(&decoded, &codes, &memory).unwrap()
        })
    });
    let batch = update_batch(&decoded, &valid, &memory).unwrap();
    let rocks = RocksState::open(&dir.path().join("rocks"), RocksOptions::default()).unwrap();
    for (name, state) in [
        ("apply/memory", &memory as &dyn VersionedState),
        ("apply/rocksdb", &rocks as &dyn VersionedState),
    ] {
        let mut block_num = 10;
        group.bench_function(name, |b| {
            b.iter(|| {
                block_num += 1;
                state.apply(&batch, Height::new(block_num, 99)).unwrap();
            })
        });
    }

    for (name, durability) in [
        ("append/every_block", Durability::EveryBlock),
        ("append/none", Durability::None),
    ] {
        let store_dir = tempfile::tempdir().unwrap();
        let store =
            BlockStore::open(&StoreConfig::new(store_dir.path()).with_durability(durability))
                .unwrap();
        store.append(&genesis).unwrap();
        let data = transfers.data.clone();
        let metadata = transfers.metadata.clone();
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                // A chain of copies of the transfer block, linked for this
                // store; building it is not timed.
                let mut previous = store.last_header_hash().unwrap();
                let chain: Vec<Block> = (0..iterations)
                    .map(|offset| {
                        let mut block = new_block(store.height() + offset, &previous, Vec::new());
                        block.data = data.clone();
                        if let Some(header) = &mut block.header {
                            header.data_hash = transfers.header.as_ref().unwrap().data_hash.clone();
                            previous = block_header_hash(header);
                        }
                        block.metadata = metadata.clone();
                        block
                    })
                    .collect();
                let started = Instant::now();
                for block in &chain {
                    store.append(block).unwrap();
                }
                started.elapsed()
            })
        });
    }

    group.bench_function("commit/transfers_memory_every_block", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let run = tempfile::tempdir().unwrap();
                let state: Arc<dyn VersionedState> = Arc::new(
                    MemoryState::open(&run.path().join("state"), MemoryOptions::default()).unwrap(),
                );
                let ledger = Arc::new(
                    BlockStore::open(&StoreConfig::new(run.path().join("blocks"))).unwrap(),
                );
                let mut committer =
                    ChannelCommitter::create(genesis.clone(), state, ledger).unwrap();
                committer.commit(mint.clone(), now).unwrap();
                let block = transfers.clone();
                let started = Instant::now();
                let committed = committer.commit(block, now).unwrap();
                total += started.elapsed();
                assert!(
                    committed
                        .codes
                        .iter()
                        .all(|c| *c == TxValidationCode::Valid)
                );
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, stages);
criterion_main!(benches);
