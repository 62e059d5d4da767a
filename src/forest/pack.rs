//! Packing spanning out-trees on the participants-only network (ForestColl §2.3).
//!
//! Trees are grown in classes of identical trees (Bérczi and Frank's strongly polynomial method):
//! a class of `m` trees rooted at `r` with node set `V` may take an arc `x -> y` (`x` in `V`, `y`
//! not) for `a` of its trees only while the remaining classes can still be completed. By Theorem
//! 12 the largest such `a` is `min(m, c(x, y), F - Σ m_i)`, where `F` is the maximum flow from `x`
//! to `y` in the network plus a node per other unfinished class `i`, fed from `x` with `m_i` and
//! feeding every node of that class's tree without limit. When `a < m` the class splits in two
//! and the rest continues later without the arc. Classes grow breadth-first from their node sets,
//! which keeps trees shallow. The largest `a` never grows (every addition only shrinks the spare
//! in-capacity of node sets, and a growing tree meets more sets), so an arc refused to a class is
//! refused to the rest split off from it later too, and is not tested again.
//!
//! `F - Σ m_i` is the least spare in-capacity (less the trees of other classes still missing it)
//! over node sets holding `y` but not `x`, and most tests are settled without a flow: an arc
//! whose x-to-y connectivity (direct and two-arc paths) covers every class still missing `y`
//! is granted whole; a set found tight (the minimum cut of a refusing flow) refuses, while only
//! its class grows, every arc entering it; and a pool of the smallest tight sets found so far is
//! evaluated exactly for each later class. A first run also trusts the pool when its sets all
//! leave room; where that strands a class, the packing starts over with every arc tested
//! (1024 GPUs in 128 A100 boxes: 17 s of packing; 67 s when a flow still tests every arc the
//! pool allows).

use std::collections::{HashSet, VecDeque};

use crate::flow::{ArcId, Cap, FlowNetwork, INFINITE};
use crate::Error;

/// A class of identical spanning trees: `weight` trees rooted at `root`, with their arcs in the
/// order they were added (every arc's tail is the root or the head of an earlier arc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeClass {
    pub root: u32,
    pub weight: u64,
    pub edges: Vec<(u32, u32)>,
}

struct Growing {
    class: TreeClass,
    members: Vec<u32>,
    in_tree: Vec<bool>,
    /// Arcs `(x, y)` this class (or the class it split from) was refused.
    refused: HashSet<(u32, u32)>,
    /// Node sets (bitsets) found with no spare in-capacity for this class: while only this
    /// class grows, every arc into one of them from outside is refused without a flow.
    tight: Vec<Vec<u64>>,
    done: bool,
    /// This class's node in the current flow network, the arc that feeds it, and per node the
    /// arc from it into that node (`NONE` outside the tree).
    node: u32,
    feed: ArcId,
    into: Vec<ArcId>,
}

const NONE: ArcId = ArcId::MAX;

/// Tight sets a class remembers at most (each a bitset over the nodes).
const MAX_TIGHT_SETS: usize = 1024;
/// Tight sets the pool keeps at most.
const MAX_POOL_SETS: usize = 1 << 16;

/// Packs, for every `(root, k)`, `k` spanning out-trees rooted there over `n` nodes, each arc
/// `(tail, head, capacity)` used by at most `capacity` trees. The network must have the
/// connectivity the trees need (`sum k` from a super source feeding every root its `k`).
pub fn pack(
    n: usize,
    arcs: &[(u32, u32, u64)],
    roots: &[(u32, u64)],
) -> Result<Vec<TreeClass>, Error> {
    // Trusting the learned tight sets is exact whenever it completes; when some class cannot
    // span, an arc it trusted broke the condition, and the packing starts over with every
    // arc tested.
    pack_trusting(n, arcs, roots, true).or_else(|_| pack_trusting(n, arcs, roots, false))
}

