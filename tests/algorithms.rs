//! Baseline algorithms: closed forms on contention-free topologies, a randomized property test
//! that every generated schedule validates, and broken schedules that validation must reject.

use collsim::algorithms::{generate, Algorithm};
use collsim::collective::{Collective, CollectiveKind};
use collsim::schedule::{validate, Schedule, TransferIndex};
use collsim::sim::{simulate, SimOptions};
use collsim::topology::{Topology, TopologyOptions};
use collsim::units::{Bandwidth, Time};
use rand::{Rng, SeedableRng};

const GIB: u64 = 1 << 30;

fn topo(spec: &str) -> Topology {
    TopologyOptions::new(spec)
        .with_links("50GiB/s", "0.5us")
        .build()
        .unwrap()
}

fn run(spec: &str, kind: CollectiveKind, algorithm: Algorithm, size: u64) -> Time {
    let t = topo(spec);
    let c = Collective::new(kind, t.active_npus(), size, 1, None).unwrap();
    let s = generate(algorithm, &t, &c).unwrap();
    validate(&s, s.collective.as_ref().unwrap(), 1).unwrap();
    simulate(&t, &s, &SimOptions::default(), &mut ())
        .unwrap()
        .finish
}

/// t(n) = 0.5 us + n / 50 GiB/s, each hop rounded to the picosecond as the exact model does.
fn t(bytes: u64) -> u64 {
    500_000 + Bandwidth::gib_per_sec(50.0).transmit_time(bytes).ps()
}

#[test]
fn ring_closed_forms() {
    use CollectiveKind::*;
    assert_eq!(
        run("ring:16", AllReduce, Algorithm::Ring, GIB).ps(),
        30 * t(GIB / 32)
    );
    assert_eq!(
        run("uring:8", AllGather, Algorithm::Ring, GIB).ps(),
        7 * t(GIB / 8)
    );
    assert_eq!(
        run("ring:8", AllGather, Algorithm::Ring, GIB).ps(),
        7 * t(GIB / 16)
    );
    assert_eq!(
        run("ring:8", ReduceScatter, Algorithm::Ring, GIB).ps(),
        7 * t(GIB / 16)
    );
}

#[test]
fn direct_closed_forms() {
    assert_eq!(
        run("fc:8", CollectiveKind::AllReduce, Algorithm::Direct, GIB).ps(),
        2 * t(GIB / 8)
    );
    assert_eq!(
        run("fc:8", CollectiveKind::AllToAll, Algorithm::Direct, GIB).ps(),
        t(GIB / 8)
    );
}

/// All-to-all on a switch: in ASTRA-sim's ascending order every NPU's first block queues on NPU
/// 0's downlink and the run takes twice the bound; staggered, each step is a permutation and the
/// downlinks stream back to back: 16 blocks through two store-and-forward hops.
#[test]
fn staggered_direct_all_to_all_streams_every_downlink() {
    let a2a = |algorithm| run("switch:16", CollectiveKind::AllToAll, algorithm, GIB).ps();
    let block = GIB / 16;
    let serialise = Bandwidth::gib_per_sec(50.0).transmit_time(block).ps();
    assert_eq!(
        a2a(Algorithm::DirectStaggered),
        2 * t(block) + 14 * serialise
    );
    assert!(a2a(Algorithm::Direct) > 29 * serialise);
}

#[test]
fn rhd_closed_form_on_a_switch() {
    let want: u64 = 4 * (1..=4).map(|k| t(GIB >> k)).sum::<u64>();
    assert_eq!(
        run("switch:16", CollectiveKind::AllReduce, Algorithm::Rhd, GIB).ps(),
        want
    );
}

