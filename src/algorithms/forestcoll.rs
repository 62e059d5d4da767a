//! ForestColl: every root's data flows down its optimal spanning trees, pipelined, each tree arc
//! on exactly the physical path the packing gave it (see [`crate::forest`]).
//!
//! All-gather spreads on the network as it is; reduce-scatter packs the trees on the transposed
//! network and runs them backwards, reducing on the way in; all-reduce is reduce-scatter then
//! all-gather, each piece's gather starting as soon as it is reduced. Broadcast and reduce pack
//! trees from the root alone. A class of `w` identical trees carries `w / k` of its root's data,
//! cut into `slices` pieces per tree that follow one another down the tree; list order is slice by
//! slice, so the first slices of every tree lead and the links stay fed.

use super::builder::Builder;
use crate::bound;
use crate::collective::{Collective, CollectiveKind};
use crate::forest::{self, Forest, ForestRequest, Tree};
use crate::schedule::{Op, Schedule, TransferIndex};
use crate::topology::{NodeId, Topology};
use crate::units::Time;
use crate::Error;

/// Plans the trees (`trees` per root, or the optimal number) and builds the schedule with
/// `slices` pieces per tree (None: [`default_slices`]); returns it with the slices used.
pub fn produce(
    topology: &Topology,
    c: &Collective,
    trees: Option<u64>,
    slices: Option<u32>,
) -> Result<(Schedule, u32), Error> {
    if let Some(plan) = reduce_broadcast_plan(topology, c, trees)? {
        let slices = slices.unwrap_or_else(|| reduce_broadcast_slices(topology, c, &plan));
        return Ok((generate_reduce_broadcast(c, &plan, slices)?, slices));
    }
    let forests = forests(topology, c, trees)?;
    let slices = slices.unwrap_or_else(|| default_slices(topology, c, &forests));
    Ok((generate(c, &forests, slices)?, slices))
}

/// For an all-reduce without `--trees`, the reduce-then-broadcast trees when they are more than
/// 1% faster than reduce-scatter then all-gather at their optimal rates (never on networks whose
/// NPUs are all alike, where both reach the bound). The two phases are compared by rate alone,
/// worked out only where the trees apply, and neither packing is made unless it is used.
pub fn reduce_broadcast_plan(
    topology: &Topology,
    c: &Collective,
    trees: Option<u64>,
) -> Result<Option<Forest>, Error> {
    if c.kind != CollectiveKind::AllReduce
        || trees.is_some()
        || bound::symmetry_representatives(topology).len() == 1
    {
        return Ok(None);
    }
    let two_phases = || {
        let demand = forest::Demand::all(&c.npus);
        let sinks = spreading_sinks(topology, c).unwrap_or_else(|| c.npus.clone());
        let mut per_byte = 0.0;
        for reversed in [true, false] {
            let net = forest::Network::new(topology, reversed);
            let rate = forest::rate::optimal_rate(&net, &demand, &sinks)?;
            per_byte += 1.0 / (c.ranks() as f64 * rate.as_f64() * net.unit_bps);
        }
        Ok(Some(0.99 * per_byte))
    };
    forest::reduce_broadcast::plan(topology, &c.npus, two_phases)
}

/// The participants whose cuts an every-NPU spreading checks: one per symmetry class when the
/// collective covers the network's active NPUs; None for all of them.
fn spreading_sinks(topology: &Topology, c: &Collective) -> Option<Vec<NodeId>> {
    (c.npus.len() == topology.active_npus().len())
        .then(|| bound::symmetry_representatives(topology))
}

/// The packings a collective needs, in the order they run: reduce-scatter (on the transposed
/// network) before all-gather for all-reduce.
pub fn forests(
    topology: &Topology,
    c: &Collective,
    trees: Option<u64>,
) -> Result<Vec<Forest>, Error> {
    let request = |reversed: bool, rooted: bool| ForestRequest {
        participants: c.npus.clone(),
        roots: rooted.then(|| vec![c.root()]),
        reversed,
        trees,
        sinks: if rooted {
            None
        } else {
            spreading_sinks(topology, c)
        },
    };
    let plans = match c.kind {
        CollectiveKind::AllGather => vec![request(false, false)],
        CollectiveKind::ReduceScatter => vec![request(true, false)],
        CollectiveKind::AllReduce => vec![request(true, false), request(false, false)],
        CollectiveKind::Broadcast => vec![request(false, true)],
        CollectiveKind::Reduce => vec![request(true, true)],
        other => return Err(super::Algorithm::ForestColl.refusal(other)),
    };
    plans.iter().map(|r| forest::plan(topology, r)).collect()
}

