//! Validation's own machinery held to its plain form: piece windows against sorting, piece groups
//! checked apart and the one-round all-to-all path against the general one, and its messages.

use super::*;
use crate::schedule::Transfer;

/// The linear sweep merges piece ranges as sorting them would: overlapping ranges share a
/// window, touching ones do not, uncarried pieces get windows of their own, and every piece
/// maps to the window that holds it.
#[test]
fn piece_windows_merge_ranges_as_sorting_them_would() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
    for _ in 0..200 {
        let pieces = rng.random_range(1..60u32);
        let mut s = Schedule::new();
        let mut ranges = Vec::new();
        for _ in 0..rng.random_range(0..12) {
            let lo = rng.random_range(0..pieces);
            let hi = rng.random_range(lo + 1..=pieces.min(lo + 6));
            ranges.push((lo, hi));
            let transfer = Transfer {
                src: 0,
                dst: 1,
                bytes: 1,
            };
            s.push_data(transfer, &[], (lo, hi), Op::Copy);
        }
        ranges.sort_unstable();
        let mut expected: Vec<(u32, u32)> = Vec::new();
        for (lo, hi) in ranges {
            match expected.last_mut() {
                Some(w) if lo < w.1 => w.1 = w.1.max(hi),
                _ => expected.push((lo, hi)),
            }
        }
        let mut covering = Vec::new();
        let mut next = 0;
        for w in expected {
            if w.0 > next {
                covering.push((next, w.0));
            }
            covering.push(w);
            next = w.1;
        }
        if next < pieces {
            covering.push((next, pieces));
        }
        let (windows, window_at) = piece_windows(&s, pieces);
        assert_eq!(windows, covering);
        for piece in 0..pieces {
            let (lo, hi) = windows[window_at[piece as usize] as usize];
            assert!(
                lo <= piece && piece < hi,
                "piece {piece} outside {lo}..{hi}"
            );
        }
    }
}

fn a2a(n: u32) -> (Schedule, Collective) {
    let c = Collective::new(
        CollectiveKind::AllToAll,
        (0..n).collect(),
        8 * n as u64,
        1,
        None,
    )
    .unwrap();
    let mut s = Schedule::new();
    for src in 0..n {
        for dst in (0..n).filter(|&d| d != src) {
            let (lo, hi) = c.a2a_block(src, dst);
            s.push_data(
                Transfer {
                    src,
                    dst,
                    bytes: c.piece_bytes(lo, hi),
                },
                &[],
                (lo, hi),
                Op::Copy,
            );
        }
    }
    (s, c)
}

/// The pass per group of pieces reaches the same verdicts as the pass over everything.
#[test]
fn checking_piece_groups_apart_gives_the_same_verdicts() {
    use crate::algorithms::{generate, Algorithm};
    use crate::topology::TopologyOptions;
    let t = TopologyOptions::new("dims:ring3,switch4").build().unwrap();
    let c = Collective::new(CollectiveKind::AllReduce, t.active_npus(), 1 << 20, 3, None).unwrap();
    let s = generate(Algorithm::Hierarchical, &t, &c).unwrap();
    let claim = s.collective.clone().unwrap();
    let windowed = |s: &Schedule| {
        let mut v = Validator::new(s, &claim, &[], 9);
        v.order_transfers()?;
        by_windows(v)
    };
    assert!(windowed(&s).is_ok());
    assert!(validate(&s, &claim, 9).is_ok());
    assert!(piece_windows(&s, claim.piece_count()).0.len() >= 3);
    // Drop one transfer: both passes fail.
    let mut broken = Schedule::new();
    let shift = |d: TransferIndex| d - (d > 5) as TransferIndex;
    for i in (0..s.len() as TransferIndex).filter(|&i| i != 5) {
        let deps: Vec<_> = s
            .deps(i)
            .iter()
            .filter(|&&d| d != 5)
            .map(|&d| shift(d))
            .collect();
        broken.push_data(s.transfer(i), &deps, s.pieces(i).unwrap(), s.op(i));
    }
    assert!(windowed(&broken).is_err());
    assert!(validate(&broken, &claim, 9).is_err());
}

