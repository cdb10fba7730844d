//! The Gateway's memory of the peers and orderers that did not answer.
//!
//! A node whose last call failed without an answer (down, unreachable,
//! or past its timeout) is asked after the others for a while, so that a
//! node that hangs costs one call its timeout, not every call. The while
//! ends after [`SILENT_FOR`] or at the node's next answer, whichever comes
//! first: a node back up gets its share of the calls again, and one still
//! down costs one call its timeout each [`SILENT_FOR`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a node that did not answer is asked after the others.
pub(crate) const SILENT_FOR: Duration = Duration::from_secs(60);

/// The nodes that did not answer their last call, and since when.
#[derive(Debug, Default)]
pub(crate) struct SilentNodes {
    since: Mutex<HashMap<String, Instant>>,
}

impl SilentNodes {
    /// `nodes` in the order given, those silent at `now` last.
    pub(crate) fn answering_first<'a>(
        &self,
        nodes: impl Iterator<Item = &'a String>,
        now: Instant,
    ) -> Vec<&'a String> {
        let mut since = self.since.lock();
        if !since.is_empty() {
            since.retain(|_, silent| now.saturating_duration_since(*silent) < SILENT_FOR);
        }
        let (mut answering, silent): (Vec<&String>, Vec<&String>) =
            nodes.partition(|node| !since.contains_key(*node));
        answering.extend(silent);
        answering
    }

    /// Notes whether the node at `address` answered the call it was asked
    /// at `now`.
    pub(crate) fn note(&self, address: &str, answered: bool, now: Instant) {
        let mut since = self.since.lock();
        if answered {
            if !since.is_empty() {
                since.remove(address);
            }
        } else {
            since.insert(address.to_owned(), now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(nodes: &[&str]) -> Vec<String> {
        nodes.iter().map(|node| (*node).to_owned()).collect()
    }

    /// The order `silent` asks `nodes` in at `now`.
    fn order(silent: &SilentNodes, nodes: &[String], now: Instant) -> Vec<String> {
        silent
            .answering_first(nodes.iter(), now)
            .into_iter()
            .cloned()
            .collect()
    }

    #[test]
    fn a_node_that_did_not_answer_is_asked_last_until_it_answers_or_a_while_passes() {
        let silent = SilentNodes::default();
        let nodes = names(&["a:1", "b:2", "c:3"]);
        let start = Instant::now();
        assert_eq!(order(&silent, &nodes, start), nodes);

        silent.note("a:1", false, start);
        let later = start + SILENT_FOR / 2;
        assert_eq!(order(&silent, &nodes, later), names(&["b:2", "c:3", "a:1"]));
        // Its answer puts it back in its place.
        silent.note("a:1", true, later);
        assert_eq!(order(&silent, &nodes, later), nodes);

        // Silent again, two of them: each back in its place once the while
        // since its own silence has passed.
        silent.note("b:2", false, later);
        silent.note("a:1", false, later + Duration::from_secs(1));
        assert_eq!(
            order(&silent, &nodes, later + SILENT_FOR / 2),
            names(&["c:3", "a:1", "b:2"])
        );
        assert_eq!(
            order(&silent, &nodes, later + SILENT_FOR),
            names(&["b:2", "c:3", "a:1"])
        );
        let both_past = later + Duration::from_secs(1) + SILENT_FOR;
        assert_eq!(order(&silent, &nodes, both_past), nodes);
    }
}
