//! etcd's leases, on the host's timers (`wasmraft:plugin@0.2.0`): a lease
//! has a TTL and an expiry in log time; keys put with it are deleted when it
//! is revoked or expires. Keep-alives arrive as a tick's renewals, taken by
//! the leader at log time `at`: one renews its lease to `at + TTL`.
//!
//! ```text
//! \x00lease-grace        the highest grace-until a tick carried: nothing expires before it
//! \x04 id (u64 BE)       a lease: granted TTL (s, i64 BE), expiry (log ms, u64 BE)
//! \x05 expiry id         the expiry index (`Deadlines`): its first record is the wake-up
//! \x06 id key            a key attached to lease id (empty value)
//! ```
//!
//! The guarantee (see `docs/design/006-timers-and-leases.md`): a lease is
//! never revoked before `at + TTL` of its last answered keep-alive (or its
//! grant), nor before the current leader's start plus an election timeout;
//! once keep-alives stop it is revoked at the first tick at or after both.

use wasmraft_sdk::timer::{self, Deadlines};
use wasmraft_sdk::{Renewal, Tick, store};

use crate::KvError;
use crate::keyspace::Revision;
use crate::ops::header;
use crate::pb::etcdserverpb::{
    DeleteRangeRequest, LeaseGrantRequest, LeaseGrantResponse, LeaseLeasesResponse, LeaseRevokeRequest,
    LeaseRevokeResponse, LeaseStatus, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};

const LEASE: u8 = 0x04;
const ATTACHED: u8 = 0x06;
const GRACE_KEY: &[u8] = b"\x00lease-grace";

pub(crate) const ERR_LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";
const ERR_LEASE_EXISTS: &str = "etcdserver: lease already exists";
const ERR_TOO_MANY_KEYS: &str = "etcdserver: too many keys on lease";

/// A lease holds at most this many keys, so that revoking it is one entry.
pub(crate) const MAX_KEYS_PER_LEASE: usize = 10_000;
/// A tick revokes at most this many leases, and stops after the lease that
/// takes it past [`MAX_KEYS_PER_TICK`] keys; the rest wait for the next.
const MAX_LEASES_PER_TICK: usize = 64;
const MAX_KEYS_PER_TICK: usize = 4_096;

fn expiries() -> Deadlines {
    Deadlines::new([0x05])
}

fn lease_key(id: i64) -> Vec<u8> {
    let mut k = vec![LEASE];
    k.extend_from_slice(&(id as u64).to_be_bytes());
    k
}

fn attached_prefix(id: i64) -> Vec<u8> {
    let mut k = vec![ATTACHED];
    k.extend_from_slice(&(id as u64).to_be_bytes());
    k
}

fn attached_key(id: i64, key: &[u8]) -> Vec<u8> {
    let mut k = attached_prefix(id);
    k.extend_from_slice(key);
    k
}

/// A lease record: its granted TTL (seconds), expiry (log ms) and how many
/// keys it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lease {
    ttl: i64,
    expiry_ms: u64,
    keys: u32,
}

fn read(id: i64) -> Option<Lease> {
    let bytes = store::get(&lease_key(id))?;
    let ttl = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let expiry_ms = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
    let keys = u32::from_be_bytes(bytes.get(16..20)?.try_into().ok()?);
    Some(Lease { ttl, expiry_ms, keys })
}

fn write(id: i64, lease: Lease) {
    let mut v = lease.ttl.to_be_bytes().to_vec();
    v.extend_from_slice(&lease.expiry_ms.to_be_bytes());
    v.extend_from_slice(&lease.keys.to_be_bytes());
    store::put(&lease_key(id), &v);
}

fn expiry_after(at_ms: u64, ttl: i64) -> u64 {
    at_ms.saturating_add((ttl.max(0) as u64).saturating_mul(1000))
}

fn grace() -> u64 {
    store::get_u64(GRACE_KEY).unwrap_or(0)
}

