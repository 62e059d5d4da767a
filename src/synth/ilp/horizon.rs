//! The horizon's lower bound: the fewest steps any plan needs, by cuts around every NPU.

use super::{fastest_paths, Holdings, Ten};
use crate::synth::network::Network;

/// The shortest horizon no plan can beat, by cuts: every chunk wanted inside a set of NPUs
/// that no member holds must cross into the set on one of its in-links, each link starting a
/// chunk every `busy` steps from the first step such a chunk can be at its source, and the
/// chunk whose first crossing comes last must still reach the members that want it. The sets
/// are the balls around every NPU (the NPUs within each distance of it): the NPU alone gives
/// what its own in-links can bring it; a box reached through one relay link gives that link's
/// pipeline.
/// `earliest`: per chunk, per NPU, the first step the chunk can be there ([`Window::reach`]).
pub(super) fn cut_bound(
    net: &Network,
    ten: &Ten,
    holds: &Holdings,
    wanted: &[(u32, u32)],
    earliest: &[Vec<u32>],
) -> u32 {
    let n = net.npus() as usize;
    let chunks = holds.len();
    let dist = fastest_paths(net, ten, &|_| true);
    // Per chunk: the NPUs that want it and those that hold it; per NPU, the chunks it wants.
    let mut wanting: Vec<Vec<usize>> = vec![Vec::new(); chunks];
    let mut wants: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(c, v) in wanted {
        wanting[c as usize].push(v as usize);
        wants[v as usize].push(c as usize);
    }
    let holders: Vec<Vec<usize>> = holds
        .iter()
        .map(|row| (0..n).filter(|&h| row[h].is_some()).collect())
        .collect();
    // Per NPU: the chunks some NPU wants, soonest there first (a crossing link's first start).
    let soonest: Vec<Vec<(u32, usize)>> = (0..n)
        .map(|v| {
            let mut order: Vec<(u32, usize)> = (0..chunks)
                .filter(|&c| !wanting[c].is_empty())
                .map(|c| (earliest[c][v], c))
                .filter(|&(e, _)| e != u32::MAX)
                .collect();
            order.sort_unstable();
            order
        })
        .collect();
    let mut bound = 0;
    let mut inside = vec![false; n];
    let mut near = vec![u32::MAX; n];
    let mut farthest = vec![0u32; chunks];
    for center in 0..n {
        let from = &dist[center];
        // A chunk is needed in the ball of radius r when someone within r wants it and no one
        // within r holds it.
        let closest = |members: &mut dyn Iterator<Item = usize>| {
            members.map(|v| from[v]).min().unwrap_or(u32::MAX)
        };
        let wanted_at: Vec<u32> = (0..chunks)
            .map(|c| closest(&mut wanting[c].iter().copied()))
            .collect();
        let held_at: Vec<u32> = (0..chunks)
            .map(|c| closest(&mut holders[c].iter().copied()))
            .collect();
        let needed = |c: usize, radius: u32| wanted_at[c] <= radius && held_at[c] > radius;
        let mut radii: Vec<u32> = from.iter().copied().filter(|&d| d != u32::MAX).collect();
        radii.sort_unstable();
        radii.dedup();
        for radius in radii {
            let mut members = 0;
            for (v, is_in) in inside.iter_mut().enumerate() {
                *is_in = from[v] <= radius;
                members += *is_in as usize;
            }
            // Balls grow with the radius; past half the NPUs they bring in little (and cost
            // the most), so they are left out: any family of sets gives a bound.
            if 2 * members > n.max(2) {
                break;
            }
            let count = (0..chunks).filter(|&c| needed(c, radius)).count();
            if count == 0 {
                continue;
            }
            // Each in-link's first start, span and busy steps.
            let crossings: Vec<(u32, u32, u32, usize)> = (0..net.links.len())
                .filter_map(|l| {
                    let link = &net.links[l];
                    let (src, dst) = (link.src as usize, link.dst as usize);
                    if inside[src] || !inside[dst] {
                        return None;
                    }
                    let (first, _) = soonest[src].iter().find(|&&(_, c)| needed(c, radius))?;
                    Some((*first, ten.span[l], ten.busy[l], dst))
                })
                .collect();
            if crossings.is_empty() {
                continue;
            }
            let arrived = |t: u32| -> usize {
                crossings
                    .iter()
                    .map(
                        |&(first, span, busy, _)| match t.checked_sub(first + span) {
                            Some(after) => (after / busy) as usize + 1,
                            None => 0,
                        },
                    )
                    .sum()
            };
            // The first step by which `count` crossings can have arrived.
            let (mut lo, mut hi) = (0u32, 1u32);
            while arrived(hi) < count {
                (lo, hi) = (hi, hi.saturating_mul(2));
            }
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                match arrived(mid) < count {
                    true => lo = mid,
                    false => hi = mid,
                }
            }
            let last = hi;
            // The chunk that crosses first last, whichever it is, may cross on several links
            // but no sooner: each member that wants it is at least its nearest crossing's
            // distance further on.
            for v in (0..n).filter(|&v| inside[v]) {
                near[v] = crossings
                    .iter()
                    .map(|&(.., x)| dist[x][v])
                    .min()
                    .unwrap_or(0);
            }
            for c in (0..chunks).filter(|&c| needed(c, radius)) {
                farthest[c] = 0;
            }
            for v in (0..n).filter(|&v| inside[v]) {
                for &c in &wants[v] {
                    if needed(c, radius) {
                        farthest[c] = farthest[c].max(near[v]);
                    }
                }
            }
            let spread = (0..chunks)
                .filter(|&c| needed(c, radius))
                .map(|c| farthest[c])
                .min()
                .unwrap_or(0);
            bound = bound.max(last.saturating_add(spread));
        }
    }
    bound
}
