//! NCCL's rings: one ring per channel, the buffer shared among the channels. On boxes of GPUs
//! with a NIC per GPU, channel `c` enters every box on one GPU's NIC and leaves it on another's,
//! visiting the box's other GPUs in between over the fast links, so the channels together keep
//! every NIC busy in both directions (one ring in, one out). Successive boxes alternate the
//! offset of the entry GPU so that a ring leaves one box and enters the next on the same local
//! index (the same rail).
//!
//! One box (no slower links) whose GPUs are linked directly (DGX-1 cube-mesh, NVLink and xGMI
//! meshes) gets as many edge-disjoint Hamiltonian rings as its links allow, as NCCL's search
//! finds them; GPUs joined through a switch get rotations of a single ring. Where the links are
//! bidirectional, every channel's ring also runs the other way round (NCCL's reversed channels),
//! each direction with half of the channel's data.

use super::boxes::equal_boxes;
use super::builder::Builder;
use super::collectives::ring_exchange_parts;
use super::hamiltonian::{disjoint_rings, walecki_path};
use super::Algorithm;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::topology::Topology;
use crate::Error;

/// NCCL's ring all-gather, reduce-scatter or all-reduce of `c`.
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    let phases: &[Op] = match c.kind {
        CollectiveKind::AllGather => &[Op::Copy],
        CollectiveKind::ReduceScatter => &[Op::Reduce],
        CollectiveKind::AllReduce => &[Op::Reduce, Op::Copy],
        other => return Err(Algorithm::NcclRing.refusal(other)),
    };
    let boxes = equal_boxes(topology, c, Algorithm::NcclRing)?;
    let graph_rings = match boxes.len() {
        1 => graph_rings(topology, &c.npus),
        _ => Vec::new(),
    };
    let rings = if graph_rings.is_empty() {
        channel_rings(&boxes, topology.is_bidirectional())
    } else {
        graph_rings
    };
    let channels = rings.len() as u32;
    let refined = Collective {
        chunks: c.chunks * channels,
        ..c.clone()
    };
    let mut b = Builder::new(&refined)?;
    // Rank r's part of the buffer is pieces r K .. (r + 1) K; channel ch carries its ch-th run of
    // `chunks` pieces, segment s being piece s of that run.
    let per_rank = refined.chunks;
    for &op in phases {
        for (ch, ring) in rings.iter().enumerate() {
            let pieces = |p: u32, s: u32| {
                let first = ring[p as usize] * per_rank + ch as u32 * c.chunks + s;
                (first, first + 1)
            };
            ring_exchange_parts(&mut b, ring, c.chunks, false, op, &pieces);
        }
    }
    Ok(b.finish())
}

/// The ring of every channel, as ranks in sending order: one per local index of the boxes, and,
/// in a single box whose links run both ways, as many again reversed.
pub(crate) fn channel_rings(boxes: &[Vec<u32>], bidirectional: bool) -> Vec<Vec<u32>> {
    let g = boxes[0].len();
    let shifts = entry_shifts(boxes.len(), g);
    let mut rings: Vec<Vec<u32>> = (0..g)
        .map(|c| {
            let mut ring = Vec::with_capacity(boxes.len() * g);
            for (b, gpus) in boxes.iter().enumerate() {
                let entry = (c + shifts[b]) % g;
                let exit = if boxes.len() == 1 {
                    (entry + g - 1) % g
                } else {
                    (c + shifts[(b + 1) % boxes.len()]) % g
                };
                ring.extend(box_order(entry, exit, g).map(|i| gpus[i]));
            }
            ring
        })
        .collect();
    // Across boxes every NIC already carries one ring each way; reversed rings would only split
    // that. Inside one box of point-to-point links they use the links' other direction.
    if bidirectional && boxes.len() == 1 && g > 2 {
        add_reversed(&mut rings);
    }
    rings
}

/// Edge-disjoint Hamiltonian rings through `npus` over their direct links, as ranks (indices
/// into `npus`) in sending order, each also run the other way round where the links run both
/// ways (NCCL's reversed channels); empty where the graph has no such ring.
pub(crate) fn graph_rings(topology: &Topology, npus: &[u32]) -> Vec<Vec<u32>> {
    let mut rings: Vec<Vec<u32>> = disjoint_rings(topology, npus)
        .iter()
        .map(|r| r.iter().map(|&i| i as u32).collect())
        .collect();
    if !rings.is_empty() && topology.is_bidirectional() {
        add_reversed(&mut rings);
    }
    rings
}

/// Channel rings over boxes whose GPUs are all linked pairwise (xGMI meshes): as
/// [`channel_rings`] (one channel per local index, each NIC carrying one ring each way), but
/// each ring crosses a box on Walecki's path from its entry GPU to the GPU half the box away,
/// where it leaves for the next box on that rail, so the channels' paths through a box use
/// every link once instead of all following the GPUs' order. With an odd number of boxes the
/// ring's last hop, back to the first box, changes rail (through a spine; each channel from its
/// own rail to its own). `None` for one box, or boxes of an odd number of GPUs.
pub(crate) fn mesh_channel_rings(boxes: &[Vec<u32>]) -> Option<Vec<Vec<u32>>> {
    let g = boxes[0].len();
    if boxes.len() < 2 || g % 2 == 1 || g < 2 {
        return None;
    }
    let rings = (0..g)
        .map(|c| {
            boxes
                .iter()
                .enumerate()
                .flat_map(|(b, gpus)| {
                    let entry = (c + b * g / 2) % g;
                    walecki_path(entry, g).into_iter().map(|i| gpus[i])
                })
                .collect()
        })
        .collect();
    Some(rings)
}

