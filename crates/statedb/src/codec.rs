//! The byte layout of state in RocksDB, shared by both engines: the
//! memory engine's checkpoints and the RocksDB engine's live state use the
//! same records, and the memory engine also uses the state key as its
//! in-memory key.
//!
//! Every RocksDB key starts with a one-byte tag saying what the record is:
//!
//! - state entry: key `'s' ‖ varint(len(namespace)) ‖ namespace ‖ key`,
//!   value `varint(block_num) ‖ varint(tx_num) ‖ value`. A deleted key has
//!   no record. The length prefix keeps the encoding unambiguous whatever
//!   bytes a namespace or key contains (`"a\0b"` included), and keeps the
//!   keys of one namespace contiguous and in key order, since `String`
//!   orders by bytes.
//! - savepoint: key `'m' ‖ "savepoint"`, value `varint(block_num) ‖
//!   varint(tx_num)`: the height of the last update written. It is written
//!   in the same batch as the state it describes.
//!
//! Varints are unsigned LEB128 in their shortest form, so each height and
//! length has exactly one encoding.

use crate::{Error, Height, Result};

const STATE_TAG: u8 = b's';

/// The key of the savepoint record.
pub(crate) const SAVEPOINT_KEY: &[u8] = b"msavepoint";

/// State entries all lie in `[STATE_START, STATE_END)`.
pub(crate) const STATE_START: &[u8] = &[STATE_TAG];
pub(crate) const STATE_END: &[u8] = &[STATE_TAG + 1];

/// The prefix shared by every state key of `namespace`.
fn namespace_prefix(namespace: &str) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(1 + 2 + namespace.len());
    prefix.push(STATE_TAG);
    put_varint(&mut prefix, namespace.len() as u64);
    prefix.extend_from_slice(namespace.as_bytes());
    prefix
}

pub(crate) fn state_key(namespace: &str, key: &str) -> Vec<u8> {
    let mut encoded = namespace_prefix(namespace);
    encoded.extend_from_slice(key.as_bytes());
    encoded
}

/// The state keys of one namespace between two keys.
pub(crate) struct NamespaceRange {
    /// The length of the namespace's prefix, which every key in range has.
    pub(crate) prefix_len: usize,
    /// The first key in range.
    pub(crate) lower: Vec<u8>,
    /// The first key past the range; `None` if unbounded.
    pub(crate) upper: Option<Vec<u8>>,
}

/// The state keys of `namespace` in `[start, end)`, an empty `end` meaning
/// the end of the namespace.
pub(crate) fn namespace_range(namespace: &str, start: &str, end: &str) -> NamespaceRange {
    let prefix = namespace_prefix(namespace);
    let lower = [prefix.as_slice(), start.as_bytes()].concat();
    let upper = if end.is_empty() {
        successor(&prefix)
    } else {
        Some([prefix.as_slice(), end.as_bytes()].concat())
    };
    NamespaceRange {
        prefix_len: prefix.len(),
        lower,
        upper,
    }
}

/// The smallest byte string above every string that starts with `prefix`,
/// or `None` if there is none (`prefix` is all `0xff`).
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&byte| byte != 0xff)?;
    let mut next = prefix[..=last].to_vec();
    next[last] += 1;
    Some(next)
}

/// Splits a state key into namespace and key, checking that both are UTF-8.
pub(crate) fn decode_state_key(encoded: &[u8]) -> Result<(&str, &str)> {
    let corrupt = |reason: &str| corrupt_key(encoded, reason);
    let Some((&STATE_TAG, mut rest)) = encoded.split_first() else {
        return Err(corrupt("not a state key"));
    };
    let length = take_varint(&mut rest).ok_or_else(|| corrupt("bad namespace length"))?;
    let length = usize::try_from(length)
        .ok()
        .filter(|&length| length <= rest.len())
        .ok_or_else(|| corrupt("namespace length beyond the key"))?;
    let (namespace, key) = rest.split_at(length);
    let namespace = std::str::from_utf8(namespace).map_err(|_| corrupt("namespace not UTF-8"))?;
    let key = std::str::from_utf8(key).map_err(|_| corrupt("key not UTF-8"))?;
    Ok((namespace, key))
}

/// The key part of a state key known to start with `prefix`.
pub(crate) fn key_after_prefix(encoded: &[u8], prefix_len: usize) -> Result<String> {
    encoded
        .get(prefix_len..)
        .and_then(|key| std::str::from_utf8(key).ok())
        .map(str::to_owned)
        .ok_or_else(|| corrupt_key(encoded, "key not UTF-8"))
}

pub(crate) fn encode_value(version: Height, value: &[u8]) -> Vec<u8> {
    let mut encoded = Vec::with_capacity(4 + value.len());
    put_height(&mut encoded, version);
    encoded.extend_from_slice(value);
    encoded
}

