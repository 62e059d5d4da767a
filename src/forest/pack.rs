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
//! evaluated exactly for each later class.
//!
//! Tests are skipped where the result can be checked instead: a first run grows every class a
//! layer at a time with no test at all (and, where that strands a class, hands it an arc another
//! class can leave for a spare one: `Packer::exchange`), a second trusts the pool when its
//! sets all leave room, and a third tests every arc. Each run is exact whenever it completes
//! (every class spans, no arc over its capacity); where one strands a class, the next starts
//! over. The first completes where only single nodes are tight (NPUs behind a switch per
//! dimension: Themis's 1024-NPU fabrics, 0.1-15 s, whose tested packings took minutes); the
//! second on 1024 GPUs in 128 A100 boxes (17 s of packing; 67 s when a flow still tests every
//! arc the pool allows).

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
    /// The arc each of `class.edges` was taken on.
    arcs: Vec<usize>,
    members: Vec<u32>,
    in_tree: Vec<bool>,
    /// Per node, its parent in the tree (`u32::MAX` for the root and nodes outside).
    parent: Vec<u32>,
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

impl Growing {
    /// `weight` more trees of this class as it is now, to continue on their own (outside any
    /// flow network until attached).
    fn rest(&self, weight: u64) -> Growing {
        Growing {
            class: TreeClass {
                weight,
                ..self.class.clone()
            },
            arcs: self.arcs.clone(),
            members: self.members.clone(),
            in_tree: self.in_tree.clone(),
            parent: self.parent.clone(),
            refused: self.refused.clone(),
            tight: Vec::new(),
            done: false,
            node: 0,
            feed: 0,
            into: Vec::new(),
        }
    }
}

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
    // Each way is exact whenever it completes (every class spans, no arc over capacity); where
    // some class cannot span, an arc taken on trust broke the condition, and the packing starts
    // over with fewer arcs taken on trust.
    pack_with(n, arcs, roots, Trust::Capacity)
        .or_else(|_| pack_with(n, arcs, roots, Trust::Pool))
        .or_else(|_| pack_with(n, arcs, roots, Trust::Nothing))
}

/// Which arcs a packing takes without testing Theorem 12 by a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trust {
    /// Every arc with capacity left: no flow at all. Where no node set but single NPUs is
    /// tight (NPUs behind one switch per dimension: Themis's 1024-NPU fabrics), classes grown
    /// breadth-first span without a test, with a few exchanges at the end; each test there was
    /// a flow over the whole network and granted every arc (2D-SW_SW: 1023 flows per class).
    Capacity,
    /// An arc the pool's sets around its head, the only sets known to have become tight, all
    /// leave room for.
    Pool,
    /// No arc: every one the cheap bounds cannot settle is tested by a flow.
    Nothing,
}

/// [`pack`], taking on trust the arcs `trust` says.
pub(crate) fn pack_with(
    n: usize,
    arcs: &[(u32, u32, u64)],
    roots: &[(u32, u64)],
    trust: Trust,
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
        out_left: vec![0; n],
        waiting: vec![0; n],
        to_head: vec![0; n],
        trust,
        users: if trust == Trust::Capacity {
            vec![Vec::new(); arcs.len()]
        } else {
            Vec::new()
        },
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
    for &(a, _, c) in arcs {
        packer.out_left[a as usize] += c as Cap;
    }
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
            arcs: Vec::new(),
            members: vec![root],
            in_tree,
            parent: vec![u32::MAX; n],
            refused: HashSet::new(),
            tight: Vec::new(),
            done: false,
            node: 0,
            feed: 0,
            into: Vec::new(),
        });
        packer.unfinished += k as Cap;
        packer.holding[root as usize] += k as Cap;
        packer.waiting[root as usize] += k as Cap;
    }
    if trust == Trust::Capacity {
        packer.grow_all_by_layers()?;
    } else {
        packer.rebuild();
        while let Some(j) = queue.pop_front() {
            packer.grow(j, &mut queue)?;
        }
    }
    let mut classes: Vec<TreeClass> = packer.classes.into_iter().map(|g| g.class).collect();
    classes.sort_by_key(|c| c.root);
    Ok(classes)
}

