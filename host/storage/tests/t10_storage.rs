//! The RocksDB store: appends, truncation, recovery after reopening,
//! atomic applied batches, and refusal of foreign or corrupt data.

use wasmraft_raft::{Entry, EntryPayload, HardState, Index, LogId, LogReader, Membership, NodeId, Term};
use wasmraft_storage::{BootTime, LogTimeNote, NoteChange, StateWrite, Storage, StorageError, StorageOptions};

fn entry(term: u64, index: u64, data: &str) -> Entry {
    Entry { log_id: LogId::new(term, index), payload: EntryPayload::Normal(data.as_bytes().to_vec()) }
}

/// The store in `dir/db`: its snapshot and staging directories are made
/// beside it, inside the test's temporary directory.
fn open(dir: &std::path::Path) -> Storage {
    Storage::open(&dir.join("db"), 1, StorageOptions::default()).unwrap()
}

#[test]
fn appended_entries_and_hard_state_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let hs = HardState { term: Term(2), vote: Some(NodeId(1)), commit: Index(2) };
    {
        let s = open(dir.path());
        assert!(s.is_empty().unwrap());
        s.bootstrap(&Membership::new([NodeId(1)])).unwrap();
        s.append(&[entry(1, 1, "a"), entry(2, 2, "b"), entry(2, 3, "c")], Some(&hs), true).unwrap();
    }
    let s = open(dir.path());
    assert!(!s.is_empty().unwrap());
    assert_eq!(s.hard_state(), hs);
    assert_eq!(s.log_bounds(), (Index(1), Index(3)));
    // Terms come from the index rebuilt at open, not from the entries.
    for (index, term) in [(1, 1), (2, 2), (3, 2)] {
        assert_eq!(s.term(Index(index)).unwrap(), Term(term));
    }
    assert_eq!(s.entries(Index(1), Index(4), u64::MAX).unwrap().len(), 3);
    let (_, membership) = s.initial_state().unwrap();
    assert_eq!(membership, Membership::new([NodeId(1)]));
}

#[test]
fn appending_over_a_suffix_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    s.append(&[entry(1, 1, "a"), entry(1, 2, "b"), entry(1, 3, "c"), entry(1, 4, "d")], None, true).unwrap();
    s.append(&[entry(2, 3, "x")], None, true).unwrap();
    assert_eq!(s.log_bounds().1, Index(3));
    let all = s.read_entries(Index(1), Index(10)).unwrap();
    assert_eq!(all, vec![entry(1, 1, "a"), entry(1, 2, "b"), entry(2, 3, "x")]);
    assert_eq!(s.term(Index(2)), Ok(Term(1)));
    assert_eq!(s.term(Index(3)), Ok(Term(2)));
    assert_eq!(s.term(Index(4)), Err(wasmraft_raft::StorageError::Unavailable));
}

#[test]
fn entries_respect_the_byte_limit_but_return_at_least_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let big = "x".repeat(1000);
    s.append(&[entry(1, 1, &big), entry(1, 2, &big), entry(1, 3, &big)], None, true).unwrap();
    assert_eq!(s.entries(Index(1), Index(4), 1).unwrap().len(), 1);
    assert_eq!(s.entries(Index(1), Index(4), 2100).unwrap().len(), 2);
}

#[test]
fn applied_state_and_applied_id_are_written_together() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        assert_eq!(s.applied().unwrap(), LogId::default());
        let none: [(u64, Option<&[u8]>); 0] = [];
        s.apply(
            LogId::new(1, 5),
            [StateWrite { key: b"k", value: Some(b"v") }, StateWrite { key: b"gone", value: None }],
            [(7, Some(&b"session of 7"[..])), (9, Some(&b"session of 9"[..]))],
        )
        .unwrap();
        s.apply(LogId::new(1, 6), [StateWrite { key: b"k2", value: Some(b"v2") }], [(9, None)]).unwrap();
        s.apply(LogId::new(1, 7), [StateWrite { key: b"k", value: None }], none).unwrap();
    }
    let s = open(dir.path());
    assert_eq!(s.applied().unwrap(), LogId::new(1, 7));
    let r = s.consistent_reader();
    assert_eq!(r.get(b"k").unwrap(), None);
    assert_eq!(r.dump().unwrap(), vec![(b"k2".to_vec(), b"v2".to_vec())]);
    assert_eq!(s.sessions().unwrap(), vec![(7, b"session of 7".to_vec())]);
}

