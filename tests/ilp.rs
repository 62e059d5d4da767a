//! TACOS-ILP and the TACCL-like baseline as whole commands: optimality on small networks where
//! the time-expanded network is exact, what modelling congestion is worth, the time limit, time
//! clustering and refusals.

mod common;

use std::collections::HashMap;
use std::sync::{RwLock, RwLockReadGuard};

use common::{collsim, first_row, summary};

/// The machine's cores, which cargo gives this file's tests side by side: every test shares
/// them but the time-limit one, which measures wall-clock time and takes them alone.
static MACHINE: RwLock<()> = RwLock::new(());

/// A share of the machine, held for a test's length.
fn sharing() -> RwLockReadGuard<'static, ()> {
    MACHINE
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const UNWOUND_SWITCH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/ilp/switch8_unwound_degree2.yml"
);

fn number(row: &HashMap<String, String>, column: &str) -> f64 {
    row[column]
        .parse()
        .unwrap_or_else(|_| panic!("{column} = {:?}", row[column]))
}

/// The summary of `algorithm` on `topology` (extra topology flags included) for `collective`.
fn run(topology: &[&str], collective: &str, algorithm: &[&str]) -> HashMap<String, String> {
    let mut args = topology.to_vec();
    args.extend_from_slice(&["--collective", collective, "--size", "1MiB"]);
    args.extend_from_slice(algorithm);
    summary(&args)
}

const ILP: &[&str] = &["--algorithm", "tacos-ilp"];
/// The integer program alone, at the user's chunking (no greedy over finer sub-chunks beside it).
const ILP_ALONE: &[&str] = &["--algorithm", "tacos-ilp", "--x-way", "1"];
const TACCL_LIKE: &[&str] = &["--algorithm", "taccl-like"];
/// TACOS-Greedy at the integer program's chunking, best of 16 seeded trials.
const GREEDY: &[&str] = &["--algorithm", "tacos", "--trials", "16", "--x-way", "1"];

/// With no latency and link delays in whole steps, the time-expanded network is the simulator's
/// timing exactly, so the program's optimum can be no slower than any greedy plan; where a
/// bound is attainable it is attained.
#[test]
fn the_integer_program_is_never_slower_than_greedy_where_its_steps_are_exact() {
    let _shared = sharing();
    let cases: &[(&[&str], &str, bool)] = &[
        (
            &["--topology", "ring:8", "--latency", "0ns"],
            "all-gather",
            false,
        ),
        (
            &["--topology", "fc:8", "--latency", "0ns"],
            "all-gather",
            true,
        ),
        (
            &["--topology", "mesh:3x3", "--latency", "0ns"],
            "all-gather",
            true,
        ),
        (
            &["--topology", "mesh:3x3", "--latency", "0ns"],
            "reduce-scatter",
            true,
        ),
        (
            &["--topology", "mesh:3x3", "--latency", "0ns"],
            "all-reduce",
            false,
        ),
        (
            &["--topology", "mesh:4x4", "--latency", "0ns"],
            "all-gather",
            false,
        ),
        (&["--topology", UNWOUND_SWITCH], "all-gather", false),
        (&["--topology", UNWOUND_SWITCH], "reduce-scatter", false),
        (
            &[
                "--topology",
                "mesh:4x4",
                "--bandwidth",
                "50GB/s,100GB/s",
                "--latency",
                "0ns",
            ],
            "all-gather",
            true,
        ),
    ];
    for &(topology, collective, attains_bound) in cases {
        let ilp = run(topology, collective, ILP);
        let greedy = run(topology, collective, GREEDY);
        let (t_ilp, t_greedy) = (
            number(&ilp, "collective_time_ns"),
            number(&greedy, "collective_time_ns"),
        );
        assert!(
            t_ilp <= t_greedy,
            "{topology:?} {collective}: ilp {t_ilp} ns, greedy {t_greedy} ns"
        );
        if attains_bound {
            let bound = number(&ilp, "bound_ns");
            assert!(
                t_ilp <= bound * 1.0001,
                "{topology:?} {collective}: ilp {t_ilp} ns, bound {bound} ns"
            );
        }
    }
}