/// [`pack`], where `trust_pool` lets an arc be taken without a flow when the pool's sets around
/// its head, the only sets known to have become tight, all leave room for it.
pub(crate) fn pack_trusting(
    n: usize,
    arcs: &[(u32, u32, u64)],
    roots: &[(u32, u64)],
    trust_pool: bool,
) -> Result<Vec<TreeClass>, Error> {
    let mut out: Vec<Vec<(u32, usize)>> = vec![Vec::new(); n];
    let mut in_arcs: Vec<Vec<(u32, usize)>> = vec![Vec::new(); n];
    for (i, &(a, b, _)) in arcs.iter().enumerate() {
        out[a as usize].push((b, i));
        in_arcs[b as usize].push((a, i));
    }
    for list in &mut out {
        list.sort_unstable();
    }
    let mut packer = Packer {
        n,
        in_arcs,
        holding: vec![0; n],
        to_head: vec![0; n],
        trust_pool,
        pool: Vec::new(),
        pool_of: vec![Vec::new(); n],
        left: arcs.iter().map(|a| a.2 as Cap).collect(),
        tails_heads: arcs.iter().map(|a| (a.0, a.1)).collect(),
        out,
        classes: Vec::new(),
        unfinished: 0,
        net: FlowNetwork::default(),
        hub: n as u32,
        entry: Vec::new(),
        arc_id: Vec::new(),
    };
    let mut queue = VecDeque::new();
    for &(root, k) in roots {
        if k == 0 {
            continue;
        }
        let mut in_tree = vec![false; n];
        in_tree[root as usize] = true;
        queue.push_back(packer.classes.len());
        packer.classes.push(Growing {
            class: TreeClass {
                root,
                weight: k,
                edges: Vec::new(),
            },
            members: vec![root],
            in_tree,
            refused: HashSet::new(),
            tight: Vec::new(),
            done: false,
            node: 0,
            feed: 0,
            into: Vec::new(),
        });
        packer.unfinished += k as Cap;
        packer.holding[root as usize] += k as Cap;
    }
    packer.rebuild();
    while let Some(j) = queue.pop_front() {
        packer.grow(j, &mut queue)?;
    }
    let mut classes: Vec<TreeClass> = packer.classes.into_iter().map(|g| g.class).collect();
    classes.sort_by_key(|c| c.root);
    Ok(classes)
}

/// The packing state and the flow network of the Theorem 12 test: the arcs with what is left of
/// their capacity, a hub, and a node per unfinished class fed from the hub with the class's
/// weight and feeding its tree's nodes without limit. Finished classes leave the network (it is
/// rebuilt when one finishes), so that tests only scan what can still carry flow.
struct Packer {
    n: usize,
    /// Capacity left on each arc, and its ends.
    left: Vec<Cap>,
    tails_heads: Vec<(u32, u32)>,
    /// Per node, its out-arcs `(head, arc)` by head.
    out: Vec<Vec<(u32, usize)>>,
    classes: Vec<Growing>,
    /// Trees in classes not yet spanning.
    unfinished: Cap,
    net: FlowNetwork,
    hub: u32,
    /// Per node, the hub's arc into it: opened without limit for the node being tested.
    entry: Vec<ArcId>,
    /// Flow-network id of each arc.
    arc_id: Vec<ArcId>,
    /// Per node, its in-arcs `(tail, arc)`.
    in_arcs: Vec<Vec<(u32, usize)>>,
    /// Per node, the total weight of the unfinished classes whose trees hold it.
    holding: Vec<Cap>,
    /// Scratch: per node, the capacity left on its arc into the current test's head.
    to_head: Vec<Cap>,
    /// Node sets some class found tight, smallest sides: a set that one class could not enter
    /// often stops the next ones too (a box behind its NICs), which one evaluation tells.
    pool: Vec<Vec<u32>>,
    /// Per node, the pool sets that hold it.
    pool_of: Vec<Vec<u32>>,
    /// Take an arc without a flow when the pool sets around its head leave room for it.
    trust_pool: bool,
}

/// What the pool says of an arc for a class.
enum PoolVerdict {
    /// A set holding the head but not the tail has no spare in-capacity (as a bitset).
    Tight(Vec<u64>),
    /// Every pool set holding the head but not the tail has room for the class's trees.
    Roomy,
    /// The pool holds no set around the head.
    Unknown,
}

