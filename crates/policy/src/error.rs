//! Errors of the policy crate.

/// A policy expression could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy {expression:?}, column {column}: {message}")]
pub struct ParseError {
    /// The expression as given.
    pub expression: String,
    /// 1-based character column where the problem was found.
    pub column: usize,
    pub message: String,
}

/// A policy could not be built or was not satisfied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The signatures presented do not satisfy the policy.
    #[error("policy {0} is not satisfied by the signatures presented")]
    NotSatisfied(String),
    /// The policy is malformed: bad encoding, a principal index out of
    /// range, an unsupported principal type.
    #[error("malformed policy {name}: {reason}")]
    Malformed { name: String, reason: String },
    /// No policy exists at the given path.
    #[error("no policy at {0}")]
    NotFound(String),
}
