//! Switch removal by edge splitting (ForestColl §2.2, Theorems 7 and 8).
//!
//! A switch may forward data but not copy it, so trees must span the participants alone. Splitting
//! off `(u, w), (w, t)` by `a` at a switch `w` replaces `a` units of the path `u -> w -> t` by a
//! direct logical arc `u -> t`. Only two families of node sets `Y` (the receiving side of a cut)
//! lose in-capacity, each by `a`: sets holding `u` and `t` but not `w`, and sets holding `w` but
//! neither `u` nor `t`. Every set holding a participant must keep in-capacity (super-source arcs
//! included) of at least `K`, the total number of trees; so the most that can be split off is the
//! smallest surplus over those two families, and each family's smallest surplus is one minimum
//! cut (the second needs the cut's receiving side to hold a participant: the maximal minimum cut is
//! checked, and only when it holds none is each participant tried as an extra sink). Splitting
//! switch by switch, pair by pair, by the most each pair allows removes every switch of an Eulerian
//! network (Theorem 7). Every logical arc keeps the physical paths its capacity stands for, so trees
//! found on the logical network travel exactly those paths.

use std::collections::HashMap;

use super::rate::{Demand, Network, Ratio};
use crate::flow::{ArcId, Cap, FlowNetwork};
use crate::topology::NodeId;
use crate::Error;

/// Physical paths (node sequences), stored end to end.
#[derive(Clone, Debug, Default)]
pub struct PathArena {
    nodes: Vec<NodeId>,
    start: Vec<u32>,
}

/// Index of a path in a [`PathArena`].
pub type PathId = u32;

impl PathArena {
    fn push(&mut self, nodes: impl IntoIterator<Item = NodeId>) -> PathId {
        if self.start.is_empty() {
            self.start.push(0);
        }
        self.nodes.extend(nodes);
        self.start.push(self.nodes.len() as u32);
        (self.start.len() - 2) as PathId
    }

    pub fn get(&self, path: PathId) -> &[NodeId] {
        let p = path as usize;
        &self.nodes[self.start[p] as usize..self.start[p + 1] as usize]
    }

    /// `first` then `second` without repeating the node where they meet.
    fn join(&mut self, first: PathId, second: PathId) -> PathId {
        let a = self.get(first).to_vec();
        let b = self.get(second)[1..].to_vec();
        self.push(a.into_iter().chain(b))
    }
}

/// Capacity on some physical paths: `(path, units)`.
pub type Bundles = Vec<(PathId, u64)>;

/// A logical arc between participants and the physical paths its capacity stands for.
#[derive(Clone, Debug)]
pub struct LogicalArc {
    pub tail: NodeId,
    pub head: NodeId,
    pub capacity: u64,
    pub bundles: Bundles,
}

/// The participants-only network that edge splitting leaves.
#[derive(Clone, Debug, Default)]
pub struct Logical {
    pub arcs: Vec<LogicalArc>,
    pub paths: PathArena,
}

/// How many other nodes a switch arc's capacity is first spread over.
const SPREAD: usize = 8;

struct Splitter<'a> {
    net: FlowNetwork,
    arc_of: HashMap<(NodeId, NodeId), ArcId>,
    bundles: Vec<Bundles>,
    paths: PathArena,
    is_participant: Vec<bool>,
    participants: &'a [NodeId],
    source: NodeId,
    /// Trees in total: every participant's in-cut must keep at least this.
    need: Cap,
    /// Test each split against the cuts (Theorem 8); unchecked splits take all they can.
    checked: bool,
}

/// Removes every non-participant node of `net` (capacities scaled by `u`, `k` trees from every
/// root of `demand`), keeping each participant's connectivity from the roots.
pub fn remove_switches(net: &Network, demand: &Demand, k: u64, u: Ratio) -> Result<Logical, Error> {
    remove_switches_with(net, demand, k, u, true)
}

/// [`remove_switches`]' splitting pattern without its connectivity tests: every pair takes all
/// its arcs and quota allow. Each test is a maximum flow over the whole network (thousands per
/// 1024-NPU switch hierarchy, minutes in all) and on such fabrics none of them binds; where one
/// would have, a cut is lost and a packing on the result may strand a tree, so only a packing
/// that completes on it is of use (it is valid whatever the cuts: every tree arc stands for
/// physical paths within their capacity).
pub fn remove_switches_unchecked(
    net: &Network,
    demand: &Demand,
    k: u64,
    u: Ratio,
) -> Result<Logical, Error> {
    remove_switches_with(net, demand, k, u, false)
}