impl Packer {
    /// A fresh flow network of the arcs' remaining capacities and the unfinished classes.
    fn rebuild(&mut self) {
        let mut net = FlowNetwork::new(self.n + 1);
        self.arc_id = self
            .tails_heads
            .iter()
            .zip(&self.left)
            .map(|(&(a, b), &c)| net.add_arc(a, b, c))
            .collect();
        self.entry = (0..self.n as u32)
            .map(|v| net.add_arc(self.hub, v, 0))
            .collect();
        self.net = net;
        for j in 0..self.classes.len() {
            if self.classes[j].done {
                self.classes[j].into = Vec::new();
            } else {
                self.attach(j);
            }
        }
    }

    /// Gives class `j` its node and arcs in the current network.
    fn attach(&mut self, j: usize) {
        let node = self.net.add_node();
        let g = &mut self.classes[j];
        g.node = node;
        g.feed = self.net.add_arc(self.hub, node, g.class.weight as Cap);
        g.into = vec![NONE; self.n];
        for &m in &g.members {
            g.into[m as usize] = self.net.add_arc(node, m, INFINITE);
        }
    }

    /// Grows class `j` breadth-first until it spans every node, splitting off what cannot follow.
    fn grow(&mut self, j: usize, queue: &mut VecDeque<usize>) -> Result<(), Error> {
        let mut next = 0;
        while next < self.classes[j].members.len() {
            let x = self.classes[j].members[next];
            next += 1;
            for i in 0..self.out[x as usize].len() {
                let (y, arc) = self.out[x as usize][i];
                let g = &self.classes[j];
                if g.in_tree[y as usize] || self.left[arc] == 0 || g.refused.contains(&(x, y)) {
                    continue;
                }
                if g.tight.iter().any(|set| holds(set, y) && !holds(set, x)) {
                    self.classes[j].refused.insert((x, y));
                    continue;
                }
                let taken = self.most_trees(j, x, y, arc);
                if taken == 0 {
                    self.classes[j].refused.insert((x, y));
                    continue;
                }
                let weight = self.classes[j].class.weight;
                if taken < weight {
                    // The rest of the class continues later, from the tree as it is now.
                    let g = &self.classes[j];
                    let rest = Growing {
                        class: TreeClass {
                            weight: weight - taken,
                            ..g.class.clone()
                        },
                        members: g.members.clone(),
                        in_tree: g.in_tree.clone(),
                        refused: g.refused.clone(),
                        tight: Vec::new(),
                        done: false,
                        node: 0,
                        feed: 0,
                        into: Vec::new(),
                    };
                    self.classes.push(rest);
                    let id = self.classes.len() - 1;
                    self.attach(id);
                    queue.push_back(id);
                    self.classes[j].class.weight = taken;
                    self.classes[j].tight.clear();
                    self.net.set_capacity(self.classes[j].feed, taken as Cap);
                }
                let node = self.classes[j].node;
                let into = self.net.add_arc(node, y, INFINITE);
                self.holding[y as usize] += taken as Cap;
                let g = &mut self.classes[j];
                g.class.edges.push((x, y));
                g.members.push(y);
                g.in_tree[y as usize] = true;
                g.into[y as usize] = into;
                self.left[arc] -= taken as Cap;
                self.net.set_capacity(self.arc_id[arc], self.left[arc]);
            }
        }
        let g = &mut self.classes[j];
        if g.members.len() != self.n {
            return Err(Error::input(format!(
                "internal: a tree from node {} could reach only {} of {} nodes",
                g.class.root,
                g.members.len(),
                self.n
            )));
        }
        g.done = true;
        g.refused = HashSet::new();
        g.tight = Vec::new();
        self.unfinished -= g.class.weight as Cap;
        for &m in &g.members {
            self.holding[m as usize] -= g.class.weight as Cap;
        }
        self.rebuild();
        Ok(())
    }