/// Pieces per tree when the user gives no `--chunks`: enough that a piece's trip down the deepest
/// tree (its serialisation on every hop of every path) costs `TARGET_OVERHEAD` of the spreading
/// time, at most `MAX_SLICES`, and fewer when the schedule would pass `TRANSFER_BUDGET` transfers.
/// Queueing behind other trees' pieces makes the real drain 0.4 to 2.7 times that estimate on
/// the networks of the tests (A100 and MI250 boxes, 3D-RFS, tori, meshes, rings), so 0.6% keeps
/// the pipeline's fill and drain within about 2% of the bound. The budget binds on 1024-NPU
/// fabrics: at 16M transfers Themis's switch hierarchies get 1-10 pieces per tree, 0.77-0.98 of
/// the bound at 1 GB in 13-39 s and at most 2 GB (at 4M, a quarter as many: 0.56-0.95).
pub fn default_slices(topology: &Topology, c: &Collective, forests: &[Forest]) -> u32 {
    let shard = c.size as f64 / c.ranks() as f64;
    let mut slices = 1u32;
    let mut arcs = 0.0f64;
    for f in forests {
        arcs += f
            .trees
            .iter()
            .map(|t| t.edges.iter().map(|e| e.routes.len()).sum::<usize>())
            .sum::<usize>() as f64;
    }
    for f in forests {
        let spread = f.seconds_for(shard);
        let piece_trip = deepest_trip(topology, &f.trees, f.reversed, shard / f.k as f64);
        slices = slices.max(slices_for(piece_trip, spread, arcs));
    }
    slices
}

const TARGET_OVERHEAD: f64 = 0.006;
const TRANSFER_BUDGET: f64 = 16e6;
const MAX_SLICES: f64 = 512.0;

/// [`default_slices`] for reduce-then-broadcast: a piece's trip is up the deepest tree and down.
pub fn reduce_broadcast_slices(topology: &Topology, c: &Collective, plan: &Forest) -> u32 {
    let spread = plan.seconds_for(c.size as f64);
    let piece_trip =
        2.0 * deepest_trip(topology, &plan.trees, false, c.size as f64 / plan.k as f64);
    let arcs = 2.0 * plan.trees.iter().map(|t| t.edges.len()).sum::<usize>() as f64;
    slices_for(piece_trip, spread, arcs)
}

/// Slices per tree that keep a piece's `trip` within `TARGET_OVERHEAD` of `spread`, capped.
fn slices_for(trip: f64, spread: f64, arcs: f64) -> u32 {
    let slices = (trip / (TARGET_OVERHEAD * spread)).ceil();
    let affordable = (TRANSFER_BUDGET / arcs.max(1.0)).floor().max(1.0);
    slices.min(MAX_SLICES).min(affordable).max(1.0) as u32
}

/// Seconds for one tree's share of a root's data (`bytes`, times the trees sharing a path) to
/// cross the slowest root-to-node chain of paths of `trees`, hop by hop.
fn deepest_trip(topology: &Topology, trees: &[Tree], reversed: bool, bytes: f64) -> f64 {
    let seconds = |path: &[NodeId], trees: u64| -> f64 {
        let bytes = bytes * trees as f64;
        path.windows(2)
            .map(|hop| {
                let (a, b) = if reversed {
                    (hop[1], hop[0])
                } else {
                    (hop[0], hop[1])
                };
                let link = topology.link(
                    topology
                        .link_between(a, b)
                        .expect("tree paths follow links"),
                );
                bytes / link.bandwidth.as_bytes_per_sec()
            })
            .sum()
    };
    let mut worst = 0.0f64;
    for tree in trees {
        let mut reach: std::collections::HashMap<NodeId, f64> =
            std::collections::HashMap::from([(tree.root, 0.0)]);
        for e in &tree.edges {
            let slowest = e
                .routes
                .iter()
                .map(|(p, trees)| seconds(p, *trees))
                .fold(0.0, f64::max);
            let t = reach[&e.src] + slowest;
            worst = worst.max(t);
            reach.insert(e.dst, t);
        }
    }
    worst
}

