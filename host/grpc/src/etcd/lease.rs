//! `etcdserverpb.Lease`, not served yet: leases need time in the state
//! machine (deterministic timers through the log), which the KV plugin does
//! not have yet. Every call says so, instead of the bare `UNIMPLEMENTED`
//! an unknown service gets, so that a client's error names the cause.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use wasmraft_proto::etcdserverpb::lease_server::Lease;
use wasmraft_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesRequest,
    LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};

/// The `etcdserverpb.Lease` service: refuses every call, clearly.
#[derive(Clone, Copy, Debug, Default)]
pub struct EtcdLease;

fn not_served() -> Status {
    Status::unimplemented("etcdserver: leases are not served by this cluster yet (keys cannot expire); put without a lease")
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Lease for EtcdLease {
    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_grant(&self, _: Request<LeaseGrantRequest>) -> Result<Response<LeaseGrantResponse>, Status> {
        Err(not_served())
    }

    async fn lease_revoke(&self, _: Request<LeaseRevokeRequest>) -> Result<Response<LeaseRevokeResponse>, Status> {
        Err(not_served())
    }

    async fn lease_keep_alive(
        &self,
        _: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        Err(not_served())
    }

    async fn lease_time_to_live(
        &self,
        _: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        Err(not_served())
    }

    async fn lease_leases(&self, _: Request<LeaseLeasesRequest>) -> Result<Response<LeaseLeasesResponse>, Status> {
        Err(not_served())
    }
}