/// The packing state and the flow network of the Theorem 12 test: the arcs with what is left of
/// their capacity, a hub, and a node per unfinished class fed from the hub with the class's
/// weight and feeding its tree's nodes without limit. Finished classes leave the network (it is
/// rebuilt when one finishes), so that tests only scan what can still carry flow; untested growth
/// ([`Trust::Capacity`]) keeps no network.
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
    /// Per node, the capacity left on its out-arcs.
    out_left: Vec<Cap>,
    /// Per node, the trees of unfinished classes that have no node but it (their root).
    waiting: Vec<Cap>,
    /// Scratch: per node, the capacity left on its arc into the current test's head.
    to_head: Vec<Cap>,
    /// Node sets some class found tight, smallest sides: a set that one class could not enter
    /// often stops the next ones too (a box behind its NICs), which one evaluation tells.
    pool: Vec<Vec<u32>>,
    /// Per node, the pool sets that hold it.
    pool_of: Vec<Vec<u32>>,
    /// Which arcs are taken without a flow.
    trust: Trust,
    /// Per arc, the classes that took it (untested growth only; entries stay after a class
    /// moves off the arc).
    users: Vec<Vec<u32>>,
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
                self.take(j, x, y, arc, taken, queue);
            }
        }
        self.finish(j)
    }

    /// Grows every class a layer at a time, all classes in turn, without tests: each node next
    /// to a tree is reached by the arc from its last layer with the most capacity left. Classes
    /// grown whole one after another used up the arcs out of the roots of those still to come
    /// (as relays), and arcs taken first exhausted some parallel arcs while others stayed
    /// unused; a class that splits continues from its whole tree in the next round.
    fn grow_all_by_layers(&mut self) -> Result<(), Error> {
        let mut best: Vec<Option<(Cap, u32, usize)>> = vec![None; self.n];
        let mut reached = Vec::new();
        let mut layer_from = vec![0; self.classes.len()];
        let mut unused = VecDeque::new();
        loop {
            loop {
                let mut grew = false;
                let mut j = 0;
                while j < self.classes.len() {
                    layer_from.resize(self.classes.len(), 0);
                    let (from, to) = (layer_from[j], self.classes[j].members.len());
                    if to < self.n && from < to {
                        self.grow_layer(j, from..to, &mut best, &mut reached, &mut unused);
                        layer_from[j] = to;
                        grew |= self.classes[j].members.len() > to;
                    }
                    j += 1;
                }
                if !grew {
                    break;
                }
            }
            // Stalled: each class still short of spanning tries one exchange, then all grow on
            // (from the node it gained: more exchanges at once made deeper trees).
            let stalled: Vec<usize> = (0..self.classes.len())
                .filter(|&j| self.classes[j].members.len() < self.n)
                .collect();
            if stalled.is_empty() {
                break;
            }
            let mut exchanged = false;
            for j in stalled {
                exchanged |= self.exchange(j, &mut unused);
            }
            if !exchanged {
                break;
            }
        }
        (0..self.classes.len()).try_for_each(|j| self.finish(j))
    }

    /// Frees an arc for the stalled class `j`: a spanning class `d` that reaches a node `y`
    /// outside `j`'s tree by an arc `x -> y` from inside it, and could reach `y` instead by an
    /// arc `z -> y` with capacity left (`z` not below `y` in `d`), moves to `z -> y` (as many of
    /// its trees as `j` needs and the arc has room for; the rest of `d` splits off unchanged),
    /// and `j` takes `x -> y`. Growing without tests strands a class where earlier classes spent
    /// every arc into the nodes it misses; nodes whose in-capacity is all spoken for (every
    /// tight packing) then hold spare in-arcs only from among the missed nodes, which this
    /// hands over. Returns whether it moved one.
    fn exchange(&mut self, j: usize, queue: &mut VecDeque<usize>) -> bool {
        let mut spare: Vec<(u32, usize)> = Vec::new();
        // Nearest the root first, as the layers would have reached them: shallow trees.
        for m in 0..self.classes[j].members.len() {
            let x = self.classes[j].members[m];
            for i in 0..self.out[x as usize].len() {
                let (y, a) = self.out[x as usize][i];
                if self.classes[j].in_tree[y as usize] {
                    continue;
                }
                spare.clear();
                spare.extend(
                    self.in_arcs[y as usize]
                        .iter()
                        .filter(|&&(_, b)| self.left[b] > 0)
                        .copied(),
                );
                if spare.is_empty() {
                    continue;
                }
                for u in 0..self.users[a].len() {
                    let d = self.users[a][u] as usize;
                    let g = &self.classes[d];
                    // Entries are never removed: `d` may have moved off `a` since.
                    if g.members.len() != self.n || g.parent[y as usize] != x {
                        continue;
                    }
                    let below_y = |mut v: u32| {
                        while v != g.class.root {
                            if v == y {
                                return true;
                            }
                            v = g.parent[v as usize];
                        }
                        false
                    };
                    let Some(&(z, b)) = spare.iter().find(|&&(z, _)| !below_y(z)) else {
                        continue;
                    };
                    let Some(e) = g.arcs.iter().position(|&arc| arc == a) else {
                        continue;
                    };
                    let amount = self.classes[j]
                        .class
                        .weight
                        .min(g.class.weight)
                        .min(self.left[b] as u64);
                    self.reroute(d, e, z, b, amount);
                    self.take(j, x, y, a, amount, queue);
                    return true;
                }
            }
        }
        false
    }

    /// Lists class `c` as a user of its arcs (untested growth only: exchanges look them up).
    fn register(&mut self, c: usize) {
        if self.trust == Trust::Capacity {
            for &arc in &self.classes[c].arcs {
                self.users[arc].push(c as u32);
            }
        }
    }

    /// Moves `amount` of spanning class `d`'s trees from its `e`-th arc to `z -> head` on arc
    /// `b`, splitting off the rest of `d` unchanged.
    fn reroute(&mut self, d: usize, e: usize, z: u32, b: usize, amount: u64) {
        let weight = self.classes[d].class.weight;
        if amount < weight {
            let rest = self.classes[d].rest(weight - amount);
            self.classes.push(rest);
            self.register(self.classes.len() - 1);
            self.classes[d].class.weight = amount;
        }
        self.users[b].push(d as u32);
        let g = &mut self.classes[d];
        let (a, (x, y)) = (g.arcs[e], g.class.edges[e]);
        g.arcs[e] = b;
        g.class.edges[e] = (z, y);
        g.parent[y as usize] = z;
        self.left[a] += amount as Cap;
        self.left[b] -= amount as Cap;
        self.out_left[x as usize] += amount as Cap;
        self.out_left[z as usize] -= amount as Cap;
        Self::in_growth_order(g);
    }

    /// Takes, for each node next to class `j`'s tree from its members `layer`, the arc from
    /// them with the most capacity it may use (`best` and `reached` are scratch).
    fn grow_layer(
        &mut self,
        j: usize,
        layer: std::ops::Range<usize>,
        best: &mut [Option<(Cap, u32, usize)>],
        reached: &mut Vec<u32>,
        queue: &mut VecDeque<usize>,
    ) {
        for m in layer {
            let x = self.classes[j].members[m];
            let spare_out = self.spare_out(j, x);
            for &(y, arc) in &self.out[x as usize] {
                let left = self.left[arc].min(spare_out);
                if left <= 0 || self.classes[j].in_tree[y as usize] {
                    continue;
                }
                match &mut best[y as usize] {
                    Some(b) if b.0 >= left => {}
                    slot => {
                        if slot.is_none() {
                            reached.push(y);
                        }
                        *slot = Some((left, x, arc));
                    }
                }
            }
        }
        for y in reached.drain(..) {
            let (_, x, arc) = best[y as usize].take().expect("reached nodes have an arc");
            let usable = self.left[arc].min(self.spare_out(j, x));
            if usable > 0 {
                let taken = self.classes[j].class.weight.min(usable as u64);
                self.take(j, x, y, arc, taken, queue);
            }
        }
    }

    /// What class `j` may still send out of `x`: the capacity left on `x`'s out-arcs less the
    /// trees of the other classes that have not left their root `x` yet, which need it.
    fn spare_out(&self, j: usize, x: u32) -> Cap {
        let g = &self.classes[j];
        let own = if g.members.len() == 1 {
            g.class.weight as Cap
        } else {
            0
        };
        self.out_left[x as usize] - (self.waiting[x as usize] - own)
    }

    /// Adds arc `arc`, `x -> y`, to `taken` of class `j`'s trees; the rest of the class, if
    /// any, splits off and continues later from the tree as it is now.
    fn take(
        &mut self,
        j: usize,
        x: u32,
        y: u32,
        arc: usize,
        taken: u64,
        queue: &mut VecDeque<usize>,
    ) {
        let weight = self.classes[j].class.weight;
        let at_root = self.classes[j].members.len() == 1;
        if at_root {
            self.waiting[x as usize] -= weight as Cap;
            if taken < weight {
                self.waiting[x as usize] += (weight - taken) as Cap;
            }
        }
        self.out_left[x as usize] -= taken as Cap;
        if taken < weight {
            let rest = self.classes[j].rest(weight - taken);
            self.classes.push(rest);
            let id = self.classes.len() - 1;
            self.register(id);
            queue.push_back(id);
            self.classes[j].class.weight = taken;
            self.classes[j].tight.clear();
            if self.trust != Trust::Capacity {
                self.attach(id);
                self.net.set_capacity(self.classes[j].feed, taken as Cap);
            }
        }
        self.holding[y as usize] += taken as Cap;
        let g = &mut self.classes[j];
        g.class.edges.push((x, y));
        g.arcs.push(arc);
        if self.trust == Trust::Capacity {
            self.users[arc].push(j as u32);
        }
        g.members.push(y);
        g.in_tree[y as usize] = true;
        g.parent[y as usize] = x;
        self.left[arc] -= taken as Cap;
        // Untested growth keeps no flow network: nothing reads it.
        if self.trust != Trust::Capacity {
            let node = g.node;
            g.into[y as usize] = self.net.add_arc(node, y, INFINITE);
            self.net.set_capacity(self.arc_id[arc], self.left[arc]);
        }
    }

    /// Puts a tree's arcs back in an order where every arc's tail is the root or an earlier head
    /// (breadth-first), after an exchange gave a node a parent added after it.
    fn in_growth_order(g: &mut Growing) {
        let n = g.in_tree.len();
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (e, &(x, _)) in g.class.edges.iter().enumerate() {
            children[x as usize].push(e);
        }
        let mut order = Vec::with_capacity(g.class.edges.len());
        let mut next = VecDeque::from([g.class.root]);
        while let Some(x) = next.pop_front() {
            for &e in &children[x as usize] {
                order.push(e);
                next.push_back(g.class.edges[e].1);
            }
        }
        debug_assert_eq!(order.len(), g.class.edges.len(), "a tree stays connected");
        g.class.edges = order.iter().map(|&e| g.class.edges[e]).collect();
        g.arcs = order.iter().map(|&e| g.arcs[e]).collect();
        g.members = std::iter::once(g.class.root)
            .chain(g.class.edges.iter().map(|&(_, y)| y))
            .collect();
    }

    /// Marks class `j` done once it spans every node.
    fn finish(&mut self, j: usize) -> Result<(), Error> {
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
        if self.trust != Trust::Capacity {
            self.rebuild();
        }
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
            PoolVerdict::Roomy if self.trust == Trust::Pool => return most as u64,
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
