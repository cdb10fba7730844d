//! The Gateway's Broadcast streams: one long-lived stream to each orderer
//! ([`BroadcastLine`]), shared by every Submit, where Fabric's Gateway
//! opens a stream for each transaction. What an orderer sees is what it
//! sees from an SDK that keeps its Broadcast stream open.
//!
//! A stream that ends (the orderer stopped, restarted, or closed it after
//! its idle limit) fails the submits still waiting on it; each tries a new
//! stream to that orderer once, then the next orderer as before. The one
//! envelope that can end a stream by itself is one over the orderer's gRPC
//! message limit, so an envelope above [`SHARED_ENVELOPE_BYTES_MAX`] goes on
//! a stream of its own, as on Fabric, and cannot take other clients'
//! answers down with it.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prost::Message;
use tonic::Status;
use tonic::transport::Channel;
use weft_protos::broadcast_line::{Answer, BroadcastLine};
use weft_protos::common::Envelope;
use weft_protos::orderer::atomic_broadcast_client::AtomicBroadcastClient;

/// The largest envelope sent on the shared stream; larger ones get a
/// stream each. Far below any gRPC limit an orderer is configured with
/// (Fabric's default is 100 MiB), far above a transaction's few kilobytes.
const SHARED_ENVELOPE_BYTES_MAX: usize = 1024 * 1024;

/// The open Broadcast stream to each orderer, by address.
#[derive(Default)]
pub(crate) struct BroadcastLines {
    lines: Mutex<HashMap<String, Arc<BroadcastLine>>>,
}

impl std::fmt::Debug for BroadcastLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines = self.lines.lock();
        f.debug_struct("BroadcastLines")
            .field("orderers", &lines.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl BroadcastLines {
    /// Sends `envelope` to the orderer at `address` (over `channel`, its
    /// connection, when a stream must be opened) and waits for its answer.
    pub(crate) async fn broadcast(
        &self,
        address: &str,
        channel: impl Fn() -> Result<Channel, Status>,
        envelope: Envelope,
    ) -> Answer {
        if envelope.encoded_len() > SHARED_ENVELOPE_BYTES_MAX {
            let mut answers = AtomicBroadcastClient::new(channel()?)
                .broadcast(tokio_stream::iter([envelope]))
                .await?
                .into_inner();
            return answers
                .message()
                .await?
                .ok_or_else(|| Status::unavailable("the orderer ended the Broadcast stream"));
        }
        // A stream that ends before answering, as the envelope goes out
        // (the orderer closed it at its idle limit just then, or stopped),
        // is replaced once: an orderer that is gone refuses the new one at
        // once, and the submit tries the next orderer.
        let mut ended = Status::unavailable("the Broadcast stream ended");
        for _ in 0..2 {
            match self
                .line(address, &channel)?
                .broadcast(envelope.clone())
                .await
            {
                Ok(answer) => return Ok(answer),
                Err(why) => ended = why,
            }
        }
        Err(ended)
    }

    /// The stream to `address`, opened if there is none or it ended.
    fn line(
        &self,
        address: &str,
        channel: impl Fn() -> Result<Channel, Status>,
    ) -> Result<Arc<BroadcastLine>, Status> {
        let mut lines = self.lines.lock();
        if let Some(line) = lines.get(address)
            && !line.has_ended()
        {
            return Ok(line.clone());
        }
        let line = BroadcastLine::open(channel()?);
        lines.insert(address.to_owned(), line.clone());
        Ok(line)
    }
}
