//! Path control: explicit routes that spread a schedule's concurrent messages over the network's
//! equal-cost paths, as ACCL's probe-based routing maps each connection to a physical path so that
//! no two of a step's connections share a leaf uplink or a spine downlink.
//!
//! Transfers at the same dependency depth are taken to run at once (the steps of ring, halving-
//! doubling and the like). Within such a round, each connection (source, destination) in issue
//! order takes the shortest path whose most loaded link carries the fewest connections already
//! placed in the round, then the fewest in total, then the fewest links an earlier round gave to
//! another source (a source keeps its paths from step to step, so pipelined segments of
//! successive steps do not meet either), ties to the lowest link ids. Connections with a single
//! shortest path, and transfers with a route of their own, are left as they are.

use std::collections::HashMap;

use super::{Schedule, TransferIndex};
use crate::topology::{equal_cost_choices, Choices, LinkId, NodeId, Topology};

/// What [`pin_paths`] did: transfers given a route, and the rounds they were planned in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinnedPaths {
    pub routed: usize,
    pub rounds: usize,
}

/// Gives every transfer of `schedule` that has a choice of shortest paths and no route of its
/// own a planned route (see the module documentation).
pub fn pin_paths(schedule: &mut Schedule, topology: &Topology) -> PinnedPaths {
    let depth = depths(schedule);
    let mut rounds: Vec<Vec<TransferIndex>> = Vec::new();
    for (t, &d) in depth.iter().enumerate() {
        let transfer = schedule.transfer(t as TransferIndex);
        if transfer.src == transfer.dst || schedule.route(t as TransferIndex).is_some() {
            continue;
        }
        if rounds.len() <= d as usize {
            rounds.resize_with(d as usize + 1, Vec::new);
        }
        rounds[d as usize].push(t as TransferIndex);
    }
    let mut planner = Planner::new(topology);
    let mut routes: Vec<(TransferIndex, Vec<NodeId>)> = Vec::new();
    let mut planned = 0;
    for round in rounds.iter().filter(|r| !r.is_empty()) {
        planned += 1;
        let mut paths: HashMap<(NodeId, NodeId), Option<usize>> = HashMap::new();
        let mut chosen: Vec<Vec<NodeId>> = Vec::new();
        for &t in round {
            let transfer = schedule.transfer(t);
            let path = *paths
                .entry((transfer.src, transfer.dst))
                .or_insert_with(|| {
                    planner.place(transfer.src, transfer.dst).map(|p| {
                        chosen.push(p);
                        chosen.len() - 1
                    })
                });
            if let Some(p) = path {
                routes.push((t, chosen[p].clone()));
            }
        }
        planner.clear_loads();
    }
    routes.sort_unstable_by_key(|(t, _)| *t);
    schedule.add_routes(&routes);
    PinnedPaths {
        routed: routes.len(),
        rounds: planned,
    }
}

/// Longest chain of dependencies before each transfer (0 for those that wait for nothing).
fn depths(schedule: &Schedule) -> Vec<u32> {
    let n = schedule.len();
    let mut depth = vec![0u32; n];
    if schedule.deps_point_backwards() {
        for t in 0..n {
            depth[t] = schedule
                .deps(t as TransferIndex)
                .iter()
                .map(|&d| depth[d as usize] + 1)
                .max()
                .unwrap_or(0);
        }
        return depth;
    }
    // Dependencies in any order (files): Kahn's order over the dependents.
    let (start, list) = schedule.dependents();
    let mut waiting: Vec<u32> = (0..n)
        .map(|t| schedule.deps(t as TransferIndex).len() as u32)
        .collect();
    let mut ready: Vec<usize> = (0..n).filter(|&t| waiting[t] == 0).collect();
    while let Some(t) = ready.pop() {
        for &next in &list[start[t] as usize..start[t + 1] as usize] {
            let next = next as usize;
            depth[next] = depth[next].max(depth[t] + 1);
            waiting[next] -= 1;
            if waiting[next] == 0 {
                ready.push(next);
            }
        }
    }
    depth
}

/// Link loads of the current round and the shortest-path choices per destination.
struct Planner<'t> {
    topology: &'t Topology,
    choices: HashMap<NodeId, Choices>,
    load: Vec<u32>,
    touched: Vec<LinkId>,
    /// The source whose connection first took each link (`NodeId::MAX`: none yet).
    owner: Vec<NodeId>,
    /// Per node, the best cost to the destination and the link taking it, valid where `seen`
    /// holds the current search's stamp.
    best: Vec<(Cost, LinkId)>,
    seen: Vec<u32>,
    stamp: u32,
}

