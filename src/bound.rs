//! Lower bounds on collective time (DESIGN.md "Lower bounds"): the per-NPU bandwidth bound, the
//! bandwidth cut bound, and the latency bound; `bound = max(npu, cut) + latency`.

use crate::collective::{Collective, CollectiveKind};
use crate::topology::{DimKind, NodeId, Topology};
use crate::units::Time;

/// The bounds for one collective on one topology.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    pub npu: Time,
    /// The cut bound, where it applies and was computed.
    pub cut: Option<Time>,
    pub latency: Time,
}

impl Bounds {
    pub fn total(&self) -> Time {
        self.npu.max(self.cut.unwrap_or(Time::ZERO)) + self.latency
    }
}

/// Computes the bounds of `collective` on `topology`.
pub fn bounds(topology: &Topology, collective: &Collective) -> Bounds {
    Bounds {
        npu: npu_bound(topology, collective),
        cut: None,
        latency: latency_bound(topology, collective),
    }
}

fn seconds(s: f64) -> Time {
    Time((s * 1e12).round() as u64)
}

/// Bytes each constrained NPU must receive, divided by its ingress bandwidth.
pub fn npu_bound(topology: &Topology, c: &Collective) -> Time {
    let n = c.ranks() as f64;
    let size = c.size as f64;
    let mut ingress = vec![0.0f64; topology.nodes() as usize];
    for link in topology.links() {
        ingress[link.dst as usize] += link.bandwidth.as_bytes_per_sec();
    }
    let min_over = |npus: &mut dyn Iterator<Item = NodeId>| {
        npus.map(|v| ingress[v as usize])
            .fold(f64::INFINITY, f64::min)
    };
    let root = c.root();
    let non_root = || c.npus.iter().copied().filter(move |&v| v != root);
    let secs = match c.kind {
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
            (n - 1.0) / n * size / min_over(&mut c.npus.iter().copied())
        }
        CollectiveKind::AllReduce => {
            2.0 * (n - 1.0) / n * size / min_over(&mut c.npus.iter().copied())
        }
        CollectiveKind::Broadcast => size / min_over(&mut non_root()),
        CollectiveKind::Scatter => size / n / min_over(&mut non_root()),
        CollectiveKind::Reduce => size / ingress[root as usize],
        CollectiveKind::Gather => (n - 1.0) / n * size / ingress[root as usize],
    };
    seconds(secs)
}

/// Minimum latency data must cover: the largest shortest-latency distance that the collective forces
/// (between all participants; from or to the root for rooted collectives).
pub fn latency_bound(topology: &Topology, c: &Collective) -> Time {
    let from_root = matches!(c.kind, CollectiveKind::Broadcast | CollectiveKind::Scatter);
    let to_root = matches!(c.kind, CollectiveKind::Reduce | CollectiveKind::Gather);
    if topology.uses_dimension_routing() && c.npus.len() as u32 == topology.npus() {
        let dims = topology.dims();
        let mut stride = 1u32;
        let mut total = Time::ZERO;
        for dim in dims {
            let coord = (c.root() / stride) % dim.size;
            let hops = match dim.kind {
                _ if dim.size == 1 => 0,
                DimKind::Ring => dim.size / 2,
                DimKind::UniRing => dim.size - 1,
                DimKind::Line if from_root || to_root => coord.max(dim.size - 1 - coord),
                DimKind::Line => dim.size - 1,
                DimKind::FullyConnected => 1,
                DimKind::Switch => 2,
            };
            total = total + Time(dim.latency.ps() * hops as u64);
            stride *= dim.size;
        }
        return total;
    }
    let sources: Vec<NodeId> = if from_root {
        vec![c.root()]
    } else {
        c.npus.clone()
    };
    let mut worst = 0u64;
    for &s in &sources {
        let dist = if to_root {
            latency_distances(topology, c.root(), true)
        } else {
            latency_distances(topology, s, false)
        };
        worst = worst.max(c.npus.iter().map(|&v| dist[v as usize]).max().unwrap_or(0));
        if to_root {
            break;
        }
    }
    Time(worst)
}

/// Shortest latency (ps) from `origin` to every node, or to `origin` from every node if `reverse`.
fn latency_distances(topology: &Topology, origin: NodeId, reverse: bool) -> Vec<u64> {
    use std::cmp::Reverse;
    let mut adjacency: Vec<Vec<(NodeId, u64)>> = vec![Vec::new(); topology.nodes() as usize];
    for link in topology.links() {
        let (from, to) = if reverse {
            (link.dst, link.src)
        } else {
            (link.src, link.dst)
        };
        adjacency[from as usize].push((to, link.latency.ps()));
    }
    let mut dist = vec![u64::MAX; topology.nodes() as usize];
    dist[origin as usize] = 0;
    let mut heap = std::collections::BinaryHeap::from([Reverse((0u64, origin))]);
    while let Some(Reverse((d, v))) = heap.pop() {
        if d > dist[v as usize] {
            continue;
        }
        for &(w, lat) in &adjacency[v as usize] {
            if d + lat < dist[w as usize] {
                dist[w as usize] = d + lat;
                heap.push(Reverse((d + lat, w)));
            }
        }
    }
    dist
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    fn collective(kind: CollectiveKind, n: u32) -> Collective {
        Collective::new(kind, (0..n).collect(), 1 << 30, 1, None).unwrap()
    }

    #[test]
    fn npu_bound_on_a_bidirectional_ring_is_half_of_the_unidirectional_one() {
        let bi = TopologyOptions::new("ring:8")
            .with_links("50GiB/s", "0ns")
            .build()
            .unwrap();
        let uni = TopologyOptions::new("uring:8")
            .with_links("50GiB/s", "0ns")
            .build()
            .unwrap();
        let c = collective(CollectiveKind::AllGather, 8);
        // 7/8 GiB over 100 GiB/s (two in-links) vs 50 GiB/s.
        assert_eq!(npu_bound(&bi, &c), Time(17_500_000_000 / 2));
        assert_eq!(npu_bound(&uni, &c), Time(17_500_000_000));
    }

    #[test]
    fn latency_bound_is_the_diameter_in_closed_form_and_by_search() {
        let ring = TopologyOptions::new("ring:8")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap();
        let c = collective(CollectiveKind::AllGather, 8);
        assert_eq!(latency_bound(&ring, &c), Time::from_ns(4_000));
        let mut faulty = TopologyOptions::new("mesh:3x3")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap();
        assert_eq!(
            latency_bound(&faulty, &collective(CollectiveKind::AllGather, 9)),
            Time::from_ns(4_000)
        );
        faulty.remove(&[], &[(0, 1), (1, 0)]).unwrap();
        // Corner 0 to corner 2 now detours: 0-3-4-1-2 is 4 hops, the diameter is still 4 (0 -> 8).
        let c9 = Collective::new(
            CollectiveKind::AllGather,
            faulty.active_npus(),
            1 << 20,
            1,
            None,
        )
        .unwrap();
        assert_eq!(latency_bound(&faulty, &c9), Time::from_ns(4_000));
    }
}
