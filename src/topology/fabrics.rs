//! Datacenter fabrics as explicit graphs of NPUs and switches, routed by shortest path: leaf/spine,
//! three-tier fat-trees, rail-optimized GPU boxes and EFLOPS's BiGraph.
//!
//! Each has two or three tiers of links, and `--bandwidth` / `--latency` take one value for all of
//! them or one per tier, lowest tier (the NPUs' own links) first. NPUs come first (ids `0..n`),
//! switches after them in the order each shape's documentation gives.

use super::build::MAX_NPUS;
use super::{Link, NodeId, Topology};
use crate::units::{Bandwidth, Time};
use crate::Error;

/// Bandwidth and latency of one tier of links.
pub type Tier = (Bandwidth, Time);

/// Bidirectional links collected tier by tier.
struct Links(Vec<Link>);

impl Links {
    fn join(&mut self, a: NodeId, b: NodeId, tier: Tier) {
        self.0.extend(Link::both_ways(a, b, tier));
    }
}

fn check_size(name: &str, npus: u64, switches: u64) -> Result<(), Error> {
    if npus == 0 {
        return Err(Error::input(format!(
            "topology {name}: sizes must be positive"
        )));
    }
    if npus > MAX_NPUS || switches > MAX_NPUS {
        return Err(Error::input(format!(
            "topology {name}: {npus} NPUs and {switches} switches is too many (at most {MAX_NPUS} each)"
        )));
    }
    Ok(())
}

/// `spineleaf:LxSxH`: `L` leaf switches with `H` NPUs each (NPU `l H + h`), every leaf linked to
/// each of `S` spines. Leaves are switches `n..n+L`, spines follow. Tiers: NPU-leaf, leaf-spine
/// (an uplink tier slower than `H / S` times the NPU links is oversubscribed).
///
/// `spineleaf:LxSxHxG` (`boxes` = `Some((G, NVSwitch tier))`): the `H` hosts of a leaf are boxes
/// of `G` GPUs. GPU `i` of box `h` of leaf `l` is NPU `(l H + h) G + i`; every box's GPUs share an
/// NVSwitch (switch `n + l H + h`) and each GPU has its own NIC link to its leaf. Leaves follow
/// the NVSwitches, spines follow the leaves.
pub fn spine_leaf(
    [leaves, spines, hosts]: [u32; 3],
    boxes: Option<(u32, Tier)>,
    down: Tier,
    up: Tier,
) -> Result<Topology, Error> {
    let gpus = boxes.map_or(1, |(g, _)| g);
    let name = match boxes {
        Some(_) => format!("spineleaf:{leaves}x{spines}x{hosts}x{gpus}"),
        None => format!("spineleaf:{leaves}x{spines}x{hosts}"),
    };
    let host_count = leaves as u64 * hosts as u64;
    let switches = boxes.map_or(0, |_| host_count);
    let npus = host_count * gpus as u64;
    check_size(&name, npus, switches + leaves as u64 + spines as u64)?;
    if spines == 0 {
        return Err(Error::input(format!(
            "topology {name}: sizes must be positive"
        )));
    }
    let (n, switches) = (npus as u32, switches as u32);
    let leaf = |l: u32| n + switches + l;
    let mut links = Links(Vec::new());
    for l in 0..leaves {
        for h in l * hosts..(l + 1) * hosts {
            for i in 0..gpus {
                if let Some((_, nvswitch)) = boxes {
                    links.join(h * gpus + i, n + h, nvswitch);
                }
                links.join(h * gpus + i, leaf(l), down);
            }
        }
        for s in 0..spines {
            links.join(leaf(l), leaf(leaves) + s, up);
        }
    }
    let nodes = switches + leaves + spines;
    Topology::from_parts(name, n, nodes, links.0, Vec::new(), Vec::new())
}

/// `fattree:K` (K even): the three-tier k-ary fat-tree, `K^3/4` NPUs. Pod `p` has edge switches
/// `n + p K/2 + e` and aggregation switches `n + K^2/2 + p K/2 + a`; edge switch `e` of pod `p`
/// holds NPUs `(p K/2 + e) K/2 ..` (K/2 each) and links to every aggregation switch of its pod;
/// aggregation switch `a` links to cores `n + K^2 + a K/2 + j`, `j < K/2`. Tiers: NPU-edge,
/// edge-aggregation, aggregation-core.
pub fn fat_tree(k: u32, tiers: [Tier; 3]) -> Result<Topology, Error> {
    let name = format!("fattree:{k}");
    if k < 2 || !k.is_multiple_of(2) {
        return Err(Error::input(format!(
            "topology {name}: K must be even and at least 2"
        )));
    }
    let half = k / 2;
    let npus = k as u64 * half as u64 * half as u64;
    check_size(&name, npus, 5 * half as u64 * half as u64)?;
    let n = npus as u32;
    let edge = |p: u32, e: u32| n + p * half + e;
    let aggregation = |p: u32, a: u32| n + k * half + p * half + a;
    let core = |a: u32, j: u32| n + 2 * k * half + a * half + j;
    let mut links = Links(Vec::new());
    for p in 0..k {
        for e in 0..half {
            for h in 0..half {
                links.join((p * half + e) * half + h, edge(p, e), tiers[0]);
            }
            for a in 0..half {
                links.join(edge(p, e), aggregation(p, a), tiers[1]);
            }
        }
        for a in 0..half {
            for j in 0..half {
                links.join(aggregation(p, a), core(a, j), tiers[2]);
            }
        }
    }
    let switches = 2 * k * half + half * half;
    Topology::from_parts(name, n, switches, links.0, Vec::new(), Vec::new())
}

