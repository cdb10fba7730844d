//! How Fabric records what a range query returned, so that the committer
//! can check for phantoms.
//!
//! A short result (at most `max_degree` keys) is recorded as is: the keys
//! with their versions (`RangeQueryInfo.raw_reads`). A longer one is
//! recorded as the top of a Merkle tree over the results
//! (`reads_merkle_hashes`): the results are cut into runs of
//! `max_degree + 1` reads, each run hashed (SHA-256 of the serialized
//! `QueryReads`) into a level-1 node; whenever a level holds more than
//! `max_degree` hashes, their concatenation is hashed into one node of the
//! next level and the level is emptied. At the end the last partial run is
//! hashed too, every level below the highest is folded upwards (a single
//! hash moves up as is), and the highest level is folded once more if it
//! still holds more than `max_degree` hashes. The summary is that level's
//! number and hashes. Fabric's endorsers use `max_degree` 50.
//!
//! The endorser builds a summary while the chaincode iterates; the
//! committer rebuilds it over the keys the range holds now and compares.

use prost::Message;

use crate::hash::sha256;
use crate::kvrwset::{KvRead, QueryReads, QueryReadsMerkleSummary};

/// The `max_degree` Fabric's endorsers use.
pub const MAX_DEGREE_DEFAULT: u32 = 50;

/// What a range query's results are recorded as.
#[derive(Debug, Clone, PartialEq)]
pub enum RangeReads {
    /// At most `max_degree` results: the reads themselves.
    Raw(Vec<KvRead>),
    /// More: the summary of the Merkle tree over them.
    Summary(QueryReadsMerkleSummary),
}

/// Builds the record of a range query's results, fed one result at a time
/// in key order.
#[derive(Debug, Clone)]
pub struct RangeSummarizer {
    max_degree: usize,
    pending: Vec<KvRead>,
    /// `levels[0]` is level 1, the hashes of runs of reads.
    levels: Vec<Vec<Vec<u8>>>,
}

impl RangeSummarizer {
    /// A summarizer with tree degree `max_degree`; Fabric refuses degrees
    /// under 2, and so does this (`None`).
    pub fn new(max_degree: u32) -> Option<Self> {
        let max_degree = usize::try_from(max_degree).ok()?;
        (max_degree >= 2).then(|| Self {
            max_degree,
            pending: Vec::new(),
            levels: vec![Vec::new()],
        })
    }

    /// Adds the next result.
    pub fn add(&mut self, read: KvRead) {
        self.pending.push(read);
        if self.pending.len() > self.max_degree {
            self.hash_pending();
        }
    }

    /// The record of every result added.
    pub fn finish(mut self) -> RangeReads {
        if self.levels.len() == 1 && self.levels[0].is_empty() {
            return RangeReads::Raw(self.pending);
        }
        if !self.pending.is_empty() {
            self.hash_pending();
        }
        let top = self.levels.len() - 1;
        for level in 0..top {
            let hashes = std::mem::take(&mut self.levels[level]);
            let folded = match hashes.len() {
                0 => continue,
                1 => hashes.into_iter().next().unwrap_or_default(),
                _ => combine(&hashes),
            };
            self.levels[level + 1].push(folded);
        }
        let mut max_level = self.levels.len();
        let mut hashes = self.levels.pop().unwrap_or_default();
        if hashes.len() > self.max_degree {
            hashes = vec![combine(&hashes)];
            max_level += 1;
        }
        RangeReads::Summary(QueryReadsMerkleSummary {
            max_degree: u32::try_from(self.max_degree).unwrap_or(u32::MAX),
            max_level: u32::try_from(max_level).unwrap_or(u32::MAX),
            max_level_hashes: hashes.into_iter().map(Into::into).collect(),
        })
    }

    /// Hashes the pending reads into a level-1 node and folds full levels
    /// upwards.
    fn hash_pending(&mut self) {
        let run = QueryReads {
            kv_reads: std::mem::take(&mut self.pending),
        };
        let mut hash = sha256(&run.encode_to_vec()).to_vec();
        let mut level = 0;
        loop {
            self.levels[level].push(hash);
            if self.levels[level].len() <= self.max_degree {
                return;
            }
            hash = combine(&std::mem::take(&mut self.levels[level]));
            level += 1;
            if level == self.levels.len() {
                self.levels.push(Vec::new());
            }
        }
    }
}

