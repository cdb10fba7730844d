//! Points of the P-256 curve y² = x³ − 3x + b over the field of p.
//!
//! Affine points are what tables store; sums are built in Jacobian
//! coordinates (x = X/Z², y = Y/Z³), which need no inversion per step.
//! Coordinates are in Montgomery form. The formulas are the textbook ones
//! for short Weierstrass curves with a = −3 (Hankerson, Menezes and
//! Vanstone, "Guide to Elliptic Curve Cryptography", 3.2.2), with the
//! exceptional cases (a point added to itself or to its negation, the
//! point at infinity) handled by branches: every input is public.

use super::field::{FIELD, Limbs, ZERO, add_limbs, from_be_bytes, is_zero, less_than};

/// The curve's constant b, in Montgomery form.
const B_MONTGOMERY: Limbs = [
    0xd89c_df62_29c4_bddf,
    0xacf0_05cd_7884_3090,
    0xe5a2_20ab_f721_2ed6,
    0xdc30_061d_0487_4834,
];

/// The base point G's coordinates, in ordinary form.
const GENERATOR_X: Limbs = [
    0xf4a1_3945_d898_c296,
    0x7703_7d81_2deb_33a0,
    0xf8bc_e6e5_63a4_40f2,
    0x6b17_d1f2_e12c_4247,
];
const GENERATOR_Y: Limbs = [
    0xcbb6_4068_37bf_51f5,
    0x2bce_3357_6b31_5ece,
    0x8ee7_eb4a_7c0f_9e16,
    0x4fe3_42e2_fe1a_7f9b,
];

/// A point other than infinity, in affine coordinates. 64 bytes, aligned
/// so that a table entry is one cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(align(64))]
pub(super) struct Affine {
    pub(super) x: Limbs,
    pub(super) y: Limbs,
}

/// A point in Jacobian coordinates; Z = 0 is the point at infinity.
#[derive(Clone, Copy, Debug)]
pub(super) struct Jacobian {
    pub(super) x: Limbs,
    pub(super) y: Limbs,
    pub(super) z: Limbs,
}

impl Affine {
    /// A filler for arrays of points; never used as a point.
    pub(super) const PLACEHOLDER: Affine = Affine { x: ZERO, y: ZERO };

    /// The base point G.
    pub(super) fn generator() -> Affine {
        Affine {
            x: FIELD.to_montgomery(&GENERATOR_X),
            y: FIELD.to_montgomery(&GENERATOR_Y),
        }
    }

    /// An uncompressed SEC1 point (`04 ‖ x ‖ y`) that lies on the curve.
    pub(super) fn from_uncompressed(encoded: &[u8]) -> Option<Affine> {
        let (&tag, coordinates) = encoded.split_first()?;
        if tag != 0x04 || coordinates.len() != 64 {
            return None;
        }
        let (x, y) = coordinates.split_at(32);
        let x = from_be_bytes(x.try_into().ok()?);
        let y = from_be_bytes(y.try_into().ok()?);
        if !less_than(&x, &FIELD.value) || !less_than(&y, &FIELD.value) {
            return None;
        }
        let point = Affine {
            x: FIELD.to_montgomery(&x),
            y: FIELD.to_montgomery(&y),
        };
        point.is_on_curve().then_some(point)
    }

    fn is_on_curve(&self) -> bool {
        FIELD.square(&self.y) == curve_right_side(&self.x)
    }

    pub(super) fn negate(&self) -> Affine {
        Affine {
            x: self.x,
            y: FIELD.negate(&self.y),
        }
    }
}

impl From<&Affine> for Jacobian {
    fn from(point: &Affine) -> Jacobian {
        Jacobian {
            x: point.x,
            y: point.y,
            z: FIELD.one(),
        }
    }
}

impl Jacobian {
    pub(super) const INFINITY: Jacobian = Jacobian {
        x: ZERO,
        y: ZERO,
        z: ZERO,
    };

    pub(super) fn is_infinity(&self) -> bool {
        is_zero(&self.z)
    }

