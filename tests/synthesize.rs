//! The TACOS synthesizer: quality against the C++ reference, agreement between its own estimate
//! and the simulator, validity of every collective it builds, determinism, faults, switches and
//! several collectives at once.

mod common;
use common::{collsim, first_row, stdout_of, summary};

use collsim::algorithms::Algorithm;
use collsim::collective::{Collective, CollectiveKind};
use collsim::experiment::{execute, CollectiveRequest, RunOutcome, RunSpec, ScheduleSource};
use collsim::schedule::validate;
use collsim::sim::{simulate, SimOptions};
use collsim::synth::{synthesize, SynthOptions};
use collsim::topology::{Topology, TopologyOptions};
use collsim::units::Time;

fn topo(spec: &str, bandwidth: &str, latency: &str) -> Topology {
    TopologyOptions::new(spec)
        .with_links(bandwidth, latency)
        .build()
        .unwrap()
}

fn request(kind: CollectiveKind, size: u64, chunks: u32, root: Option<u32>) -> CollectiveRequest {
    CollectiveRequest {
        kind,
        size,
        chunks: Some(chunks),
        npus: None,
        root,
    }
}

/// Synthesizes, validates and simulates through the same path as `collsim synthesize`.
fn run(topology: &Topology, collectives: Vec<CollectiveRequest>, seed: u64) -> RunOutcome {
    let spec = RunSpec {
        seed: Some(seed),
        ..RunSpec::new(ScheduleSource::Algorithm(Algorithm::Tacos), collectives)
    };
    execute(topology, &spec, &mut ()).unwrap()
}

/// Every visible row of the TACOS reference: seed 1 and the default trials are no slower than
/// the C++ synthesizer's own reported time (heterogeneous meshes: within 2%).
#[test]
fn all_gather_is_no_slower_than_the_tacos_reference() {
    let text = include_str!("data/tacos/tacos_reference.csv");
    let mut rows = 0;
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (case, kind, shape, chunks, buffer) = (f[0], f[1], f[2], f[4], f[5]);
        let (bandwidth, latency) = if f[8].is_empty() {
            (format!("{}GiB/s", f[6]), format!("{}us", f[7]))
        } else {
            (
                format!("{}GiB/s,{}GiB/s", f[6], f[8]),
                format!("{}us,{}us", f[7], f[9]),
            )
        };
        let reference_ns: f64 = f[10].parse::<f64>().unwrap() * 1e3;
        let slack = if f[8].is_empty() { 1.0 } else { 1.02 };
        let t = topo(&format!("{kind}:{shape}"), &bandwidth, &latency);
        let outcome = run(
            &t,
            vec![request(
                CollectiveKind::AllGather,
                buffer.parse().unwrap(),
                chunks.parse().unwrap(),
                None,
            )],
            1,
        );
        let ours = outcome.result.finish.as_ns_f64();
        assert!(
            ours <= reference_ns * slack + 1e-6,
            "{case}: {ours} ns > reference {reference_ns} ns"
        );
        rows += 1;
    }
    assert_eq!(rows, 21);
}

/// On point-to-point networks the synthesizer's estimate is the simulated time, to the
/// picosecond: it models links exactly as the simulator does and keeps each link's FIFO order.
#[test]
fn the_estimate_is_the_simulated_time() {
    let cases = [
        ("mesh:4x4", "50GiB/s", "0.5us", 1),
        ("mesh:5x3", "50GiB/s,75GiB/s", "0.5us,1us", 3),
        ("torus:3x3x3", "50GiB/s", "0.5us", 2),
        ("ring:7", "25GB/s", "2us", 4),
        ("hypercube:4", "100GB/s", "100ns", 2),
        // 35 links out of each NPU: past the 32 whose uselessness a chunk's log entry records.
        ("fc:36", "50GiB/s", "0.5us", 1),
    ];
    for (spec, bw, lat, chunks) in cases {
        let t = topo(spec, bw, lat);
        for kind in [CollectiveKind::AllGather, CollectiveKind::Broadcast] {
            let c = Collective::new(kind, t.active_npus(), 1 << 26, chunks, None).unwrap();
            let s = synthesize(&t, std::slice::from_ref(&c), &SynthOptions::default()).unwrap();
            let sim = simulate(&t, &s.schedules[0], &SimOptions::default(), &mut ()).unwrap();
            assert_eq!(sim.finish, s.estimate, "{spec} {kind}");
        }
    }
}