/// [`remove_switches`]' result at [`remove_switches_unchecked`]'s cost where that is enough: the
/// unchecked split is kept when every participant still receives `k` trees from every root
/// through it (one maximum flow per participant afterwards, instead of one per split), which
/// makes it cut-preserving as well; otherwise the checked split is made. On switch hierarchies no
/// check binds (hier_1024: an X = 1 synthesis on the split, 31 s with the checked split, 5.8 s
/// with the verified one).
pub fn remove_switches_verified(
    net: &Network,
    demand: &Demand,
    k: u64,
    u: Ratio,
) -> Result<Logical, Error> {
    let mut unchecked = splitter(net, demand, k, u, false);
    if unchecked.remove_all().is_ok() && unchecked.keeps_connectivity() {
        return Ok(unchecked.into_logical());
    }
    remove_switches(net, demand, k, u)
}

fn remove_switches_with(
    net: &Network,
    demand: &Demand,
    k: u64,
    u: Ratio,
    checked: bool,
) -> Result<Logical, Error> {
    let mut s = splitter(net, demand, k, u, checked);
    s.remove_all()?;
    Ok(s.into_logical())
}

/// The splitter of `net`'s switches, none removed yet.
fn splitter<'a>(
    net: &Network,
    demand: &'a Demand,
    k: u64,
    u: Ratio,
    checked: bool,
) -> Splitter<'a> {
    let (mut flow_net, feeds) = net.flow_network(&demand.roots);
    let mut paths = PathArena::default();
    let mut arc_of = HashMap::with_capacity(net.arcs.len());
    let mut bundles = Vec::with_capacity(net.arcs.len());
    for (i, &(a, b, c)) in net.arcs.iter().enumerate() {
        let scaled = (c as u128 * u.num as u128 / u.den as u128) as u64;
        let arc = 2 * i as ArcId;
        flow_net.set_capacity(arc, scaled as Cap);
        arc_of.insert((a, b), arc);
        bundles.push(if scaled > 0 {
            vec![(paths.push([a, b]), scaled)]
        } else {
            Vec::new()
        });
    }
    for &f in &feeds {
        flow_net.set_capacity(f, k as Cap);
        bundles.push(Vec::new());
    }
    let mut is_participant = vec![false; net.nodes as usize + 1];
    for &p in &demand.participants {
        is_participant[p as usize] = true;
    }
    Splitter {
        net: flow_net,
        arc_of,
        bundles,
        paths,
        is_participant,
        participants: &demand.participants,
        source: net.nodes,
        need: (demand.roots.len() as u64 * k) as Cap,
        checked,
    }
}

