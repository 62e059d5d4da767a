//! Deterministic routing: the next link a message takes from a node towards its destination.
//!
//! Built-in dimensional shapes use dimension-order routing (lowest dimension first; a Ring dimension
//! takes the shorter direction, a tie goes +1), computed in closed form. Explicit graphs and faulty
//! topologies use shortest paths by (latency, hops), ties broken towards the lowest next node id;
//! their next-hop tables are built once per destination that a schedule uses, so memory grows with
//! nodes x destinations used, never with all pairs up front.
//!
//! [`Routing::Ecmp`] spreads messages over every shortest path, on any topology, as switches hash
//! flows: at each node a seeded hash of (transfer, destination, node) picks one of the out-links
//! that start a shortest path (by latency, then hops).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::build::{strides, DimKind};
use super::{LinkId, NodeId, Topology};
use crate::units::Time;
use crate::Error;

/// How messages choose among equal shortest paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Routing {
    /// One fixed path per (source, destination): dimension order, or the shortest path with ties
    /// to the lowest next node.
    #[default]
    Dor,
    /// Equal-cost multipath: a hash of (transfer, destination, node) seeded by `seed` picks among
    /// the shortest paths' next links at every node.
    Ecmp { seed: u64 },
    /// Paths planned for the schedule before it runs (ACCL's path control): transfers that may
    /// run at once are spread over the shortest paths so that as few as possible share a link
    /// (see `schedule::pin_paths`); the fixed paths of `Dor` serve what is left.
    Pinned,
}

impl Routing {
    /// The routing called `name` (`dor`, `ecmp`, `pinned`); ECMP hashes with `seed`.
    pub fn named(name: &str, seed: u64) -> Option<Routing> {
        match name {
            "dor" => Some(Routing::Dor),
            "ecmp" => Some(Routing::Ecmp { seed }),
            "pinned" => Some(Routing::Pinned),
            _ => None,
        }
    }

    /// The same routing with ECMP's hash seeded by `seed` (other routings have no seed).
    pub fn seeded(self, seed: u64) -> Routing {
        match self {
            Routing::Ecmp { .. } => Routing::Ecmp { seed },
            other => other,
        }
    }
}

/// Every out-link starting a shortest path towards one destination, per node.
pub struct Choices {
    start: Vec<u32>,
    links: Vec<LinkId>,
}

impl Choices {
    /// The out-links of `at` that start a shortest path (empty at the destination).
    pub fn at(&self, at: NodeId) -> &[LinkId] {
        &self.links[self.start[at as usize] as usize..self.start[at as usize + 1] as usize]
    }
}

/// A value per destination a schedule uses, found by the destination's id without hashing:
/// the simulator looks one up at every switch a message passes. Sized by the topology's nodes
/// plus the destinations used, never nodes x nodes.
struct PerDestination<T> {
    /// Per node: its value's position in `values`, or `u32::MAX` when it is no destination.
    index: Vec<u32>,
    values: Vec<T>,
}

impl<T> PerDestination<T> {
    /// One value per distinct destination in `destinations`, made by `make`.
    fn build(
        nodes: u32,
        destinations: impl IntoIterator<Item = NodeId>,
        mut make: impl FnMut(NodeId) -> T,
    ) -> PerDestination<T> {
        let mut index = vec![u32::MAX; nodes as usize];
        let mut values = Vec::new();
        for dst in destinations {
            if index[dst as usize] == u32::MAX {
                index[dst as usize] = values.len() as u32;
                values.push(make(dst));
            }
        }
        PerDestination { index, values }
    }

    fn empty() -> PerDestination<T> {
        PerDestination {
            index: Vec::new(),
            values: Vec::new(),
        }
    }

    /// The value of `dst`, which must have been one of the destinations.
    #[inline]
    fn get(&self, dst: NodeId) -> &T {
        &self.values[self.index[dst as usize] as usize]
    }
}