/// Heterogeneous meshes and tori (each dimension its own bandwidth): 1 GiB all-gather within 1%
/// of the lower bound. The corner of a mesh must keep both its slow and its fast link busy from
/// first byte to last, which one chunk per NPU cannot; the X-way search must cut finer.
#[test]
fn heterogeneous_meshes_and_tori_reach_the_bound() {
    let cases = [
        ("mesh:4x4", "50GiB/s,200GiB/s"),
        ("torus:4x4", "200GiB/s,50GiB/s"),
        ("mesh:5x5", "50GiB/s,75GiB/s"),
        ("mesh:3x3x3", "50GB/s,100GB/s,200GB/s"),
    ];
    for (spec, bw) in cases {
        let t = topo(spec, bw, "0.5us");
        let outcome = run(
            &t,
            vec![request(CollectiveKind::AllGather, 1 << 30, 1, None)],
            1,
        );
        let bound = outcome.summary.bound.expect("all-gather has a bound");
        let efficiency = bound.as_ns_f64() / outcome.result.finish.as_ns_f64();
        assert!(efficiency >= 0.99, "{spec} {bw}: efficiency {efficiency}");
    }
}

/// The 8x8 mesh of mixed lines (x: 50 GiB/s and 0.5 us, y: 25 GiB/s and 1 us), all-gather of
/// 1 GiB at one chunk: the TACOS C++ synthesizer (astra-sim/tacos @1811f1f) finds 13146.0 us
/// (measured for issue 53 on this machine kind); at the default trials collsim must not be slower.
/// Four trials left 13.20 ms: one matching differs from the next by a fraction of a chunk here.
#[test]
fn mixed_latency_mesh_is_no_slower_than_tacos_cpp() {
    let t = topo("mesh:8x8", "50GiB/s,25GiB/s", "0.5us,1us");
    let outcome = run(
        &t,
        vec![request(CollectiveKind::AllGather, 1 << 30, 1, None)],
        1,
    );
    let us = outcome.result.finish.as_ns_f64() / 1e3;
    assert!(us <= 13146.0, "{us} us");
}

/// Reduce-scatter and all-reduce pass validation (in `run`), and all-reduce takes at most 1/0.9
/// of the best reduce-scatter plus the best all-gather (ForestColl's cut bounds; on the mesh
/// this sum is a reference, not a proven lower bound) on the three networks.
#[test]
fn all_reduce_is_valid_and_efficient() {
    for spec in ["torus:4x4x4", "mesh:8x8", "hypercube:6"] {
        let t = topo(spec, "50GB/s", "500ns");
        for kind in [
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
            CollectiveKind::Reduce,
        ] {
            let outcome = run(&t, vec![request(kind, 1 << 30, 4, None)], 1);
            if kind == CollectiveKind::AllReduce {
                let phase = |kind| {
                    let c = Collective::new(kind, t.active_npus(), 1 << 30, 4, None).unwrap();
                    collsim::bound::cut_bound(&t, &c, None).unwrap()
                };
                let reference =
                    phase(CollectiveKind::ReduceScatter) + phase(CollectiveKind::AllGather);
                let ratio = reference.as_ns_f64() / outcome.result.finish.as_ns_f64();
                assert!(ratio >= 0.90, "{spec}: {ratio} of RS + AG");
            }
        }
    }
}

