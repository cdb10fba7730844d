//! Chaincodes compiled into the peer, the workloads of the papers:
//!
//! - `kv`: `put key value [key value ...]` (blind writes; event `put`
//!   carrying the first key), `get key`, `delete key`, `update value key
//!   [key ...]` (reads each key, then writes `value` to it: Thakkar's
//!   read-write transactions);
//! - `transfer` (FastFabric): `create account balance`,
//!   `transfer from to amount [memo]` (the memo, ignored, brings the
//!   transaction to FastFabric's size), `balance account`;
//! - `smallbank` (Blockbench, Caliper): `create_account id checking
//!   savings`, `deposit_checking id amount`, `write_check id amount`,
//!   `transact_savings id amount`, `send_payment from to amount`,
//!   `amalgamate from to`, `query id`.
//!
//! Balances are decimal integers stored as text.

use bytes::Bytes;
use weft_protos::protos::Response;

use crate::chaincode::{Chaincode, StateError, Stub, error, success};

/// Every built-in chaincode, by name.
pub fn builtins() -> Vec<(&'static str, std::sync::Arc<dyn Chaincode>)> {
    vec![
        ("kv", std::sync::Arc::new(Kv)),
        ("transfer", std::sync::Arc::new(Transfer)),
        ("smallbank", std::sync::Arc::new(SmallBank)),
    ]
}

/// A failed invocation, turned into an error response.
#[derive(Debug)]
enum Failure {
    State(StateError),
    Usage(String),
}

impl From<StateError> for Failure {
    fn from(error: StateError) -> Self {
        Self::State(error)
    }
}

type Outcome = Result<Bytes, Failure>;

fn respond(outcome: Outcome) -> Response {
    match outcome {
        Ok(payload) => success(payload),
        Err(Failure::State(state)) => error(state.to_string()),
        Err(Failure::Usage(message)) => error(message),
    }
}

fn usage<T>(message: impl Into<String>) -> Result<T, Failure> {
    Err(Failure::Usage(message.into()))
}

/// The parameters of `stub`, exactly `N` of them, as text.
fn parameters<const N: usize>(stub: &Stub<'_>, names: [&str; N]) -> Result<[String; N], Failure> {
    texts_of(stub, names, N)
}

/// Like [`parameters`], but the last parameter may be any bytes: it is
/// returned empty, to be read from the stub.
fn parameters_raw_last<const N: usize>(
    stub: &Stub<'_>,
    names: [&str; N],
) -> Result<[String; N], Failure> {
    texts_of(stub, names, N.saturating_sub(1))
}

/// The first `texts` of exactly `N` parameters, as text.
fn texts_of<const N: usize>(
    stub: &Stub<'_>,
    names: [&str; N],
    texts: usize,
) -> Result<[String; N], Failure> {
    let given = stub.parameters();
    if given.len() != N {
        return usage(format!(
            "{} takes {N} arguments ({}), got {}",
            stub.function(),
            names.join(", "),
            given.len()
        ));
    }
    let mut decoded: [String; N] = std::array::from_fn(|_| String::new());
    for (index, (text, bytes)) in decoded.iter_mut().zip(given).enumerate().take(texts) {
        *text = std::str::from_utf8(bytes)
            .map_err(|_| {
                Failure::Usage(format!(
                    "argument {} ({}) is not UTF-8 text",
                    index + 1,
                    names[index]
                ))
            })?
            .to_owned();
    }
    Ok(decoded)
}

fn amount(text: &str, name: &str) -> Result<i64, Failure> {
    text.parse::<i64>()
        .map_err(|_| Failure::Usage(format!("{name} {text:?} is not an integer")))
}

/// A stored balance; an absent key is an unknown account.
fn balance(stub: &mut Stub<'_>, key: &str) -> Result<i64, Failure> {
    let Some(value) = stub.get_state(key)? else {
        return usage(format!("account {key:?} does not exist"));
    };
    std::str::from_utf8(&value)
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
        .ok_or_else(|| Failure::Usage(format!("the balance of {key:?} is not an integer")))
}

fn store(stub: &mut Stub<'_>, key: &str, balance: i64) -> Result<(), Failure> {
    stub.put_state(key, balance.to_string())?;
    Ok(())
}

fn checked(result: Option<i64>) -> Result<i64, Failure> {
    result.ok_or_else(|| Failure::Usage("the balance would overflow".to_owned()))
}

/// `kv`: a plain key-value store.
#[derive(Debug)]
pub struct Kv;

