use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Args, Debug)]
pub struct LogArgs {
    /// Log filter, e.g. `info` or `wasmraft_node=debug` (RUST_LOG
    /// overrides). Default: `info` for nodes, `warn` for client commands.
    #[arg(long, global = true, env = "WASMRAFT_LOG")]
    pub log_level: Option<String>,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WASMRAFT_LOG_FORMAT")]
    pub log_format: LogFormat,
}

/// Servers log at the chosen level; client commands only warn, so that their
/// output stays clean. Logs go to stderr, in colour only when it is a
/// terminal (a log file gets no escape codes).
pub fn init(args: &LogArgs, server: bool) {
    use std::io::IsTerminal;
    let default = args.log_level.as_deref().unwrap_or(if server { "info" } else { "warn" });
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
