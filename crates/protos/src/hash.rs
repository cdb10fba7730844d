//! Fabric's hash rules: transaction IDs, block data hashes and block header
//! hashes.
//!
//! - TxID = lowercase hex of SHA-256(nonce ‖ creator), where creator is the
//!   serialized `msp.SerializedIdentity` from the signature header.
//! - Block data hash = SHA-256 over the concatenated envelope bytes in
//!   `BlockData.data`.
//! - Block header hash = SHA-256 of the ASN.1 DER encoding of
//!   `SEQUENCE { INTEGER number, OCTET STRING previous_hash,
//!   OCTET STRING data_hash }`.

use sha2::{Digest, Sha256};

use crate::common::{BlockData, BlockHeader};

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// The transaction ID Fabric derives from a signature header's nonce and
/// creator.
pub fn compute_tx_id(nonce: &[u8], creator: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(nonce);
    hasher.update(creator);
    hex::encode(hasher.finalize())
}

/// SHA-256 over the concatenation of a block's data entries.
pub fn block_data_hash(data: &BlockData) -> Hash {
    data_hash_of(data.data.iter().map(|entry| entry.as_ref()))
}

/// SHA-256 over the concatenation of the given entries.
pub fn data_hash_of<'a>(entries: impl IntoIterator<Item = &'a [u8]>) -> Hash {
    let mut hasher = Sha256::new();
    for entry in entries {
        hasher.update(entry);
    }
    hasher.finalize().into()
}

/// The DER bytes Fabric hashes (and the orderer signs) for a block header.
pub fn block_header_bytes(header: &BlockHeader) -> Vec<u8> {
    let number = der_unsigned_integer(header.number);
    let previous = der_octet_string(&header.previous_hash);
    let data = der_octet_string(&header.data_hash);
    let mut body = Vec::with_capacity(number.len() + previous.len() + data.len());
    body.extend_from_slice(&number);
    body.extend_from_slice(&previous);
    body.extend_from_slice(&data);
    der_tagged(0x30, &body)
}

/// SHA-256 of [`block_header_bytes`]: the value the next block's
/// `previous_hash` must hold.
pub fn block_header_hash(header: &BlockHeader) -> Hash {
    Sha256::digest(block_header_bytes(header)).into()
}

/// SHA-256 of arbitrary bytes.
pub fn sha256(bytes: &[u8]) -> Hash {
    Sha256::digest(bytes).into()
}

/// DER INTEGER of a non-negative value: minimal big-endian two's complement,
/// so a leading zero byte is added when the top bit would read as a sign.
fn der_unsigned_integer(value: u64) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let first_significant = bytes
        .iter()
        .position(|&b| b != 0)
        .unwrap_or(bytes.len() - 1);
    let mut content = Vec::with_capacity(9);
    if bytes[first_significant] & 0x80 != 0 {
        content.push(0);
    }
    content.extend_from_slice(&bytes[first_significant..]);
    der_tagged(0x02, &content)
}

fn der_octet_string(value: &[u8]) -> Vec<u8> {
    der_tagged(0x04, value)
}

fn der_tagged(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let len_bytes = (len as u64).to_be_bytes();
        let first = len_bytes.iter().position(|&b| b != 0).unwrap_or(7);
        out.push(0x80 | (8 - first) as u8);
        out.extend_from_slice(&len_bytes[first..]);
    }
    out.extend_from_slice(content);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_integers_are_minimal_and_unsigned() {
        assert_eq!(der_unsigned_integer(0), [0x02, 0x01, 0x00]);
        assert_eq!(der_unsigned_integer(0x7f), [0x02, 0x01, 0x7f]);
        assert_eq!(der_unsigned_integer(0x80), [0x02, 0x02, 0x00, 0x80]);
        assert_eq!(der_unsigned_integer(0x0100), [0x02, 0x02, 0x01, 0x00]);
        assert_eq!(
            der_unsigned_integer(u64::MAX),
            [
                0x02, 0x09, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
            ]
        );
    }

    #[test]
    fn der_lengths_switch_to_long_form_at_128() {
        assert_eq!(der_octet_string(&[7; 127])[..2], [0x04, 0x7f]);
        assert_eq!(der_octet_string(&[7; 128])[..3], [0x04, 0x81, 0x80]);
        assert_eq!(der_octet_string(&[7; 300])[..4], [0x04, 0x82, 0x01, 0x2c]);
    }

    #[test]
    fn genesis_header_encodes_as_fabric_does() {
        // Block 0 has no previous hash; Fabric still encodes an empty OCTET STRING.
        let header = BlockHeader {
            number: 0,
            previous_hash: Default::default(),
            data_hash: vec![0xab; 32].into(),
        };
        let der = block_header_bytes(&header);
        assert_eq!(der[..7], [0x30, 0x27, 0x02, 0x01, 0x00, 0x04, 0x00]);
        assert_eq!(der[7..9], [0x04, 0x20]);
        assert_eq!(der.len(), 2 + 3 + 2 + 34);
    }

    #[test]
    fn tx_id_is_hex_sha256_of_nonce_then_creator() {
        let expected = hex::encode(Sha256::digest(b"noncecreator"));
        assert_eq!(compute_tx_id(b"nonce", b"creator"), expected);
        assert_ne!(compute_tx_id(b"creator", b"nonce"), expected);
    }
}
