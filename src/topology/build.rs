//! Builders for the built-in shapes. Every regular shape is a multi-dimensional hierarchy in the
//! ASTRA-sim sense: a list of dimensions, each a Ring, unidirectional ring, line (mesh axis),
//! FullyConnected group or Switch. NPU ids are row-major with the first dimension fastest.

use super::{Link, NodeId, Topology};
use crate::units::{Bandwidth, Time};
use crate::Error;

/// How the NPUs of one dimension's groups are connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimKind {
    /// Bidirectional ring (shortest direction, tie goes +1).
    Ring,
    /// Unidirectional ring (+1 only).
    UniRing,
    /// Bidirectional line without wrap-around: one axis of a mesh.
    Line,
    /// Every NPU of the group has a direct link to every other.
    FullyConnected,
    /// The group's NPUs hang off one switch node of their own.
    Switch,
}

/// The most NPUs a built-in topology may have.
pub const MAX_NPUS: u64 = 1 << 30;

impl DimKind {
    /// Directed links one group of `n` NPUs of this kind has.
    fn links_per_group(self, n: u64) -> u64 {
        match self {
            DimKind::Ring if n == 2 => 2,
            DimKind::Ring | DimKind::Switch => 2 * n,
            DimKind::UniRing => n,
            DimKind::Line => 2 * (n - 1),
            DimKind::FullyConnected => n * (n - 1),
        }
    }

    /// Parses ASTRA-sim and collsim names (case-insensitive).
    pub fn parse(name: &str) -> Option<DimKind> {
        match name.to_ascii_lowercase().as_str() {
            "ring" => Some(DimKind::Ring),
            "uring" | "unidirectionalring" | "uniring" => Some(DimKind::UniRing),
            "line" | "mesh" => Some(DimKind::Line),
            "fullyconnected" | "fc" => Some(DimKind::FullyConnected),
            "switch" => Some(DimKind::Switch),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DimKind::Ring => "Ring",
            DimKind::UniRing => "UniRing",
            DimKind::Line => "Line",
            DimKind::FullyConnected => "FullyConnected",
            DimKind::Switch => "Switch",
        }
    }
}

/// One dimension of a multi-dimensional topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Dim {
    pub kind: DimKind,
    pub size: u32,
    pub bandwidth: Bandwidth,
    pub latency: Time,
}

impl Dim {
    pub fn new(kind: DimKind, size: u32, bandwidth: Bandwidth, latency: Time) -> Dim {
        Dim {
            kind,
            size,
            bandwidth,
            latency,
        }
    }
}

/// Stride of each dimension in the row-major numbering (first dimension fastest).
pub(crate) fn strides(dims: &[Dim]) -> Vec<u32> {
    let mut stride = 1u32;
    dims.iter()
        .map(|d| {
            let s = stride;
            stride = stride.saturating_mul(d.size);
            s
        })
        .collect()
}

