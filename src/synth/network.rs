//! The point-to-point network the synthesizer matches chunks over: the topology's active NPUs and
//! the direct links between them, with every switch unwound into logical NPU-to-NPU links (TACOS
//! Sec. IV-G: each member of a switch of `m` NPUs gets `d` outgoing links, to the next `d` members,
//! each with a `d`-th of its uplink bandwidth).

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
}

impl NetLink {
    /// (link-free delay, arrival delay) of `bytes`, as the simulator's exact model gives them.
    pub fn delays(&self, bytes: u64) -> (Time, Time) {
        let (free, arrive) = TimeModel::Exact.delays(bytes, self.bandwidth, self.latency);
        match self.relay {
            Some(port) => (free, arrive + port.transmit_time(bytes)),
            None => (free, arrive),
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
    in_start: Vec<u32>,
    in_list: Vec<u32>,
    out_start: Vec<u32>,
    out_list: Vec<u32>,
}

impl Network {
    /// The synthesis network of `topology`; switches are unwound to `unwind_degree` links per NPU
    /// (at most members - 1).
    pub fn from_topology(topology: &Topology, unwind_degree: u32) -> Result<Network, Error> {
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
        Ok(Network::with_links(nodes, local, links))
    }

    fn with_links(nodes: Vec<NodeId>, local: Vec<u32>, links: Vec<NetLink>) -> Network {
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
        Network {
            nodes,
            local,
            links,
            in_start,
            in_list,
            out_start,
            out_list,
        }
    }

    /// The same NPUs with every link reversed (reduce-scatter is all-gather on this, run backwards).
    /// Link `i` of the transpose is link `i` of `self` turned around.
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
        Network::with_links(self.nodes.clone(), self.local.clone(), links)
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
        let net = Network::from_topology(&t, 2).unwrap();
        assert_eq!(net.npus(), 8);
        assert_eq!(net.links.len(), 16);
        for &l in net.out_links(3) {
            let link = net.links[l as usize];
            assert!(link.dst == 4 || link.dst == 5);
            assert_eq!(link.bandwidth, Bandwidth::gb_per_sec(25.0));
            assert_eq!(link.latency, Time::from_ns(1000));
            // Store-and-forward: the switch's port serialises the chunk again.
            assert_eq!(link.delays(50).1, Time::from_ns(1000 + 2 + 1));
        }
    }

    #[test]
    fn the_transpose_turns_every_link_around() {
        let t = parse_inline(
            "uring:4",
            &[Bandwidth::gb_per_sec(50.0)],
            &[Time::from_ns(500)],
        )
        .unwrap();
        let net = Network::from_topology(&t, 1).unwrap();
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