/// Whether lease `id` exists.
pub(crate) fn exists(id: i64) -> bool {
    store::get(&lease_key(id)).is_some()
}

/// A Put's lease: refuses one that does not exist, or that holds too many
/// keys already.
pub(crate) fn check_attach(id: i64, key: &[u8]) -> Result<(), KvError> {
    if id == 0 {
        return Ok(());
    }
    let lease = read(id).ok_or(KvError::Rejected(ERR_LEASE_NOT_FOUND))?;
    if lease.keys as usize >= MAX_KEYS_PER_LEASE && store::get(&attached_key(id, key)).is_none() {
        return Err(KvError::Rejected(ERR_TOO_MANY_KEYS));
    }
    Ok(())
}

/// `key` now belongs to lease `new` (0: none) instead of `old`.
pub(crate) fn reattach(key: &[u8], old: i64, new: i64) {
    if old == new {
        return;
    }
    if let Some(lease) = read(old).filter(|_| old != 0) {
        store::delete(&attached_key(old, key));
        write(old, Lease { keys: lease.keys.saturating_sub(1), ..lease });
    }
    if let Some(lease) = read(new).filter(|_| new != 0) {
        store::put(&attached_key(new, key), b"");
        write(new, Lease { keys: lease.keys + 1, ..lease });
    }
}

/// A lease id from the entry's index: the same on every replica, and
/// random-looking like etcd's (splitmix64, positive and non-zero).
fn generated_id(index: u64) -> i64 {
    let mut z = index.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let id = (z & i64::MAX as u64) as i64;
    if id == 0 { 1 } else { id }
}

/// LeaseGrant, a command at log time `now_ms`. The TTL was checked and
/// raised to the minimum by the host.
pub(crate) fn grant(r: &LeaseGrantRequest, index: u64, now_ms: u64, rev: &Revision) -> Result<LeaseGrantResponse, KvError> {
    if r.ttl <= 0 {
        return Err(KvError::Invalid("etcdserver: lease TTL must be positive"));
    }
    if r.id < 0 {
        return Err(KvError::Invalid("etcdserver: lease ID must be positive"));
    }
    let id = if r.id != 0 {
        if exists(r.id) {
            return Err(KvError::Rejected(ERR_LEASE_EXISTS));
        }
        r.id
    } else {
        let mut id = generated_id(index);
        while exists(id) {
            id = if id == i64::MAX { 1 } else { id + 1 };
        }
        id
    };
    let expiry_ms = expiry_after(now_ms, r.ttl);
    write(id, Lease { ttl: r.ttl, expiry_ms, keys: 0 });
    expiries().set(&id.to_be_bytes(), expiry_ms);
    rearm();
    Ok(LeaseGrantResponse { header: header(rev), id, ttl: r.ttl, error: String::new() })
}

/// Deletes lease `id` and its keys, at one revision.
fn revoke_now(id: i64, lease: Lease, rev: &mut Revision) -> usize {
    let prefix = attached_prefix(id);
    let keys: Vec<Vec<u8>> =
        store::iter_prefix(&prefix).map(|(k, _)| k[prefix.len()..].to_vec()).collect();
    for key in &keys {
        let r = DeleteRangeRequest { key: key.clone(), ..Default::default() };
        // Detaches it too (see `ops::delete_range`).
        crate::ops::delete_range(&r, rev).expect("a non-empty key");
    }
    store::delete(&lease_key(id));
    expiries().remove(&id.to_be_bytes(), lease.expiry_ms);
    keys.len()
}

/// LeaseRevoke, a command.
pub(crate) fn revoke(r: &LeaseRevokeRequest, rev: &mut Revision) -> Result<LeaseRevokeResponse, KvError> {
    let lease = read(r.id).ok_or(KvError::Rejected(ERR_LEASE_NOT_FOUND))?;
    revoke_now(r.id, lease, rev);
    rearm();
    Ok(LeaseRevokeResponse { header: header(rev) })
}

