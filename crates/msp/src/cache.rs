//! The identity cache: validation results keyed by serialized identity.
//!
//! Thakkar et al. (2018) found that deserializing and validating X.509
//! identities dominated Fabric's validation cost: every transaction carries
//! its creator's and endorsers' certificates, and the same few identities
//! appear over and over. The cache maps the exact serialized bytes to the
//! outcome of validation (success or the error), so a warm lookup costs a
//! hash of the key and a map probe.
//!
//! The cache is bounded (LRU per shard) and sharded so that rayon workers
//! validating a block in parallel rarely contend on one lock. It never goes
//! stale on configuration changes because it belongs to one
//! [`MspManager`](crate::MspManager): a new channel config (new MSPs, new
//! CRLs) builds a new manager with an empty cache.

use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use lru::LruCache;
use parking_lot::Mutex;

use crate::{Identity, IdentityError};

const SHARDS: usize = 16;

/// A cached validation outcome.
pub(crate) type CachedIdentity = Result<Arc<Identity>, IdentityError>;

/// A bounded, thread-safe map from serialized identity to validation outcome.
#[derive(Debug)]
pub struct IdentityCache {
    shards: Vec<Mutex<LruCache<Bytes, CachedIdentity>>>,
    hasher: std::collections::hash_map::RandomState,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Hit and miss counters of an [`IdentityCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: usize,
}

impl IdentityCache {
    /// A cache holding at most about `capacity` identities (at least one per
    /// shard).
    pub fn new(capacity: usize) -> Self {
        let per_shard = NonZeroUsize::new(capacity.div_ceil(SHARDS)).unwrap_or(NonZeroUsize::MIN);
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::new(per_shard)))
                .collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The cached outcome for `serialized`, or the result of `validate`,
    /// which is then cached. `validate` runs outside the shard lock, so two
    /// threads missing on the same key may both validate it once.
    ///
    /// On a miss, `validate` is given the cache's own copy of the bytes, to
    /// keep in the identity it returns: `serialized` is usually a slice of
    /// the request or block it arrived in, which a cached slice would keep
    /// in memory for as long as the identity stays cached.
    pub(crate) fn get_or_validate(
        &self,
        serialized: &Bytes,
        validate: impl FnOnce(&Bytes) -> CachedIdentity,
    ) -> CachedIdentity {
        let shard = &self.shards[self.shard_of(serialized)];
        if let Some(outcome) = shard.lock().get(serialized) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return outcome.clone();
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let owned = Bytes::copy_from_slice(serialized);
        let outcome = validate(&owned);
        // "Not valid yet" becomes false with time; every other outcome is
        // final for the lifetime of the MSP configuration.
        if !matches!(outcome, Err(IdentityError::NotYetValid { .. })) {
            shard.lock().put(owned, outcome.clone());
        }
        outcome
    }

    /// Hits, misses and the current number of entries.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self.shards.iter().map(|shard| shard.lock().len()).sum(),
        }
    }

    fn shard_of(&self, key: &Bytes) -> usize {
        // The modulo keeps the index in range whatever the hash.
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }
}
