use crate::__bindings::wasmraft::plugin::types as wit;

/// Why an entry was refused. The entry leaves no write behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyError {
    /// The command is malformed: reported to the client as an invalid argument.
    Invalid(String),
    /// The command is well formed but the state machine refuses it: reported
    /// as a failed precondition.
    Rejected(String),
}

impl ApplyError {
    /// A malformed command.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    /// A well-formed command that the state machine's rules refuse.
    pub fn rejected(message: impl Into<String>) -> Self {
        Self::Rejected(message.into())
    }
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(m) => write!(f, "invalid command: {m}"),
            Self::Rejected(m) => write!(f, "rejected: {m}"),
        }
    }
}

impl std::error::Error for ApplyError {}

impl From<ApplyError> for wit::ApplyError {
    fn from(e: ApplyError) -> Self {
        match e {
            ApplyError::Invalid(m) => wit::ApplyError::Invalid(m),
            ApplyError::Rejected(m) => wit::ApplyError::Rejected(m),
        }
    }
}

/// Why a query could not be answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// The request is malformed.
    Invalid(String),
    /// The request is well formed but cannot be answered.
    Rejected(String),
}

impl QueryError {
    /// A malformed request.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    /// A request that cannot be answered.
    pub fn rejected(message: impl Into<String>) -> Self {
        Self::Rejected(message.into())
    }
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(m) => write!(f, "invalid request: {m}"),
            Self::Rejected(m) => write!(f, "rejected: {m}"),
        }
    }
}

impl std::error::Error for QueryError {}

impl From<QueryError> for wit::QueryError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Invalid(m) => wit::QueryError::Invalid(m),
            QueryError::Rejected(m) => wit::QueryError::Rejected(m),
        }
    }
}
