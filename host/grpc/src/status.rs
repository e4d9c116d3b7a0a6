use tonic::{Code, Status};
use wasmraft_node::Error;
use wasmraft_proto::{ERROR_KEY, LEADER_KEY};

/// Maps a node error to a gRPC status, with a machine-readable reason in
/// the `wasmraft-error` metadata (and the leader's id for not-leader).
pub fn to_status(e: Error) -> Status {
    let (code, reason) = match &e {
        Error::NotLeader { .. } => (Code::Unavailable, "not-leader"),
        Error::Invalid(_) => (Code::InvalidArgument, "invalid"),
        Error::Rejected(_) => (Code::FailedPrecondition, "rejected"),
        Error::PluginTrap(_) => (Code::Aborted, "plugin-trap"),
        Error::ProposalDropped => (Code::Unavailable, "proposal-dropped"),
        Error::Busy(_) => (Code::ResourceExhausted, "busy"),
        Error::Timeout => (Code::DeadlineExceeded, "timeout"),
        Error::Stopped => (Code::Unavailable, "stopped"),
        Error::Fatal(_) => (Code::Internal, "fatal"),
        Error::Removed => (Code::FailedPrecondition, "removed"),
    };
    let mut status = Status::new(code, e.to_string());
    let md = status.metadata_mut();
    md.insert(ERROR_KEY, reason.parse().expect("ascii"));
    if let Error::NotLeader { leader: Some(l) } = e {
        md.insert(LEADER_KEY, l.0.to_string().parse().expect("ascii"));
    }
    status
}
