//! CouchDB's Mango query language, as Fabric chaincode uses it through
//! `GetQueryResult`, answered from the world state's JSON values.
//!
//! A query is the JSON object CouchDB's `_find` takes: a `selector`, and
//! optionally `sort`, `limit`, `skip`, `fields` and `use_index` (a
//! `bookmark` is accepted and ignored here: the caller pages). The
//! selector language:
//!
//! - a field is named by a path (`"owner.name"`, or nested objects
//!   `{"owner": {"name": …}}`); a bare value means `$eq`;
//! - field operators `$eq $ne $gt $gte $lt $lte $in $nin $exists $type
//!   $size $mod $regex $all $elemMatch $allMatch`, several on one field
//!   all apply;
//! - combination operators `$and $or $nor $not`.
//!
//! Comparisons follow CouchDB's collation across types: null < false <
//! true < numbers < strings < arrays < objects, arrays element by element,
//! objects key by key. One difference: CouchDB orders strings by the
//! Unicode Collation Algorithm (`"a" < "B" < "b"`), weft by code point
//! (`"B" < "a" < "b"`). A field that is missing matches no operator but
//! `$exists: false` (and `$not` of one that fails).
//!
//! Only JSON objects are documents: other values (binary values, composite
//! key index entries) never match, as CouchDB keeps them as attachments.
//!
//! [`Query::plan`] chooses among the chaincode's JSON indexes
//! ([`weft_statedb::json_index`]) by CouchDB's rules: an index is usable
//! when the selector requires every one of its fields but the sort
//! fields, and the sort fields follow its fields that the selector fixes
//! to one value; `use_index` names the one to prefer. Reading an index
//! returns the documents that have all its fields, in its order, so the
//! results come in the order CouchDB's would.

use std::cmp::Ordering;

use regex::Regex;
use serde_json::{Map, Value};
use weft_statedb::json_index::{JsonIndex, encode_value, successor};

/// Why a query string is not a query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON query: {0}")]
pub struct QueryError(String);

fn invalid(reason: impl Into<String>) -> QueryError {
    QueryError(reason.into())
}

/// A parsed Mango query.
#[derive(Debug)]
pub struct Query {
    selector: Condition,
    sort: Vec<(Vec<String>, bool)>,
    /// The most documents returned, if the query says.
    pub limit: Option<usize>,
    /// Matching documents passed over first.
    pub skip: usize,
    fields: Option<Vec<Vec<String>>>,
    /// `use_index`: a design document, and maybe an index name.
    use_index: Option<(String, Option<String>)>,
}

/// How to answer a query from an index: read the entries of `index` in
/// `[start, end)` (an empty `end`: to the end), backwards if `descending`,
/// and check each document against the selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexScan<'i> {
    pub index: &'i JsonIndex,
    pub start: String,
    pub end: String,
    pub descending: bool,
}