impl Splitter<'_> {
    /// Splits off every switch.
    fn remove_all(&mut self) -> Result<(), Error> {
        for w in 0..self.source {
            if !self.is_participant[w as usize] {
                self.remove(w)?;
            }
        }
        Ok(())
    }

    /// Whether every participant can still receive `need` from the super source: every side
    /// holding a participant keeps in-capacity `need` (max-flow min-cut).
    fn keeps_connectivity(&mut self) -> bool {
        let (source, need) = (self.source, self.need);
        self.participants
            .iter()
            .all(|&p| self.net.max_flow(&[source], &[p], need) >= need)
    }

    /// The participants' logical arcs with the paths they stand for.
    fn into_logical(mut self) -> Logical {
        let mut logical = Logical::default();
        let source = self.source;
        for ((a, b), arc) in self.arc_of {
            let capacity = self.net.capacity(arc);
            if capacity > 0 && a != source {
                debug_assert!(self.is_participant[a as usize] && self.is_participant[b as usize]);
                logical.arcs.push(LogicalArc {
                    tail: a,
                    head: b,
                    capacity: capacity as u64,
                    bundles: std::mem::take(&mut self.bundles[arc as usize / 2]),
                });
            }
        }
        logical.arcs.sort_by_key(|a| (a.tail, a.head));
        logical.paths = self.paths;
        logical
    }

    /// Splits off every arc through switch `w`.
    fn remove(&mut self, w: NodeId) -> Result<(), Error> {
        let live = |net: &FlowNetwork, arcs: Vec<ArcId>| -> Vec<ArcId> {
            arcs.into_iter().filter(|&a| net.capacity(a) > 0).collect()
        };
        let mut ins = live(&self.net, self.net.in_arcs(w).collect());
        let mut outs = live(&self.net, self.net.out_arcs(w).collect());
        if ins.is_empty() && outs.is_empty() {
            return Ok(());
        }
        ins.sort_by_key(|&a| self.net.tail(a));
        outs.sort_by_key(|&a| self.net.head(a));
        if self.pass_through(&ins, &outs) {
            return Ok(());
        }
        for (i, &a_uw) in ins.iter().enumerate() {
            let u = self.net.tail(a_uw);
            // A fair first round spreads u's capacity over up to SPREAD other nodes (starting
            // after u, so that the switch becomes a well-connected logical mesh rather than a
            // chain: shallow trees pipeline better); a second round takes whatever is left, and a
            // loop back to u (wasted capacity) comes last.
            let others: Vec<ArcId> = outs
                .iter()
                .cycle()
                .skip(i + 1)
                .take(outs.len())
                .filter(|&&a| self.net.head(a) != u)
                .copied()
                .collect();
            let ways = others.len().clamp(1, SPREAD) as Cap;
            let share = (self.net.capacity(a_uw) + ways - 1) / ways;
            let rounds = [
                (&others[..others.len().min(SPREAD)], share),
                (&others[..], Cap::MAX),
            ];
            let loops: Vec<ArcId> = outs
                .iter()
                .filter(|&&a| self.net.head(a) == u)
                .copied()
                .collect();
            for (targets, quota) in rounds.into_iter().chain([(&loops[..], Cap::MAX)]) {
                for &a_wt in targets {
                    if self.net.capacity(a_uw) == 0 {
                        break;
                    }
                    if self.net.capacity(a_wt) == 0 {
                        continue;
                    }
                    let t = self.net.head(a_wt);
                    let amount = self.most_splittable(u, w, t, a_uw, a_wt, quota);
                    if amount > 0 {
                        self.split(a_uw, a_wt, amount);
                    }
                }
            }
            if self.net.capacity(a_uw) > 0 {
                return Err(Error::input(format!(
                    "switch {w}: the arc from node {u} cannot be split off without cutting a \
                     participant off; ForestColl needs switches whose in- and out-bandwidth are \
                     equal"
                )));
            }
        }
        if let Some(&a) = outs.iter().find(|&&a| self.net.capacity(a) > 0) {
            return Err(Error::input(format!(
                "switch {w}: its link to node {} has bandwidth left over after every link into it \
                 was split off; ForestColl needs switches whose in- and out-bandwidth are equal",
                self.net.head(a)
            )));
        }
        Ok(())
    }

    /// A switch between just two nodes, passing as much each way as it takes in: its arcs become
    /// direct arcs without loss of any cut (the switch can always sit on the cheaper side).
    fn pass_through(&mut self, ins: &[ArcId], outs: &[ArcId]) -> bool {
        let mut ends: Vec<NodeId> = ins
            .iter()
            .map(|&a| self.net.tail(a))
            .chain(outs.iter().map(|&a| self.net.head(a)))
            .collect();
        ends.sort_unstable();
        ends.dedup();
        let [a, b] = ends[..] else {
            return false;
        };
        let cap = |net: &FlowNetwork, arcs: &[ArcId], end: NodeId, tail: bool| {
            arcs.iter()
                .find(|&&x| {
                    if tail {
                        net.tail(x) == end
                    } else {
                        net.head(x) == end
                    }
                })
                .map(|&x| (x, net.capacity(x)))
        };
        let (aw, wb) = (cap(&self.net, ins, a, true), cap(&self.net, outs, b, false));
        let (bw, wa) = (cap(&self.net, ins, b, true), cap(&self.net, outs, a, false));
        let balanced = |x: Option<(ArcId, Cap)>, y: Option<(ArcId, Cap)>| {
            x.map_or(0, |p| p.1) == y.map_or(0, |p| p.1)
        };
        if !balanced(aw, wb) || !balanced(bw, wa) {
            return false;
        }
        for (x, y) in [(aw, wb), (bw, wa)] {
            if let (Some((x, c)), Some((y, _))) = (x, y) {
                self.split(x, y, c);
            }
        }
        true
    }

    /// The most of `u -> w -> t` that can become `u -> t` (Theorem 8), at most `quota`.
    fn most_splittable(
        &mut self,
        u: NodeId,
        w: NodeId,
        t: NodeId,
        a_uw: ArcId,
        a_wt: ArcId,
        quota: Cap,
    ) -> Cap {
        let mut most = self
            .net
            .capacity(a_uw)
            .min(self.net.capacity(a_wt))
            .min(quota);
        if !self.checked {
            return most;
        }
        // Lower bounds on both families' surplus, from the neighbouring sets that already hold
        // at least `need`: a side Y holding u and t but not w has in(Y) = in(Y + w) + c(w -> Y)
        // - c(outside -> w); a side holding w has in(Y) = in(Y - w) + c(outside -> w) - c(w -> Y).
        // Where they cover `most` (typically at a switch's last arcs) no flow is needed.
        let (between_in, between_out) = self.between(u, w, t);
        let (w_in, w_out) = (self.total(w, true), self.total(w, false));
        if between_out + between_in - w_in < most {
            // Receiving sides holding u and t but not w (nor the super source).
            let sinks: Vec<NodeId> = if u == t { vec![u] } else { vec![u, t] };
            let holds_participant = sinks.iter().any(|&v| self.is_participant[v as usize]);
            most = most.min(self.surplus(&[self.source, w], &sinks, holds_participant, most));
            if most == 0 {
                return 0;
            }
        }
        if between_in + between_out - w_out < most {
            // Receiving sides holding w but neither u nor t.
            let mut sources = vec![self.source, u];
            if t != u {
                sources.push(t);
            }
            most = most.min(self.surplus(&sources, &[w], false, most));
        }
        most
    }

    /// Capacity from u and t into w, and from w to u and t (each pair counted once).
    fn between(&self, u: NodeId, w: NodeId, t: NodeId) -> (Cap, Cap) {
        let cap = |a: NodeId, b: NodeId| {
            self.arc_of
                .get(&(a, b))
                .map_or(0, |&x| self.net.capacity(x))
        };
        let ends: &[NodeId] = if u == t { &[u] } else { &[u, t] };
        ends.iter()
            .fold((0, 0), |(i, o), &v| (i + cap(v, w), o + cap(w, v)))
    }

    /// Total capacity into (or out of) a node.
    fn total(&self, w: NodeId, into: bool) -> Cap {
        if into {
            self.net.in_arcs(w).map(|a| self.net.capacity(a)).sum()
        } else {
            self.net.out_arcs(w).map(|a| self.net.capacity(a)).sum()
        }
    }

    /// The smallest `in-capacity - need` over receiving sides that hold `sinks`, none of
    /// `sources`, and a participant; values above `cap` are reported as `cap`.
    fn surplus(
        &mut self,
        sources: &[NodeId],
        sinks: &[NodeId],
        holds_participant: bool,
        cap: Cap,
    ) -> Cap {
        let limit = self.need + cap;
        let flow = self.net.max_flow(sources, sinks, limit);
        if flow >= limit || holds_participant {
            return (flow - self.need).clamp(0, cap);
        }
        // `flow` is a minimum cut; it counts if its largest receiving side holds a participant.
        let side = self.net.source_side(sources);
        if self.participants.iter().any(|&p| !side[p as usize]) {
            return (flow - self.need).clamp(0, cap);
        }
        // Every minimum cut isolates switches only: try each participant as an extra sink.
        // For a lone switch `w` whose out-arcs all lead to participants, only those need trying:
        // a side Y = X + w binds only if w feeds X (else in(Y) = in(X) + c(outside -> w) keeps
        // at least need + c(u -> w), and `cap` is at most c(u -> w)); so Y holds one of them.
        let mut best = limit;
        let mut extended = sinks.to_vec();
        extended.push(0);
        let fed: Vec<NodeId> = match sinks {
            &[w] => self
                .net
                .out_arcs(w)
                .filter(|&a| self.net.capacity(a) > 0)
                .map(|a| self.net.head(a))
                .collect(),
            _ => Vec::new(),
        };
        let candidates = if !fed.is_empty() && fed.iter().all(|&v| self.is_participant[v as usize])
        {
            &fed[..]
        } else {
            self.participants
        };
        for &p in candidates {
            if sources.contains(&p) || sinks.contains(&p) {
                continue;
            }
            *extended.last_mut().expect("one extra sink") = p;
            best = best.min(self.net.max_flow(sources, &extended, best));
            if best <= self.need {
                break;
            }
        }
        (best - self.need).clamp(0, cap)
    }

    /// Moves `amount` from `u -> w` and `w -> t` onto `u -> t`, with the paths it stands for.
    fn split(&mut self, a_uw: ArcId, a_wt: ArcId, amount: Cap) {
        let (u, t) = (self.net.tail(a_uw), self.net.head(a_wt));
        for a in [a_uw, a_wt] {
            let c = self.net.capacity(a);
            self.net.set_capacity(a, c - amount);
        }
        let first = take(&mut self.bundles[a_uw as usize / 2], amount as u64);
        let second = take(&mut self.bundles[a_wt as usize / 2], amount as u64);
        if u == t {
            return;
        }
        let a_ut = match self.arc_of.get(&(u, t)) {
            Some(&a) => {
                let c = self.net.capacity(a);
                self.net.set_capacity(a, c + amount);
                a
            }
            None => {
                let a = self.net.add_arc(u, t, amount);
                self.arc_of.insert((u, t), a);
                self.bundles.push(Vec::new());
                a
            }
        };
        // Pair the units of the two halves in order, path by path.
        let (mut i, mut j) = (0, 0);
        let (mut left1, mut left2) = (first[0].1, second[0].1);
        loop {
            let units = left1.min(left2);
            let joined = self.paths.join(first[i].0, second[j].0);
            add(
                &mut self.bundles[a_ut as usize / 2],
                joined,
                units,
                &self.paths,
            );
            left1 -= units;
            left2 -= units;
            if left1 == 0 {
                i += 1;
                if i == first.len() {
                    break;
                }
                left1 = first[i].1;
            }
            if left2 == 0 {
                j += 1;
                left2 = second[j].1;
            }
        }
    }
}

