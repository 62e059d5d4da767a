//! Network topologies: NPUs, switches and directed links with latency and bandwidth.
//!
//! A [`Topology`] is a directed graph. NPUs are nodes `0..npus`, switches follow them. Built-in shapes
//! (rings, meshes, tori, hypercubes, ASTRA-sim multi-dimensional hierarchies) keep their dimension
//! structure so that routing is dimension-order exactly as DESIGN.md specifies; explicit graphs and
//! topologies with faults route by shortest path.

mod build;
mod fabrics;
mod file;
mod routing;
mod spec;
pub mod system_file;
mod system_network;
mod systems;

pub(crate) use build::strides as strides_of;
pub use build::{Dim, DimKind};
pub use file::load_topology_file;
pub use routing::{equal_cost_choices, Choices, Router, Routing};
pub use spec::{parse_inline, TopologyOptions};
pub use system_network::{ProxyHolds, SwitchRelays};
pub use systems::{
    Calibration, CpuVendor, GpuArch, GpuSystem, Intra, NicKind, NicPath, PerProtocol,
    SystemOverrides,
};

use crate::units::{Bandwidth, Time};
use crate::Error;

/// The connected components of `nodes` nodes under the undirected `pairs`: per node, its
/// component's representative (a member of it).
pub fn components(nodes: usize, pairs: impl IntoIterator<Item = (NodeId, NodeId)>) -> Vec<NodeId> {
    fn find(parent: &mut [NodeId], mut v: NodeId) -> NodeId {
        while parent[v as usize] != v {
            parent[v as usize] = parent[parent[v as usize] as usize];
            v = parent[v as usize];
        }
        v
    }
    let mut parent: Vec<NodeId> = (0..nodes as NodeId).collect();
    for (a, b) in pairs {
        let (a, b) = (find(&mut parent, a), find(&mut parent, b));
        if a != b {
            parent[a as usize] = b;
        }
    }
    (0..nodes as NodeId).map(|v| find(&mut parent, v)).collect()
}

/// Index of a node (NPU or switch).
pub type NodeId = u32;
/// Index of a directed link in [`Topology::links`].
pub type LinkId = u32;

/// One direction of a physical link.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    pub src: NodeId,
    pub dst: NodeId,
    pub latency: Time,
    pub bandwidth: Bandwidth,
    /// The dimension this link belongs to, for multi-dimensional topologies.
    pub dim: Option<u8>,
    /// Time the link is held per message on top of its bytes' (a host thread that posts each
    /// message in turn); zero on every shape but a GPU system's network proxies.
    pub per_message: Time,
}

impl Link {
    /// The link from `src` to `dst` (no dimension).
    pub fn one_way(src: NodeId, dst: NodeId, (bandwidth, latency): (Bandwidth, Time)) -> Link {
        Link {
            src,
            dst,
            latency,
            bandwidth,
            dim: None,
            per_message: Time::ZERO,
        }
    }

    /// Both directions of a link between `a` and `b` (no dimension).
    pub fn both_ways(a: NodeId, b: NodeId, tier: (Bandwidth, Time)) -> [Link; 2] {
        [Link::one_way(a, b, tier), Link::one_way(b, a, tier)]
    }
}

/// A network: nodes, directed links and the information routing needs.
#[derive(Clone, Debug)]
pub struct Topology {
    name: String,
    npus: u32,
    nodes: u32,
    links: Vec<Link>,
    /// CSR adjacency: out-links of node `v` are `out_links[out_start[v]..out_start[v+1]]`, sorted by dst.
    out_start: Vec<u32>,
    out_links: Vec<LinkId>,
    /// Far end of each entry of `out_links`: link lookups search this compact array instead of
    /// touching the link records (routing does one lookup per hop).
    out_dsts: Vec<NodeId>,
    /// Dimension structure of built-in shapes (empty for explicit graphs).
    dims: Vec<Dim>,
    /// For multi-dimensional topologies: per switch node, (dimension, first NPU of its group).
    switch_groups: Vec<(u8, NodeId)>,
    /// NPUs removed as faults: they keep their ids but have no links.
    failed: Vec<bool>,
    /// True when dimension-order routing is valid (no faults on a dimensional shape).
    dimension_routing: bool,
}