/// Route lookups for one simulation.
pub struct Router<'t> {
    topology: &'t Topology,
    strides: Vec<u32>,
    /// Dimensional shapes: coordinate of NPU `v` in dimension `d` at `v * dims + d` (saves the
    /// integer divisions that otherwise dominate a hop's routing).
    coords: Vec<u32>,
    /// Dimensional shapes with switches: the switch of NPU `v`'s group in dimension `d`, at
    /// `v * dims + d` (`NodeId::MAX` for other dimension kinds).
    switches: Vec<NodeId>,
    /// Dimensional shapes: NPU `v`'s links to its next and previous neighbour in ring and line
    /// dimension `d`, at `v * dims + d` (`NO_LINK` where there is none): dimension order then
    /// finds a hop's link without searching the node's out-links.
    steps: Vec<[LinkId; 2]>,
    /// Shortest-path next links per destination (only for non-dimensional topologies).
    tables: PerDestination<Vec<LinkId>>,
    /// ECMP: its seed and the equal-cost next links per destination.
    ecmp: Option<(u64, PerDestination<Choices>)>,
    /// Per node, how [`Router::next_link_of`] finds a message's next link there.
    hops: Vec<Hop>,
}

/// How a node forwards, decided once per router: the simulator routes every message at every
/// node it passes, and most nodes need neither a table nor a search.
#[derive(Clone, Copy, Debug)]
enum Hop {
    /// The node's only out-link (an NPU on a switch, a line's end).
    Only(LinkId),
    /// A dimension's switch under dimension-order routing: its out-links, sorted by destination,
    /// are its group's members in coordinate order, from position `first` of the topology's
    /// out-link list.
    Switch { dim: u32, first: u32 },
    /// Routing tables, dimension order or ECMP, per message.
    Route,
}

const NO_LINK: LinkId = LinkId::MAX;

