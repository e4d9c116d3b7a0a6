//! Snapshots as files: sent a part at a time out of a checkpoint, staged
//! on disk and ingested on the receiver, size-capped, refused when
//! malformed, and an install that a crash interrupts finished at the next
//! open whatever write it stopped after.

use wasmraft_raft::{Index, LogId, Membership, NodeId, SnapshotMeta};
use wasmraft_storage::{AppliedRecords, SNAPSHOT_PART_BYTES, SnapshotPart, StateWrite, Storage, StorageError, StorageOptions};

fn open(dir: &std::path::Path) -> Storage {
    Storage::open(&dir.join("db"), 1, StorageOptions::default()).unwrap()
}

/// A leader-side store with `keys` keys of `value_len` bytes, two sessions
/// (one whose id starts with 0xff) and a member address, snapshotted at
/// index 10.
fn source(dir: &std::path::Path, keys: usize, value_len: usize) -> (Storage, SnapshotMeta) {
    let s = open(dir);
    s.bootstrap(&Membership::new([NodeId(1)])).unwrap();
    let value = vec![7u8; value_len];
    let keys: Vec<Vec<u8>> = (0..keys).map(|i| format!("key/{i:08}").into_bytes()).collect();
    let writes = keys.iter().map(|k| StateWrite { key: k, value: Some(&value) });
    let records = AppliedRecords {
        membership: Some(Membership::new([NodeId(1), NodeId(2)])),
        addresses: vec![(2, "127.0.0.1:7480".into())],
        log_time_ms: Some(1_700_000_000_123),
    };
    let sessions = [(5u64, Some(&b"session 5"[..])), (u64::MAX - 1, Some(&b"session high"[..]))];
    s.apply_with_records(LogId::new(3, 10), writes, sessions, &records).unwrap();
    let meta = s.take_snapshot().unwrap();
    assert_eq!(meta.last, LogId::new(3, 10));
    (s, meta)
}

/// A follower-side store with state, sessions and log entries of its own,
/// all of which the snapshot must replace.
fn target(dir: &std::path::Path) -> Storage {
    let s = open(dir);
    s.bootstrap(&Membership::new([NodeId(1)])).unwrap();
    let entry = wasmraft_raft::Entry { log_id: LogId::new(1, 1), payload: wasmraft_raft::EntryPayload::Normal(b"x".to_vec()) };
    s.append(&[entry], None, true).unwrap();
    s.apply(LogId::new(1, 1), [StateWrite { key: b"stale", value: Some(b"old") }], [(9, Some(&b"old session"[..]))])
        .unwrap();
    // Closed and opened again, which flushes: the old state is on disk, as
    // a node's is by the time a snapshot comes (else a crash would lose it
    // and the node would apply it again from its log).
    drop(s);
    open(dir)
}

fn send(from: &Storage, meta: &SnapshotMeta, to: &Storage, max_bytes: u64) -> Result<wasmraft_storage::StagedSnapshot, StorageError> {
    let mut reader = from.snapshot_reader(meta.last.index).unwrap();
    let mut staging = to.stage_snapshot(meta, max_bytes)?;
    while let Some(part) = reader.next_part()? {
        staging.add(part)?;
    }
    staging.finish()
}

fn assert_installed(s: &Storage, from: &Storage, meta: &SnapshotMeta) {
    assert_eq!(s.applied().unwrap(), meta.last);
    assert_eq!(s.applied_membership().unwrap(), meta.membership);
    assert_eq!(s.snapshot().unwrap().unwrap().last, meta.last);
    assert_eq!(s.log_bounds(), (Index(11), Index(10)), "the whole log is dropped");
    assert_eq!(s.consistent_reader().get(b"stale").unwrap(), None);
    assert_eq!(s.sessions().unwrap(), from.sessions().unwrap());
    assert_eq!(s.addresses().unwrap(), vec![(2, "127.0.0.1:7480".to_string())]);
    assert_eq!(s.log_time_ms().unwrap(), Some(1_700_000_000_123), "log time travels with the snapshot");
    assert_eq!(s.state_hash().unwrap(), from.state_hash().unwrap(), "keyspace and sessions equal the leader's");
    // It can be sent on at once.
    let mut reader = s.snapshot_reader(meta.last.index).unwrap();
    reader.read_all().unwrap();
}

