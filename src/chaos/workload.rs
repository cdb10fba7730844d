//! The chaos run's workload: clients on Fabric's Gateway path, as Fabric's
//! SDKs submit (Endorse at their organisation's peer, sign, Submit, then
//! CommitStatus), each transaction a `kv put` of a key of its own. Every
//! transaction's fate is kept, so that the audit can hold the network to
//! what its clients were told.
//!
//! Clients ride out the faults: a call to a peer that is down fails and
//! the client goes on with its next transaction; a commit status is asked
//! of every organisation's peer in turn until one answers or the
//! transaction's deadline passes, since a peer may die while its client
//! waits.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use weft_msp::Signer;
use weft_protos::common::Envelope;
use weft_protos::dial::Connection;
use weft_protos::gateway::gateway_client::GatewayClient;
use weft_protos::gateway::{EndorseRequest, SubmitRequest};
use weft_protos::tx::{Invocation, Proposal};

use crate::bench::load::signed_commit_status_request;
use crate::network::connection::ConnectionFile;

/// What became of one transaction.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub tx_id: String,
    pub fate: Fate,
}

#[derive(Debug, Clone)]
pub enum Fate {
    /// A peer's CommitStatus answered: committed in `block` with `code`.
    Confirmed { code: i32, block: u64 },
    /// Accepted by an orderer, but no CommitStatus answered in time.
    Unconfirmed,
    /// Endorse or Submit failed: the client was told it did not go
    /// through (it may still have been ordered).
    Refused { stage: &'static str },
}

/// One organisation as its client sees it.
struct Org {
    user: Signer,
    gateway: GatewayClient<Connection>,
}

/// The running workload: a thread of its own with its own runtime.
pub struct Workload {
    stop: Arc<AtomicBool>,
    confirmed: Arc<AtomicU64>,
    /// The highest block a confirmed transaction was committed in.
    highest_block: Arc<AtomicU64>,
    thread: JoinHandle<Result<Vec<Outcome>>>,
}

impl Workload {
    /// Starts `clients` clients on `channel` of the network of
    /// `connection`, client `i` at organisation `i mod orgs`; each gives up
    /// on a commit status after `tx_timeout`. Returns once every client is
    /// connected.
    pub fn start(
        connection: &ConnectionFile,
        channel: &str,
        clients: usize,
        tx_timeout: Duration,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let confirmed = Arc::new(AtomicU64::new(0));
        let highest_block = Arc::new(AtomicU64::new(0));
        let (ready, started) = std::sync::mpsc::channel();
        let connection = connection.clone();
        let channel = channel.to_owned();
        let thread = {
            let stop = stop.clone();
            let confirmed = confirmed.clone();
            let highest_block = highest_block.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()?;
                runtime.block_on(async move {
                    let orgs = match connect(&connection).await {
                        Ok(orgs) => Arc::new(orgs),
                        Err(error) => {
                            let _ = ready.send(Err(anyhow!("{error:#}")));
                            return Err(error);
                        }
                    };
                    let _ = ready.send(Ok(()));
                    let run_id = hex::encode(&orgs[0].user.new_nonce()?[..4]);
                    let outcomes = Arc::new(Mutex::new(Vec::new()));
                    let mut tasks = tokio::task::JoinSet::new();
                    for client in 0..clients {
                        let client = Client {
                            index: client,
                            orgs: orgs.clone(),
                            channel: channel.clone(),
                            run_id: run_id.clone(),
                            tx_timeout,
                        };
                        let (stop, confirmed, highest_block, outcomes) = (
                            stop.clone(),
                            confirmed.clone(),
                            highest_block.clone(),
                            outcomes.clone(),
                        );
                        tasks.spawn(async move {
                            let mut sequence = 0u64;
                            while !stop.load(Ordering::Relaxed) {
                                let outcome = client.transact(sequence).await;
                                sequence += 1;
                                match outcome.fate {
                                    Fate::Confirmed { block, .. } => {
                                        confirmed.fetch_add(1, Ordering::Relaxed);
                                        highest_block.fetch_max(block, Ordering::Relaxed);
                                    }
                                    // A peer or orderer is down: let it come back.
                                    Fate::Refused { .. } | Fate::Unconfirmed => {
                                        tokio::time::sleep(Duration::from_millis(100)).await;
                                    }
                                }
                                if let Ok(mut outcomes) = outcomes.lock() {
                                    outcomes.push(outcome);
                                }
                            }
                        });
                    }
                    while tasks.join_next().await.is_some() {}
                    let outcomes = outcomes.lock().map(|o| o.clone()).unwrap_or_default();
                    Ok(outcomes)
                })
            })
        };
        match started.recv() {
            Ok(Ok(())) => Ok(Self {
                stop,
                confirmed,
                highest_block,
                thread,
            }),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(anyhow!("the workload's thread ended before it started")),
        }
    }

    /// Transactions confirmed so far, of any code.
    pub fn confirmed(&self) -> u64 {
        self.confirmed.load(Ordering::Relaxed)
    }

    /// The highest block a confirmed transaction was committed in: it
    /// grows while the network commits.
    pub fn highest_block(&self) -> u64 {
        self.highest_block.load(Ordering::Relaxed)
    }

    /// Stops the clients once their transactions in flight end, and
    /// returns every transaction's outcome.
    pub fn finish(self) -> Result<Vec<Outcome>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("the workload's thread panicked"))?
    }
}

