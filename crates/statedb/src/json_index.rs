//! JSON indexes: the `json` indexes a chaincode declares for CouchDB
//! (`META-INF/statedb/couchdb/indexes/*.json` in its package, and
//! `META-INF/statedb/couchdb/collections/<collection>/indexes/*.json` for
//! its collections' private data), kept in the world state itself so that
//! JSON queries read only the documents an index points at. A
//! collection's index is over its private namespace.
//!
//! An index over the fields `f1 … fn` of the namespace `ns` is a companion
//! namespace ([`entries_namespace`]) holding, for every document (a JSON
//! object value of `ns`) that has all of those fields, one entry whose key
//! is the fields' values in an order-preserving encoding followed by the
//! document's key ([`encode_value`]), and whose value is the document's
//! key. Keys of a namespace are kept in order, so the entries of a
//! document lie in CouchDB's collation order of `(f1, …, fn, key)`, as a
//! CouchDB index orders them, and the documents whose leading fields equal
//! given values are one contiguous range.
//!
//! Which indexes are built is itself in the state ([`catalogue_namespace`],
//! one key per index holding its definition), so snapshots, checkpoints
//! and stream rollbacks cover indexes and catalogue with the data they
//! describe, and a reader never sees an index that disagrees with the
//! documents of its own snapshot. The committer builds an index in the
//! update batch of a block ([`IndexMaintainer::build`]) and keeps every
//! built index current in each later batch ([`IndexMaintainer::maintain`]).
//!
//! As in CouchDB, the sort direction an index definition gives its fields
//! does not change the index: a descending sort reads it backwards.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::Value;

use crate::{Height, Result, StateReader, UpdateBatch};

/// Why an index definition file is refused: Fabric's rules for
/// `META-INF/statedb/couchdb/indexes/*.json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("index definition {file}: {reason}")]
pub struct IndexError {
    pub file: String,
    pub reason: String,
}

/// A CouchDB `json` index: its design document, name and fields (paths
/// of dotted field names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonIndex {
    pub ddoc: String,
    pub name: String,
    pub fields: Vec<Vec<String>>,
}

/// The most entries a build or a range of entries reads at once.
const CHUNK: usize = 1024;

impl JsonIndex {
    /// Reads an index definition file as Fabric accepts it:
    /// `{"index": {"fields": [...]}, "ddoc": ..., "name": ..., "type": "json"}`,
    /// each field a name or `{name: "asc"|"desc"}`. Without a name the
    /// index is named after its fields, as CouchDB names it.
    pub fn parse(file: &str, text: &[u8]) -> std::result::Result<Self, IndexError> {
        let refuse = |reason: &str| IndexError {
            file: file.to_owned(),
            reason: reason.to_owned(),
        };
        let Ok(Value::Object(definition)) = serde_json::from_slice::<Value>(text) else {
            return Err(refuse("not a JSON object"));
        };
        let mut index = Self {
            ddoc: String::new(),
            name: String::new(),
            fields: Vec::new(),
        };
        let mut has_fields = false;
        for (key, value) in &definition {
            match (key.as_str(), value) {
                ("index", Value::Object(inner)) => {
                    for (key, value) in inner {
                        match (key.as_str(), value) {
                            ("fields", Value::Array(fields)) => {
                                for field in fields {
                                    index.fields.push(field_path(field).ok_or_else(|| {
                                        refuse(
                                            "a field is a name or {\"name\": \"asc\" or \"desc\"}",
                                        )
                                    })?);
                                }
                                has_fields = true;
                            }
                            ("fields", _) => return Err(refuse("\"fields\" is an array")),
                            // Fabric accepts and ignores it.
                            ("partial_filter_selector", _) => {}
                            (other, _) => {
                                return Err(refuse(&format!(
                                    "unknown entry {other:?} in \"index\""
                                )));
                            }
                        }
                    }
                }
                ("index", _) => return Err(refuse("\"index\" is an object")),
                ("ddoc", Value::String(ddoc)) => index.ddoc = ddoc.clone(),
                ("name", Value::String(name)) => index.name = name.clone(),
                ("type", Value::String(kind)) if kind == "json" => {}
                ("type", _) => return Err(refuse("the index type must be \"json\"")),
                ("ddoc" | "name", _) => return Err(refuse(&format!("\"{key}\" is a string"))),
                (other, _) => return Err(refuse(&format!("unknown entry {other:?}"))),
            }
        }
        if !has_fields || index.fields.is_empty() {
            return Err(refuse("an index needs \"index\": {\"fields\": [...]}"));
        }
        if index.name.is_empty() {
            index.name = index
                .fields
                .iter()
                .map(|path| path.join("."))
                .collect::<Vec<_>>()
                .join(",");
        }
        Ok(index)
    }

