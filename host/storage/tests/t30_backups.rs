//! Backups: the file a backup reader writes is framed as etcd's client
//! expects, restores into an empty store as the first state of a new
//! cluster (keyspace and deployed plugin, no sessions or addresses), and a
//! damaged, truncated or foreign file is refused before anything is written.

use wasmraft_raft::{LogId, Membership, NodeId};
use wasmraft_storage::{AppliedRecords, StateWrite, Storage, StorageError, StorageOptions, verify_backup, write_backup};

fn open(dir: &std::path::Path, name: &str) -> Storage {
    Storage::open(&dir.join(name), 1, StorageOptions::default()).unwrap()
}

/// A store with `keys` keys, a session and a member address, applied at 10.
fn source(dir: &std::path::Path, keys: usize) -> Storage {
    let s = open(dir, "source");
    s.bootstrap(&Membership::new([NodeId(1)])).unwrap();
    let keys: Vec<Vec<u8>> = (0..keys).map(|i| format!("key/{i:08}").into_bytes()).collect();
    let writes = keys.iter().map(|k| StateWrite { key: k, value: Some(&k[..]) });
    let records = AppliedRecords { membership: None, addresses: vec![(2, "127.0.0.1:7480".into())], log_time_ms: None };
    s.apply_with_records(LogId::new(3, 10), writes, [(5u64, Some(&b"session"[..]))], &records).unwrap();
    s
}

fn backup_file(dir: &std::path::Path, s: &Storage) -> std::path::PathBuf {
    let path = dir.join("backup.db");
    let mut file = std::fs::File::create(&path).unwrap();
    let reader = s.backup_reader().unwrap();
    assert_eq!(reader.index().0, 10);
    write_backup(reader, &mut file).unwrap();
    path
}

#[test]
fn a_backup_restores_the_keyspace_into_a_new_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let s = source(dir.path(), 3000);
    let path = backup_file(dir.path(), &s);
    assert_eq!(std::fs::metadata(&path).unwrap().len() % 512, 32);
    assert!(
        std::fs::read_dir(dir.path()).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains("backup-")),
        "the backup's checkpoint is gone once read"
    );
    verify_backup(&path).unwrap();

    let restored = open(dir.path(), "restored");
    let members = Membership::new([NodeId(1), NodeId(2), NodeId(3)]);
    let summary = restored.restore_backup(&path, &members, 42).unwrap();
    assert_eq!((summary.index, summary.keys), (10, 3000));
    assert_eq!(restored.cluster_id().unwrap(), Some(42));
    assert!(!restored.is_empty().unwrap());
    let state = restored.apply_reader().dump().unwrap();
    assert_eq!(state, s.apply_reader().dump().unwrap(), "the same keyspace");
    assert_eq!(restored.addresses().unwrap(), [], "old members' addresses stay behind");
    // A second restore into the same store is refused.
    let again = restored.restore_backup(&path, &members, 42).unwrap_err();
    assert!(matches!(again, StorageError::Refused(m) if m.contains("not empty")));
}

#[test]
fn damaged_truncated_or_foreign_files_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = source(dir.path(), 100);
    let path = backup_file(dir.path(), &s);
    let good = std::fs::read(&path).unwrap();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("flipped", { let mut b = good.clone(); b[40] ^= 1; b }, "SHA-256 does not match"),
        ("truncated", good[..good.len() - 512].to_vec(), "SHA-256 does not match"),
        ("short", good[..100].to_vec(), "not a Wasmraft backup"),
        ("foreign", { let mut b = good.clone(); b[0] = b'X'; b }, "not a Wasmraft backup"),
    ];
    for (name, bytes, expected) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let target = open(dir.path(), &format!("target-{name}"));
        let err = target.restore_backup(&file, &Membership::new([NodeId(1)]), 7).unwrap_err();
        assert!(matches!(&err, StorageError::Refused(m) if m.contains(expected)), "{name}: {err}");
        assert!(target.is_empty().unwrap() && target.apply_reader().dump().unwrap().is_empty(), "{name}: nothing written");
    }
}

/// A file whose digest matches but whose body is wrong (another format
/// version, an unknown record kind, a length past the file or past any
/// honest record) is refused and writes nothing: the digest only catches
/// damage, not a crafted file.
#[test]
fn a_crafted_body_under_a_good_digest_is_refused_and_writes_nothing() {
    use sha2::Digest;
    let dir = tempfile::tempdir().unwrap();
    let s = source(dir.path(), 10);
    let good = std::fs::read(backup_file(dir.path(), &s)).unwrap();
    // Header: 16 bytes of magic, the version, index and term; then records.
    let first_record = 16 + 1 + 8 + 8;
    let redigest = |mut b: Vec<u8>| {
        let body = b.len() - 32;
        let digest = sha2::Sha256::digest(&b[..body]);
        b[body..].copy_from_slice(&digest);
        b
    };
    let with = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        redigest(b)
    };
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("version", with(16, &[2]), "format version 2"),
        ("kind", with(first_record, &[9]), "unknown kind 9"),
        ("past the file", with(first_record + 1, &(1u32 << 29).to_be_bytes()), "ends inside a record"),
        ("past any record", with(first_record + 1, &u32::MAX.to_be_bytes()), "a record of 4294967295 bytes"),
    ];
    for (name, bytes, expected) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        verify_backup(&file).unwrap();
        let target = open(dir.path(), &format!("target-{name}"));
        let err = target.restore_backup(&file, &Membership::new([NodeId(1)]), 7).unwrap_err();
        assert!(matches!(&err, StorageError::Refused(m) if m.contains(expected)), "{name}: {err}");
        assert!(target.is_empty().unwrap() && target.apply_reader().dump().unwrap().is_empty(), "{name}: nothing written");
    }
}

/// A backup's checkpoint that a process which died left beside the data
/// directory is removed at the next open; a live reader's stays while it
/// reads, even across a reopen in the same process.
#[test]
fn checkpoints_of_backups_a_dead_process_left_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let backups = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("backup-"))
            .collect();
        names.sort();
        names
    };
    drop(source(dir.path(), 10));
    for left in ["source.backup-4000000-0", "source.backup-4000000-1.tmp", "source.backup-before-upgrade"] {
        std::fs::create_dir(dir.path().join(left)).unwrap();
        std::fs::write(dir.path().join(left).join("000001.sst"), b"left behind").unwrap();
    }
    let s = open(dir.path(), "source");
    assert_eq!(backups(), ["source.backup-before-upgrade"], "the dead process's checkpoints are gone, an operator's copy stays");
    std::fs::remove_dir_all(dir.path().join("source.backup-before-upgrade")).unwrap();
    let reader = s.backup_reader().unwrap();
    assert_eq!(backups().len(), 1);
    drop(s);
    let s = open(dir.path(), "source");
    assert_eq!(backups().len(), 1, "a live reader's checkpoint survives a reopen");
    let mut out = Vec::new();
    write_backup(reader, &mut out).unwrap();
    assert_eq!(backups(), Vec::<String>::new(), "and goes with the reader");
    drop(s);
}