/// Every algorithm and collective it supports, on random sizes and shapes, validates, and no
/// simulated time beats the lower bound.
#[test]
fn every_generated_schedule_validates() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2026);
    let mut checked = 0;
    for case in 0..700 {
        let spec = match case % 6 {
            0 => format!("ring:{}", rng.random_range(2..=40)),
            1 => format!("fc:{}", rng.random_range(2..=24)),
            2 => format!("switch:{}", rng.random_range(2..=40)),
            3 => format!(
                "mesh:{}x{}",
                rng.random_range(1..=6),
                rng.random_range(2..=6)
            ),
            4 => format!(
                "torus:{}x{}",
                rng.random_range(2..=5),
                rng.random_range(2..=5)
            ),
            _ => format!(
                "dims:ring{},switch{},fc{}",
                rng.random_range(2..=5),
                rng.random_range(2..=6),
                rng.random_range(1..=3)
            ),
        };
        let t = topo(&spec);
        let kind = CollectiveKind::ALL[rng.random_range(0..CollectiveKind::ALL.len())];
        let algorithm = [
            Algorithm::Ring,
            Algorithm::Direct,
            Algorithm::Rhd,
            Algorithm::Dbt,
            Algorithm::Hierarchical,
            Algorithm::Themis,
            Algorithm::ForestColl,
        ][rng.random_range(0..7)];
        let chunks = rng.random_range(1..=3);
        let npus = t.active_npus();
        let root = kind
            .is_rooted()
            .then(|| npus[rng.random_range(0..npus.len())]);
        let Ok(c) = Collective::new(kind, npus, 1 << 22, chunks, root) else {
            continue;
        };
        let schedule = match generate(algorithm, &t, &c) {
            Ok(s) => s,
            Err(e) => {
                // Only "no such form" refusals are acceptable, never a broken schedule.
                let msg = e.to_string();
                assert!(
                    msg.contains("has no")
                        || msg.contains("power-of-two")
                        || msg.contains("needs a multi"),
                    "{msg}"
                );
                continue;
            }
        };
        let claim = schedule.collective.clone().unwrap();
        assert_eq!(claim.kind, kind);
        validate(&schedule, &claim, case)
            .unwrap_or_else(|e| panic!("{} {kind} on {spec} x{chunks}: {e}", algorithm.name()));
        let result = simulate(&t, &schedule, &SimOptions::default(), &mut ()).unwrap();
        assert!(result.finish > Time::ZERO);
        // The lower bound (with the exact cut bound) is never beaten, but for the simulator's
        // rounding of every delay to the nearest picosecond (a few ps over a long chain).
        let bound = collsim::bound::bounds(&t, &c, None).total();
        assert!(
            bound <= result.finish + Time::from_ns(1),
            "{} {kind} on {spec} x{chunks}: bound {bound:?} > time {:?}",
            algorithm.name(),
            result.finish
        );
        checked += 1;
    }
    assert!(checked > 300, "only {checked} cases exercised");
}

/// Rebuilds `s` with transfer `target` changed by `edit` (None drops it).
fn rebuild(
    s: &Schedule,
    target: TransferIndex,
    edit: impl Fn(&mut Vec<TransferIndex>) -> bool,
) -> Schedule {
    let mut out = Schedule::new();
    let mut new_index = vec![u32::MAX; s.len()];
    for i in 0..s.len() as TransferIndex {
        let mut deps: Vec<TransferIndex> = s
            .deps(i)
            .iter()
            .map(|&d| new_index[d as usize])
            .filter(|&d| d != u32::MAX)
            .collect();
        if i == target && !edit(&mut deps) {
            continue;
        }
        let j = out.push_data(s.transfer(i), &deps, s.pieces(i).unwrap(), s.op(i));
        out.set_id(j, s.id(i));
        new_index[i as usize] = j;
    }
    out.collective = s.collective.clone();
    out
}

fn ring_allreduce(n: u32) -> Schedule {
    let t = topo(&format!("ring:{n}"));
    let c = Collective::new(CollectiveKind::AllReduce, t.active_npus(), 1 << 20, 1, None).unwrap();
    generate(Algorithm::Ring, &t, &c).unwrap()
}