    /// self + q for an affine q (8 multiplications, 3 squarings).
    pub(super) fn add_affine(&self, q: &Affine) -> Jacobian {
        if self.is_infinity() {
            return Jacobian::from(q);
        }
        let z_squared = FIELD.square(&self.z);
        let u = FIELD.mul(&q.x, &z_squared);
        let s = FIELD.mul(&q.y, &FIELD.mul(&z_squared, &self.z));
        let h = FIELD.sub(&u, &self.x);
        let r = FIELD.sub(&s, &self.y);
        if is_zero(&h) {
            // Same x: either the same point or its negation.
            return if is_zero(&r) {
                self.double()
            } else {
                Jacobian::INFINITY
            };
        }
        let h_squared = FIELD.square(&h);
        let h_cubed = FIELD.mul(&h_squared, &h);
        let x_h_squared = FIELD.mul(&self.x, &h_squared);
        let x = FIELD.sub(
            &FIELD.sub(&FIELD.square(&r), &h_cubed),
            &FIELD.add(&x_h_squared, &x_h_squared),
        );
        let y = FIELD.sub(
            &FIELD.mul(&r, &FIELD.sub(&x_h_squared, &x)),
            &FIELD.mul(&self.y, &h_cubed),
        );
        let z = FIELD.mul(&self.z, &h);
        Jacobian { x, y, z }
    }

    /// 2·self (3 multiplications, 5 squarings; uses a = −3).
    pub(super) fn double(&self) -> Jacobian {
        if self.is_infinity() || is_zero(&self.y) {
            return Jacobian::INFINITY;
        }
        let delta = FIELD.square(&self.z);
        let gamma = FIELD.square(&self.y);
        let beta = FIELD.mul(&self.x, &gamma);
        let product = FIELD.mul(&FIELD.sub(&self.x, &delta), &FIELD.add(&self.x, &delta));
        let alpha = FIELD.add(&FIELD.add(&product, &product), &product);
        let four_beta = FIELD.add(&FIELD.add(&beta, &beta), &FIELD.add(&beta, &beta));
        let x = FIELD.sub(&FIELD.square(&alpha), &FIELD.add(&four_beta, &four_beta));
        let z = FIELD.sub(
            &FIELD.sub(&FIELD.square(&FIELD.add(&self.y, &self.z)), &gamma),
            &delta,
        );
        let gamma_squared = FIELD.square(&gamma);
        let two = FIELD.add(&gamma_squared, &gamma_squared);
        let eight_gamma_squared = FIELD.add(&FIELD.add(&two, &two), &FIELD.add(&two, &two));
        let y = FIELD.sub(
            &FIELD.mul(&alpha, &FIELD.sub(&four_beta, &x)),
            &eight_gamma_squared,
        );
        Jacobian { x, y, z }
    }

    /// Whether the affine x of this point, x mod n, equals `r` (given in
    /// ordinary form, 0 < r < n): the last step of ECDSA verification,
    /// done as X = r·Z² without an inversion. Since n < p, an x in [n, p)
    /// also matches r = x − n, so r + n is tried when it is below p.
    pub(super) fn x_matches(&self, r: &Limbs, order: &Limbs) -> bool {
        if self.is_infinity() {
            return false;
        }
        let z_squared = FIELD.square(&self.z);
        let matches =
            |candidate: &Limbs| FIELD.mul(&FIELD.to_montgomery(candidate), &z_squared) == self.x;
        if matches(r) {
            return true;
        }
        let (shifted, carry) = add_limbs(r, order);
        carry == 0 && less_than(&shifted, &FIELD.value) && matches(&shifted)
    }
}

/// x³ − 3x + b for x in Montgomery form: y² of the curve's points with
/// that x.
pub(super) fn curve_right_side(x: &Limbs) -> Limbs {
    let x_cubed = FIELD.mul(&FIELD.square(x), x);
    let three_x = FIELD.add(&FIELD.add(x, x), x);
    FIELD.add(&FIELD.sub(&x_cubed, &three_x), &B_MONTGOMERY)
}

