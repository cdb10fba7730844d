//! Modular inversion by Bernstein and Yang's divsteps ("Fast
//! constant-time gcd computation and modular inversion", 2019), in the
//! variable-time form with batches of 62 steps that Wuille describes for
//! libsecp256k1's write-up of the method.
//!
//! Fermat's little theorem inverts with 256 squarings and some 70
//! multiplications; a third of a table verification went there. Divsteps
//! shrink (f, g) = (m, x) toward (±1, 0) while tracking d and e with
//! f ≡ d·x and g ≡ e·x (mod m), so the inverse falls out as ±d. Each
//! batch decides 62 steps from the low 64 bits of f and g alone, as a 2×2
//! matrix scaled by 2⁶², and applies it to the full numbers once; a
//! 256-bit input takes about ten batches.
//!
//! Inputs are public (signatures), so the step count may depend on them.

use super::field::{Limbs, Modulus};

/// Steps per batch: the matrix entries stay within ±2⁶².
const BATCH: u32 = 62;
const BATCH_MASK: u64 = (1 << BATCH) - 1;
/// More batches than any input needs (Bernstein and Yang bound 256-bit
/// inputs by 590 steps, ten batches); past it the caller falls back.
const BATCHES_MAX: usize = 24;

/// −1/f mod 16 for odd f, indexed by (f mod 16) / 2.
const NEGATED_INVERSES_MOD_16: [u64; 8] = [15, 5, 3, 9, 7, 13, 11, 1];

/// x⁻¹ mod `modulus` for 0 < x < modulus (ordinary form), or None if the
/// steps did not end within [`BATCHES_MAX`] batches (x shares a factor
/// with the modulus, which a prime modulus rules out).
pub(super) fn invert(modulus: &Modulus, x: &Limbs) -> Option<Limbs> {
    let m = Signed::from_limbs(&modulus.value);
    // m⁻¹ mod 2⁶² from −m⁻¹ mod 2⁶⁴.
    let m_inverse = modulus.neg_inverse.wrapping_neg() & BATCH_MASK;
    let mut eta: i64 = -1;
    let (mut f, mut g) = (m, Signed::from_limbs(x));
    let (mut d, mut e) = (Signed::ZERO, Signed::ONE);
    for _ in 0..BATCHES_MAX {
        let (next_eta, matrix) = divsteps(eta, f.low(), g.low());
        eta = next_eta;
        (d, e) = matrix.apply_modular(&d, &e, &m, m_inverse);
        (f, g) = matrix.apply(&f, &g);
        if g.is_zero() {
            // f = ±1 (the gcd); d is in (−2m, m): bring ±d into [0, m).
            let mut inverse = d;
            if inverse.is_negative() {
                inverse = inverse.add(&m);
            }
            if f.is_negative() {
                inverse = inverse.negate();
            }
            if inverse.is_negative() {
                inverse = inverse.add(&m);
            }
            return inverse.to_limbs();
        }
    }
    None
}

/// The transition matrix of a batch, entries scaled by 2⁶².
#[derive(Clone, Copy)]
struct Matrix {
    u: i64,
    v: i64,
    q: i64,
    r: i64,
}

