//! ForestColl: throughput-optimal spanning-tree packings on any network, switches included
//! (Zhao et al., "Bandwidth Optimal Pipeline Schedule for Collective Communication").
//!
//! Every root spreads its data down `k` spanning out-trees over the participants; each tree carries
//! `1/k` of the root's data and every link carries at most `U` times its capacity in trees, so the
//! spreading takes `shard * U / k` per unit of bandwidth, which is the cut bound. The construction:
//! [`rate`] finds the optimal rate and `(k, U)` exactly, [`split`] removes the switches by edge
//! splitting (each logical arc remembers the physical paths it stands for), [`pack`] packs the trees
//! on the participants-only network, and the trees are mapped back onto those paths. Splitting and
//! packing are first tried without their max-flow tests, and kept when every tree spans (valid and
//! optimal whatever the splitting lost); otherwise they run tested. Schedules are built from a
//! [`Forest`] by `algorithms::forestcoll`; `collsim trees` prints it.

pub mod pack;
pub mod rate;
pub mod reduce_broadcast;
pub mod split;

use std::collections::HashMap;

pub use rate::{Demand, Network, Ratio};

use crate::topology::{NodeId, Topology};
use crate::Error;

/// Above this many trees per root the optimal packing is refused (the schedule would cut every
/// shard into that many pieces); `--trees` then picks a smaller `k` and the best rate it allows.
pub const MAX_TREES: u64 = 4096;

/// What to pack.
#[derive(Clone, Debug)]
pub struct ForestRequest {
    pub participants: Vec<NodeId>,
    /// `None`: every participant spreads (all-gather, reduce-scatter); `Some(roots)`: only those
    /// (one for broadcast and reduce; TTO's three edge NPUs).
    pub roots: Option<Vec<NodeId>>,
    /// Spread on the transposed network (reduce-scatter, reduce).
    pub reversed: bool,
    /// Trees per root; `None` for the optimal number.
    pub trees: Option<u64>,
    /// Participants whose cuts must be checked for the rate (all of them, or one per class of
    /// a symmetry of the network); `None` for all.
    pub sinks: Option<Vec<NodeId>>,
}

/// One arc of a tree class and the physical paths (in the packing's direction) that carry it,
/// each with how many of the class's trees take it (they add up to the class's weight).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeEdge {
    pub src: NodeId,
    pub dst: NodeId,
    pub routes: Vec<(Vec<NodeId>, u64)>,
}

/// `weight` identical trees rooted at `root` (of the `k` the root has), arcs in growth order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    pub root: NodeId,
    pub weight: u64,
    pub edges: Vec<TreeEdge>,
}

/// A packing of `k` trees per root at multiplier `U`.
#[derive(Clone, Debug)]
pub struct Forest {
    pub participants: Vec<NodeId>,
    pub roots: Vec<NodeId>,
    pub k: u64,
    /// `U`: every link carries at most `U` times its capacity (in units) in trees.
    pub multiplier: Ratio,
    /// The optimal rate per root (capacity units), whatever `k` was asked for.
    pub optimal_rate: Ratio,
    /// Bytes per second of one capacity unit.
    pub unit_bps: f64,
    pub reversed: bool,
    /// Bandwidths were rounded to integer capacities (see [`Network::new`]).
    pub rounded: bool,
    /// All-reduce by reduce-then-broadcast ([`reduce_broadcast`]): each tree reduces its part of
    /// the whole buffer to its root and broadcasts it back; `k` counts all trees, and `roots`
    /// holds the one they were packed from.
    pub reduce_broadcast: bool,
    pub trees: Vec<Tree>,
}

impl Forest {
    /// Bytes per second each root spreads at: `k / U` units (for reduce-then-broadcast, the
    /// whole buffer's all-reduce rate).
    pub fn rate_bps(&self) -> f64 {
        self.k as f64 / self.multiplier.as_f64() * self.unit_bps
    }

    /// Seconds to spread `shard` bytes from every root (reduce-then-broadcast: to all-reduce a
    /// buffer of `shard` bytes).
    pub fn seconds_for(&self, shard: f64) -> f64 {
        shard / self.rate_bps()
    }