impl Topology {
    /// Builds a topology from raw parts and checks it (positive bandwidth, ids in range, connectivity).
    pub(crate) fn from_parts(
        name: String,
        npus: u32,
        switches: u32,
        links: Vec<Link>,
        dims: Vec<Dim>,
        switch_groups: Vec<(u8, NodeId)>,
    ) -> Result<Topology, Error> {
        if npus == 0 {
            return Err(Error::input(format!("topology {name}: it has no NPUs")));
        }
        let nodes = npus
            .checked_add(switches)
            .ok_or_else(|| Error::input(format!("topology {name}: too many nodes")))?;
        let dimension_routing = !dims.is_empty();
        let mut topo = Topology {
            name,
            npus,
            nodes,
            links: Vec::new(),
            out_start: Vec::new(),
            out_links: Vec::new(),
            out_dsts: Vec::new(),
            dims,
            switch_groups,
            failed: vec![false; npus as usize],
            dimension_routing,
        };
        topo.set_links(links)?;
        topo.check_connected()?;
        Ok(topo)
    }

    fn set_links(&mut self, links: Vec<Link>) -> Result<(), Error> {
        for (i, link) in links.iter().enumerate() {
            if link.src >= self.nodes || link.dst >= self.nodes {
                return Err(Error::input(format!(
                    "topology {}: link {i} ({} -> {}) names a node outside 0..{}",
                    self.name, link.src, link.dst, self.nodes
                )));
            }
            if link.src == link.dst {
                return Err(Error::input(format!(
                    "topology {}: link {i} connects node {} to itself",
                    self.name, link.src
                )));
            }
            let bps = link.bandwidth.as_bytes_per_sec();
            if !(bps.is_finite() && bps > 0.0) {
                return Err(Error::input(format!(
                    "topology {}: link {i} ({} -> {}) has non-positive bandwidth",
                    self.name, link.src, link.dst
                )));
            }
        }
        let mut order: Vec<LinkId> = (0..links.len() as LinkId).collect();
        order.sort_by_key(|&l| (links[l as usize].src, links[l as usize].dst));
        for pair in order.windows(2) {
            let (a, b) = (&links[pair[0] as usize], &links[pair[1] as usize]);
            if a.src == b.src && a.dst == b.dst {
                return Err(Error::input(format!(
                    "topology {}: duplicate link {} -> {} (links {} and {}); merge them into one link \
                     with the summed bandwidth",
                    self.name, a.src, a.dst, pair[0], pair[1]
                )));
            }
        }
        let mut out_start = vec![0u32; self.nodes as usize + 1];
        for link in &links {
            out_start[link.src as usize + 1] += 1;
        }
        for v in 0..self.nodes as usize {
            out_start[v + 1] += out_start[v];
        }
        self.out_start = out_start;
        self.out_dsts = order.iter().map(|&l| links[l as usize].dst).collect();
        self.out_links = order;
        self.links = links;
        Ok(())
    }

    /// Every active NPU must reach every other active NPU.
    fn check_connected(&self) -> Result<(), Error> {
        let active: Vec<NodeId> = self.active_npus();
        let Some(&first) = active.first() else {
            return Err(Error::input(format!(
                "topology {}: every NPU has been removed",
                self.name
            )));
        };
        for reverse in [false, true] {
            let reached = self.reachable_from(first, reverse);
            if let Some(&lost) = active.iter().find(|&&v| !reached[v as usize]) {
                let (a, b) = if reverse {
                    (lost, first)
                } else {
                    (first, lost)
                };
                let failed: Vec<String> = (0..self.failed.len())
                    .filter(|&v| self.failed[v])
                    .map(|v| v.to_string())
                    .collect();
                let cause = match failed.len() {
                    0 => String::new(),
                    1 => format!(" with failed NPU {} removed", failed[0]),
                    _ => format!(" with failed NPUs {} removed", failed.join(", ")),
                };
                return Err(Error::input(format!(
                    "topology {} is disconnected: NPU {a} cannot reach NPU {b}{cause}",
                    self.name
                )));
            }
        }
        Ok(())
    }

    fn reachable_from(&self, start: NodeId, reverse: bool) -> Vec<bool> {
        let mut incoming: Vec<Vec<NodeId>> = Vec::new();
        if reverse {
            incoming = vec![Vec::new(); self.nodes as usize];
            for link in &self.links {
                incoming[link.dst as usize].push(link.src);
            }
        }
        let mut seen = vec![false; self.nodes as usize];
        let mut stack = vec![start];
        seen[start as usize] = true;
        while let Some(v) = stack.pop() {
            let next: Box<dyn Iterator<Item = NodeId>> = if reverse {
                Box::new(incoming[v as usize].iter().copied())
            } else {
                Box::new(
                    self.out_links_of(v)
                        .iter()
                        .map(|&l| self.links[l as usize].dst),
                )
            };
            for w in next {
                // Traffic may pass through switches but never through a failed NPU.
                if !seen[w as usize] {
                    seen[w as usize] = true;
                    stack.push(w);
                }
            }
        }
        seen
    }

