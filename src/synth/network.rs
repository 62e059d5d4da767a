//! The point-to-point network the synthesizer matches chunks over: the topology's active NPUs and
//! the direct links between them, with every switch unwound into logical NPU-to-NPU links. Two
//! unwindings:
//!
//! * by degree (TACOS Sec. IV-G): each member of a switch of `m` NPUs gets `d` outgoing links, to
//!   the next `d` members, each with a `d`-th of its uplink bandwidth; switches must lead to NPUs
//!   only.
//! * by splitting (ForestColl's edge splitting, [`crate::forest::split`]): every switch, however
//!   switches connect (NICs, leaf/spine, shared IB switches), is replaced by logical links whose
//!   bandwidths keep every cut of the network, each a physical path its transfers then travel.
//!   A ring through a switch of `m` NPUs lets a group's members reach each other only around the
//!   ring, so the matching cannot see that a neighbour two hops away already holds a chunk and
//!   spends a scarce inter-group link on it again; the split network keeps the group's members
//!   directly connected and its inter-group capacity exactly what the cuts allow.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::collective::{Collective, CollectiveKind};
use crate::forest::{self, Demand, Ratio};
use crate::sim::TimeModel;
use crate::topology::{NodeId, Topology};
use crate::units::{Bandwidth, Time};
use crate::Error;

/// A directed logical link between two NPUs (local indices).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NetLink {
    pub src: u32,
    pub dst: u32,
    pub bandwidth: Bandwidth,
    pub latency: Time,
    /// For a link unwound from a switch: the switch's port to the destination, which the chunk
    /// crosses after the switch has stored it (store-and-forward adds its serialization).
    pub relay: Option<Bandwidth>,
    /// For a link of the split network: its physical path (index into `Network::paths`), whose
    /// hops after the first each store and forward the chunk again.
    pub path: Option<u32>,
}

/// Owners of pieces whose chains [`Network::latency_floor`] follows: every rank up to this many,
/// else this many spread evenly over the ranks.
const FLOOR_OWNERS: u32 = 16;

/// A split link's physical path: its topology nodes, and the (bandwidth, latency) of every hop.
type SplitPath = (Vec<NodeId>, Vec<(Bandwidth, Time)>);

/// How switches become point-to-point links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwinding {
    /// TACOS's ring-like unwinding: `d` logical links per member.
    Degree(u32),
    /// ForestColl's cut-preserving edge splitting.
    Split,
}

impl Unwinding {
    pub fn name(self) -> String {
        match self {
            Unwinding::Degree(d) => format!("degree {d}"),
            Unwinding::Split => "split".to_string(),
        }
    }
}

/// NPU-only graph with in- and out-adjacency lists.
#[derive(Clone, Debug)]
pub(crate) struct Network {
    /// Topology node id of each local NPU index.
    pub nodes: Vec<NodeId>,
    /// Local index of each topology node (`u32::MAX` for switches and failed NPUs).
    pub local: Vec<u32>,
    pub links: Vec<NetLink>,
    /// Physical paths of split links.
    paths: Vec<SplitPath>,
    /// Cluster of each NPU: the components of the fast links (see [`clusters`]).
    pub cluster: Vec<u32>,
    pub clusters: u32,
    /// Per link: true when it joins two clusters (a scarce link between groups).
    pub crosses: Vec<bool>,
    in_start: Vec<u32>,
    in_list: Vec<u32>,
    out_start: Vec<u32>,
    out_list: Vec<u32>,
}

impl Network {
    /// The topology nodes link `l` joins, from and to.
    pub fn ends(&self, l: u32) -> (NodeId, NodeId) {
        let link = &self.links[l as usize];
        (self.nodes[link.src as usize], self.nodes[link.dst as usize])
    }

    /// The synthesis network of `topology` with its switches unwound as `unwinding` says.
    pub fn from_topology(topology: &Topology, unwinding: Unwinding) -> Result<Network, Error> {
        match unwinding {
            Unwinding::Degree(d) => Network::by_degree(topology, d),
            Unwinding::Split => Network::by_splitting(topology),
        }
    }