    /// The multiplier the trees really need: the most trees any physical link carries per unit
    /// of its capacity, counted along every path. Equal to `multiplier` for a correct packing.
    pub fn achieved_multiplier(&self, topology: &Topology) -> Ratio {
        let net = Network::new(topology, self.reversed);
        let mut load: HashMap<(NodeId, NodeId), u64> = HashMap::new();
        for tree in &self.trees {
            for edge in &tree.edges {
                for (path, trees) in &edge.routes {
                    for hop in path.windows(2) {
                        *load.entry((hop[0], hop[1])).or_default() += trees;
                    }
                }
            }
        }
        let mut worst = Ratio::new(0, 1);
        for &(a, b, c) in &net.arcs {
            if let Some(&l) = load.get(&(a, b)) {
                let r = Ratio::new(l, c);
                if worst.less_than(r) {
                    worst = r;
                }
            }
        }
        worst
    }

    /// Total number of tree classes.
    pub fn classes(&self) -> usize {
        self.trees.len()
    }

    /// Largest number of arcs from a root to a node, over all trees.
    pub fn height(&self) -> usize {
        self.trees.iter().map(tree_height).max().unwrap_or(0)
    }
}

/// Arcs on the longest root-to-node path of a tree.
pub fn tree_height(tree: &Tree) -> usize {
    let mut depth: HashMap<NodeId, usize> = HashMap::from([(tree.root, 0)]);
    let mut height = 0;
    for e in &tree.edges {
        let d = depth[&e.src] + 1;
        depth.insert(e.dst, d);
        height = height.max(d);
    }
    height
}

/// A packed class as a tree over the participants; `routes(x, y, weight)` gives the physical paths
/// of its arc between participant indices `x` and `y`.
fn tree_of(
    class: pack::TreeClass,
    participants: &[NodeId],
    mut routes: impl FnMut(u32, u32, u64) -> Vec<(Vec<NodeId>, u64)>,
) -> Tree {
    Tree {
        root: participants[class.root as usize],
        weight: class.weight,
        edges: class
            .edges
            .iter()
            .map(|&(x, y)| TreeEdge {
                src: participants[x as usize],
                dst: participants[y as usize],
                routes: routes(x, y, class.weight),
            })
            .collect(),
    }
}

/// The logical arcs between participants, numbered by their place in `participants` (the
/// packing's node ids), and that numbering.
#[allow(clippy::type_complexity)]
fn participant_arcs(
    participants: &[NodeId],
    logical: &split::Logical,
) -> (HashMap<NodeId, u32>, Vec<(u32, u32, u64)>) {
    let index: HashMap<NodeId, u32> = participants
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, i as u32))
        .collect();
    let arcs = logical
        .arcs
        .iter()
        .map(|a| (index[&a.tail], index[&a.head], a.capacity))
        .collect();
    (index, arcs)
}

