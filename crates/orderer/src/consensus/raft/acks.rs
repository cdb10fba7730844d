//! A follower's acknowledgements that would tell the leader nothing.
//!
//! Whenever the leader's commit index moves, raft-rs sends every follower
//! an append without entries that carries the new index, and the follower
//! acknowledges it like any append. When the follower has already
//! acknowledged the entry that append names, the second acknowledgement
//! changes nothing on the leader: raft-rs's leader ignores one of an
//! index it already counts as matched. In stream mode every transaction is an entry of its
//! own, so these acknowledgements are two of the messages each
//! transaction costs the orderers (one per follower, each a write on the
//! follower and a wake-up on the leader).
//!
//! So the follower withholds the acknowledgement of an empty append when
//! it was accepted and names an entry the follower has already
//! acknowledged to the same leader in the same term (the acknowledgement
//! sent, or queued to leave once the log is synced): the leader has that
//! one, or will. Only the first empty append with the same entry and
//! commit index is withheld: a leader that sends it again (after a
//! heartbeat's answer, when it still thinks this follower behind) wants to
//! hear, so an acknowledgement lost on the way is made good within a
//! heartbeat or two and the leader's progress tracking never stalls.
//!
//! Leaving a message out is always safe in Raft, which tolerates lost
//! messages; the rule above keeps it from costing liveness. The leader
//! still hears from the follower at every heartbeat (check-quorum counts
//! those), and every append that carries entries is acknowledged.

use raft::eraftpb::{Message, MessageType};
use raft::{RawNode, Storage};

/// Steps `message` into `node`, leaving out raft-rs's answer when the
/// leader has no use for it.
pub(super) fn step<S: Storage>(
    node: &mut RawNode<S>,
    acks: &mut Acknowledgements,
    message: Message,
) -> raft::Result<()> {
    // Only an empty append's answer may be left out; the append is small.
    let empty_append = (message.get_msg_type() == MessageType::MsgAppend
        && message.entries.is_empty())
    .then(|| (message.clone(), node.raft.msgs.len()));
    node.step(message)?;
    if let Some((append, queued)) = empty_append {
        let messages = &mut node.raft.msgs;
        if messages.len() == queued + 1
            && let Some((response, ahead)) = messages.split_last()
            && acks.withhold(&append, response, ahead)
        {
            messages.pop();
        }
    }
    Ok(())
}

/// What a follower remembers of its acknowledgements.
#[derive(Debug, Default)]
pub(super) struct Acknowledgements {
    /// The highest entry acknowledged to a leader: (term, leader, index).
    sent: Option<(u64, u64, u64)>,
    /// The empty append whose acknowledgement was last withheld: (term,
    /// index, commit index).
    withheld: Option<(u64, u64, u64)>,
}

impl Acknowledgements {
    /// Notes a message on its way to another node.
    pub(super) fn note_sent(&mut self, message: &Message) {
        if let Some(index) = accepted_index(message) {
            self.note(message.term, message.to, index);
        }
    }

    fn note(&mut self, term: u64, leader: u64, index: u64) {
        match &mut self.sent {
            Some((sent_term, sent_leader, sent_index))
                if *sent_term == term && *sent_leader == leader =>
            {
                *sent_index = (*sent_index).max(index);
            }
            _ => self.sent = Some((term, leader, index)),
        }
    }

    /// Whether `response`, raft-rs's answer to `incoming`, may be left
    /// out; `queued` are the messages raft-rs holds to send ahead of it.
    /// Counts it as withheld if so.
    pub(super) fn withhold(
        &mut self,
        incoming: &Message,
        response: &Message,
        queued: &[Message],
    ) -> bool {
        if incoming.get_msg_type() != MessageType::MsgAppend || !incoming.entries.is_empty() {
            return false;
        }
        let Some(index) = accepted_index(response) else {
            return false;
        };
        let key = (incoming.term, incoming.index, incoming.commit);
        if response.to != incoming.from
            || response.term != incoming.term
            || index != incoming.index
            || self.withheld == Some(key)
        {
            return false;
        }
        let acknowledged = |term: u64, leader: u64, sent: u64| {
            term == response.term && leader == response.to && sent >= index
        };
        let sent_before = self
            .sent
            .is_some_and(|(term, leader, sent)| acknowledged(term, leader, sent));
        let queued_before = queued.iter().any(|message| {
            accepted_index(message).is_some_and(|sent| acknowledged(message.term, message.to, sent))
        });
        if !(sent_before || queued_before) {
            return false;
        }
        self.withheld = Some(key);
        true
    }
}

