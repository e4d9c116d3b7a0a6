//! Txn: compares, then one branch of operations, all at one revision.

use std::collections::BTreeSet;

use crate::KvError;
use crate::history;
use crate::keyspace::{self, Revision};
use crate::ops;
use crate::pb::etcdserverpb::{
    Compare, RequestOp, ResponseOp, TxnRequest, TxnResponse, compare::CompareResult,
    compare::CompareTarget, compare::TargetUnion, request_op::Request, response_op::Response,
};
use crate::pb::mvccpb::KeyValue;

/// etcd's default `--max-txn-ops`: the most compares, or ops of one
/// branch, a txn holds; a nested txn gets what its parent left.
const MAX_TXN_OPS: usize = 128;
const ERR_DUPLICATE_KEY: &str = "etcdserver: duplicate key given in txn request";

/// Runs a txn as etcd does: the request is checked whole (every branch,
/// at every level), then every compare on the path taken, nested ones
/// too, and the ops on that path are checked against the state before the
/// txn writes; only then do the ops run, in order, at one revision.
pub(crate) fn txn(r: &TxnRequest, rev: &mut Revision) -> Result<TxnResponse, KvError> {
    check_request(r, MAX_TXN_OPS)?;
    check_intervals(&r.success)?;
    check_intervals(&r.failure)?;
    let mut path = Vec::new();
    compare_path(r, &mut path);
    check_path(r, &mut path.iter(), rev)?;
    run(r, &mut path.iter(), rev)
}

/// The branch the compare results say, one result per txn on the path.
fn branch<'a>(r: &'a TxnRequest, path: &mut std::slice::Iter<'_, bool>) -> (bool, &'a [RequestOp]) {
    let succeeded = *path.next().expect("a compare result for every txn on the path");
    (succeeded, if succeeded { &r.success } else { &r.failure })
}

fn run(r: &TxnRequest, path: &mut std::slice::Iter<'_, bool>, rev: &mut Revision) -> Result<TxnResponse, KvError> {
    let (succeeded, requests) = branch(r, path);
    let mut responses = Vec::with_capacity(requests.len());
    for op in requests {
        let response = match &op.request {
            Some(Request::RequestTxn(t)) => Response::ResponseTxn(run(t, path, rev)?),
            Some(request) => ops::execute(request, rev)?,
            None => return Err(KvError::Invalid(ops::ERR_KEY_NOT_FOUND)),
        };
        responses.push(ResponseOp { response: Some(response) });
    }
    // Every response of the txn reports the txn's final revision, as etcd does.
    for resp in &mut responses {
        set_revision(resp, rev.current());
    }
    Ok(TxnResponse { header: ops::header(rev), succeeded, responses })
}

/// etcd's compareToPath: the compare results of the txn and of the nested
/// txns on the branch they choose, depth first, all read before any write.
fn compare_path(r: &TxnRequest, path: &mut Vec<bool>) {
    let succeeded = r.compare.iter().all(compare);
    path.push(succeeded);
    for op in if succeeded { &r.success } else { &r.failure } {
        if let Some(Request::RequestTxn(t)) = &op.request {
            compare_path(t, path);
        }
    }
}

/// etcd's checkTxn: the ranges and puts on the path, against the state
/// before the txn writes (a range at the txn's own revision is a future one).
fn check_path(r: &TxnRequest, path: &mut std::slice::Iter<'_, bool>, rev: &Revision) -> Result<(), KvError> {
    let (_, requests) = branch(r, path);
    for op in requests {
        match &op.request {
            Some(Request::RequestRange(q)) => {
                history::check_readable(q.revision, rev)?;
            }
            Some(Request::RequestPut(p)) => ops::check_put_state(p)?,
            Some(Request::RequestTxn(t)) => check_path(t, path, rev)?,
            Some(Request::RequestDeleteRange(_)) | None => {}
        }
    }
    Ok(())
}

/// etcd's checkTxnRequest: at most `max_ops` compares and ops per branch,
/// no compare without a key, and every op of both branches well formed.
fn check_request(r: &TxnRequest, max_ops: usize) -> Result<(), KvError> {
    let count = r.compare.len().max(r.success.len()).max(r.failure.len());
    if count > max_ops {
        return Err(KvError::Invalid("etcdserver: too many operations in txn request"));
    }
    if r.compare.iter().any(|c| c.key.is_empty()) {
        return Err(KvError::Invalid(ops::ERR_EMPTY_KEY));
    }
    for op in r.success.iter().chain(&r.failure) {
        match &op.request {
            Some(Request::RequestRange(q)) => ops::check_range(q)?,
            Some(Request::RequestPut(p)) => ops::check_put(p)?,
            Some(Request::RequestDeleteRange(d)) if d.key.is_empty() => {
                return Err(KvError::Invalid(ops::ERR_EMPTY_KEY));
            }
            Some(Request::RequestDeleteRange(_)) => {}
            Some(Request::RequestTxn(t)) => check_request(t, max_ops - count)?,
            None => return Err(KvError::Invalid(ops::ERR_KEY_NOT_FOUND)),
        }
    }
    Ok(())
}