    /// How many of class `j`'s trees may take arc `arc`, `x -> y` (Theorem 12).
    fn most_trees(&mut self, j: usize, x: u32, y: u32, arc: usize) -> u64 {
        let weight = self.classes[j].class.weight as Cap;
        let most = weight.min(self.left[arc]);
        let others = self.unfinished - weight;
        // `F - others` is the least, over node sets X holding y but not x, of X's spare
        // in-capacity less the trees of other classes that have no node in X yet. Any X
        // holding y has at least the x-to-y connectivity coming in, and misses at most the
        // classes whose trees do not hold y: when that already leaves `most`, no flow is needed.
        let missing = others
            - (self.holding[y as usize]
                - if self.classes[j].in_tree[y as usize] {
                    weight
                } else {
                    0
                });
        if self.two_hop_connectivity(x, y, arc) - missing >= most {
            return most as u64;
        }
        match self.pool_verdict(j, x, y, most) {
            PoolVerdict::Tight(set) => {
                self.classes[j].tight.push(set);
                return 0;
            }
            PoolVerdict::Roomy if self.trust_pool => return most as u64,
            _ => {}
        }
        let feed = self.classes[j].feed;
        self.net.set_capacity(feed, 0);
        self.net.set_capacity(self.entry[x as usize], INFINITE);
        // Classes whose trees already reach y send their trees there directly: push that part of
        // the flow first, so that the search only routes the classes still to reach y.
        self.net.clear_flow();
        let mut direct: Cap = 0;
        for (i, g) in self.classes.iter().enumerate() {
            if i == j || g.done || g.into[y as usize] == NONE {
                continue;
            }
            let w = g.class.weight as Cap;
            self.net.push(g.feed, w);
            self.net.push(g.into[y as usize], w);
            direct += w;
        }
        let flow = self.net.augment(&[self.hub], &[y], others + most, direct);
        if flow <= others {
            // The minimum cut's largest receiving side is a set this class cannot enter any
            // more; its smallest one goes to the pool for the classes that follow.
            if self.classes[j].tight.len() < MAX_TIGHT_SETS {
                let side = self.net.source_side(&[self.hub]);
                let set = bitset(self.n, (0..self.n as u32).filter(|&v| !side[v as usize]));
                self.classes[j].tight.push(set);
            }
            if self.pool.len() < MAX_POOL_SETS {
                let side = self.net.sink_side(&[y]);
                let nodes: Vec<u32> = (0..self.n as u32).filter(|&v| side[v as usize]).collect();
                let pooled = self.pool_of[y as usize]
                    .iter()
                    .any(|&p| self.pool[p as usize] == nodes);
                if !pooled {
                    for &v in &nodes {
                        self.pool_of[v as usize].push(self.pool.len() as u32);
                    }
                    self.pool.push(nodes);
                }
            }
        }
        self.net.set_capacity(self.entry[x as usize], 0);
        self.net.set_capacity(feed, weight);
        (flow - others).clamp(0, most) as u64
    }
}

/// The bitset over `n` nodes of `nodes`.
fn bitset(n: usize, nodes: impl IntoIterator<Item = u32>) -> Vec<u64> {
    let mut set = vec![0u64; n.div_ceil(64)];
    for v in nodes {
        set[v as usize / 64] |= 1 << (v % 64);
    }
    set
}

/// Whether bitset `set` holds node `v`.
fn holds(set: &[u64], v: u32) -> bool {
    set[v as usize / 64] >> (v % 64) & 1 == 1
}

impl Packer {
    /// Evaluates the pool sets holding `y` but not `x` (the first few) for class `j` now: one
    /// without spare in-capacity means Theorem 12 allows the arc nothing.
    fn pool_verdict(&mut self, j: usize, x: u32, y: u32, most: Cap) -> PoolVerdict {
        const EVALUATIONS: usize = 8;
        let candidates: Vec<u32> = self.pool_of[y as usize]
            .iter()
            .copied()
            .filter(|&p| !self.pool[p as usize].contains(&x))
            .take(EVALUATIONS)
            .collect();
        let mut roomy = !candidates.is_empty();
        for p in candidates {
            let set = bitset(self.n, self.pool[p as usize].iter().copied());
            let spare = self.spare(j, &self.pool[p as usize], &set);
            if spare <= 0 {
                return PoolVerdict::Tight(set);
            }
            roomy &= spare >= most;
        }
        if roomy {
            PoolVerdict::Roomy
        } else {
            PoolVerdict::Unknown
        }
    }