/// Builds the optimal (or `trees`-fixed) packing of spanning trees for `request` on `topology`.
pub fn plan(topology: &Topology, request: &ForestRequest) -> Result<Forest, Error> {
    let net = Network::new(topology, request.reversed);
    let participants = &request.participants;
    let demand = match &request.roots {
        Some(roots) => Demand {
            roots: roots.clone(),
            participants: participants.clone(),
        },
        None => Demand::all(participants),
    };
    let sinks = request.sinks.as_deref().unwrap_or(participants);
    let optimal_rate = rate::optimal_rate(&net, &demand, sinks)?;
    let (k, multiplier) = match request.trees {
        None => {
            let (k, u) = rate::trees_for(optimal_rate, net.capacity_gcd());
            if k > MAX_TREES {
                return Err(Error::input(format!(
                    "the optimal packing needs {k} trees per NPU on {} (more than {MAX_TREES}); \
                     give --trees K for the best rate K trees allow",
                    topology.name()
                )));
            }
            (k, u)
        }
        Some(0) => return Err(Error::input("--trees must be at least 1")),
        Some(k) if k > MAX_TREES => {
            let (optimal, _) = rate::trees_for(optimal_rate, net.capacity_gcd());
            return Err(Error::input(format!(
                "--trees {k}: at most {MAX_TREES} trees per NPU (the packing's tree classes, and \
                 its time, grow faster than the trees); the optimal rate needs {optimal} on {}",
                topology.name()
            )));
        }
        Some(k) => (k, rate::fixed_k_multiplier(&net, &demand, sinks, k)),
    };
    let n = participants.len();
    let packed_on = |logical: &split::Logical, trust: Option<pack::Trust>| {
        let (index, arcs) = participant_arcs(participants, logical);
        let roots: Vec<(u32, u64)> = demand.roots.iter().map(|r| (index[r], k)).collect();
        let classes = match trust {
            Some(trust) => pack::pack_with(n, &arcs, &roots, trust),
            None => pack::pack(n, &arcs, &roots),
        }?;
        debug_assert_eq!(pack::verify(n, &arcs, &classes), Ok(()));
        Ok::<_, Error>((index, classes))
    };
    // The quick way first: switches split without tests and trees grown without tests, valid
    // whenever every tree spans; where one cannot, the exact construction. Without nodes to
    // split, both splittings are the same and `pack` starts with the untested packing anyway.
    let quick = (net.nodes as usize > n)
        .then(|| split::remove_switches_unchecked(&net, &demand, k, multiplier).ok())
        .flatten()
        .and_then(|logical| {
            let packed = packed_on(&logical, Some(pack::Trust::Capacity)).ok()?;
            Some((logical, packed))
        });
    let (logical, (index, classes)) = match quick {
        Some(done) => done,
        None => {
            let logical = split::remove_switches(&net, &demand, k, multiplier)?;
            let packed = packed_on(&logical, None)?;
            (logical, packed)
        }
    };
    // Hand each tree arc the physical paths of as many units of its logical arc as it uses.
    let mut bundles: HashMap<(u32, u32), split::Bundles> = logical
        .arcs
        .into_iter()
        .map(|a| ((index[&a.tail], index[&a.head]), a.bundles))
        .collect();
    let trees = classes
        .into_iter()
        .map(|class| {
            tree_of(class, participants, |x, y, weight| {
                split::take_units(
                    bundles
                        .get_mut(&(x, y))
                        .expect("tree arcs are logical arcs"),
                    weight,
                )
                .into_iter()
                .map(|(p, units)| (logical.paths.get(p).to_vec(), units))
                .collect()
            })
        })
        .collect();
    Ok(Forest {
        participants: participants.clone(),
        roots: demand.roots,
        k,
        multiplier,
        optimal_rate,
        unit_bps: net.unit_bps,
        reversed: request.reversed,
        rounded: net.rounded,
        reduce_broadcast: false,
        trees,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the packing of an all-gather on `topology` at its optimal rate starts from: the
    /// participants, the logical arcs `remove` leaves (exact or untested splitting), every
    /// participant's `k` trees to root, and `k`.
    #[allow(clippy::type_complexity)]
    fn all_gather_packing(
        topology: &Topology,
        remove: fn(&Network, &Demand, u64, Ratio) -> Result<split::Logical, Error>,
    ) -> (usize, Vec<(u32, u32, u64)>, Vec<(u32, u64)>, u64) {
        let (participants, logical, k) = split::split_for_all_gather(topology, remove);
        let (_, arcs) = participant_arcs(&participants, &logical);
        let roots: Vec<(u32, u64)> = (0..participants.len() as u32).map(|r| (r, k)).collect();
        (participants.len(), arcs, roots, k)
    }

    /// Trusting the pool is a shortcut, never a different answer. On the 2 x 16 MI250 fabric a
    /// run that trusts it strands a class part-way (an arc it took without a flow broke the
    /// condition), and `pack` then returns the exact packing, which is valid.
    #[test]
    fn a_failed_trusting_run_falls_back_to_the_exact_packing() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/mi250_2x16.yml");
        let topology = crate::topology::load_topology_file(&path).unwrap();
        let (n, arcs, roots, _) = all_gather_packing(&topology, split::remove_switches);
        assert!(pack::pack_with(n, &arcs, &roots, pack::Trust::Pool).is_err());
        let classes = pack::pack(n, &arcs, &roots).unwrap();
        pack::verify(n, &arcs, &classes).unwrap();
    }

    /// On a 4 x 4 grid of switches, classes grown a layer at a time without tests strand (the
    /// arcs into the nodes they miss spent by earlier classes) until exchanges hand them arcs;
    /// the untested splitting and packing then complete, and the packing is valid.
    #[test]
    fn exchanges_complete_the_untested_packing_of_a_switch_grid() {
        let mut options = crate::topology::TopologyOptions::new("dims:switch4,switch4");
        options.bandwidth = Some("100GB/s".to_string());
        let topology = options.build().unwrap();
        let (n, arcs, roots, k) = all_gather_packing(&topology, split::remove_switches_unchecked);
        let classes = pack::pack_with(n, &arcs, &roots, pack::Trust::Capacity).unwrap();
        pack::verify(n, &arcs, &classes).unwrap();
        assert_eq!(classes.iter().map(|c| c.weight).sum::<u64>(), k * n as u64);
    }
}
