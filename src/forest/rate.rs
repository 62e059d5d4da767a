//! Integer capacities and the exact optimal spreading rate (ForestColl §2.1, Theorem 1).
//!
//! Every root spreads its data at rate `x` to every participant; the best `x` is
//! `x* = min B+(S) / |S ∩ roots|` over node sets `S` that hold a root and miss a participant. With
//! integer capacities `x*` is a fraction whose denominator is at most the number of roots, so it is
//! found exactly: Dinkelbach's iteration tests a candidate `x = p/q` by max-flow (capacities scaled
//! by `q`, a super source feeding every root `p`; every participant must receive `|roots| p`) and a
//! failing participant's minimum cut gives a strictly smaller candidate. All arithmetic is integer.

use rayon::prelude::*;

use crate::flow::{Cap, FlowNetwork};
use crate::topology::{NodeId, Topology};
use crate::Error;

/// Largest normalised link capacity. Keeping capacities below this (with tens of thousands of roots
/// and links) keeps every scaled capacity and flow sum far inside `i64`.
const MAX_CAPACITY: u64 = 1 << 20;

/// A non-negative fraction in lowest terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    pub num: u64,
    pub den: u64,
}

impl Ratio {
    pub fn new(num: u64, den: u64) -> Ratio {
        assert!(den > 0, "a fraction needs a positive denominator");
        let g = gcd(num, den).max(1);
        Ratio {
            num: num / g,
            den: den / g,
        }
    }

    /// True when `self < other`, exactly.
    pub fn less_than(self, other: Ratio) -> bool {
        (self.num as u128) * (other.den as u128) < (other.num as u128) * (self.den as u128)
    }

    pub fn as_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

pub fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The topology as a directed graph with integer capacities proportional to link bandwidth, in
/// its own direction or reversed (reduce-scatter and reduce spread on the transposed network).
#[derive(Clone, Debug)]
pub struct Network {
    pub nodes: u32,
    /// `(tail, head, capacity)` per topology link, in link order (reversed if `reversed`).
    pub arcs: Vec<(NodeId, NodeId, u64)>,
    /// Bytes per second that one unit of capacity stands for.
    pub unit_bps: f64,
    pub reversed: bool,
    /// True when the bandwidths had to be rounded to fit integer capacities (exotic ratios).
    pub rounded: bool,
}

impl Network {
    /// Capacities are the bandwidths divided by their greatest common divisor (in B/s, or mB/s
    /// when some bandwidth is fractional), so `300GB/s` and `25GB/s` become 12 and 1. Ratios too
    /// large for `MAX_CAPACITY` are rounded, and `rounded` says so.
    pub fn new(topology: &Topology, reversed: bool) -> Network {
        let bps: Vec<f64> = topology
            .links()
            .iter()
            .map(|l| l.bandwidth.as_bytes_per_sec())
            .collect();
        let integral = |scale: f64| {
            bps.iter().all(|&b| {
                let v = b * scale;
                v < 9.0e15 && (v - v.round()).abs() <= 1e-6 * v.max(1.0)
            })
        };
        let scale = [1.0, 1e3, 1e6].into_iter().find(|&s| integral(s));
        let (mut caps, mut unit_bps, mut rounded) = match scale {
            Some(scale) => {
                let ints: Vec<u64> = bps.iter().map(|&b| (b * scale).round() as u64).collect();
                let g = ints.iter().copied().fold(0, gcd).max(1);
                (
                    ints.iter().map(|&v| v / g).collect::<Vec<u64>>(),
                    g as f64 / scale,
                    false,
                )
            }
            None => (Vec::new(), 0.0, true),
        };
        let largest = caps.iter().copied().max().unwrap_or(0);
        if scale.is_none() || largest > MAX_CAPACITY {
            let max_bps = bps.iter().copied().fold(0.0, f64::max);
            unit_bps = max_bps / MAX_CAPACITY as f64;
            caps = bps
                .iter()
                .map(|&b| ((b / unit_bps).round() as u64).max(1))
                .collect();
            let g = caps.iter().copied().fold(0, gcd).max(1);
            caps.iter_mut().for_each(|c| *c /= g);
            unit_bps *= g as f64;
            rounded = true;
        }
        let arcs = topology
            .links()
            .iter()
            .zip(caps)
            .map(|(l, c)| {
                if reversed {
                    (l.dst, l.src, c)
                } else {
                    (l.src, l.dst, c)
                }
            })
            .collect();
        Network {
            nodes: topology.nodes(),
            arcs,
            unit_bps,
            reversed,
            rounded,
        }
    }

