//! A node joining a Raft channel that already runs (Fabric's onboarding):
//! it is given a config block of the channel that names it among the
//! consenters (the block that added it, or any later one), pulls every
//! block up to that one from the consenters the block names, and checks
//! the pulled chain against it hash by hash, back from the given block, so
//! that no consenter can hand it another history. Its Raft log then
//! starts empty: the leader sends what follows, and the entries its
//! blocks already hold are skipped (see the parent module).

use std::sync::Arc;
use std::time::Duration;

use weft_protos::common::Block;
use weft_protos::hash::{block_data_hash, block_header_hash};

use super::endpoint_of;
use crate::consensus::cluster::Transport;
use crate::error::{Error, Result};

/// How long a joining node keeps trying to pull the chain.
const JOIN_PATIENCE: Duration = Duration::from_secs(60);
const JOIN_RETRY: Duration = Duration::from_millis(500);

/// The blocks `from..=join`'s number of `channel_id`, pulled from the
/// consenters `join` names (other than `self_endpoint`) and checked to
/// end in `join`. Blocking: for a thread that may wait.
pub(crate) fn pull_chain_to(
    channel_id: &str,
    join: &Block,
    from: u64,
    transport: &Arc<Transport>,
    self_endpoint: &str,
) -> Result<Vec<Block>> {
    let bad = |block: u64, reason: String| Error::BadChain {
        channel: channel_id.to_owned(),
        block,
        reason,
    };
    let number = join.header.as_ref().map_or(0, |header| header.number);
    let (_, config) = weft_protos::block::config_of_block(join)
        .ok_or_else(|| bad(number, "the join block holds no config".to_owned()))?;
    let channel_config = crate::channel_config::ChannelConfig::new(channel_id, number, config)?;
    let metadata = super::raft_metadata(&channel_config).ok_or_else(|| {
        bad(
            number,
            "a channel is joined from a later config block only when Raft orders it".to_owned(),
        )
    })?;
    let others: Vec<String> = metadata
        .consenters
        .iter()
        .map(endpoint_of)
        .filter(|endpoint| endpoint != self_endpoint)
        .collect();
    if others.len() == metadata.consenters.len() {
        return Err(bad(
            number,
            format!(
                "the join block's consenters [{}] do not name this node ({self_endpoint})",
                others.join(", ")
            ),
        ));
    }
    let mut blocks: Vec<Block> = Vec::new();
    let deadline = std::time::Instant::now() + JOIN_PATIENCE;
    let mut last_error = String::from("no consenter answered");
    while from + (blocks.len() as u64) <= number {
        let mut progressed = false;
        for endpoint in &others {
            let start = from + blocks.len() as u64;
            if start > number {
                break;
            }
            match pull_blocking(transport, endpoint, channel_id, start, number + 1) {
                Ok(pulled) if !pulled.is_empty() => {
                    tracing::info!(
                        channel = %channel_id,
                        from = %endpoint,
                        blocks = pulled.len(),
                        up_to = number,
                        "pulled blocks to join the channel"
                    );
                    blocks.extend(pulled);
                    progressed = true;
                }
                Ok(_) => last_error = format!("{endpoint} has no block {start} yet"),
                Err(error) => last_error = error,
            }
        }
        if !progressed {
            if std::time::Instant::now() >= deadline {
                return Err(Error::Raft {
                    channel: channel_id.to_owned(),
                    reason: format!(
                        "joining: no consenter of [{}] gave blocks {}..={number}: {last_error}",
                        others.join(", "),
                        from + blocks.len() as u64
                    ),
                });
            }
            std::thread::sleep(JOIN_RETRY);
        }
    }
    blocks.truncate(usize::try_from(number + 1 - from).unwrap_or(usize::MAX));
    check_chain_ends_in(channel_id, &blocks, from, join)?;
    Ok(blocks)
}