/// Removes `amount` units from the end of `bundles`, returning them (paths and units).
fn take(bundles: &mut Bundles, mut amount: u64) -> Bundles {
    let mut out = Vec::new();
    while amount > 0 {
        let last = bundles
            .last_mut()
            .expect("the arc has the capacity being taken");
        let units = last.1.min(amount);
        out.push((last.0, units));
        last.1 -= units;
        amount -= units;
        if last.1 == 0 {
            bundles.pop();
        }
    }
    out
}

/// Adds units on `path`, merging with a bundle on the same path.
fn add(bundles: &mut Bundles, path: PathId, units: u64, paths: &PathArena) {
    let nodes = paths.get(path);
    match bundles.iter_mut().find(|(p, _)| paths.get(*p) == nodes) {
        Some(b) => b.1 += units,
        None => bundles.push((path, units)),
    }
}

/// Takes `amount` units from a logical arc's bundles for one tree class.
pub(crate) fn take_units(bundles: &mut Bundles, amount: u64) -> Bundles {
    take(bundles, amount)
}

/// `topology`'s switches split by `remove` for an all-gather among every NPU at its optimal rate:
/// the participants, the logical network and the trees `k` from every root.
#[cfg(test)]
pub(crate) fn split_for_all_gather(
    topology: &crate::topology::Topology,
    remove: fn(&Network, &Demand, u64, Ratio) -> Result<Logical, Error>,
) -> (Vec<NodeId>, Logical, u64) {
    let participants = topology.active_npus();
    let net = Network::new(topology, false);
    let demand = Demand::all(&participants);
    let rate = super::rate::optimal_rate(&net, &demand, &participants).unwrap();
    let (k, u) = super::rate::trees_for(rate, net.capacity_gcd());
    let logical = remove(&net, &demand, k, u).unwrap();
    (participants, logical, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    /// The logical arcs (tail, head, capacity) each way of splitting leaves on `topology`, for an
    /// all-gather among every NPU at its optimal rate.
    fn arcs_of(
        topology: &Topology,
        remove: fn(&Network, &Demand, u64, Ratio) -> Result<Logical, Error>,
    ) -> Vec<(NodeId, NodeId, u64)> {
        let (_, logical, _) = split_for_all_gather(topology, remove);
        logical
            .arcs
            .iter()
            .map(|a| (a.tail, a.head, a.capacity))
            .collect()
    }

    /// On a hierarchy of switches no connectivity test binds: the verified split is the checked
    /// one, arc for arc.
    #[test]
    fn verified_splitting_of_a_switch_hierarchy_is_the_checked_one() {
        let mut options = crate::topology::TopologyOptions::new("dims:switch4,switch2,switch2");
        options.bandwidth = Some("200GB/s,100GB/s,50GB/s".to_string());
        let topology = options.build().unwrap();
        let checked = arcs_of(&topology, remove_switches);
        assert!(!checked.is_empty());
        assert_eq!(arcs_of(&topology, remove_switches_verified), checked);
    }

    /// Where the untested split loses a participant's connectivity (two A100 boxes whose NICs
    /// meet at rail switches), the verified split is the checked one.
    #[test]
    fn verified_splitting_falls_back_where_a_test_binds() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/a100_2x8.yml");
        let topology = crate::topology::load_topology_file(&path).unwrap();
        let checked = arcs_of(&topology, remove_switches);
        assert_ne!(arcs_of(&topology, remove_switches_unchecked), checked);
        assert_eq!(arcs_of(&topology, remove_switches_verified), checked);
    }
}