/// On the switch unwound to degree 2 every NPU takes 7 chunks over two 25 GB/s in-links, so one
/// of them carries 4: the ingress bound, 4 sends of 131,072 B at 25 GB/s (5,242.88 ns each). The
/// greedy reaches 5 sends.
#[test]
fn the_unwound_switch_all_gather_meets_its_ingress_bound() {
    let _shared = sharing();
    let ilp = run(&["--topology", UNWOUND_SWITCH], "all-gather", ILP_ALONE);
    // 1 MiB / 8 = 131072 B per chunk at 25 GB/s: 5242.88 ns a send; 4 sends on the busier link.
    assert_eq!(number(&ilp, "collective_time_ns"), 4.0 * 5242.88);
    // At the default flags the greedy's finer sub-chunks beat that whole-chunk optimum, and
    // tacos-ilp keeps the faster plan: never slower than tacos.
    let default = number(
        &run(&["--topology", UNWOUND_SWITCH], "all-gather", ILP),
        "collective_time_ns",
    );
    let tacos = number(
        &run(
            &["--topology", UNWOUND_SWITCH],
            "all-gather",
            &["--algorithm", "tacos"],
        ),
        "collective_time_ns",
    );
    assert!(
        default < 4.0 * 5242.88 && default <= tacos,
        "{default} {tacos}"
    );
}

/// At default flags `tacos-ilp` is never slower than `tacos` (the cases: latency where
/// the program's steps round, heterogeneous lines).
#[test]
fn tacos_ilp_is_never_slower_than_tacos_at_default_flags() {
    let _shared = sharing();
    for topology in [
        &["--topology", "ring:6", "--latency", "1us"][..],
        &["--topology", "mesh:3x3", "--latency", "1us"],
        &[
            "--topology",
            "mesh:3x2",
            "--bandwidth",
            "50GB/s,20GB/s",
            "--latency",
            "0.5us",
        ],
    ] {
        let ilp = number(&run(topology, "all-gather", ILP), "collective_time_ns");
        let tacos = number(
            &run(topology, "all-gather", &["--algorithm", "tacos"]),
            "collective_time_ns",
        );
        assert!(
            ilp <= tacos,
            "{topology:?}: tacos-ilp {ilp} ns, tacos {tacos} ns"
        );
    }
}

#[test]
fn ignoring_congestion_costs_the_taccl_like_baseline_where_paths_share_links() {
    let _shared = sharing();
    let mesh = ["--topology", "mesh:4x4"];
    let ilp = number(&run(&mesh, "all-gather", ILP), "collective_time_ns");
    let taccl = number(&run(&mesh, "all-gather", TACCL_LIKE), "collective_time_ns");
    assert!(taccl > 1.2 * ilp, "taccl-like {taccl} ns, ilp {ilp} ns");
    // One hop between any two NPUs: no path shares a link, so congestion costs nothing.
    let fc = ["--topology", "fc:8"];
    let ilp = number(&run(&fc, "all-gather", ILP), "collective_time_ns");
    let taccl = number(&run(&fc, "all-gather", TACCL_LIKE), "collective_time_ns");
    assert_eq!(taccl, ilp);
}