/// Applied batches are not in RocksDB's write-ahead log, the Raft log is
/// theirs: a crash loses those not flushed yet, together with the applied
/// id they set, and keeps every log entry to apply them again.
#[test]
fn a_crash_loses_unflushed_applied_batches_with_their_applied_id() {
    let dir = tempfile::tempdir().unwrap();
    let none: [(u64, Option<&[u8]>); 0] = [];
    {
        let s = open(dir.path());
        s.append(&[entry(1, 1, "a"), entry(1, 2, "b"), entry(1, 3, "c")], None, true).unwrap();
        s.apply(LogId::new(1, 1), [StateWrite { key: b"k", value: Some(b"1") }], [(7, Some(&b"s1"[..]))]).unwrap();
    }
    {
        // The clean close above flushed; this one crashes.
        let s = open(dir.path());
        assert_eq!(s.applied().unwrap(), LogId::new(1, 1));
        s.apply(
            LogId::new(1, 2),
            [StateWrite { key: b"k", value: Some(b"2") }, StateWrite { key: b"k2", value: Some(b"x") }],
            [(7, Some(&b"s2"[..]))],
        )
        .unwrap();
        s.apply(LogId::new(1, 3), [StateWrite { key: b"k", value: None }], none).unwrap();
        s.crash_after_writes(0);
    }
    let s = open(dir.path());
    assert_eq!(s.applied().unwrap(), LogId::new(1, 1));
    assert_eq!(s.consistent_reader().dump().unwrap(), vec![(b"k".to_vec(), b"1".to_vec())]);
    assert_eq!(s.sessions().unwrap(), vec![(7, b"s1".to_vec())]);
    assert_eq!(s.read_entries(Index(2), Index(4)).unwrap(), vec![entry(1, 2, "b"), entry(1, 3, "c")]);
}

/// RocksDB flushes the keyspace on its own once its memtable fills; the
/// applied id, in another column family, must reach the table files with
/// it (atomic flush), or a restart would find a state ahead of its applied
/// id and apply entries to it a second time.
#[test]
fn a_crash_after_a_flush_of_its_own_finds_the_state_at_its_applied_id() {
    let dir = tempfile::tempdir().unwrap();
    let none: [(u64, Option<&[u8]>); 0] = [];
    let value = vec![7u8; 1 << 20];
    let key = |i: u64| format!("batch-{i:03}").into_bytes();
    let batches = {
        let s = open(dir.path());
        // 24 MiB: past one memtable of the keyspace (16 MiB), far below what
        // makes the small column families flush on their own.
        let mut i = 0;
        while i < 24 {
            i += 1;
            s.apply(LogId::new(1, i), [StateWrite { key: &key(i), value: Some(&value) }], none).unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while s.flushes_pending().unwrap() {
            assert!(std::time::Instant::now() < deadline, "the flush never ended");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        i += 1;
        s.apply(LogId::new(1, i), [StateWrite { key: &key(i), value: Some(&value) }], none).unwrap();
        s.crash_after_writes(0);
        i
    };
    let s = open(dir.path());
    let applied = s.applied().unwrap().index.0;
    assert!(applied > 0 && applied < batches, "applied {applied}: the flush of its own kept a part of the {batches} batches");
    let keys: Vec<Vec<u8>> = s.consistent_reader().dump().unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, (1..=applied).map(key).collect::<Vec<_>>(), "the state holds exactly the batches up to the applied id");
}

#[test]
fn scans_respect_bounds_and_direction() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let keys = ["a", "b", "c", "d"];
    let none: [(u64, Option<&[u8]>); 0] = [];
    s.apply(LogId::new(1, 1), keys.iter().map(|k| StateWrite { key: k.as_bytes(), value: Some(b"1") }), none).unwrap();
    let r = s.apply_reader();
    let mut seen = Vec::new();
    r.scan(b"b", Some(b"d"), false, &mut |k, _| {
        seen.push(String::from_utf8(k.to_vec()).unwrap());
        true
    })
    .unwrap();
    assert_eq!(seen, ["b", "c"]);
    seen.clear();
    r.scan(b"b", None, true, &mut |k, _| {
        seen.push(String::from_utf8(k.to_vec()).unwrap());
        seen.len() < 2
    })
    .unwrap();
    assert_eq!(seen, ["d", "c"]);
}

