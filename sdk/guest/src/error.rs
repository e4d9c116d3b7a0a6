use crate::__bindings::wasmraft::plugin::types as wit;

/// Why an entry was refused. The entry leaves no write and no event behind.
///
/// Build one with [`ApplyError::invalid`] / [`ApplyError::rejected`], with
/// [`bail!`](crate::bail) / [`ensure!`](crate::ensure), or with `?` on a
/// [`DecodeError`], a UTF-8 error or a number parse error (all `Invalid`).
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

/// Bytes that do not decode as the type asked for: a malformed command or
/// request, or a stored value written in another shape (a missing
/// migration). Converts into [`ApplyError::Invalid`] and
/// [`QueryError::Invalid`], so `?` works in `apply` and `query`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    message: String,
}

impl DecodeError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }

    /// The same error, saying what was being decoded (`"stored account"`).
    pub fn context(self, what: impl std::fmt::Display) -> Self {
        Self { message: format!("{what}: {}", self.message) }
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}

/// Errors that mean "the client sent something malformed".
macro_rules! invalid_from {
    ($($source:ty => $prefix:literal),* $(,)?) => {$(
        impl From<$source> for ApplyError {
            fn from(e: $source) -> Self {
                Self::Invalid(format!(concat!($prefix, "{}"), e))
            }
        }
        impl From<$source> for QueryError {
            fn from(e: $source) -> Self {
                Self::Invalid(format!(concat!($prefix, "{}"), e))
            }
        }
    )*};
}

invalid_from! {
    DecodeError => "",
    std::str::Utf8Error => "not UTF-8: ",
    std::string::FromUtf8Error => "not UTF-8: ",
    std::num::ParseIntError => "not a number: ",
}

/// The two ways to refuse, for both error types; what [`bail!`](crate::bail)
/// and [`ensure!`](crate::ensure) build. Implement it for your own error
/// type to use those macros with it.
pub trait Refuse {
    /// The input is malformed.
    fn invalid(message: String) -> Self;
    /// The input is well formed, but the rules refuse it.
    fn rejected(message: String) -> Self;
}

impl Refuse for ApplyError {
    fn invalid(message: String) -> Self {
        Self::Invalid(message)
    }
    fn rejected(message: String) -> Self {
        Self::Rejected(message)
    }
}

impl Refuse for QueryError {
    fn invalid(message: String) -> Self {
        Self::Invalid(message)
    }
    fn rejected(message: String) -> Self {
        Self::Rejected(message)
    }
}

/// Returns early with an error: `bail!(rejected, "balance {} too low", b)`
/// or `bail!(invalid, "unknown verb {verb:?}")`. Works in any function that
/// returns `Result<_, E>` with `E:` [`Refuse`] ([`ApplyError`],
/// [`QueryError`]).
///
/// ```
/// use wasmraft_sdk::{ApplyError, bail};
///
/// fn withdraw(balance: u64, amount: u64) -> Result<u64, ApplyError> {
///     if amount == 0 {
///         bail!(invalid, "amount must be positive");
///     }
///     match balance.checked_sub(amount) {
///         Some(rest) => Ok(rest),
///         None => bail!(rejected, "insufficient funds: balance {balance}, amount {amount}"),
///     }
/// }
///
/// assert_eq!(withdraw(10, 3), Ok(7));
/// assert_eq!(withdraw(10, 0), Err(ApplyError::invalid("amount must be positive")));
/// assert!(matches!(withdraw(1, 3), Err(ApplyError::Rejected(m)) if m.contains("insufficient")));
/// ```
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($message:tt)+) => {
        return ::core::result::Result::Err($crate::Refuse::$kind(::std::format!($($message)+)))
    };
}

/// Returns early with an error unless a condition holds:
/// `ensure!(amount > 0, invalid, "amount must be positive")`. The kinds and
/// the message are those of [`bail!`](crate::bail).
///
/// ```
/// use wasmraft_sdk::{QueryError, ensure};
///
/// fn page_size(limit: u32) -> Result<u32, QueryError> {
///     ensure!(limit <= 1000, invalid, "limit {limit} is over 1000");
///     Ok(limit)
/// }
///
/// assert_eq!(page_size(10), Ok(10));
/// assert!(page_size(5000).is_err());
/// ```
#[macro_export]
macro_rules! ensure {
    ($condition:expr, $kind:ident, $($message:tt)+) => {
        if !$condition {
            $crate::bail!($kind, $($message)+);
        }
    };
}