/// The hash of the concatenation of `hashes`.
fn combine(hashes: &[Vec<u8>]) -> Vec<u8> {
    sha256(&hashes.concat()).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvrwset::Version;

    fn read(index: u64) -> KvRead {
        KvRead {
            key: format!("key{index:03}"),
            version: Some(Version {
                block_num: index,
                tx_num: 0,
            }),
        }
    }

    fn run_hash(reads: std::ops::RangeInclusive<u64>) -> Vec<u8> {
        let run = QueryReads {
            kv_reads: reads.map(read).collect(),
        };
        sha256(&run.encode_to_vec()).to_vec()
    }

    fn summarize(count: u64, max_degree: u32) -> RangeReads {
        let mut summarizer = RangeSummarizer::new(max_degree).unwrap();
        for index in 1..=count {
            summarizer.add(read(index));
        }
        summarizer.finish()
    }

    fn summary(max_degree: u32, max_level: u32, hashes: Vec<Vec<u8>>) -> RangeReads {
        RangeReads::Summary(QueryReadsMerkleSummary {
            max_degree,
            max_level,
            max_level_hashes: hashes.into_iter().map(Into::into).collect(),
        })
    }

    #[test]
    fn short_results_are_kept_raw() {
        assert_eq!(summarize(0, 2), RangeReads::Raw(Vec::new()));
        assert_eq!(summarize(2, 2), RangeReads::Raw(vec![read(1), read(2)]));
        assert_eq!(
            summarize(50, MAX_DEGREE_DEFAULT),
            RangeReads::Raw((1..=50).map(read).collect())
        );
    }

    #[test]
    fn one_run_past_the_degree_becomes_one_hash() {
        assert_eq!(summarize(3, 2), summary(2, 1, vec![run_hash(1..=3)]));
        // A partial run after a full one is hashed on its own.
        assert_eq!(
            summarize(4, 2),
            summary(2, 1, vec![run_hash(1..=3), run_hash(4..=4)])
        );
    }

    #[test]
    fn full_levels_fold_into_the_next() {
        // Degree 2, seven reads: runs 1-3, 4-6 and 7 make three level-1
        // hashes, one more than the degree, so they fold into one level-2
        // hash.
        let level1 = [run_hash(1..=3), run_hash(4..=6), run_hash(7..=7)].concat();
        assert_eq!(
            summarize(7, 2),
            summary(2, 2, vec![sha256(&level1).to_vec()])
        );
        // Ten reads: level 2 holds the fold of runs 1-9; run 10 is alone at
        // level 1 and moves up as is.
        let first = [run_hash(1..=3), run_hash(4..=6), run_hash(7..=9)].concat();
        assert_eq!(
            summarize(10, 2),
            summary(2, 2, vec![sha256(&first).to_vec(), run_hash(10..=10)])
        );
    }

    #[test]
    fn an_overfull_top_level_is_folded_once_more() {
        // Degree 2, 21 reads: seven runs of three. Level 1 folds after
        // every third run; the two level-2 hashes and the final level-1
        // hash (run 19-21) make three hashes at level 2 at the end, which
        // fold into a single level-3 hash.
        let fold = |runs: [std::ops::RangeInclusive<u64>; 3]| {
            sha256(&runs.map(run_hash).concat()).to_vec()
        };
        let a = fold([1..=3, 4..=6, 7..=9]);
        let b = fold([10..=12, 13..=15, 16..=18]);
        let top = sha256(&[a, b, run_hash(19..=21)].concat()).to_vec();
        assert_eq!(summarize(21, 2), summary(2, 3, vec![top]));
    }

    #[test]
    fn degrees_under_two_are_refused() {
        assert!(RangeSummarizer::new(1).is_none());
        assert!(RangeSummarizer::new(0).is_none());
    }
}
