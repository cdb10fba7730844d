//! Fixed-base comb tables: k·P as a sum of precomputed points, without a
//! single doubling.
//!
//! The scalar k is written in signed digits of WINDOW bits,
//! k = Σ dᵢ·2^(WINDOW·i) with |dᵢ| ≤ 2^(WINDOW−1), and the table holds
//! d·2^(WINDOW·i)·P for every position i and every d from 1 to
//! 2^(WINDOW−1) (a negative digit takes the entry's negation). k·P is then
//! one mixed addition per position: 33 for a 256-bit scalar with 8-bit
//! windows, against some 300 additions and doublings for a point seen for
//! the first time.

use super::field::Limbs;
use super::point::{Affine, Jacobian, batch_to_affine};

const WINDOW: usize = 8;
/// Windows covering 256 bits plus the carry of the last signed digit.
const POSITIONS: usize = 256 / WINDOW + 1;
/// Entries per position: the digits 1 ..= 2^(WINDOW−1).
const PER_POSITION: usize = 1 << (WINDOW - 1);

/// The multiples of one point, POSITIONS × PER_POSITION affine points
/// (264 KiB with 8-bit windows; 7-bit windows would take 148 KiB and
/// about 10% longer per verification, docs/benchmarks.md).
pub(super) struct Table {
    points: Box<[Affine]>,
}

impl Table {
    /// The table of `base`. None only if a multiple is the point at
    /// infinity, which no point of the prime-order group yields.
    pub(super) fn new(base: &Affine) -> Option<Table> {
        let mut position_bases = Vec::with_capacity(POSITIONS);
        let mut running = Jacobian::from(base);
        for _ in 0..POSITIONS {
            position_bases.push(running);
            for _ in 0..WINDOW {
                running = running.double();
            }
        }
        let position_bases = batch_to_affine(&position_bases)?;
        let mut multiples = Vec::with_capacity(POSITIONS * PER_POSITION);
        for position_base in &position_bases {
            let mut multiple = Jacobian::from(position_base);
            multiples.push(multiple);
            for _ in 1..PER_POSITION {
                multiple = multiple.add_affine(position_base);
                multiples.push(multiple);
            }
        }
        Some(Table {
            points: batch_to_affine(&multiples)?.into_boxed_slice(),
        })
    }

    /// sum + k·P, for the P of this table and k < 2²⁵⁶.
    #[cfg(test)]
    pub(super) fn add_multiple(&self, sum: Jacobian, k: &Limbs) -> Jacobian {
        self.select(k).add_to(sum)
    }

    /// The entries whose sum is k·P (negated where a digit is negative),
    /// for k < 2²⁵⁶. They are copied out in one pass before any is added:
    /// a table that went cold between transactions then costs cache misses
    /// that overlap, instead of one miss waiting behind each addition.
    pub(super) fn select(&self, k: &Limbs) -> Selection {
        let mut selection = Selection {
            points: [Affine::PLACEHOLDER; POSITIONS],
            len: 0,
        };
        let mut carry = 0u64;
        for (position, entries) in self.points.chunks_exact(PER_POSITION).enumerate() {
            let value = window(k, position * WINDOW) + carry;
            let half = PER_POSITION as u64;
            let (magnitude, negative) = if value > half {
                carry = 1;
                ((1u64 << WINDOW) - value, true)
            } else {
                carry = 0;
                (value, false)
            };
            // 1 ≤ magnitude ≤ PER_POSITION here, so the index is in range.
            if let Some(entry) = magnitude
                .checked_sub(1)
                .and_then(|index| entries.get(usize::try_from(index).ok()?))
                && let Some(slot) = selection.points.get_mut(selection.len)
            {
                *slot = *entry;
                if negative {
                    *slot = slot.negate();
                }
                selection.len += 1;
            }
        }
        selection
    }
}

/// Table entries picked for one scalar, at most one per position.
pub(super) struct Selection {
    points: [Affine; POSITIONS],
    len: usize,
}

impl Selection {
    /// sum + the selected points.
    pub(super) fn add_to(&self, sum: Jacobian) -> Jacobian {
        self.points
            .iter()
            .take(self.len)
            .fold(sum, |sum, point| sum.add_affine(point))
    }
}

/// WINDOW bits of k starting at bit `offset` (bits past 255 read as zero).
fn window(k: &Limbs, offset: usize) -> u64 {
    let limb = offset / 64;
    let shift = offset % 64;
    let Some(&low) = k.get(limb) else {
        return 0;
    };
    let mut bits = low >> shift;
    if shift + WINDOW > 64
        && let Some(&high) = k.get(limb + 1)
    {
        bits |= high << (64 - shift);
    }
    bits & ((1 << WINDOW) - 1)
}

#[cfg(test)]
mod tests {
    use super::super::field::{FIELD, ORDER};
    use super::*;

    fn affine(point: &Jacobian) -> Affine {
        batch_to_affine(std::slice::from_ref(point)).unwrap()[0]
    }

    /// k·P by double-and-add, the slow way the table must agree with.
    fn multiply_slowly(point: &Affine, k: &Limbs) -> Jacobian {
        let mut sum = Jacobian::INFINITY;
        for bit in (0..256).rev() {
            sum = sum.double();
            if (k[bit / 64] >> (bit % 64)) & 1 == 1 {
                sum = sum.add_affine(point);
            }
        }
        sum
    }

    #[test]
    fn table_products_match_double_and_add() {
        let g = Affine::generator();
        let table = Table::new(&g).unwrap();
        let order_minus_one = FIELD.sub(&ORDER.value, &[1, 0, 0, 0]);
        let scalars: [Limbs; 5] = [
            [1, 0, 0, 0],
            [0x7f, 0x80, 0x3f, 0xffff_ffff_ffff_ffff],
            [
                0xdead_beef,
                0x0123_4567_89ab_cdef,
                0xfedc_ba98_7654_3210,
                0x5555,
            ],
            order_minus_one,
            [0xffff_ffff_ffff_ffff; 4],
        ];
        for k in scalars {
            let fast = table.add_multiple(Jacobian::INFINITY, &k);
            assert_eq!(affine(&fast), affine(&multiply_slowly(&g, &k)), "{k:x?}");
        }
        // (n − 1)·G = −G, and n·G is the point at infinity.
        let minus_g = table.add_multiple(Jacobian::INFINITY, &order_minus_one);
        assert_eq!(affine(&minus_g), g.negate());
        assert!(
            table
                .add_multiple(Jacobian::from(&g), &order_minus_one)
                .is_infinity()
        );
    }

    #[test]
    fn windows_read_across_limbs() {
        let k = [0xf000_0000_0000_0000, 0x0000_0000_0000_0005, 0, 0];
        assert_eq!(window(&k, 60), 0b101_1111 & ((1 << WINDOW) - 1));
        assert_eq!(window(&k, 256), 0);
        assert_eq!(window(&k, 0), 0);
    }
}
