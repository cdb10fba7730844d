//! Private data through the stub, as Fabric's chaincode handler and
//! simulator serve it.
//!
//! A chaincode reads and writes a collection's values in plaintext; the
//! read/write set records only their hashes (reads at the version of the
//! key's hash, writes as key and value hashes), and the plaintext writes
//! leave the simulation separately ([`Stub::private_writes`]) for the
//! transient store and the collection's other members. Values are read
//! from the collection's private namespace, which only member peers fill
//! (see the committer's `private.rs`); a value whose version is not its
//! hash's (a member peer that has not received it) is an error, never a
//! stale answer.
//!
//! The checks are Fabric's, with its messages: a collection the chaincode's
//! definition does not declare is refused; `memberOnlyRead` and
//! `memberOnlyWrite` refuse a proposal creator that is not a member of the
//! collection; private data calls are refused in `Init`. The hash of a
//! private value (`GetPrivateDataHash`) may be read by anyone. `_lifecycle`
//! writes its organisations' implicit collections directly, as Fabric's
//! system chaincode does, without these checks.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use weft_policy::collection::{Collection, Collections};
use weft_protos::lifecycle::{StateData, state_data};
use weft_statedb::{hashed_namespace, key_metadata_namespace, private_namespace};

use super::{RANGE_RESULTS_MAX, StateError, Stub};
use crate::lifecycle::LIFECYCLE;
use crate::mango::Query;

/// Fabric's refusal of private data calls in `Init`.
const IN_INIT: &str = "private data APIs are not allowed in chaincode Init()";

/// What a private data call does to its collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    /// Reading a value's hash: open to anyone.
    Hash,
}