impl Chaincode for Kv {
    fn invoke(&self, stub: &mut Stub<'_>) -> Response {
        respond(match stub.function() {
            "put" => kv_put(stub),
            "get" => kv_get(stub),
            "delete" => kv_delete(stub),
            "update" => kv_update(stub),
            other => usage(format!(
                "kv has no function {other:?} (put, get, delete, update)"
            )),
        })
    }
}

fn kv_put(stub: &mut Stub<'_>) -> Outcome {
    // Values may be any bytes; only keys must be text.
    let given = stub.parameters().to_vec();
    if given.is_empty() || !given.len().is_multiple_of(2) {
        return usage(format!(
            "put takes key value pairs (key, value[, key, value ...]), got {} arguments",
            given.len()
        ));
    }
    let mut first_key = None;
    for pair in given.chunks_exact(2) {
        let key = text_argument(&pair[0], "key")?;
        stub.put_state(&key, pair[1].clone())?;
        first_key.get_or_insert(key);
    }
    if let Some(key) = first_key {
        stub.set_event("put", key);
    }
    Ok(Bytes::new())
}

fn kv_update(stub: &mut Stub<'_>) -> Outcome {
    let given = stub.parameters().to_vec();
    let Some((value, keys)) = given.split_first().filter(|(_, keys)| !keys.is_empty()) else {
        return usage(format!(
            "update takes a value and at least one key, got {} arguments",
            given.len()
        ));
    };
    for key in keys {
        let key = text_argument(key, "key")?;
        stub.get_state(&key)?;
        stub.put_state(&key, value.clone())?;
    }
    Ok(Bytes::new())
}

fn text_argument(bytes: &Bytes, name: &str) -> Result<String, Failure> {
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| Failure::Usage(format!("a {name} is not UTF-8 text")))
}

fn kv_get(stub: &mut Stub<'_>) -> Outcome {
    let [key] = parameters(stub, ["key"])?;
    stub.get_state(&key)?
        .ok_or_else(|| Failure::Usage(format!("key {key:?} not found")))
}

fn kv_delete(stub: &mut Stub<'_>) -> Outcome {
    let [key] = parameters(stub, ["key"])?;
    stub.del_state(&key)?;
    Ok(Bytes::new())
}

/// `transfer`: FastFabric's money transfer between two accounts.
#[derive(Debug)]
pub struct Transfer;

impl Chaincode for Transfer {
    fn invoke(&self, stub: &mut Stub<'_>) -> Response {
        respond(match stub.function() {
            "create" => transfer_create(stub),
            "transfer" => transfer_move(stub),
            "balance" => transfer_balance(stub),
            other => usage(format!(
                "transfer has no function {other:?} (create, transfer, balance)"
            )),
        })
    }
}

fn transfer_create(stub: &mut Stub<'_>) -> Outcome {
    let [account, initial] = parameters(stub, ["account", "balance"])?;
    let initial = amount(&initial, "balance")?;
    if stub.get_state(&account)?.is_some() {
        return usage(format!("account {account:?} exists"));
    }
    store(stub, &account, initial)?;
    Ok(Bytes::new())
}

fn transfer_move(stub: &mut Stub<'_>) -> Outcome {
    let [from, to, moved] = if stub.parameters().len() == 4 {
        let [from, to, moved, _memo] = parameters_raw_last(stub, ["from", "to", "amount", "memo"])?;
        [from, to, moved]
    } else {
        parameters(stub, ["from", "to", "amount"])?
    };
    let moved = amount(&moved, "amount")?;
    if moved < 0 {
        return usage("the amount must not be negative");
    }
    let from_balance = balance(stub, &from)?;
    let to_balance = balance(stub, &to)?;
    if from_balance < moved {
        return usage(format!(
            "account {from:?} holds {from_balance}, less than {moved}"
        ));
    }
    store(stub, &from, from_balance - moved)?;
    store(stub, &to, checked(to_balance.checked_add(moved))?)?;
    Ok(Bytes::new())
}

fn transfer_balance(stub: &mut Stub<'_>) -> Outcome {
    let [account] = parameters(stub, ["account"])?;
    Ok(Bytes::from(balance(stub, &account)?.to_string()))
}

/// `smallbank`: the Blockbench/Caliper banking workload. Each customer has
/// a checking and a savings account.
#[derive(Debug)]
pub struct SmallBank;

fn checking(id: &str) -> String {
    format!("checking_{id}")
}