#[test]
fn one_round_all_to_all_accepts_the_direct_pattern_and_rejects_gaps() {
    let (s, c) = a2a(4);
    validate(&s, &c, 1).unwrap();
    // Drop the last transfer: its piece never arrives.
    let mut short = Schedule::new();
    for t in 0..s.len() as u32 - 1 {
        short.push_data(s.transfer(t), &[], s.pieces(t).unwrap(), Op::Copy);
    }
    assert!(validate(&short, &c, 1)
        .unwrap_err()
        .to_string()
        .contains("never receives"));
    // A piece sent by a rank that does not hold it.
    let mut wrong = Schedule::new();
    wrong.push_data(
        Transfer {
            src: 1,
            dst: 2,
            bytes: 8,
        },
        &[],
        c.a2a_block(0, 2),
        Op::Copy,
    );
    assert!(validate(&wrong, &c, 1)
        .unwrap_err()
        .to_string()
        .contains("before it holds it"));
}

#[test]
fn the_general_path_agrees_on_a_relayed_all_to_all() {
    // 0 -> 2 relayed through 1: needs the general executor (dependencies present).
    let c = Collective::new(CollectiveKind::AllToAll, vec![0, 1, 2], 24, 1, None).unwrap();
    let mut s = Schedule::new();
    for src in 0..3u32 {
        for dst in (0..3u32).filter(|&d| d != src && !(src == 0 && d == 2)) {
            let (lo, hi) = c.a2a_block(src, dst);
            s.push_data(Transfer { src, dst, bytes: 8 }, &[], (lo, hi), Op::Copy);
        }
    }
    let hop = s.push_data(
        Transfer {
            src: 0,
            dst: 1,
            bytes: 8,
        },
        &[],
        c.a2a_block(0, 2),
        Op::Copy,
    );
    s.push_data(
        Transfer {
            src: 1,
            dst: 2,
            bytes: 8,
        },
        &[hop],
        c.a2a_block(0, 2),
        Op::Copy,
    );
    validate(&s, &c, 1).unwrap();
}

/// A transfer that touches an NPU outside the collective is named, on the one-round
/// all-to-all path and on the general one (an NPU beyond every participant's id included).
#[test]
fn a_transfer_outside_the_collective_is_named() {
    let c = Collective::new(CollectiveKind::AllToAll, vec![0, 1, 2], 24, 1, None).unwrap();
    for (src, dst, role) in [(5, 1, "source NPU 5"), (0, 9, "destination NPU 9")] {
        let names_it = |s: &Schedule| {
            let error = validate(s, &c, 1).unwrap_err().to_string();
            assert!(
                error.contains(&format!("transfer 0: {role} is not a participant")),
                "{error}"
            );
        };
        let mut s = Schedule::new();
        s.push_data(
            Transfer { src, dst, bytes: 8 },
            &[],
            c.a2a_block(0, 1),
            Op::Copy,
        );
        names_it(&s);
        // A dependency sends the schedule down the general path.
        s.push_data(
            Transfer {
                src: 0,
                dst: 1,
                bytes: 8,
            },
            &[0],
            c.a2a_block(0, 1),
            Op::Copy,
        );
        names_it(&s);
    }
}

/// [`validate`] with every piece checked on its own instead of by atoms.
fn validate_piece_by_piece(s: &Schedule, c: &Collective, seed: u64) -> Result<(), Error> {
    let mut v = Validator::new(s, c, &[], seed);
    v.atoms = atoms::Atoms::every_piece(c.piece_count());
    check(v)
}