#[test]
fn a_directory_of_another_node_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let err = Storage::open(&dir.path().join("db"), 2, StorageOptions::default()).unwrap_err();
    assert!(matches!(err, StorageError::Incompatible(ref m) if m.contains("node 1, not node 2")), "{err}");
}

#[test]
fn a_corrupt_log_record_is_reported_not_used() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.append(&[entry(1, 1, "a"), entry(1, 2, "b"), entry(1, 3, "c")], None, true).unwrap();
    }
    // Damage entry `index` behind the store's back.
    let damage = |index: u64| {
        let cfs = ["log", "raft", "state", "meta"];
        let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), dir.path().join("db"), cfs).unwrap();
        let log = db.cf_handle("log").unwrap();
        let mut bytes = db.get_cf(log, index.to_be_bytes()).unwrap().unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        db.put_cf(log, index.to_be_bytes(), bytes).unwrap();
    };
    damage(2);
    let s = open(dir.path());
    let err = s.read_entries(Index(1), Index(4)).unwrap_err();
    assert!(err.to_string().contains("corrupt log entry record at index 2: checksum mismatch"), "{err}");
    drop(s);
    // The last entry is read at open (its term): a damaged one stops the
    // open instead of giving the core a wrong last term.
    damage(3);
    let err = Storage::open(&dir.path().join("db"), 1, StorageOptions::default()).unwrap_err();
    assert!(err.to_string().contains("corrupt log entry record at index 3: checksum mismatch"), "{err}");
}

/// Installing a snapshot replaces every client session, whatever its id:
/// ids are random, and those starting with 0xff once survived the install
/// (so replicas could make different exactly-once decisions).
#[test]
fn a_snapshot_replaces_every_session() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let none: [StateWrite<'_>; 0] = [];
    let high = u64::MAX - 5; // first byte 0xff
    s.apply(LogId::new(1, 3), none, [(7, Some(&b"old 7"[..])), (high, Some(&b"old high"[..]))]).unwrap();
    let meta = wasmraft_raft::SnapshotMeta { last: LogId::new(2, 10), membership: Membership::new([NodeId(1)]) };
    let part = wasmraft_storage::SnapshotPart {
        state: vec![(b"k".to_vec(), b"v".to_vec())],
        sessions: vec![(9u64.to_be_bytes().to_vec(), b"new 9".to_vec())],
        system: vec![],
    };
    let mut staging = s.stage_snapshot(&meta, u64::MAX).unwrap();
    staging.add(part).unwrap();
    s.install_snapshot(staging.finish().unwrap()).unwrap();
    assert_eq!(s.sessions().unwrap(), vec![(9, b"new 9".to_vec())]);
}

/// The keyspace hash that replicas compare covers the client sessions too:
/// two replicas that agree on the state but not on an exactly-once record
/// are told apart.
#[test]
fn the_keyspace_hash_covers_sessions() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (open(a.path()), open(b.path()));
    for s in [&a, &b] {
        s.apply(LogId::new(1, 3), [StateWrite { key: b"k", value: Some(b"v") }], [(7, Some(&b"seq 1"[..]))]).unwrap();
    }
    assert_eq!(a.state_hash().unwrap(), b.state_hash().unwrap());
    let none: [StateWrite<'_>; 0] = [];
    b.apply(LogId::new(1, 4), none, [(7, Some(&b"seq 2"[..]))]).unwrap();
    assert_ne!(a.state_hash().unwrap(), b.state_hash().unwrap(), "a session differs");
}

/// A hash pass over a consistent reader sees the applied index the reader
/// was taken at, whatever is applied while it runs (the apply thread takes
/// the reader and another thread hashes it), and stops when told to.
#[test]
fn a_keyspace_hash_of_a_consistent_reader_ignores_later_writes() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let keys: Vec<Vec<u8>> = (0..10_000u32).map(|i| format!("key-{i:05}").into_bytes()).collect();
    s.apply(LogId::new(1, 1), keys.iter().map(|k| StateWrite { key: k, value: Some(b"v") }), [(7, Some(&b"seq 1"[..]))])
        .unwrap();
    let at_one = s.state_hash_counted().unwrap();
    let reader = s.consistent_reader();
    s.apply(LogId::new(1, 2), [StateWrite { key: b"key-00001", value: None }], [(7, Some(&b"seq 2"[..]))]).unwrap();
    let at_two = s.state_hash_counted().unwrap();
    assert_ne!(at_one.0, at_two.0, "a write changes the hash");
    assert_eq!(reader.keyspace_hash(&|| true).unwrap(), Some(at_one), "the reader's index, not the live one");
    // 10,001 records and the marker: asked at least twice whether to go on.
    let asked = std::cell::Cell::new(0);
    let stopped = reader.keyspace_hash(&|| {
        asked.set(asked.get() + 1);
        false
    });
    assert_eq!(stopped.unwrap(), None);
    assert_eq!(asked.get(), 1, "the first answer stops the pass");
}