/// The affine forms of `points` with one field inversion for all of them
/// (Montgomery's trick), or None if any is the point at infinity.
pub(super) fn batch_to_affine(points: &[Jacobian]) -> Option<Vec<Affine>> {
    if points.iter().any(Jacobian::is_infinity) {
        return None;
    }
    // prefix[i] = z₀·z₁·…·zᵢ
    let mut prefix = Vec::with_capacity(points.len());
    let mut running = FIELD.one();
    for point in points {
        running = FIELD.mul(&running, &point.z);
        prefix.push(running);
    }
    let mut inverse = FIELD.invert(&running);
    let mut affine = vec![Affine::PLACEHOLDER; points.len()];
    for i in (0..points.len()).rev() {
        // inverse = (z₀·…·zᵢ)⁻¹, so zᵢ⁻¹ = inverse·(z₀·…·zᵢ₋₁).
        let z_inverse = match i {
            0 => inverse,
            _ => FIELD.mul(&inverse, &prefix[i - 1]),
        };
        inverse = FIELD.mul(&inverse, &points[i].z);
        let z_inverse_squared = FIELD.square(&z_inverse);
        affine[i] = Affine {
            x: FIELD.mul(&points[i].x, &z_inverse_squared),
            y: FIELD.mul(&points[i].y, &FIELD.mul(&z_inverse_squared, &z_inverse)),
        };
    }
    Some(affine)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to_affine(point: &Jacobian) -> Affine {
        batch_to_affine(std::slice::from_ref(point)).unwrap()[0]
    }

    #[test]
    fn the_generator_is_on_the_curve_and_sums_stay_on_it() {
        let g = Affine::generator();
        assert!(g.is_on_curve());
        let mut sum = Jacobian::from(&g);
        for _ in 0..10 {
            sum = sum.add_affine(&g);
            assert!(to_affine(&sum).is_on_curve());
        }
        assert!(to_affine(&sum.double()).is_on_curve());
    }

    #[test]
    fn adding_agrees_with_doubling() {
        let g = Affine::generator();
        let doubled = Jacobian::from(&g).double();
        // G + G through the addition formula takes its doubling branch.
        assert_eq!(
            to_affine(&Jacobian::from(&g).add_affine(&g)),
            to_affine(&doubled)
        );
        // 2G + G = 3G = G + 2G computed the other way round.
        let three_a = doubled.add_affine(&g);
        let three_b = Jacobian::from(&to_affine(&doubled)).add_affine(&g);
        assert_eq!(to_affine(&three_a), to_affine(&three_b));
        // 4G as 2·(2G) and as 3G + G.
        assert_eq!(
            to_affine(&doubled.double()),
            to_affine(&three_a.add_affine(&g))
        );
    }

    #[test]
    fn a_point_plus_its_negation_is_infinity() {
        let g = Affine::generator();
        assert!(Jacobian::from(&g).add_affine(&g.negate()).is_infinity());
        assert!(Jacobian::INFINITY.double().is_infinity());
        assert_eq!(to_affine(&Jacobian::INFINITY.add_affine(&g)), g);
        assert!(batch_to_affine(&[Jacobian::INFINITY]).is_none());
    }

    #[test]
    fn points_off_the_curve_or_badly_encoded_are_refused() {
        let g = Affine::generator();
        let mut encoded = vec![0x04];
        for coordinate in [GENERATOR_X, GENERATOR_Y] {
            for limb in coordinate.iter().rev() {
                encoded.extend_from_slice(&limb.to_be_bytes());
            }
        }
        assert_eq!(Affine::from_uncompressed(&encoded), Some(g));
        let mut moved = encoded.clone();
        moved[64] ^= 1;
        assert_eq!(Affine::from_uncompressed(&moved), None);
        let mut compressed = encoded.clone();
        compressed[0] = 0x02;
        assert_eq!(Affine::from_uncompressed(&compressed), None);
        assert_eq!(Affine::from_uncompressed(&encoded[..64]), None);
        let mut too_large = encoded.clone();
        too_large[1..33].fill(0xff);
        assert_eq!(Affine::from_uncompressed(&too_large), None);
    }
}
