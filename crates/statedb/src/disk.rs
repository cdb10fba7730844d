//! The RocksDB handle both engines store through, with errors mapped to the
//! crate's [`Error`] and the record layout of [`crate::codec`].

use std::path::Path;

use rocksdb::{DB, DBCompressionType, Options, WriteBatch, WriteOptions};

use crate::{Error, Height, Result, codec};

pub(crate) struct Disk {
    pub(crate) db: DB,
    /// For error messages.
    pub(crate) path: String,
}

impl Disk {
    /// Opens (or creates) the database at `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let path = dir.display().to_string();
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_compression_type(DBCompressionType::Lz4);
        // Background writes paced as weft-ledger's `pace_background_writes`
        // explains: a flush must not hold up the block store's synced
        // writes on the same disk.
        options.set_bytes_per_sync(1 << 20);
        options.set_ratelimiter(32 << 20, 10_000, 10);
        let db = DB::open(&options, dir).map_err(|error| Error::Storage {
            path: path.clone(),
            reason: error.into_string(),
        })?;
        Ok(Self { db, path })
    }

    pub(crate) fn error(&self, error: rocksdb::Error) -> Error {
        Error::Storage {
            path: self.path.clone(),
            reason: error.into_string(),
        }
    }

    /// The height of the last batch written, read from the savepoint record.
    pub(crate) fn savepoint(&self) -> Result<Option<Height>> {
        let encoded = self
            .db
            .get_pinned(codec::SAVEPOINT_KEY)
            .map_err(|error| self.error(error))?;
        encoded
            .map(|encoded| codec::decode_height(&encoded))
            .transpose()
    }

    /// Writes `batch` atomically; with `sync`, it is on stable storage when
    /// this returns.
    pub(crate) fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let mut options = WriteOptions::default();
        options.set_sync(sync);
        self.db
            .write_opt(batch, &options)
            .map_err(|error| self.error(error))
    }
}