/// Appends every ring run the other way round (NCCL's reversed channels).
fn add_reversed(rings: &mut Vec<Vec<u32>>) {
    let reversed: Vec<Vec<u32>> = rings
        .iter()
        .map(|r| r.iter().rev().copied().collect())
        .collect();
    rings.extend(reversed);
}

/// Offset of the entry GPU per box: consecutive boxes (cyclically) differ, so that a ring's exit
/// from one box and entry into the next are the same local index but never a box's own entry.
fn entry_shifts(boxes: usize, g: usize) -> Vec<usize> {
    let mut shifts: Vec<usize> = (0..boxes).map(|b| b % 2).collect();
    if boxes % 2 == 1 && boxes > 1 && g > 2 {
        shifts[boxes - 1] = 2;
    }
    shifts
}

/// Local indices of one box in ring order: `entry` first, `exit` last, the others ascending
/// from `entry` between them (`entry == exit` when the box cannot separate them: then the box
/// is visited in rotation from `entry`).
fn box_order(entry: usize, exit: usize, g: usize) -> impl Iterator<Item = usize> {
    let middle = (1..g)
        .map(move |k| (entry + k) % g)
        .filter(move |&i| i != exit || entry == exit);
    let last = (entry != exit).then_some(exit);
    std::iter::once(entry).chain(middle).chain(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxes(count: u32, g: u32) -> Vec<Vec<u32>> {
        (0..count).map(|b| (b * g..(b + 1) * g).collect()).collect()
    }

    /// The hops of `ring` (sender, receiver, closing the ring), once it is checked to visit
    /// each of the `n` ranks once.
    fn hops_visiting_every_rank(ring: &[u32], n: usize) -> Vec<(u32, u32)> {
        let mut seen = ring.to_vec();
        seen.sort_unstable();
        assert_eq!(seen, (0..n as u32).collect::<Vec<_>>());
        (0..n).map(|k| (ring[k], ring[(k + 1) % n])).collect()
    }

    /// Through a box of a full mesh the channels' paths use every ordered pair of GPUs once,
    /// and the rings still visit every rank once and cross boxes on one rail (but for the hop
    /// back to the first box, with an odd number of boxes).
    #[test]
    fn mesh_channel_rings_use_every_link_of_a_box_once() {
        for (count, g) in [(2, 8), (4, 8), (2, 4), (2, 2), (3, 8), (5, 4)] {
            let rings = mesh_channel_rings(&boxes(count, g)).unwrap();
            assert_eq!(rings.len(), g as usize);
            let n = (count * g) as usize;
            let mut used = std::collections::HashMap::new();
            for ring in &rings {
                for (from, to) in hops_visiting_every_rank(ring, n) {
                    if from / g == to / g {
                        *used.entry((from, to)).or_insert(0) += 1;
                    } else if to / g != 0 || count % 2 == 0 {
                        assert_eq!(from % g, to % g, "{count}x{g}: crosses rails");
                    }
                }
            }
            let pairs = (count * g * (g - 1)) as usize;
            assert_eq!(used.len(), pairs, "{count}x{g}");
            assert!(used.values().all(|&u| u == 1), "{count}x{g}");
        }
        assert!(mesh_channel_rings(&boxes(1, 8)).is_none());
        assert!(mesh_channel_rings(&boxes(2, 7)).is_none());
    }

    /// Every channel's ring visits each rank once; each box is entered and left once per
    /// channel, and across the channels every GPU is entered once and left once (its NIC
    /// carries one ring each way), on the same local index as the previous box's exit.
    #[test]
    fn every_nic_carries_one_ring_each_way() {
        for (count, g) in [(2, 8), (4, 8), (3, 4), (5, 8), (2, 2)] {
            let rings = channel_rings(&boxes(count, g), false);
            assert_eq!(rings.len(), g as usize);
            let n = (count * g) as usize;
            let mut entered = vec![0; n];
            let mut left = vec![0; n];
            for ring in &rings {
                for (from, to) in hops_visiting_every_rank(ring, n) {
                    if from / g != to / g {
                        assert_eq!(from % g, to % g, "{count}x{g}: crosses rails");
                        left[from as usize] += 1;
                        entered[to as usize] += 1;
                    }
                }
            }
            assert!(entered.iter().all(|&e| e == 1), "{count}x{g}: {entered:?}");
            assert!(left.iter().all(|&e| e == 1), "{count}x{g}: {left:?}");
        }
    }

    #[test]
    fn one_box_is_rotations_of_one_ring() {
        let rings = channel_rings(&boxes(1, 4), false);
        assert_eq!(rings[1], vec![1, 2, 3, 0]);
        assert_eq!(channel_rings(&boxes(1, 4), true).len(), 8);
    }
}