/// A link never carries two chunks at once and a chunk never leaves an NPU before it arrived:
/// checked on the simulated schedule (the simulator's record), for a heterogeneous mesh.
#[test]
fn links_serve_one_chunk_at_a_time_and_chunks_move_only_after_arriving() {
    let t = topo("mesh:6x4", "30GiB/s,90GiB/s", "1us,0.5us");
    let c = Collective::new(CollectiveKind::AllGather, t.active_npus(), 1 << 28, 2, None).unwrap();
    let s = synthesize(&t, std::slice::from_ref(&c), &SynthOptions::default()).unwrap();
    let schedule = &s.schedules[0];
    let options = SimOptions {
        record_transfers: true,
        ..SimOptions::default()
    };
    let result = simulate(&t, schedule, &options, &mut ()).unwrap();
    let mut by_link: std::collections::HashMap<(u32, u32), Vec<(Time, Time)>> = Default::default();
    for i in 0..schedule.len() as u32 {
        let tr = schedule.transfer(i);
        let link = t.link(t.link_between(tr.src, tr.dst).expect("single hop"));
        let busy = link.bandwidth.transmit_time(tr.bytes);
        let start = result.issued(schedule, i);
        // Started no earlier than issue; finished exactly a + n/B after it started on the link.
        let started = result.completed[i as usize] - busy - link.latency;
        assert!(started >= start);
        by_link
            .entry((tr.src, tr.dst))
            .or_default()
            .push((started, started + busy));
    }
    for (link, mut spans) in by_link {
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "link {link:?} overlaps: {w:?}");
        }
    }
    // X-way chunking may cut the chunks finer; the schedule claims what it carries.
    let claimed = schedule
        .collective
        .as_ref()
        .expect("a synthesized schedule claims");
    assert_eq!((claimed.kind, claimed.size), (c.kind, c.size));
    assert_eq!(claimed.chunks % c.chunks, 0);
    validate(schedule, claimed, 7).unwrap();
}

#[test]
fn the_same_seed_gives_the_same_schedule_and_seeds_differ() {
    let t = topo("mesh:6x6", "50GB/s", "500ns");
    let c = Collective::new(CollectiveKind::AllGather, t.active_npus(), 1 << 26, 2, None).unwrap();
    let options = |seed| SynthOptions {
        seed,
        trials: Some(2),
        ..SynthOptions::default()
    };
    let a = synthesize(&t, std::slice::from_ref(&c), &options(5)).unwrap();
    let b = synthesize(&t, std::slice::from_ref(&c), &options(5)).unwrap();
    let other = synthesize(&t, std::slice::from_ref(&c), &options(6)).unwrap();
    let key = |s: &collsim::synth::Synthesis| {
        let s = &s.schedules[0];
        (0..s.len() as u32)
            .map(|i| (s.transfer(i), s.deps(i).to_vec(), s.pieces(i)))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&a), key(&b));
    assert_ne!(key(&a), key(&other));
}

/// The paper's fault case: a 4x4 mesh without NPUs 7 and 9.
#[test]
fn synthesis_routes_around_failed_npus() {
    let t = TopologyOptions {
        remove_npus: Some("7,9".into()),
        ..TopologyOptions::new("mesh:4x4").with_links("50GB/s", "500ns")
    }
    .build()
    .unwrap();
    let outcome = run(
        &t,
        vec![request(CollectiveKind::AllGather, 14 << 20, 1, None)],
        1,
    );
    let s = &outcome.schedule;
    assert_eq!(s.len(), 14 * 13);
    assert!(s
        .transfers()
        .all(|tr| ![7, 9].contains(&tr.src) && ![7, 9].contains(&tr.dst)));
}