    /// Switches unwound to `unwind_degree` links per NPU (at most members - 1).
    fn by_degree(topology: &Topology, unwind_degree: u32) -> Result<Network, Error> {
        if unwind_degree == 0 {
            return Err(Error::input("--unwind-degree must be at least 1"));
        }
        let nodes = topology.active_npus();
        let mut local = vec![u32::MAX; topology.nodes() as usize];
        for (i, &v) in nodes.iter().enumerate() {
            local[v as usize] = i as u32;
        }
        let mut links: Vec<NetLink> = Vec::new();
        for l in topology.links() {
            if !topology.is_switch(l.src) && !topology.is_switch(l.dst) {
                links.push(NetLink {
                    src: local[l.src as usize],
                    dst: local[l.dst as usize],
                    bandwidth: l.bandwidth,
                    latency: l.latency,
                    relay: None,
                    path: None,
                });
            }
        }
        for switch in topology.npus()..topology.nodes() {
            unwind_switch(topology, switch, &local, unwind_degree, &mut links)?;
        }
        // A switch path between NPUs that already share a direct link adds nothing the router
        // would use; keep one logical link per ordered pair: the fastest.
        links.sort_by(|a, b| {
            (a.src, a.dst)
                .cmp(&(b.src, b.dst))
                .then(
                    b.bandwidth
                        .as_bytes_per_sec()
                        .total_cmp(&a.bandwidth.as_bytes_per_sec()),
                )
                .then(a.latency.cmp(&b.latency))
        });
        links.dedup_by(|later, first| (later.src, later.dst) == (first.src, first.dst));
        Ok(Network::with_links(nodes, local, links, Vec::new()))
    }

    /// Switches removed by cut-preserving edge splitting for an all-gather among every active
    /// NPU: one logical link per physical path, with the bandwidth its share of capacity stands
    /// for (units / U capacity units).
    fn by_splitting(topology: &Topology) -> Result<Network, Error> {
        let nodes = topology.active_npus();
        let mut local = vec![u32::MAX; topology.nodes() as usize];
        for (i, &v) in nodes.iter().enumerate() {
            local[v as usize] = i as u32;
        }
        let net = forest::Network::new(topology, false);
        let demand = Demand::all(&nodes);
        let sinks = crate::bound::symmetry_representatives(topology);
        let rate = forest::rate::optimal_rate(&net, &demand, &sinks)?;
        let (k, u): (u64, Ratio) = forest::rate::trees_for(rate, net.capacity_gcd());
        let logical = forest::split::remove_switches_verified(&net, &demand, k, u)?;
        let mut links = Vec::new();
        let mut paths = Vec::new();
        for arc in &logical.arcs {
            for &(path, units) in &arc.bundles {
                let route = logical.paths.get(path).to_vec();
                let hops: Vec<(Bandwidth, Time)> = route
                    .windows(2)
                    .map(|hop| {
                        let l = topology.link(
                            topology
                                .link_between(hop[0], hop[1])
                                .expect("split paths follow links"),
                        );
                        (l.bandwidth, l.latency)
                    })
                    .collect();
                links.push(NetLink {
                    src: local[arc.tail as usize],
                    dst: local[arc.head as usize],
                    bandwidth: Bandwidth::bytes_per_sec(units as f64 / u.as_f64() * net.unit_bps),
                    latency: hops.iter().fold(Time::ZERO, |t, h| t + h.1),
                    relay: None,
                    path: Some(paths.len() as u32),
                });
                paths.push((route, hops));
            }
        }
        Ok(Network::with_links(nodes, local, links, paths))
    }

    /// (link-free delay, arrival delay) of `bytes` on link `l`, as the simulator's exact model
    /// gives them for a point-to-point link: split links add the store-and-forward of every
    /// further hop of their path.
    pub fn delays(&self, l: u32, bytes: u64) -> (Time, Time) {
        let link = &self.links[l as usize];
        let (free, arrive) = TimeModel::Exact.delays(bytes, link.bandwidth, link.latency);
        let later = match (link.relay, link.path) {
            (Some(port), _) => port.transmit_time(bytes),
            (None, Some(p)) => self.paths[p as usize].1[1..]
                .iter()
                .fold(Time::ZERO, |t, h| t + h.0.transmit_time(bytes)),
            (None, None) => Time::ZERO,
        };
        (free, arrive + later)
    }