/// What a selector's top-level conditions say of one field.
#[derive(Debug, Default)]
struct FieldBounds<'q> {
    /// Some condition fails when the field is missing.
    required: bool,
    equal: Option<&'q Value>,
    /// A lower bound, and whether it is inclusive.
    lower: Option<(&'q Value, bool)>,
    /// An upper bound, and whether it is inclusive.
    upper: Option<(&'q Value, bool)>,
}

/// A condition on the value at the current position of a document.
#[derive(Debug)]
enum Condition {
    All(Vec<Condition>),
    Any(Vec<Condition>),
    Not(Box<Condition>),
    /// `test` of the value at `path` below the current one.
    Field {
        path: Vec<String>,
        test: Test,
    },
}

#[derive(Debug)]
enum Test {
    Compare(Ordering, bool, Value),
    Ne(Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    Type(String),
    Size(usize),
    Mod(i64, i64),
    Regex(Regex),
    All(Vec<Value>),
    ElemMatch(Box<Condition>),
    AllMatch(Box<Condition>),
    /// A condition whose own paths start at this field (a nested object
    /// selector or a `$not` below a field).
    Nested(Box<Condition>),
}

impl Query {
    /// Parses a query as a chaincode passes it.
    pub fn parse(text: &str) -> Result<Self, QueryError> {
        let query: Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let Value::Object(query) = query else {
            return Err(invalid("a query is a JSON object"));
        };
        let mut selector = None;
        let mut sort = Vec::new();
        let mut limit = None;
        let mut skip = 0;
        let mut fields = None;
        let mut use_index = None;
        for (key, value) in &query {
            match key.as_str() {
                "selector" => {
                    let Value::Object(object) = value else {
                        return Err(invalid("the selector is a JSON object"));
                    };
                    selector = Some(parse_selector(object)?);
                }
                "sort" => sort = parse_sort(value)?,
                "limit" => limit = Some(count(value, "limit")?),
                "skip" => skip = count(value, "skip")?,
                "fields" => fields = Some(parse_fields(value)?),
                "use_index" => use_index = Some(parse_use_index(value)?),
                "bookmark" | "execution_stats" | "r" | "conflicts" | "update" | "stable" => {}
                other => return Err(invalid(format!("unknown query field {other:?}"))),
            }
        }
        Ok(Self {
            selector: selector.ok_or_else(|| invalid("a query needs a selector"))?,
            sort,
            limit,
            skip,
            fields,
            use_index,
        })
    }

    /// The index of `indexes` to answer this query from, and the range of
    /// its entries that can hold matches; `None` when none is usable (the
    /// caller scans the namespace).
    pub fn plan<'i>(&self, indexes: &'i [JsonIndex]) -> Option<IndexScan<'i>> {
        let mut conditions = Vec::new();
        self.selector.top_level(&mut conditions);
        let bounds = |path: &[String]| {
            let mut bounds = FieldBounds::default();
            for (_, test) in conditions.iter().filter(|(field, _)| *field == path) {
                bounds.required |= test.requires_field();
                match test {
                    Test::Compare(Ordering::Equal, true, value) => bounds.equal = Some(value),
                    Test::Compare(Ordering::Greater, true, value) => {
                        bounds.lower = Some((value, false));
                    }
                    Test::Compare(Ordering::Less, false, value) => {
                        bounds.lower = Some((value, true))
                    }
                    Test::Compare(Ordering::Less, true, value) => {
                        bounds.upper = Some((value, false))
                    }
                    Test::Compare(Ordering::Greater, false, value) => {
                        bounds.upper = Some((value, true));
                    }
                    _ => {}
                }
            }
            bounds
        };
        // A sort reads an index one way, so all its fields go one way.
        let descending = self.sort.first().is_some_and(|(_, ascending)| !ascending);
        if self
            .sort
            .iter()
            .any(|(_, ascending)| *ascending == descending)
        {
            return None;
        }
        let sort_fields: Vec<&Vec<String>> = self.sort.iter().map(|(path, _)| path).collect();
        let usable = |index: &JsonIndex| {
            let required = index
                .fields
                .iter()
                .all(|field| sort_fields.contains(&field) || bounds(field).required);
            // Skip the leading fields fixed to one value; the sort fields
            // must come next.
            let fixed = index
                .fields
                .iter()
                .take_while(|field| bounds(field).equal.is_some() && !sort_fields.contains(field))
                .count();
            let sorted = index.fields[fixed..]
                .iter()
                .zip(&sort_fields)
                .all(|(field, sort_field)| field == *sort_field)
                && index.fields.len() - fixed >= sort_fields.len();
            (required && sorted).then_some(fixed)
        };
        // Each usable index, with how many leading fields the selector fixes.
        let candidates: Vec<(&JsonIndex, usize)> = indexes
            .iter()
            .filter_map(|index| usable(index).map(|fixed| (index, fixed)))
            .collect();
        let named = self.use_index.as_ref().and_then(|(ddoc, name)| {
            candidates.iter().find(|(index, _)| {
                index.ddoc.trim_start_matches("_design/") == ddoc.trim_start_matches("_design/")
                    && name.as_ref().is_none_or(|name| *name == index.name)
            })
        });
        let &(chosen, fixed) = named.or_else(|| {
            candidates.iter().min_by(|(a, a_fixed), (b, b_fixed)| {
                b_fixed
                    .cmp(a_fixed)
                    .then(a.fields.len().cmp(&b.fields.len()))
                    .then_with(|| a.id().cmp(&b.id()))
            })
        })?;
        let mut prefix = String::new();
        for field in &chosen.fields[..fixed] {
            if let Some(value) = bounds(field).equal {
                encode_value(value, &mut prefix);
            }
        }
        let bounded = |value: &Value| {
            let mut bound = prefix.clone();
            encode_value(value, &mut bound);
            bound
        };
        let next = chosen.fields.get(fixed).map(|field| bounds(field));
        let start = match next.as_ref().and_then(|next| next.lower) {
            Some((value, true)) => bounded(value),
            Some((value, false)) => successor(&bounded(value)),
            None => prefix.clone(),
        };
        let end = match next.as_ref().and_then(|next| next.upper) {
            Some((value, true)) => successor(&bounded(value)),
            Some((value, false)) => bounded(value),
            None if prefix.is_empty() => String::new(),
            None => successor(&prefix),
        };
        Some(IndexScan {
            index: chosen,
            start,
            end,
            descending,
        })
    }

    /// Whether `document` matches the selector.
    pub fn matches(&self, document: &Value) -> bool {
        document.is_object() && self.selector.holds(document)
    }

    /// Whether the query sorts its results; without, they come in key
    /// order, as CouchDB's full scan returns them.
    pub fn sorts(&self) -> bool {
        !self.sort.is_empty()
    }

    /// Whether `document` can be sorted: CouchDB answers a sorted query
    /// from an index on the sort fields, which leaves out documents
    /// lacking one.
    pub fn sortable(&self, document: &Value) -> bool {
        self.sort
            .iter()
            .all(|(path, _)| lookup(document, path).is_some())
    }

    /// How two sortable documents, stored under keys `a_key` and `b_key`,
    /// order under the query's sort. Ties go by key, in the direction of
    /// the sort, as CouchDB reads them from an index keyed by the sort
    /// fields and the document ID.
    pub fn order(&self, (a_key, a): (&str, &Value), (b_key, b): (&str, &Value)) -> Ordering {
        let mut ascending = true;
        for (path, up) in &self.sort {
            ascending = *up;
            let (Some(x), Some(y)) = (lookup(a, path), lookup(b, path)) else {
                continue;
            };
            let order = collate(x, y);
            if order != Ordering::Equal {
                return if *up { order } else { order.reverse() };
            }
        }
        let order = a_key.cmp(b_key);
        if ascending { order } else { order.reverse() }
    }

    /// `document` with only the query's `fields`, if it names any.
    pub fn project(&self, document: &Value) -> Value {
        let Some(fields) = &self.fields else {
            return document.clone();
        };
        let mut projected = Map::new();
        for path in fields {
            if let Some(value) = lookup(document, path) {
                insert(&mut projected, path, value.clone());
            }
        }
        Value::Object(projected)
    }
}

