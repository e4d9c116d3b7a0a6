//! The sequential specification a history is checked against.

use std::fmt;
use std::hash::Hash;

use crate::history::Operation;

/// A sequential specification: a deterministic state machine whose transitions
/// say which (input, output) pairs are legal in which state.
///
/// The model has no `self`: it is a type, like porcupine's `Model` struct of
/// functions. Everything must be deterministic and pure; the checker calls
/// `step` many times on the same arguments while backtracking.
///
/// # Contract
///
/// - [`partition`](Model::partition) must be P-compositional: operations with
///   different keys never constrain each other (true for independent
///   registers, as linearizability is local, Herlihy & Wing 1990 §3.1). Each
///   key is checked on its own, starting from [`init`](Model::init).
/// - [`step`](Model::step) returns the next state if `input` with `output`
///   is legal in `state`, or `None` if that response is impossible there.
///   With `output == None` (unknown outcome) it must return the state after
///   the operation *took effect* (it will only be called where that is
///   assumed); "never took effect" is covered by the checker, which does not
///   require unknown operations to be linearized at all.
/// - `State`'s `Eq + Hash` must identify states exactly: the search prunes a
///   branch when it has already seen the same set of linearized operations
///   with an equal state (Lowe 2017, §3).
pub trait Model {
    /// The partition key: operations with different keys are independent.
    /// Use `()` for a model that cannot be partitioned.
    type Key: Clone + Ord + fmt::Debug + Send + Sync;
    /// The state of one partition.
    type State: Clone + Eq + Hash + fmt::Debug;
    /// A request.
    type Input: fmt::Display + Send + Sync;
    /// A response.
    type Output: fmt::Display + Send + Sync;

    /// The partition `input` belongs to.
    fn partition(input: &Self::Input) -> Self::Key;

    /// The state of every partition before any operation.
    fn init() -> Self::State;

    /// The state after `input` returning `output` in `state`, or `None` if
    /// that response is illegal there. `output` is `None` for an operation
    /// with an unknown outcome; see the trait docs.
    fn step(
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;

    /// Whether the unknown-outcome operation `op` can be removed from its
    /// partition `ops` (which contains `op`) without changing the verdict.
    ///
    /// An optimisation only, but an important one: every unknown write left in
    /// the history may be linearized at any later point, which multiplies the
    /// search space. Sound answers are "a read" (it constrains nothing when
    /// its result is unknown) and "a blind write whose value no read returns".
    /// The default keeps everything.
    fn can_drop_unknown(
        op: &Operation<Self::Input, Self::Output>,
        ops: &[&Operation<Self::Input, Self::Output>],
    ) -> bool {
        let _ = (op, ops);
        false
    }

    /// A human-readable state for explanations; `Debug` by default.
    fn describe_state(state: &Self::State) -> String {
        format!("{state:?}")
    }
}