impl<'t> Router<'t> {
    /// Prepares fixed routes towards every destination in `destinations`.
    pub fn new(
        topology: &'t Topology,
        destinations: impl IntoIterator<Item = NodeId>,
    ) -> Result<Router<'t>, Error> {
        Router::with_routing(topology, destinations, Routing::Dor)
    }

    /// Prepares routes by `routing` towards every destination in `destinations`.
    pub fn with_routing(
        topology: &'t Topology,
        destinations: impl IntoIterator<Item = NodeId>,
        routing: Routing,
    ) -> Result<Router<'t>, Error> {
        let nodes = topology.nodes();
        let (tables, ecmp) = match routing {
            Routing::Ecmp { seed } => {
                let choices = PerDestination::build(nodes, destinations, |dst| {
                    equal_cost_choices(topology, dst)
                });
                (PerDestination::empty(), Some((seed, choices)))
            }
            Routing::Dor | Routing::Pinned if !topology.uses_dimension_routing() => {
                let tables = PerDestination::build(nodes, destinations, |dst| {
                    shortest_path_tree(topology, dst)
                });
                (tables, None)
            }
            Routing::Dor | Routing::Pinned => (PerDestination::empty(), None),
        };
        let strides = strides(topology.dims());
        let mut coords = Vec::new();
        if topology.uses_dimension_routing() {
            let dims = topology.dims();
            coords.reserve(topology.npus() as usize * dims.len());
            for v in 0..topology.npus() {
                coords.extend(
                    dims.iter()
                        .zip(&strides)
                        .map(|(dim, &s)| (v / s) % dim.size),
                );
            }
        }
        let hops = (0..topology.nodes())
            .map(|v| match topology.out_links_of(v) {
                [only] => Hop::Only(*only),
                _ if ecmp.is_none()
                    && topology.uses_dimension_routing()
                    && topology.is_switch(v) =>
                {
                    Hop::Switch {
                        dim: topology.switch_group(v).0 as u32,
                        first: topology.out_links_start(v),
                    }
                }
                _ => Hop::Route,
            })
            .collect();
        let mut router = Router {
            topology,
            strides,
            coords,
            switches: Vec::new(),
            steps: Vec::new(),
            tables,
            ecmp,
            hops,
        };
        let dims = topology.dims();
        if topology.uses_dimension_routing() && dims.iter().any(|d| d.kind == DimKind::Switch) {
            let switches = (0..topology.npus())
                .flat_map(|v| (0..dims.len()).map(move |d| (v, d)))
                .map(|(v, d)| match dims[d].kind {
                    DimKind::Switch if dims[d].size >= 2 => router.compute_switch_of(v, d),
                    _ => NodeId::MAX,
                })
                .collect();
            router.switches = switches;
        }
        if topology.uses_dimension_routing() {
            router.steps = (0..topology.npus())
                .flat_map(|v| (0..dims.len()).map(move |d| (v, d)))
                .map(|(v, d)| router.compute_steps_of(v, d))
                .collect();
        }
        Ok(router)
    }

    pub fn topology(&self) -> &'t Topology {
        self.topology
    }

    /// The link transfer `transfer`, now at `at`, takes towards `dst` (`at != dst`).
    #[inline]
    pub fn next_link_of(&self, transfer: u32, at: NodeId, dst: NodeId) -> LinkId {
        match self.hops[at as usize] {
            Hop::Only(link) => link,
            Hop::Switch { dim, first } => self
                .topology
                .out_link_at(first as usize + self.coord(dst, dim as usize) as usize),
            Hop::Route => self.route(transfer, at, dst),
        }
    }

    /// [`Router::next_link_of`] at a node that forwards by tables, dimension order or ECMP.
    fn route(&self, transfer: u32, at: NodeId, dst: NodeId) -> LinkId {
        let Some((seed, choices)) = &self.ecmp else {
            return self.next_link(at, dst);
        };
        let table = choices.get(dst);
        let (first, end) = (
            table.start[at as usize] as usize,
            table.start[at as usize + 1] as usize,
        );
        debug_assert!(
            first < end,
            "connectivity was checked when the topology was built"
        );
        let key = (transfer as u64) << 32 ^ (dst as u64) << 16 ^ at as u64;
        table.links[first + (mix(seed ^ key) % (end - first) as u64) as usize]
    }

    /// The fixed-route link a message at `at` takes towards `dst` (`at != dst`).
    pub fn next_link(&self, at: NodeId, dst: NodeId) -> LinkId {
        if self.topology.uses_dimension_routing() {
            if self.topology.is_switch(at) {
                // A switch's out-links, sorted by destination, are its group's members in
                // coordinate order: index them directly instead of searching.
                let (d, _) = self.topology.switch_group(at);
                return self.topology.out_links_of(at)[self.coord(dst, d as usize) as usize];
            }
            self.dimension_order_link(at, dst)
        } else {
            let link = self.tables.get(dst)[at as usize];
            debug_assert_ne!(
                link, NO_LINK,
                "connectivity was checked when the topology was built"
            );
            link
        }
    }

    /// Number of links on the route from `src` to `dst`.
    pub fn hops(&self, src: NodeId, dst: NodeId) -> u32 {
        let mut at = src;
        let mut hops = 0;
        while at != dst {
            at = self.topology.link(self.next_link(at, dst)).dst;
            hops += 1;
        }
        hops
    }

    #[inline]
    fn coord(&self, npu: NodeId, d: usize) -> u32 {
        self.coords[npu as usize * self.strides.len() + d]
    }

    /// The lowest dimension in which NPUs `at` and `dst` differ, with its coordinates of both
    /// (`at != dst`): dimension order moves in it first.
    fn first_difference(&self, at: NodeId, dst: NodeId) -> (usize, u32, u32) {
        (0..self.strides.len())
            .map(|d| (d, self.coord(at, d), self.coord(dst, d)))
            .find(|&(_, from, to)| from != to)
            .expect("dimension-order routing between two different NPUs")
    }

    fn dimension_order_next(&self, at: NodeId, dst: NodeId) -> NodeId {
        let dims = self.topology.dims();
        if self.topology.is_switch(at) {
            let (d, base) = self.topology.switch_group(at);
            return base + self.coord(dst, d as usize) * self.strides[d as usize];
        }
        let (d, from, to) = self.first_difference(at, dst);
        let dim = &dims[d];
        let step_to = |c: u32| at - from * self.strides[d] + c * self.strides[d];
        match (dim.kind, forward_along(dim.kind, dim.size, from, to)) {
            (_, Some(forward)) => step_to(neighbour(dim.size, from, forward)),
            (DimKind::Switch, None) => self.switches[at as usize * dims.len() + d],
            (_, None) => step_to(to),
        }
    }

    /// The link dimension-order routing takes from NPU `at` towards `dst` (`at != dst`).
    #[inline]
    fn dimension_order_link(&self, at: NodeId, dst: NodeId) -> LinkId {
        let dims = self.topology.dims();
        let (d, from, to) = self.first_difference(at, dst);
        if let Some(forward) = forward_along(dims[d].kind, dims[d].size, from, to) {
            let link = self.steps[at as usize * dims.len() + d][usize::from(!forward)];
            debug_assert_ne!(link, NO_LINK, "dimension-order routing follows built links");
            return link;
        }
        let next = self.dimension_order_next(at, dst);
        self.topology
            .link_between(at, next)
            .expect("dimension-order routing follows built links")
    }

    /// NPU `npu`'s links to its next and previous neighbour in dimension `d`, for ring and line
    /// dimensions (`NO_LINK` where there is none, e.g. at a line's ends).
    fn compute_steps_of(&self, npu: NodeId, d: usize) -> [LinkId; 2] {
        let dim = &self.topology.dims()[d];
        let (n, stride, from) = (dim.size, self.strides[d], self.coord(npu, d));
        let towards = |c: Option<u32>| {
            c.and_then(|c| {
                self.topology
                    .link_between(npu, npu - from * stride + c * stride)
            })
            .unwrap_or(NO_LINK)
        };
        match dim.kind {
            DimKind::Ring | DimKind::UniRing if n >= 2 => [
                towards(Some(neighbour(n, from, true))),
                towards(Some(neighbour(n, from, false))),
            ],
            DimKind::Line => [
                towards((from + 1 < n).then_some(from + 1)),
                towards(from.checked_sub(1)),
            ],
            _ => [NO_LINK; 2],
        }
    }

    fn compute_switch_of(&self, npu: NodeId, d: usize) -> NodeId {
        let topo = self.topology;
        let (n, stride) = (topo.dims()[d].size, self.strides[d]);
        let base = npu - self.coord(npu, d) * stride;
        // Switch ids are assigned dimension by dimension, groups in order of their first NPU.
        let before: u32 = topo.dims()[..d]
            .iter()
            .filter(|dim| dim.kind == DimKind::Switch && dim.size >= 2)
            .map(|dim| topo.npus() / dim.size)
            .sum();
        let group = (base % stride) + (base / (stride * n)) * stride;
        topo.npus() + before + group
    }
}

