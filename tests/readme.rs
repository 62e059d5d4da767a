//! The README's commands, run as written: every `collsim ...` (and `cargo run --release -- ...`)
//! line of its `sh` blocks, in order, from a scratch folder standing for a fresh clone (the
//! repository's `configs/` and `workloads/` read in place, `results/` and other outputs written
//! there). The default run takes the commands a debug build finishes in seconds, the first
//! example and the schedule re-run among them; `cargo test --release --test readme -- --ignored`
//! runs every one.

mod common;

use std::path::Path;
use std::process::Command;

/// A README command: its text as written and its arguments after `collsim`.
struct Example {
    text: String,
    args: Vec<String>,
}

/// Splits a shell line into words, honouring single and double quotes.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started || !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (None, c) => word.push(c),
        }
    }
    if started || !word.is_empty() {
        out.push(word);
    }
    out
}

/// The collsim commands of the README's `sh` blocks, continuation lines joined, comments cut.
fn examples() -> Vec<Example> {
    let readme = [
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap(),
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/GUIDE.md")).unwrap(),
    ]
    .join("\n");
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = match line.find(" #") {
            Some(i) if !line.trim_start().starts_with('#') => &line[..i],
            _ if line.trim_start().starts_with('#') => continue,
            _ => line,
        };
        let code = code.trim_end();
        if let Some(head) = code.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        pending.push_str(code);
        let text = std::mem::take(&mut pending);
        let all = words(&text);
        let args = match all
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["collsim", ..] => all[1..].to_vec(),
            ["cargo", "run", "--release", "--", ..] => all[4..].to_vec(),
            ["cargo", "run", "--release", "--locked", "--", ..] => all[5..].to_vec(),
            _ => continue,
        };
        out.push(Example { text, args });
    }
    out
}

/// Commands a debug build takes more than a few seconds over: run by the ignored test only.
fn slow(example: &Example) -> bool {
    const SLOW: [&str; 7] = [
        "calibrate ",
        "switch:1024",
        "3d_sw_sw_sw",
        "run configs/",
        "train ",
        "sweep ",
        "merge ",
    ];
    SLOW.iter().any(|s| example.text.contains(s))
}

fn run_examples(all: bool) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let clone = common::scratch("readme", if all { "all" } else { "quick" });
    let examples = examples();
    assert!(examples.len() >= 20, "the README's commands were not found");
    let mut ran = 0;
    for example in examples.iter().filter(|e| all || !slow(e)) {
        let args: Vec<String> = example
            .args
            .iter()
            .map(|a| {
                if ["configs/", "workloads/", "tests/data/"]
                    .iter()
                    .any(|dir| a.starts_with(dir))
                {
                    root.join(a).display().to_string()
                } else {
                    a.clone()
                }
            })
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_collsim"))
            .args(&args)
            .current_dir(&clone)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README command failed: {}\n{}",
            example.text,
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 15, "only {ran} README commands ran");
    assert!(clone.join("results/example/summary.csv").exists());
    assert!(clone.join("results/t/schedule.json").exists());
}

#[test]
fn the_readmes_commands_work_as_written() {
    let examples = examples();
    assert!(
        examples[0]
            .text
            .starts_with("cargo run --release --locked -- simulate"),
        "the first example is the newcomer's first command"
    );
    assert!(examples
        .iter()
        .any(|e| e.text.contains("--schedule results/t/schedule.json")));
    run_examples(false);
}

#[test]
#[ignore = "every README command, experiments included: run with --release"]
fn every_readme_command_works_as_written() {
    run_examples(true);
}
