//! ECDSA P-256 with SHA-256, as Fabric uses it: DER-encoded signatures whose
//! S value is in the lower half of the group order.
//!
//! ECDSA signatures are malleable: if (r, s) verifies, so does (r, n − s).
//! Fabric closes that hole by accepting only the low-S form, so a
//! transaction's bytes (and its hash) cannot be altered by a third party
//! without invalidating it. Verification here rejects high-S signatures
//! before doing any curve arithmetic, and [`normalize_low_s`] rewrites a
//! signature into low-S form for signers.
//!
//! [`verify`] takes any key and uses ring. A key a node verifies with over
//! and over (its channel's clients, peers and orderers) is held as a
//! [`FrequentKey`], which after [`TABLE_AFTER_USES`] verifications earns a
//! precomputed table ([`crate::p256`]) that makes each later verification
//! cost about a quarter of ring's.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use ring::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};

use crate::SignatureError;
use crate::p256::KeyTable;

/// Verifications with a key before it gets a table. Building one takes
/// about 2.3 ms on the verifying thread, what some 60 verifications save,
/// so a key used only a few times never pays for one.
pub const TABLE_AFTER_USES: u32 = 64;

/// A key that did not get a table because [`MAX_TABLES`] were in use tries
/// again after this many more verifications.
const TABLE_RETRY_USES: u32 = 4096;

/// Tables alive at once in this process (264 KiB each, so at most 16.5
/// MiB), whatever the number of identities cached: enough for the
/// orderers, peers and busiest clients of a node's channels. A table lives
/// as long as an identity with its key stays in an identity cache.
const MAX_TABLES: usize = 64;

/// The live tables by key point. A key has one table in the process,
/// whichever channels and configurations its identities belong to, so a
/// new channel config (a new MSP manager, new identities) finds its keys'
/// tables ready instead of building them again.
fn tables() -> &'static Mutex<HashMap<Vec<u8>, Weak<KeyTable>>> {
    static TABLES: OnceLock<Mutex<HashMap<Vec<u8>, Weak<KeyTable>>>> = OnceLock::new();
    TABLES.get_or_init(Mutex::default)
}

/// The table of `point`: a live one, or, if `build`, a new one when fewer
/// than [`MAX_TABLES`] are alive and the point is on the curve.
fn shared_table(point: &[u8], build: bool) -> Option<Arc<KeyTable>> {
    let mut tables = tables().lock();
    if let Some(table) = tables.get(point).and_then(Weak::upgrade) {
        return Some(table);
    }
    if !build {
        return None;
    }
    tables.retain(|_, table| table.strong_count() > 0);
    if tables.len() >= MAX_TABLES {
        return None;
    }
    // Built under the lock: two identities of one key (two channels)
    // reaching the threshold together build it once.
    let table = Arc::new(KeyTable::new(point)?);
    tables.insert(point.to_vec(), Arc::downgrade(&table));
    Some(table)
}

/// The order n of the P-256 group, big-endian.
const P256_ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// ⌊n / 2⌋ for P-256: the largest S value Fabric accepts.
const P256_HALF_ORDER: [u8; 32] = [
    0x7f, 0xff, 0xff, 0xff, 0x80, 0x00, 0x00, 0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xde, 0x73, 0x7d, 0x56, 0xd3, 0x8b, 0xcf, 0x42, 0x79, 0xdc, 0xe5, 0x61, 0x7e, 0x31, 0x92, 0xa8,
];

/// Verifies a DER ECDSA P-256/SHA-256 signature over `message` with an
/// uncompressed SEC1 public key point. High-S signatures are rejected.
pub fn verify(
    public_key_point: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<(), SignatureError> {
    let (_, s) = parse_der_signature(signature).ok_or(SignatureError::Malformed)?;
    if !is_low_s(s) {
        return Err(SignatureError::HighS);
    }
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, public_key_point)
        .verify(message, signature)
        .map_err(|_| SignatureError::Invalid)
}

/// A public key (an uncompressed SEC1 P-256 point) that verifies many
/// signatures, with the same answers as [`verify`].
pub(crate) struct FrequentKey {
    point: Vec<u8>,
    uses: AtomicU32,
    table: OnceLock<Arc<KeyTable>>,
}

impl FrequentKey {
    pub(crate) fn new(point: Vec<u8>) -> Self {
        Self {
            point,
            uses: AtomicU32::new(0),
            table: OnceLock::new(),
        }
    }

