//! Hierarchical multi-dimensional collectives (BlueConnect, ASTRA-sim's baseline): all-reduce is a
//! reduce-scatter across dimensions 1..D, then an all-gather across D..1, each dimension running its
//! own basic algorithm on the groups of NPUs that differ only in that dimension's coordinate
//! (Ring and Switch dimensions: ring; FullyConnected: direct; unidirectional rings one way round).
//! Standalone all-gather runs dimensions 1..D and reduce-scatter D..1, so that rank r's block stays
//! the contiguous pieces the collective assigns it.

use super::builder::{part, Builder};
use super::collectives::{direct_exchange, ring_exchange};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::topology::{DimKind, Topology};
use crate::Error;

struct Dimension {
    kind: DimKind,
    size: u32,
    stride: u32,
    /// Bytes per second one NPU can push into this dimension (all its links in it).
    bandwidth: f64,
    /// Per-chunk fixed cost of this dimension's basic algorithm, in seconds.
    fixed_cost: f64,
}

impl Dimension {
    /// Segments per part: bidirectional rings split each part in two, one per direction.
    fn directions(&self) -> u32 {
        match self.kind {
            DimKind::FullyConnected | DimKind::UniRing => 1,
            _ => 2,
        }
    }
}

/// How all-reduce orders the dimensions of each chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DimensionOrder {
    /// Every chunk: dimension 1..D (the hierarchical baseline).
    Ascending,
    /// Themis: per chunk, least loaded dimension first (see [`themis_orders`]).
    Themis,
}

pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    generate_ordered(topology, c, DimensionOrder::Ascending)
}

/// Relative gap between the most and least loaded dimension below which Themis keeps the
/// baseline order (ASTRA-sim's OfflineGreedy falls back the same way).
const THEMIS_BALANCED: f64 = 0.01;

/// Themis (ISCA'22; ASTRA-sim's OfflineGreedy): for each chunk in turn, the dimensions sorted by a
/// load tracker, least loaded first, which then takes the chunk's reduce-scatter phase with the
/// most data; the tracker adds each phase's time under a bandwidth model (reduce-scatter:
/// size (n-1)/n / BW and size /= n; all-gather, in reverse order: size (n-1) / BW and size *= n),
/// starting from each dimension's fixed cost.
fn themis_orders(dims: &[Dimension], slices: u32, slice_bytes: f64) -> Vec<Vec<usize>> {
    let mut load: Vec<f64> = dims.iter().map(|d| d.fixed_cost).collect();
    (0..slices)
        .map(|_| {
            let mut order: Vec<usize> = (0..dims.len()).collect();
            let most = load.iter().copied().fold(0.0, f64::max);
            let least = load.iter().copied().fold(f64::INFINITY, f64::min);
            if most - least > THEMIS_BALANCED * most {
                order.sort_by(|&a, &b| load[a].total_cmp(&load[b]));
            }
            let mut size = slice_bytes;
            for &d in &order {
                let n = dims[d].size as f64;
                load[d] += size * (n - 1.0) / n / dims[d].bandwidth;
                size /= n;
            }
            for &d in order.iter().rev() {
                let n = dims[d].size as f64;
                load[d] += size * (n - 1.0) / dims[d].bandwidth;
                size *= n;
            }
            order
        })
        .collect()
}

