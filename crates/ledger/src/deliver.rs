//! The streaming half of Fabric's Deliver, shared by the peer's and the
//! orderer's Deliver services: send the blocks of a resolved [`SeekRange`]
//! as they become available, and say how the request ended.
//!
//! Services do the envelope and access checks, shape each block into their
//! response type and report the returned status to the client.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use weft_protos::common::Status;

use crate::{BlockStore, Error, Result, SeekRange, SeekStep};

/// How a Deliver request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// Every block of the range was sent, or the client asked not to wait
    /// for a block that does not exist yet: report this status.
    Status(Status),
    /// The client went away; report nothing.
    Disconnected,
}

/// Sends the blocks of `range` from `store`, in order, as raw block bytes.
/// `send` returns `false` when the client has gone away. Blocks that do
/// not exist yet are awaited (`BLOCK_UNTIL_READY`) or end the request with
/// NOT_FOUND (`FAIL_IF_NOT_READY`).
pub async fn stream_range<F, Fut>(
    store: Arc<BlockStore>,
    range: SeekRange,
    mut send: F,
) -> Result<StreamEnd>
where
    F: FnMut(u64, Bytes) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut heights = store.subscribe();
    let mut next = range.start;
    loop {
        match range.step(next, store.height()) {
            SeekStep::Deliver => {
                let reader = store.clone();
                // Under group commit a read of the tail may sync the disk.
                let bytes = tokio::task::spawn_blocking(move || reader.block_bytes(next))
                    .await
                    .map_err(|e| Error::ReadTask {
                        reason: e.to_string(),
                    })??
                    .ok_or(Error::MissingBlock { block_number: next })?;
                if !send(next, bytes).await {
                    return Ok(StreamEnd::Disconnected);
                }
                if range.is_last(next) {
                    return Ok(StreamEnd::Status(Status::Success));
                }
                next += 1;
            }
            SeekStep::Wait => {
                if heights.wait_for(|height| *height > next).await.is_err() {
                    // The store was closed.
                    return Ok(StreamEnd::Status(Status::ServiceUnavailable));
                }
            }
            SeekStep::NotFound => return Ok(StreamEnd::Status(Status::NotFound)),
            SeekStep::Finished => return Ok(StreamEnd::Status(Status::Success)),
        }
    }
}
