//! A bank ledger: accounts with balances in whole minor units (cents), and
//! a statement per account. Money only moves between accounts, enters by
//! deposit and leaves by withdrawal; no entry ever leaves a balance below
//! zero. Commands and queries are JSON; see README.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wasmraft_sdk::{
    ApplyError, Entry, PluginInfo, QueryError, StateMachine, Table, bail, codec, ensure, events, store,
};

/// A command, proposed through the log.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum Command {
    Open { account: String },
    Deposit { account: String, amount: u64 },
    Withdraw { account: String, amount: u64 },
    Transfer { from: String, to: String, amount: u64 },
}

/// A read-only request.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum Query {
    Balance {
        account: String,
    },
    /// The newest `limit` lines first (default 20).
    Statement {
        account: String,
        limit: Option<u32>,
    },
    /// Every balance, and their sum.
    Accounts,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Account {
    balance: u64,
    opened_ms: u64,
    /// How many statement lines it has: the next line's number.
    lines: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Deposit,
    Withdraw,
    TransferIn,
    TransferOut,
}

/// One line of a statement.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Line {
    /// The log index of the entry that made it.
    index: u64,
    timestamp_ms: u64,
    kind: Kind,
    amount: u64,
    /// The balance after this line.
    balance: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    counterparty: Option<String>,
}

#[derive(Serialize)]
struct BalanceReply<'a> {
    account: &'a str,
    balance: u64,
}

#[derive(Serialize)]
struct StatementReply<'a> {
    account: &'a str,
    balance: u64,
    lines: Vec<Line>,
}

#[derive(Serialize)]
struct AccountsReply {
    accounts: BTreeMap<String, u64>,
    total: u128,
}

const DEFAULT_STATEMENT_LINES: u32 = 20;
const MAX_STATEMENT_LINES: u32 = 1000;

fn accounts() -> Table<String, Account> {
    Table::new("account/")
}

/// An account's lines, numbered from 0. Account names cannot hold `/`, so
/// one account's prefix never covers another's.
fn statement(account: &str) -> Table<u64, Line> {
    Table::new(format!("statement/{account}/"))
}

fn check_name(account: &str) -> Result<(), ApplyError> {
    let ok = (1..=64).contains(&account.len())
        && account.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    ensure!(ok, invalid, "account name {account:?}: 1 to 64 of A-Z a-z 0-9 _ - .");
    Ok(())
}

fn check_amount(amount: u64) -> Result<(), ApplyError> {
    ensure!(amount > 0, invalid, "amount must be positive");
    Ok(())
}

fn existing(account: &str) -> Result<Account, ApplyError> {
    match accounts().get(account)? {
        Some(a) => Ok(a),
        None => bail!(rejected, "no account {account:?}"),
    }
}

/// Records a new balance and its statement line, and tells watchers.
fn post(entry: &Entry, name: &str, mut account: Account, kind: Kind, amount: u64, counterparty: Option<&str>) -> u64 {
    let line = Line {
        index: entry.index,
        timestamp_ms: entry.timestamp_ms,
        kind,
        amount,
        balance: account.balance,
        counterparty: counterparty.map(str::to_string),
    };
    statement(name).put(&account.lines, &line);
    account.lines += 1;
    accounts().put(name, &account);
    events::emit(
        &accounts().store_key(name),
        &codec::encode(&BalanceReply { account: name, balance: account.balance }),
    );
    account.balance
}

fn reply(value: &impl Serialize) -> Vec<u8> {
    codec::encode(value)
}

/// The bank.
pub struct Bank;