    /// How the catalogue names this index: CouchDB's identity of an index,
    /// its design document and name.
    pub fn id(&self) -> String {
        format!("{}/{}", self.ddoc.trim_start_matches("_design/"), self.name)
    }

    /// The entry of `document` (stored under `key`), or `None` when it is
    /// not a JSON object holding every indexed field.
    pub fn entry(&self, document: &Value, key: &str) -> Option<String> {
        if !document.is_object() {
            return None;
        }
        let mut entry = String::new();
        for path in &self.fields {
            let value = path
                .iter()
                .try_fold(document, |current, field| current.as_object()?.get(field))?;
            encode_value(value, &mut entry);
        }
        entry.push_str(key);
        Some(entry)
    }

    fn to_catalogue_value(&self) -> Bytes {
        let definition = serde_json::json!({
            "ddoc": self.ddoc,
            "name": self.name,
            "fields": self.fields,
        });
        Bytes::from(definition.to_string())
    }

    fn from_catalogue_value(value: &[u8]) -> Option<Self> {
        let definition: Value = serde_json::from_slice(value).ok()?;
        let fields = definition
            .get("fields")?
            .as_array()?
            .iter()
            .map(|path| {
                path.as_array()?
                    .iter()
                    .map(|field| field.as_str().map(str::to_owned))
                    .collect::<Option<Vec<String>>>()
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            ddoc: definition.get("ddoc")?.as_str()?.to_owned(),
            name: definition.get("name")?.as_str()?.to_owned(),
            fields,
        })
    }
}

/// A field of an index definition: `"a.b"` or `{"a.b": "asc"}`.
fn field_path(field: &Value) -> Option<Vec<String>> {
    let name = match field {
        Value::String(name) => name,
        Value::Object(object) if object.len() == 1 => {
            let (name, direction) = object.iter().next()?;
            match direction.as_str()?.to_ascii_lowercase().as_str() {
                "asc" | "desc" => name,
                _ => return None,
            }
        }
        _ => return None,
    };
    (!name.is_empty()).then(|| name.split('.').map(str::to_owned).collect())
}

/// Where the built indexes of `namespace` are listed: one key per index
/// ([`JsonIndex::id`]), holding its definition. Chaincode names cannot
/// hold `$`, so this is never a chaincode's namespace.
pub fn catalogue_namespace(namespace: &str) -> String {
    format!("{namespace}$$i")
}

/// Where the entries of `index` over `namespace` are kept.
pub fn entries_namespace(namespace: &str, index: &JsonIndex) -> String {
    format!("{namespace}$$x{}", index.id())
}

/// The indexes of `namespace` built in `state`.
pub fn built(state: &dyn StateReader, namespace: &str) -> Result<Vec<JsonIndex>> {
    Ok(state
        .range(&catalogue_namespace(namespace), "", "", CHUNK)?
        .into_iter()
        .filter_map(|(_, value)| JsonIndex::from_catalogue_value(&value.value))
        .collect())
}

/// Appends `value` to `out` so that encodings order as CouchDB collates
/// the values (strings by code point): null, false, true, numbers,
/// strings, arrays, objects. Each encoding is self-delimiting, so a
/// sequence of them orders as the sequence of values does.
pub fn encode_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push('1'),
        Value::Bool(false) => out.push('2'),
        Value::Bool(true) => out.push('3'),
        Value::Number(number) => {
            out.push('4');
            let x = number.as_f64().unwrap_or(0.0);
            // -0 collates equal to 0.
            let x = if x == 0.0 { 0.0 } else { x };
            let bits = x.to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits | 1 << 63
            };
            out.push_str(&format!("{ordered:016x}"));
        }
        Value::String(text) => {
            out.push('5');
            encode_string(text, out);
        }
        Value::Array(elements) => {
            out.push('6');
            for element in elements {
                encode_value(element, out);
            }
            out.push('\0');
        }
        Value::Object(object) => {
            out.push('7');
            for (key, value) in object {
                out.push('5');
                encode_string(key, out);
                encode_value(value, out);
            }
            out.push('\0');
        }
    }
}

/// A string, escaped so that `\0` can end it: `\0` becomes `\u{1}\u{1}`
/// and `\u{1}` becomes `\u{1}\u{2}`, which keeps code point order.
fn encode_string(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '\0' => out.push_str("\u{1}\u{1}"),
            '\u{1}' => out.push_str("\u{1}\u{2}"),
            c => out.push(c),
        }
    }
    out.push('\0');
}