/// Builds a multi-dimensional topology. Links are created dimension by dimension, group by group.
pub fn multi_dim(name: impl Into<String>, dims: Vec<Dim>) -> Result<Topology, Error> {
    let name = name.into();
    if dims.is_empty() {
        return Err(Error::input(format!("topology {name}: no dimensions")));
    }
    let mut npus: u64 = 1;
    for (d, dim) in dims.iter().enumerate() {
        if dim.size == 0 {
            return Err(Error::input(format!(
                "topology {name}: dimension {d} has size 0"
            )));
        }
        let bps = dim.bandwidth.as_bytes_per_sec();
        if !(bps.is_finite() && bps > 0.0) {
            return Err(Error::input(format!(
                "topology {name}: dimension {d} has non-positive bandwidth"
            )));
        }
        npus *= dim.size as u64;
    }
    if npus > MAX_NPUS {
        return Err(Error::input(format!(
            "topology {name}: {npus} NPUs is too many (at most {MAX_NPUS})"
        )));
    }
    let link_count: u64 = dims
        .iter()
        .map(|d| npus / d.size as u64 * d.kind.links_per_group(d.size as u64))
        .sum();
    ensure_topology_fits(&name, npus, link_count)?;
    let npus = npus as u32;
    let strides = strides(&dims);
    let mut links = Vec::new();
    let mut switch_groups = Vec::new();
    for (d, dim) in dims.iter().enumerate() {
        let (n, stride) = (dim.size, strides[d]);
        let mut connect = |a: NodeId, b: NodeId, both: bool| {
            let link = |src, dst| Link {
                dim: Some(d as u8),
                ..Link::one_way(src, dst, (dim.bandwidth, dim.latency))
            };
            links.push(link(a, b));
            if both {
                links.push(link(b, a));
            }
        };
        for base in (0..npus).filter(|v| (v / stride) % n == 0) {
            let member = |k: u32| base + k * stride;
            match dim.kind {
                DimKind::Ring => {
                    // A ring of two is one link each way, not two parallel ones.
                    let pairs = if n == 2 {
                        1
                    } else if n > 2 {
                        n
                    } else {
                        0
                    };
                    for k in 0..pairs {
                        connect(member(k), member((k + 1) % n), true);
                    }
                }
                DimKind::UniRing => {
                    if n >= 2 {
                        for k in 0..n {
                            connect(member(k), member((k + 1) % n), false);
                        }
                    }
                }
                DimKind::Line => {
                    for k in 0..n.saturating_sub(1) {
                        connect(member(k), member(k + 1), true);
                    }
                }
                DimKind::FullyConnected => {
                    for a in 0..n {
                        for b in a + 1..n {
                            connect(member(a), member(b), true);
                        }
                    }
                }
                DimKind::Switch => {
                    if n >= 2 {
                        let switch = npus + switch_groups.len() as u32;
                        switch_groups.push((d as u8, base));
                        for k in 0..n {
                            connect(member(k), switch, true);
                        }
                    }
                }
            }
        }
    }
    let switches = switch_groups.len() as u32;
    Topology::from_parts(name, npus, switches, links, dims, switch_groups)
}

/// NVIDIA DGX-1 (P100) hybrid cube-mesh: two fully connected quads of GPUs, GPU i linked to i+4.
pub fn dgx1(bandwidth: Bandwidth, latency: Time) -> Result<Topology, Error> {
    let edges = [
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
        (2, 3),
        (4, 5),
        (4, 6),
        (4, 7),
        (5, 6),
        (5, 7),
        (6, 7),
        (0, 4),
        (1, 5),
        (2, 6),
        (3, 7),
    ];
    let links = edges
        .iter()
        .flat_map(|&(a, b)| [(a, b), (b, a)])
        .map(|(src, dst)| Link::one_way(src, dst, (bandwidth, latency)))
        .collect();
    Topology::from_parts("dgx1".into(), 8, 0, links, Vec::new(), Vec::new())
}

/// A DragonFly: `groups` groups of `per_group` NPUs, fully connected inside a group, and one global
/// link between every pair of groups (group `g`'s link to group `h` leaves from its NPU
/// `h mod per_group`, skipping its own index).
/// Refuses a topology whose nodes and links cannot fit in memory.
fn ensure_topology_fits(name: &str, npus: u64, links: u64) -> Result<(), Error> {
    crate::memory::ensure(
        crate::memory::bytes(links.saturating_add(npus), crate::memory::BYTES_PER_LINK),
        &format!("topology {name} ({npus} NPUs, {links} links)"),
        "try fewer NPUs",
    )
}

