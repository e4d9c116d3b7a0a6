//! Durable storage of a Wasmraft node: one RocksDB instance per node.
//!
//! | column family | holds |
//! | --- | --- |
//! | `log` | Raft log entries, keyed by big-endian index |
//! | `raft` | hard state, bootstrap membership, snapshot metadata |
//! | `state` | the plugin's keyspace |
//! | `meta` | the applied log id (written with the state it covers), client sessions, member addresses, the deployed plugin |
//!
//! Snapshots are RocksDB checkpoints beside the data directory
//! (`<dir>.snapshots/`), sent a part at a time ([`SnapshotReader`]) and
//! received into table files (`<dir>.incoming/`, [`SnapshotStaging`]) that
//! RocksDB ingests behind an install marker: no whole snapshot is ever held
//! in memory, and a crash during an install is finished at the next open.
//!
//! Every record is framed as `[format version: u8][crc32: u32 LE][body]`; a
//! record that fails its checksum is reported as [`StorageError::Corrupt`],
//! never silently used.
//!
//! Durability contract (what the node relies on):
//! - [`Storage::append`] writes entries and hard state in one write batch and,
//!   with `sync`, returns only after fsync: the Raft core may then count them.
//!   The log's writes are durable in its own write-ahead segments (`wal.rs`,
//!   `raftlog-*.seg` in the RocksDB directory), not in RocksDB's WAL.
//! - [`Storage::apply`] writes the plugin's writes and the applied log id in
//!   one atomic batch, without fsync: after a crash, recovery finds the state
//!   exactly at some applied id and replays the (durable) log from there.
#![deny(missing_docs)]

mod backup;
mod codec;
mod error;
mod log;
mod log_time_note;
mod plugin;
mod rocks;
mod snapshot;
mod snapshot_reader;
mod snapshot_staging;
mod state;
mod term_index;
mod wal;

pub use backup::{BackupReader, BackupSummary, verify as verify_backup, write_backup};
pub use error::StorageError;

/// Fuzz entry points (the cargo-fuzz targets in `fuzz/`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::codec::decode_any;
}
pub use log_time_note::{BootTime, LogTimeNote, NoteChange};
pub use plugin::DeployedPlugin;
pub use rocks::{Storage, StorageOptions};
pub use snapshot::SnapshotPart;
pub use snapshot_reader::{SNAPSHOT_PART_BYTES, SnapshotReader};
pub use snapshot_staging::{SnapshotStaging, StagedSnapshot};
pub use state::{AppliedRecords, StateReader, StateWrite};
pub use wal::LogWritesHeld;