impl<'t> Planner<'t> {
    fn new(topology: &'t Topology) -> Planner<'t> {
        let nodes = topology.nodes() as usize;
        Planner {
            topology,
            choices: HashMap::new(),
            load: vec![0; topology.links().len()],
            touched: Vec::new(),
            owner: vec![NodeId::MAX; topology.links().len()],
            best: vec![((0, 0, 0), LinkId::MAX); nodes],
            seen: vec![0; nodes],
            stamp: 0,
        }
    }

    /// Places one connection on its least loaded shortest path and returns the path, or None
    /// when it has only one.
    fn place(&mut self, src: NodeId, dst: NodeId) -> Option<Vec<NodeId>> {
        let topology = self.topology;
        let choices = self
            .choices
            .entry(dst)
            .or_insert_with(|| equal_cost_choices(topology, dst));
        self.stamp += 1;
        let mut search = Search {
            src,
            dst,
            choices,
            topology,
            load: &self.load,
            owner: &self.owner,
            best: &mut self.best,
            seen: &mut self.seen,
            stamp: self.stamp,
            branches: false,
        };
        search.from(src);
        let branches = search.branches;
        if !branches {
            return None;
        }
        let mut path = vec![src];
        let mut at = src;
        while at != dst {
            let link = self.best[at as usize].1;
            if self.load[link as usize] == 0 {
                self.touched.push(link);
            }
            self.load[link as usize] += 1;
            if self.owner[link as usize] == NodeId::MAX {
                self.owner[link as usize] = src;
            }
            at = topology.link(link).dst;
            path.push(at);
        }
        Some(path)
    }

    fn clear_loads(&mut self) {
        for l in self.touched.drain(..) {
            self.load[l as usize] = 0;
        }
    }
}

/// A path's cost after adding one more connection: its most loaded link, its summed load, and
/// how many of its links an earlier connection from another source took.
type Cost = (u32, u64, u32);

/// One connection's search over the shortest paths from its source.
struct Search<'a> {
    src: NodeId,
    dst: NodeId,
    choices: &'a Choices,
    topology: &'a Topology,
    load: &'a [u32],
    owner: &'a [NodeId],
    best: &'a mut [(Cost, LinkId)],
    seen: &'a mut [u32],
    stamp: u32,
    /// Some node on the way had more than one shortest next link.
    branches: bool,
}

impl Search<'_> {
    /// The lowest cost from `at` to the destination, filling `best` on the way.
    fn from(&mut self, at: NodeId) -> Cost {
        if at == self.dst {
            return (0, 0, 0);
        }
        if self.seen[at as usize] == self.stamp {
            return self.best[at as usize].0;
        }
        let links = self.choices.at(at);
        self.branches |= links.len() > 1;
        let mut found = ((u32::MAX, u64::MAX, u32::MAX), LinkId::MAX);
        for &l in links {
            let (peak, total, foreign) = self.from(self.topology.link(l).dst);
            let here = self.load[l as usize] + 1;
            let owner = self.owner[l as usize];
            let taken = (owner != NodeId::MAX && owner != self.src) as u32;
            let cost = (peak.max(here), total + here as u64, foreign + taken);
            if cost < found.0 {
                found = (cost, l);
            }
        }
        self.seen[at as usize] = self.stamp;
        self.best[at as usize] = found;
        found.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Transfer;
    use crate::topology::TopologyOptions;

    /// Four hosts of one leaf send to the four of another at once over four spines: each takes
    /// its own spine, where fixed routes would put all four on one.
    #[test]
    fn a_rounds_connections_take_distinct_spines() {
        let t = TopologyOptions::new("spineleaf:2x4x4").build().unwrap();
        let mut s = Schedule::new();
        for h in 0..4 {
            s.push(
                Transfer {
                    src: h,
                    dst: 4 + h,
                    bytes: 1,
                },
                &[],
            );
        }
        let done = pin_paths(&mut s, &t);
        assert_eq!(
            done,
            PinnedPaths {
                routed: 4,
                rounds: 1
            }
        );
        let mut spines: Vec<NodeId> = (0..4).map(|i| s.route(i).unwrap()[2]).collect();
        spines.sort_unstable();
        assert_eq!(spines, vec![10, 11, 12, 13]);
        s.check(&t).unwrap();
    }

    /// A source keeps its spine from round to round; another source's later connection avoids
    /// it although that round has no other load.
    #[test]
    fn sources_keep_their_paths_across_rounds() {
        let t = TopologyOptions::new("spineleaf:2x4x4").build().unwrap();
        let mut s = Schedule::new();
        let first = s.push(
            Transfer {
                src: 0,
                dst: 4,
                bytes: 1,
            },
            &[],
        );
        s.push(
            Transfer {
                src: 0,
                dst: 5,
                bytes: 1,
            },
            &[first],
        );
        let other = s.push(
            Transfer {
                src: 1,
                dst: 6,
                bytes: 1,
            },
            &[first],
        );
        s.push(
            Transfer {
                src: 1,
                dst: 7,
                bytes: 1,
            },
            &[other],
        );
        assert_eq!(pin_paths(&mut s, &t).rounds, 3);
        let spine = |i: TransferIndex| s.route(i).unwrap()[2];
        assert_eq!(spine(0), spine(1));
        assert_ne!(spine(0), spine(2));
        assert_eq!(spine(2), spine(3));
    }
}
