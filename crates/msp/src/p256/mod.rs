//! ECDSA P-256 verification with a precomputed table per public key.
//!
//! Every signature a node checks comes from a handful of keys: its
//! channel's clients, the peers that endorse, the orderers that sign
//! blocks. Verification computes u₁·G + u₂·Q; ring (like OpenSSL) has a
//! precomputed table for the base point G but must work out multiples of
//! the key Q from scratch each time, some 300 point operations of the
//! 340 a verification costs. A [`KeyTable`] precomputes Q's multiples once
//! (a comb table, see `table`), so both halves become 33 additions each,
//! and s is inverted by divsteps (`inverse`) rather than by Fermat's
//! 256 squarings. On the machines of docs/benchmarks.md a verification
//! then costs about a quarter of ring's.
//!
//! It serves verification only, over public inputs, so nothing here is
//! constant-time. [`crate::crypto`] decides which keys earn a table (those
//! used often) and keeps ring for the rest; ring also does all signing.
//! The tests check every answer against ring's, valid and forged alike.

mod field;
mod inverse;
mod point;
mod table;

use std::sync::OnceLock;

use field::{Limbs, ORDER, from_be_bytes, is_zero, less_than};
use point::{Affine, Jacobian};
use table::Table;

/// The table of the base point G, shared by every key (264 KiB, built once).
fn generator_table() -> Option<&'static Table> {
    static GENERATOR: OnceLock<Option<Table>> = OnceLock::new();
    GENERATOR
        .get_or_init(|| Table::new(&Affine::generator()))
        .as_ref()
}

/// A public key with its multiples precomputed.
pub(crate) struct KeyTable {
    key: Table,
}

impl KeyTable {
    /// The table of an uncompressed SEC1 public key point; None if the
    /// point is not on the curve.
    pub(crate) fn new(public_key_point: &[u8]) -> Option<KeyTable> {
        let point = Affine::from_uncompressed(public_key_point)?;
        generator_table()?;
        Some(KeyTable {
            key: Table::new(&point)?,
        })
    }

    /// Whether (r, s), given as big-endian magnitudes, is a valid ECDSA
    /// signature by this key over a message whose SHA-256 is `digest`.
    /// Same answer as ring for every input; the caller enforces low-S.
    pub(crate) fn verify_digest(&self, digest: &[u8; 32], r: &[u8], s: &[u8]) -> bool {
        let (Some(r), Some(s)) = (scalar(r), scalar(s)) else {
            return false;
        };
        let Some(generator) = generator_table() else {
            return false;
        };
        // e = the digest mod n; a 256-bit value is below 2n.
        let mut e = from_be_bytes(digest);
        if !less_than(&e, &ORDER.value) {
            e = ORDER.sub(&e, &ORDER.value);
        }
        // w = s⁻¹ in Montgomery form; a product of an ordinary number with
        // it comes out ordinary: u₁ = e·w, u₂ = r·w (mod n).
        let w = match inverse::invert(&ORDER, &s) {
            Some(s_inverse) => ORDER.to_montgomery(&s_inverse),
            None => ORDER.invert(&ORDER.to_montgomery(&s)),
        };
        let u1 = ORDER.mul(&e, &w);
        let u2 = ORDER.mul(&r, &w);
        let from_generator = generator.select(&u1);
        let from_key = self.key.select(&u2);
        let sum = from_key.add_to(from_generator.add_to(Jacobian::INFINITY));
        sum.x_matches(&r, &ORDER.value)
    }
}

/// A big-endian magnitude of at most 32 bytes as a scalar in [1, n − 1].
fn scalar(magnitude: &[u8]) -> Option<Limbs> {
    let padding = 32usize.checked_sub(magnitude.len())?;
    let mut bytes = [0u8; 32];
    bytes[padding..].copy_from_slice(magnitude);
    let value = from_be_bytes(&bytes);
    (!is_zero(&value) && less_than(&value, &ORDER.value)).then_some(value)
}

#[cfg(test)]
mod tests {
    use ring::rand::{SecureRandom, SystemRandom};
    use ring::signature::{
        ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair,
        UnparsedPublicKey,
    };

    use super::field::{FIELD, ZERO};
    use super::point::{batch_to_affine, curve_right_side};
    use super::*;
    use crate::crypto::{encode_der_signature, parse_der_signature};

    fn sha256(message: &[u8]) -> [u8; 32] {
        let digest = ring::digest::digest(&ring::digest::SHA256, message);
        digest.as_ref().try_into().unwrap()
    }

