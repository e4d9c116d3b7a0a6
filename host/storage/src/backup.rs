//! Backups: a consistent copy of a node's applied state as one file (what
//! etcd's `snapshot save` fetches), and a data directory for a new cluster
//! built from one (`wasmraft snapshot restore`).
//!
//! The file is the plugin keyspace and the deployed plugin, as records:
//!
//! ```text
//! "WASMRAFT-BACKUP\0" version u8, applied index u64, applied term u64
//! record*: kind u8 (1 keyspace, 2 node record), key len u32, key, value len u32, value
//! end: kind 0
//! zero padding up to a multiple of 512 bytes
//! SHA-256 of everything before it (32 bytes)
//! ```
//!
//! (all integers big-endian). The size is 32 past a multiple of 512, as
//! etcd's client checks for its own snapshots, and the digest covers every
//! byte before it. Client sessions and member addresses stay behind: a
//! restored cluster has new members and new clients.

use std::io::{Read, Write};

use rocksdb::WriteBatch;
use sha2::{Digest, Sha256};
use wasmraft_raft::{Index, Membership};

use crate::error::StorageError;
use crate::rocks::{CF_META, CF_STATE, Storage};
use crate::snapshot::io;
use crate::snapshot_reader::{BACKUP_PREFIX, SnapshotReader};

const MAGIC: &[u8; 16] = b"WASMRAFT-BACKUP\0";
const VERSION: u8 = 1;
const KEYSPACE: u8 = 1;
const NODE_RECORD: u8 = 2;
const END: u8 = 0;
/// Node records a backup carries: the deployed plugin.
const PLUGIN_PREFIX: &[u8] = b"plugin/";

/// A consistent copy of the applied state, read a part at a time into the
/// backup file's bytes. Its checkpoint goes when it is dropped.
pub struct BackupReader {
    /// Reads the checkpoint, whose directory goes with it.
    reader: SnapshotReader,
    hash: Sha256,
    /// Bytes handed out so far.
    written: u64,
    state: Stage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Header,
    Records,
    Trailer,
    Done,
}

impl std::fmt::Debug for BackupReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupReader").field("reader", &self.reader).field("stage", &self.state).finish()
    }
}

impl Storage {
    /// Starts a backup of the state as applied now: a RocksDB checkpoint
    /// (one point in time across the keyspace and the applied index) beside
    /// the data directory, read by the returned reader.
    pub fn backup_reader(&self) -> Result<BackupReader, StorageError> {
        let reader = self.checkpoint_reader(BACKUP_PREFIX)?;
        Ok(BackupReader { reader, hash: Sha256::new(), written: 0, state: Stage::Header })
    }

    /// Fills this empty store from a backup file and makes it the first
    /// state of a new cluster of `membership` with id `cluster_id`: the
    /// keyspace and the deployed plugin as they were, an empty log. The
    /// file's digest is checked before anything is written.
    pub fn restore_backup(
        &self,
        file: &std::path::Path,
        membership: &Membership,
        cluster_id: u64,
    ) -> Result<BackupSummary, StorageError> {
        if !self.is_empty()? {
            return Err(StorageError::Refused("the data directory is not empty: restore into a new one".into()));
        }
        let digest = verify(file)?;
        let mut input = std::io::BufReader::new(std::fs::File::open(file).map_err(io)?);
        let mut header = [0u8; 33];
        input.read_exact(&mut header).map_err(io)?;
        if header[16] != VERSION {
            return Err(malformed(format!("format version {} (this build reads {VERSION})", header[16])));
        }
        let index = u64::from_be_bytes(header[17..25].try_into().expect("8 bytes"));
        let mut summary = BackupSummary { index, keys: 0, bytes: 0, digest };
        let mut batch = WriteBatch::default();
        let mut batch_bytes = 0usize;
        loop {
            let kind = read_u8(&mut input)?;
            if kind == END {
                break;
            }
            let key = read_bytes(&mut input)?;
            let value = read_bytes(&mut input)?;
            match kind {
                KEYSPACE => {
                    batch.put_cf(self.cf(CF_STATE), &key, &value);
                    summary.keys += 1;
                }
                NODE_RECORD if key.starts_with(PLUGIN_PREFIX) => batch.put_cf(self.cf(CF_META), &key, &value),
                _ => return Err(malformed(format!("a record of unknown kind {kind}"))),
            }
            batch_bytes += key.len() + value.len();
            summary.bytes += (key.len() + value.len()) as u64;
            if batch_bytes >= 4 << 20 {
                self.write(std::mem::take(&mut batch), &self.sync_opts())?;
                batch_bytes = 0;
            }
        }
        self.write(batch, &self.sync_opts())?;
        self.set_cluster_id(cluster_id)?;
        // Last: until the membership is written the store counts as empty,
        // so an interrupted restore is refused by no one and can be redone
        // after removing the directory.
        self.bootstrap(membership)?;
        Ok(summary)
    }
}

