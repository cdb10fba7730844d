//! A channel's MSPs and the identity cache in front of them.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use weft_protos::msp::SerializedIdentity;

use crate::cache::IdentityCache;
use crate::{CacheStats, Identity, IdentityError, Msp, UnixTime};

/// Identities the cache holds by default: far more than the distinct
/// clients, peers and orderers of a typical network.
pub const DEFAULT_CACHE_CAPACITY: usize = 4096;

/// The MSPs of one channel configuration, keyed by MSP ID.
///
/// A manager is immutable: when the channel config changes, build a new one.
/// Its identity cache goes with it, so no cached result outlives the MSPs
/// (and CRLs) that produced it.
#[derive(Debug)]
pub struct MspManager {
    msps: HashMap<String, Arc<Msp>>,
    cache: IdentityCache,
}

impl MspManager {
    pub fn new(msps: impl IntoIterator<Item = Msp>) -> Self {
        Self::with_cache_capacity(msps, DEFAULT_CACHE_CAPACITY)
    }

    pub fn with_cache_capacity(msps: impl IntoIterator<Item = Msp>, capacity: usize) -> Self {
        Self {
            msps: msps
                .into_iter()
                .map(|msp| (msp.id().to_owned(), Arc::new(msp)))
                .collect(),
            cache: IdentityCache::new(capacity),
        }
    }

    /// The MSP with this ID.
    pub fn msp(&self, msp_id: &str) -> Option<&Arc<Msp>> {
        self.msps.get(msp_id)
    }

    /// The MSP IDs known to this manager, sorted.
    pub fn msp_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.msps.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }

    /// Turns serialized `msp.SerializedIdentity` bytes into a validated
    /// identity at time `now`, through the cache. A cached identity is
    /// re-checked for expiry at `now`.
    pub fn deserialize(
        &self,
        serialized: &Bytes,
        now: UnixTime,
    ) -> Result<Arc<Identity>, IdentityError> {
        let identity = self.cache.get_or_validate(serialized, |owned| {
            self.validate_uncached(owned, now).map(Arc::new)
        })?;
        identity.check_validity(now)?;
        Ok(identity)
    }

    /// Validation without the cache: what a cache miss costs.
    pub fn validate_uncached(
        &self,
        serialized: &Bytes,
        now: UnixTime,
    ) -> Result<Identity, IdentityError> {
        let identity = SerializedIdentity::decode(serialized.clone())
            .map_err(|e| IdentityError::Malformed(e.to_string()))?;
        let msp = self
            .msps
            .get(&identity.mspid)
            .ok_or_else(|| IdentityError::UnknownMsp(identity.mspid.clone()))?;
        msp.validate(serialized.clone(), &identity.id_bytes, now)
    }

    /// The identity cache's counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }
}