/// The least string above every string that starts with `prefix` (which
/// must not be empty nor end in `char::MAX`): the end of a prefix range.
pub fn successor(prefix: &str) -> String {
    let mut chars: Vec<char> = prefix.chars().collect();
    if let Some(last) = chars.pop() {
        let next = match last {
            '\u{D7FF}' => '\u{E000}',
            c => char::from_u32(c as u32 + 1).unwrap_or(char::MAX),
        };
        chars.push(next);
    }
    chars.into_iter().collect()
}

/// Keeps the JSON indexes of a channel's state current: the committer's
/// side of this module. It remembers which indexes each namespace has
/// built (read from the state's catalogue the first time a namespace is
/// written), so a namespace without indexes costs one lookup per write.
#[derive(Debug, Default)]
pub struct IndexMaintainer {
    built: HashMap<String, Vec<JsonIndex>>,
}

impl IndexMaintainer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets what it read of the catalogue: after a rollback of the
    /// state, which may have undone a build.
    pub fn forget(&mut self) {
        self.built.clear();
    }

    /// Whether `index` over `namespace` is built in `state` with this
    /// definition.
    pub fn is_built(
        &mut self,
        state: &dyn StateReader,
        namespace: &str,
        index: &JsonIndex,
    ) -> Result<bool> {
        self.load(state, namespace)?;
        Ok(self
            .built
            .get(namespace)
            .is_some_and(|built| built.contains(index)))
    }

    /// Adds to `batch` (to be applied at `height` over `state`) the entries
    /// of `index` for every document of `namespace`, replacing any built
    /// under the same id, and lists it in the catalogue. Returns how many
    /// documents it indexed. Call before [`maintain`](Self::maintain) for
    /// the same batch, which then corrects the entries of the documents
    /// the batch writes.
    pub fn build(
        &mut self,
        batch: &mut UpdateBatch,
        state: &dyn StateReader,
        namespace: &str,
        index: &JsonIndex,
        height: Height,
    ) -> Result<usize> {
        let entries = entries_namespace(namespace, index);
        scan(state, &entries, |key, _| {
            batch.delete(&entries, key, height);
        })?;
        let mut indexed = 0;
        scan(state, namespace, |key, value| {
            let Ok(document) = serde_json::from_slice::<Value>(value) else {
                return;
            };
            if let Some(entry) = index.entry(&document, key) {
                batch.put(
                    &entries,
                    &entry,
                    Bytes::copy_from_slice(key.as_bytes()),
                    height,
                );
                indexed += 1;
            }
        })?;
        batch.put(
            &catalogue_namespace(namespace),
            &index.id(),
            index.to_catalogue_value(),
            height,
        );
        self.load(state, namespace)?;
        if let Some(built) = self.built.get_mut(namespace) {
            built.retain(|known| known.id() != index.id());
            built.push(index.clone());
        }
        Ok(indexed)
    }

    /// Adds to `batch` the index changes its writes make: for each written
    /// key of a namespace with built indexes, the entries of its value in
    /// `state` (before the batch) are removed and those of its new value
    /// added, at the write's height.
    pub fn maintain(&mut self, batch: &mut UpdateBatch, state: &dyn StateReader) -> Result<()> {
        // Written namespaces come in order, so each is loaded once.
        let mut last = None;
        for (namespace, _, _) in batch.iter() {
            if last != Some(namespace) && crate::holds_documents(namespace) {
                self.load(state, namespace)?;
                last = Some(namespace);
            }
        }
        let mut changes: Vec<(String, String, Option<Bytes>, Height)> = Vec::new();
        for (namespace, key, write) in batch.iter() {
            let Some(indexes) = self.built.get(namespace).filter(|built| !built.is_empty()) else {
                continue;
            };
            let old = state
                .get(namespace, key)?
                .and_then(|old| serde_json::from_slice::<Value>(&old.value).ok());
            let new = write
                .value
                .as_ref()
                .and_then(|value| serde_json::from_slice::<Value>(value).ok());
            for index in indexes {
                let before = old.as_ref().and_then(|doc| index.entry(doc, key));
                let after = new.as_ref().and_then(|doc| index.entry(doc, key));
                if before == after {
                    continue;
                }
                let entries = entries_namespace(namespace, index);
                if let Some(before) = before {
                    changes.push((entries.clone(), before, None, write.version));
                }
                if let Some(after) = after {
                    let value = Bytes::copy_from_slice(key.as_bytes());
                    changes.push((entries, after, Some(value), write.version));
                }
            }
        }
        for (namespace, key, value, version) in changes {
            match value {
                Some(value) => batch.put(&namespace, &key, value, version),
                None => batch.delete(&namespace, &key, version),
            }
        }
        Ok(())
    }

    /// Reads the indexes built for `namespace` from the state's catalogue,
    /// the first time it is asked for.
    fn load(&mut self, state: &dyn StateReader, namespace: &str) -> Result<()> {
        if !self.built.contains_key(namespace) {
            let indexes = built(state, namespace)?;
            self.built.insert(namespace.to_owned(), indexes);
        }
        Ok(())
    }
}

