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
