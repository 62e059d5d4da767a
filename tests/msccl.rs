//! MSCCL XML export and import: round trips simulate identically and validate, and the exported
//! files follow the executor's rules, checked with an independent XML reader (roxmltree).

use std::collections::HashMap;

use collsim::algorithms::{generate, Algorithm};
use collsim::collective::{Collective, CollectiveKind};
use collsim::schedule::{msccl_xml, parse_msccl, validate, Schedule};
use collsim::sim::{simulate, SimOptions};
use collsim::synth::{synthesize, SynthOptions};
use collsim::topology::{Topology, TopologyOptions};

fn topo(spec: &str) -> Topology {
    TopologyOptions::new(spec)
        .with_links("50GB/s", "500ns")
        .build()
        .unwrap()
}

fn schedule_of(algorithm: Algorithm, t: &Topology, kind: CollectiveKind, chunks: u32) -> Schedule {
    let c = Collective::new(kind, t.active_npus(), 8 << 20, chunks, None).unwrap();
    match algorithm {
        // Sub-chunks at most 2 ways: the finer ones the synthesizer may choose on a switch
        // exceed the executor's 256 steps a thread block, which the export refuses. The
        // matching, not the symmetric plan: the plan paces sends with timers, which MSCCL has no
        // step for (the export leaves them out), so its time would not round-trip.
        Algorithm::Tacos => {
            let options = SynthOptions {
                x_way: Some(2),
                symmetry: false,
                ..SynthOptions::default()
            };
            synthesize(t, &[c], &options).unwrap().schedules.remove(0)
        }
        _ => generate(algorithm, t, &c).unwrap(),
    }
}

/// Ring, RHD and TACOS all-reduce and all-gather on 8 NPUs: export, import, simulate: the same
/// time to the picosecond, and the imported schedule validates.
#[test]
fn round_trips_simulate_identically_and_validate() {
    for spec in ["ring:8", "switch:8", "mesh:4x2"] {
        let t = topo(spec);
        for algorithm in [Algorithm::Ring, Algorithm::Rhd, Algorithm::Tacos] {
            for kind in [CollectiveKind::AllReduce, CollectiveKind::AllGather] {
                let original = schedule_of(algorithm, &t, kind, 1);
                let claim = original.collective.clone().unwrap();
                let xml = msccl_xml(&original, &claim, "test").unwrap();
                let user = Collective::new(kind, t.active_npus(), 8 << 20, 1, None).unwrap();
                let imported = parse_msccl("test.xml", &xml, &user).unwrap();
                validate(&imported, imported.collective.as_ref().unwrap(), 3).unwrap();
                let before = simulate(&t, &original, &SimOptions::default(), &mut ()).unwrap();
                let after = simulate(&t, &imported, &SimOptions::default(), &mut ()).unwrap();
                assert_eq!(before.finish, after.finish, "{spec} {algorithm:?} {kind}");
                assert_eq!(imported.len(), original.len());
            }
        }
    }
}