/// What a restore read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupSummary {
    /// The applied index the backup was taken at, in its old cluster.
    pub index: u64,
    /// Keys of the plugin keyspace.
    pub keys: u64,
    /// Bytes of keys and values.
    pub bytes: u64,
    /// The file's SHA-256.
    pub digest: [u8; 32],
}

impl BackupReader {
    /// The applied index the backup holds.
    pub fn index(&self) -> Index {
        self.reader.index()
    }

    /// The next bytes of the backup file (about a snapshot part, 1 MiB),
    /// or `None` after its last.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, StorageError> {
        let mut out = Vec::new();
        match self.state {
            Stage::Header => {
                let reader = &self.reader;
                out.extend_from_slice(MAGIC);
                out.push(VERSION);
                out.extend_from_slice(&reader.index().0.to_be_bytes());
                out.extend_from_slice(&reader.term().to_be_bytes());
                self.state = Stage::Records;
            }
            Stage::Records => match self.reader.next_part()? {
                Some(part) => {
                    for (kind, pairs) in [(KEYSPACE, &part.state), (NODE_RECORD, &part.system)] {
                        for (k, v) in pairs {
                            if kind == NODE_RECORD && !k.starts_with(PLUGIN_PREFIX) {
                                continue;
                            }
                            out.push(kind);
                            for bytes in [k, v] {
                                out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
                                out.extend_from_slice(bytes);
                            }
                        }
                    }
                }
                None => self.state = Stage::Trailer,
            },
            Stage::Trailer => {
                out.push(END);
                self.hash.update(&out);
                let written = self.written + out.len() as u64;
                let pad = (512 - written % 512) % 512;
                let zeros = vec![0u8; pad as usize];
                self.hash.update(&zeros);
                out.extend_from_slice(&zeros);
                let digest = std::mem::take(&mut self.hash).finalize();
                out.extend_from_slice(&digest);
                self.state = Stage::Done;
                self.written = written + pad + 32;
                return Ok(Some(out));
            }
            Stage::Done => return Ok(None),
        }
        self.hash.update(&out);
        self.written += out.len() as u64;
        Ok(Some(out))
    }
}

/// Checks a backup file's size and digest; returns the digest.
pub fn verify(file: &std::path::Path) -> Result<[u8; 32], StorageError> {
    let len = std::fs::metadata(file).map_err(io)?.len();
    if len < 512 + 32 || len % 512 != 32 {
        return Err(malformed(format!("{len} bytes: not a Wasmraft backup (its size is 32 past a multiple of 512)")));
    }
    let mut input = std::io::BufReader::new(std::fs::File::open(file).map_err(io)?);
    let mut magic = [0u8; 16];
    input.read_exact(&mut magic).map_err(io)?;
    if &magic != MAGIC {
        return Err(malformed("no WASMRAFT-BACKUP header: not a Wasmraft backup (an etcd snapshot cannot be restored here)".into()));
    }
    let mut hash = Sha256::new();
    hash.update(magic);
    let mut rest = (&mut input).take(len - 16 - 32);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = rest.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    let mut stored = [0u8; 32];
    input.read_exact(&mut stored).map_err(io)?;
    let computed: [u8; 32] = hash.finalize().into();
    if computed != stored {
        return Err(malformed("its SHA-256 does not match: the file is damaged or incomplete".into()));
    }
    Ok(computed)
}

fn malformed(detail: String) -> StorageError {
    StorageError::Refused(format!("backup file: {detail}"))
}

fn read_u8(input: &mut impl Read) -> Result<u8, StorageError> {
    let mut b = [0u8; 1];
    input.read_exact(&mut b).map_err(|_| malformed("it ends inside a record".into()))?;
    Ok(b[0])
}

fn read_bytes<R: Read>(input: &mut R) -> Result<Vec<u8>, StorageError> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len).map_err(|_| malformed("it ends inside a record".into()))?;
    let len = u32::from_be_bytes(len) as usize;
    if len > 1 << 30 {
        return Err(malformed(format!("a record of {len} bytes")));
    }
    // Read, not allocated ahead: a length the file does not hold costs
    // only what the file has.
    let mut bytes = Vec::new();
    input.take(len as u64).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() < len {
        return Err(malformed("it ends inside a record".into()));
    }
    Ok(bytes)
}

/// Writes a whole backup to `out` (tests, and the CLI's own saves).
pub fn write_backup(mut reader: BackupReader, out: &mut impl Write) -> Result<u64, StorageError> {
    let mut written = 0;
    while let Some(chunk) = reader.next_chunk()? {
        out.write_all(&chunk).map_err(io)?;
        written += chunk.len() as u64;
    }
    Ok(written)
}