pub(crate) fn generate_ordered(
    topology: &Topology,
    c: &Collective,
    policy: DimensionOrder,
) -> Result<Schedule, Error> {
    let dims = topology.dims();
    let all_npus: Vec<u32> = (0..topology.npus()).collect();
    if dims.is_empty() || c.npus != all_npus || !topology.uses_dimension_routing() {
        return Err(Error::input(
            "hierarchical needs a multi-dimensional topology (mesh, torus, hypercube, dims:..., ASTRA-sim \
             file) without faults, over all of its NPUs",
        ));
    }
    let mut stride = 1;
    let dims: Vec<Dimension> = dims
        .iter()
        .map(|d| {
            let links = match d.kind {
                DimKind::Ring | DimKind::Line if d.size > 2 => 2.0,
                DimKind::FullyConnected => (d.size - 1) as f64,
                _ => 1.0,
            };
            let dim = Dimension {
                kind: d.kind,
                size: d.size,
                stride,
                bandwidth: d.bandwidth.as_bytes_per_sec() * links,
                fixed_cost: d.latency.as_secs_f64() * (d.size - 1) as f64,
            };
            stride *= d.size;
            dim
        })
        .filter(|d| d.size > 1)
        .collect();
    // Pieces per chunk slice must split by every dimension size and each ring's two directions.
    let refined = Collective {
        chunks: c.chunks * 2,
        ..c.clone()
    };
    let n = c.ranks();
    let mut b = Builder::new(&refined);
    // All-reduce pipelines chunks as independent slices of the buffer. All-gather and
    // reduce-scatter must keep rank r's pieces together, so they pipeline by segments instead.
    let (slices, pipeline) = match c.kind {
        CollectiveKind::AllReduce => (c.chunks, 1),
        _ => (1, c.chunks),
    };
    let slice_len = refined.piece_count() / slices;
    let baseline: Vec<usize> = match c.kind {
        CollectiveKind::AllReduce | CollectiveKind::AllGather => (0..dims.len()).collect(),
        CollectiveKind::ReduceScatter => (0..dims.len()).rev().collect(),
        other => {
            return Err(Error::input(format!(
                "hierarchical has no {other} form; it implements all-reduce, reduce-scatter and all-gather"
            )))
        }
    };
    // Only all-reduce cuts the buffer into independent slices whose orders can differ.
    let orders = match (policy, c.kind) {
        (DimensionOrder::Themis, CollectiveKind::AllReduce) => {
            themis_orders(&dims, slices, c.size as f64 / slices as f64)
        }
        _ => vec![baseline; slices as usize],
    };
    for slice in 0..slices {
        let order = &orders[slice as usize];
        let base = (slice * slice_len, (slice + 1) * slice_len);
        // The range a rank holds before the phase on `dim`, in the order the phases split it.
        let range_before = |rank: u32, upto: &[usize]| {
            upto.iter().fold(base, |r, &d| {
                let dim = &dims[d];
                let coord = (rank / dim.stride) % dim.size;
                part(r.0, r.1, dim.size, coord, 1, 0)
            })
        };
        let groups = |d: usize| {
            let dim = &dims[d];
            (0..n)
                .filter(move |r| (r / dim.stride).is_multiple_of(dim.size))
                .map(move |first| {
                    (0..dim.size)
                        .map(|k| first + k * dim.stride)
                        .collect::<Vec<u32>>()
                })
        };
        // One dimension's phase: reduce-scatter (Op::Reduce) or all-gather (Op::Copy) in a group.
        let phase = |b: &mut Builder, d: usize, range: (u32, u32), members: &[u32], op: Op| {
            let dim = &dims[d];
            let segments = dim.directions() * pipeline;
            let bidirectional = dim.kind != DimKind::UniRing;
            match dim.kind {
                DimKind::FullyConnected => direct_exchange(b, members, range, pipeline, op),
                _ => ring_exchange(b, members, range, segments, bidirectional, op),
            }
        };
        let gather =
            |b: &mut Builder, d, range, members: &[u32]| phase(b, d, range, members, Op::Copy);
        let scatter =
            |b: &mut Builder, d, range, members: &[u32]| phase(b, d, range, members, Op::Reduce);
        match c.kind {
            CollectiveKind::AllReduce | CollectiveKind::ReduceScatter => {
                for (i, &d) in order.iter().enumerate() {
                    for members in groups(d) {
                        scatter(&mut b, d, range_before(members[0], &order[..i]), &members);
                    }
                }
                if c.kind == CollectiveKind::AllReduce {
                    for (i, &d) in order.iter().enumerate().rev() {
                        for members in groups(d) {
                            gather(&mut b, d, range_before(members[0], &order[..i]), &members);
                        }
                    }
                }
            }
            CollectiveKind::AllGather => {
                // Gathering dimension 1 first: before the phase on dim d a rank holds the block of
                // its coordinates in dims >= d, i.e. the range narrowed by those dims, highest first.
                for (i, &d) in order.iter().enumerate() {
                    let narrowing: Vec<usize> = order[i..].iter().rev().copied().collect();
                    for members in groups(d) {
                        let held = range_before(members[0], &narrowing[..narrowing.len() - 1]);
                        gather(&mut b, d, held, &members);
                    }
                }
            }
            _ => unreachable!("checked above"),
        }
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dim(size: u32, gbps: f64) -> Dimension {
        Dimension {
            kind: DimKind::Switch,
            size,
            stride: 1,
            bandwidth: gbps * 1e9,
            fixed_cost: 0.0,
        }
    }

    #[test]
    fn themis_spreads_the_large_phases_over_the_dimensions() {
        // Equal bandwidth: the biggest dimension would carry almost everything in ascending
        // order; Themis starts chunks on every dimension.
        let dims = [dim(8, 100.0), dim(4, 100.0), dim(4, 100.0)];
        let orders = themis_orders(&dims, 64, 1e6);
        for d in 0..3 {
            assert!(
                orders.iter().any(|o| o[0] == d),
                "dimension {d} never first"
            );
        }
        // Balanced loads (no traffic yet, equal fixed costs) keep the baseline order.
        assert_eq!(orders[0], vec![0, 1, 2]);
    }
}