/// BATCH divsteps on the low bits of f (odd) and g, starting from `eta`
/// (−δ in the paper's terms). Returns the new eta and the matrix.
fn divsteps(mut eta: i64, f_low: u64, g_low: u64) -> (i64, Matrix) {
    let (mut u, mut v, mut q, mut r) = (1u64, 0u64, 0u64, 1u64);
    let (mut f, mut g) = (f_low, g_low);
    let mut left = BATCH;
    loop {
        // Skip the zero bits of g at once: each is a halving step.
        let zeros = (g | (u64::MAX << left)).trailing_zeros();
        g >>= zeros;
        u <<= zeros;
        v <<= zeros;
        eta -= i64::from(zeros);
        left -= zeros;
        if left == 0 {
            break;
        }
        // g is odd now.
        if eta < 0 {
            eta = -eta;
            (f, g) = (g, f.wrapping_neg());
            (u, q) = (q, u.wrapping_neg());
            (v, r) = (r, v.wrapping_neg());
        }
        // Add the multiple of f that clears as many low bits of g as eta
        // and the steps left allow, at most four.
        let limit = (eta + 1).min(i64::from(left)).min(4);
        let mask = (1u64 << limit) - 1;
        let w = g.wrapping_mul(NEGATED_INVERSES_MOD_16[((f & 15) >> 1) as usize]) & mask;
        g = g.wrapping_add(f.wrapping_mul(w));
        q = q.wrapping_add(u.wrapping_mul(w));
        r = r.wrapping_add(v.wrapping_mul(w));
    }
    // The entries are within ±2⁶², so reading them as i64 is exact.
    let matrix = Matrix {
        u: u as i64,
        v: v as i64,
        q: q as i64,
        r: r as i64,
    };
    (eta, matrix)
}

impl Matrix {
    /// (u·f + v·g, q·f + r·g) / 2⁶²; the sums are exact multiples.
    fn apply(&self, f: &Signed, g: &Signed) -> (Signed, Signed) {
        let new_f = f.times(self.u).add(&g.times(self.v));
        let new_g = f.times(self.q).add(&g.times(self.r));
        (new_f.shift_right_batch(), new_g.shift_right_batch())
    }

    /// (u·d + v·e, q·d + r·e) / 2⁶² modulo m, each made divisible by 2⁶²
    /// by adding a multiple of m; d and e stay in (−2m, m).
    fn apply_modular(
        &self,
        d: &Signed,
        e: &Signed,
        m: &Signed,
        m_inverse: u64,
    ) -> (Signed, Signed) {
        let (d_negative, e_negative) = (d.is_negative(), e.is_negative());
        let correction = |a: i64, b: i64| -> i64 {
            let mut multiple = 0i64;
            if d_negative {
                multiple += a;
            }
            if e_negative {
                multiple += b;
            }
            let low = (a as u64)
                .wrapping_mul(d.low())
                .wrapping_add((b as u64).wrapping_mul(e.low()));
            let fix = m_inverse.wrapping_mul(low).wrapping_add(multiple as u64) & BATCH_MASK;
            // fix < 2⁶², so the cast is exact.
            multiple - fix as i64
        };
        let multiple_d = correction(self.u, self.v);
        let multiple_e = correction(self.q, self.r);
        let new_d = d
            .times(self.u)
            .add(&e.times(self.v))
            .add(&m.times(multiple_d));
        let new_e = d
            .times(self.q)
            .add(&e.times(self.r))
            .add(&m.times(multiple_e));
        (new_d.shift_right_batch(), new_e.shift_right_batch())
    }
}

/// A signed 384-bit number in two's complement, least significant limb
/// first: room for a 257-bit value times a 63-bit one, plus another such.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Signed([u64; 6]);

impl Signed {
    const ZERO: Signed = Signed([0; 6]);
    const ONE: Signed = Signed([1, 0, 0, 0, 0, 0]);

    fn from_limbs(value: &Limbs) -> Signed {
        Signed([value[0], value[1], value[2], value[3], 0, 0])
    }

    /// The value as four limbs, if it is in [0, 2²⁵⁶).
    fn to_limbs(self) -> Option<Limbs> {
        let [a, b, c, d, high, top] = self.0;
        (high == 0 && top == 0).then_some([a, b, c, d])
    }

    fn low(&self) -> u64 {
        self.0[0]
    }

    fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }

    fn is_negative(&self) -> bool {
        self.0[5] >> 63 == 1
    }

    fn add(&self, other: &Signed) -> Signed {
        let mut out = [0u64; 6];
        let mut carry = false;
        for (i, slot) in out.iter_mut().enumerate() {
            let (sum, carry1) = self.0[i].overflowing_add(other.0[i]);
            let (sum, carry2) = sum.overflowing_add(u64::from(carry));
            *slot = sum;
            carry = carry1 | carry2;
        }
        Signed(out)
    }

    fn negate(&self) -> Signed {
        let mut inverted = [0u64; 6];
        for (slot, limb) in inverted.iter_mut().zip(self.0) {
            *slot = !limb;
        }
        Signed(inverted).add(&Signed::ONE)
    }

    /// self · k, for |self| < 2²⁵⁸ and |k| ≤ 2⁶³.
    fn times(&self, k: i64) -> Signed {
        let magnitude = if self.is_negative() {
            self.negate()
        } else {
            *self
        };
        let factor = k.unsigned_abs();
        let mut out = [0u64; 6];
        let mut carry = 0u128;
        for (slot, limb) in out.iter_mut().zip(magnitude.0) {
            let wide = u128::from(limb) * u128::from(factor) + carry;
            *slot = wide as u64;
            carry = wide >> 64;
        }
        let product = Signed(out);
        if self.is_negative() != (k < 0) {
            product.negate()
        } else {
            product
        }
    }

    /// self / 2⁶², rounding toward −∞ (exact for the multiples it gets).
    fn shift_right_batch(&self) -> Signed {
        let sign_extension = if self.is_negative() { u64::MAX } else { 0 };
        let mut out = [0u64; 6];
        for (i, slot) in out.iter_mut().enumerate() {
            let high = self.0.get(i + 1).copied().unwrap_or(sign_extension);
            *slot = (self.0[i] >> BATCH) | (high << (64 - BATCH));
        }
        Signed(out)
    }
}

#[cfg(test)]
mod tests {
    use ring::rand::{SecureRandom, SystemRandom};

    use super::super::field::{FIELD, ORDER, ZERO, less_than};
    use super::*;

    fn by_fermat(modulus: &Modulus, x: &Limbs) -> Limbs {
        let inverse = modulus.invert(&modulus.to_montgomery(x));
        modulus.out_of_montgomery(&inverse)
    }

    #[test]
    fn inverses_match_fermat_for_random_and_edge_values() {
        let random = SystemRandom::new();
        for modulus in [&ORDER, &FIELD] {
            let mut values: Vec<Limbs> = vec![
                [1, 0, 0, 0],
                [2, 0, 0, 0],
                [3, 0, 0, 0],
                modulus.sub(&modulus.value, &[1, 0, 0, 0]),
                [0, 0, 0, 1 << 63],
                [u64::MAX, u64::MAX, 0, 0],
            ];
            for _ in 0..2000 {
                let mut bytes = [0u8; 32];
                random.fill(&mut bytes).unwrap();
                let value = super::super::field::from_be_bytes(&bytes);
                if less_than(&value, &modulus.value) && value != ZERO {
                    values.push(value);
                }
            }
            for x in values {
                let inverse = invert(modulus, &x).unwrap();
                assert_eq!(inverse, by_fermat(modulus, &x), "{x:x?}");
            }
        }
    }

    #[test]
    fn signed_arithmetic_round_trips() {
        let five = Signed::from_limbs(&[5, 0, 0, 0]);
        let minus_five = five.negate();
        assert!(minus_five.is_negative());
        assert_eq!(minus_five.add(&five), Signed::ZERO);
        assert_eq!(five.times(-3), Signed::from_limbs(&[15, 0, 0, 0]).negate());
        assert_eq!(minus_five.times(-3), Signed::from_limbs(&[15, 0, 0, 0]));
        // 2²⁵⁴ / 2⁶² = 2¹⁹², either sign.
        let big = Signed::from_limbs(&[0, 0, 0, 1 << 62]);
        assert_eq!(big.shift_right_batch(), Signed::from_limbs(&[0, 0, 0, 1]));
        assert_eq!(
            big.negate().shift_right_batch(),
            Signed::from_limbs(&[0, 0, 0, 1]).negate()
        );
    }
}