    /// Greatest common divisor of all capacities.
    pub fn capacity_gcd(&self) -> u64 {
        self.arcs.iter().map(|a| a.2).fold(0, gcd)
    }

    /// Capacity into and out of each node.
    fn degrees(&self) -> (Vec<u64>, Vec<u64>) {
        let mut inward = vec![0u64; self.nodes as usize];
        let mut outward = vec![0u64; self.nodes as usize];
        for &(a, b, c) in &self.arcs {
            outward[a as usize] += c;
            inward[b as usize] += c;
        }
        (inward, outward)
    }

    /// The flow network of the links plus a super source (the last node) with an arc to every
    /// root; returns it with the source arcs' ids.
    pub(crate) fn flow_network(&self, roots: &[NodeId]) -> (FlowNetwork, Vec<u32>) {
        let mut net = FlowNetwork::new(self.nodes as usize + 1);
        for &(a, b, c) in &self.arcs {
            net.add_arc(a, b, c as Cap);
        }
        let source = self.nodes;
        let feeds = roots.iter().map(|&r| net.add_arc(source, r, 0)).collect();
        (net, feeds)
    }
}

/// Who spreads data to whom: every root sends its own data to every participant.
#[derive(Clone, Debug)]
pub struct Demand {
    pub roots: Vec<NodeId>,
    pub participants: Vec<NodeId>,
}

impl Demand {
    /// All-gather and reduce-scatter: every participant is a root.
    pub fn all(participants: &[NodeId]) -> Demand {
        Demand {
            roots: participants.to_vec(),
            participants: participants.to_vec(),
        }
    }