/// `use_index`: `"ddoc"`, `["ddoc"]` or `["ddoc", "name"]`.
fn parse_use_index(value: &Value) -> Result<(String, Option<String>), QueryError> {
    let wrong = || invalid("use_index is a design document name, or [design document, index name]");
    match value {
        Value::String(ddoc) => Ok((ddoc.clone(), None)),
        Value::Array(parts) => match parts.as_slice() {
            [Value::String(ddoc)] => Ok((ddoc.clone(), None)),
            [Value::String(ddoc), Value::String(name)] => Ok((ddoc.clone(), Some(name.clone()))),
            _ => Err(wrong()),
        },
        _ => Err(wrong()),
    }
}

fn count(value: &Value, name: &str) -> Result<usize, QueryError> {
    value
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| invalid(format!("{name} is a non-negative integer")))
}

fn path_of(field: &str) -> Vec<String> {
    field.split('.').map(str::to_owned).collect()
}

fn parse_sort(value: &Value) -> Result<Vec<(Vec<String>, bool)>, QueryError> {
    let Value::Array(entries) = value else {
        return Err(invalid("sort is an array"));
    };
    entries
        .iter()
        .map(|entry| match entry {
            Value::String(field) => Ok((path_of(field), true)),
            Value::Object(object) if object.len() == 1 => {
                let (field, direction) = object.iter().next().ok_or_else(|| invalid("sort"))?;
                match direction.as_str() {
                    Some("asc") => Ok((path_of(field), true)),
                    Some("desc") => Ok((path_of(field), false)),
                    _ => Err(invalid(format!(
                        "sort direction of {field:?} is asc or desc"
                    ))),
                }
            }
            _ => Err(invalid(
                "a sort entry is a field name or {field: direction}",
            )),
        })
        .collect()
}

