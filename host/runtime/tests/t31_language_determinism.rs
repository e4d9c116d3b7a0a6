//! The C, Python and JavaScript examples (`examples/plugins/`, built by
//! `cargo xtask examples`) are deterministic: two independent runtimes fed
//! the same entries, batched differently, give identical outcomes, events,
//! answers and keyspace bytes.

mod support;

use std::path::PathBuf;

use support::{Replica, text};
use wasmraft_runtime::{EntryError, EntryEvent, PluginConfig};

fn example(name: &str) -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/components").join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "example plugin {} is missing ({e}): run `cargo xtask examples` first (scripts/test.sh does)",
            path.display()
        )
    })
}

/// The node's default limits: the interpreters' heaps outgrow the small
/// limits of the hostile-fixture tests.
fn replica(wasm: &[u8]) -> Replica {
    Replica::with_config(wasm, PluginConfig::default())
}

type Outcome = Result<Vec<u8>, EntryError>;

/// Applies `commands` in batches of the given sizes, cycling through them.
fn run(r: &mut Replica, commands: &[Vec<u8>], sizes: &[usize]) -> (Vec<Outcome>, Vec<EntryEvent>) {
    let (mut outcomes, mut events) = (Vec::new(), Vec::new());
    let mut rest = commands;
    for &n in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (batch, tail) = rest.split_at(n.min(rest.len()));
        let applied = r.apply(batch);
        outcomes.extend(applied.outcomes);
        events.extend(applied.events);
        rest = tail;
    }
    (outcomes, events)
}

fn check(name: &str, commands: &[Vec<u8>], queries: &[&str]) -> (Vec<Outcome>, Replica) {
    let wasm = example(name);
    let mut a = replica(&wasm);
    let mut b = replica(&wasm);
    let (out_a, ev_a) = run(&mut a, commands, &[commands.len()]);
    let (out_b, ev_b) = run(&mut b, commands, &[1, 3, 2, 5]);
    assert_eq!(out_a, out_b, "{name}: outcomes depend on batching");
    assert_eq!(ev_a, ev_b, "{name}: events depend on batching");
    assert_eq!(a.state, b.state, "{name}: keyspaces differ");
    assert!(!a.state.0.is_empty(), "{name}: nothing was written");
    for q in queries {
        assert_eq!(a.query(q.as_bytes()), b.query(q.as_bytes()), "{name}: query {q:?}");
    }
    // The mix must exercise every path, or the comparison proves little.
    assert!(out_a.iter().any(Result::is_ok), "{name}: {out_a:?}");
    assert!(out_a.iter().any(|o| matches!(o, Err(EntryError::Invalid(_)))), "{name}: {out_a:?}");
    assert!(out_a.iter().any(|o| matches!(o, Err(EntryError::Rejected(_)))), "{name}: {out_a:?}");
    assert!(!out_a.iter().any(|o| matches!(o, Err(EntryError::Trap(_)))), "{name}: {out_a:?}");
    (out_a, a)
}

#[test]
fn c_ratelimit_is_deterministic() {
    // The replicas' entries are 1 ms apart: at 500 tokens/s a bucket regains
    // half a token per entry.
    let mut commands = vec![text("limit api 4 500"), text("limit slow 3 1")];
    for i in 0..30 {
        commands.push(match i % 6 {
            0 => text("take api 3"),
            1 => text("take slow 1"),
            2 => text("take api x"),
            3 => text("take nobody 1"),
            4 => vec![0xff, b' ', b'1'],
            _ => text("take api 1"),
        });
    }
    let (out, _) = check("c_ratelimit", &commands, &["api", "slow", "nobody", ""]);
    assert_eq!(out[2], Ok(text("ok 1")), "4 tokens, take 3");
    assert_eq!(out[3], Ok(text("ok 2")), "slow: 3 tokens, take 1");
    assert!(matches!(&out[21], Err(EntryError::Rejected(m)) if m.contains("slow")), "slow runs dry: {:?}", out[21]);
}

#[test]
fn python_poll_is_deterministic() {
    let mut commands = vec![text("open lunch pizza sushi tacos"), text("open dinner soup salad")];
    for i in 0..24 {
        let voter = format!("v{}", i % 9);
        commands.push(match i % 6 {
            0 => format!("vote lunch {voter} pizza").into_bytes(),
            1 => format!("vote lunch {voter} sushi").into_bytes(),
            2 => format!("vote dinner {voter} soup").into_bytes(),
            3 => format!("vote lunch {voter} burgers").into_bytes(),
            4 => text("vote lunch"),
            _ => format!("vote dinner {voter} salad").into_bytes(),
        });
        if i == 17 {
            commands.push(text("close dinner"));
        }
    }
    let (_, r) = check("python_poll", &commands, &["lunch", "dinner", "breakfast", "bad/name"]);
    let lunch = String::from_utf8(r.query(b"lunch").unwrap()).unwrap();
    assert!(lunch.starts_with("open\npizza "), "{lunch}");
}

#[test]
fn js_leaderboard_is_deterministic() {
    let mut commands = Vec::new();
    for i in 0..40u64 {
        let player = format!("p{}", i % 7);
        commands.push(match i % 8 {
            5 => format!("remove {player}").into_bytes(),
            6 => format!("score {player} -3").into_bytes(),
            7 => text("remove nobody"),
            _ => format!("score {player} {}", (i * 37) % 101).into_bytes(),
        });
    }
    let (_, r) = check("js_leaderboard", &commands, &["top 3", "top 50", "player p1", "player nobody", "top 0"]);
    let top = String::from_utf8(r.query(b"top 50").unwrap()).unwrap();
    let scores: Vec<u64> = top.lines().map(|l| l.rsplit(' ').next().unwrap().parse().unwrap()).collect();
    assert!(!scores.is_empty() && scores.windows(2).all(|w| w[0] >= w[1]), "best first: {top}");
}