#[test]
fn synthesize_method_ilp_reports_the_program_beside_the_simulated_time() {
    let _shared = sharing();
    let out = collsim(&[
        "synthesize",
        "--topology",
        UNWOUND_SWITCH,
        "--collective",
        "all-gather",
        "--size",
        "1MiB",
        "--method",
        "ilp",
        "--x-way",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("integer program"))
        .unwrap_or_else(|| panic!("no integer program line in\n{text}"));
    assert!(line.contains("optimal"), "{line}");
    assert!(line.contains("gap"), "{line}");
}

#[test]
fn a_time_limit_is_honoured_and_still_gives_a_valid_schedule() {
    let _alone = MACHINE
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // mesh 5x5 all-reduce: programs far beyond three seconds of microlp.
    let out = collsim(&[
        "synthesize",
        "--topology",
        "mesh:5x5",
        "--collective",
        "all-reduce",
        "--size",
        "1MiB",
        "--method",
        "ilp",
        "--time-limit",
        "3",
        "--format",
        "csv",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = first_row(&String::from_utf8(out.stdout).unwrap());
    let ms = number(&row, "synthesis_ms");
    // Unlimited, the programs run on: with an 8 s limit they take 7.6 s. The margin covers the
    // recovery after the programs' 90% and a noisy 2-core machine running tests side by side
    // (3.6 s seen once in CI, 4.0 s with two builds running beside the tests; 3.1 s alone),
    // still well short of the 7.6 s an ignored limit would take.
    assert!(ms <= 4500.0, "synthesis took {ms} ms against a 3 s limit");
    assert!(number(&row, "collective_time_ns") > 0.0);
}

#[test]
fn time_clustering_solves_successive_windows_to_a_complete_schedule() {
    let _shared = sharing();
    let out = collsim(&[
        "synthesize",
        "--topology",
        "mesh:4x4",
        "--collective",
        "all-gather",
        "--size",
        "64MiB",
        "--method",
        "ilp",
        "--cluster",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("integer program"))
        .unwrap();
    let programs: u32 = line
        .split("; ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(programs >= 4, "{line}");
}

#[test]
fn the_same_request_gives_the_same_schedule() {
    let _shared = sharing();
    let a = run(&["--topology", "mesh:3x3"], "all-reduce", ILP);
    let b = run(&["--topology", "mesh:3x3"], "all-reduce", ILP);
    for column in ["collective_time_ns", "transfers", "max_queue"] {
        assert_eq!(a[column], b[column], "{column}");
    }
}

#[test]
fn a_failed_npu_that_disconnects_the_network_is_refused_by_name() {
    let _shared = sharing();
    let out = collsim(&[
        "synthesize",
        "--topology",
        "mesh:3x3",
        "--remove-npus",
        "1,3",
        "--collective",
        "all-gather",
        "--size",
        "1MiB",
        "--method",
        "ilp",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("failed NPUs 1, 3"), "{err}");
}

#[test]
fn bad_ilp_flags_are_refused() {
    let _shared = sharing();
    for (flag, value) in [("--time-limit", "-1"), ("--cluster", "0")] {
        let flag_value = format!("{flag}={value}");
        let out = collsim(&[
            "synthesize",
            "--topology",
            "ring:4",
            "--collective",
            "all-gather",
            "--size",
            "1MiB",
            "--method",
            "ilp",
            &flag_value,
        ]);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(flag), "{err}");
    }
}

#[test]
fn tenants_keep_their_chunks_inside_their_communicators() {
    let _shared = sharing();
    // Two communicators on one mesh: a chunk may only relay through its own group's NPUs (the
    // schedule is validated, so a relay outside the group would fail the run).
    let out = collsim(&[
        "synthesize",
        "--topology",
        "mesh:4x4",
        "--collective",
        "all-reduce,all-gather",
        "--npus",
        "0-7;8-15",
        "--size",
        "1MiB,2MiB",
        "--method",
        "ilp",
        "--format",
        "csv",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = first_row(&String::from_utf8(out.stdout).unwrap());
    assert!(number(&row, "collective_time_ns") > 0.0);
}

/// TACCL's relay sketch on two A100 boxes (only GPUs 0 and 8 use their NICs): whatever the
/// chunking, the 8 chunks of the other box cross the one relay link a chunk at a time, and the
/// program's cut bound over the box shows the seeding plan takes no more steps than that, so
/// it is optimal without branching (an integer program over the 16 chunks otherwise stalls on
/// its weak relaxation).
#[test]
fn the_relay_sketch_all_gather_is_proven_optimal_by_its_cut() {
    let _shared = sharing();
    let root = env!("CARGO_MANIFEST_DIR");
    for chunks in ["1", "4"] {
        let out = common::stdout_of(&[
            "synthesize",
            "--topology",
            &format!("{root}/configs/a100_2x8.yml"),
            "--sketch",
            &format!("{root}/configs/sketches/a100_2x8_relay.yml"),
            "--collective",
            "all-gather",
            "--size",
            "1GB",
            "--method",
            "ilp",
            "--chunks",
            chunks,
            "--time-limit",
            "60",
        ]);
        assert!(
            out.contains("optimal without an integer program"),
            "--chunks {chunks}: {out}"
        );
    }
}