/// Checks that `blocks` (numbers `from..`) are a hash chain whose last
/// header is `join`'s: each block's data hashes to its header, and each
/// header names the previous one's hash.
fn check_chain_ends_in(channel_id: &str, blocks: &[Block], from: u64, join: &Block) -> Result<()> {
    let bad = |block: u64, reason: &str| Error::BadChain {
        channel: channel_id.to_owned(),
        block,
        reason: format!("pulled to join: {reason}"),
    };
    let join_header = join
        .header
        .as_ref()
        .ok_or_else(|| bad(from, "the join block has no header"))?;
    let mut expected_hash = block_header_hash(join_header).to_vec();
    for (offset, block) in blocks.iter().enumerate().rev() {
        let number = from + offset as u64;
        let header = block
            .header
            .as_ref()
            .ok_or_else(|| bad(number, "no header"))?;
        if header.number != number {
            return Err(bad(number, &format!("numbered {}", header.number)));
        }
        if block_header_hash(header).as_slice() != expected_hash.as_slice() {
            return Err(bad(
                number,
                "its header is not the one the next block (or the join block) names",
            ));
        }
        let data = block.data.clone().unwrap_or_default();
        if block_data_hash(&data).as_slice() != header.data_hash.as_ref() {
            return Err(bad(number, "its data does not hash to its header"));
        }
        expected_hash = header.previous_hash.to_vec();
    }
    Ok(())
}

/// [`Transport::pull`] from a thread that may not wait on the node's
/// runtime directly: the pull runs on the node's runtime and this thread
/// waits for its result.
fn pull_blocking(
    transport: &Arc<Transport>,
    endpoint: &str,
    channel_id: &str,
    start: u64,
    end: u64,
) -> std::result::Result<Vec<weft_protos::common::Block>, String> {
    let (done, result) = std::sync::mpsc::sync_channel(1);
    let (transport_owned, endpoint, channel_id) = (
        transport.clone(),
        endpoint.to_owned(),
        channel_id.to_owned(),
    );
    transport.runtime().spawn(async move {
        let pulled = transport_owned
            .pull(&endpoint, &channel_id, start, end)
            .await;
        let _ = done.send(pulled);
    });
    result
        .recv()
        .map_err(|_| "the node's runtime stopped".to_owned())?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `count` blocks of transactions named after `history`,
    /// each linked to the one before.
    fn chain(history: &str, count: u64) -> Vec<Block> {
        let mut blocks: Vec<Block> = Vec::new();
        for number in 0..count {
            let previous = blocks
                .last()
                .and_then(|block| block.header.as_ref())
                .map(|header| block_header_hash(header).to_vec())
                .unwrap_or_default();
            let envelope = bytes::Bytes::from(format!("{history} {number}"));
            blocks.push(weft_protos::block::new_block(
                number,
                &previous,
                vec![envelope],
            ));
        }
        blocks
    }

    #[test]
    fn a_pulled_chain_must_end_in_the_join_block() {
        let blocks = chain("ours", 5);
        let join = blocks[4].clone();
        check_chain_ends_in("ch", &blocks, 0, &join).unwrap();
        check_chain_ends_in("ch", &blocks[2..], 2, &join).unwrap();
        // Another history: a block's data replaced.
        let mut forged = blocks.clone();
        forged[1].data = Some(weft_protos::common::BlockData {
            data: vec![bytes::Bytes::from_static(b"other")],
        });
        let error = check_chain_ends_in("ch", &forged, 0, &join).unwrap_err();
        assert!(error.to_string().contains("does not hash"), "{error}");
        // A consistent chain of its own, not the join block's.
        let other = chain("theirs", 5);
        let error = check_chain_ends_in("ch", &other[..5], 0, &join).unwrap_err();
        assert!(error.to_string().contains("not the one"), "{error}");
        // Short of the join block.
        let error = check_chain_ends_in("ch", &blocks[..4], 0, &join).unwrap_err();
        assert!(error.to_string().contains("not the one"), "{error}");
    }
}