#[test]
fn a_dropped_transfer_fails_validation() {
    let s = ring_allreduce(5);
    let claim = s.collective.clone().unwrap();
    let broken = rebuild(&s, (s.len() - 1) as u32, |_| false);
    let err = validate(&broken, &claim, 3).unwrap_err().to_string();
    assert!(
        err.contains("does not implement all-reduce") && err.contains("transfer"),
        "{err}"
    );
}

#[test]
fn a_duplicated_reduction_fails_validation_naming_it() {
    let s = ring_allreduce(5);
    let claim = s.collective.clone().unwrap();
    // Transfer 0 is a reduction of the first ring step; send it a second time right after it.
    let mut broken = Schedule::new();
    broken.push_data(s.transfer(0), &[], s.pieces(0).unwrap(), s.op(0));
    let again = broken.push_data(s.transfer(0), &[0], s.pieces(0).unwrap(), s.op(0));
    broken.set_id(again, 999);
    for i in 1..s.len() as TransferIndex {
        let deps: Vec<TransferIndex> = s
            .deps(i)
            .iter()
            .map(|&d| if d == 0 { 0 } else { d + 1 })
            .collect();
        let j = broken.push_data(s.transfer(i), &deps, s.pieces(i).unwrap(), s.op(i));
        broken.set_id(j, s.id(i));
    }
    let err = validate(&broken, &claim, 3).unwrap_err().to_string();
    assert!(
        err.contains("transfer 999") && err.contains("duplicated"),
        "{err}"
    );
}

#[test]
fn a_send_before_its_data_arrived_fails_validation_naming_it() {
    let s = ring_allreduce(5);
    let claim = s.collective.clone().unwrap();
    // The last transfer forwards a piece it received; without its dependency it sends too early.
    let last = (s.len() - 1) as u32;
    assert!(!s.deps(last).is_empty());
    let broken = rebuild(&s, last, |deps| {
        deps.clear();
        true
    });
    let err = validate(&broken, &claim, 3).unwrap_err().to_string();
    assert!(err.contains(&format!("transfer {}", s.id(last))), "{err}");
}

/// TACOS paper Fig. 2: who wins where. Ratios are printed for the closing note.
#[test]
fn paper_sanity_directions() {
    let with = |spec: &str, bw: &str, lat: &str, a: Algorithm, size: u64| {
        let t = TopologyOptions::new(spec)
            .with_links(bw, lat)
            .build()
            .unwrap();
        let c = Collective::new(CollectiveKind::AllReduce, t.active_npus(), size, 1, None).unwrap();
        let s = generate(a, &t, &c).unwrap();
        simulate(&t, &s, &SimOptions::default(), &mut ())
            .unwrap()
            .finish
            .ps() as f64
    };
    let ring64 = with(
        "ring:64",
        "50GB/s",
        "0.5us",
        Algorithm::Direct,
        1_000_000_000,
    ) / with("ring:64", "50GB/s", "0.5us", Algorithm::Ring, 1_000_000_000);
    let fc64 = with("fc:64", "50GB/s", "0.5us", Algorithm::Ring, 1_000_000_000)
        / with("fc:64", "50GB/s", "0.5us", Algorithm::Direct, 1_000_000_000);
    let small = with("ring:128", "150GB/s", "30ns", Algorithm::Ring, 1000)
        / with("ring:128", "150GB/s", "30ns", Algorithm::Direct, 1000);
    let large = with(
        "ring:128",
        "150GB/s",
        "30ns",
        Algorithm::Direct,
        1_000_000_000,
    ) / with(
        "ring:128",
        "150GB/s",
        "30ns",
        Algorithm::Ring,
        1_000_000_000,
    );
    println!("ring:64 Ring over Direct {ring64:.2}x; fc:64 Direct over Ring {fc64:.2}x");
    println!("ring:128 1KB Direct over Ring {small:.2}x; 1GB Ring over Direct {large:.2}x");
    assert!(ring64 > 10.0, "{ring64}");
    assert!(fc64 > 10.0, "{fc64}");
    assert!(small > 1.0 && large > 1.0, "{small} {large}");
}