/// Splits a state value into its version and the value bytes.
pub(crate) fn decode_value(encoded: &[u8]) -> Result<(Height, &[u8])> {
    let mut rest = encoded;
    let version = take_height(&mut rest).ok_or_else(|| Error::Corrupt {
        what: "state value".to_owned(),
        reason: "bad version".to_owned(),
    })?;
    Ok((version, rest))
}

pub(crate) fn encode_height(height: Height) -> Vec<u8> {
    let mut encoded = Vec::with_capacity(4);
    put_height(&mut encoded, height);
    encoded
}

pub(crate) fn decode_height(encoded: &[u8]) -> Result<Height> {
    let mut rest = encoded;
    take_height(&mut rest)
        .filter(|_| rest.is_empty())
        .ok_or_else(|| Error::Corrupt {
            what: "savepoint".to_owned(),
            reason: format!("not a height: {}", encoded.escape_ascii()),
        })
}

fn corrupt_key(encoded: &[u8], reason: &str) -> Error {
    Error::Corrupt {
        what: format!("key {}", encoded.escape_ascii()),
        reason: reason.to_owned(),
    }
}

fn put_height(out: &mut Vec<u8>, height: Height) {
    put_varint(out, height.block_num);
    put_varint(out, height.tx_num);
}

fn take_height(input: &mut &[u8]) -> Option<Height> {
    let block_num = take_varint(input)?;
    let tx_num = take_varint(input)?;
    Some(Height::new(block_num, tx_num))
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n & 0x7f) as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a shortest-form LEB128 varint of at most 64 bits.
fn take_varint(input: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        let bits = u64::from(byte & 0x7f);
        // The tenth byte holds only the top bit of a u64.
        if shift == 63 && bits > 1 {
            return None;
        }
        n |= bits << shift;
        if byte & 0x80 == 0 {
            // A zero final byte after the first would be a longer encoding
            // of a number that has a shorter one.
            return (byte != 0 || shift == 0).then_some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The on-disk layout is a format: these bytes may only change on
    /// purpose, with a migration.
    #[test]
    fn golden_records() {
        assert_eq!(state_key("cc", "k1"), b"s\x02cck1");
        assert_eq!(state_key("", ""), b"s\x00");
        assert_eq!(state_key("a\0b", "\0"), b"s\x03a\0b\0");
        assert_eq!(encode_value(Height::new(5, 2), b"v"), b"\x05\x02v");
        assert_eq!(encode_height(Height::new(300, 0)), b"\xac\x02\x00");
        assert_eq!(SAVEPOINT_KEY, b"msavepoint");
    }

    #[test]
    fn state_keys_round_trip_and_stay_unambiguous() {
        for (namespace, key) in [
            ("", ""),
            ("cc", "k"),
            ("a", "\0b"),
            ("a\0", "b"),
            ("ns", "ключ"),
        ] {
            assert_eq!(
                decode_state_key(&state_key(namespace, key)).unwrap(),
                (namespace, key)
            );
        }
        assert_ne!(state_key("a", "\0b"), state_key("a\0", "b"));
    }

    #[test]
    fn namespace_keys_sort_by_key_and_stay_inside_their_bounds() {
        let NamespaceRange {
            prefix_len,
            lower,
            upper,
        } = namespace_range("cc", "", "");
        let upper = upper.unwrap();
        assert_eq!(prefix_len, 4);
        let keys = ["", "\0", "a", "a\0b", "b", "\u{10ffff}"];
        for pair in keys.windows(2) {
            assert!(state_key("cc", pair[0]) < state_key("cc", pair[1]));
        }
        for key in keys {
            let encoded = state_key("cc", key);
            assert!(lower <= encoded && encoded < upper, "{key:?}");
            assert_eq!(key_after_prefix(&encoded, prefix_len).unwrap(), key);
        }
        for outside in [
            state_key("c", "cz"),
            state_key("cc\0", ""),
            state_key("cd", ""),
        ] {
            assert!(outside < lower || outside >= upper, "{outside:?}");
        }
    }

    #[test]
    fn heights_round_trip_and_reject_bad_bytes() {
        for height in [
            Height::new(0, 0),
            Height::new(127, 128),
            Height::new(u64::MAX, u64::MAX),
        ] {
            assert_eq!(decode_height(&encode_height(height)).unwrap(), height);
        }
        let bad: [&[u8]; 5] = [
            b"",
            b"\x01",                                         // tx_num missing
            b"\x01\x02\x03",                                 // trailing byte
            b"\x80\x00\x00",                                 // not the shortest form
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02\x00", // above u64::MAX
        ];
        for encoded in bad {
            assert!(
                matches!(decode_height(encoded), Err(Error::Corrupt { .. })),
                "{encoded:?}"
            );
        }
    }

    #[test]
    fn corrupt_state_keys_are_errors() {
        for encoded in [&b""[..], b"m", b"s", b"s\x05ab", b"s\x01\xff", b"s\x00\xff"] {
            assert!(decode_state_key(encoded).is_err(), "{encoded:?}");
        }
    }
}