    /// The physical route of link `l` when it is a split path (None: the topology's routing).
    /// On the transposed network this is still the path of the original link: the reversed
    /// sends travel it in its own direction.
    pub fn route(&self, l: u32) -> Option<&[NodeId]> {
        let p = self.links[l as usize].path?;
        Some(&self.paths[p as usize].0)
    }

    fn with_links(
        nodes: Vec<NodeId>,
        local: Vec<u32>,
        links: Vec<NetLink>,
        paths: Vec<SplitPath>,
    ) -> Network {
        let n = nodes.len();
        let csr = |key: fn(&NetLink) -> u32| {
            let mut start = vec![0u32; n + 1];
            for l in &links {
                start[key(l) as usize + 1] += 1;
            }
            for i in 0..n {
                start[i + 1] += start[i];
            }
            let mut fill = start.clone();
            let mut list = vec![0u32; links.len()];
            for (id, l) in links.iter().enumerate() {
                let slot = &mut fill[key(l) as usize];
                list[*slot as usize] = id as u32;
                *slot += 1;
            }
            (start, list)
        };
        let (in_start, in_list) = csr(|l| l.dst);
        let (out_start, out_list) = csr(|l| l.src);
        let (cluster, clusters) = clusters(n, &links);
        let crosses = links
            .iter()
            .map(|l| cluster[l.src as usize] != cluster[l.dst as usize])
            .collect();
        Network {
            nodes,
            local,
            links,
            paths,
            cluster,
            clusters,
            crosses,
            in_start,
            in_list,
            out_start,
            out_list,
        }
    }

    /// The same network seen as one cluster: the matching may then bring chunks into any group
    /// over any link.
    pub fn unclustered(&self) -> Network {
        Network {
            cluster: vec![0; self.nodes.len()],
            clusters: 1,
            crosses: vec![false; self.links.len()],
            ..self.clone()
        }
    }

    /// The same NPUs with every link reversed (reduce-scatter is all-gather on this, run backwards).
    /// Link `i` of the transpose is link `i` of `self` turned around; a send over it runs the
    /// original link's path backwards in time, so routes stay the original's.
    pub fn transposed(&self) -> Network {
        let links = self
            .links
            .iter()
            .map(|l| NetLink {
                src: l.dst,
                dst: l.src,
                ..*l
            })
            .collect();
        Network::with_links(
            self.nodes.clone(),
            self.local.clone(),
            links,
            self.paths.clone(),
        )
    }

    /// True when every logical link is a physical link between two NPUs (no switch unwound).
    pub fn is_point_to_point(&self) -> bool {
        self.links
            .iter()
            .all(|l| l.relay.is_none() && l.path.is_none())
    }

    pub fn npus(&self) -> u32 {
        self.nodes.len() as u32
    }

    pub fn in_links(&self, npu: u32) -> &[u32] {
        &self.in_list
            [self.in_start[npu as usize] as usize..self.in_start[npu as usize + 1] as usize]
    }

    pub fn out_links(&self, npu: u32) -> &[u32] {
        &self.out_list
            [self.out_start[npu as usize] as usize..self.out_start[npu as usize + 1] as usize]
    }

    /// A floor under the completion time of any schedule planned on this network for
    /// `collectives` and run on `topology`, from latencies alone: a piece travels a chain of
    /// sends over logical links, each no sooner than the least latency between its ends in
    /// `topology` (whatever the routing), and an all-reduce's piece gathers every rank's
    /// contribution at its owner before it spreads back out. An unwinding whose floor is not
    /// below a schedule already found cannot beat it.
    pub fn latency_floor(&self, topology: &Topology, collectives: &[Collective]) -> Time {
        latency_floors(&[self], topology, collectives)[0]
    }

    /// Lowers the floors of the logical links into `npu` to the least physical latency from
    /// their sources (`physical`, per topology node, towards `npu`).
    fn lower_hops_into(&self, npu: u32, physical: &[Time], floors: &mut [Time]) {
        for &l in self.in_links(npu) {
            let src = self.nodes[self.links[l as usize].src as usize];
            let floor = &mut floors[l as usize];
            *floor = (*floor).min(physical[src as usize]);
        }
    }