/// `rail:BxG`: `B` boxes of `G` GPUs (GPU `b G + i`), each box's GPUs on its own NVSwitch
/// (switch `n + b`), and GPU `i` of every box on rail switch `i` (switch `n + B + i`). Tiers:
/// NVSwitch, rail (the GPU's NIC).
pub fn rail(boxes: u32, gpus: u32, box_tier: Tier, rail_tier: Tier) -> Result<Topology, Error> {
    let name = format!("rail:{boxes}x{gpus}");
    let npus = boxes as u64 * gpus as u64;
    check_size(&name, npus, boxes as u64 + gpus as u64)?;
    let n = npus as u32;
    let mut links = Links(Vec::new());
    for b in 0..boxes {
        for i in 0..gpus {
            links.join(b * gpus + i, n + b, box_tier);
            links.join(b * gpus + i, n + boxes + i, rail_tier);
        }
    }
    Topology::from_parts(name, n, boxes + gpus, links.0, Vec::new(), Vec::new())
}

/// `bigraph:MxN` (EFLOPS): `N` switches (N even) in two halves, every upper switch (`n .. n +
/// N/2`) linked to every lower one (`n + N/2 ..`), `M` NPUs on each switch (switch `w` holds NPUs
/// `w M .. (w + 1) M`, so NPUs `0 .. M N/2` hang off the upper half). Tiers: NPU-switch,
/// upper-lower.
pub fn bigraph(hosts: u32, switches: u32, down: Tier, across: Tier) -> Result<Topology, Error> {
    let name = format!("bigraph:{hosts}x{switches}");
    if switches < 2 || !switches.is_multiple_of(2) {
        return Err(Error::input(format!(
            "topology {name}: N (switches) must be even and at least 2"
        )));
    }
    let npus = hosts as u64 * switches as u64;
    check_size(&name, npus, switches as u64)?;
    let n = npus as u32;
    let half = switches / 2;
    let mut links = Links(Vec::new());
    for w in 0..switches {
        for h in 0..hosts {
            links.join(w * hosts + h, n + w, down);
        }
    }
    for u in 0..half {
        for l in 0..half {
            links.join(n + u, n + half + l, across);
        }
    }
    Topology::from_parts(name, n, switches, links.0, Vec::new(), Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    fn build(spec: &str) -> Topology {
        TopologyOptions::new(spec).build().unwrap()
    }

    #[test]
    fn shapes_have_the_documented_sizes_and_links() {
        let t = build("spineleaf:4x2x8");
        assert_eq!((t.npus(), t.nodes()), (32, 38));
        assert_eq!(t.links().len(), 2 * (32 + 4 * 2));
        let t = build("fattree:4");
        assert_eq!((t.npus(), t.nodes()), (16, 36));
        assert_eq!(t.links().len(), 2 * (16 + 16 + 16));
        let t = build("rail:4x8");
        assert_eq!((t.npus(), t.nodes()), (32, 44));
        assert!(t.link_between(10, 32 + 4 + 2).is_some() && t.link_between(10, 33).is_some());
        let t = build("bigraph:2x8");
        assert_eq!((t.npus(), t.nodes()), (16, 24));
        assert_eq!(t.links().len(), 2 * (16 + 16));
        assert!(t.link_between(16, 20).is_some() && t.link_between(16, 17).is_none());
        // 2 leaves x 2 boxes of 4 GPUs: 16 GPUs, 4 NVSwitches, 2 leaves, 3 spines.
        let t = build("spineleaf:2x3x2x4");
        assert_eq!((t.npus(), t.nodes()), (16, 25));
        assert_eq!(t.links().len(), 2 * (16 + 16 + 2 * 3));
        // GPU 13 is GPU 1 of box 3 (leaf 1): NVSwitch 16 + 3, leaf 16 + 4 + 1, spines 22..25.
        assert!(t.link_between(13, 19).is_some() && t.link_between(13, 21).is_some());
        assert!(t.link_between(21, 24).is_some() && t.link_between(13, 20).is_none());
    }

    #[test]
    fn tiers_take_their_own_bandwidth() {
        let t = TopologyOptions::new("spineleaf:2x2x4")
            .with_links("100GB/s,25GB/s", "1us")
            .build()
            .unwrap();
        let leaf = t.links().iter().find(|l| l.src == 0).unwrap();
        let up = t
            .links()
            .iter()
            .find(|l| l.src == 8 && l.dst == 10)
            .unwrap();
        assert_eq!(leaf.bandwidth, Bandwidth::gb_per_sec(100.0));
        assert_eq!(up.bandwidth, Bandwidth::gb_per_sec(25.0));
    }

    #[test]
    fn bad_sizes_are_named() {
        for bad in [
            "fattree:3",
            "bigraph:2x3",
            "spineleaf:2x0x4",
            "rail:0x8",
            "spineleaf:2x2",
            "spineleaf:2x2x2x0",
            "spineleaf:2x2x2x2x2",
        ] {
            let err = TopologyOptions::new(bad).build().unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