impl StateMachine for Bank {
    // Every check comes before the first write, so a refused command writes
    // nothing even before the host discards its writes.
    fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
        match entry.decode::<Command>()? {
            Command::Open { account } => {
                check_name(&account)?;
                ensure!(!accounts().contains(&account), rejected, "account {account:?} already exists");
                accounts().put(&account, &Account { balance: 0, opened_ms: entry.timestamp_ms, lines: 0 });
                Ok(reply(&BalanceReply { account: &account, balance: 0 }))
            }
            Command::Deposit { account: name, amount } => {
                check_amount(amount)?;
                let mut account = existing(&name)?;
                let Some(balance) = account.balance.checked_add(amount) else {
                    bail!(rejected, "the balance of {name:?} would overflow");
                };
                account.balance = balance;
                let balance = post(&entry, &name, account, Kind::Deposit, amount, None);
                Ok(reply(&BalanceReply { account: &name, balance }))
            }
            Command::Withdraw { account: name, amount } => {
                check_amount(amount)?;
                let mut account = existing(&name)?;
                let Some(balance) = account.balance.checked_sub(amount) else {
                    bail!(rejected, "insufficient funds in {name:?}: balance {}, amount {amount}", account.balance);
                };
                account.balance = balance;
                let balance = post(&entry, &name, account, Kind::Withdraw, amount, None);
                Ok(reply(&BalanceReply { account: &name, balance }))
            }
            Command::Transfer { from, to, amount } => {
                check_amount(amount)?;
                ensure!(from != to, invalid, "a transfer needs two different accounts");
                let mut source = existing(&from)?;
                let mut target = existing(&to)?;
                let Some(rest) = source.balance.checked_sub(amount) else {
                    bail!(rejected, "insufficient funds in {from:?}: balance {}, amount {amount}", source.balance);
                };
                let Some(credited) = target.balance.checked_add(amount) else {
                    bail!(rejected, "the balance of {to:?} would overflow");
                };
                source.balance = rest;
                target.balance = credited;
                let from_balance = post(&entry, &from, source, Kind::TransferOut, amount, Some(&to));
                let to_balance = post(&entry, &to, target, Kind::TransferIn, amount, Some(&from));
                Ok(reply(&[
                    BalanceReply { account: &from, balance: from_balance },
                    BalanceReply { account: &to, balance: to_balance },
                ]))
            }
        }
    }

    fn query(request: &[u8]) -> Result<Vec<u8>, QueryError> {
        let query: Query = codec::decode(request).map_err(|e| e.context("malformed query"))?;
        let known = |name: &str| -> Result<Account, QueryError> {
            accounts().get(name)?.ok_or_else(|| QueryError::rejected(format!("no account {name:?}")))
        };
        match query {
            Query::Balance { account } => {
                let a = known(&account)?;
                Ok(reply(&BalanceReply { account: &account, balance: a.balance }))
            }
            Query::Statement { account, limit } => {
                let limit = limit.unwrap_or(DEFAULT_STATEMENT_LINES);
                ensure!(limit <= MAX_STATEMENT_LINES, invalid, "limit {limit} is over {MAX_STATEMENT_LINES}");
                let a = known(&account)?;
                let lines = statement(&account)
                    .iter()
                    .reverse()
                    .chunk_size(limit.max(1))
                    .take(limit as usize)
                    .map(|r| r.map(|(_, line)| line))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(reply(&StatementReply { account: &account, balance: a.balance, lines }))
            }
            Query::Accounts => {
                let mut all = BTreeMap::new();
                for r in accounts().iter() {
                    let (name, a) = r?;
                    all.insert(name, a.balance);
                }
                let total = all.values().map(|&b| u128::from(b)).sum();
                Ok(reply(&AccountsReply { accounts: all, total }))
            }
        }
    }

    fn migrate(previous: &PluginInfo) -> Result<(), ApplyError> {
        // Take over only an empty keyspace or an older bank's.
        if previous.name != "bank" && store::count(b"", b"") > 0 {
            bail!(rejected, "the keyspace holds data of plugin {:?}", previous.name);
        }
        Ok(())
    }
}

wasmraft_sdk::export!(Bank);

#[cfg(test)]
mod tests;
