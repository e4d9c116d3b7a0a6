//! Txn: compares, then one branch of operations, all at one revision.

use crate::KvError;
use crate::keyspace::{self, Revision};
use crate::ops;
use crate::pb::etcdserverpb::{
    Compare, RequestOp, ResponseOp, TxnRequest, TxnResponse, compare::CompareResult,
    compare::CompareTarget, compare::TargetUnion, request_op::Request,
};
use crate::pb::mvccpb::KeyValue;

pub(crate) fn txn(r: &TxnRequest, rev: &mut Revision) -> Result<TxnResponse, KvError> {
    check_no_duplicate_writes(&r.success)?;
    check_no_duplicate_writes(&r.failure)?;
    let succeeded = r.compare.iter().all(compare);
    let branch = if succeeded { &r.success } else { &r.failure };
    let mut responses = Vec::with_capacity(branch.len());
    for op in branch {
        let request = op.request.as_ref().ok_or(KvError::Invalid("empty RequestOp in txn"))?;
        responses.push(ResponseOp { response: Some(ops::execute(request, rev)?) });
    }
    // Every response of the txn reports the txn's final revision, as etcd does.
    for resp in &mut responses {
        set_revision(resp, rev.current());
    }
    Ok(TxnResponse { header: ops::header(rev), succeeded, responses })
}

fn set_revision(resp: &mut ResponseOp, revision: i64) {
    use crate::pb::etcdserverpb::response_op::Response;
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

/// etcd refuses a txn branch that writes one key twice (two puts, or a put
/// inside a deleted range), since the outcome would depend on op order.
fn check_no_duplicate_writes(ops: &[RequestOp]) -> Result<(), KvError> {
    const ERR: KvError = KvError::Invalid("etcdserver: duplicate key given in txn request");
    let mut puts: Vec<&[u8]> = Vec::new();
    let mut deletes: Vec<(&[u8], &[u8])> = Vec::new();
    for op in ops {
        match &op.request {
            Some(Request::RequestPut(p)) => {
                if puts.contains(&p.key.as_slice()) {
                    return Err(ERR);
                }
                puts.push(&p.key);
            }
            Some(Request::RequestDeleteRange(d)) => deletes.push((&d.key, &d.range_end)),
            _ => {}
        }
    }
    let covers = |(key, end): &(&[u8], &[u8]), k: &[u8]| {
        if end.is_empty() { *key == k } else { k >= *key && (*end == [0] || k < *end) }
    };
    if puts.iter().any(|p| deletes.iter().any(|d| covers(d, p))) {
        return Err(ERR);
    }
    Ok(())
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
