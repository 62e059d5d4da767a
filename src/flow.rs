//! Exact integer maximum flow (Dinic's algorithm) on a graph that grows and changes between runs.
//!
//! The exact cut bound, ForestColl's edge splitting and its spanning-tree packing each ask tens of
//! thousands of max-flow questions of one slowly changing network, between node *sets* and often
//! only up to a limit ("can it carry at least L?"). A library max-flow (petgraph's `dinics`)
//! answers one question per freshly built graph with one source and one sink; here the network is
//! built once, capacities are changed in place, arcs are appended, a run may start from flow the
//! caller already knows, and every run reuses the same work arrays, resets only what the last one
//! touched, and stops as soon as the limit is reached. Capacities are `i64`; [`INFINITE`] stands
//! for an uncuttable arc.

/// A capacity or flow value.
pub type Cap = i64;

/// Capacity of an arc no minimum cut may cross. Sums of a few thousand of these still fit.
pub const INFINITE: Cap = 1 << 52;

/// Index of a forward arc; its reverse (residual) twin is `arc ^ 1`.
pub type ArcId = u32;

/// A directed network with integer capacities and reusable max-flow state.
#[derive(Clone, Debug, Default)]
pub struct FlowNetwork {
    /// Out-arcs (forward and reverse twins) of each node.
    adjacency: Vec<Vec<ArcId>>,
    head: Vec<u32>,
    capacity: Vec<Cap>,
    /// Residual capacities of the last run; equal to `capacity` except on the arcs in `dirty`.
    residual: Vec<Cap>,
    /// Arcs whose residual may differ from their capacity (flow sent, or capacity changed).
    dirty: Vec<ArcId>,
    level: Vec<u32>,
    next_arc: Vec<u32>,
    queue: Vec<u32>,
    is_sink: Vec<bool>,
    stack: Vec<(u32, ArcId)>,
    sink_level: u32,
}

const UNSEEN: u32 = u32::MAX;

impl FlowNetwork {
    /// A network of `nodes` nodes and no arcs.
    pub fn new(nodes: usize) -> FlowNetwork {
        let mut net = FlowNetwork::default();
        for _ in 0..nodes {
            net.add_node();
        }
        net
    }

    pub fn nodes(&self) -> usize {
        self.adjacency.len()
    }

    /// Appends a node and returns its index.
    pub fn add_node(&mut self) -> u32 {
        self.adjacency.push(Vec::new());
        self.level.push(UNSEEN);
        self.next_arc.push(0);
        self.is_sink.push(false);
        (self.adjacency.len() - 1) as u32
    }

    /// Appends the arc `from -> to` and returns its id.
    pub fn add_arc(&mut self, from: u32, to: u32, capacity: Cap) -> ArcId {
        let arc = self.head.len() as ArcId;
        self.head.push(to);
        self.capacity.push(capacity);
        self.head.push(from);
        self.capacity.push(0);
        self.residual.push(capacity);
        self.residual.push(0);
        self.adjacency[from as usize].push(arc);
        self.adjacency[to as usize].push(arc ^ 1);
        arc
    }

    pub fn set_capacity(&mut self, arc: ArcId, capacity: Cap) {
        self.capacity[arc as usize] = capacity;
        self.dirty.push(arc);
    }

    pub fn capacity(&self, arc: ArcId) -> Cap {
        self.capacity[arc as usize]
    }

    /// Far end of an arc.
    pub fn head(&self, arc: ArcId) -> u32 {
        self.head[arc as usize]
    }

    /// Flow the last run sent over a forward arc.
    pub fn flow(&self, arc: ArcId) -> Cap {
        self.residual[arc as usize ^ 1]
    }