async fn connect(connection: &ConnectionFile) -> Result<Vec<Org>> {
    let dialer = connection.dialer()?;
    let mut orgs = Vec::new();
    for organization in &connection.organizations {
        let user = organization
            .user
            .signer(&organization.msp_id)
            .with_context(|| format!("the user of {}", organization.name))?;
        let peer = organization
            .peers
            .first()
            .with_context(|| format!("{} lists no peer", organization.name))?
            .address()?;
        orgs.push(Org {
            user,
            gateway: GatewayClient::new(weft_protos::dial::ending_with_last_message(
                dialer.connect(peer).await?,
            )),
        });
    }
    anyhow::ensure!(
        !orgs.is_empty(),
        "the connection file lists no organisation"
    );
    Ok(orgs)
}

/// One client: its organisation, and the keys it writes.
struct Client {
    index: usize,
    orgs: Arc<Vec<Org>>,
    channel: String,
    run_id: String,
    tx_timeout: Duration,
}

impl Client {
    fn org(&self) -> &Org {
        &self.orgs[self.index % self.orgs.len()]
    }

    /// Endorses, submits and awaits the commit of transaction `sequence`.
    async fn transact(&self, sequence: u64) -> Outcome {
        let key = format!("chaos-{}-{}-{sequence}", self.run_id, self.index);
        let org = self.org();
        let Ok(nonce) = org.user.new_nonce() else {
            return refused(String::new(), "endorse");
        };
        let invocation = Invocation {
            channel_id: &self.channel,
            chaincode: "kv",
            args: vec![
                Bytes::from_static(b"put"),
                Bytes::from(key),
                Bytes::from(sequence.to_string()),
            ],
            nonce,
            timestamp_seconds: weft_msp::now(),
        };
        let proposal = Proposal::new(&invocation, org.user.serialized_identity().clone());
        let tx_id = proposal.tx_id.clone();
        let Ok(signed) = proposal.signed(&org.user) else {
            return refused(tx_id, "endorse");
        };
        let endorsed = org
            .gateway
            .clone()
            .endorse(EndorseRequest {
                transaction_id: tx_id.clone(),
                channel_id: self.channel.clone(),
                proposed_transaction: Some(signed),
                endorsing_organizations: Vec::new(),
            })
            .await;
        let Some(prepared) = endorsed
            .ok()
            .and_then(|r| r.into_inner().prepared_transaction)
        else {
            return refused(tx_id, "endorse");
        };
        let Ok(signature) = org.user.sign(&prepared.payload) else {
            return refused(tx_id, "submit");
        };
        let envelope = Envelope {
            payload: prepared.payload,
            signature: signature.into(),
        };
        let submitted = org
            .gateway
            .clone()
            .submit(SubmitRequest {
                transaction_id: tx_id.clone(),
                channel_id: self.channel.clone(),
                prepared_transaction: Some(envelope),
            })
            .await;
        if submitted.is_err() {
            return refused(tx_id, "submit");
        }
        let fate = self.commit_status(&tx_id).await;
        Outcome { tx_id, fate }
    }

    /// Asks each organisation's peer in turn, starting with the client's
    /// own, until one answers or the deadline passes.
    async fn commit_status(&self, tx_id: &str) -> Fate {
        let deadline = tokio::time::Instant::now() + self.tx_timeout;
        let org = self.org();
        let Ok(request) = signed_commit_status_request(tx_id, &self.channel, &org.user) else {
            return Fate::Unconfirmed;
        };
        for attempt in 0.. {
            let peer = &self.orgs[(self.index + attempt) % self.orgs.len()];
            let asked = tokio::time::timeout_at(
                deadline,
                peer.gateway.clone().commit_status(request.clone()),
            )
            .await;
            match asked {
                Ok(Ok(answer)) => {
                    let answer = answer.into_inner();
                    return Fate::Confirmed {
                        code: answer.result,
                        block: answer.block_number,
                    };
                }
                Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
                Err(_) => return Fate::Unconfirmed,
            }
            if tokio::time::Instant::now() >= deadline {
                return Fate::Unconfirmed;
            }
        }
        Fate::Unconfirmed
    }
}

fn refused(tx_id: String, stage: &'static str) -> Outcome {
    Outcome {
        tx_id,
        fate: Fate::Refused { stage },
    }
}