fn parse_fields(value: &Value) -> Result<Vec<Vec<String>>, QueryError> {
    let Value::Array(fields) = value else {
        return Err(invalid("fields is an array of field names"));
    };
    fields
        .iter()
        .map(|field| {
            field
                .as_str()
                .map(path_of)
                .ok_or_else(|| invalid("fields is an array of field names"))
        })
        .collect()
}

/// A selector object: every entry must hold.
fn parse_selector(object: &Map<String, Value>) -> Result<Condition, QueryError> {
    let mut all = Vec::with_capacity(object.len());
    for (key, value) in object {
        all.push(match key.as_str() {
            "$and" => Condition::All(parse_selectors(value, "$and")?),
            "$or" => Condition::Any(parse_selectors(value, "$or")?),
            "$nor" => Condition::Not(Box::new(Condition::Any(parse_selectors(value, "$nor")?))),
            "$not" => Condition::Not(Box::new(selector_value(value, "$not")?)),
            operator if operator.starts_with('$') => {
                // An operator on the current value (inside $elemMatch).
                Condition::Field {
                    path: Vec::new(),
                    test: parse_test(operator, value)?,
                }
            }
            field => parse_field(path_of(field), value)?,
        });
    }
    Ok(single(all))
}

fn single(mut all: Vec<Condition>) -> Condition {
    if all.len() == 1 {
        all.remove(0)
    } else {
        Condition::All(all)
    }
}

fn selector_value(value: &Value, operator: &str) -> Result<Condition, QueryError> {
    match value {
        Value::Object(object) => parse_selector(object),
        _ => Err(invalid(format!("{operator} takes a selector object"))),
    }
}

fn parse_selectors(value: &Value, operator: &str) -> Result<Vec<Condition>, QueryError> {
    let Value::Array(selectors) = value else {
        return Err(invalid(format!("{operator} takes an array of selectors")));
    };
    selectors
        .iter()
        .map(|selector| selector_value(selector, operator))
        .collect()
}

/// The condition `field: value`.
fn parse_field(path: Vec<String>, value: &Value) -> Result<Condition, QueryError> {
    let Value::Object(object) = value else {
        return Ok(Condition::Field {
            path,
            test: Test::Compare(Ordering::Equal, true, value.clone()),
        });
    };
    if object.keys().any(|key| key.starts_with('$')) {
        let mut all = Vec::with_capacity(object.len());
        for (operator, argument) in object {
            let test = match operator.as_str() {
                "$not" | "$and" | "$or" | "$nor" => {
                    let mut inner = Map::new();
                    inner.insert(operator.clone(), argument.clone());
                    Test::Nested(Box::new(parse_selector(&inner)?))
                }
                operator if operator.starts_with('$') => parse_test(operator, argument)?,
                field => Test::Nested(Box::new(parse_field(path_of(field), argument)?)),
            };
            all.push(Condition::Field {
                path: path.clone(),
                test,
            });
        }
        return Ok(single(all));
    }
    // A nested object selects sub-fields: {"a": {"b": 1}} is "a.b": 1.
    let mut all = Vec::with_capacity(object.len());
    for (field, inner) in object {
        let mut nested = path.clone();
        nested.extend(path_of(field));
        all.push(parse_field(nested, inner)?);
    }
    Ok(single(all))
}