    /// [`Network::latency_floor`] of one collective: the farthest member from (or to) each
    /// owner of a piece, over up to [`FLOOR_OWNERS`] owners (any owner's chain bounds the whole).
    fn collective_floor(&self, hops: &[Time], c: &Collective) -> Time {
        use CollectiveKind::*;
        let n = c.ranks();
        let owners: Vec<u32> = match c.kind {
            Broadcast | Reduce | Scatter | Gather => vec![c.root_rank],
            _ if n <= FLOOR_OWNERS => (0..n).collect(),
            _ => (0..FLOOR_OWNERS)
                .map(|i| (i as u64 * n as u64 / FLOOR_OWNERS as u64) as u32)
                .collect(),
        };
        let (outward, inward) = match c.kind {
            AllGather | Broadcast | Scatter | AllToAll => (true, false),
            ReduceScatter | Reduce | Gather => (false, true),
            AllReduce => (true, true),
        };
        let members: Vec<u32> = c.npus.iter().map(|&v| self.local[v as usize]).collect();
        let farthest = |from: u32, forward: bool| -> Time {
            let reach = self.latencies_from(hops, from, forward);
            members
                .iter()
                .map(|&m| reach[m as usize])
                .max()
                .unwrap_or(Time::ZERO)
        };
        owners
            .into_iter()
            .map(|r| {
                let owner = members[r as usize];
                let into = if inward {
                    farthest(owner, false)
                } else {
                    Time::ZERO
                };
                let out = if outward {
                    farthest(owner, true)
                } else {
                    Time::ZERO
                };
                into + out
            })
            .max()
            .unwrap_or(Time::ZERO)
    }

    /// Least latency over logical links from `npu` to every NPU (`forward`), or from every NPU to
    /// it; `Time::MAX` where there is no path.
    fn latencies_from(&self, hops: &[Time], npu: u32, forward: bool) -> Vec<Time> {
        let mut dist = vec![Time::MAX; self.nodes.len()];
        dist[npu as usize] = Time::ZERO;
        let mut heap = BinaryHeap::from([Reverse((Time::ZERO, npu))]);
        while let Some(Reverse((d, v))) = heap.pop() {
            if d > dist[v as usize] {
                continue;
            }
            let links = if forward {
                self.out_links(v)
            } else {
                self.in_links(v)
            };
            for &l in links {
                let link = &self.links[l as usize];
                let next = if forward { link.dst } else { link.src };
                let cand = d + hops[l as usize];
                if cand < dist[next as usize] {
                    dist[next as usize] = cand;
                    heap.push(Reverse((cand, next)));
                }
            }
        }
        dist
    }
}

/// [`Network::latency_floor`] of each of `nets`, all unwound from `topology` (the same NPUs):
/// the physical latencies towards each NPU are found once for them all.
pub(crate) fn latency_floors(
    nets: &[&Network],
    topology: &Topology,
    collectives: &[Collective],
) -> Vec<Time> {
    let mut hops: Vec<Vec<Time>> = nets
        .iter()
        .map(|net| net.links.iter().map(|l| l.latency).collect())
        .collect();
    let npus = nets.first().map_or(0, |net| net.npus());
    for v in 0..npus {
        if nets.iter().all(|net| net.in_links(v).is_empty()) {
            continue;
        }
        let physical = topology.latencies_to(nets[0].nodes[v as usize]);
        for (net, floors) in nets.iter().zip(&mut hops) {
            net.lower_hops_into(v, &physical, floors);
        }
    }
    nets.iter()
        .zip(&hops)
        .map(|(net, hops)| {
            collectives
                .iter()
                .map(|c| net.collective_floor(hops, c))
                .max()
                .unwrap_or(Time::ZERO)
        })
        .collect()
}