    /// Verifies a DER ECDSA P-256/SHA-256 signature over `message`; high-S
    /// signatures are rejected.
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), SignatureError> {
        let Some(table) = self.table() else {
            return verify(&self.point, message, signature);
        };
        let (r, s) = parse_der_signature(signature).ok_or(SignatureError::Malformed)?;
        if !is_low_s(s) {
            return Err(SignatureError::HighS);
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, message);
        let digest: &[u8; 32] = digest
            .as_ref()
            .try_into()
            .map_err(|_| SignatureError::Invalid)?;
        if table.verify_digest(digest, r, s) {
            Ok(())
        } else {
            Err(SignatureError::Invalid)
        }
    }

    /// Whether the key verifies through a precomputed table now.
    pub(crate) fn has_table(&self) -> bool {
        self.table.get().is_some()
    }

    /// The key's table: held already; on the first use, the one another
    /// identity with this key built; built once the key has been used
    /// often enough; or none (not yet, or too many tables alive).
    fn table(&self) -> Option<&KeyTable> {
        if let Some(table) = self.table.get() {
            return Some(table);
        }
        let uses = self.uses.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let build = uses == TABLE_AFTER_USES || uses.is_multiple_of(TABLE_RETRY_USES);
        if uses != 1 && !build {
            return None;
        }
        // A point that is not on the curve gets no table; ring refuses its
        // signatures as before.
        let table = shared_table(&self.point, build)?;
        Some(self.table.get_or_init(|| table))
    }
}

impl fmt::Debug for FrequentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrequentKey")
            .field("point", &hex::encode(&self.point))
            .field("uses", &self.uses.load(Ordering::Relaxed))
            .field("has_table", &self.has_table())
            .finish()
    }
}

/// Rewrites a DER ECDSA P-256 signature so that S is in the lower half of the
/// group order. A signature already in low-S form is returned unchanged.
pub fn normalize_low_s(signature: &[u8]) -> Result<Vec<u8>, SignatureError> {
    let (r, s) = parse_der_signature(signature).ok_or(SignatureError::Malformed)?;
    if is_low_s(s) {
        return Ok(signature.to_vec());
    }
    let s_low = sub_from_order(s).ok_or(SignatureError::Malformed)?;
    Ok(encode_der_signature(r, &s_low))
}

/// The other signature of the pair (r, s) and (r, n − s): for a signature
/// a signer made (low-S), its high-S twin, which verifies mathematically
/// but which Fabric refuses. For tests of that refusal.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn mirrored_s(signature: &[u8]) -> Result<Vec<u8>, SignatureError> {
    let (r, s) = parse_der_signature(signature).ok_or(SignatureError::Malformed)?;
    let mirrored = sub_from_order(s).ok_or(SignatureError::Malformed)?;
    Ok(encode_der_signature(r, &mirrored))
}

/// Whether the S value of a DER signature is in low-S form.
pub fn has_low_s(signature: &[u8]) -> Result<bool, SignatureError> {
    let (_, s) = parse_der_signature(signature).ok_or(SignatureError::Malformed)?;
    Ok(is_low_s(s))
}

/// Splits `SEQUENCE { INTEGER r, INTEGER s }` into the magnitudes of r and s
/// (big-endian, without sign padding). Only the strict DER form is accepted.
pub(crate) fn parse_der_signature(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (tag, body, rest) = read_tlv(der)?;
    if tag != 0x30 || !rest.is_empty() {
        return None;
    }
    let (r, body) = read_positive_integer(body)?;
    let (s, body) = read_positive_integer(body)?;
    body.is_empty().then_some((r, s))
}

fn read_positive_integer(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (tag, value, rest) = read_tlv(input)?;
    if tag != 0x02 || value.is_empty() || value[0] & 0x80 != 0 {
        return None;
    }
    // DER forbids a leading zero unless the next byte would read as negative.
    let magnitude = if value[0] == 0 {
        if value.len() == 1 {
            return None;
        }
        if value[1] & 0x80 == 0 {
            return None;
        }
        &value[1..]
    } else {
        value
    };
    (magnitude.len() <= 32).then_some((magnitude, rest))
}

/// Reads one DER tag-length-value with a short or one/two-byte long length.
/// A long form where a shorter one would do is not DER and is refused, as
/// ring and Go's asn1 refuse it: a signature must be read the same way by
/// every verifier, or peers that verify differently would disagree.
fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first_len, rest) = rest.split_first()?;
    let (len, rest) = match first_len {
        0..=0x7f => (usize::from(first_len), rest),
        0x81 => {
            let (&len, rest) = rest.split_first()?;
            (len >= 0x80).then_some((usize::from(len), rest))?
        }
        0x82 => {
            let (bytes, rest) = rest.split_at_checked(2)?;
            let len = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
            (len >= 0x100).then_some((len, rest))?
        }
        _ => return None,
    };
    let (value, rest) = rest.split_at_checked(len)?;
    Some((tag, value, rest))
}