/// Calls `each` with every live key and value of `namespace`, in order.
fn scan(state: &dyn StateReader, namespace: &str, mut each: impl FnMut(&str, &[u8])) -> Result<()> {
    let mut from = String::new();
    loop {
        let chunk = state.range(namespace, &from, "", CHUNK)?;
        for (key, value) in &chunk {
            each(key, &value.value);
        }
        match chunk.last() {
            Some((last, _)) if chunk.len() == CHUNK => from = format!("{last}\0"),
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::VersionedState;
    use crate::memory::{MemoryOptions, MemoryState};

    #[test]
    fn encodings_order_as_couchdb_collates() {
        // In CouchDB's collation order, each value above the one before.
        let ordered = [
            json!(null),
            json!(false),
            json!(true),
            json!(-1e300),
            json!(-2),
            json!(-1.5),
            json!(0),
            json!(0.5),
            json!(1),
            json!(10),
            json!(1e300),
            json!(""),
            json!("\u{0}"),
            json!("\u{0}\u{0}"),
            json!("\u{1}"),
            json!("\u{2}"),
            json!("A"),
            json!("B"),
            json!("a"),
            json!("a\u{0}"),
            json!("ab"),
            json!("é"),
            json!("\u{10FFFF}"),
            json!([]),
            json!([null]),
            json!([1]),
            json!([1, 2]),
            json!([2]),
            json!(["a"]),
            json!({}),
            json!({"a": 1}),
            json!({"a": 1, "b": 0}),
            json!({"a": 2}),
            json!({"b": 0}),
        ];
        let encoded: Vec<String> = ordered
            .iter()
            .map(|value| {
                let mut out = String::new();
                encode_value(value, &mut out);
                out
            })
            .collect();
        for (pair, values) in encoded.windows(2).zip(ordered.windows(2)) {
            assert!(pair[0] < pair[1], "{} < {}", values[0], values[1]);
        }
        // Equal values encode equally (0 and -0, 1 and 1.0).
        let encode = |value: Value| {
            let mut out = String::new();
            encode_value(&value, &mut out);
            out
        };
        assert_eq!(encode(json!(-0.0)), encode(json!(0)));
        assert_eq!(encode(json!(1.0)), encode(json!(1)));
    }

    #[test]
    fn definitions_are_read_as_fabric_accepts_them() {
        let index = JsonIndex::parse(
            "indexOwner.json",
            br#"{"index":{"fields":["docType",{"owner.name":"desc"}]},"ddoc":"indexOwnerDoc","name":"indexOwner","type":"json"}"#,
        )
        .unwrap();
        assert_eq!(index.id(), "indexOwnerDoc/indexOwner");
        assert_eq!(
            index.fields,
            [
                vec!["docType".to_owned()],
                vec!["owner".to_owned(), "name".to_owned()]
            ]
        );
        let unnamed = JsonIndex::parse("a.json", br#"{"index":{"fields":["a","b.c"]}}"#).unwrap();
        assert_eq!(unnamed.id(), "/a,b.c");
        for (text, reason) in [
            (&b"[]"[..], "not a JSON object"),
            (br#"{"ddoc":"d"}"#, "needs"),
            (br#"{"index":{"fields":"a"}}"#, "is an array"),
            (br#"{"index":{"fields":[{"a":"up"}]}}"#, "asc"),
            (br#"{"index":{"fields":["a"]},"type":"text"}"#, "json"),
            (br#"{"index":{"fields":["a"]},"name":1}"#, "is a string"),
            (br#"{"index":{"fields":["a"]},"color":1}"#, "unknown entry"),
        ] {
            let error = JsonIndex::parse("bad.json", text).unwrap_err();
            assert!(error.to_string().contains("bad.json"), "{error}");
            assert!(error.reason.contains(reason), "{error}");
        }
    }

    fn put(batch: &mut UpdateBatch, key: &str, document: Value, height: Height) {
        batch.put("assets", key, Bytes::from(document.to_string()), height);
    }

    /// The document keys of an index, in index order.
    fn index_order(state: &MemoryState, index: &JsonIndex) -> Vec<String> {
        state
            .range(&entries_namespace("assets", index), "", "", 100)
            .unwrap()
            .into_iter()
            .map(|(_, value)| String::from_utf8(value.value.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn an_index_is_built_over_existing_documents_and_kept_current() {
        let dir = tempfile::tempdir().unwrap();
        let state = MemoryState::open(dir.path(), MemoryOptions::default()).unwrap();
        let index =
            JsonIndex::parse("i.json", br#"{"index":{"fields":["color","size"]}}"#).unwrap();
        let mut first = UpdateBatch::new();
        let at = Height::new(1, 0);
        put(&mut first, "a1", json!({"color": "red", "size": 3}), at);
        put(&mut first, "a2", json!({"color": "blue", "size": 9}), at);
        put(&mut first, "a3", json!({"color": "blue"}), at);
        first.put("assets", "a4", Bytes::from_static(b"not json"), at);
        put(&mut first, "a5", json!({"color": "blue", "size": 1}), at);
        state.apply(&first, at).unwrap();

        // Built in a block that also rewrites a2 and deletes a5.
        let mut maintainer = IndexMaintainer::new();
        let at = Height::new(2, 0);
        let mut second = UpdateBatch::new();
        put(&mut second, "a2", json!({"color": "green", "size": 9}), at);
        second.delete("assets", "a5", at);
        assert!(!maintainer.is_built(&state, "assets", &index).unwrap());
        assert_eq!(
            maintainer
                .build(&mut second, &state, "assets", &index, at)
                .unwrap(),
            3
        );
        maintainer.maintain(&mut second, &state).unwrap();
        state.apply(&second, at).unwrap();
        assert_eq!(index_order(&state, &index), ["a2", "a1"]);
        assert_eq!(
            built(&state, "assets").unwrap(),
            std::slice::from_ref(&index)
        );

        // Later writes move, add and remove entries; a fresh maintainer
        // finds the index in the catalogue.
        let mut maintainer = IndexMaintainer::new();
        let at = Height::new(3, 0);
        let mut third = UpdateBatch::new();
        put(&mut third, "a3", json!({"color": "blue", "size": 2}), at);
        put(&mut third, "a1", json!({"color": "red"}), at);
        put(&mut third, "a6", json!({"color": "amber", "size": 0}), at);
        maintainer.maintain(&mut third, &state).unwrap();
        state.apply(&third, at).unwrap();
        assert_eq!(index_order(&state, &index), ["a6", "a3", "a2"]);
        assert!(maintainer.is_built(&state, "assets", &index).unwrap());

        // Building it again replaces the old entries.
        let at = Height::new(4, 0);
        let mut fourth = UpdateBatch::new();
        maintainer
            .build(&mut fourth, &state, "assets", &index, at)
            .unwrap();
        state.apply(&fourth, at).unwrap();
        assert_eq!(index_order(&state, &index), ["a6", "a3", "a2"]);
    }

    #[test]
    fn chaincode_and_collection_namespaces_are_indexed_and_nothing_beside_them() {
        use crate::{hashed_namespace, holds_documents, key_metadata_namespace, private_namespace};
        let private = private_namespace("cc", "coll");
        let index = JsonIndex::parse("i.json", br#"{"index":{"fields":["a"]}}"#).unwrap();
        for indexed in ["cc", private.as_str()] {
            assert!(holds_documents(indexed), "{indexed}");
        }
        for beside in [
            hashed_namespace("cc", "coll"),
            key_metadata_namespace("cc"),
            key_metadata_namespace(&hashed_namespace("cc", "coll")),
            catalogue_namespace(&private),
            entries_namespace(&private, &index),
            "$$expiry".to_owned(),
        ] {
            assert!(!holds_documents(&beside), "{beside}");
        }
    }

    #[test]
    fn a_prefix_range_ends_at_its_successor() {
        let mut prefix = String::new();
        encode_value(&json!("blue"), &mut prefix);
        let end = successor(&prefix);
        let mut inside = prefix.clone();
        encode_value(&json!(1e300), &mut inside);
        inside.push('\u{10FFFF}');
        let mut outside = String::new();
        encode_value(&json!("blue\u{0}"), &mut outside);
        assert!(prefix <= inside && inside < end);
        assert!(end <= outside);
    }
}