/// Groups of NPUs joined by fast links: boxes behind their NVSwitch, xGMI meshes, the inner
/// dimensions of a hierarchy. Candidate cuts are the gaps of at least 2x between consecutive link
/// bandwidths; for a cut, clusters are the components of the links above it. A cut is taken, the
/// lowest first (largest clusters), only when every cluster is strongly connected by its fast
/// links and can spread inside what enters it once: `(n - m)(m - 1)` shards over its internal
/// bandwidth take no longer than an NPU's ingress bound `(n - 1) / min ingress` (a pair of NPUs
/// joined by one fast link cannot hand each other half of everything in time, a box behind an
/// NVSwitch can). Without such a cut the network is one cluster. Returns each NPU's cluster and
/// the number of clusters.
fn clusters(n: usize, links: &[NetLink]) -> (Vec<u32>, u32) {
    let single = (vec![0; n], 1);
    let mut speeds: Vec<f64> = links
        .iter()
        .map(|l| l.bandwidth.as_bytes_per_sec())
        .collect();
    speeds.sort_by(f64::total_cmp);
    speeds.dedup();
    let mut ingress = vec![0.0f64; n];
    for l in links {
        ingress[l.dst as usize] += l.bandwidth.as_bytes_per_sec();
    }
    let min_ingress = ingress.iter().copied().fold(f64::INFINITY, f64::min);
    for w in speeds.windows(2) {
        if w[1] / w[0] < 2.0 {
            continue;
        }
        if let Some(found) = clusters_above(n, links, w[1], min_ingress) {
            return found;
        }
    }
    single
}

/// The clusters of the links of at least `threshold` B/s, if they pass [`clusters`]' tests.
fn clusters_above(
    n: usize,
    links: &[NetLink],
    threshold: f64,
    min_ingress: f64,
) -> Option<(Vec<u32>, u32)> {
    let fast = |l: &&NetLink| l.bandwidth.as_bytes_per_sec() >= threshold;
    let root = crate::topology::components(n, links.iter().filter(fast).map(|l| (l.src, l.dst)));
    let mut id = vec![u32::MAX; n];
    let mut count = 0;
    let cluster: Vec<u32> = (0..n as u32)
        .map(|v| {
            let r = root[v as usize] as usize;
            if id[r] == u32::MAX {
                id[r] = count;
                count += 1;
            }
            id[r]
        })
        .collect();
    if count <= 1 || count as usize == n {
        return None;
    }
    // Spreading inside: (n - m)(m - 1) shards over the internal bandwidth.
    let mut size = vec![0f64; count as usize];
    let mut internal = vec![0f64; count as usize];
    for &c in &cluster {
        size[c as usize] += 1.0;
    }
    for l in links.iter().filter(fast) {
        internal[cluster[l.src as usize] as usize] += l.bandwidth.as_bytes_per_sec();
    }
    let npu_bound = (n as f64 - 1.0) / min_ingress;
    let spreads = (0..count as usize).all(|c| {
        let m = size[c];
        m < 2.0 || (n as f64 - m) * (m - 1.0) / internal[c] <= npu_bound
    });
    if !spreads {
        return None;
    }
    // Strongly connected: every member reaches and is reached from its cluster's first member.
    let mut first = vec![u32::MAX; count as usize];
    for v in 0..n as u32 {
        let c = cluster[v as usize] as usize;
        if first[c] == u32::MAX {
            first[c] = v;
        }
    }
    for forward in [true, false] {
        let mut adjacent: Vec<Vec<u32>> = vec![Vec::new(); n];
        for l in links.iter().filter(fast) {
            let (a, b) = if forward {
                (l.src, l.dst)
            } else {
                (l.dst, l.src)
            };
            adjacent[a as usize].push(b);
        }
        let mut seen = vec![false; n];
        let mut stack: Vec<u32> = first.clone();
        for &f in &first {
            seen[f as usize] = true;
        }
        while let Some(v) = stack.pop() {
            for &w in &adjacent[v as usize] {
                if !seen[w as usize] {
                    seen[w as usize] = true;
                    stack.push(w);
                }
            }
        }
        if seen.iter().any(|s| !s) {
            return None;
        }
    }
    Some((cluster, count))
}