    fn ring_accepts(point: &[u8], message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, point)
            .verify(message, signature)
            .is_ok()
    }

    fn table_accepts(table: &KeyTable, message: &[u8], signature: &[u8]) -> bool {
        parse_der_signature(signature)
            .is_some_and(|(r, s)| table.verify_digest(&sha256(message), r, s))
    }

    fn to_be_bytes(limbs: &Limbs) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, limb) in limbs.iter().rev().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&limb.to_be_bytes());
        }
        out
    }

    fn encode_point(point: &Affine) -> Vec<u8> {
        let mut out = vec![0x04];
        out.extend(to_be_bytes(&FIELD.out_of_montgomery(&point.x)));
        out.extend(to_be_bytes(&FIELD.out_of_montgomery(&point.y)));
        out
    }

    /// Valid signatures, and every way of spoiling one, get ring's answer.
    #[test]
    fn answers_match_ring_for_genuine_and_forged_signatures() {
        let random = SystemRandom::new();
        let mut noise = [0u8; 64];
        for key_number in 0..6 {
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &random).unwrap();
            let pair =
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &random)
                    .unwrap();
            let point = pair.public_key().as_ref();
            let table = KeyTable::new(point).unwrap();
            for round in 0..40 {
                let message = format!("key {key_number} message {round}").into_bytes();
                let signature = pair.sign(&random, &message).unwrap().as_ref().to_vec();
                assert!(ring_accepts(point, &message, &signature));
                assert!(table_accepts(&table, &message, &signature));

                random.fill(&mut noise).unwrap();
                let mut forgeries = Vec::new();
                // One bit of the signature flipped (DER header, r or s).
                let mut flipped = signature.clone();
                let at = usize::from(noise[0]) % flipped.len();
                flipped[at] ^= 1 << (noise[1] % 8);
                forgeries.push((message.clone(), flipped));
                // Another message.
                forgeries.push((b"another message".to_vec(), signature.clone()));
                // Random r and s.
                let junk = encode_der_signature(&noise[..32], &noise[32..]);
                forgeries.push((message.clone(), junk));
                // r and s swapped.
                let (r, s) = parse_der_signature(&signature).unwrap();
                let mut r_bytes = [0u8; 32];
                let mut s_bytes = [0u8; 32];
                r_bytes[32 - r.len()..].copy_from_slice(r);
                s_bytes[32 - s.len()..].copy_from_slice(s);
                forgeries.push((message.clone(), encode_der_signature(&s_bytes, &r_bytes)));
                for (forged_message, forged) in forgeries {
                    assert_eq!(
                        table_accepts(&table, &forged_message, &forged),
                        ring_accepts(point, &forged_message, &forged),
                        "key {key_number} round {round}: {forged:02x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn out_of_range_scalars_are_refused() {
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &random).unwrap();
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &random)
                .unwrap();
        let table = KeyTable::new(pair.public_key().as_ref()).unwrap();
        let digest = sha256(b"message");
        let n = to_be_bytes(&ORDER.value);
        let one = [1u8];
        for (r, s) in [
            (&[0u8][..], &one[..]),
            (&one[..], &[0u8][..]),
            (&n[..], &one[..]),
            (&one[..], &n[..]),
            (&[0xffu8; 33][..], &one[..]),
        ] {
            assert!(!table.verify_digest(&digest, r, s));
        }
        assert!(KeyTable::new(&[0x04; 65]).is_none());
    }

    /// A point R whose x lies in [n, p) signs with r = x − n: verification
    /// must try r + n. Such an R turns up by chance once in 2¹²⁸
    /// signatures, so the test builds one and the key that fits it.
    #[test]
    fn an_x_coordinate_above_the_order_matches_r_plus_n() {
        // The first x ≥ n with a square root of x³ − 3x + b (p ≡ 3 mod 4,
        // so a root of a is a^((p+1)/4)).
        let mut x = ORDER.value;
        let root_exponent = [
            0x0000_0000_0000_0000,
            0x0000_0000_4000_0000,
            0x4000_0000_0000_0000,
            0x3fff_ffff_c000_0000,
        ];
        let r_point = loop {
            let x_m = FIELD.to_montgomery(&x);
            let right = curve_right_side(&x_m);
            let y = FIELD.pow(&right, &root_exponent);
            if FIELD.square(&y) == right {
                break Affine { x: x_m, y };
            }
            x = FIELD.add(&x, &[1, 0, 0, 0]);
        };
        let r = FIELD.sub(&x, &ORDER.value);
        let message = b"an unlikely signature";
        let e = from_be_bytes(&sha256(message));
        let s: Limbs = [12_345, 0, 0, 0];
        let w = ORDER.invert(&ORDER.to_montgomery(&s));
        let u1 = ORDER.mul(&e, &w);
        let u2 = ORDER.mul(&r, &w);
        // Q = u₂⁻¹·(R − u₁·G), so that u₁·G + u₂·Q = R.
        let generator = Table::new(&Affine::generator()).unwrap();
        let u1_g = batch_to_affine(&[generator.add_multiple(Jacobian::INFINITY, &u1)]).unwrap()[0];
        let difference = Jacobian::from(&r_point).add_affine(&u1_g.negate());
        let difference = batch_to_affine(&[difference]).unwrap()[0];
        let u2_inverse = ORDER.out_of_montgomery(&ORDER.invert(&ORDER.to_montgomery(&u2)));
        let q = Table::new(&difference)
            .unwrap()
            .add_multiple(Jacobian::INFINITY, &u2_inverse);
        let q = encode_point(&batch_to_affine(&[q]).unwrap()[0]);

        let signature = encode_der_signature(&to_be_bytes(&r), &to_be_bytes(&s));
        assert!(ring_accepts(&q, message, &signature));
        let table = KeyTable::new(&q).unwrap();
        assert!(table_accepts(&table, message, &signature));
        // The unreduced x is not a scalar, and r off by one does not match.
        assert!(!table.verify_digest(&sha256(message), &to_be_bytes(&x), &to_be_bytes(&s)));
        let r_plus_one = ORDER.add(&r, &[1, 0, 0, 0]);
        assert!(!table_accepts(
            &table,
            message,
            &encode_der_signature(&to_be_bytes(&r_plus_one), &to_be_bytes(&s))
        ));
        assert_ne!(r, ZERO);
    }
}
