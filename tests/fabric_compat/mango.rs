//! weft's JSON queries (`weft_peer_endorser::mango`) against an oracle of
//! CouchDB's query language: PouchDB with `pouchdb-find` (npm), which
//! implements CouchDB's Mango selectors, collation, sort through an index,
//! `fields`, `skip` and `limit` in JavaScript. CouchDB itself is not
//! packaged here. The same documents and queries go to both; the documents
//! each returns, as projected, must be equal, and in the same order when
//! the query sorts (without a sort, CouchDB's order is that of the index
//! it picks, weft's the key order of its full scan).
//!
//! Left out on purpose, where PouchDB is not CouchDB: `$ne`/`$nin` on a
//! document that lacks the field (PouchDB matches it, CouchDB does not,
//! nor does weft), `$not` below a field (PouchDB refuses it), `$exists:
//! false` on an indexed field (PouchDB answers from the index), `$mod` of
//! a float such as `10.0` (JavaScript cannot tell it from `10`; CouchDB and
//! weft do not take it as an integer), `skip` and `limit` without a sort
//! (which documents they leave depends on the index CouchDB picks), and
//! strings outside ASCII letters and digits (CouchDB collates them with
//! ICU).

use serde_json::{Value, json};
use weft_peer_endorser::mango::Query;

use super::node;

/// Documents of every JSON type, nested fields, arrays and missing
/// fields; `_id` is the key.
fn documents() -> Vec<Value> {
    vec![
        json!({"_id": "a01", "color": "blue", "size": 5, "owner": {"name": "tom", "age": 40}, "tags": ["x", "y"]}),
        json!({"_id": "a02", "color": "red", "size": 10, "owner": {"name": "ann", "age": 31}, "tags": ["y"]}),
        json!({"_id": "a03", "color": "blue", "size": 15.5, "tags": []}),
        json!({"_id": "a04", "color": "green", "size": "big", "owner": {"name": "bob"}}),
        json!({"_id": "a05", "color": "Blue", "size": null, "active": true}),
        json!({"_id": "a06", "color": "red", "size": [1, 2], "active": false}),
        json!({"_id": "a07", "color": "blue", "size": {"w": 1}, "tags": ["z", "x", "y"]}),
        json!({"_id": "a08", "size": 10, "owner": {"name": "ann", "age": 29}, "active": true}),
        json!({"_id": "a09", "color": "red", "size": -3, "tags": [{"k": 1}, {"k": 2}]}),
        json!({"_id": "a10", "color": "blue", "size": 10.0, "owner": {"name": "cy"}}),
    ]
}

/// Queries on which CouchDB and PouchDB agree (see the module doc).
fn queries() -> Vec<Value> {
    let mut queries: Vec<Value> = [
        json!({"color": "blue"}),
        json!({"size": 10}),
        json!({"size": {"$gt": 5}}),
        json!({"size": {"$gte": 10, "$lt": 16}}),
        json!({"size": {"$lte": null}}),
        json!({"size": {"$gt": "a"}}),
        json!({"size": {"$lt": true}}),
        json!({"size": {"$gt": [1, 1]}}),
        json!({"owner.name": "ann"}),
        json!({"owner": {"name": "ann"}}),
        json!({"owner.name": "ann", "owner.age": {"$gt": 30}}),
        json!({"tags": {"$exists": false}}),
        json!({"active": {"$exists": true}}),
        json!({"color": {"$in": ["red", "green"]}}),
        json!({"tags": {"$in": ["x"]}}),
        json!({"color": {"$exists": true, "$ne": "blue"}}),
        json!({"color": {"$exists": true, "$nin": ["blue", "red"]}}),
        json!({"tags": {"$size": 2}}),
        json!({"tags": {"$all": ["y", "x"]}}),
        json!({"tags": {"$elemMatch": {"$eq": "z"}}}),
        json!({"tags": {"$elemMatch": {"k": {"$gt": 1}}}}),
        json!({"tags": {"$allMatch": {"$in": ["x", "y"]}}}),
        json!({"color": {"$regex": "^bl"}}),
        json!({"size": {"$type": "number"}}),
        json!({"size": {"$type": "array"}}),
        json!({"owner.age": {"$mod": [2, 1]}}),
        json!({"$or": [{"color": "green"}, {"size": {"$lt": 0}}]}),
        json!({"$and": [{"color": "blue"}, {"tags": {"$exists": true}}]}),
        json!({"$nor": [{"color": "blue"}, {"color": "red"}]}),
        json!({"$not": {"color": "red"}}),
        json!({"active": false}),
        json!({}),
    ]
    .into_iter()
    .map(|selector| json!({"selector": selector}))
    .collect();
    queries.extend([
        json!({"selector": {"size": {"$gte": 0}}, "sort": [{"size": "desc"}]}),
        json!({"selector": {"size": {"$exists": true}}, "sort": ["size"], "skip": 2, "limit": 4}),
        json!({"selector": {"color": "blue"}, "fields": ["color", "owner.name"]}),
        json!({"selector": {"owner.age": {"$gt": 0}}, "sort": [{"owner.age": "asc"}], "fields": ["owner.age"]}),
    ]);
    queries
}