/// What the MSCCL executor's parser insists on, read back with a different XML library.
fn check_executor_rules(xml: &str, kind: CollectiveKind, n: usize) {
    let doc = roxmltree::Document::parse(xml).unwrap();
    let algo = doc.root_element();
    assert_eq!(algo.tag_name().name(), "algo");
    for key in [
        "name",
        "proto",
        "nchannels",
        "nchunksperloop",
        "ngpus",
        "coll",
        "inplace",
        "outofplace",
        "minBytes",
        "maxBytes",
    ] {
        assert!(algo.attribute(key).is_some(), "algo lacks {key}");
    }
    let int = |node: roxmltree::Node, key: &str| -> i64 {
        node.attribute(key)
            .unwrap_or_else(|| panic!("<{}> lacks {key}", node.tag_name().name()))
            .parse()
            .unwrap()
    };
    let per_loop = int(algo, "nchunksperloop");
    assert_eq!(int(algo, "ngpus"), n as i64);
    assert!(["Simple", "LL", "LL128"].contains(&algo.attribute("proto").unwrap()));
    let gpus: Vec<_> = algo.children().filter(|c| c.is_element()).collect();
    assert_eq!(gpus.len(), n);
    // Sends and receives per connection, and every referenced step.
    let mut sends: HashMap<(i64, i64), usize> = HashMap::new();
    let mut recvs: HashMap<(i64, i64), usize> = HashMap::new();
    for gpu in &gpus {
        let id = int(*gpu, "id");
        let (i_chunks, o_chunks) = (int(*gpu, "i_chunks"), int(*gpu, "o_chunks"));
        int(*gpu, "s_chunks");
        // The buffers times the collective's size multiplier make one loop.
        match kind {
            CollectiveKind::AllGather => assert_eq!(i_chunks * n as i64, per_loop),
            CollectiveKind::ReduceScatter => assert_eq!(o_chunks * n as i64, per_loop),
            _ => assert_eq!((i_chunks, o_chunks), (per_loop, per_loop)),
        }
        let tbs: Vec<_> = gpu.children().filter(|c| c.is_element()).collect();
        for (index, tb) in tbs.iter().enumerate() {
            assert_eq!(
                int(*tb, "id"),
                index as i64,
                "thread blocks are numbered in order"
            );
            let (send, recv) = (int(*tb, "send"), int(*tb, "recv"));
            int(*tb, "chan");
            assert!(send != id && recv != id);
            let steps: Vec<_> = tb.children().filter(|c| c.is_element()).collect();
            assert!(steps.len() <= 256);
            for (s, step) in steps.iter().enumerate() {
                assert_eq!(int(*step, "s"), s as i64);
                let kind = step.attribute("type").unwrap();
                let cnt = int(*step, "cnt");
                assert!((0..72).contains(&cnt));
                // One dependency per step, naming an existing step that announces it.
                let (depid, deps) = (int(*step, "depid"), int(*step, "deps"));
                int(*step, "hasdep");
                if depid >= 0 {
                    let target_tb = tbs[depid as usize];
                    let target = target_tb
                        .children()
                        .filter(|c| c.is_element())
                        .nth(deps as usize)
                        .expect("the dependency exists");
                    assert_eq!(target.attribute("hasdep"), Some("1"));
                }
                for (buf, off) in [("srcbuf", "srcoff"), ("dstbuf", "dstoff")] {
                    let size = match step.attribute(buf).unwrap() {
                        "i" => i_chunks,
                        "o" => o_chunks,
                        other => panic!("unexpected buffer {other}"),
                    };
                    if kind != "nop" {
                        assert!(int(*step, off) + cnt <= size, "{kind} {buf} out of bounds");
                    }
                }
                match kind {
                    "s" => *sends.entry((id, send)).or_default() += 1,
                    "r" | "rrc" => *recvs.entry((recv, id)).or_default() += 1,
                    "cpy" | "nop" => {}
                    other => panic!("unexpected step type {other}"),
                }
            }
        }
    }
    assert_eq!(sends, recvs, "every send meets a receive on its connection");
}

#[test]
fn exported_files_follow_the_executor_rules() {
    let t = topo("ring:8");
    for algorithm in [Algorithm::Ring, Algorithm::Rhd, Algorithm::Tacos] {
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
        ] {
            if algorithm == Algorithm::Rhd && kind == CollectiveKind::ReduceScatter {
                continue;
            }
            let s = schedule_of(algorithm, &t, kind, 2);
            let claim = s.collective.clone().unwrap();
            let xml = msccl_xml(&s, &claim, "rules").unwrap();
            check_executor_rules(&xml, kind, 8);
        }
    }
}

#[test]
fn bad_files_are_errors_naming_the_problem() {
    let t = topo("ring:4");
    let c = Collective::new(CollectiveKind::AllGather, t.active_npus(), 4 << 20, 1, None).unwrap();
    let s = generate(Algorithm::Ring, &t, &c).unwrap();
    let xml = msccl_xml(&s, s.collective.as_ref().unwrap(), "x").unwrap();
    let missing = xml.replace(" ngpus=\"4\"", "");
    let err = parse_msccl("f.xml", &missing, &c).unwrap_err().to_string();
    assert!(err.contains("f.xml") && err.contains("ngpus"), "{err}");
    // What some versions of the format lack is not needed (msccl-tools' early files).
    let early =
        ["proto", "outofplace", "minBytes", "maxBytes"]
            .iter()
            .fold(xml.clone(), |text, key| {
                let at = text.find(&format!(" {key}=\"")).unwrap();
                let end = at + 2 + key.len() + text[at + key.len() + 3..].find('"').unwrap() + 2;
                format!("{}{}", &text[..at], &text[end..])
            });
    assert!(!early.contains("outofplace"), "{early}");
    parse_msccl("f.xml", &early, &c).unwrap();
    let wrong =
        Collective::new(CollectiveKind::AllReduce, t.active_npus(), 4 << 20, 1, None).unwrap();
    let err = parse_msccl("f.xml", &xml, &wrong).unwrap_err().to_string();
    assert!(err.contains("allgather"), "{err}");
    let err = parse_msccl("f.xml", "<algo", &c).unwrap_err().to_string();
    assert!(err.contains("f.xml"), "{err}");
}

