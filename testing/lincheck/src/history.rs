//! Histories: operations with invocation/response intervals.

use std::fmt;

/// The client (process, connection, task) that issued an operation.
///
/// The checker does not need it (only the intervals matter); it is kept so
/// that dumps and explanations can be matched with client logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u64);

impl From<u64> for ClientId {
    fn from(id: u64) -> Self {
        ClientId(id)
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// How an operation ended, as far as its client knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<O> {
    /// The client received `output` at time `at` (same clock as
    /// [`Operation::invoke`]; `at >= invoke`).
    Returned {
        /// Response time.
        at: u64,
        /// What the operation returned.
        output: O,
    },
    /// The client never learned the outcome (timeout, connection dropped after
    /// sending, the node it talked to was killed). Its return time is infinite
    /// and its output unknown: the operation may have taken effect at any
    /// point after its invocation, or never (Jepsen's `:info`; porcupine's
    /// return time of `math.MaxInt64` with an output the model accepts).
    Unknown,
}

/// One operation of a history: who, what, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// The client that issued it.
    pub client: ClientId,
    /// The request (for the key-value model: get/put/delete/append).
    pub input: I,
    /// Invocation time: taken before the request could reach the system.
    /// Any `u64` ordering works (monotonic nanoseconds, a logical clock).
    pub invoke: u64,
    /// Response, or [`Outcome::Unknown`].
    pub outcome: Outcome<O>,
}

impl<I, O> Operation<I, O> {
    /// An operation that returned `output` at time `ret`.
    pub fn returned(
        client: impl Into<ClientId>,
        input: I,
        invoke: u64,
        ret: u64,
        output: O,
    ) -> Self {
        Operation {
            client: client.into(),
            input,
            invoke,
            outcome: Outcome::Returned { at: ret, output },
        }
    }

    /// An operation invoked at `invoke` whose outcome is unknown.
    pub fn unknown(client: impl Into<ClientId>, input: I, invoke: u64) -> Self {
        Operation {
            client: client.into(),
            input,
            invoke,
            outcome: Outcome::Unknown,
        }
    }

    /// The response time, `None` if the outcome is unknown (infinite).
    pub fn return_time(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Returned { at, .. } => Some(at),
            Outcome::Unknown => None,
        }
    }

    /// The output, `None` if the outcome is unknown.
    pub fn output(&self) -> Option<&O> {
        match &self.outcome {
            Outcome::Returned { output, .. } => Some(output),
            Outcome::Unknown => None,
        }
    }

    /// Whether the outcome is unknown.
    pub fn is_unknown(&self) -> bool {
        matches!(self.outcome, Outcome::Unknown)
    }
}

/// `c3 [1200..1450] put(k, "v") -> ok`; an unknown outcome prints as `[1200..∞] ... -> ?`.
impl<I: fmt::Display, O: fmt::Display> fmt::Display for Operation<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Returned { at, output } => {
                write!(
                    f,
                    "{} [{}..{}] {} -> {}",
                    self.client, self.invoke, at, self.input, output
                )
            }
            Outcome::Unknown => write!(
                f,
                "{} [{}..∞] {} -> ?",
                self.client, self.invoke, self.input
            ),
        }
    }
}

/// A concurrent history: operations in any order (the checker sorts events by
/// time). Indices (`#i` in dumps and explanations) are positions in this list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History<I, O> {
    ops: Vec<Operation<I, O>>,
}

impl<I, O> Default for History<I, O> {
    fn default() -> Self {
        History { ops: Vec::new() }
    }
}

impl<I, O> History<I, O> {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `op` and returns its index.
    pub fn push(&mut self, op: Operation<I, O>) -> usize {
        self.ops.push(op);
        self.ops.len() - 1
    }

    /// Appends an operation that returned; see [`Operation::returned`].
    pub fn returned(
        &mut self,
        client: impl Into<ClientId>,
        input: I,
        invoke: u64,
        ret: u64,
        output: O,
    ) -> usize {
        self.push(Operation::returned(client, input, invoke, ret, output))
    }

    /// Appends an operation with an unknown outcome; see [`Operation::unknown`].
    pub fn unknown(&mut self, client: impl Into<ClientId>, input: I, invoke: u64) -> usize {
        self.push(Operation::unknown(client, input, invoke))
    }

    /// The operations, by index.
    pub fn operations(&self) -> &[Operation<I, O>] {
        &self.ops
    }

    /// Mutable access, e.g. to inject a fault into a recorded history.
    pub fn operations_mut(&mut self) -> &mut [Operation<I, O>] {
        &mut self.ops
    }

    /// The operations, consuming the history.
    pub fn into_operations(self) -> Vec<Operation<I, O>> {
        self.ops
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

impl<I, O> From<Vec<Operation<I, O>>> for History<I, O> {
    fn from(ops: Vec<Operation<I, O>>) -> Self {
        History { ops }
    }
}

impl<I, O> FromIterator<Operation<I, O>> for History<I, O> {
    fn from_iter<T: IntoIterator<Item = Operation<I, O>>>(iter: T) -> Self {
        History {
            ops: iter.into_iter().collect(),
        }
    }
}

/// A text dump for debugging: a header, then one operation per line in
/// invocation order (ties by index), each prefixed with its index `#i`.
impl<I: fmt::Display, O: fmt::Display> fmt::Display for History<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unknown = self.ops.iter().filter(|op| op.is_unknown()).count();
        writeln!(
            f,
            "history: {} operations, {} with unknown outcome",
            self.ops.len(),
            unknown
        )?;
        let mut order: Vec<usize> = (0..self.ops.len()).collect();
        order.sort_by_key(|&i| (self.ops[i].invoke, i));
        for i in order {
            writeln!(f, "#{i} {}", self.ops[i])?;
        }
        Ok(())
    }
}