pub fn dragonfly(
    groups: u32,
    per_group: u32,
    local: (Bandwidth, Time),
    global: (Bandwidth, Time),
) -> Result<Topology, Error> {
    let name = format!("dragonfly:{groups}x{per_group}");
    if groups == 0 || per_group == 0 {
        return Err(Error::input(format!(
            "topology {name}: sizes must be positive"
        )));
    }
    let npus = groups as u64 * per_group as u64;
    if npus > MAX_NPUS {
        return Err(Error::input(format!(
            "topology {name}: {npus} NPUs is too many (at most {MAX_NPUS})"
        )));
    }
    let (g, a) = (groups as u64, per_group as u64);
    ensure_topology_fits(&name, npus, g * a * (a - 1) + g * (g - 1))?;
    let npus = npus as u32;
    let mut links = Vec::new();
    let mut push = |a: NodeId, b: NodeId, (bandwidth, latency): (Bandwidth, Time)| {
        for (src, dst) in [(a, b), (b, a)] {
            links.push(Link::one_way(src, dst, (bandwidth, latency)));
        }
    };
    for g in 0..groups {
        for a in 0..per_group {
            for b in a + 1..per_group {
                push(g * per_group + a, g * per_group + b, local);
            }
        }
    }
    for g in 0..groups {
        for h in g + 1..groups {
            let port_g = g * per_group + (h - 1) % per_group;
            let port_h = h * per_group + g % per_group;
            push(port_g, port_h, global);
        }
    }
    Topology::from_parts(name, npus, 0, links, Vec::new(), Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dim(kind: DimKind, size: u32) -> Dim {
        Dim::new(kind, size, Bandwidth::gb_per_sec(1.0), Time::from_ns(1))
    }

    #[test]
    fn ring_of_n_has_2n_links_and_ring_of_two_has_two() {
        assert_eq!(
            multi_dim("r", vec![dim(DimKind::Ring, 8)])
                .unwrap()
                .links()
                .len(),
            16
        );
        assert_eq!(
            multi_dim("r", vec![dim(DimKind::Ring, 2)])
                .unwrap()
                .links()
                .len(),
            2
        );
        assert_eq!(
            multi_dim("u", vec![dim(DimKind::UniRing, 8)])
                .unwrap()
                .links()
                .len(),
            8
        );
    }

    #[test]
    fn mesh_numbering_is_row_major_first_dimension_fastest() {
        // mesh 4x3: id = row*4 + col; 5 = (col 1, row 1) neighbours 4, 6 (row) and 1, 9 (column).
        let t = multi_dim("m", vec![dim(DimKind::Line, 4), dim(DimKind::Line, 3)]).unwrap();
        for n in [4, 6, 1, 9] {
            assert!(t.link_between(5, n).is_some(), "5 -> {n}");
        }
        assert!(
            t.link_between(3, 4).is_none(),
            "no wrap-around between rows"
        );
        assert_eq!(t.links().len(), 2 * (3 * 3 + 4 * 2));
    }

    #[test]
    fn switch_dimension_adds_one_switch_per_group() {
        // [Ring 2, Switch 4]: two switch groups {0,2,4,6} and {1,3,5,7}, switches 8 and 9.
        let t = multi_dim("h", vec![dim(DimKind::Ring, 2), dim(DimKind::Switch, 4)]).unwrap();
        assert_eq!(t.nodes(), 10);
        assert!(t.link_between(0, 8).is_some() && t.link_between(6, 8).is_some());
        assert!(t.link_between(1, 9).is_some() && t.link_between(9, 7).is_some());
        assert!(t.link_between(1, 8).is_none());
    }

    #[test]
    fn dgx1_is_degree_four() {
        let t = dgx1(Bandwidth::gb_per_sec(25.0), Time::from_ns(1)).unwrap();
        for v in 0..8 {
            assert_eq!(t.out_links_of(v).len(), 4);
        }
    }

    #[test]
    fn dragonfly_connects_every_group_pair_once() {
        let bw = (Bandwidth::gb_per_sec(1.0), Time::from_ns(1));
        let t = dragonfly(5, 4, bw, bw).unwrap();
        let global = t.links().len() / 2 - 5 * 6;
        assert_eq!(global, 10);
    }
}