#[test]
fn json_queries_answer_what_couchdb_answers() {
    let documents = documents();
    let queries = queries();
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.json");
    let cases_json = json!({
        "docs": documents,
        "indexes": [["size"], ["owner.age"]],
        "queries": queries,
    });
    std::fs::write(&cases, cases_json.to_string()).unwrap();
    let stdout = node::stdout_of(node::node().arg("mango.js").arg(&cases));
    let oracle: Vec<Value> = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(oracle.len(), queries.len());

    for (query, expected) in queries.iter().zip(oracle) {
        assert!(expected.is_array(), "PouchDB refused {query}: {expected}");
        let parsed = Query::parse(&query.to_string()).unwrap();
        // The documents as weft stores them: keyed by _id, in key order.
        let mut found: Vec<(&str, Value)> = documents
            .iter()
            .map(|document| {
                let mut value = document.clone();
                let id = value.as_object_mut().unwrap().remove("_id").unwrap();
                let id = documents
                    .iter()
                    .find_map(|d| d["_id"].as_str().filter(|i| *i == id.as_str().unwrap()))
                    .unwrap();
                (id, value)
            })
            .filter(|(_, value)| {
                parsed.matches(value) && (!parsed.sorts() || parsed.sortable(value))
            })
            .collect();
        if parsed.sorts() {
            found.sort_by(|(a_key, a), (b_key, b)| parsed.order((a_key, a), (b_key, b)));
        }
        let limit = parsed.limit.unwrap_or(usize::MAX);
        let answered: Vec<Value> = found
            .into_iter()
            .skip(parsed.skip)
            .take(limit)
            .map(|(id, value)| json!({"id": id, "doc": parsed.project(&value)}))
            .collect();
        let (mut answered, mut expected) = (answered, expected.as_array().unwrap().clone());
        // Without a sort, CouchDB's order is the index it picked (key
        // order for a full scan, weft's only plan): compare those as sets.
        if !parsed.sorts() {
            let by_id = |a: &Value, b: &Value| a["id"].as_str().cmp(&b["id"].as_str());
            answered.sort_by(by_id);
            expected.sort_by(by_id);
        }
        assert_eq!(
            numbers_as_floats(Value::Array(answered)),
            numbers_as_floats(Value::Array(expected)),
            "query {query}"
        );
    }
}

/// `value` with every number as a float: JavaScript has no integers, so
/// PouchDB gives back `10.0` as `10`.
fn numbers_as_floats(value: Value) -> Value {
    match value {
        Value::Number(number) => json!(number.as_f64().unwrap()),
        Value::Array(values) => Value::Array(values.into_iter().map(numbers_as_floats).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| (key, numbers_as_floats(value)))
                .collect(),
        ),
        other => other,
    }
}