    /// A node set's spare in-capacity for class `j`: what is left on the arcs entering it, less
    /// the trees of the other unfinished classes that have no node in it yet.
    fn spare(&self, j: usize, nodes: &[u32], set: &[u64]) -> Cap {
        let entering: Cap = nodes
            .iter()
            .flat_map(|&v| &self.in_arcs[v as usize])
            .filter(|&&(z, _)| !holds(set, z))
            .map(|&(_, a)| self.left[a])
            .sum();
        let missing: Cap = self
            .classes
            .iter()
            .enumerate()
            .filter(|&(i, g)| i != j && !g.done && !g.members.iter().any(|&m| holds(set, m)))
            .map(|(_, g)| g.class.weight as Cap)
            .sum();
        entering - missing
    }

    /// A lower bound on the x-to-y connectivity left: the arc itself and the two-arc paths
    /// through every other node, which share no arc.
    fn two_hop_connectivity(&mut self, x: u32, y: u32, arc: usize) -> Cap {
        for &(z, a) in &self.in_arcs[y as usize] {
            self.to_head[z as usize] = self.left[a];
        }
        let mut total = self.left[arc];
        for &(z, a) in &self.out[x as usize] {
            if z != y {
                total += self.left[a].min(self.to_head[z as usize]);
            }
        }
        for &(z, _) in &self.in_arcs[y as usize] {
            self.to_head[z as usize] = 0;
        }
        total
    }
}

/// Checks that every class is a spanning out-tree of its root and that no arc carries more trees
/// than its capacity; the error says what is wrong.
pub fn verify(n: usize, arcs: &[(u32, u32, u64)], classes: &[TreeClass]) -> Result<(), String> {
    let mut load: std::collections::HashMap<(u32, u32), u64> = Default::default();
    for c in classes {
        let mut reached = vec![false; n];
        reached[c.root as usize] = true;
        for &(x, y) in &c.edges {
            if !reached[x as usize] || reached[y as usize] {
                return Err(format!(
                    "tree from {}: arc {x} -> {y} does not extend the tree",
                    c.root
                ));
            }
            reached[y as usize] = true;
            *load.entry((x, y)).or_default() += c.weight;
        }
        if reached.iter().any(|r| !r) {
            return Err(format!("tree from {} does not span every node", c.root));
        }
    }
    for (&(x, y), &l) in &load {
        let cap = arcs
            .iter()
            .find(|a| a.0 == x && a.1 == y)
            .map_or(0, |a| a.2);
        if l > cap {
            return Err(format!(
                "arc {x} -> {y} carries {l} trees over capacity {cap}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bidirectional ring of 4, capacity 3 per arc, 2 trees per root: 4 x 2 trees of 3 arcs use
    /// all 24 units, and every single node's in-capacity (6) is exactly what the 3 other roots'
    /// 2 trees need, so the packing is tight everywhere.
    #[test]
    fn packs_two_trees_per_root_on_a_tight_ring() {
        let mut arcs = Vec::new();
        for v in 0..4u32 {
            arcs.push((v, (v + 1) % 4, 3));
            arcs.push(((v + 1) % 4, v, 3));
        }
        let roots: Vec<(u32, u64)> = (0..4).map(|r| (r, 2)).collect();
        let classes = pack(4, &arcs, &roots).unwrap();
        verify(4, &arcs, &classes).unwrap();
        for r in 0..4 {
            let total: u64 = classes
                .iter()
                .filter(|c| c.root == r)
                .map(|c| c.weight)
                .sum();
            assert_eq!(total, 2);
        }
    }
}