    /// Broadcast and reduce: one root.
    pub fn rooted(root: NodeId, participants: &[NodeId]) -> Demand {
        Demand {
            roots: vec![root],
            participants: participants.to_vec(),
        }
    }
}

/// The optimal spreading rate per root, in capacity units, exactly. `sinks` are the participants
/// whose cuts are checked (all of them, or one per symmetry class).
pub fn optimal_rate(net: &Network, demand: &Demand, sinks: &[NodeId]) -> Result<Ratio, Error> {
    optimal_rate_counted(net, demand, sinks, None)
}

/// [`optimal_rate`], counting each max-flow it runs (one per sink, more where a cut lowers the
/// rate) in `progress`.
pub fn optimal_rate_counted(
    net: &Network,
    demand: &Demand,
    sinks: &[NodeId],
    progress: Option<&crate::report::Steps>,
) -> Result<Ratio, Error> {
    let roots = demand.roots.len() as u64;
    let is_root = membership(net.nodes, &demand.roots);
    let (inward, outward) = net.degrees();
    // Start from the cuts around single nodes: a root alone (it misses a sink), and everything
    // but one sink.
    let mut x: Option<Ratio> = None;
    let mut consider = |r: Ratio| {
        if x.is_none_or(|best| r.less_than(best)) {
            x = Some(r);
        }
    };
    for &r in &demand.roots {
        if sinks.iter().any(|&v| v != r) {
            consider(Ratio::new(outward[r as usize], 1));
        }
    }
    for &v in sinks {
        let holding = roots - is_root[v as usize] as u64;
        if holding > 0 {
            consider(Ratio::new(inward[v as usize], holding));
        }
    }
    let mut x = x.ok_or_else(|| Error::input("the collective has no roots to spread from"))?;
    if x.num == 0 {
        return Err(Error::input(
            "a participant cannot send or receive at all: no tree can reach it",
        ));
    }
    let (template, feeds) = net.flow_network(&demand.roots);
    let source = net.nodes;
    let mut pending: &[NodeId] = sinks;
    loop {
        let mut flow_net = template.clone();
        for (arc, &(_, _, c)) in net.arcs.iter().enumerate() {
            flow_net.set_capacity(2 * arc as u32, (c * x.den) as Cap);
        }
        for &f in &feeds {
            flow_net.set_capacity(f, x.num as Cap);
        }
        let need = (roots * x.num) as Cap;
        let failure = pending
            .par_iter()
            .enumerate()
            .map_init(
                || flow_net.clone(),
                |fnet, (i, &sink)| {
                    let flow = fnet.max_flow(&[source], &[sink], need);
                    if let Some(steps) = progress {
                        steps.step();
                    }
                    if flow >= need {
                        return None;
                    }
                    Some((i, fnet.source_side(&[source])))
                },
            )
            .find_map_first(|r| r);
        let Some((i, side)) = failure else {
            return Ok(x);
        };
        let leaving: u64 = net
            .arcs
            .iter()
            .filter(|&&(a, b, _)| side[a as usize] && !side[b as usize])
            .map(|a| a.2)
            .sum();
        let holding = demand.roots.iter().filter(|&&r| side[r as usize]).count() as u64;
        let better = Ratio::new(leaving, holding.max(1));
        assert!(
            better.less_than(x),
            "a failing participant's minimum cut is a tighter ratio"
        );
        x = better;
        pending = &pending[i..];
    }
}

/// The trees per root `k` and the capacity multiplier `U = k / x*` of the optimal packing
/// (ForestColl Proposition 3): the smallest `k` for which every link capacity times `U` is whole.
pub fn trees_for(rate: Ratio, capacity_gcd: u64) -> (u64, Ratio) {
    let g = gcd(rate.num, capacity_gcd).max(1);
    let k = rate.num / g;
    (k, Ratio::new(rate.den, g))
}

/// For a fixed `k` trees per root (ForestColl §2.4): the smallest multiplier `U` such that the
/// capacities `floor(c U)` carry `k` trees from every root, and the rate `k / U` it allows.
pub fn fixed_k_multiplier(net: &Network, demand: &Demand, sinks: &[NodeId], k: u64) -> Ratio {
    let roots = demand.roots.len() as u64;
    let (template, feeds) = net.flow_network(&demand.roots);
    let source = net.nodes;
    let feasible = |u: Ratio| -> bool {
        let mut flow_net = template.clone();
        for (arc, &(_, _, c)) in net.arcs.iter().enumerate() {
            let scaled = (c as u128 * u.num as u128 / u.den as u128) as Cap;
            flow_net.set_capacity(2 * arc as u32, scaled);
        }
        for &f in &feeds {
            flow_net.set_capacity(f, k as Cap);
        }
        let need = (roots * k) as Cap;
        sinks
            .par_iter()
            .map_init(
                || flow_net.clone(),
                |fnet, &sink| fnet.max_flow(&[source], &[sink], need) >= need,
            )
            .all(|ok| ok)
    };
    // U = roots k suffices: every capacity then carries the whole demand of any cut. Both ends of
    // the search are breakpoints (U where some c U is whole): capacities floor(c U) only change
    // there, so the optimum is the first feasible breakpoint.
    let mut caps: Vec<u64> = net.arcs.iter().map(|a| a.2).collect();
    caps.sort_unstable();
    caps.dedup();
    let mut lo = Ratio::new(0, 1);
    let mut hi = Ratio::new(roots * k, 1);
    loop {
        // The breakpoints nearest the middle of (lo, hi), above and at-or-below it.
        let mid_num = lo.num as u128 * hi.den as u128 + hi.num as u128 * lo.den as u128;
        let mid_den = 2 * lo.den as u128 * hi.den as u128;
        let mut above: Option<Ratio> = None;
        let mut below: Option<Ratio> = None;
        for &c in &caps {
            let whole = mid_num * c as u128 / mid_den;
            let up = Ratio::new(whole as u64 + 1, c);
            if above.is_none_or(|a| up.less_than(a)) {
                above = Some(up);
            }
            let down = Ratio::new(whole as u64, c);
            if below.is_none_or(|b| b.less_than(down)) {
                below = Some(down);
            }
        }
        let inside = |r: &Ratio| lo.less_than(*r) && r.less_than(hi);
        let Some(probe) = above.filter(inside).or(below.filter(inside)) else {
            return hi;
        };
        if feasible(probe) {
            hi = probe;
        } else {
            lo = probe;
        }
    }
}

fn membership(nodes: u32, members: &[NodeId]) -> Vec<bool> {
    let mut v = vec![false; nodes as usize + 1];
    for &m in members {
        v[m as usize] = true;
    }
    v
}
