//! Unit tests of the NCCL model: plans, networks and cuts as NCCL's behaviour fixes them.

use super::*;

fn model(spec: &str) -> Model {
    let system = GpuSystem::parse(spec).unwrap().unwrap();
    Model::with_allowed(&system, Allowed::default())
}

/// A call's plan does not depend on the calibrated figures, so `calibrate` plans each call
/// once: timed under other figures, a plan made without them gives what predicting with
/// those figures gives, to the picosecond (rings, trees, NVLS and NVLSTree, CollNet, RCCL's
/// MSCCL, point-to-point, a rooted call).
#[test]
fn a_plan_times_as_the_calibrated_model_predicts() {
    let launch = Launch::default();
    let cases = [
        ("dgx-a100:1", CollectiveKind::AllReduce, 8u64 << 20, 0),
        ("dgx-a100:2", CollectiveKind::AllReduce, 64 << 10, 0),
        ("dgx-a100:2", CollectiveKind::AllGather, 4 << 20, 0),
        ("hgx-h100:1", CollectiveKind::AllReduce, 64 << 20, 0),
        ("hgx-h100:2", CollectiveKind::AllReduce, 32 << 20, 0),
        ("hgx-b200:2", CollectiveKind::AllToAll, 1 << 20, 0),
        ("hgx-h100:2", CollectiveKind::Broadcast, 1 << 20, 5),
        ("mi300x:1", CollectiveKind::AllReduce, 8 << 20, 0),
    ];
    for (spec, kind, bytes, root) in cases {
        let plain = model(spec);
        let mut system = plain.system.clone();
        let c = &mut system.calibration;
        c.intra_gbps = Some(123.0);
        c.nic_gbps = Some(17.0);
        c.fixed_us = Some(9.5);
        for p in 0..PROTOS {
            c.latency_factor.set(p, Some(1.7));
            c.rate_factor.set(p, Some(0.6));
        }
        let fitted = Model::with_allowed(&system, Allowed::default());
        let plan = plain.plan(kind, bytes, root, launch).unwrap();
        let predicted = fitted.predict(kind, bytes, root, launch).unwrap();
        let timed = fitted.time(&plan, launch).unwrap();
        assert_eq!(timed, predicted, "{spec} {kind} {bytes}");
        assert_ne!(
            plain.time(&plan, launch).unwrap().time,
            timed.time,
            "{spec} {kind} {bytes}: the figures must matter"
        );
    }
    let mut sharp = GpuSystem::parse("dgx-a100:4").unwrap().unwrap();
    sharp.sharp = true;
    let plain = Model::new(&sharp);
    let plan = plain
        .plan(CollectiveKind::AllReduce, 1 << 30, 0, launch)
        .unwrap();
    assert_eq!(plan.choice().algo, Algo::CollNetDirect);
    sharp.calibration.nic_gbps = Some(11.0);
    let fitted = Model::new(&sharp);
    assert_eq!(
        fitted.time(&plan, launch).unwrap(),
        fitted
            .predict(CollectiveKind::AllReduce, 1 << 30, 0, launch)
            .unwrap()
    );
}

/// A tree or chain too long for the transfer budget runs fewer loops of its own chunks and
/// is extrapolated: close to simulating every loop, where merging loops into larger chunks
/// had lengthened the pipeline's fill as many times.
#[test]
fn a_long_pipeline_is_extrapolated_from_its_own_chunks() {
    let system = GpuSystem::parse("dgx-a100:4").unwrap().unwrap();
    let launch = Launch::default();
    for (kind, algo, bytes, bound) in [
        (CollectiveKind::AllReduce, "Tree", 1u64 << 30, 0.05),
        (CollectiveKind::Broadcast, "Ring", 1 << 30, 0.01),
    ] {
        let mut allowed = Allowed::default();
        allowed.set_algos(algo).unwrap();
        allowed.set_protos("Simple").unwrap();
        let whole = Model::with_allowed(&system, allowed.clone());
        let full = whole.predict(kind, bytes, 0, launch).unwrap();
        let mut budgeted = whole.clone();
        budgeted.transfer_budget = full.transfers as u64 / 8;
        let plan = budgeted.plan(kind, bytes, 0, launch).unwrap();
        let e = plan.extrapolation.expect("over the budget: extrapolated");
        assert_eq!(e.loops * 8, e.all, "{kind}");
        let estimate = budgeted.time(&plan, launch).unwrap();
        assert!(estimate.transfers * 7 < full.transfers, "{kind}");
        let error = estimate.time.as_ns_f64() / full.time.as_ns_f64() - 1.0;
        assert!(
            (-bound..=0.0).contains(&error),
            "{kind}: {} against {} us simulated whole",
            estimate.time.as_ns_f64() / 1e3,
            full.time.as_ns_f64() / 1e3
        );
    }
}