fn parse_test(operator: &str, argument: &Value) -> Result<Test, QueryError> {
    let array = || {
        argument
            .as_array()
            .cloned()
            .ok_or_else(|| invalid(format!("{operator} takes an array")))
    };
    Ok(match operator {
        "$eq" => Test::Compare(Ordering::Equal, true, argument.clone()),
        "$ne" => Test::Ne(argument.clone()),
        "$gt" => Test::Compare(Ordering::Greater, true, argument.clone()),
        "$gte" => Test::Compare(Ordering::Less, false, argument.clone()),
        "$lt" => Test::Compare(Ordering::Less, true, argument.clone()),
        "$lte" => Test::Compare(Ordering::Greater, false, argument.clone()),
        "$in" => Test::In(array()?),
        "$nin" => Test::Nin(array()?),
        "$all" => Test::All(array()?),
        "$exists" => Test::Exists(
            argument
                .as_bool()
                .ok_or_else(|| invalid("$exists takes true or false"))?,
        ),
        "$type" => {
            let kind = argument.as_str().unwrap_or_default();
            if !["null", "boolean", "number", "string", "array", "object"].contains(&kind) {
                return Err(invalid(format!("$type {argument} is not a JSON type")));
            }
            Test::Type(kind.to_owned())
        }
        "$size" => Test::Size(count(argument, "$size")?),
        "$mod" => {
            let pair = array()?;
            match (
                pair.first().and_then(Value::as_i64),
                pair.get(1).and_then(Value::as_i64),
            ) {
                (Some(divisor), Some(remainder)) if pair.len() == 2 && divisor != 0 => {
                    Test::Mod(divisor, remainder)
                }
                _ => return Err(invalid("$mod takes [divisor, remainder], divisor not 0")),
            }
        }
        "$regex" => {
            let pattern = argument
                .as_str()
                .ok_or_else(|| invalid("$regex takes a string"))?;
            Test::Regex(Regex::new(pattern).map_err(|e| invalid(format!("$regex: {e}")))?)
        }
        "$elemMatch" => Test::ElemMatch(Box::new(selector_value(argument, operator)?)),
        "$allMatch" => Test::AllMatch(Box::new(selector_value(argument, operator)?)),
        other => return Err(invalid(format!("unknown operator {other}"))),
    })
}

impl Condition {
    /// The field conditions that must all hold: those of the selector's
    /// top level and of its `$and`s.
    fn top_level<'q>(&'q self, out: &mut Vec<(&'q [String], &'q Test)>) {
        match self {
            Self::All(all) => all.iter().for_each(|condition| condition.top_level(out)),
            Self::Field { path, test } => out.push((path, test)),
            Self::Any(_) | Self::Not(_) => {}
        }
    }

    fn holds(&self, value: &Value) -> bool {
        match self {
            Self::All(all) => all.iter().all(|c| c.holds(value)),
            Self::Any(any) => any.iter().any(|c| c.holds(value)),
            Self::Not(inner) => !inner.holds(value),
            Self::Field { path, test } => test.holds(lookup(value, path)),
        }
    }
}

impl Test {
    /// Whether the field must exist for this test to pass.
    fn requires_field(&self) -> bool {
        match self {
            Self::Exists(wanted) => *wanted,
            Self::Nested(inner) => !matches!(**inner, Condition::Not(_)),
            _ => true,
        }
    }

