//! Criterion benchmarks of the foundation: identity validation with and
//! without the identity cache, policy evaluation for the endorsement
//! policies of Thakkar et al. (Table III), the typed decode of a real
//! 100-transaction Fabric block, the block store's TxID lookup, and JSON
//! queries with and without a JSON index.
//!
//! Run with `cargo bench --bench foundation`; figures are recorded in
//! docs/benchmarks.md. Names follow `module::operation/parameter=value`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use weft_msp::testing::TestOrg;
use weft_msp::{MspManager, NodeRole, crypto, now};
use weft_policy::{SignaturePolicy, SignedData, dsl};
use weft_protos::view::{DecodedBlock, Limits};

/// A creator's signature over a ~3 KB payload, the size of a FastFabric
/// transaction.
const PAYLOAD_BYTES: usize = 3 * 1024;

fn creator_validation(c: &mut Criterion) {
    let org = TestOrg::new("Org1MSP");
    let signer = org.signer(NodeRole::Client);
    let payload = vec![7u8; PAYLOAD_BYTES];
    let signature = signer.sign(&payload).unwrap();
    let serialized = signer.serialized_identity().clone();
    let manager = MspManager::new([org.msp()]);
    let at = now();

    let mut group = c.benchmark_group("msp::creator");
    group.bench_function("verify_only", |b| {
        let point = signer.certificate().public_key();
        b.iter(|| {
            crypto::verify(black_box(point), black_box(&payload), black_box(&signature)).unwrap()
        });
    });
    group.bench_function("verify_frequent_key", |b| {
        // A cached identity whose key has earned its table.
        let identity = manager.deserialize(&serialized, at).unwrap();
        for _ in 0..crypto::TABLE_AFTER_USES {
            identity.verify(&payload, &signature).unwrap();
        }
        b.iter(|| {
            identity
                .verify(black_box(&payload), black_box(&signature))
                .unwrap()
        });
    });
    // The same two, each verification after 8 MiB of other memory has been
    // written: caches as cold as a node's between transactions at moderate
    // load, where the key's table and the base point's come from memory.
    let mut other_memory = vec![0u8; 8 << 20];
    let mut evict = move || {
        for (i, byte) in other_memory.iter_mut().enumerate().step_by(64) {
            *byte = byte.wrapping_add(i as u8);
        }
        black_box(other_memory[4096]);
    };
    group.bench_function("verify_only/caches=cold", |b| {
        let point = signer.certificate().public_key();
        b.iter_batched(
            &mut evict,
            |()| crypto::verify(point, black_box(&payload), black_box(&signature)).unwrap(),
            BatchSize::PerIteration,
        );
    });
    group.bench_function("verify_frequent_key/caches=cold", |b| {
        let identity = manager.deserialize(&serialized, at).unwrap();
        b.iter_batched(
            &mut evict,
            |()| {
                identity
                    .verify(black_box(&payload), black_box(&signature))
                    .unwrap()
            },
            BatchSize::PerIteration,
        );
    });
    group.bench_function("validate_and_verify/cache=cold", |b| {
        b.iter(|| {
            let identity = manager
                .validate_uncached(black_box(&serialized), at)
                .unwrap();
            identity.verify(&payload, &signature).unwrap();
        });
    });
    group.bench_function("validate_and_verify/cache=warm", |b| {
        manager.deserialize(&serialized, at).unwrap();
        b.iter(|| {
            let identity = manager.deserialize(black_box(&serialized), at).unwrap();
            identity.verify(&payload, &signature).unwrap();
        });
    });
    group.finish();
}

/// Thakkar et al. 2018, Table III, over organisations Org1..Org4: the AND/OR
/// form and the OutOf form of "any k of the four", for k = 1..4.
fn table_iii() -> Vec<(String, usize)> {
    let principals: Vec<String> = (1..=4).map(|i| format!("'Org{i}MSP.peer'")).collect();
    let mut policies = Vec::new();
    for k in 1..=4 {
        let and_or = match k {
            1 => format!("OR({})", principals.join(", ")),
            4 => format!("AND({})", principals.join(", ")),
            _ => {
                let gates: Vec<String> = combinations(4, k)
                    .into_iter()
                    .map(|combo| {
                        let members: Vec<&str> =
                            combo.iter().map(|&i| principals[i].as_str()).collect();
                        format!("AND({})", members.join(", "))
                    })
                    .collect();
                format!("OR({})", gates.join(", "))
            }
        };
        policies.push((and_or, k));
        policies.push((format!("OutOf({k}, {})", principals.join(", ")), k));
    }
    policies
}