/// Membership, member addresses and log time are replicated records: they
/// move with the applied index in one write, and a snapshot taken at that
/// index carries exactly them.
#[test]
fn membership_and_addresses_are_written_with_the_applied_index() {
    let dir = tempfile::tempdir().unwrap();
    let joined = Membership::new([NodeId(1), NodeId(2)]);
    {
        let s = open(dir.path());
        s.bootstrap(&Membership::new([NodeId(1)])).unwrap();
        let none: [StateWrite<'_>; 0] = [];
        let no_sessions: [(u64, Option<&[u8]>); 0] = [];
        let records = wasmraft_storage::AppliedRecords {
            membership: Some(joined.clone()),
            addresses: vec![(2, "127.0.0.1:7480".into())],
            log_time_ms: Some(1_700_000_000_000),
        };
        assert_eq!(s.log_time_ms().unwrap(), None);
        s.apply_with_records(LogId::new(1, 4), none, no_sessions, &records).unwrap();
        let meta = s.take_snapshot().unwrap();
        assert_eq!(meta.last, LogId::new(1, 4));
        assert_eq!(meta.membership, joined, "the snapshot carries the membership of its index");
        let data = s.snapshot_reader(meta.last.index).unwrap().read_all().unwrap();
        assert_eq!(data.system.len(), 2, "the snapshot carries the address and log time: {:?}", data.system);
    }
    let s = open(dir.path());
    assert_eq!(s.applied().unwrap(), LogId::new(1, 4));
    assert_eq!(s.applied_membership().unwrap(), joined);
    assert_eq!(s.addresses().unwrap(), vec![(2, "127.0.0.1:7480".to_string())]);
    assert_eq!(s.log_time_ms().unwrap(), Some(1_700_000_000_000));
}

/// The entry that deploys a plugin may also be where sessions are swept:
/// those changes are part of its one atomic write.
#[test]
fn a_deploy_writes_its_session_changes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let none: [StateWrite<'_>; 0] = [];
    s.apply(LogId::new(1, 3), none, [(7, Some(&b"seq 1"[..]))]).unwrap();
    let record = wasmraft_storage::DeployedPlugin {
        name: "p".into(),
        version: "1".into(),
        sha256: "00".into(),
        sdk_version: "0".into(),
        deployed_at: 4,
    };
    s.deploy_plugin(LogId::new(1, 4), none, [(7, None)], &record, b"\0asm").unwrap();
    assert_eq!(s.applied().unwrap(), LogId::new(1, 4));
    assert!(s.sessions().unwrap().is_empty(), "the swept session is gone");
}

/// The note of log time a node reads at its restart: the periodic one, and
/// the replacement a rewind writes before entries leave the log, which a
/// crash right after it keeps (a crash point counts it as a write).
#[test]
fn a_replaced_log_time_note_survives_a_crash_and_none_removes_it() {
    let note = |log_time_ms, wall_ms| LogTimeNote { log_time_ms, wall_ms, boot: None };
    let booted = LogTimeNote { boot: Some(BootTime { boot_id: [3; 16], ms: 55 }), ..note(7_000, 200) };
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        assert_eq!(s.log_time_note().unwrap(), None);
        s.note_log_time(&note(9_000, 100)).unwrap();
        assert_eq!(s.log_time_note().unwrap(), Some(note(9_000, 100)));
        s.crash_after_writes(1);
        s.replace_log_time_note(Some(&booted)).unwrap();
        assert!(matches!(s.replace_log_time_note(Some(&note(1, 1))), Err(StorageError::Crashed)));
        assert!(matches!(s.note_log_time(&note(1, 1)), Err(StorageError::Crashed)));
    }
    let s = open(dir.path());
    assert_eq!(s.log_time_note().unwrap(), Some(booted));
    s.replace_log_time_note(None).unwrap();
    assert_eq!(s.log_time_note().unwrap(), None);
}