/// The entry an accepting append acknowledgement names, if `message` is
/// one.
fn accepted_index(message: &Message) -> Option<u64> {
    (message.get_msg_type() == MessageType::MsgAppendResponse
        && !message.reject
        && message.request_snapshot == 0)
        .then_some(message.index)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use raft::eraftpb::Entry;
    use raft::storage::MemStorage;

    use super::*;

    const LEADER: u64 = 1;
    const TERM: u64 = 4;

    fn message(kind: MessageType, index: u64, commit: u64) -> Message {
        let mut message = Message::default();
        message.set_msg_type(kind);
        message.term = TERM;
        message.index = index;
        message.commit = commit;
        message
    }

    fn append(index: u64, commit: u64, entries: usize) -> Message {
        let mut append = message(MessageType::MsgAppend, index, commit);
        append.from = LEADER;
        append.entries = vec![Entry::default(); entries].into();
        append
    }

    fn acknowledgement(index: u64, commit: u64) -> Message {
        let mut acknowledgement = message(MessageType::MsgAppendResponse, index, commit);
        acknowledgement.to = LEADER;
        acknowledgement
    }

    #[test]
    fn an_entry_already_acknowledged_is_not_acknowledged_again() {
        let mut acks = Acknowledgements::default();
        acks.note_sent(&acknowledgement(7, 6));
        assert!(acks.withhold(&append(7, 7, 0), &acknowledgement(7, 7), &[]));
        // Committed or not: the leader has the acknowledgement.
        acks.note_sent(&acknowledgement(8, 7));
        assert!(acks.withhold(&append(8, 7, 0), &acknowledgement(8, 7), &[]));
        assert!(acks.withhold(&append(8, 8, 0), &acknowledgement(8, 8), &[]));
    }

    #[test]
    fn an_acknowledgement_still_queued_counts_as_sent() {
        let mut acks = Acknowledgements::default();
        let queued = [acknowledgement(7, 6)];
        assert!(acks.withhold(&append(7, 7, 0), &acknowledgement(7, 7), &queued));
    }

    #[test]
    fn what_the_leader_may_need_is_always_acknowledged() {
        let mut acks = Acknowledgements::default();
        acks.note_sent(&acknowledgement(7, 6));
        // An append carrying entries.
        assert!(!acks.withhold(&append(6, 7, 1), &acknowledgement(7, 7), &[]));
        // An entry this node never acknowledged.
        assert!(!acks.withhold(&append(8, 8, 0), &acknowledgement(8, 8), &[]));
        // A rejection.
        let mut rejection = acknowledgement(7, 7);
        rejection.reject = true;
        assert!(!acks.withhold(&append(7, 7, 0), &rejection, &[]));
        // Another term, another leader.
        let mut later = append(7, 7, 0);
        later.term = TERM + 1;
        let mut answer = acknowledgement(7, 7);
        answer.term = TERM + 1;
        assert!(!acks.withhold(&later, &answer, &[]));
        let mut elsewhere = append(7, 7, 0);
        elsewhere.from = LEADER + 1;
        let mut answer = acknowledgement(7, 7);
        answer.to = LEADER + 1;
        assert!(!acks.withhold(&elsewhere, &answer, &[]));
    }

    #[test]
    fn an_empty_append_sent_again_is_answered() {
        let mut acks = Acknowledgements::default();
        acks.note_sent(&acknowledgement(7, 6));
        assert!(acks.withhold(&append(7, 7, 0), &acknowledgement(7, 7), &[]));
        // The leader asks again: it may have lost the acknowledgement.
        assert!(!acks.withhold(&append(7, 7, 0), &acknowledgement(7, 7), &[]));
        // The next entry's commit is withheld again.
        acks.note_sent(&acknowledgement(8, 7));
        assert!(acks.withhold(&append(8, 8, 0), &acknowledgement(8, 8), &[]));
    }

    /// Three raft-rs nodes on memory storage, with messages passed by
    /// hand: what the followers send, and whether the leader commits.
    struct Cluster {
        nodes: Vec<RawNode<MemStorage>>,
        acks: Vec<Acknowledgements>,
        withholding: bool,
        in_flight: VecDeque<Message>,
        /// Acknowledgements of appends the followers sent.
        follower_acks: usize,
        /// A node whose messages go nowhere, and which gets none.
        down: Option<u64>,
        /// Drops the next acknowledgement from this node of at least this
        /// entry, after it was sent.
        lose_ack: Option<(u64, u64)>,
    }

    impl Cluster {
        fn new(withholding: bool) -> Cluster {
            let logger = slog::Logger::root(slog::Discard, slog::o!());
            let nodes = (1..=3)
                .map(|id| {
                    let config = raft::Config {
                        id,
                        election_tick: 10,
                        heartbeat_tick: 1,
                        check_quorum: true,
                        pre_vote: true,
                        ..raft::Config::default()
                    };
                    let storage = MemStorage::new_with_conf_state((vec![1, 2, 3], vec![]));
                    RawNode::new(&config, storage, &logger).unwrap()
                })
                .collect();
            let mut cluster = Cluster {
                nodes,
                acks: (0..3).map(|_| Acknowledgements::default()).collect(),
                withholding,
                in_flight: VecDeque::new(),
                follower_acks: 0,
                down: None,
                lose_ack: None,
            };
            cluster.nodes[0].campaign().unwrap();
            cluster.settle();
            assert_eq!(cluster.nodes[0].raft.state, raft::StateRole::Leader);
            cluster
        }

        fn leader(&mut self) -> &mut RawNode<MemStorage> {
            &mut self.nodes[0]
        }

        /// Handles every node's `Ready` and delivers messages until none
        /// are left.
        fn settle(&mut self) {
            loop {
                for i in 0..self.nodes.len() {
                    self.handle_ready(i);
                }
                let Some(message) = self.in_flight.pop_front() else {
                    return;
                };
                if Some(message.to) == self.down {
                    continue;
                }
                let i = (message.to - 1) as usize;
                let result = if self.withholding {
                    step(&mut self.nodes[i], &mut self.acks[i], message)
                } else {
                    self.nodes[i].step(message)
                };
                result.unwrap();
            }
        }

        fn handle_ready(&mut self, i: usize) {
            if !self.nodes[i].has_ready() {
                return;
            }
            let mut ready = self.nodes[i].ready();
            self.send(i, ready.take_messages());
            let store = self.nodes[i].store().clone();
            store.wl().append(ready.entries()).unwrap();
            if let Some(hard_state) = ready.hs() {
                store.wl().set_hardstate(hard_state.clone());
            }
            self.send(i, ready.take_persisted_messages());
            let mut light = self.nodes[i].advance(ready);
            if let Some(commit) = light.commit_index() {
                store.wl().mut_hard_state().set_commit(commit);
            }
            self.send(i, light.take_messages());
            self.nodes[i].advance_apply();
        }

        fn send(&mut self, i: usize, messages: Vec<Message>) {
            for message in messages {
                self.acks[i].note_sent(&message);
                if Some(message.from) == self.down {
                    continue;
                }
                if message.get_msg_type() == MessageType::MsgAppendResponse && message.from != 1 {
                    self.follower_acks += 1;
                    if let Some((from, index)) = self.lose_ack
                        && message.from == from
                        && message.index >= index
                    {
                        self.lose_ack = None;
                        continue;
                    }
                }
                self.in_flight.push_back(message);
            }
        }

        fn propose(&mut self) -> u64 {
            self.leader()
                .propose(vec![], b"an envelope".to_vec())
                .unwrap();
            self.leader().raft.raft_log.last_index()
        }

        fn committed(&self, i: usize) -> u64 {
            self.nodes[i].raft.raft_log.committed
        }
    }

    /// Acknowledgements per entry of 40 entries proposed one at a time.
    fn follower_acks_per_entry(withholding: bool) -> f64 {
        let mut cluster = Cluster::new(withholding);
        let before = cluster.follower_acks;
        let mut last = 0;
        for _ in 0..40 {
            last = cluster.propose();
            cluster.settle();
        }
        for i in 0..3 {
            assert_eq!(cluster.committed(i), last, "node {}", i + 1);
        }
        (cluster.follower_acks - before) as f64 / 40.0
    }

    #[test]
    fn followers_acknowledge_each_entry_once_instead_of_twice() {
        let plain = follower_acks_per_entry(false);
        let withholding = follower_acks_per_entry(true);
        assert_eq!(
            plain, 4.0,
            "each follower: the entry, then the commit index"
        );
        assert_eq!(withholding, 2.0, "each follower: the entry only");
    }

    #[test]
    fn a_lost_acknowledgement_is_made_good_at_the_next_heartbeats() {
        let mut cluster = Cluster::new(true);
        // Node 3 is down: the leader commits only with node 2's
        // acknowledgement, and that one is lost on the way.
        cluster.down = Some(3);
        let entry = cluster.propose();
        cluster.lose_ack = Some((2, entry));
        cluster.settle();
        assert!(cluster.committed(0) < entry);
        let mut ticks = 0;
        while cluster.committed(0) < entry {
            ticks += 1;
            assert!(ticks <= 5, "the leader never heard of entry {entry}");
            for node in &mut cluster.nodes {
                node.tick();
            }
            cluster.settle();
        }
        assert_eq!(cluster.committed(1), entry);
        assert_eq!(cluster.nodes[0].raft.state, raft::StateRole::Leader);
    }
}