/// SplitMix64's finaliser: a portable, well-spread 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Per node, every out-link on some shortest (latency, hops) path towards `dst` whose narrowest
/// link is as wide as any such path's: equal cost means equal delay and equal bandwidth, so a
/// message inside an NVSwitch box never spreads onto the NICs' slower path of equal latency.
pub fn equal_cost_choices(topology: &Topology, dst: NodeId) -> Choices {
    let dist = distances_to(topology, dst);
    let on_shortest = |l: LinkId, v: NodeId| {
        let link = topology.link(l);
        let (lat, hops) = dist[link.dst as usize];
        lat != u64::MAX && (lat + link.latency.ps(), hops + 1) == dist[v as usize]
    };
    // Widest bottleneck to dst over shortest paths, nodes taken nearest first.
    let mut order: Vec<NodeId> = (0..topology.nodes())
        .filter(|&v| dist[v as usize].0 != u64::MAX)
        .collect();
    order.sort_unstable_by_key(|&v| dist[v as usize]);
    let mut width = vec![0.0f64; topology.nodes() as usize];
    width[dst as usize] = f64::INFINITY;
    let through = |l: LinkId, width: &[f64]| {
        let link = topology.link(l);
        link.bandwidth
            .as_bytes_per_sec()
            .min(width[link.dst as usize])
    };
    for &v in order.iter().filter(|&&v| v != dst) {
        width[v as usize] = topology
            .out_links_of(v)
            .iter()
            .filter(|&&l| on_shortest(l, v))
            .map(|&l| through(l, &width))
            .fold(0.0, f64::max);
    }
    let mut start = Vec::with_capacity(topology.nodes() as usize + 1);
    let mut links = Vec::new();
    for v in 0..topology.nodes() {
        start.push(links.len() as u32);
        if v == dst || dist[v as usize].0 == u64::MAX {
            continue;
        }
        links.extend(
            topology
                .out_links_of(v)
                .iter()
                .copied()
                .filter(|&l| on_shortest(l, v) && through(l, &width) >= width[v as usize]),
        );
    }
    start.push(links.len() as u32);
    Choices { start, links }
}

impl Topology {
    /// The least latency of any path from every node to `dst` (`Time::MAX` where there is none):
    /// no message from a node reaches `dst` sooner, whatever the routing.
    pub fn latencies_to(&self, dst: NodeId) -> Vec<Time> {
        distances_to(self, dst)
            .into_iter()
            .map(|(ps, _)| Time::from_ps(ps))
            .collect()
    }
}