fn combinations(n: usize, k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    (0..n)
        .flat_map(|first| {
            combinations(n - first - 1, k - 1)
                .into_iter()
                .map(move |rest| {
                    std::iter::once(first)
                        .chain(rest.into_iter().map(|i| i + first + 1))
                        .collect()
                })
        })
        .collect()
}

fn policy_evaluation(c: &mut Criterion) {
    let orgs: Vec<TestOrg> = (1..=4)
        .map(|i| TestOrg::new(&format!("Org{i}MSP")))
        .collect();
    let manager = MspManager::new(orgs.iter().map(TestOrg::msp));
    let data = Bytes::from(vec![9u8; PAYLOAD_BYTES]);
    let endorsements: Vec<SignedData> = orgs
        .iter()
        .map(|org| {
            let signer = org.signer(NodeRole::Peer);
            SignedData {
                data: data.clone(),
                identity: signer.serialized_identity().clone(),
                signature: signer.sign(&data).unwrap().into(),
            }
        })
        .collect();
    let identities: Vec<Arc<weft_msp::Identity>> = endorsements
        .iter()
        .map(|e| manager.deserialize(&e.identity, now()).unwrap())
        .collect();

    let mut with_signatures = c.benchmark_group("policy::table_iii");
    for (index, (expression, required)) in table_iii().into_iter().enumerate() {
        let policy =
            SignaturePolicy::compile(&expression, &dsl::parse(&expression).unwrap()).unwrap();
        let form = if index % 2 == 0 { "and_or" } else { "out_of" };
        for count in required..=4 {
            let id = format!("form={form},k={required},endorsements={count}");
            with_signatures.bench_function(BenchmarkId::new("evaluate", &id), |b| {
                b.iter(|| {
                    policy
                        .evaluate(black_box(&endorsements[..count]), &manager, now())
                        .unwrap()
                });
            });
            with_signatures.bench_function(BenchmarkId::new("rule_only", &id), |b| {
                b.iter(|| assert!(policy.is_satisfied_by(black_box(&identities[..count]))));
            });
        }
    }
    with_signatures.finish();
}

fn block_decode(c: &mut Criterion) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fabric-2.5/extra/ch100-block-4.block"
    );
    let bytes = Bytes::from(std::fs::read(path).expect("fixture block"));
    let mut group = c.benchmark_group("protos::decode_block");
    group.throughput(Throughput::Elements(100));
    group.bench_function("txs=100", |b| {
        b.iter(|| {
            let block = DecodedBlock::decode(black_box(bytes.clone()), Limits::default()).unwrap();
            assert_eq!(block.transactions.len(), 100);
            block
        });
    });
    group.finish();
}

/// The duplicate-TxID check the endorser and the committer make for every
/// transaction (and the store again when it appends): a lookup of a TxID,
/// with 100,000 TxIDs in the store's memtable.
fn tx_id_lookup(c: &mut Criterion) {
    use weft_ledger::{BlockStore, Durability, StoreConfig};
    const BLOCKS: u64 = 200;
    const TXS_PER_BLOCK: u64 = 500;
    let dir = tempfile::tempdir().unwrap();
    let store =
        BlockStore::open(&StoreConfig::new(dir.path()).with_durability(Durability::None)).unwrap();
    // TxIDs `indexed-{block}-{tx}`.
    for block in weft_ledger::testing::synthetic_chain("indexed", BLOCKS, TXS_PER_BLOCK as usize) {
        store.append(&block).unwrap();
    }
    let mut group = c.benchmark_group("ledger::contains_tx_id");
    let mut next = 0u64;
    group.bench_function("absent/indexed=100000", |b| {
        b.iter(|| {
            next += 1;
            let tx_id = format!("absent-{next}");
            assert!(!store.contains_tx_id(black_box(&tx_id)).unwrap());
        });
    });
    // A block's worth at once, as the committer asks: one lookup each
    // against one batched lookup.
    const BATCH: u64 = 50;
    group.bench_function("absent/50 one by one", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                next += 1;
                let tx_id = format!("absent-{next}");
                assert!(!store.contains_tx_id(black_box(&tx_id)).unwrap());
            }
        });
    });
    group.bench_function("absent/50 batched", |b| {
        b.iter(|| {
            let tx_ids: Vec<String> = (0..BATCH)
                .map(|_| {
                    next += 1;
                    format!("absent-{next}")
                })
                .collect();
            let tx_ids: Vec<&str> = tx_ids.iter().map(String::as_str).collect();
            assert!(store.stored_tx_ids(black_box(&tx_ids)).unwrap().is_empty());
        });
    });
    group.bench_function("present/indexed=100000", |b| {
        b.iter(|| {
            next += 7_919;
            let tx_id = format!(
                "indexed-{}-{}",
                next / TXS_PER_BLOCK % BLOCKS,
                next % TXS_PER_BLOCK
            );
            assert!(store.contains_tx_id(black_box(&tx_id)).unwrap());
        });
    });
    group.finish();
}