    /// Forward arcs entering `node`.
    pub fn in_arcs(&self, node: u32) -> impl Iterator<Item = ArcId> + '_ {
        self.adjacency[node as usize]
            .iter()
            .filter(|a| *a & 1 == 1)
            .map(|a| a ^ 1)
    }

    /// Tail of an arc.
    pub fn tail(&self, arc: ArcId) -> u32 {
        self.head[arc as usize ^ 1]
    }

    /// Forward arcs leaving `node`.
    pub fn out_arcs(&self, node: u32) -> impl Iterator<Item = ArcId> + '_ {
        self.adjacency[node as usize]
            .iter()
            .copied()
            .filter(|a| a & 1 == 0)
    }

    /// The maximum flow from the node set `sources` to the disjoint set `sinks`, or the first value
    /// found that reaches `limit`. The flow stays in the network for [`FlowNetwork::flow`] and
    /// [`FlowNetwork::source_side`].
    pub fn max_flow(&mut self, sources: &[u32], sinks: &[u32], limit: Cap) -> Cap {
        self.clear_flow();
        self.augment(sources, sinks, limit, 0)
    }

    /// Removes all flow (residuals back to capacities), before [`FlowNetwork::push`].
    pub fn clear_flow(&mut self) {
        // Only the arcs the last run touched (or whose capacity changed) need resetting.
        for arc in self.dirty.drain(..) {
            let a = (arc & !1) as usize;
            self.residual[a] = self.capacity[a];
            self.residual[a + 1] = self.capacity[a + 1];
        }
    }

    /// Sends `amount` over one arc (a caller who knows part of the flow already, e.g. along
    /// one-arc shortcuts, pushes it before [`FlowNetwork::augment`]).
    pub fn push(&mut self, arc: ArcId, amount: Cap) {
        self.residual[arc as usize] -= amount;
        self.residual[arc as usize ^ 1] += amount;
        self.dirty.push(arc);
    }

    /// Continues from the current flow of value `already`: augments from `sources` to `sinks`
    /// until the value reaches `limit` or is maximal, and returns it.
    pub fn augment(&mut self, sources: &[u32], sinks: &[u32], limit: Cap, already: Cap) -> Cap {
        for &t in sinks {
            self.is_sink[t as usize] = true;
        }
        let mut total: Cap = already;
        while total < limit && self.build_levels(sources) {
            self.next_arc.fill(0);
            for &s in sources {
                loop {
                    let pushed = self.augment_path(s, limit - total);
                    if pushed == 0 {
                        break;
                    }
                    total += pushed;
                    if total >= limit {
                        break;
                    }
                }
                if total >= limit {
                    break;
                }
            }
        }
        for &t in sinks {
            self.is_sink[t as usize] = false;
        }
        total
    }

    /// Levels by breadth-first search over residual arcs from `sources`, up to the first level
    /// that holds a sink (shortest augmenting paths go no further); true if a sink is reached.
    fn build_levels(&mut self, sources: &[u32]) -> bool {
        self.level.fill(UNSEEN);
        self.queue.clear();
        for &s in sources {
            self.level[s as usize] = 0;
            self.queue.push(s);
        }
        let mut found = false;
        let mut i = 0;
        while i < self.queue.len() {
            let v = self.queue[i];
            i += 1;
            let next = self.level[v as usize] + 1;
            if found && self.level[v as usize] + 1 > self.sink_level {
                break;
            }
            for &arc in &self.adjacency[v as usize] {
                let w = self.head[arc as usize];
                if self.residual[arc as usize] > 0 && self.level[w as usize] == UNSEEN {
                    self.level[w as usize] = next;
                    if self.is_sink[w as usize] {
                        if !found {
                            self.sink_level = next;
                        }
                        found = true;
                    } else {
                        self.queue.push(w);
                    }
                }
            }
        }
        found
    }

    /// One augmenting path in the level graph from `source`, carrying at most `limit`; returns
    /// what it carried (0 when the source is blocked). Iterative, so deep level graphs are fine.
    fn augment_path(&mut self, source: u32, limit: Cap) -> Cap {
        self.stack.clear();
        let mut v = source;
        loop {
            if self.is_sink[v as usize] {
                let mut pushed = limit;
                for &(_, arc) in &self.stack {
                    pushed = pushed.min(self.residual[arc as usize]);
                }
                for &(_, arc) in &self.stack {
                    self.residual[arc as usize] -= pushed;
                    self.residual[arc as usize ^ 1] += pushed;
                    self.dirty.push(arc);
                }
                return pushed;
            }
            let arcs = &self.adjacency[v as usize];
            let mut advanced = false;
            while (self.next_arc[v as usize] as usize) < arcs.len() {
                let arc = arcs[self.next_arc[v as usize] as usize];
                let w = self.head[arc as usize];
                if self.residual[arc as usize] > 0
                    && self.level[w as usize] == self.level[v as usize] + 1
                {
                    self.stack.push((v, arc));
                    v = w;
                    advanced = true;
                    break;
                }
                self.next_arc[v as usize] += 1;
            }
            if !advanced {
                // Dead end: retire the node from this phase and step back.
                self.level[v as usize] = UNSEEN;
                match self.stack.pop() {
                    Some((prev, _)) => {
                        v = prev;
                        self.next_arc[v as usize] += 1;
                    }
                    None => return 0,
                }
            }
        }
    }

    /// After a run that stopped below its limit: the nodes that reach `sinks` over residual arcs,
    /// the sink side of the minimum cut closest to the sinks.
    pub fn sink_side(&mut self, sinks: &[u32]) -> Vec<bool> {
        self.residual_reach(sinks, true)
    }

    /// After a run that stopped below its limit: the nodes reachable from `sources` over residual
    /// arcs, the source side of the minimum cut closest to the sources.
    pub fn source_side(&mut self, sources: &[u32]) -> Vec<bool> {
        self.residual_reach(sources, false)
    }

    /// The nodes reachable from `start` over residual arcs, or (`backwards`) that reach it.
    fn residual_reach(&mut self, start: &[u32], backwards: bool) -> Vec<bool> {
        let mut seen = vec![false; self.adjacency.len()];
        self.queue.clear();
        for &s in start {
            seen[s as usize] = true;
            self.queue.push(s);
        }
        let mut i = 0;
        while i < self.queue.len() {
            let v = self.queue[i];
            i += 1;
            for &arc in &self.adjacency[v as usize] {
                let w = self.head[arc as usize] as usize;
                // Backwards, `w` reaches `v` over the arc paired with `v -> w`.
                let residual = self.residual[arc as usize ^ usize::from(backwards)];
                if residual > 0 && !seen[w] {
                    seen[w] = true;
                    self.queue.push(w as u32);
                }
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classic CLRS network: max flow 23.
    #[test]
    fn finds_the_textbook_maximum_and_its_cut() {
        let mut net = FlowNetwork::new(6);
        for (a, b, c) in [
            (0, 1, 16),
            (0, 2, 13),
            (1, 3, 12),
            (2, 1, 4),
            (2, 4, 14),
            (3, 2, 9),
            (3, 5, 20),
            (4, 3, 7),
            (4, 5, 4),
        ] {
            net.add_arc(a, b, c);
        }
        assert_eq!(net.max_flow(&[0], &[5], INFINITE), 23);
        let side = net.source_side(&[0]);
        // The minimum cut {0,1,2,4} | {3,5}: 12 + 7 + 4 = 23.
        assert_eq!(side, vec![true, true, true, false, true, false]);
        // The same cut is the one closest to the sink: nothing else reaches {3, 5}.
        let sink = net.sink_side(&[5]);
        assert_eq!(sink, vec![false, false, false, true, false, true]);
        // Limits stop early; capacities can change in place.
        assert!(net.max_flow(&[0], &[5], 10) >= 10);
        net.set_capacity(0, 0);
        // Without 0 -> 1 everything enters through 0 -> 2 (13), and all of it gets through.
        assert_eq!(net.max_flow(&[0], &[5], INFINITE), 13);
    }

    #[test]
    fn node_sets_act_as_merged_sources_and_sinks() {
        // Two sources feeding two sinks through one shared arc of 5 and private arcs of 1.
        let mut net = FlowNetwork::new(6);
        net.add_arc(0, 2, 10);
        net.add_arc(1, 2, 10);
        net.add_arc(2, 3, 5);
        net.add_arc(3, 4, 10);
        net.add_arc(3, 5, 10);
        net.add_arc(0, 4, 1);
        net.add_arc(1, 5, 1);
        assert_eq!(net.max_flow(&[0, 1], &[4, 5], INFINITE), 7);
        assert_eq!(net.max_flow(&[0], &[5], INFINITE), 5);
    }

    /// Max-flow equals min-cut on random networks, checked by enumerating every cut.
    #[test]
    fn agrees_with_brute_force_minimum_cuts() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..200 {
            let n = rng.random_range(2..8usize);
            let mut net = FlowNetwork::new(n);
            let mut arcs = Vec::new();
            for a in 0..n {
                for b in 0..n {
                    if a != b && rng.random_bool(0.4) {
                        let c = rng.random_range(0..20);
                        net.add_arc(a as u32, b as u32, c);
                        arcs.push((a, b, c));
                    }
                }
            }
            let flow = net.max_flow(&[0], &[n as u32 - 1], INFINITE);
            let mut best = Cap::MAX;
            for mask in 0..(1u32 << n) {
                if mask & 1 == 0 || mask & (1 << (n - 1)) != 0 {
                    continue;
                }
                let cut: Cap = arcs
                    .iter()
                    .filter(|(a, b, _)| mask & (1 << a) != 0 && mask & (1 << b) == 0)
                    .map(|&(_, _, c)| c)
                    .sum();
                best = best.min(cut);
            }
            assert_eq!(flow, best);
        }
    }
}