#[test]
fn a_snapshot_travels_in_bounded_parts_and_installs_whole() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // 3,000 values of 2 KiB: about 6 MiB, several parts.
    let (src, meta) = source(a.path(), 3000, 2048);
    let mut reader = src.snapshot_reader(meta.last.index).unwrap();
    let mut parts = 0;
    let mut largest = 0;
    let mut all = SnapshotPart::default();
    while let Some(part) = reader.next_part().unwrap() {
        parts += 1;
        largest = largest.max(part.bytes());
        all.state.extend(part.state);
        all.sessions.extend(part.sessions);
        all.system.extend(part.system);
    }
    assert!(parts >= 6, "{parts} parts");
    assert!(largest < SNAPSHOT_PART_BYTES + 4096, "a part of {largest} bytes");
    assert_eq!(all.state.len(), 3000);
    assert!(all.state.windows(2).all(|w| w[0].0 < w[1].0), "keys in order");
    assert_eq!(all.sessions.len(), 2);
    assert_eq!(reader.pairs(), 3000 + 2 + 2, "keys, sessions, an address and log time");

    let dst = target(b.path());
    let staged = send(&src, &meta, &dst, u64::MAX).unwrap();
    assert_eq!(staged.state_keys(), 3000);
    dst.install_snapshot(staged).unwrap();
    assert_installed(&dst, &src, &meta);
    let incoming = b.path().join("db.incoming");
    assert!(!incoming.exists() || std::fs::read_dir(&incoming).unwrap().next().is_none(), "staged files removed");
    // And after a restart.
    drop(dst);
    assert_installed(&open(b.path()), &src, &meta);
}

/// Values of 4 KiB and more live in blob files, apart from their keys: a
/// snapshot carries them, installs them and is sent on again; the store's
/// size counts them; compacting its files (etcd's defragment) reclaims the
/// space of overwritten ones.
#[test]
fn large_values_in_blob_files_travel_in_snapshots_and_are_counted_and_reclaimed() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src, meta) = source(a.path(), 40, 64 << 10);
    let (total, live) = src.size_bytes();
    assert!(live >= 40 * (64 << 10) && total >= live, "total {total}, live {live}");
    let dst = target(b.path());
    dst.install_snapshot(send(&src, &meta, &dst, u64::MAX).unwrap()).unwrap();
    assert_installed(&dst, &src, &meta);
    drop(dst);
    assert_installed(&open(b.path()), &src, &meta);

    // Every value overwritten twice, each time flushed with a snapshot.
    let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("key/{i:08}").into_bytes()).collect();
    let none: [(u64, Option<&[u8]>); 0] = [];
    for round in 0..2u64 {
        let value = vec![round as u8; 64 << 10];
        let writes = keys.iter().map(|k| StateWrite { key: k, value: Some(&value) });
        src.apply(LogId::new(3, 11 + round), writes, none).unwrap();
        src.take_snapshot().unwrap();
    }
    let (before, _) = src.size_bytes();
    assert!(before >= 3 * 40 * (64 << 10), "three generations of values on disk: {before} bytes");
    src.compact_files();
    let (after, live) = src.size_bytes();
    assert!(after < 2 * 40 * (64 << 10), "compacting reclaimed the overwritten values: {before} -> {after} bytes");
    assert!(live >= 40 * (64 << 10), "the live values stay: {live} bytes");
    assert_eq!(src.consistent_reader().get(&keys[7]).unwrap(), Some(vec![1u8; 64 << 10]));
}

