//! The JSON indexes of a channel's chaincodes, on the committer's side:
//! built in the update batch of the first block committed after a
//! chaincode that declares them is both defined on the channel and
//! installed on this peer (Fabric creates CouchDB indexes at that moment
//! too), and kept current in the update batch of every block after. A
//! collection's indexes are over its private namespace.
//!
//! The indexes live in the world state (`weft_statedb::json_index`), so a
//! restart finds them with the state, and the blocks replayed on top of a
//! checkpoint keep them current as live blocks do. Which indexes a
//! chaincode declares is the peer's business, not the channel's (it comes
//! from the package this organisation installed), so it is asked of a
//! [`DeclaredIndexes`] the peer provides.

use std::sync::Arc;

use weft_statedb::json_index::{IndexMaintainer, JsonIndex};
use weft_statedb::{Height, StateReader, UpdateBatch, private_namespace};

use crate::ChaincodeDefinitions;

/// The JSON indexes the chaincodes of a channel declare on this peer.
pub trait DeclaredIndexes: Send + Sync {
    /// A number that changes whenever [`declared`](Self::declared) may
    /// answer differently for the same state (a package was installed).
    fn generation(&self) -> u64;

    /// The indexes declared for `chaincode` by the package that runs it
    /// here, as defined in `state`.
    fn declared(&self, state: &dyn StateReader, chaincode: &str) -> Vec<DeclaredIndex>;
}

/// A JSON index a chaincode declares: over its state, or over one of its
/// collections' private data (the collection's private namespace, which
/// only member peers fill).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredIndex {
    pub collection: Option<String>,
    pub index: JsonIndex,
}

/// One channel's indexes: what is built, and when to look for more.
#[derive(Default)]
pub(crate) struct ChannelIndexes {
    maintainer: IndexMaintainer,
    declared: Option<Arc<dyn DeclaredIndexes>>,
    /// The generation of the declarations last built for; `None`: look
    /// again with the next block (nothing looked yet, or the definitions
    /// or the state changed).
    reconciled: Option<u64>,
}

impl std::fmt::Debug for ChannelIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelIndexes")
            .field("reconciled", &self.reconciled)
            .finish_non_exhaustive()
    }
}

impl ChannelIndexes {
    pub(crate) fn new(maintainer: IndexMaintainer) -> Self {
        Self {
            maintainer,
            ..Self::default()
        }
    }

    pub(crate) fn declared_by(&mut self, declared: Arc<dyn DeclaredIndexes>) {
        self.declared = Some(declared);
        self.reconciled = None;
    }

    /// Adds to `batch`, about to be applied at `height` over `state`, the
    /// builds of declared indexes not built yet and the index changes of
    /// its writes.
    pub(crate) fn update(
        &mut self,
        batch: &mut UpdateBatch,
        state: &dyn StateReader,
        definitions: &ChaincodeDefinitions,
        height: Height,
        channel_id: &str,
    ) -> weft_statedb::Result<()> {
        if let Some(declared) = &self.declared {
            let generation = declared.generation();
            if self.reconciled != Some(generation) {
                for chaincode in definitions.names() {
                    for DeclaredIndex { collection, index } in declared.declared(state, chaincode) {
                        let namespace = match &collection {
                            None => chaincode.to_owned(),
                            Some(collection) => private_namespace(chaincode, collection),
                        };
                        if self.maintainer.is_built(state, &namespace, &index)? {
                            continue;
                        }
                        let documents = self
                            .maintainer
                            .build(batch, state, &namespace, &index, height)?;
                        tracing::info!(channel = channel_id, chaincode, collection, index = %index.id(), documents, "JSON index built");
                    }
                }
                self.reconciled = Some(generation);
            }
        }
        self.maintainer.maintain(batch, state)
    }

    /// The chaincode definitions changed: look for declared indexes again.
    pub(crate) fn redefined(&mut self) {
        self.reconciled = None;
    }

    /// The state went back to an earlier height, which may have undone
    /// builds.
    pub(crate) fn rolled_back(&mut self) {
        self.maintainer.forget();
        self.reconciled = None;
    }
}