/// Checking each atom by its first piece reaches the verdict, and names the transfer and piece,
/// that checking every piece does: on the algorithms' schedules (many carry several pieces a
/// transfer, so atoms merge pieces) and on broken copies of them (a transfer dropped, a range
/// cut short, an operation flipped, a transfer's dependencies dropped).
#[test]
fn atoms_give_the_verdicts_of_every_piece() {
    use crate::algorithms::{generate, Algorithm};
    use crate::topology::TopologyOptions;
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let (mut merging, mut schedules, mut failures, mut cases) = (0, 0, 0, 0);
    let mut check = |s: &Schedule, claim: &Collective, what: &str| {
        let merged = atoms::Atoms::new(s, claim, claim.piece_count()).count();
        merging += (merged < claim.piece_count()) as u32;
        schedules += 1;
        for mutation in 0..5 {
            let broken = mutate(s, claim, mutation, &mut rng);
            let by_atoms = validate(&broken, claim, 3).map_err(|e| e.to_string());
            let plain = validate_piece_by_piece(&broken, claim, 3).map_err(|e| e.to_string());
            assert_eq!(by_atoms, plain, "{what}, mutation {mutation}");
            failures += by_atoms.is_err() as u32;
            cases += 1;
        }
    };
    // NCCL's tree all-reduce: each transfer carries every rank's share of a chunk.
    let c = Collective::new(
        CollectiveKind::AllReduce,
        (0..8).collect(),
        1 << 16,
        4,
        None,
    )
    .unwrap();
    let cut = crate::algorithms::nccl_kernels::Cut {
        channels: 2,
        loops: 2,
        slices: 1,
        window: 4,
        loops_per_chunk: 1,
        pack: 1,
    };
    let tree = crate::algorithms::nccl_kernels::tree_all_reduce(&c, 4, cut, 2, false).unwrap();
    check(&tree, &c, "NCCL tree");
    for shape in ["dims:ring2,switch4", "mesh:3x3", "switch:6"] {
        let t = TopologyOptions::new(shape).build().unwrap();
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
        ] {
            let c = Collective::new(kind, t.active_npus(), 1 << 16, 2, None).unwrap();
            for algorithm in Algorithm::ALL {
                if matches!(algorithm, Algorithm::TacosIlp | Algorithm::TacclLike) {
                    continue;
                }
                let Ok(s) = generate(algorithm, &t, &c) else {
                    continue;
                };
                let claim = s.collective.clone().unwrap_or_else(|| c.clone());
                check(&s, &claim, &format!("{shape} {kind} {algorithm:?}"));
            }
        }
    }
    assert!(
        merging >= 10,
        "{merging} of {schedules} schedules merge pieces"
    );
    assert!(
        failures * 2 > cases,
        "{failures} of {cases} broken copies refused"
    );
}

/// A copy of `s` with one `mutation` at a random transfer: 0 none, 1 the transfer dropped,
/// 2 its range's last piece dropped, 3 its operation flipped, 4 its dependencies dropped.
fn mutate(s: &Schedule, c: &Collective, mutation: u32, rng: &mut impl rand::Rng) -> Schedule {
    let n = s.len() as TransferIndex;
    let wide: Vec<TransferIndex> = (0..n)
        .filter(|&t| s.pieces(t).is_some_and(|(lo, hi)| hi - lo > 1))
        .collect();
    let at = match (mutation, wide.is_empty()) {
        (2, false) => wide[rng.random_range(0..wide.len())],
        _ => rng.random_range(0..n),
    };
    let shift = |d: TransferIndex| d - (mutation == 1 && d > at) as TransferIndex;
    let mut out = Schedule::new();
    for t in (0..n).filter(|&t| mutation != 1 || t != at) {
        let (mut lo_hi, mut op) = (s.pieces(t).unwrap(), s.op(t));
        let mut deps: Vec<TransferIndex> = s
            .deps(t)
            .iter()
            .filter(|&&d| mutation != 1 || d != at)
            .map(|&d| shift(d))
            .collect();
        if t == at {
            match mutation {
                2 if lo_hi.1 - lo_hi.0 > 1 => lo_hi.1 -= 1,
                3 => {
                    op = match op {
                        Op::Copy => Op::Reduce,
                        Op::Reduce => Op::Copy,
                    }
                }
                4 => deps.clear(),
                _ => {}
            }
        }
        let mut transfer = s.transfer(t);
        transfer.bytes = c.piece_bytes(lo_hi.0, lo_hi.1);
        out.push_data(transfer, &deps, lo_hi, op);
    }
    out
}
