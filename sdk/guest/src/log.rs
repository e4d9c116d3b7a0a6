//! Diagnostics to the host's structured log. Logging never changes state.

use crate::__bindings::wasmraft::plugin::log::{Level, write};

/// Logs at debug level.
pub fn debug(message: &str) {
    write(Level::Debug, message)
}

/// Logs at info level.
pub fn info(message: &str) {
    write(Level::Info, message)
}

/// Logs at warn level.
pub fn warn(message: &str) {
    write(Level::Warn, message)
}

/// Logs at error level.
pub fn error(message: &str) {
    write(Level::Error, message)
}
