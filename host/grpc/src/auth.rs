//! Who may administer the cluster.
//!
//! With client-certificate authentication on, the identity of a caller is
//! the common name (CN) of the certificate it presented, already verified
//! against the trusted CAs by the handshake. Operations that change what
//! the cluster is (plugin deploy, membership, leader transfer, hash checks,
//! fault injection) need an identity listed in `[tls] admins`; everyone
//! else gets PERMISSION_DENIED and nothing changes. Without client
//! certificates there are no identities, and every caller that reaches the
//! client port may administer (docs/security.md).

use std::collections::BTreeSet;
use std::sync::Arc;

use tonic::{Request, Status};

/// The admin policy of one node.
#[derive(Clone, Debug, Default)]
pub struct Admins {
    /// `None`: identities are not checked (no client-certificate auth).
    names: Option<Arc<BTreeSet<String>>>,
}

impl Admins {
    /// Every caller may administer.
    pub fn open() -> Self {
        Self { names: None }
    }

    /// Only callers whose certificate's common name is in `names`.
    pub fn only(names: impl IntoIterator<Item = String>) -> Self {
        Self {
            names: Some(Arc::new(names.into_iter().collect())),
        }
    }

    /// Whether identities are checked.
    pub fn checked(&self) -> bool {
        self.names.is_some()
    }

    /// Lets `request` through if its caller may administer; `what` names
    /// the operation in the refusal.
    pub fn require<T>(&self, request: &Request<T>, what: &str) -> Result<(), Status> {
        let Some(names) = &self.names else {
            return Ok(());
        };
        let identity = caller(request);
        match &identity {
            Some(cn) if names.contains(cn) => Ok(()),
            Some(cn) => {
                tracing::warn!(identity = %cn, operation = what, "refused an admin operation");
                Err(Status::permission_denied(format!(
                    "{what} needs an admin identity; the client certificate's CN {cn:?} is not in [tls] admins"
                )))
            }
            None => Err(Status::permission_denied(format!(
                "{what} needs an admin client certificate"
            ))),
        }
    }
}

/// The common name of the caller's certificate, if it presented one.
pub fn caller<T>(request: &Request<T>) -> Option<String> {
    let certs = request.peer_certs()?;
    let leaf = certs.first()?;
    common_name(leaf.as_ref())
}

/// The first common name in a DER certificate's subject.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}
