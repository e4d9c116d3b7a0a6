/// A plugin could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The plugin configuration is inconsistent.
    #[error("invalid plugin configuration: {0}")]
    Config(String),
    /// The wasmtime engine could not be created.
    #[error("cannot create the wasm engine: {0}")]
    Engine(String),
    /// The bytes are not a valid wasm module or component.
    #[error("not a valid plugin: {0}")]
    Invalid(String),
    /// The component does not fit the `wasmraft:plugin/state-machine` world
    /// (for example it imports something the host does not provide).
    #[error("plugin does not match the wasmraft:plugin@0.1.0 state-machine world: {0}")]
    Incompatible(String),
    /// The plugin trapped while describing itself or instantiating.
    #[error("plugin failed to start: {0}")]
    Start(String),
}

/// Why one entry failed. Every replica reaches the same error for the same
/// entry; the entry leaves no write and no event behind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The plugin found the command malformed.
    #[error("invalid command: {0}")]
    Invalid(String),
    /// The plugin refused the command by its rules.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The plugin trapped: a panic, running out of fuel, the memory or stack
    /// limit, a store limit, or a broken contract.
    #[error("plugin trapped: {0}")]
    Trap(String),
}

/// Why a query failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The plugin found the request malformed.
    #[error("invalid query: {0}")]
    Invalid(String),
    /// The plugin cannot answer the request.
    #[error("query rejected: {0}")]
    Rejected(String),
    /// The plugin trapped while answering.
    #[error("plugin trapped during query: {0}")]
    Trap(String),
    /// A failure outside the plugin (storage, engine).
    #[error("query failed: {0}")]
    Fatal(#[from] Fatal),
}

/// A failure that is not a deterministic function of the entry: storage
/// I/O, the host running out of memory, an engine fault. The node must stop
/// applying (never skip the entry) and report it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fatal plugin host failure: {0}")]
pub struct Fatal(pub String);