impl Stub<'_> {
    /// The value of private `key` of `collection`, recorded as a hashed
    /// read at its version: `None` if the key has no value. An error if
    /// the key has a hash this peer holds no value for (it is not a member
    /// of the collection, or has not received the value yet), in Fabric's
    /// words.
    pub fn get_private_data(
        &mut self,
        collection: &str,
        key: &str,
    ) -> Result<Option<Bytes>, StateError> {
        self.check_private(collection, Access::Read)?;
        let value = self.read(&private_namespace(self.namespace, collection), key)?;
        let hash = self.stored_hash(collection, key)?;
        let value_version = value.as_ref().map(|value| value.version);
        let hash_version = hash.as_ref().map(|hash| hash.version);
        if value_version != hash_version {
            return Err(StateError::Private(format!(
                "private data matching public hash version is not available. Public hash \
                 version = {}, Private data version = {}",
                height_text(hash_version),
                height_text(value_version)
            )));
        }
        self.rwset.read_private_hash(
            self.namespace,
            collection,
            key,
            value_version.map(|v| (v.block_num, v.tx_num)),
        );
        Ok(value.map(|value| value.value))
    }

    /// The hash of private `key` of `collection` (what every peer of the
    /// channel holds), recorded as a hashed read at its version.
    pub fn get_private_data_hash(
        &mut self,
        collection: &str,
        key: &str,
    ) -> Result<Option<Bytes>, StateError> {
        self.check_private(collection, Access::Hash)?;
        Ok(self.read_hash(collection, key)?.map(|hash| hash.value))
    }

    /// Writes private `value` to `key` of `collection` when the
    /// transaction commits: the transaction carries the hashes, the value
    /// goes to the collection's members.
    pub fn put_private_data(
        &mut self,
        collection: &str,
        key: &str,
        value: impl Into<Bytes>,
    ) -> Result<(), StateError> {
        self.check_private(collection, Access::Write)?;
        self.check_write(key)?;
        self.rwset
            .write_private(self.namespace, collection, key, value.into());
        Ok(())
    }

    /// Deletes private `key` of `collection` when the transaction commits.
    pub fn del_private_data(&mut self, collection: &str, key: &str) -> Result<(), StateError> {
        self.check_private(collection, Access::Write)?;
        self.check_write(key)?;
        self.rwset.delete_private(self.namespace, collection, key);
        Ok(())
    }

    /// Purges private `key` of `collection` when the transaction commits:
    /// a delete that also removes every earlier value of the key from the
    /// members' private data (Fabric 2.5's `PurgePrivateData`).
    pub fn purge_private_data(&mut self, collection: &str, key: &str) -> Result<(), StateError> {
        self.check_private(collection, Access::Write)?;
        self.check_write(key)?;
        self.rwset.purge_private(self.namespace, collection, key);
        Ok(())
    }

    /// The metadata of private `key` of `collection` (name → value:
    /// `VALIDATION_PARAMETER` holds its key-level endorsement policy), kept
    /// under the key's hash on every peer; the key's hash recorded as read
    /// at its version, as Fabric's simulator records it.
    pub fn get_private_data_metadata(
        &mut self,
        collection: &str,
        key: &str,
    ) -> Result<BTreeMap<String, Bytes>, StateError> {
        self.check_private(collection, Access::Read)?;
        self.read_hash(collection, key)?;
        let hashed = hashed_namespace(self.namespace, collection);
        self.stored_metadata(&key_metadata_namespace(&hashed), &key_hash(key), key)
    }

    /// Sets the metadata entry `name` of private `key` of `collection` to
    /// `value` when the transaction commits, the key's whole metadata
    /// becoming that one entry (as [`Stub::put_state_metadata`]).
    pub fn put_private_data_metadata(
        &mut self,
        collection: &str,
        key: &str,
        name: &str,
        value: impl Into<Bytes>,
    ) -> Result<(), StateError> {
        self.check_private(collection, Access::Write)?;
        self.check_write(key)?;
        let entries = BTreeMap::from([(name.to_owned(), value.into())]);
        self.rwset
            .write_private_metadata(self.namespace, collection, key, entries);
        Ok(())
    }

    /// The private keys of `collection` in `[start, end)` (an empty `end`:
    /// to the end) with their values, in key order, as this peer holds
    /// them. As in Fabric, the query is not recorded: private range
    /// queries are not checked for phantoms at commit.
    pub fn get_private_data_by_range(
        &mut self,
        collection: &str,
        start: &str,
        end: &str,
    ) -> Result<Vec<(String, Bytes)>, StateError> {
        self.check_private(collection, Access::Read)?;
        let results = self
            .state
            .range(
                &private_namespace(self.namespace, collection),
                start,
                end,
                RANGE_RESULTS_MAX + 1,
            )
            .map_err(|e| StateError::Storage(e.to_string()))?;
        if results.len() > RANGE_RESULTS_MAX {
            return Err(StateError::TooManyResults);
        }
        Ok(results
            .into_iter()
            .map(|(key, value)| (key, value.value))
            .collect())
    }

    /// The private documents (JSON object values) of `collection` that
    /// match the Mango `query`, as this peer holds them: Fabric's
    /// `GetPrivateDataQueryResult`, through one of the collection's JSON
    /// indexes when the query can use one (as for public data), else by a
    /// scan of the collection, with the query's `sort`, `skip`, `limit`
    /// and `fields`. As in Fabric, nothing is recorded for the commit to
    /// check again.
    pub fn get_private_data_query_result(
        &mut self,
        collection: &str,
        query: &str,
    ) -> Result<Vec<(String, Bytes)>, StateError> {
        self.check_private(collection, Access::Read)?;
        let query = Query::parse(query).map_err(|e| StateError::Query(e.to_string()))?;
        let wanted = query
            .limit
            .unwrap_or(RANGE_RESULTS_MAX)
            .min(RANGE_RESULTS_MAX);
        let first = query.skip;
        let enough = first.saturating_add(wanted);
        let namespace = private_namespace(self.namespace, collection);
        let indexes = weft_statedb::json_index::built(self.state, &namespace)
            .map_err(|e| StateError::Storage(e.to_string()))?;
        let mut matched = match query.plan(&indexes) {
            Some(scan) => self.documents_by_index(&namespace, &query, &scan, first, enough)?,
            None => self.documents_by_scan(&namespace, &query, first, enough)?,
        };
        let end = matched.len().min(enough);
        let start = first.min(end);
        matched
            .drain(start..end)
            .map(|(key, _, document)| {
                let shown = serde_json::to_vec(&query.project(&document))
                    .map_err(|e| StateError::Query(e.to_string()))?;
                Ok((key, Bytes::from(shown)))
            })
            .collect()
    }

    /// Fabric's checks of a private data call on `collection`.
    fn check_private(&mut self, collection: &str, access: Access) -> Result<(), StateError> {
        if self.namespace == LIFECYCLE {
            return Ok(());
        }
        if self.is_init() {
            return Err(StateError::Private(IN_INIT.to_owned()));
        }
        let collections = self.collections_of_namespace()?;
        let Some(found) = collections.get(collection) else {
            return Err(StateError::Private(match access {
                Access::Hash => format!(
                    "collection [{collection}] not defined in the collection config for \
                     chaincode [{}]",
                    self.namespace
                ),
                Access::Read | Access::Write => format!(
                    "collection {}/{}/{collection} could not be found",
                    self.channel_id(),
                    self.namespace
                ),
            }));
        };
        let member_only = match access {
            Access::Hash => return Ok(()),
            Access::Read => found.member_only_read,
            Access::Write => found.member_only_write,
        };
        if !member_only || self.creator_is_member(found) {
            return Ok(());
        }
        let kind = if access == Access::Read {
            "read"
        } else {
            "write"
        };
        Err(StateError::Private(format!(
            "tx creator does not have {kind} access permission on privatedata in \
             chaincodeName:{} collectionName: {collection}",
            self.namespace
        )))
    }

    /// Whether the proposal's creator is a member of `collection`.
    fn creator_is_member(&self, collection: &Collection) -> bool {
        self.channel.is_some_and(|channel| {
            channel.creator_satisfies(self.creator(), &collection.member_policy)
        })
    }

    /// The collections of the invoked chaincode's committed definition,
    /// with the channel's organisations' implicit ones; read once per
    /// transaction, and not recorded as a read (as in Fabric).
    fn collections_of_namespace(&mut self) -> Result<Arc<Collections>, StateError> {
        if let Some(collections) = self.collections.get(self.namespace) {
            return Ok(collections.clone());
        }
        let not_defined = || {
            StateError::Private(format!(
                "collection config not defined for chaincode [{}], pass the collection \
                 configuration upon chaincode definition/instantiation",
                self.namespace
            ))
        };
        let field = |name: &str| format!("namespaces/fields/{}/{name}", self.namespace);
        if self.read(LIFECYCLE, &field("Sequence"))?.is_none() {
            return Err(not_defined());
        }
        let package = match self.read(LIFECYCLE, &field("Collections"))? {
            None => Bytes::new(),
            Some(stored) => match StateData::decode(stored.value).map(|data| data.r#type) {
                Ok(Some(state_data::Type::Bytes(bytes))) => bytes,
                Ok(None) => Bytes::new(),
                _ => {
                    return Err(StateError::Storage(format!(
                        "the stored collection config of {} is malformed",
                        self.namespace
                    )));
                }
            },
        };
        let organisations = self
            .channel
            .map(|channel| channel.organisations())
            .unwrap_or_default();
        let collections = Collections::decode(&package, &organisations)
            .map(Arc::new)
            .map_err(|e| StateError::Storage(format!("{}: {e}", self.namespace)))?;
        self.collections
            .insert(self.namespace.to_owned(), collections.clone());
        Ok(collections)
    }

    /// The hash of private `key` of `collection` in the snapshot, with its
    /// version, recorded as a hashed read at that version.
    fn read_hash(
        &mut self,
        collection: &str,
        key: &str,
    ) -> Result<Option<weft_statedb::VersionedValue>, StateError> {
        let hash = self.stored_hash(collection, key)?;
        let version = hash
            .as_ref()
            .map(|hash| (hash.version.block_num, hash.version.tx_num));
        self.rwset
            .read_private_hash(self.namespace, collection, key, version);
        Ok(hash)
    }

    /// The hash of private `key` of `collection` in the snapshot, with its
    /// version; not recorded.
    fn stored_hash(
        &self,
        collection: &str,
        key: &str,
    ) -> Result<Option<weft_statedb::VersionedValue>, StateError> {
        self.read(
            &hashed_namespace(self.namespace, collection),
            &key_hash(key),
        )
    }

    /// `key` of `namespace` in the snapshot, not recorded.
    fn read(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<Option<weft_statedb::VersionedValue>, StateError> {
        self.state
            .get(namespace, key)
            .map_err(|e| StateError::Storage(e.to_string()))
    }
}

/// The state key of a private key's hash: its SHA-256 in lowercase hex.
pub(crate) fn key_hash(key: &str) -> String {
    hex::encode(weft_protos::hash::sha256(key.as_bytes()))
}

/// A version as Fabric prints a `version.Height` (`<nil>` for none).
fn height_text(version: Option<weft_statedb::Height>) -> String {
    match version {
        Some(height) => format!(
            "{{BlockNum: {}, TxNum: {}}}",
            height.block_num, height.tx_num
        ),
        None => "<nil>".to_owned(),
    }
}
