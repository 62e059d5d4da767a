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
        Algorithm::Tacos => synthesize(t, &[c], &SynthOptions::default())
            .unwrap()
            .schedules
            .remove(0),
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
    let missing = xml.replace(" proto=\"Simple\"", "");
    let err = parse_msccl("f.xml", &missing, &c).unwrap_err().to_string();
    assert!(err.contains("f.xml") && err.contains("proto"), "{err}");
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