/// A note appended with entries is in their write batch: a crash point
/// that refuses the append leaves neither, one that lets it through both.
#[test]
fn a_note_appended_with_entries_is_written_with_them_or_not_at_all() {
    let note = LogTimeNote { log_time_ms: 5_000, wall_ms: 9_000, boot: Some(BootTime { boot_id: [1; 16], ms: 70 }) };
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.crash_after_writes(0);
        assert!(matches!(s.append_noted(&[entry(1, 1, "a")], None, NoteChange::Write(note), true), Err(StorageError::Crashed)));
    }
    {
        let s = open(dir.path());
        assert_eq!(s.log_bounds().1, Index(0));
        assert_eq!(s.log_time_note().unwrap(), None);
        s.crash_after_writes(1);
        s.append_noted(&[entry(1, 1, "a")], None, NoteChange::Write(note), true).unwrap();
    }
    let s = open(dir.path());
    assert_eq!(s.log_bounds().1, Index(1));
    assert_eq!(s.log_time_note().unwrap(), Some(note));
}

/// A rewind of log time removes the note in the write that replaces the
/// suffix whose stamps it counted: a crash point that refuses the write
/// leaves the suffix and the note, one that lets it through neither.
#[test]
fn a_note_removed_with_a_replaced_suffix_goes_with_it_or_not_at_all() {
    let note = LogTimeNote { log_time_ms: 5_000, wall_ms: 9_000, boot: None };
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.append_noted(&[entry(1, 1, "a"), entry(1, 2, "b")], None, NoteChange::Write(note), true).unwrap();
        s.crash_after_writes(0);
        let replaced = s.append_noted(&[entry(2, 2, "b2")], None, NoteChange::Remove, true);
        assert!(matches!(replaced, Err(StorageError::Crashed)));
    }
    {
        let s = open(dir.path());
        assert_eq!(s.term(Index(2)), Ok(Term(1)));
        assert_eq!(s.log_time_note().unwrap(), Some(note));
        s.crash_after_writes(1);
        s.append_noted(&[entry(2, 2, "b2")], None, NoteChange::Remove, true).unwrap();
    }
    let s = open(dir.path());
    assert_eq!(s.term(Index(2)), Ok(Term(2)));
    assert_eq!(s.log_time_note().unwrap(), None);
}

/// The log's writes are durable in its own segment files, not in RocksDB's
/// WAL: a crash before any flush keeps every entry, the hard state and the
/// note, written again into RocksDB at the next open.
#[test]
fn a_crash_before_any_flush_keeps_the_log_from_its_segments() {
    let dir = tempfile::tempdir().unwrap();
    let hs = HardState { term: Term(3), vote: Some(NodeId(2)), commit: Index(2) };
    let note = LogTimeNote { log_time_ms: 4_000, wall_ms: 8_000, boot: None };
    {
        let s = open(dir.path());
        s.append(&[entry(1, 1, "a"), entry(2, 2, "b"), entry(2, 3, "c")], None, true).unwrap();
        // A conflicting suffix replaced, with the hard state and a note.
        s.append_noted(&[entry(3, 3, "c3"), entry(3, 4, "d3")], Some(&hs), NoteChange::Write(note), true).unwrap();
        s.crash_after_writes(0);
    }
    let s = open(dir.path());
    assert_eq!(s.hard_state(), hs);
    assert_eq!(s.log_time_note().unwrap(), Some(note));
    assert_eq!(s.log_bounds(), (Index(1), Index(4)));
    assert_eq!(
        s.read_entries(Index(1), Index(5)).unwrap(),
        vec![entry(1, 1, "a"), entry(2, 2, "b"), entry(3, 3, "c3"), entry(3, 4, "d3")]
    );
    // Written again and flushed at that open: without the segments, a
    // crash now still finds them.
    s.crash_after_writes(0);
    drop(s);
    for segment in ["raftlog-0.seg", "raftlog-1.seg"] {
        std::fs::remove_file(dir.path().join("db").join(segment)).unwrap();
    }
    let s = open(dir.path());
    assert_eq!(s.hard_state(), hs);
    assert_eq!(s.read_entries(Index(1), Index(5)).unwrap().len(), 4);
}