/// The schedule of `c` along `forests` (from [`forests`]), each tree's data in `slices` pieces.
pub fn generate(c: &Collective, forests: &[Forest], slices: u32) -> Result<Schedule, Error> {
    // One piece layout for every phase: units of data per root divisible by every phase's k.
    let units = forests
        .iter()
        .map(|f| f.k)
        .fold(1u64, |a, k| a / forest::rate::gcd(a, k) * k);
    let per_rank = units
        .checked_mul(slices as u64)
        .filter(|&p| p <= u32::MAX as u64 / c.ranks().max(1) as u64)
        .ok_or_else(|| {
            Error::input(format!(
                "forestcoll: {units} units x {slices} slices per NPU are too many pieces; give \
                 fewer --chunks or --trees"
            ))
        })?;
    let refined = Collective {
        chunks: per_rank as u32,
        ..c.clone()
    };
    if c.size < refined.piece_count() as u64 {
        return Err(Error::input(format!(
            "forestcoll: size {} B cannot be cut into {} pieces ({units} tree units x {slices} \
             slices per NPU); give a larger size or fewer --chunks",
            c.size,
            refined.piece_count()
        )));
    }
    let rank_of = c.ranks_by_npu();
    let mut b = Builder::new(&refined)?;
    let shard = match c.kind {
        CollectiveKind::Broadcast | CollectiveKind::Reduce => c.size as f64,
        _ => c.size as f64 / c.ranks() as f64,
    };
    // Injections (a root's sends down its trees, a leaf's sends up them, in the first phase) and
    // a later phase's first sends depend on little or no data: left alone they would all queue at
    // once and hold forwarded pieces back behind a whole shard, or crowd the previous phase.
    // Phase p releases slice s at (earlier phases' spreading time) + s/slices of its own, through
    // a chain of waits per NPU, so that every link is shared at the packing's rates.
    let mut offset = 0.0f64;
    for f in forests {
        let per_unit = units / f.k;
        let gather = !f.reversed;
        let spread = f.seconds_for(shard);
        let start = Time::from_ps((offset * 1e12) as u64);
        let pace = Time::from_ps((spread / slices as f64 * 1e12) as u64);
        offset += spread;
        let mut pacer = Pacer::new(start, pace);
        let has_children: Vec<std::collections::HashSet<NodeId>> = f
            .trees
            .iter()
            .map(|t| t.edges.iter().map(|e| e.src).collect())
            .collect();
        for s in 0..slices {
            let mut unit_start: std::collections::HashMap<NodeId, u64> = Default::default();
            for (ti, tree) in f.trees.iter().enumerate() {
                let first = unit_start.entry(tree.root).or_insert(0);
                let (lo_unit, hi_unit) = (*first, *first + tree.weight);
                *first = hi_unit;
                // Pieces of this slice of this class within the root's block: slice-major.
                let block = match c.kind {
                    CollectiveKind::Broadcast | CollectiveKind::Reduce => 0,
                    _ => rank_of[&tree.root] as u64 * per_rank,
                };
                let base = block + s as u64 * units;
                let edges: Box<dyn Iterator<Item = &forest::TreeEdge>> = if gather {
                    Box::new(tree.edges.iter())
                } else {
                    Box::new(tree.edges.iter().rev())
                };
                for edge in edges {
                    let (from, to) = if gather {
                        (edge.src, edge.dst)
                    } else {
                        (edge.dst, edge.src)
                    };
                    let injection = if gather {
                        from == tree.root
                    } else {
                        !has_children[ti].contains(&from)
                    };
                    let after = if injection {
                        pacer.release(&mut b, rank_of[&from], s)
                    } else {
                        Vec::new()
                    };
                    let mut offset = lo_unit;
                    for (path, trees) in &edge.routes {
                        let lo = (base + offset * per_unit) as u32;
                        let hi = (base + (offset + trees) * per_unit) as u32;
                        offset += trees;
                        let (op, route): (Op, Vec<NodeId>) = if gather {
                            (Op::Copy, path.clone())
                        } else {
                            (Op::Reduce, path.iter().rev().copied().collect())
                        };
                        b.send_routed(rank_of[&from], rank_of[&to], (lo, hi), op, &route, &after);
                    }
                    debug_assert_eq!(offset, hi_unit);
                }
            }
        }
    }
    Ok(b.finish())
}