/// Across boxes a GPU's send proxy holds every message for the hosts' network overhead;
/// its receive proxy holds Simple's steps (the GPU reads them once the proxy has seen them
/// arrive) but not LL's or LL128's lines, whose flags the GPU reads as the NIC writes them.
#[test]
fn only_simple_steps_wait_for_the_receive_proxy() {
    let two = model("dgx-a100:2");
    let hold = Time::from_ns(2_000);
    let posts = Posts {
        slice_bytes: 1 << 16,
        channels: 16,
        point_to_point: false,
    };
    let gpus = two.system.gpus();
    for (proto, receive_holds) in [(Proto::LL, 0), (Proto::LL128, 0), (Proto::Simple, 16)] {
        let choice = Choice {
            algo: Algo::Tree,
            proto,
            channels: 16,
            threads: 512,
            estimate_us: 0.0,
        };
        let topology = two.network(choice, posts, 1.0).unwrap();
        let held = |into_gpu: bool| {
            topology
                .links()
                .iter()
                .filter(|l| l.per_message == hold && (l.dst < gpus) == into_gpu)
                .count()
        };
        assert_eq!(held(false), 16, "{proto:?}: one send proxy a GPU");
        assert_eq!(held(true), receive_holds, "{proto:?}");
    }
}

/// LL's lines go on a trip of the channel's threads at a time (8 data bytes a thread) inside
/// a box and a chunk (LL's step, 32 KiB of data) at a time across boxes: a 32 KiB broadcast
/// over three boxes of 8 runs one channel of 128 threads (NCCL's thread threshold of 8 x 24
/// bytes a thread halves 512 twice), so 32 loops of 1 KiB, all 32 one chunk. A ring
/// all-reduce's links carry its chunks one after another however they are cut: its pieces
/// stay chunks.
#[test]
fn ll_chains_forward_a_trip_at_a_time() {
    let three = model("dgx-a100:3");
    let bytes = 32 << 10;
    let choice = three.choose(CollectiveKind::Broadcast, bytes).unwrap();
    let shape = (choice.algo, choice.proto, choice.channels, choice.threads);
    assert_eq!(shape, (Algo::Ring, Proto::LL, 1, 128));
    let cut = three.cut(CollectiveKind::Broadcast, bytes, choice, None);
    assert_eq!((cut.loops, cut.loops_per_chunk, cut.window), (32, 32, 256));
    let ring = Choice {
        algo: Algo::Ring,
        ..choice
    };
    let cut = three.cut(CollectiveKind::AllReduce, 24 << 20, ring, None);
    assert_eq!(cut.loops_per_chunk, 1);
    assert_eq!(cut.window, STEPS as u32);
}

/// NCCL's Tree LL128 chunk worked by hand (`computeCollChunkInfo`): LL128's step holds
/// 576000 bytes of data; three boxes of 8 give 2.8 tree steps, so a 4 MiB call on 8
/// channels halves it while a channel gets fewer than 22.4 chunks (down to 128 KiB: 72000)
/// and then stops, having 7.3 of them (at least 5.6); a 1 GiB call keeps the whole step.
#[test]
fn tree_ll128_chunks_follow_nccls_rule() {
    let three = model("dgx-a100:3");
    assert_eq!(three.tree_ll128_chunk(4 << 20, 8), 72000);
    assert_eq!(three.tree_ll128_chunk(1 << 30, 8), 576000);
    // 64 KiB on 16 channels: both loops run until the chunk is no longer above their
    // floors (72000, then 18000).
    assert_eq!(three.tree_ll128_chunk(64 << 10, 16), 18000);
}