/// Switches are unwound for synthesis; the schedule then runs on the real switch, where it is
/// no slower than the bidirectional ring (which halves every chunk: give tacos 4 chunks).
#[test]
fn switches_are_unwound_and_the_result_beats_ring_on_a_switch() {
    let t = topo("switch:16", "50GB/s", "500ns");
    let tacos = run(
        &t,
        vec![request(CollectiveKind::AllGather, 1 << 30, 4, None)],
        1,
    );
    let ring_spec = RunSpec::new(
        ScheduleSource::Algorithm(Algorithm::Ring),
        vec![request(CollectiveKind::AllGather, 1 << 30, 1, None)],
    );
    let ring = execute(&t, &ring_spec, &mut ()).unwrap();
    assert!(tacos.result.finish <= ring.result.finish);
    let boxes = TopologyOptions::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/two_nvswitch_boxes.yml"
    ))
    .build()
    .unwrap();
    run(
        &boxes,
        vec![request(CollectiveKind::AllReduce, 1 << 26, 2, None)],
        1,
    );
}

/// The papers' multi-tenant case on a 6x6 mesh: broadcast from NPU 2, reduce to NPU 17 and an
/// all-gather at once; each part is validated and they share the network.
#[test]
fn several_collectives_run_together() {
    let t = topo("mesh:6x6", "50GB/s", "500ns");
    let size = 36 << 20;
    let together = run(
        &t,
        vec![
            request(CollectiveKind::Broadcast, size, 4, Some(2)),
            request(CollectiveKind::Reduce, size, 4, Some(17)),
            request(CollectiveKind::AllGather, size, 1, None),
        ],
        1,
    );
    assert_eq!(together.summary.collective, "broadcast+reduce+all-gather");
    let alone = run(
        &t,
        vec![request(CollectiveKind::AllGather, size, 1, None)],
        1,
    );
    assert!(together.result.finish >= alone.result.finish);
}

