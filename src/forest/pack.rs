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

use std::collections::VecDeque;

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
    /// Per node, the arc from this class's flow node into it while it is in the tree.
    arc_into: Vec<Option<ArcId>>,
    /// This class's node in the flow network and the arc that feeds it.
    node: u32,
    feed: ArcId,
    done: bool,
    /// Arcs `(x, y)` this class (or the class it split from) was refused.
    refused: std::collections::HashSet<(u32, u32)>,
}

/// Packs, for every `(root, k)`, `k` spanning out-trees rooted there over `n` nodes, each arc
/// `(tail, head, capacity)` used by at most `capacity` trees. The network must have the
/// connectivity the trees need (`sum k` from a super source feeding every root its `k`).
pub fn pack(n: usize, arcs: &[(u32, u32, u64)], roots: &[(u32, u64)]) -> Result<Vec<TreeClass>, Error> {
    let mut net = FlowNetwork::new(n + 1);
    let hub = n as u32;
    let mut out: Vec<Vec<(u32, ArcId)>> = vec![Vec::new(); n];
    for &(a, b, c) in arcs {
        let arc = net.add_arc(a, b, c as Cap);
        out[a as usize].push((b, arc));
    }
    for list in &mut out {
        list.sort_unstable();
    }
    let entry: Vec<ArcId> = (0..n as u32).map(|v| net.add_arc(hub, v, 0)).collect();
    let mut packer = Packer {
        net,
        hub,
        entry,
        out,
        classes: Vec::new(),
        unfinished: 0,
        n,
    };
    let mut queue = VecDeque::new();
    for &(root, k) in roots {
        if k == 0 {
            continue;
        }
        let id = packer.add_class(
            TreeClass {
                root,
                weight: k,
                edges: Vec::new(),
            },
            vec![root],
            Default::default(),
        );
        queue.push_back(id);
    }
    while let Some(j) = queue.pop_front() {
        packer.grow(j, &mut queue)?;
    }
    let mut classes: Vec<TreeClass> = packer.classes.into_iter().map(|g| g.class).collect();
    classes.sort_by_key(|c| c.root);
    Ok(classes)
}

struct Packer {
    net: FlowNetwork,
    hub: u32,
    /// Per node, the hub's arc into it: opened without limit for the node being tested.
    entry: Vec<ArcId>,
    out: Vec<Vec<(u32, ArcId)>>,
    classes: Vec<Growing>,
    /// Trees in classes not yet spanning.
    unfinished: Cap,
    n: usize,
}

impl Packer {
    fn add_class(
        &mut self,
        class: TreeClass,
        members: Vec<u32>,
        refused: std::collections::HashSet<(u32, u32)>,
    ) -> usize {
        let node = self.net.add_node();
        let feed = self.net.add_arc(self.hub, node, class.weight as Cap);
        let mut arc_into = vec![None; self.n];
        for &m in &members {
            arc_into[m as usize] = Some(self.net.add_arc(node, m, INFINITE));
        }
        self.unfinished += class.weight as Cap;
        self.classes.push(Growing {
            class,
            members,
            arc_into,
            node,
            feed,
            done: false,
            refused,
        });
        self.classes.len() - 1
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
                if g.arc_into[y as usize].is_some()
                    || self.net.capacity(arc) == 0
                    || g.refused.contains(&(x, y))
                {
                    continue;
                }
                let taken = self.most_trees(j, x, y, arc);
                if taken == 0 {
                    self.classes[j].refused.insert((x, y));
                    continue;
                }
                let weight = self.classes[j].class.weight;
                if taken < weight {
                    let g = &self.classes[j];
                    let rest = TreeClass {
                        weight: weight - taken,
                        ..g.class.clone()
                    };
                    let (members, refused) = (g.members.clone(), g.refused.clone());
                    self.unfinished -= rest.weight as Cap;
                    let id = self.add_class(rest, members, refused);
                    queue.push_back(id);
                    let g = &mut self.classes[j];
                    g.class.weight = taken;
                    self.net.set_capacity(g.feed, taken as Cap);
                }
                let node = self.classes[j].node;
                let into = self.net.add_arc(node, y, INFINITE);
                let g = &mut self.classes[j];
                g.class.edges.push((x, y));
                g.members.push(y);
                g.arc_into[y as usize] = Some(into);
                let c = self.net.capacity(arc);
                self.net.set_capacity(arc, c - taken as Cap);
            }
        }
        let g = &self.classes[j];
        if g.members.len() != self.n {
            return Err(Error::input(format!(
                "internal: a tree from node {} could reach only {} of {} nodes",
                g.class.root,
                g.members.len(),
                self.n
            )));
        }
        self.unfinished -= g.class.weight as Cap;
        let feed = g.feed;
        self.net.set_capacity(feed, 0);
        self.classes[j].done = true;
        Ok(())
    }

    /// How many of class `j`'s trees may take `x -> y` (Theorem 12).
    fn most_trees(&mut self, j: usize, x: u32, y: u32, arc: ArcId) -> u64 {
        let weight = self.classes[j].class.weight as Cap;
        let most = weight.min(self.net.capacity(arc));
        let others = self.unfinished - weight;
        let feed = self.classes[j].feed;
        self.net.set_capacity(feed, 0);
        self.net.set_capacity(self.entry[x as usize], INFINITE);
        // Classes whose trees already reach y send their trees there directly: push that part of
        // the flow first, so that the search only routes the classes still to reach y.
        self.net.clear_flow();
        let mut direct: Cap = 0;
        for (i, g) in self.classes.iter().enumerate() {
            if i == j || g.done {
                continue;
            }
            if let Some(into) = g.arc_into[y as usize] {
                let w = g.class.weight as Cap;
                self.net.push(g.feed, w);
                self.net.push(into, w);
                direct += w;
            }
        }
        let flow = self
            .net
            .augment(&[self.hub], &[y], others + most, direct);
        self.net.set_capacity(self.entry[x as usize], 0);
        self.net.set_capacity(feed, weight);
        (flow - others).clamp(0, most) as u64
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
            return Err(format!("arc {x} -> {y} carries {l} trees over capacity {cap}"));
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
            let total: u64 = classes.iter().filter(|c| c.root == r).map(|c| c.weight).sum();
            assert_eq!(total, 2);
        }
    }
}