/// LeaseTimeToLive, a query at log time `now_ms`: the TTL left (-1 for a
/// lease that does not exist).
pub(crate) fn time_to_live(r: &LeaseTimeToLiveRequest, now_ms: u64, rev: &Revision) -> LeaseTimeToLiveResponse {
    let mut resp = LeaseTimeToLiveResponse { header: header(rev), id: r.id, ttl: -1, ..Default::default() };
    let Some(lease) = read(r.id) else { return resp };
    let until = lease.expiry_ms.max(grace());
    resp.ttl = (until.saturating_sub(now_ms).div_ceil(1000)) as i64;
    resp.granted_ttl = lease.ttl;
    if r.keys {
        let prefix = attached_prefix(r.id);
        resp.keys = store::iter_prefix(&prefix).map(|(k, _)| k[prefix.len()..].to_vec()).collect();
    }
    resp
}

/// LeaseLeases, a query: every lease id, in id order.
pub(crate) fn leases(rev: &Revision) -> LeaseLeasesResponse {
    let leases = store::iter_prefix(&[LEASE])
        .filter_map(|(k, _)| Some(LeaseStatus { id: u64::from_be_bytes(k.get(1..9)?.try_into().ok()?) as i64 }))
        .collect();
    LeaseLeasesResponse { header: header(rev), leases }
}

/// A tick: renews the leases keep-alives name, then, once the grace has
/// passed, revokes expired leases, oldest first, each at its own revision.
/// Returns one answer per renewal: the lease's TTL (i64 BE), or not found.
pub(crate) fn tick(tick: &Tick) -> Vec<Result<Vec<u8>, KvError>> {
    let grace = grace().max(tick.grace_until_ms);
    store::put_u64(GRACE_KEY, grace);
    let answers = tick.renewals.iter().map(|r| renew(r, grace)).collect();
    if tick.now_ms >= grace {
        let (mut leases, mut keys) = (0, 0);
        for (at, id) in expiries().due(tick.now_ms, MAX_LEASES_PER_TICK) {
            if leases >= MAX_LEASES_PER_TICK || keys >= MAX_KEYS_PER_TICK {
                break;
            }
            let id = i64::from_be_bytes(id.as_slice().try_into().unwrap_or([0; 8]));
            let mut rev = Revision::begin();
            match read(id) {
                Some(lease) => keys += revoke_now(id, lease, &mut rev),
                // An index record without its lease: drop it.
                None => expiries().remove(&id.to_be_bytes(), at),
            }
            crate::history::remove_compacted_step(&rev);
            rev.commit();
            leases += 1;
        }
    }
    rearm();
    answers
}

/// A keep-alive taken at `r.at_ms`: renews the lease to `at + TTL` if it
/// still holds then (its expiry, or the grace, is later).
fn renew(r: &Renewal, grace: u64) -> Result<Vec<u8>, KvError> {
    let id = <[u8; 8]>::try_from(r.key.as_slice()).map(i64::from_be_bytes).map_err(|_| KvError::Invalid("a lease id is 8 bytes"))?;
    let lease = read(id).ok_or(KvError::Rejected(ERR_LEASE_NOT_FOUND))?;
    if r.at_ms >= lease.expiry_ms.max(grace) {
        return Err(KvError::Rejected(ERR_LEASE_NOT_FOUND));
    }
    let expiry_ms = expiry_after(r.at_ms, lease.ttl).max(lease.expiry_ms);
    if expiry_ms != lease.expiry_ms {
        expiries().remove(&id.to_be_bytes(), lease.expiry_ms);
        expiries().set(&id.to_be_bytes(), expiry_ms);
        write(id, Lease { expiry_ms, ..lease });
    }
    Ok(lease.ttl.to_be_bytes().to_vec())
}

/// The wake-up: the first expiry, but not before the grace.
fn rearm() {
    match expiries().first() {
        Some((at, _)) => timer::wake_at(at.max(grace())),
        None => timer::cancel(),
    }
}