    /// Whether the field's value (`None`: missing) passes.
    fn holds(&self, field: Option<&Value>) -> bool {
        if let Self::Exists(wanted) = self {
            return field.is_some() == *wanted;
        }
        if let Self::Nested(inner) = self {
            return match field {
                Some(value) => inner.holds(value),
                None => matches!(**inner, Condition::Not(_)) && inner.holds(&Value::Null),
            };
        }
        let Some(value) = field else {
            return false;
        };
        match self {
            Self::Compare(order, strict, argument) => {
                let found = collate(value, argument);
                if *strict {
                    found == *order
                } else {
                    found != *order
                }
            }
            Self::Ne(argument) => collate(value, argument) != Ordering::Equal,
            Self::In(arguments) => member_of(value, arguments),
            Self::Nin(arguments) => !member_of(value, arguments),
            Self::Type(kind) => type_name(value) == kind,
            Self::Size(size) => value.as_array().is_some_and(|array| array.len() == *size),
            Self::Mod(divisor, remainder) => value
                .as_i64()
                .is_some_and(|n| n.checked_rem(*divisor) == Some(*remainder)),
            Self::Regex(regex) => value.as_str().is_some_and(|text| regex.is_match(text)),
            Self::All(arguments) => value.as_array().is_some_and(|array| {
                arguments
                    .iter()
                    .all(|wanted| array.iter().any(|v| collate(v, wanted) == Ordering::Equal))
            }),
            Self::ElemMatch(inner) => value
                .as_array()
                .is_some_and(|array| array.iter().any(|element| inner.holds(element))),
            Self::AllMatch(inner) => value.as_array().is_some_and(|array| {
                !array.is_empty() && array.iter().all(|element| inner.holds(element))
            }),
            Self::Exists(_) | Self::Nested(_) => false,
        }
    }
}

/// `$in`: the value, or for an array any of its elements, is one of
/// `arguments`.
fn member_of(value: &Value, arguments: &[Value]) -> bool {
    let equal = |v: &Value| {
        arguments
            .iter()
            .any(|argument| collate(v, argument) == Ordering::Equal)
    };
    match value {
        Value::Array(elements) => elements.iter().any(equal),
        other => equal(other),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The value at `path` below `value`; the empty path is `value` itself.
fn lookup<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter()
        .try_fold(value, |current, field| current.as_object()?.get(field))
}

fn insert(object: &mut Map<String, Value>, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            object.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = object
                .entry(first.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(inner) = entry {
                insert(inner, rest, value);
            }
        }
    }
}