fn savings(id: &str) -> String {
    format!("savings_{id}")
}

impl Chaincode for SmallBank {
    fn invoke(&self, stub: &mut Stub<'_>) -> Response {
        respond(match stub.function() {
            "create_account" => smallbank_create(stub),
            "deposit_checking" => smallbank_deposit(stub),
            "write_check" => smallbank_write_check(stub),
            "transact_savings" => smallbank_transact_savings(stub),
            "send_payment" => smallbank_send_payment(stub),
            "amalgamate" => smallbank_amalgamate(stub),
            "query" => smallbank_query(stub),
            other => usage(format!("smallbank has no function {other:?}")),
        })
    }
}

fn smallbank_create(stub: &mut Stub<'_>) -> Outcome {
    let [id, checking_initial, savings_initial] = parameters(stub, ["id", "checking", "savings"])?;
    let checking_initial = amount(&checking_initial, "checking")?;
    let savings_initial = amount(&savings_initial, "savings")?;
    if stub.get_state(&checking(&id))?.is_some() {
        return usage(format!("customer {id:?} exists"));
    }
    store(stub, &checking(&id), checking_initial)?;
    store(stub, &savings(&id), savings_initial)?;
    Ok(Bytes::new())
}

fn smallbank_deposit(stub: &mut Stub<'_>) -> Outcome {
    let [id, added] = parameters(stub, ["id", "amount"])?;
    let added = amount(&added, "amount")?;
    let current = balance(stub, &checking(&id))?;
    store(stub, &checking(&id), checked(current.checked_add(added))?)?;
    Ok(Bytes::new())
}

fn smallbank_write_check(stub: &mut Stub<'_>) -> Outcome {
    let [id, written] = parameters(stub, ["id", "amount"])?;
    let written = amount(&written, "amount")?;
    let checking_balance = balance(stub, &checking(&id))?;
    let savings_balance = balance(stub, &savings(&id))?;
    // Overdrawing the customer's total costs a penalty of 1.
    let total = checked(checking_balance.checked_add(savings_balance))?;
    let charged = if total < written {
        written.saturating_add(1)
    } else {
        written
    };
    store(
        stub,
        &checking(&id),
        checked(checking_balance.checked_sub(charged))?,
    )?;
    Ok(Bytes::new())
}

fn smallbank_transact_savings(stub: &mut Stub<'_>) -> Outcome {
    let [id, added] = parameters(stub, ["id", "amount"])?;
    let added = amount(&added, "amount")?;
    let updated = checked(balance(stub, &savings(&id))?.checked_add(added))?;
    if updated < 0 {
        return usage(format!("savings of {id:?} would go below zero"));
    }
    store(stub, &savings(&id), updated)?;
    Ok(Bytes::new())
}

fn smallbank_send_payment(stub: &mut Stub<'_>) -> Outcome {
    let [from, to, paid] = parameters(stub, ["from", "to", "amount"])?;
    let paid = amount(&paid, "amount")?;
    let from_balance = balance(stub, &checking(&from))?;
    let to_balance = balance(stub, &checking(&to))?;
    if paid < 0 || from_balance < paid {
        return usage(format!("checking of {from:?} cannot pay {paid}"));
    }
    store(stub, &checking(&from), from_balance - paid)?;
    store(stub, &checking(&to), checked(to_balance.checked_add(paid))?)?;
    Ok(Bytes::new())
}

fn smallbank_amalgamate(stub: &mut Stub<'_>) -> Outcome {
    let [from, to] = parameters(stub, ["from", "to"])?;
    let from_checking = balance(stub, &checking(&from))?;
    let from_savings = balance(stub, &savings(&from))?;
    let to_checking = balance(stub, &checking(&to))?;
    let moved = checked(from_checking.checked_add(from_savings))?;
    store(stub, &checking(&from), 0)?;
    store(stub, &savings(&from), 0)?;
    store(
        stub,
        &checking(&to),
        checked(to_checking.checked_add(moved))?,
    )?;
    Ok(Bytes::new())
}

fn smallbank_query(stub: &mut Stub<'_>) -> Outcome {
    let [id] = parameters(stub, ["id"])?;
    let checking_balance = balance(stub, &checking(&id))?;
    let savings_balance = balance(stub, &savings(&id))?;
    Ok(Bytes::from(format!(
        "{{\"checking\":{checking_balance},\"savings\":{savings_balance}}}"
    )))
}
