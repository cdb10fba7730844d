//! Endorsement planning: which organisations to ask.
//!
//! A client (or Fabric's gateway) that must collect endorsements asks the
//! fewest organisations whose peers together satisfy the chaincode's
//! policy; among sets of one size, it prefers the organisations it lists
//! first (its own, typically).

/// Organisations most subsets of which can be searched for a plan.
const PLAN_ORGANISATIONS_MAX: usize = 16;

/// The smallest subset of `candidates` that `satisfied` accepts; among
/// subsets of one size, the earliest in `candidates` order (so the first
/// candidate is preferred). `None` if no subset is accepted.
pub fn smallest_satisfying(
    candidates: &[String],
    satisfied: impl Fn(&[String]) -> bool,
) -> Option<Vec<String>> {
    let candidates = &candidates[..candidates.len().min(PLAN_ORGANISATIONS_MAX)];
    for size in 1..=candidates.len() {
        // Index combinations of `size` in lexicographic order.
        let mut indices: Vec<usize> = (0..size).collect();
        loop {
            let subset: Vec<String> = indices.iter().map(|&i| candidates[i].clone()).collect();
            if satisfied(&subset) {
                return Some(subset);
            }
            let Some(position) = (0..size)
                .rev()
                .find(|&p| indices[p] < candidates.len() - size + p)
            else {
                break;
            };
            indices[position] += 1;
            for next in position + 1..size {
                indices[next] = indices[next - 1] + 1;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn plans_take_the_fewest_organisations_preferring_the_first() {
        let known = names(&["A", "B", "C", "D"]);
        let contains = |needed: &'static [&'static str]| {
            move |subset: &[String]| needed.iter().all(|n| subset.iter().any(|s| s == n))
        };
        assert_eq!(smallest_satisfying(&known, |_| true), Some(names(&["A"])));
        assert_eq!(
            smallest_satisfying(&known, contains(&["C"])),
            Some(names(&["C"]))
        );
        assert_eq!(
            smallest_satisfying(&known, contains(&["B", "D"])),
            Some(names(&["B", "D"]))
        );
        // Two of four: the earliest pair.
        assert_eq!(
            smallest_satisfying(&known, |subset| subset.len() >= 2),
            Some(names(&["A", "B"]))
        );
        assert_eq!(smallest_satisfying(&known, contains(&["E"])), None);
        assert_eq!(smallest_satisfying(&[], |_| true), None);
    }
}