/// CouchDB's collation of JSON values (strings by code point here).
pub fn collate(a: &Value, b: &Value) -> Ordering {
    fn rank(value: &Value) -> u8 {
        match value {
            Value::Null => 0,
            Value::Bool(false) => 1,
            Value::Bool(true) => 2,
            Value::Number(_) => 3,
            Value::String(_) => 4,
            Value::Array(_) => 5,
            Value::Object(_) => 6,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (
                    x.as_f64().unwrap_or(f64::NAN),
                    y.as_f64().unwrap_or(f64::NAN),
                );
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => x
            .iter()
            .zip(y)
            .map(|(x, y)| collate(x, y))
            .find(|order| *order != Ordering::Equal)
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        (Value::Object(x), Value::Object(y)) => x
            .iter()
            .zip(y)
            .map(|((kx, vx), (ky, vy))| kx.cmp(ky).then_with(|| collate(vx, vy)))
            .find(|order| *order != Ordering::Equal)
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        _ => rank(a).cmp(&rank(b)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn assets() -> Vec<Value> {
        vec![
            json!({"id": "a1", "color": "blue", "size": 5, "owner": {"name": "tom"}, "tags": ["x", "y"]}),
            json!({"id": "a2", "color": "red", "size": 10, "owner": {"name": "ann"}, "tags": ["y"]}),
            json!({"id": "a3", "color": "blue", "size": 15, "tags": []}),
            json!({"id": "a4", "color": "green", "size": "big"}),
            json!(["not", "a", "document"]),
        ]
    }

    fn ids(query: &str) -> Vec<String> {
        let query = Query::parse(query).unwrap();
        assets()
            .iter()
            .filter(|doc| query.matches(doc))
            .map(|doc| doc["id"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn selectors_match_as_couchdb_matches() {
        for (selector, expected) in [
            (r#"{"color": "blue"}"#, &["a1", "a3"][..]),
            (r#"{"color": {"$ne": "blue"}}"#, &["a2", "a4"]),
            (r#"{"size": {"$gt": 5, "$lte": 15}}"#, &["a2", "a3"]),
            // Strings collate above numbers.
            (r#"{"size": {"$gt": 100}}"#, &["a4"]),
            (r#"{"owner.name": "ann"}"#, &["a2"]),
            (r#"{"owner": {"name": "tom"}}"#, &["a1"]),
            (r#"{"owner": {"$exists": false}}"#, &["a3", "a4"]),
            (r#"{"color": {"$in": ["red", "green"]}}"#, &["a2", "a4"]),
            (r#"{"tags": {"$in": ["x"]}}"#, &["a1"]),
            (r#"{"color": {"$nin": ["blue"]}}"#, &["a2", "a4"]),
            (r#"{"tags": {"$size": 0}}"#, &["a3"]),
            (r#"{"tags": {"$all": ["y", "x"]}}"#, &["a1"]),
            (r#"{"tags": {"$elemMatch": {"$eq": "y"}}}"#, &["a1", "a2"]),
            (r#"{"tags": {"$allMatch": {"$eq": "y"}}}"#, &["a2"]),
            (r#"{"id": {"$regex": "^a[13]$"}}"#, &["a1", "a3"]),
            (r#"{"size": {"$type": "string"}}"#, &["a4"]),
            (r#"{"size": {"$mod": [5, 0]}}"#, &["a1", "a2", "a3"]),
            (
                r#"{"$or": [{"color": "red"}, {"size": 15}]}"#,
                &["a2", "a3"],
            ),
            (
                r#"{"$and": [{"color": "blue"}, {"size": {"$lt": 10}}]}"#,
                &["a1"],
            ),
            (
                r#"{"$nor": [{"color": "blue"}, {"color": "red"}]}"#,
                &["a4"],
            ),
            (r#"{"$not": {"color": "blue"}}"#, &["a2", "a4"]),
            (r#"{"size": {"$not": {"$gt": 5}}}"#, &["a1"]),
            (r#"{}"#, &["a1", "a2", "a3", "a4"]),
        ] {
            let query = format!(r#"{{"selector": {selector}}}"#);
            assert_eq!(ids(&query), expected, "{selector}");
        }
    }

    #[test]
    fn sort_and_fields_shape_the_results() {
        let query = Query::parse(
            r#"{"selector": {"color": {"$exists": true}}, "sort": [{"size": "desc"}], "fields": ["id", "owner.name"]}"#,
        )
        .unwrap();
        let mut found: Vec<Value> = assets()
            .into_iter()
            .filter(|doc| query.matches(doc) && query.sortable(doc))
            .collect();
        found.sort_by(|a, b| {
            let key = |doc: &Value| doc["id"].as_str().unwrap().to_owned();
            query.order((&key(a), a), (&key(b), b))
        });
        let projected: Vec<Value> = found.iter().map(|doc| query.project(doc)).collect();
        assert_eq!(
            projected,
            [
                json!({"id": "a4"}),
                json!({"id": "a3"}),
                json!({"id": "a2", "owner": {"name": "ann"}}),
                json!({"id": "a1", "owner": {"name": "tom"}}),
            ]
        );
    }

    #[test]
    fn malformed_queries_are_refused_with_the_reason() {
        for (query, reason) in [
            ("not json", "expected"),
            (r#"{"sort": []}"#, "needs a selector"),
            (
                r#"{"selector": {"a": {"$near": 1}}}"#,
                "unknown operator $near",
            ),
            (r#"{"selector": {}, "limit": -1}"#, "limit"),
            (r#"{"selector": {"a": {"$regex": "("}}}"#, "$regex"),
            (r#"{"selector": {}, "sort": [{"a": "up"}]}"#, "asc or desc"),
        ] {
            let error = Query::parse(query).unwrap_err();
            assert!(error.to_string().contains(reason), "{query}: {error}");
        }
    }
}