/// Adds the logical links of one switch: member `i` to members `i+1 .. i+d` (mod `m`).
fn unwind_switch(
    topology: &Topology,
    switch: NodeId,
    local: &[u32],
    degree: u32,
    links: &mut Vec<NetLink>,
) -> Result<(), Error> {
    // (member, uplink bandwidth, uplink latency, downlink bandwidth, downlink latency)
    let mut members: Vec<(u32, Bandwidth, Time, Bandwidth, Time)> = Vec::new();
    for &id in topology.out_links_of(switch) {
        let down = topology.link(id);
        if topology.is_switch(down.dst) {
            return Err(Error::input(format!(
                "topology {}: switch {switch} connects to switch {}; the synthesizer unwinds \
                 only switches whose ports all lead to NPUs",
                topology.name(),
                down.dst
            )));
        }
        let up = topology.link_between(down.dst, switch).ok_or_else(|| {
            Error::input(format!(
                "topology {}: NPU {} hears switch {switch} but has no link back to it; the \
                 synthesizer unwinds only switches with two-way ports",
                topology.name(),
                down.dst
            ))
        })?;
        let up = topology.link(up);
        members.push((
            local[down.dst as usize],
            up.bandwidth,
            up.latency,
            down.bandwidth,
            down.latency,
        ));
    }
    let m = members.len() as u32;
    if m < 2 {
        return Ok(());
    }
    let d = degree.min(m - 1);
    for i in 0..m {
        let (src, up_bw, up_lat, _, _) = members[i as usize];
        for k in 1..=d {
            let (dst, _, _, down_bw, down_lat) = members[((i + k) % m) as usize];
            links.push(NetLink {
                src,
                dst,
                bandwidth: up_bw.divided(d),
                latency: up_lat + down_lat,
                relay: Some(down_bw),
                path: None,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::parse_inline;

    #[test]
    fn a_switch_unwinds_to_d_links_per_member_sharing_the_uplink() {
        let t = parse_inline(
            "switch:8",
            &[Bandwidth::gb_per_sec(50.0)],
            &[Time::from_ns(500)],
        )
        .unwrap();
        let net = Network::from_topology(&t, Unwinding::Degree(2)).unwrap();
        assert_eq!(net.npus(), 8);
        assert_eq!(net.links.len(), 16);
        for &l in net.out_links(3) {
            let link = net.links[l as usize];
            assert!(link.dst == 4 || link.dst == 5);
            assert_eq!(link.bandwidth, Bandwidth::gb_per_sec(25.0));
            assert_eq!(link.latency, Time::from_ns(1000));
            // Store-and-forward: the switch's port serialises the chunk again.
            assert_eq!(net.delays(l, 50).1, Time::from_ns(1000 + 2 + 1));
        }
    }

    /// Through one switch (1 us a logical hop), degree d reaches the farthest of 8 members in
    /// ceil(7 / d) hops; an all-reduce's piece goes there and back.
    #[test]
    fn the_latency_floor_counts_the_hops_of_the_unwound_switch() {
        let t = parse_inline(
            "switch:8",
            &[Bandwidth::gb_per_sec(50.0)],
            &[Time::from_ns(500)],
        )
        .unwrap();
        let npus = t.active_npus();
        let floor = |degree, kind| {
            let c = Collective::new(kind, npus.clone(), 1000, 1, None).unwrap();
            let net = Network::from_topology(&t, Unwinding::Degree(degree)).unwrap();
            net.latency_floor(&t, &[c])
        };
        assert_eq!(floor(1, CollectiveKind::AllGather), Time::from_ns(7000));
        assert_eq!(floor(1, CollectiveKind::AllReduce), Time::from_ns(14000));
        assert_eq!(floor(2, CollectiveKind::ReduceScatter), Time::from_ns(4000));
        assert_eq!(floor(7, CollectiveKind::AllToAll), Time::from_ns(1000));
    }

    #[test]
    fn the_transpose_turns_every_link_around() {
        let t = parse_inline(
            "uring:4",
            &[Bandwidth::gb_per_sec(50.0)],
            &[Time::from_ns(500)],
        )
        .unwrap();
        let net = Network::from_topology(&t, Unwinding::Degree(1)).unwrap();
        let tr = net.transposed();
        assert_eq!(net.out_links(0).len(), 1);
        let l = net.out_links(0)[0];
        assert_eq!(
            (net.links[l as usize].src, net.links[l as usize].dst),
            (0, 1)
        );
        assert_eq!((tr.links[l as usize].src, tr.links[l as usize].dst), (1, 0));
        assert_eq!(tr.in_links(0), &[l]);
    }
}