/// Indices and offsets that name nothing were panics (a step's deps past its thread block, a
/// depid naming no thread block) or silently simulated (offsets past the buffer, negative ids).
#[test]
fn indices_and_offsets_outside_the_declared_sizes_are_errors() {
    let t = topo("ring:4");
    let c = Collective::new(CollectiveKind::AllGather, t.active_npus(), 4 << 20, 2, None).unwrap();
    let s = generate(Algorithm::Ring, &t, &c).unwrap();
    let xml = msccl_xml(&s, s.collective.as_ref().unwrap(), "x").unwrap();
    let dependent = r#"depid="0" deps="0""#;
    assert!(xml.contains(dependent));
    for (bad, expected) in [
        (r#"depid="0" deps="999""#, "deps=999"),
        (r#"depid="99" deps="0""#, "depid=99"),
        (r#"depid="-7" deps="0""#, "depid=-7"),
    ] {
        let err = parse_msccl("f.xml", &xml.replacen(dependent, bad, 1), &c)
            .unwrap_err()
            .to_string();
        assert!(err.contains("f.xml") && err.contains(expected), "{err}");
    }
    let send = r#"type="s" srcbuf="o" srcoff="0""#;
    assert!(xml.contains(send));
    for (bad, expected) in [
        (r#"type="s" srcbuf="o" srcoff="99""#, "srcoff=99"),
        (r#"type="s" srcbuf="o" srcoff="-1""#, "srcoff=-1"),
    ] {
        let err = parse_msccl("f.xml", &xml.replacen(send, bad, 1), &c)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected) && err.contains("chunks"), "{err}");
    }
    let err = parse_msccl(
        "f.xml",
        &xml.replacen(r#"<gpu id="1""#, r#"<gpu id="7""#, 1),
        &c,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("id 7"), "{err}");
    let err = parse_msccl("f.xml", &xml.replacen(r#"send="1""#, r#"send="9""#, 1), &c)
        .unwrap_err()
        .to_string();
    assert!(err.contains("send=9"), "{err}");
}

mod common;

const TOOLS: &str = "tests/data/msccl";

fn tools_file(name: &str) -> String {
    format!("{TOOLS}/{name}")
}

fn run_file(file: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "simulate",
        "--topology",
        "switch:8",
        "--bandwidth",
        "300GB/s",
        "--latency",
        "1us",
        "--schedule",
        file,
        "--size",
        "64MB",
        "--format",
        "csv",
    ];
    args.extend_from_slice(extra);
    common::collsim(&args)
}

fn refusal(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

/// Algorithms from microsoft/msccl-tools as they were published (tests/data/msccl/README.md):
/// the collective and its chunks come from the file, older headers load, and the all-pairs
/// all-reduce, which reduces in the scratch buffer, runs validated: one transfer per send step.
#[test]
fn msccl_tools_files_run_with_what_they_state() {
    for (file, sends, chunks) in [("ring_2_4.xml", 448, 4), ("ap_8.xml", 896, 8)] {
        let text = std::fs::read_to_string(tools_file(file)).unwrap();
        assert!(!text.contains("outofplace"));
        let steps = |kind: &str| text.matches(&format!("type=\"{kind}\"")).count();
        assert_eq!(
            steps("s") + steps("rcs") + steps("rrs") + steps("rrcs"),
            sends
        );
        let out = run_file(&tools_file(file), &[]);
        assert!(out.status.success(), "{file}: {out:?}");
        let row = common::first_row(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(row["collective"], "all-reduce", "{file}");
        assert_eq!(row["transfers"], sends.to_string(), "{file}");
        assert_eq!(row["chunks_per_npu"], chunks.to_string(), "{file}");
        let efficiency: f64 = row["efficiency"].parse().unwrap();
        assert!(
            efficiency > 0.3 && efficiency <= 1.0,
            "{file}: {efficiency}"
        );
    }
    // A coarser --chunks is refined by the file, as before; one that does not divide it is not.
    let out = run_file(&tools_file("ap_8.xml"), &["--chunks", "4"]);
    assert!(out.status.success(), "{out:?}");
    let err = refusal(&run_file(&tools_file("ap_8.xml"), &["--chunks", "3"]));
    assert!(err.contains("nchunksperloop=64"), "{err}");
    let err = refusal(&run_file(
        &tools_file("ring_2_4.xml"),
        &["--collective", "all-gather"],
    ));
    assert!(
        err.contains("allreduce") && err.contains("all-gather"),
        "{err}"
    );
}

fn text_of(name: &str) -> String {
    std::fs::read_to_string(tools_file(name)).unwrap()
}

/// Files whose steps cannot run as written are refused, naming the step: one whose chunks do not
/// match at the two ends (msccl-tools' own ar_4.xml, deleted by its authors an hour after it was
/// committed, "fix bug"), a step waiting for a later one of its own thread block (a GPU would
/// deadlock), the output buffer in an in-place all-reduce, and a scratch chunk nothing reads.
#[test]
fn steps_that_cannot_run_as_written_are_refused_by_name() {
    let err = refusal(&run_file(&tools_file("ar_4.xml"), &[]));
    assert!(
        err.contains("GPU 3 thread block 32 step 0 sends piece 7")
            && err.contains("takes as piece 6"),
        "{err}"
    );
    let dir = common::scratch("msccl", "refused");
    let ring = text_of("ring_2_4.xml");
    let ap = text_of("ap_8.xml");
    let first = r#"<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1""#;
    assert!(ring.contains(first));
    let scratch_read = r#"type="re" srcbuf="s" srcoff="0" dstbuf="i" dstoff="0""#;
    assert!(ap.contains(scratch_read));
    for (name, text, expected) in [
        (
            "deadlock",
            ring.replacen(
                first,
                &first.replace(r#"depid="-1" deps="-1""#, r#"depid="0" deps="3""#),
                1,
            ),
            "GPU 0 thread block 0 step 0 waits",
        ),
        (
            "output",
            ring.replacen(first, &first.replace(r#"dstbuf="i""#, r#"dstbuf="o""#), 1),
            "dstbuf=o, but all-reduce runs in place",
        ),
        (
            "unread",
            ap.replacen(
                scratch_read,
                r#"type="re" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0""#,
                1,
            ),
            "receives into scratch chunk 0",
        ),
    ] {
        let path = dir.join(format!("{name}.xml"));
        std::fs::write(&path, text).unwrap();
        let err = refusal(&run_file(path.to_str().unwrap(), &[]));
        assert!(
            err.contains(expected) && err.contains(&format!("{name}.xml")),
            "{name}: {err}"
        );
    }
}

/// RCCL's shipped all-pairs all-reduce for eight MI300X (tests/data/msccl/README.md), whose
/// received scratch blocks are reduced a chunk at a time by several thread blocks, imports with
/// what it states, and on a full mesh takes the time of collsim's own all-pairs schedule, which
/// the NCCL model runs for RCCL's MSCCL calls on the MI300X: the same 448 transfers on the same
/// links; its all-to-all file likewise against the direct all-to-all. A reduction that puts one
/// of those chunks elsewhere is refused, naming its step.
#[test]
fn rccl_all_pairs_file_runs_as_collsims_all_pairs() {
    let mesh = |extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "--topology",
            "fc:8",
            "--bandwidth",
            "48GB/s",
            "--latency",
            "1us",
            "--size",
            "8MiB",
            "--format",
            "csv",
        ];
        args.extend_from_slice(extra);
        let out = common::collsim(&args);
        assert!(out.status.success(), "{out:?}");
        common::first_row(&String::from_utf8(out.stdout).unwrap())
    };
    // collsim's own direct exchange of `kind` in `chunks` pieces a block.
    let direct = |kind: &str, chunks: &str| {
        mesh(&[
            "--algorithm",
            "direct-staggered",
            "--collective",
            kind,
            "--chunks",
            chunks,
        ])
    };
    let file = tools_file("rccl_allreduce_allpairs_8n_ll_32tb.xml");
    let rccl = mesh(&["--schedule", &file]);
    let own = direct("all-reduce", "4");
    assert_eq!(rccl["collective"], "all-reduce");
    assert_eq!(rccl["chunks_per_npu"], "32");
    assert_eq!(rccl["transfers"], "448");
    assert_eq!(own["transfers"], "448");
    assert_eq!(rccl["collective_time_ns"], own["collective_time_ns"]);
    // RCCL's all-to-all files import too: each pair's block on the file's channels, the time of
    // collsim's direct all-to-all on the same links.
    let a2a = mesh(&["--schedule", &tools_file("rccl_alltoall_8n_9kb_190kb.xml")]);
    let own_a2a = direct("all-to-all", "2");
    assert_eq!(a2a["collective"], "all-to-all");
    assert_eq!(a2a["transfers"], "112");
    assert_eq!(a2a["collective_time_ns"], own_a2a["collective_time_ns"]);
    let read = r#"<step s="6" type="re" srcbuf="s" srcoff="0" dstbuf="i" dstoff="0" cnt="1""#;
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.matches(read).count(), 1);
    let dir = common::scratch("msccl", "rccl");
    let path = dir.join("misplaced.xml");
    std::fs::write(
        &path,
        text.replacen(read, &read.replace(r#"dstoff="0""#, r#"dstoff="1""#), 1),
    )
    .unwrap();
    let err = refusal(&run_file(path.to_str().unwrap(), &[]));
    assert!(
        err.contains("thread block 0 step 6") && err.contains("of another place lie"),
        "{err}"
    );
}
