//! The bench tool's command line: its help names the workloads, and a
//! mistake gets a clear error before anything is sent. (It also makes
//! `cargo test` build the binary, which `docs/security.md`'s commands run.)

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft-bench");

#[test]
fn help_names_the_workloads_and_mistakes_are_refused() {
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success() && text.contains("put") && text.contains("range") && text.contains("--total"), "{text}");
    for args in [&["nosuch"][..], &["put", "--total", "many"], &["put", "--timeout", "5x"]] {
        let out = Command::new(BIN).args(args).env_remove("WASMRAFT_ENDPOINTS").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("error"), "{args:?}: {err}");
    }
}