fn is_low_s(s: &[u8]) -> bool {
    compare_magnitudes(s, &P256_HALF_ORDER) != std::cmp::Ordering::Greater
}

fn compare_magnitudes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let a = strip_leading_zeros(a);
    let b = strip_leading_zeros(b);
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn strip_leading_zeros(bytes: &[u8]) -> &[u8] {
    let first = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    &bytes[first..]
}

/// n − s for 0 < s < n, as a 32-byte big-endian value.
fn sub_from_order(s: &[u8]) -> Option<[u8; 32]> {
    if s.len() > 32 || compare_magnitudes(s, &P256_ORDER) != std::cmp::Ordering::Less {
        return None;
    }
    let mut padded = [0u8; 32];
    padded[32 - s.len()..].copy_from_slice(s);
    let mut out = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let mut digit = i16::from(P256_ORDER[i]) - i16::from(padded[i]) - borrow;
        borrow = i16::from(digit < 0);
        if digit < 0 {
            digit += 256;
        }
        out[i] = u8::try_from(digit).ok()?;
    }
    Some(out)
}

pub(crate) fn encode_der_signature(r: &[u8], s: &[u8]) -> Vec<u8> {
    let r = encode_der_integer(r);
    let s = encode_der_integer(s);
    let mut out = Vec::with_capacity(2 + r.len() + s.len());
    out.push(0x30);
    // Two integers of at most 33 bytes each: the length always fits one byte.
    out.push(u8::try_from(r.len() + s.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(&r);
    out.extend_from_slice(&s);
    out
}

fn encode_der_integer(magnitude: &[u8]) -> Vec<u8> {
    let magnitude = strip_leading_zeros(magnitude);
    let needs_pad = magnitude.first().is_none_or(|&b| b & 0x80 != 0);
    let len = magnitude.len() + usize::from(needs_pad);
    let mut out = Vec::with_capacity(2 + len);
    out.push(0x02);
    out.push(u8::try_from(len).unwrap_or(u8::MAX));
    if needs_pad {
        out.push(0);
    }
    out.extend_from_slice(magnitude);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_order_is_half_of_order() {
        // n is odd, so 2 * half + 1 == n.
        let mut doubled = [0u8; 32];
        let mut carry = 1u16;
        for i in (0..32).rev() {
            let v = u16::from(P256_HALF_ORDER[i]) * 2 + carry;
            doubled[i] = (v & 0xff) as u8;
            carry = v >> 8;
        }
        assert_eq!(carry, 0);
        assert_eq!(doubled, P256_ORDER);
    }

    #[test]
    fn high_s_is_flipped_and_low_s_is_kept() {
        let r = [0x11u8; 32];
        let high_s = sub_from_order(&[0x05]).unwrap();
        let signature = encode_der_signature(&r, &high_s);
        assert_eq!(has_low_s(&signature), Ok(false));
        let normalized = normalize_low_s(&signature).unwrap();
        assert_eq!(
            parse_der_signature(&normalized).unwrap(),
            (&r[..], &[0x05u8][..])
        );
        assert_eq!(normalize_low_s(&normalized).unwrap(), normalized);
    }

    #[test]
    fn non_der_signatures_are_malformed() {
        let good = encode_der_signature(&[0x01; 32], &[0x02; 32]);
        assert!(parse_der_signature(&good).is_some());
        let mut trailing = good.clone();
        trailing.push(0);
        for bad in [
            &[][..],
            &[0x30, 0x00],
            &good[..good.len() - 1],
            &trailing[..],
        ] {
            assert_eq!(has_low_s(bad), Err(SignatureError::Malformed), "{bad:02x?}");
        }
        // A redundant leading zero is not DER.
        let padded = [0x30, 0x07, 0x02, 0x02, 0x00, 0x01, 0x02, 0x01, 0x01];
        assert_eq!(has_low_s(&padded), Err(SignatureError::Malformed));
        // Nor is a long-form length where the short form fits.
        let mut long_form = vec![0x30, 0x81, good[1]];
        long_form.extend_from_slice(&good[2..]);
        assert_eq!(has_low_s(&long_form), Err(SignatureError::Malformed));
    }
}
