//! Errors of the state databases.

/// A state database operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The storage engine failed; the database should be treated as dead.
    #[error("state storage at {path}: {reason}")]
    Storage { path: String, reason: String },
    /// Stored data does not decode: the files were damaged or written by
    /// something else.
    #[error("corrupt state entry {what}: {reason}")]
    Corrupt { what: String, reason: String },
    /// `apply` was called with a height not above the current one.
    #[error("update at height {new:?} does not follow height {current:?}")]
    HeightNotIncreasing {
        current: crate::Height,
        new: crate::Height,
    },
    /// `rollback_to` asked for a height whose state is no longer kept:
    /// below the last checkpoint, or below what pruning has already passed.
    #[error("cannot roll back to {target:?}: state is kept only from height {floor:?}")]
    RollbackUnavailable {
        target: crate::Height,
        floor: crate::Height,
    },
    /// The engine writes every update through and keeps no history to
    /// roll back with (stream channels need the memory state).
    #[error(
        "this state database cannot roll back updates; stream channels need the memory state database"
    )]
    RollbackUnsupported,
}

/// Result with the state database [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