/// Holds each NPU's injections back so that slice `s` leaves at `start + s pace`: per NPU a chain
/// of waits, the first lasting `start` (none when it is zero), each later one `pace`.
struct Pacer {
    start: Time,
    pace: Time,
    chains: std::collections::HashMap<u32, Vec<TransferIndex>>,
}

impl Pacer {
    fn new(start: Time, pace: Time) -> Pacer {
        Pacer {
            start,
            pace,
            chains: Default::default(),
        }
    }

    /// What an injection of slice `s` from `rank` must wait for.
    fn release(&mut self, b: &mut Builder, rank: u32, s: u32) -> Vec<TransferIndex> {
        if s == 0 && self.start == Time::ZERO {
            return Vec::new();
        }
        let chain = self.chains.entry(rank).or_default();
        let skip = usize::from(self.start == Time::ZERO);
        while chain.len() + skip <= s as usize {
            let previous: Vec<TransferIndex> = chain.last().copied().into_iter().collect();
            let duration = if chain.is_empty() && skip == 0 {
                self.start
            } else {
                self.pace
            };
            chain.push(b.wait(rank, duration, &previous));
        }
        vec![chain[s as usize - skip]]
    }
}

/// The schedule of an all-reduce along reduce-then-broadcast trees: each tree class's part of
/// every slice is reduced up the tree (a node sends once all its children's parts are in) and
/// broadcast back down; leaves release slice `s` at `s / slices` of the whole time.
pub fn generate_reduce_broadcast(
    c: &Collective,
    plan: &Forest,
    slices: u32,
) -> Result<Schedule, Error> {
    let units = plan.k * slices as u64;
    let ranks = c.ranks().max(1) as u64;
    let pieces = units / forest::rate::gcd(units, ranks) * ranks;
    if pieces > u32::MAX as u64 || c.size < pieces {
        return Err(Error::input(format!(
            "forestcoll: size {} B cannot be cut into {pieces} pieces ({} trees x {slices} \
             slices); give a larger size or fewer --chunks",
            c.size, plan.k
        )));
    }
    let per_unit = pieces / units;
    let refined = Collective {
        chunks: (pieces / ranks) as u32,
        ..c.clone()
    };
    let rank_of = c.ranks_by_npu();
    let mut b = Builder::new(&refined)?;
    let total = plan.seconds_for(c.size as f64);
    let pace = Time::from_ps((total / slices as f64 * 1e12) as u64);
    let mut pacer = Pacer::new(Time::ZERO, pace);
    let parents: Vec<std::collections::HashSet<NodeId>> = plan
        .trees
        .iter()
        .map(|t| t.edges.iter().map(|e| e.src).collect())
        .collect();
    for s in 0..slices {
        let mut unit = s as u64 * plan.k;
        for (tree, parents) in plan.trees.iter().zip(&parents) {
            let range = (
                (unit * per_unit) as u32,
                ((unit + tree.weight) * per_unit) as u32,
            );
            unit += tree.weight;
            for edge in tree.edges.iter().rev() {
                let (child, parent) = (rank_of[&edge.dst], rank_of[&edge.src]);
                let after = if parents.contains(&edge.dst) {
                    Vec::new()
                } else {
                    pacer.release(&mut b, child, s)
                };
                let route = [edge.dst, edge.src];
                b.send_routed(child, parent, range, Op::Reduce, &route, &after);
            }
            for edge in &tree.edges {
                let route = [edge.src, edge.dst];
                let (parent, child) = (rank_of[&edge.src], rank_of[&edge.dst]);
                b.send_routed(parent, child, range, Op::Copy, &route, &[]);
            }
        }
    }
    Ok(b.finish())
}