/// A deleted range `[begin, end)` as etcd's checkIntervals sees it: a
/// single key is `[key, key\0)`, and an empty end is past every key. A
/// range end of `\0` is taken as it is, not as "every key from `key`", so
/// such a delete covers no put, as in etcd.
type Deleted = (Vec<u8>, Vec<u8>);

fn covered(deleted: &[Deleted], key: &[u8]) -> bool {
    deleted.iter().any(|(begin, end)| key >= begin.as_slice() && (end.is_empty() || key < end.as_slice()))
}

/// etcd's checkIntervals: a branch must not put one key twice, nor put a
/// key a delete of the branch covers, counting the nested txns' puts and
/// deletes (where a nested txn's two branches may put the same key, as
/// only one runs). Returns the branch's puts and deletes for the level above.
fn check_intervals(ops: &[RequestOp]) -> Result<(BTreeSet<&[u8]>, Vec<Deleted>), KvError> {
    const ERR: KvError = KvError::Invalid(ERR_DUPLICATE_KEY);
    let mut deleted: Vec<Deleted> = Vec::new();
    for op in ops {
        if let Some(Request::RequestDeleteRange(d)) = &op.request {
            let end = if d.range_end.is_empty() { [d.key.as_slice(), &[0]].concat() } else { d.range_end.clone() };
            deleted.push((d.key.clone(), end));
        }
    }
    let mut puts: BTreeSet<&[u8]> = BTreeSet::new();
    for op in ops {
        let Some(Request::RequestTxn(t)) = &op.request else { continue };
        let (puts_then, deleted_then) = check_intervals(&t.success)?;
        let (puts_else, deleted_else) = check_intervals(&t.failure)?;
        for &key in &puts_then {
            if puts.contains(key) || covered(&deleted, key) {
                return Err(ERR);
            }
            puts.insert(key);
        }
        for key in puts_else {
            if (puts.contains(key) && !puts_then.contains(key)) || covered(&deleted, key) {
                return Err(ERR);
            }
            puts.insert(key);
        }
        deleted.extend(deleted_then);
        deleted.extend(deleted_else);
    }
    for op in ops {
        let Some(Request::RequestPut(p)) = &op.request else { continue };
        if puts.contains(p.key.as_slice()) || covered(&deleted, &p.key) {
            return Err(ERR);
        }
        puts.insert(&p.key);
    }
    Ok((puts, deleted))
}

fn set_revision(resp: &mut ResponseOp, revision: i64) {
    let header = match &mut resp.response {
        Some(Response::ResponseRange(r)) => &mut r.header,
        Some(Response::ResponsePut(r)) => &mut r.header,
        Some(Response::ResponseDeleteRange(r)) => &mut r.header,
        Some(Response::ResponseTxn(r)) => &mut r.header,
        None => return,
    };
    if let Some(h) = header {
        h.revision = revision;
    }
}

fn compare(c: &Compare) -> bool {
    let kvs = keyspace::range(&c.key, &c.range_end, 0, false);
    let target = CompareTarget::try_from(c.target).unwrap_or(CompareTarget::Version);
    if kvs.is_empty() {
        // etcd: a value compare on a missing key always fails; other targets
        // compare against a zero key-value.
        return target != CompareTarget::Value && compare_kv(c, target, &KeyValue::default());
    }
    kvs.iter().all(|kv| compare_kv(c, target, kv))
}

fn compare_kv(c: &Compare, target: CompareTarget, kv: &KeyValue) -> bool {
    let ordering = match target {
        CompareTarget::Value => {
            let want = match &c.target_union {
                Some(TargetUnion::Value(v)) => v.as_slice(),
                _ => &[],
            };
            kv.value.as_slice().cmp(want)
        }
        _ => {
            let want = match c.target_union {
                Some(TargetUnion::Version(v))
                | Some(TargetUnion::CreateRevision(v))
                | Some(TargetUnion::ModRevision(v))
                | Some(TargetUnion::Lease(v)) => v,
                _ => 0,
            };
            let have = match target {
                CompareTarget::Version => kv.version,
                CompareTarget::Create => kv.create_revision,
                CompareTarget::Mod => kv.mod_revision,
                CompareTarget::Lease => kv.lease,
                CompareTarget::Value => unreachable!(),
            };
            have.cmp(&want)
        }
    };
    match CompareResult::try_from(c.result).unwrap_or(CompareResult::Equal) {
        CompareResult::Equal => ordering.is_eq(),
        CompareResult::NotEqual => ordering.is_ne(),
        CompareResult::Greater => ordering.is_gt(),
        CompareResult::Less => ordering.is_lt(),
    }
}