/// Shortest (latency, hops) from every node to `dst`; `u64::MAX` latency where unreachable.
fn distances_to(topology: &Topology, dst: NodeId) -> Vec<(u64, u32)> {
    let nodes = topology.nodes() as usize;
    // In-links by node, compressed: node v's are `incoming[start[v]..start[v + 1]]`.
    let mut start = vec![0u32; nodes + 1];
    for link in topology.links() {
        start[link.dst as usize + 1] += 1;
    }
    for v in 0..nodes {
        start[v + 1] += start[v];
    }
    let mut fill = start.clone();
    let mut incoming = vec![0 as LinkId; topology.links().len()];
    for (id, link) in topology.links().iter().enumerate() {
        let at = &mut fill[link.dst as usize];
        incoming[*at as usize] = id as LinkId;
        *at += 1;
    }
    let mut dist: Vec<(u64, u32)> = vec![(u64::MAX, u32::MAX); nodes];
    dist[dst as usize] = (0, 0);
    let mut heap = BinaryHeap::new();
    heap.push(Reverse(((0u64, 0u32), dst)));
    while let Some(Reverse((d, v))) = heap.pop() {
        if d > dist[v as usize] {
            continue;
        }
        // Messages never transit a failed NPU (it has no links) and never transit an NPU that is
        // the destination; other NPUs may forward.
        for &l in &incoming[start[v as usize] as usize..start[v as usize + 1] as usize] {
            let link = topology.link(l);
            let cand = (d.0 + link.latency.ps(), d.1 + 1);
            if cand < dist[link.src as usize] {
                dist[link.src as usize] = cand;
                heap.push(Reverse((cand, link.src)));
            }
        }
    }
    dist
}

/// Next link from every node towards `dst` by shortest (latency, hops), ties to the lowest next node.
fn shortest_path_tree(topology: &Topology, dst: NodeId) -> Vec<LinkId> {
    let nodes = topology.nodes() as usize;
    let dist = distances_to(topology, dst);
    (0..nodes as NodeId)
        .map(|v| {
            if v == dst {
                return NO_LINK;
            }
            topology
                .out_links_of(v)
                .iter()
                .copied()
                .filter(|&l| dist[topology.link(l).dst as usize].0 != u64::MAX)
                .min_by_key(|&l| {
                    let link = topology.link(l);
                    let (lat, hops) = dist[link.dst as usize];
                    ((lat + link.latency.ps(), hops + 1), link.dst)
                })
                .unwrap_or(NO_LINK)
        })
        .collect()
}

/// Which way dimension order moves from coordinate `from` to `to` along a ring or line dimension
/// of `n` (true: to the next coordinate; a ring takes the shorter way, a tie the next); None in
/// dimensions that reach every coordinate in one hop (fully connected, switch).
fn forward_along(kind: DimKind, n: u32, from: u32, to: u32) -> Option<bool> {
    match kind {
        DimKind::Ring => {
            let clockwise = (to + n - from) % n;
            Some(n - clockwise >= clockwise)
        }
        DimKind::UniRing => Some(true),
        DimKind::Line => Some(to > from),
        DimKind::FullyConnected | DimKind::Switch => None,
    }
}

/// The coordinate next to `from` in a dimension of `n`, forward or back, wrapping around.
fn neighbour(n: u32, from: u32, forward: bool) -> u32 {
    if forward {
        (from + 1) % n
    } else {
        (from + n - 1) % n
    }
}

#[cfg(test)]
mod tests {
    use super::super::build::{multi_dim, Dim};
    use super::*;
    use crate::units::{Bandwidth, Time};

    fn dims(spec: &[(DimKind, u32)]) -> Topology {
        let dims = spec
            .iter()
            .map(|&(k, n)| Dim::new(k, n, Bandwidth::gb_per_sec(1.0), Time::from_ns(1)))
            .collect();
        multi_dim("t", dims).unwrap()
    }

    fn path(r: &Router, src: NodeId, dst: NodeId) -> Vec<NodeId> {
        let mut at = src;
        let mut out = vec![at];
        while at != dst {
            at = r.topology().link(r.next_link(at, dst)).dst;
            out.push(at);
        }
        out
    }

    #[test]
    fn ring_takes_shorter_direction_and_ties_go_clockwise() {
        let t = dims(&[(DimKind::Ring, 8)]);
        let r = Router::new(&t, 0..8).unwrap();
        assert_eq!(path(&r, 0, 3), vec![0, 1, 2, 3]);
        assert_eq!(path(&r, 0, 4), vec![0, 1, 2, 3, 4]);
        assert_eq!(path(&r, 0, 5), vec![0, 7, 6, 5]);
        assert_eq!(path(&r, 6, 1), vec![6, 7, 0, 1]);
    }