/// Small segments that fill many times over, with truncations, notes and
/// a crash after each round: every record is kept, whichever segment and
/// turn it was in.
#[test]
fn segments_taking_turns_lose_no_record_across_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let options = || StorageOptions { log_segment_bytes: 8 << 10, ..StorageOptions::default() };
    let mut model: Vec<Entry> = Vec::new();
    let mut hs = HardState::default();
    let mut last_note = None;
    let payload = |term: u64, index: u64| format!("{term}-{index}-{}", "x".repeat(150));
    for round in 0..4u64 {
        let s = Storage::open(&dir.path().join("db"), 1, options()).unwrap();
        assert_eq!(s.log_bounds(), (Index(1), Index(model.len() as u64)), "round {round}");
        assert_eq!(s.read_entries(Index(1), Index(model.len() as u64 + 1)).unwrap(), model, "round {round}");
        assert_eq!(s.hard_state(), hs, "round {round}");
        for batch in 0..60u64 {
            let term = round * 100 + batch / 10 + 1;
            // Every tenth batch replaces the last two entries (a new term's leader).
            let start = if batch % 10 == 9 && model.len() > 2 { model.len() - 2 } else { model.len() };
            model.truncate(start);
            for index in start as u64 + 1..=start as u64 + 4 {
                model.push(Entry { log_id: LogId::new(term, index), payload: EntryPayload::Normal(payload(term, index).into_bytes()) });
            }
            hs = HardState { term: Term(term), vote: Some(NodeId(1)), commit: Index(start as u64) };
            s.append(&model[start..], Some(&hs), true).unwrap();
            if batch % 7 == 0 {
                let note = LogTimeNote { log_time_ms: batch, wall_ms: round, boot: None };
                // A note never waits: not for a full segment either.
                match s.note_log_time(&note) {
                    Ok(()) => last_note = Some(note),
                    Err(StorageError::Busy(_)) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
        s.crash_after_writes(0);
    }
    let s = Storage::open(&dir.path().join("db"), 1, options()).unwrap();
    assert_eq!(s.read_entries(Index(1), Index(model.len() as u64 + 1)).unwrap(), model);
    assert_eq!(s.hard_state(), hs);
    assert!(last_note.is_some());
    assert_eq!(s.log_time_note().unwrap(), last_note);
}

/// The Raft loop saves a commit index alone, from its own thread: the save
/// survives a crash, and a full segment makes it busy (and changes
/// nothing) instead of being turned by it.
#[test]
fn a_hard_state_saved_alone_survives_a_crash_and_never_turns_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let options = || StorageOptions { log_segment_bytes: 8 << 10, ..StorageOptions::default() };
    let hs = |commit| HardState { term: Term(1), vote: Some(NodeId(1)), commit: Index(commit) };
    let s = Storage::open(&dir.path().join("db"), 1, options()).unwrap();
    s.append(&[entry(1, 1, "a")], Some(&hs(0)), true).unwrap();
    let mut commit = 0;
    let busy_at = loop {
        commit += 1;
        assert!(commit < 10_000, "the segment never filled");
        match s.try_save_hard_state(&hs(commit)) {
            Ok(()) => assert_eq!(s.hard_state(), hs(commit)),
            Err(StorageError::Busy(_)) => break commit,
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(s.hard_state(), hs(busy_at - 1), "a busy save changes nothing");
    // A write of entries may turn the segment; then the save fits again.
    s.append(&[entry(1, 2, "b")], None, true).unwrap();
    s.try_save_hard_state(&hs(busy_at)).unwrap();
    s.crash_after_writes(0);
    drop(s);
    let s = Storage::open(&dir.path().join("db"), 1, options()).unwrap();
    assert_eq!(s.hard_state(), hs(busy_at));
    assert_eq!(s.read_entries(Index(1), Index(3)).unwrap().len(), 2);
}

/// Runs `write` on another thread: it must end within 10 s (a write that
/// waits out a stall of RocksDB's writes never ends here).
fn ends_soon<T: Send + 'static>(write: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(write()));
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the write waited for RocksDB's stall")
}

/// The Raft loop's try-writes (a note of log time, a commit index kept
/// back) are refused at once while RocksDB stalls writes, and change
/// nothing: the refused record is cleared from its segment, so that no
/// recovery takes it for one, whether the next record takes its place (a
/// shorter one leaves its tail), a crash comes first, or the next write
/// turns the segment and starts the other with the same number.
#[test]
fn a_try_write_is_refused_while_rocksdb_stalls_writes() {
    let note = LogTimeNote { log_time_ms: 5_000, wall_ms: 9_000, boot: Some(BootTime { boot_id: [1; 16], ms: 70 }) };
    let hs = |commit| HardState { term: Term(1), vote: Some(NodeId(1)), commit: Index(commit) };
    let busy = |result: Result<(), StorageError>| assert!(matches!(result, Err(StorageError::Busy(_))), "{result:?}");
    // 8 KiB segments: 40 entries fill more than half of the first, and an
    // entry of 6 KiB then turns it.
    let options = || StorageOptions { log_segment_bytes: 8 << 10, ..StorageOptions::default() };
    let filler: Vec<Entry> = (1..=40).map(|i| entry(1, i, &"x".repeat(100))).collect();
    for then in ["crash", "write in its place", "turn the segment"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Storage::open(&dir.path().join("db"), 1, options()).unwrap();
            s.append(&filler, Some(&hs(0)), true).unwrap();
            s.stall_writes(true).unwrap();
            let stalled = s.clone();
            busy(ends_soon(move || stalled.note_log_time(&note)));
            let stalled = s.clone();
            busy(ends_soon(move || stalled.try_save_hard_state(&hs(1))));
            assert_eq!(s.hard_state(), hs(0), "a refused save changed the hard state");
            assert_eq!(s.log_time_note().unwrap(), None, "a refused note reached RocksDB");
            s.stall_writes(false).unwrap();
            match then {
                "crash" => {}
                // Shorter than the refused note's record: its tail stays.
                "write in its place" => s.try_save_hard_state(&hs(2)).unwrap(),
                // With the flush of the segment it leaves held: its records
                // are still to replay after the crash.
                _ => {
                    s.hold_log_flushes(true);
                    s.append(&[entry(1, 41, &"y".repeat(6 << 10))], None, true).unwrap();
                }
            }
            s.crash_after_writes(0);
            s.hold_log_flushes(false);
        }
        let s = Storage::open(&dir.path().join("db"), 1, options()).unwrap();
        let (last, commit) = match then {
            "crash" => (40, 0),
            "write in its place" => (40, 2),
            _ => (41, 0),
        };
        assert_eq!((s.log_bounds().1, s.hard_state()), (Index(last), hs(commit)), "then {then}");
        assert_eq!(s.log_time_note().unwrap(), None, "then {then}: a refused note was read back");
        s.append(&[entry(1, last + 1, "c")], Some(&hs(3)), true).unwrap();
        s.crash_after_writes(0);
        drop(s);
        let s = Storage::open(&dir.path().join("db"), 1, options()).unwrap();
        assert_eq!((s.log_bounds().1, s.hard_state()), (Index(last + 1), hs(3)), "then {then}");
    }
}

/// A segment is written again only once a flush has put its records in
/// table files: with flushes held (a slow disk), a writer that has filled
/// both segments waits, and a crash then loses no acknowledged append.
#[test]
fn a_full_segment_waits_for_the_flush_of_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let options = StorageOptions { log_segment_bytes: 8 << 10, ..StorageOptions::default() };
    let s = Storage::open(&dir.path().join("db"), 1, options.clone()).unwrap();
    s.hold_log_flushes(true);
    let writer = {
        let s = s.clone();
        std::thread::spawn(move || {
            let mut acked = 0u64;
            for index in 1..=1_000u64 {
                let hs = HardState { term: Term(1), vote: Some(NodeId(1)), commit: Index(index - 1) };
                match s.append(&[entry(1, index, &"y".repeat(200))], Some(&hs), true) {
                    Ok(()) => acked = index,
                    Err(e) => return (acked, Some(e)),
                }
            }
            (acked, None)
        })
    };
    assert!(s.log_write_waits_for_flush(std::time::Duration::from_secs(60)), "a writer went on into a segment whose records were not flushed");
    s.crash_after_writes(0);
    s.hold_log_flushes(false);
    let (acked, err) = writer.join().unwrap();
    assert_eq!(err, Some(StorageError::Crashed), "the held flush never came: the writer stops with the crash");
    assert!(acked > 40, "both segments filled first ({acked} appends)");
    drop(s);
    let s = Storage::open(&dir.path().join("db"), 1, options).unwrap();
    assert_eq!(s.log_bounds(), (Index(1), Index(acked)));
    assert_eq!(s.read_entries(Index(1), Index(acked + 1)).unwrap().len() as u64, acked);
    assert_eq!(s.hard_state().commit, Index(acked - 1));
}