#[test]
fn the_command_writes_the_schedule_and_rejects_bad_requests() {
    let scratch = common::scratch("collsim-synth", "out");
    let dir = scratch.join("out");
    let out = collsim(&[
        "synthesize",
        "-t",
        "mesh:3x3",
        "-c",
        "all-gather",
        "-s",
        "9MiB",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in ["summary.csv", "transfers.csv", "links.csv", "schedule.json"] {
        assert!(dir.join(file).exists(), "{file}");
    }
    // The written schedule simulates to the same time when read back.
    let again = collsim(&[
        "simulate",
        "-t",
        "mesh:3x3",
        "--schedule",
        dir.join("schedule.json").to_str().unwrap(),
        "-c",
        "all-gather",
        "-s",
        "9MiB",
        "--format",
        "csv",
    ]);
    let summary = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    let time = |csv: &str| {
        csv.lines()
            .nth(1)
            .unwrap()
            .split(',')
            .nth(6)
            .unwrap()
            .to_string()
    };
    assert_eq!(
        time(&summary),
        time(&String::from_utf8_lossy(&again.stdout))
    );
    for bad in [
        vec![
            "synthesize",
            "-t",
            "mesh:3x3",
            "-c",
            "all-to-all",
            "-s",
            "9MiB",
            "--x-way",
            "0",
        ],
        vec![
            "synthesize",
            "-t",
            "mesh:3x3",
            "-c",
            "all-gather",
            "-s",
            "9MiB",
            "--trials",
            "0",
        ],
        vec![
            "synthesize",
            "-t",
            "switch:8",
            "-c",
            "all-gather",
            "-s",
            "8MiB",
            "--unwind-degree",
            "0",
        ],
        // A switch is a hierarchy the planners take: they refuse it too.
        vec![
            "synthesize",
            "-t",
            "switch:8",
            "-c",
            "broadcast",
            "-s",
            "8MiB",
            "--x-way",
            "0",
        ],
        vec![
            "synthesize",
            "-t",
            "switch:8",
            "-c",
            "all-reduce",
            "-s",
            "8MiB",
            "--x-way",
            "0",
        ],
    ] {
        let out = collsim(&bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(
            !err.contains("internal error"),
            "a panic, not a refusal: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A schedule simulated as it is synthesized (never held) measures what the whole-schedule
/// engine measures on the same schedule: the collective time and every link's bytes, busy time,
/// waiting time and longest queue; and it passes the in-order validation. Meshes and tori of
/// uneven sides and speeds, sizes that split into uneven chunks, an endpoint delay, more than
/// one chunk per NPU, and a broadcast.
#[test]
fn the_in_order_simulation_measures_what_the_engine_measures() {
    use collsim::synth::InOrderRun;
    let cases = [
        ("mesh:8x8", "50GB/s", "500ns", 1 << 26, 1, Time::ZERO),
        ("mesh:5x7", "25GB/s", "1us", (1 << 24) + 7, 2, Time::ZERO),
        (
            "torus:4x4x4",
            "100GB/s",
            "300ns",
            1 << 28,
            1,
            Time::from_ns(200),
        ),
        ("mesh:3x4x2", "50GB/s", "0ns", 123_456_789, 3, Time::ZERO),
        ("ring:9", "40GB/s", "2us", 1 << 22, 4, Time::from_ns(50)),
    ];
    for (spec, bandwidth, latency, size, chunks, endpoint_delay) in cases {
        let t = topo(spec, bandwidth, latency);
        let c = Collective::new(
            CollectiveKind::AllGather,
            t.active_npus(),
            size,
            chunks,
            None,
        )
        .unwrap();
        let sim = SimOptions {
            endpoint_delay,
            record_busy_intervals: true,
            ..SimOptions::default()
        };
        let held = synthesize(&t, std::slice::from_ref(&c), &SynthOptions::default()).unwrap();
        assert!(held.simulated.is_none(), "{spec}");
        let recorded = SimOptions {
            record_transfers: true,
            ..sim.clone()
        };
        let engine = simulate(&t, &held.schedules[0], &recorded, &mut ()).unwrap();
        // Each transfer's issue and completion time, as the in-order simulation returns them.
        let schedule = &held.schedules[0];
        let mut direct = collsim::sim::InOrder::new(&t, &sim, schedule.len() as u64).unwrap();
        for i in 0..schedule.len() as u32 {
            let x = schedule.transfer(i);
            let dep = schedule.deps(i).first().map(|&d| u64::from(d));
            let times = direct
                .push(x.src, x.dst, x.bytes, dep, schedule.op(i))
                .unwrap();
            let engine_times = (engine.issued(schedule, i), engine.completed[i as usize]);
            assert_eq!(times, engine_times, "{spec}: transfer {i}");
        }
        let options = SynthOptions {
            simulate_in_order: Some(InOrderRun {
                sim: sim.clone(),
                validate: true,
            }),
            ..SynthOptions::default()
        };
        let streamed = synthesize(&t, std::slice::from_ref(&c), &options).unwrap();
        assert!(streamed.schedules.is_empty(), "{spec}: nothing held");
        assert_eq!(streamed.estimate, held.estimate, "{spec}: the same plan");
        let in_order = streamed.simulated.expect("simulated in order");
        assert_eq!(in_order.transfers, held.schedules[0].len(), "{spec}");
        let r = in_order.result;
        assert_eq!(r.finish, engine.finish, "{spec}");
        assert_eq!(r.link_bytes, engine.link_bytes, "{spec}");
        assert_eq!(r.link_busy, engine.link_busy, "{spec}");
        assert_eq!(r.link_queued, engine.link_queued, "{spec}");
        assert_eq!(r.link_max_queue, engine.link_max_queue, "{spec}");
        assert_eq!(r.hops, engine.hops, "{spec}");
        assert_eq!(r.busy_intervals, engine.busy_intervals, "{spec}");
    }
}

/// Without files, `synthesize` simulates (and validates) the schedule as it plans it and says so;
/// its summary is the one of the schedule built, validated and simulated whole (with `--out`).
#[test]
fn the_command_simulates_in_order_when_nothing_needs_the_schedule() {
    let scratch = common::scratch("collsim-in-order", "out");
    let dir = scratch.join("out");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "synthesize",
            "-t",
            "torus:6x5",
            "-c",
            "all-gather",
            "-s",
            "30MiB",
        ];
        args.extend_from_slice(extra);
        stdout_of(&args)
    };
    for extra in [&[][..], &["--no-validate"]] {
        let text = run(extra);
        assert!(text.contains("in order as synthesized"), "{text}");
    }
    // The summary rows without the synthesis's wall time.
    let row = |text: String| {
        let mut row = first_row(&text);
        row.remove("synthesis_ms")
            .expect("the summary has synthesis_ms");
        row
    };
    let held = run(&["--format", "csv", "--out", dir.to_str().unwrap()]);
    assert_eq!(row(run(&["--format", "csv"])), row(held));
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `--out`, where the tables are Parquet, the schedule is simulated in order as well, its
/// schedule and transfers tables written as it is planned: the results folder is the one of the
/// same schedule built, simulated and written whole (`--msccl` makes the run hold it), file for
/// file, but for the synthesis's wall time in the summary.
#[test]
fn results_folders_are_written_in_order_as_planned() {
    let scratch = common::scratch("collsim-in-order-out", "out");
    let dir = scratch.join("out");
    let (in_order, held) = (dir.join("in-order"), dir.join("held"));
    let xml = dir.join("schedule.xml");
    let run = |out: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "synthesize",
            "-t",
            "mesh:5x6",
            "-c",
            "all-gather",
            "-s",
            "30MiB",
            "--chunks",
            "2",
            "--endpoint-delay",
            "100ns",
            "--table-format",
            "parquet",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        stdout_of(&args)
    };
    assert!(run(&in_order, &[]).contains("in order as synthesized"));
    let text = run(&held, &["--msccl", xml.to_str().unwrap()]);
    assert!(!text.contains("in order as synthesized"), "{text}");
    let mut files: Vec<String> = std::fs::read_dir(&held)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    for name in [
        "schedule.parquet",
        "transfers.parquet",
        "links.csv",
        "utilization.csv",
    ] {
        assert!(files.iter().any(|f| f == name), "{name} in {files:?}");
    }
    for name in files.iter().filter(|f| *f != "summary.csv") {
        let (a, b) = (in_order.join(name), held.join(name));
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            "{name} differs"
        );
    }
    let summary = |folder: &std::path::Path| {
        let text = std::fs::read_to_string(folder.join("summary.csv")).unwrap();
        let mut row = first_row(&text);
        row.remove("synthesis_ms");
        row
    };
    assert_eq!(summary(&in_order), summary(&held));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every collective synthesizes, validated, on a mesh: those the in-order validation does not
/// take (all-to-all, scatter) are held and validated whole rather than refused with an internal
/// error, as all-to-all once was.
#[test]
fn every_collective_synthesizes_validated_on_a_mesh() {
    for kind in [
        "all-gather",
        "all-reduce",
        "reduce-scatter",
        "broadcast",
        "reduce",
        "all-to-all",
        "scatter",
        "gather",
    ] {
        let row = common::summary(&[
            "--topology",
            "mesh:3x4",
            "--algorithm",
            "tacos",
            "--collective",
            kind,
            "--size",
            "12MB",
        ]);
        let time: f64 = row["collective_time_ns"].parse().unwrap();
        assert!(time > 0.0, "{kind}: {row:?}");
    }
}

/// A synthesis that refines its chunks keeps the results file of the plan it chose, where the
/// plan is simulated as it is made and never held: a torus all-to-all's best plan is not its last
/// trial (its file was once overwritten by the last, and the run ended in an internal error).
#[test]
fn the_chosen_plan_s_file_is_kept_when_later_trials_lose() {
    let scratch = common::scratch("collsim-kept", "out");
    let dir = scratch.join("out");
    let out = dir.to_str().unwrap();
    let args = [
        "--topology",
        "torus:4x4",
        "--collective",
        "all-to-all",
        "--size",
        "16MiB",
    ];
    let planned = first_row(&stdout_of(
        &[
            &[
                "simulate",
                "--algorithm",
                "tacos",
                "--format",
                "csv",
                "--no-validate",
            ][..],
            &args,
            &["--out", out, "--table-format", "parquet"],
        ]
        .concat(),
    ));
    let schedule = dir.join("schedule.parquet");
    let again = first_row(&stdout_of(&[
        "simulate",
        "--format",
        "csv",
        "--topology",
        "torus:4x4",
        "--schedule",
        schedule.to_str().unwrap(),
    ]));
    assert_eq!(planned["collective_time_ns"], again["collective_time_ns"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A communication sketch changes the schedule as it says: the links it drops carry nothing
/// (they carry data without it), the run validates, its chunks apply where --chunks is not
/// given; a sketch that cuts NPUs apart, or one given to a baseline, is refused.
#[test]
fn a_sketch_leaves_the_links_it_drops_idle() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = common::scratch("collsim-sketch", "runs");
    let idle = |topology: &str, sketch: Option<&str>, dropped: &dyn Fn(u32, u32) -> bool| {
        let out = dir.join(format!("run-{}", sketch.is_some()));
        let mut args = vec![
            "synthesize".to_string(),
            "--topology".into(),
            topology.to_string(),
            "--collective".into(),
            "all-gather".into(),
            "--size".into(),
            "64MB".into(),
            "--out".into(),
            out.display().to_string(),
            "--force".into(),
        ];
        if let Some(s) = sketch {
            args.extend(["--sketch".into(), format!("{root}/configs/sketches/{s}")]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::stdout_of(&args);
        let links = std::fs::read_to_string(out.join("links.csv")).unwrap();
        let summary = std::fs::read_to_string(out.join("summary.csv")).unwrap();
        let carried: u64 = links
            .lines()
            .skip(1)
            .map(|l| {
                l.split(',')
                    .map(|f| f.parse::<u64>().unwrap_or(0))
                    .collect::<Vec<_>>()
            })
            .filter(|f| dropped(f[0] as u32, f[1] as u32))
            .map(|f| f[2])
            .sum();
        (
            carried,
            common::first_row(&summary)["chunks_per_npu"].clone(),
        )
    };
    let a100 = format!("{root}/configs/a100_2x8.yml");
    let nic = |a: u32, b: u32| {
        let (gpu, nic) = (a.min(b), a.max(b));
        (1..16).contains(&gpu) && gpu != 8 && nic == 18 + gpu
    };
    assert!(idle(&a100, None, &nic).0 > 0);
    assert_eq!(idle(&a100, Some("a100_2x8_relay.yml"), &nic).0, 0);
    let bridge = |a: u32, b: u32| matches!((a.min(b), a.max(b)), (1, 5) | (2, 6));
    assert!(idle("dgx1", None, &bridge).0 > 0);
    assert_eq!(
        idle("dgx1", Some("dgx1_two_bridges.yml"), &bridge),
        (0, "2".to_string())
    );
    let cut = dir.join("cut.yml");
    std::fs::write(
        &cut,
        "sketch:\n  drop:\n    - {between: '0-3', and: '4-7'}\n",
    )
    .unwrap();
    for (algorithm, expected) in [("tacos", "do not connect"), ("ring", "--sketch guides")] {
        let out = common::collsim(&[
            "simulate",
            "--topology",
            "dgx1",
            "--collective",
            "all-gather",
            "--size",
            "1MB",
            "--algorithm",
            algorithm,
            "--sketch",
            cut.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{algorithm}: {err}");
    }
}

/// Through switches the text report says what the synthesizer kept (the unwinding, the X-way
/// chunking) and which unwindings it did not synthesize, each with its latency floor (TACOS's
/// matching asked for: on this hierarchy the symmetric plan would win at 1 KB).
#[test]
fn the_report_names_the_kept_unwinding_and_the_skipped_ones() {
    let out = stdout_of(&[
        "simulate",
        "--topology",
        "dims:switch4,switch4",
        "--bandwidth",
        "200GB/s,50GB/s",
        "--latency",
        "700ns,1700ns",
        "--collective",
        "all-reduce",
        "--size",
        "1KB",
        "--algorithm",
        "tacos",
        "--no-symmetry",
    ]);
    let line = out
        .lines()
        .find(|l| l.contains("synthesizer chose"))
        .unwrap_or_else(|| panic!("no choice line in:\n{out}"));
    assert!(line.contains("split unwinding"), "{line}");
    assert!(line.contains("-way sub-chunks"), "{line}");
    // Degree 1 and 2 chains through the rings of 4 cost more than the split's whole schedule.
    assert!(
        line.contains("not synthesized") && line.contains("degree 1"),
        "{line}"
    );
}

/// The 256-NPU switch hierarchy (16 x 4 x 4): all-reduce synthesized by symmetry, one rank's
/// chunk planned and translated to every rank, at the efficiency the search over unwindings
/// reached before it or better (results/README.md: 0.344 at 1 KB, 0.323 at 1 MB, 0.935 at 64 MB,
/// 0.920 at 1 GB, where that search took 0.6-8 s), and in well under a second of synthesis.
#[test]
fn hier_256_all_reduce_by_symmetry_keeps_the_searchs_efficiency() {
    let topology = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/hier_256.yml");
    for (size, before) in [
        ("1KB", 0.344),
        ("1MB", 0.323),
        ("64MB", 0.935),
        ("1GB", 0.920),
    ] {
        let args = ["--collective", "all-reduce", "--size", size];
        assert_as_good_within_a_second(topology, &args, before);
    }
}

/// The 256-NPU switch hierarchy's rooted collectives, planned port by port from the root, at
/// the efficiency the search over unwindings reaches or better (that search, run with
/// `--no-symmetry` on this release: broadcast 0.677 / 0.345 / 0.344 / 0.365 at 1 KB / 1 MB /
/// 64 MB / 1 GB, reduce 0.681 / 0.357 / 0.347 / 0.321, gather 0.689 / 0.651 / 0.803 / 0.814,
/// scatter 0.596 / 0.471 / 0.913 / 0.963, in 58-792 ms), and in well under a second of synthesis.
#[test]
fn hier_256_rooted_collectives_from_the_root_keep_the_searchs_efficiency() {
    let topology = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/hier_256.yml");
    let before = [
        ("broadcast", [0.677, 0.345, 0.344, 0.365]),
        ("reduce", [0.681, 0.357, 0.347, 0.321]),
        ("gather", [0.689, 0.651, 0.803, 0.814]),
        ("scatter", [0.596, 0.471, 0.913, 0.963]),
    ];
    for (collective, searched) in before {
        for (size, before) in ["1KB", "1MB", "64MB", "1GB"].into_iter().zip(searched) {
            let args = ["--collective", collective, "--size", size, "--root", "37"];
            assert_as_good_within_a_second(topology, &args, before);
        }
    }
}

/// `tacos` on `topology` with `args` reaches at least the efficiency `before` and synthesizes in
/// under a second.
fn assert_as_good_within_a_second(topology: &str, args: &[&str], before: f64) {
    let mut all = vec!["--topology", topology, "--algorithm", "tacos"];
    all.extend_from_slice(args);
    let row = summary(&all);
    let efficiency: f64 = row["efficiency"].parse().unwrap();
    let synthesis_ms: f64 = row["synthesis_ms"].parse().unwrap();
    assert!(
        efficiency >= before,
        "{args:?}: {efficiency} against {before}"
    );
    assert!(synthesis_ms < 1000.0, "{args:?}: {synthesis_ms} ms");
}
