//! Group-level building blocks shared by the baselines: ring, direct and recursive halving-doubling
//! reduce-scatter and all-gather over a list of member ranks and a range of pieces. Part `i` of the
//! range belongs to member `i`; parts are cut into segments that pipeline independently.

use super::builder::{part, Builder};
use crate::schedule::Op;

/// Ring direction of a segment: +1 sends to the next member, -1 to the previous one.
pub(crate) fn ring_direction(bidirectional: bool, segments: u32, s: u32) -> i64 {
    if bidirectional && s >= segments / 2 {
        -1
    } else {
        1
    }
}

fn wrap(i: i64, g: u32) -> u32 {
    i.rem_euclid(g as i64) as u32
}

/// Segment `s` of member `p`'s part when `range` is cut into `g` neighbouring parts of
/// `segments` segments each.
fn range_parts(range: (u32, u32), g: u32, segments: u32) -> impl Fn(u32, u32) -> (u32, u32) {
    move |p, s| part(range.0, range.1, g, p, segments, s)
}

/// Ring exchange. With `Op::Reduce` (reduce-scatter) member `i` ends holding part `i` of the range
/// reduced over the group; with `Op::Copy` (all-gather) member `i` starts with part `i` and every
/// member ends with all parts. Bidirectional rings send the second half of the segments the other
/// way round.
pub(crate) fn ring_exchange(
    b: &mut Builder,
    members: &[u32],
    range: (u32, u32),
    segments: u32,
    bidirectional: bool,
    op: Op,
) {
    let pieces = range_parts(range, members.len() as u32, segments);
    ring_exchange_parts(b, members, segments, bidirectional, op, &pieces);
}

/// [`ring_exchange`] where segment `s` of member `p`'s part is `pieces(p, s)`: the parts need not
/// be neighbours in one range (a chunk of every rank's block, gathered across a dimension).
pub(crate) fn ring_exchange_parts(
    b: &mut Builder,
    members: &[u32],
    segments: u32,
    bidirectional: bool,
    op: Op,
    pieces: &dyn Fn(u32, u32) -> (u32, u32),
) {
    let mut send = |b: &mut Builder, src, dst, range, op| {
        b.send(src, dst, range, op);
    };
    ring_exchange_sending(b, members, segments, bidirectional, op, pieces, &mut send);
}

/// Issues one send of a ring exchange: `(builder, src, dst, pieces, op)`.
pub(crate) type SendHook<'a> = dyn FnMut(&mut Builder, u32, u32, (u32, u32), Op) + 'a;

/// [`ring_exchange_parts`] issuing each send through `send(builder, src, dst, pieces, op)`: a
/// caller that adds dependencies of its own (a CUDA block's program order) to every send.
pub(crate) fn ring_exchange_sending(
    b: &mut Builder,
    members: &[u32],
    segments: u32,
    bidirectional: bool,
    op: Op,
    pieces: &dyn Fn(u32, u32) -> (u32, u32),
    send: &mut SendHook,
) {
    let g = members.len() as u32;
    // Reduce-scatter sends at step s the part it received at step s-1, one behind all-gather.
    let lag = if op == Op::Reduce { 1 } else { 0 };
    for step in 0..g.saturating_sub(1) as i64 {
        for s in 0..segments {
            let d = ring_direction(bidirectional, segments, s);
            for j in 0..g as i64 {
                let p = wrap(j - d * (step + lag), g);
                send(
                    b,
                    members[j as usize],
                    members[wrap(j + d, g) as usize],
                    pieces(p, s),
                    op,
                );
            }
        }
    }
}

/// Direct exchange: with `Op::Reduce` (reduce-scatter) every member sends part `i` to member `i`;
/// with `Op::Copy` (all-gather) every member sends its own part to every other member. All at once,
/// each member addressing the others in ascending order (ASTRA-sim's), or `staggered`: member `j`
/// to `j+1`, `j+2`, ... so that no destination is everyone's first.
pub(crate) fn direct_exchange(
    b: &mut Builder,
    members: &[u32],
    range: (u32, u32),
    segments: u32,
    op: Op,
    staggered: bool,
) {
    let pieces = range_parts(range, members.len() as u32, segments);
    direct_exchange_parts(b, members, segments, op, staggered, &pieces);
}

/// [`direct_exchange`] where segment `s` of member `p`'s part is `pieces(p, s)`.
pub(crate) fn direct_exchange_parts(
    b: &mut Builder,
    members: &[u32],
    segments: u32,
    op: Op,
    staggered: bool,
    pieces: &dyn Fn(u32, u32) -> (u32, u32),
) {
    let g = members.len() as u32;
    for s in 0..segments {
        for j in 0..g {
            for i in destinations(j, g, staggered) {
                let owner = if op == Op::Reduce { i } else { j };
                b.send(
                    members[j as usize],
                    members[i as usize],
                    pieces(owner, s),
                    op,
                );
            }
        }
    }
}

/// The members `j` of a group of `g` sends to, in order: ascending, or from `j + 1` round.
pub(crate) fn destinations(j: u32, g: u32, staggered: bool) -> impl Iterator<Item = u32> {
    (1..g).map(move |k| destination(j, g, staggered, k))
}

/// The `k`-th (from 1) of [`destinations`]`(j, g, staggered)`.
#[inline]
pub(crate) fn destination(j: u32, g: u32, staggered: bool, k: u32) -> u32 {
    if staggered {
        ((j as u64 + k as u64) % g as u64) as u32
    } else if k <= j {
        k - 1
    } else {
        k
    }
}

/// Pieces of parts `a..c` of `range` cut into `g` parts.
fn parts(range: (u32, u32), g: u32, a: u32, c: u32) -> (u32, u32) {
    let len = (range.1 - range.0) / g;
    (range.0 + a * len, range.0 + c * len)
}

/// Recursive halving reduce-scatter over a power-of-two group: member `i` ends with part `i`.
pub(crate) fn rhd_reduce_scatter(b: &mut Builder, members: &[u32], range: (u32, u32)) {
    let g = members.len() as u32;
    debug_assert!(g.is_power_of_two());
    let mut current: Vec<(u32, u32)> = vec![(0, g); g as usize];
    let mut d = g / 2;
    while d >= 1 {
        for i in 0..g {
            let (lo, hi) = current[i as usize];
            let mid = (lo + hi) / 2;
            let send = if i & d == 0 { (mid, hi) } else { (lo, mid) };
            b.send(
                members[i as usize],
                members[(i ^ d) as usize],
                parts(range, g, send.0, send.1),
                Op::Reduce,
            );
        }
        for (i, cur) in current.iter_mut().enumerate() {
            let mid = (cur.0 + cur.1) / 2;
            *cur = if i as u32 & d == 0 {
                (cur.0, mid)
            } else {
                (mid, cur.1)
            };
        }
        d /= 2;
    }
}

/// Recursive doubling all-gather over a power-of-two group: member `i` starts with part `i`.
pub(crate) fn rhd_all_gather(b: &mut Builder, members: &[u32], range: (u32, u32)) {
    let g = members.len() as u32;
    debug_assert!(g.is_power_of_two());
    let mut d = 1;
    while d < g {
        for i in 0..g {
            let lo = i / d * d;
            b.send(
                members[i as usize],
                members[(i ^ d) as usize],
                parts(range, g, lo, lo + d),
                Op::Copy,
            );
        }
        d *= 2;
    }
}