#[test]
fn a_snapshot_over_the_size_limit_is_refused_and_leaves_nothing() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (src, meta) = source(a.path(), 1000, 1024);
    let dst = target(b.path());
    let before = dst.state_hash().unwrap();
    let err = send(&src, &meta, &dst, 512 << 10).unwrap_err();
    assert!(err.to_string().contains("exceeds max_snapshot_bytes (524288 bytes)"), "{err}");
    assert_eq!(dst.state_hash().unwrap(), before);
    assert_eq!(dst.applied().unwrap(), LogId::new(1, 1));
    let incoming = b.path().join("db.incoming");
    assert!(std::fs::read_dir(&incoming).unwrap().next().is_none(), "the staging directory is removed");
}

#[test]
fn malformed_snapshot_parts_are_refused() {
    let b = tempfile::tempdir().unwrap();
    let dst = target(b.path());
    let meta = SnapshotMeta { last: LogId::new(3, 10), membership: Membership::new([NodeId(1)]) };
    let pair = |k: &[u8]| (k.to_vec(), b"v".to_vec());
    let cases: Vec<(Vec<SnapshotPart>, &str)> = vec![
        (vec![SnapshotPart { state: vec![pair(b"b"), pair(b"a")], ..Default::default() }], "not in ascending order"),
        (
            vec![
                SnapshotPart { state: vec![pair(b"a")], ..Default::default() },
                SnapshotPart { state: vec![pair(b"a")], ..Default::default() },
            ],
            "not in ascending order",
        ),
        (vec![SnapshotPart { sessions: vec![pair(b"short")], ..Default::default() }], "session id of 5 bytes"),
        (vec![SnapshotPart { system: vec![pair(b"node_id")], ..Default::default() }], "unexpected node record"),
        (
            vec![SnapshotPart { system: vec![pair(b"address/\0\0\0\0\0\0\0\x02"), pair(b"address/\0\0\0\0\0\0\0\x02")], ..Default::default() }],
            "twice",
        ),
    ];
    for (parts, want) in cases {
        let mut staging = dst.stage_snapshot(&meta, u64::MAX).unwrap();
        let err = parts.into_iter().try_for_each(|p| staging.add(p)).unwrap_err();
        assert!(matches!(err, StorageError::Refused(_)) && err.to_string().contains(want), "{err}");
    }
    assert_eq!(dst.consistent_reader().get(b"stale").unwrap(), Some(b"old".to_vec()), "nothing changed");
}

/// A crash after any of the install's writes (the marker write, each
/// ingestion, the final write): the next open finishes the install, or,
/// before the marker, finds the old state untouched.
#[test]
fn an_install_interrupted_after_any_write_is_finished_at_the_next_open() {
    let a = tempfile::tempdir().unwrap();
    let (src, meta) = source(a.path(), 500, 100);
    for writes in 0..4 {
        let b = tempfile::tempdir().unwrap();
        let dst = target(b.path());
        let old = dst.state_hash().unwrap();
        let staged = send(&src, &meta, &dst, u64::MAX).unwrap();
        dst.crash_after_writes(writes);
        let err = dst.install_snapshot(staged).unwrap_err();
        assert_eq!(err, StorageError::Crashed, "crash point after {writes} writes");
        drop(dst);
        let reopened = open(b.path());
        if writes == 0 {
            assert_eq!(reopened.state_hash().unwrap(), old, "nothing was written: the old state stands");
            assert_eq!(reopened.applied().unwrap(), LogId::new(1, 1));
            assert!(!b.path().join("db.incoming").exists(), "the unused staged files are removed");
        } else {
            assert_installed(&reopened, &src, &meta);
        }
    }
}