    /// Removes NPUs (they keep their ids but lose every link) and directed links, then re-checks
    /// connectivity. Routing falls back to shortest paths.
    pub fn remove(&mut self, npus: &[NodeId], links: &[(NodeId, NodeId)]) -> Result<(), Error> {
        if npus.is_empty() && links.is_empty() {
            return Ok(());
        }
        for &npu in npus {
            if npu >= self.npus {
                return Err(Error::input(format!(
                    "topology {}: cannot remove NPU {npu}: NPUs are 0..{}",
                    self.name, self.npus
                )));
            }
            self.failed[npu as usize] = true;
        }
        for &(a, b) in links {
            if self.link_between(a, b).is_none() {
                return Err(Error::input(format!(
                    "topology {}: cannot remove link {a} -> {b}: there is no such link",
                    self.name
                )));
            }
        }
        let kept: Vec<Link> = self
            .links
            .iter()
            .filter(|l| {
                let npu_failed = |v: NodeId| v < self.npus && self.failed[v as usize];
                !npu_failed(l.src) && !npu_failed(l.dst) && !links.contains(&(l.src, l.dst))
            })
            .cloned()
            .collect();
        self.set_links(kept)?;
        self.dimension_routing = false;
        self.check_connected()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn set_name(&mut self, name: impl Into<String>) {
        self.name = name.into();
    }

    /// Number of NPU ids (including failed ones).
    pub fn npus(&self) -> u32 {
        self.npus
    }

    /// Number of nodes, NPUs plus switches.
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    pub fn links(&self) -> &[Link] {
        &self.links
    }

    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id as usize]
    }

    /// What each switch is, by where it sits (index `v - npus` for switch `v`): `switch` for
    /// one that joins only NPUs (an NVSwitch, a dimension's switch), `leaf` for one that joins
    /// NPUs and higher switches, then `spine` two hops from the nearest NPU, `core` three, `tier
    /// N` beyond; numbered within their kind in node order (`leaf0`, `spine3`).
    pub fn switch_names(&self) -> Vec<String> {
        let mut hops = vec![u32::MAX; self.nodes as usize];
        let mut queue: std::collections::VecDeque<NodeId> = (0..self.npus).collect();
        for v in 0..self.npus {
            hops[v as usize] = 0;
        }
        while let Some(v) = queue.pop_front() {
            for &l in self.out_links_of(v) {
                let w = self.links[l as usize].dst;
                if hops[w as usize] == u32::MAX {
                    hops[w as usize] = hops[v as usize] + 1;
                    queue.push_back(w);
                }
            }
        }
        let mut counts: std::collections::HashMap<String, u32> = Default::default();
        (self.npus..self.nodes)
            .map(|v| {
                let higher = self
                    .out_links_of(v)
                    .iter()
                    .any(|&l| hops[self.links[l as usize].dst as usize] > hops[v as usize]);
                let kind = match hops[v as usize] {
                    1 if higher => "leaf".to_string(),
                    1 => "switch".to_string(),
                    2 => "spine".to_string(),
                    3 => "core".to_string(),
                    n => format!("tier{n}."),
                };
                let k = counts.entry(kind.clone()).or_default();
                *k += 1;
                format!("{kind}{}", *k - 1)
            })
            .collect()
    }

    /// Out-links of a node, sorted by destination.
    pub fn out_links_of(&self, node: NodeId) -> &[LinkId] {
        let v = node as usize;
        &self.out_links[self.out_start[v] as usize..self.out_start[v + 1] as usize]
    }

    /// Where `node`'s out-links start in the list of every node's out-links ([`Topology::out_link_at`]).
    pub(crate) fn out_links_start(&self, node: NodeId) -> u32 {
        self.out_start[node as usize]
    }

    /// Entry `index` of the list of every node's out-links, node by node, each node's sorted by
    /// far end.
    #[inline]
    pub(crate) fn out_link_at(&self, index: usize) -> LinkId {
        self.out_links[index]
    }

    /// The directed link `a -> b`, if there is one.
    pub fn link_between(&self, a: NodeId, b: NodeId) -> Option<LinkId> {
        if a >= self.nodes {
            return None;
        }
        let range = self.out_start[a as usize] as usize..self.out_start[a as usize + 1] as usize;
        let offset = self.out_dsts[range.clone()].binary_search(&b).ok()?;
        Some(self.out_links[range.start + offset])
    }

    /// NPUs that are not failed, in id order.
    pub fn active_npus(&self) -> Vec<NodeId> {
        (0..self.npus)
            .filter(|&v| !self.failed[v as usize])
            .collect()
    }

    pub fn is_active_npu(&self, node: NodeId) -> bool {
        node < self.npus && !self.failed[node as usize]
    }

    pub fn is_switch(&self, node: NodeId) -> bool {
        node >= self.npus && node < self.nodes
    }

    /// Whether the network has switches (nodes that are not NPUs).
    pub fn has_switches(&self) -> bool {
        self.nodes > self.npus
    }

    /// The dimensions of a built-in multi-dimensional shape (empty for explicit graphs).
    pub fn dims(&self) -> &[Dim] {
        &self.dims
    }

    /// The network of dimensions `range` alone (fault-free dimensional shapes): what a group of
    /// NPUs that differ only in those coordinates sees, e.g. a model-parallel group over the first
    /// dimensions. Its NPU `r` is the group member `r` in row-major order.
    pub fn sub_dimensions(&self, range: std::ops::Range<usize>) -> Result<Topology, Error> {
        if !self.dimension_routing || range.is_empty() || range.end > self.dims.len() {
            return Err(Error::input(format!(
                "topology {}: has no dimensions {}..{} without faults",
                self.name, range.start, range.end
            )));
        }
        build::multi_dim(
            format!("{}[dims {}..{}]", self.name, range.start + 1, range.end),
            self.dims[range].to_vec(),
        )
    }

    /// True when every link is matched by a link in the opposite direction.
    /// The groups of nodes joined by links of at least `threshold` B/s (boxes behind a fast
    /// switch, the inner dimensions of a hierarchy): per node, its group's representative.
    pub fn groups_joined_at(&self, threshold: f64) -> Vec<NodeId> {
        components(
            self.nodes as usize,
            self.links
                .iter()
                .filter(|l| l.bandwidth.as_bytes_per_sec() >= threshold)
                .map(|l| (l.src, l.dst)),
        )
    }

    pub fn is_bidirectional(&self) -> bool {
        self.links
            .iter()
            .all(|l| self.link_between(l.dst, l.src).is_some())
    }

    /// True when routing follows the built-in dimension order.
    pub(crate) fn uses_dimension_routing(&self) -> bool {
        self.dimension_routing
    }

    pub(crate) fn switch_group(&self, switch: NodeId) -> (u8, NodeId) {
        self.switch_groups[(switch - self.npus) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Switches are named by where they sit: a leaf/spine's leaves and spines, a box's switch
    /// (only NPUs on it) as a switch, numbered within their kind.
    #[test]
    fn switches_are_named_by_their_place() {
        let names = |spec: &str| {
            crate::topology::TopologyOptions::new(spec)
                .build()
                .unwrap()
                .switch_names()
        };
        assert_eq!(
            names("spineleaf:4x2x8"),
            ["leaf0", "leaf1", "leaf2", "leaf3", "spine0", "spine1"]
        );
        assert_eq!(names("switch:8"), ["switch0"]);
        let boxes = names("spineleaf:2x2x2x4");
        assert_eq!(
            boxes.iter().filter(|n| n.starts_with("switch")).count(),
            4,
            "{boxes:?}"
        );
        assert_eq!(
            boxes.iter().filter(|n| n.starts_with("leaf")).count(),
            2,
            "{boxes:?}"
        );
        assert_eq!(
            boxes.iter().filter(|n| n.starts_with("spine")).count(),
            2,
            "{boxes:?}"
        );
    }

    fn line(n: u32) -> Topology {
        let mut links = Vec::new();
        for i in 0..n - 1 {
            for (a, b) in [(i, i + 1), (i + 1, i)] {
                links.push(Link::one_way(
                    a,
                    b,
                    (Bandwidth::gb_per_sec(1.0), Time::from_ns(1)),
                ));
            }
        }
        Topology::from_parts("line".into(), n, 0, links, Vec::new(), Vec::new()).unwrap()
    }

    #[test]
    fn link_lookup_finds_both_directions() {
        let t = line(4);
        assert!(t.link_between(1, 2).is_some());
        assert!(t.link_between(2, 1).is_some());
        assert!(t.link_between(0, 2).is_none());
        assert!(t.is_bidirectional());
    }

    #[test]
    fn removing_a_cut_link_is_reported_as_disconnection() {
        let mut t = line(4);
        let err = t.remove(&[], &[(1, 2)]).unwrap_err().to_string();
        assert!(err.contains("disconnected"), "{err}");
    }

    #[test]
    fn removing_an_end_npu_keeps_the_rest_connected() {
        let mut t = line(4);
        t.remove(&[3], &[]).unwrap();
        assert_eq!(t.active_npus(), vec![0, 1, 2]);
        assert!(t.link_between(2, 3).is_none());
    }
}