    /// The per-NPU neighbour links give, for every pair and every dimension kind, the link to
    /// the node dimension order steps to.
    #[test]
    fn neighbour_links_are_the_dimension_order_steps() {
        use DimKind::*;
        let shapes: [&[(DimKind, u32)]; 6] = [
            &[(Ring, 5), (Line, 3)],
            &[(Line, 4), (Ring, 2), (UniRing, 3)],
            &[(Ring, 4), (FullyConnected, 3), (Switch, 2)],
            &[(UniRing, 2), (Line, 2)],
            &[(Line, 1), (Ring, 6)],
            &[(Switch, 3), (Ring, 3), (Line, 3)],
        ];
        for shape in shapes {
            let t = dims(shape);
            let r = Router::new(&t, 0..t.npus()).unwrap();
            for at in 0..t.npus() {
                for dst in (0..t.npus()).filter(|&d| d != at) {
                    let next = r.dimension_order_next(at, dst);
                    assert_eq!(
                        r.next_link(at, dst),
                        t.link_between(at, next).unwrap(),
                        "{shape:?}: {at} -> {dst}"
                    );
                }
            }
        }
    }

    #[test]
    fn multi_dim_routes_lowest_dimension_first_through_switches() {
        // [Ring 2, Switch 4]: 0 -> 7 = (0,0) -> (1,3): ring hop to 1, then switch 9, then 7.
        let t = dims(&[(DimKind::Ring, 2), (DimKind::Switch, 4)]);
        let r = Router::new(&t, 0..8).unwrap();
        assert_eq!(path(&r, 0, 7), vec![0, 1, 9, 7]);
        assert_eq!(path(&r, 6, 0), vec![6, 8, 0]);
    }

    #[test]
    fn switch_ids_follow_dimension_then_group_order() {
        // [Switch 2, Switch 3]: dim-0 groups {0,1},{2,3},{4,5} -> 6,7,8; dim-1 groups {0,2,4},{1,3,5} -> 9,10.
        let t = dims(&[(DimKind::Switch, 2), (DimKind::Switch, 3)]);
        let r = Router::new(&t, 0..6).unwrap();
        assert_eq!(path(&r, 2, 3), vec![2, 7, 3]);
        assert_eq!(path(&r, 1, 5), vec![1, 10, 5]);
        assert_eq!(path(&r, 0, 5), vec![0, 6, 1, 10, 5]);
    }

    #[test]
    fn shortest_path_routes_around_a_failed_link() {
        let mut t = dims(&[(DimKind::Line, 3), (DimKind::Line, 3)]);
        t.remove(&[], &[(0, 1), (1, 0)]).unwrap();
        let r = Router::new(&t, 0..9).unwrap();
        assert_eq!(path(&r, 0, 1), vec![0, 3, 4, 1]);
        assert_eq!(r.hops(0, 2), 4);
    }

    /// ECMP follows only shortest paths, uses every spine of a leaf/spine across many transfers,
    /// and picks the same links again for the same seed.
    #[test]
    fn ecmp_spreads_over_equal_shortest_paths_reproducibly() {
        let t = crate::topology::TopologyOptions::new("spineleaf:2x4x2")
            .build()
            .unwrap();
        let route = |seed: u64, transfer: u32| {
            let r = Router::with_routing(&t, [3], Routing::Ecmp { seed }).unwrap();
            let mut at = 0;
            let mut nodes = vec![at];
            while at != 3 {
                at = t.link(r.next_link_of(transfer, at, 3)).dst;
                nodes.push(at);
            }
            nodes
        };
        let mut spines = std::collections::BTreeSet::new();
        for transfer in 0..64 {
            let nodes = route(7, transfer);
            assert_eq!(nodes.len(), 5, "{nodes:?}: NPU, leaf, spine, leaf, NPU");
            assert_eq!((nodes[1], nodes[3]), (4, 5));
            spines.insert(nodes[2]);
            assert_eq!(route(7, transfer), nodes);
        }
        assert_eq!(spines.into_iter().collect::<Vec<_>>(), vec![6, 7, 8, 9]);
    }
}