#[test]
fn an_interrupted_install_without_its_files_stops_the_node_with_a_clear_error() {
    let a = tempfile::tempdir().unwrap();
    let (src, meta) = source(a.path(), 10, 10);
    let b = tempfile::tempdir().unwrap();
    let dst = target(b.path());
    let staged = send(&src, &meta, &dst, u64::MAX).unwrap();
    dst.crash_after_writes(1);
    dst.install_snapshot(staged).unwrap_err();
    drop(dst);
    std::fs::remove_dir_all(b.path().join("db.incoming")).unwrap();
    let err = Storage::open(&b.path().join("db"), 1, StorageOptions::default()).unwrap_err();
    assert!(err.to_string().contains("remove its data directory and add it to the cluster again"), "{err}");
}

/// A reader opens every file of its checkpoint, so a newer snapshot that
/// removes the directory mid-stream does not cut the stream short.
#[test]
fn a_reader_outlives_its_checkpoint_directory() {
    let a = tempfile::tempdir().unwrap();
    let (src, meta) = source(a.path(), 2000, 2048);
    let mut reader = src.snapshot_reader(meta.last.index).unwrap();
    let first = reader.next_part().unwrap().unwrap();
    src.apply(LogId::new(3, 11), [StateWrite { key: b"later", value: Some(b"x") }], []).unwrap();
    src.take_snapshot().unwrap();
    assert!(!a.path().join("db.snapshots").join(format!("{:020}", 10)).exists());
    let rest = reader.read_all().unwrap();
    assert_eq!(first.state.len() + rest.state.len(), 2000);
}

/// The same with values in several blob files, which RocksDB opens only
/// when it first reads from them, across the store being opened again in
/// the same process (a restarted node); and the reader's own links go with
/// it.
#[test]
fn a_reader_of_large_values_outlives_its_checkpoint_directory() {
    let a = tempfile::tempdir().unwrap();
    let s = open(a.path());
    s.bootstrap(&Membership::new([NodeId(1)])).unwrap();
    let none: [(u64, Option<&[u8]>); 0] = [];
    // Three flushes, three blob files of 64 KiB values.
    for file in 0..3u64 {
        let value = vec![file as u8; 64 << 10];
        let keys: Vec<Vec<u8>> = (0..20).map(|i| format!("key/{file}/{i:04}").into_bytes()).collect();
        s.apply(LogId::new(3, 8 + file), keys.iter().map(|k| StateWrite { key: k, value: Some(&value) }), none).unwrap();
        s.take_snapshot().unwrap();
    }
    let mut reader = s.snapshot_reader(Index(10)).unwrap();
    let first = reader.next_part().unwrap().unwrap();
    assert!(first.state.len() < 60, "the first part holds only some of the values");
    drop(s);
    let s = open(a.path());
    s.apply(LogId::new(3, 11), [StateWrite { key: b"later", value: Some(b"x") }], none).unwrap();
    s.take_snapshot().unwrap();
    assert!(!a.path().join("db.snapshots").join(format!("{:020}", 10)).exists());
    let rest = reader.read_all().unwrap();
    assert_eq!(first.state.len() + rest.state.len(), 60);
    assert!(rest.state.iter().all(|(k, v)| v.len() == 64 << 10 && v[0] == k[4] - b'0'), "every value read whole");
    let sending = |dir: &std::path::Path| std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with("db.sending-")).count();
    assert_eq!(sending(a.path()), 1);
    drop(reader);
    assert_eq!(sending(a.path()), 0, "the reader's links go with it");
}

/// A crash between recording a snapshot and making its checkpoint would
/// leave a snapshot no one can send; the next open takes a new one.
#[test]
fn a_snapshot_without_its_checkpoint_is_taken_again_at_open() {
    let a = tempfile::tempdir().unwrap();
    let (src, meta) = source(a.path(), 10, 10);
    drop(src);
    std::fs::remove_dir_all(a.path().join("db.snapshots")).unwrap();
    let s = open(a.path());
    let latest = s.snapshot().unwrap().unwrap();
    assert_eq!(latest.last, meta.last);
    assert_eq!(s.snapshot_reader(latest.last.index).unwrap().read_all().unwrap().state.len(), 10);
}
