//! The KV plugin's history through etcd's API, driven by etcdctl against
//! three `wasmraft run` processes: reads at past revisions, watches that
//! replay history from a revision, compaction (by a client and
//! automatically) and keyspace hashes that agree across members.

mod cluster;

use std::time::Duration;

use cluster::etcdctl::*;
use cluster::*;

fn put(endpoints: &str, key: &str, value: &str) -> i64 {
    revision(&ok(endpoints, &["put", key, value, "-w", "json"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_reads_the_past_replays_watches_and_compacts() {
    let _serial = serial();
    let cluster = Cluster::start_with(3, "").await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    let all = cluster.endpoints(0).join(",");
    let at_follower = cluster.addr(follower).to_string();

    // Four revisions of one key: v1, v2, deleted, v3.
    let r1 = put(&all, "k", "v1");
    let r2 = put(&at_follower, "k", "v2");
    let r3 = revision(&ok(&all, &["del", "k", "-w", "json"]));
    let r4 = put(&all, "k", "v3");
    assert_eq!((r2, r3, r4), (r1 + 1, r1 + 2, r1 + 3));

    // Reads at each revision, linearizable and serializable, on any member.
    for endpoint in [all.as_str(), at_follower.as_str()] {
        assert_eq!(ok(endpoint, &["get", "k", &format!("--rev={r1}")]), "k\nv1\n");
        assert_eq!(ok(endpoint, &["get", "k", &format!("--rev={r2}"), "--consistency=s"]), "k\nv2\n");
        assert_eq!(ok(endpoint, &["get", "k", &format!("--rev={r3}")]), "");
        assert_eq!(ok(endpoint, &["get", "k", &format!("--rev={r4}")]), "k\nv3\n");
    }
    let json = ok(&all, &["get", "k", &format!("--rev={r2}"), "-w", "json"]);
    assert!(json.contains(&format!("\"mod_revision\":{r2}")) && json.contains("\"version\":2"), "{json}");
    assert_eq!(revision(&json), r4, "the header names the current revision");
    let (success, _, err) = etcdctl(&all, &["get", "k", &format!("--rev={}", r4 + 1000)], None);
    assert!(!success && err.contains("etcdserver: mvcc: required revision is a future revision"), "{err}");

    // A watch from r1, through a follower: every change since, in order,
    // then the live ones, none twice.
    let watch = Watch::start(&at_follower, &["k", &format!("--rev={r1}"), "--prev-kv"]);
    watch.wait_for(Duration::from_secs(20), |l| l.iter().filter(|l| *l == "PUT" || *l == "DELETE").count() >= 4).await;
    let r5 = put(&all, "k", "v4");
    watch.wait_for(Duration::from_secs(20), |l| l.iter().any(|l| l == "v4")).await;
    let lines = watch.stop();
    assert_eq!(
        lines.join("\n"),
        ["PUT", "k", "v1", "PUT", "k", "v1", "k", "v2", "DELETE", "k", "v2", "k", "", "PUT", "k", "v3", "PUT", "k", "v3", "k", "v4"]
            .join("\n")
    );

    // Compaction: older revisions are gone, the compacted one and newer
    // ones read as before, on every member.
    assert_eq!(ok(&all, &["compaction", &r3.to_string()]), format!("compacted revision {r3}\n"));
    for id in cluster.ids() {
        let endpoint = cluster.addr(id).to_string();
        let (success, _, err) = etcdctl(&endpoint, &["get", "k", &format!("--rev={r2}"), "--consistency=s"], None);
        // A member may not have applied the compaction yet: wait for it.
        if success {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while etcdctl(&endpoint, &["get", "k", &format!("--rev={r2}"), "--consistency=s"], None).0 {
                assert!(std::time::Instant::now() < deadline, "node {id} never applied the compaction");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            assert!(err.contains("etcdserver: mvcc: required revision has been compacted"), "{err}");
        }
        assert_eq!(ok(&endpoint, &["get", "k", &format!("--rev={r3}")]), "");
        assert_eq!(ok(&endpoint, &["get", "k", &format!("--rev={r4}")]), "k\nv3\n");
    }
    let (success, _, err) = etcdctl(&all, &["compaction", &r2.to_string()], None);
    assert!(!success && err.contains("required revision has been compacted"), "{err}");
    let (success, out, err) = etcdctl(&all, &["watch", "k", &format!("--rev={r2}")], None);
    assert!(!success && format!("{out}{err}").contains("required revision has been compacted"), "{out}{err}");
    let watch = Watch::start(&all, &["k", &format!("--rev={r3}")]);
    watch.wait_for(Duration::from_secs(20), |l| l.iter().any(|l| l == "v4")).await;
    assert_eq!(watch.stop().join("\n"), ["DELETE", "k", "", "PUT", "k", "v3", "PUT", "k", "v4"].join("\n"));

    // Hashes of one revision agree across members (each answers once it
    // has applied the revision), and differ from another revision's.
    let hashes = |rev: i64| {
        let mut hashes = Vec::new();
        for id in cluster.ids() {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let out = loop {
                let (success, out, err) = etcdctl(&cluster.addr(id).to_string(), &["endpoint", "hashkv", &format!("--rev={rev}")], None);
                if success {
                    break out;
                }
                assert!(err.contains("future revision") && std::time::Instant::now() < deadline, "node {id}: {err}");
                std::thread::sleep(Duration::from_millis(50));
            };
            // "ENDPOINT, HASH[, more columns]"
            let hash = out.trim().split(", ").nth(1).unwrap_or_default().to_string();
            assert!(hash.parse::<u32>().is_ok(), "{out}");
            hashes.push(hash);
        }
        hashes
    };
    let at_r5 = hashes(r5);
    assert!(at_r5.iter().all(|h| *h == at_r5[0]), "{at_r5:?}");
    put(&all, "k", "v5");
    put(&all, "other", "x");
    assert_eq!(hashes(r5), at_r5, "later writes do not change the hash of r5");
    assert_ne!(hashes(r4)[0], at_r5[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_auto_compaction_discards_revisions_older_than_the_retention() {
    let _serial = serial();
    let cluster = Cluster::start_with(3, "[etcd]\nauto_compaction_mode = \"periodic\"\nauto_compaction_retention = \"1s\"").await;
    let all = cluster.endpoints(0).join(",");
    let first = put(&all, "k", "old");
    // The leader compacts at the revision it saw a retention ago: keep
    // writing until the first revision is gone (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = first;
    loop {
        let (success, _, err) = etcdctl(&all, &["get", "k", &format!("--rev={first}")], None);
        if !success {
            assert!(err.contains("required revision has been compacted"), "{err}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "revision {first} was never compacted");
        last = put(&all, "k", "new");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The newest revision always stays readable.
    assert_eq!(ok(&all, &["get", "k", &format!("--rev={last}")]), "k\nnew\n");
}

/// A watcher that asks for fragments (clientv3's `WithFragment`) gets an
/// answer over the request limit in parts, all but the last marked
/// `fragment`, every event once; one that does not gets whole answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_asks_for_fragments_gets_large_answers_in_parts() {
    use wasmraft_proto::etcdserverpb::kv_client::KvClient;
    use wasmraft_proto::etcdserverpb::watch_client::WatchClient;
    use wasmraft_proto::etcdserverpb::watch_request::RequestUnion;
    use wasmraft_proto::etcdserverpb::{PutRequest, WatchCreateRequest, WatchRequest};

    let _serial = serial();
    let cluster = Cluster::start_with(3, "").await;
    let addr = cluster.addr(cluster.leader().await).to_string();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    // Three values of 1 MiB: one page of history, over the 1.5 MiB limit.
    let mut kv = KvClient::new(channel.clone());
    let mut first = 0;
    for i in 0..3 {
        let put = PutRequest { key: format!("frag/{i}").into(), value: vec![b'x'; 1 << 20], ..Default::default() };
        let revision = kv.put(put).await.unwrap().into_inner().header.unwrap().revision;
        if i == 0 {
            first = revision;
        }
    }
    let mut watch = WatchClient::new(channel).max_decoding_message_size(16 << 20);
    for fragment in [false, true] {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let create = WatchCreateRequest {
            key: b"frag/".to_vec(),
            range_end: b"frag0".to_vec(),
            start_revision: first,
            fragment,
            ..Default::default()
        };
        tx.send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) }).await.unwrap();
        let mut stream = watch.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let (mut keys, mut marks) = (Vec::new(), Vec::new());
        while keys.len() < 3 {
            let r = tokio::time::timeout(Duration::from_secs(10), stream.message()).await.unwrap().unwrap().unwrap();
            if r.created {
                continue;
            }
            keys.extend(r.events.iter().map(|e| String::from_utf8_lossy(&e.kv.as_ref().unwrap().key).to_string()));
            marks.push(r.fragment);
        }
        assert_eq!(keys, ["frag/0", "frag/1", "frag/2"], "every event once, in order (fragment: {fragment})");
        if fragment {
            assert!(marks.len() >= 2 && !marks.last().unwrap() && marks[..marks.len() - 1].iter().all(|m| *m), "{marks:?}");
        } else {
            assert!(marks.iter().all(|m| !m), "{marks:?}");
        }
        drop(tx);
    }
}

/// A watch stream whose client stops reading falls behind the live events
/// (more than the node buffers); its watcher catches up from the kept
/// history instead of being cancelled: every revision once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_falls_behind_catches_up_from_history() {
    use wasmraft_proto::etcdserverpb::kv_client::KvClient;
    use wasmraft_proto::etcdserverpb::watch_client::WatchClient;
    use wasmraft_proto::etcdserverpb::watch_request::RequestUnion;
    use wasmraft_proto::etcdserverpb::{PutRequest, WatchCreateRequest, WatchRequest};

    const PUTS: usize = 8000;
    let _serial = serial();
    let cluster = Cluster::start_with(3, "").await;
    let leader = cluster.leader().await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.addr(leader))).unwrap().connect().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let create = WatchCreateRequest { key: b"lag/".to_vec(), range_end: b"lag0".to_vec(), ..Default::default() };
    tx.send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) }).await.unwrap();
    let mut stream = WatchClient::new(channel.clone()).watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    let created = stream.message().await.unwrap().unwrap();
    assert!(created.created, "{created:?}");

    // Not reading while 8,000 events of 2 KiB are applied: far more than
    // the node's event buffer and the stream's windows hold.
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let mut kv = KvClient::new(channel.clone());
            tokio::spawn(async move {
                for i in (w..PUTS).step_by(16) {
                    let put = PutRequest { key: format!("lag/{i:05}").into(), value: vec![b'v'; 2048], ..Default::default() };
                    kv.put(put).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }

    let mut keys = std::collections::BTreeSet::new();
    let mut last = 0;
    while keys.len() < PUTS {
        let r = tokio::time::timeout(Duration::from_secs(20), stream.message()).await.unwrap().unwrap().unwrap();
        assert!(!r.canceled, "the watcher was cancelled: {r:?}");
        for e in r.events {
            let kv = e.kv.unwrap();
            assert!(kv.mod_revision > last, "revision {} after {last}: a repeat or out of order", kv.mod_revision);
            last = kv.mod_revision;
            assert!(keys.insert(kv.key), "a key twice");
        }
    }
    assert!(
        cluster.log(leader).contains("a watch stream fell behind; catching up from history"),
        "the stream never fell behind: the test did not test the catch-up"
    );
    drop(tx);
}

/// Several watchers on one stream, each with its own range and filters;
/// a cancelled one gets nothing more, the others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_on_one_stream_keep_their_own_ranges_filters_and_cancels() {
    use wasmraft_proto::etcdserverpb::kv_client::KvClient;
    use wasmraft_proto::etcdserverpb::watch_client::WatchClient;
    use wasmraft_proto::etcdserverpb::watch_create_request::FilterType;
    use wasmraft_proto::etcdserverpb::watch_request::RequestUnion;
    use wasmraft_proto::etcdserverpb::{DeleteRangeRequest, PutRequest, WatchCancelRequest, WatchCreateRequest, WatchRequest, WatchResponse};
    use wasmraft_proto::mvccpb::event::EventType;

    let _serial = serial();
    let cluster = Cluster::start_with(3, "").await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.addr(1))).unwrap().connect().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let mut stream = WatchClient::new(channel.clone()).watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    macro_rules! next {
        () => {
            tokio::time::timeout(Duration::from_secs(10), stream.message()).await.unwrap().unwrap().unwrap()
        };
    }
    let create = |key: &str, range_end: &str, filters: Vec<i32>| WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: key.into(),
            range_end: range_end.into(),
            filters,
            ..Default::default()
        })),
    };
    // 0: every change under w/; 1: deletes of w/x only; 2: puts under w/, cancelled below.
    tx.send(create("w/", "w0", vec![])).await.unwrap();
    tx.send(create("w/x", "", vec![FilterType::Noput as i32])).await.unwrap();
    tx.send(create("w/", "w0", vec![FilterType::Nodelete as i32])).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = next!();
        assert!(r.created, "{r:?}");
        ids.push(r.watch_id);
    }
    let mut kv = KvClient::new(channel);
    let put = |key: &str| PutRequest { key: key.into(), value: b"v".to_vec(), ..Default::default() };
    kv.put(put("w/x")).await.unwrap();
    kv.put(put("w/y")).await.unwrap();
    kv.delete_range(DeleteRangeRequest { key: b"w/x".to_vec(), ..Default::default() }).await.unwrap();

    // What each watcher saw: (watch id, event type, key).
    let mut seen: Vec<(i64, i32, String)> = Vec::new();
    let record = |r: WatchResponse, seen: &mut Vec<(i64, i32, String)>| {
        for e in r.events {
            seen.push((r.watch_id, e.r#type, String::from_utf8_lossy(&e.kv.unwrap().key).into()));
        }
    };
    while seen.len() < 6 {
        record(next!(), &mut seen);
    }
    let (put_t, del_t) = (EventType::Put as i32, EventType::Delete as i32);
    let of = |id: i64| seen.iter().filter(|s| s.0 == id).map(|s| (s.1, s.2.clone())).collect::<Vec<_>>();
    assert_eq!(of(ids[0]), [(put_t, "w/x".into()), (put_t, "w/y".into()), (del_t, "w/x".into())]);
    assert_eq!(of(ids[1]), [(del_t, "w/x".to_string())]);
    assert_eq!(of(ids[2]), [(put_t, "w/x".to_string()), (put_t, "w/y".to_string())]);

    // Cancel watcher 2: it is answered, and only watcher 0 sees the next put.
    tx.send(WatchRequest { request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest { watch_id: ids[2] })) }).await.unwrap();
    let r = next!();
    assert!(r.canceled && r.watch_id == ids[2], "{r:?}");
    kv.put(put("w/z")).await.unwrap();
    let r = next!();
    assert_eq!(r.watch_id, ids[0], "{r:?}");
    assert_eq!(r.events.len(), 1);
    // Nothing else comes: a put outside every range, then one the first sees.
    kv.put(put("elsewhere")).await.unwrap();
    kv.put(put("w/last")).await.unwrap();
    let r = next!();
    assert_eq!((r.watch_id, r.events[0].kv.as_ref().unwrap().key.as_slice()), (ids[0], &b"w/last"[..]));
    drop(tx);
}
