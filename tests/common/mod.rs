//! Helpers the whole-command tests share: running the binary, and scratch folders.
// Each test crate uses part of this module.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the collsim binary with `args`.
pub fn collsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collsim"))
        .args(args)
        .output()
        .expect("collsim runs")
}

/// An empty folder of this test process, named `prefix-name`.
pub fn scratch(prefix: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