/// Documents in the namespace a JSON query searches.
const DOCUMENTS: u64 = 100_000;

/// A namespace of [`DOCUMENTS`] assets (ten colors, sizes 0–999), with and
/// without a JSON index on `["color", "size"]`: the selective query and
/// the sorted one each read about 100 documents through the index, and
/// every document without it.
fn json_queries(c: &mut Criterion) {
    use weft_peer_endorser::Stub;
    use weft_statedb::json_index::{IndexMaintainer, JsonIndex};
    use weft_statedb::memory::{MemoryOptions, MemoryState};
    use weft_statedb::{Height, UpdateBatch, VersionedState};

    let org = TestOrg::new("Org1MSP");
    let client = org.signer(NodeRole::Client);
    let invocation = weft_protos::tx::Invocation {
        channel_id: "ch",
        chaincode: "assets",
        args: vec![Bytes::from_static(b"query")],
        nonce: Bytes::from_static(b"nonce"),
        timestamp_seconds: 0,
    };
    let proposal =
        weft_protos::tx::Proposal::new(&invocation, client.serialized_identity().clone());
    let proposal =
        weft_protos::tx::ReceivedProposal::decode(&proposal.signed(&client).unwrap()).unwrap();
    let colors = [
        "amber", "black", "blue", "cyan", "gold", "green", "grey", "pink", "red", "white",
    ];
    let load = |indexed: bool| {
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let mut batch = UpdateBatch::new();
        for n in 0..DOCUMENTS {
            let document = format!(
                r#"{{"docType":"asset","color":"{}","size":{},"owner":"owner{}"}}"#,
                colors[(n % 10) as usize],
                (n / 10) % 1000,
                n % 97
            );
            batch.put(
                "assets",
                &format!("asset{n:06}"),
                Bytes::from(document),
                Height::new(1, n),
            );
        }
        state.apply(&batch, Height::new(1, DOCUMENTS)).unwrap();
        if indexed {
            let index = JsonIndex::parse(
                "colorSize.json",
                br#"{"index":{"fields":["color","size"]},"ddoc":"byColor","name":"colorSize","type":"json"}"#,
            )
            .unwrap();
            let mut build = UpdateBatch::new();
            IndexMaintainer::new()
                .build(&mut build, &state, "assets", &index, Height::new(2, 0))
                .unwrap();
            state.apply(&build, Height::new(2, 0)).unwrap();
        }
        (dir, state)
    };
    let queries = [
        (
            "selective",
            r#"{"selector":{"color":"blue","size":{"$gte":990}}}"#,
        ),
        (
            "sorted",
            r#"{"selector":{"color":"red"},"sort":[{"size":"desc"}],"limit":100}"#,
        ),
    ];
    let mut group = c.benchmark_group("endorser::json_query");
    group.sample_size(10);
    for indexed in [false, true] {
        let (_dir, state) = load(indexed);
        for (name, query) in queries {
            let snapshot = state.snapshot();
            let label = format!("{name}/index={}", if indexed { "yes" } else { "no" });
            group.bench_function(label, |b| {
                b.iter(|| {
                    let mut stub = Stub::new(&proposal, "assets", snapshot.as_ref());
                    let found = stub.get_query_result(black_box(query), None).unwrap();
                    assert_eq!(found.results.len(), 100);
                });
            });
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    creator_validation,
    policy_evaluation,
    block_decode,
    tx_id_lookup,
    json_queries
);
criterion_main!(benches);
