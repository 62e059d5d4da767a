//! The time-expanded network (the paper's TEN): the step length, each link's span and busy
//! steps, and the fastest paths in steps between NPUs.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::synth::greedy::Problem;
use crate::synth::network::Network;
use crate::units::Time;

/// The time-expanded network: the step length and each link's span and busy steps.
pub(super) struct Ten {
    pub(super) step: Time,
    pub(super) span: Vec<u32>,
    pub(super) busy: Vec<u32>,
}

impl Ten {
    /// The time-expanded network with steps of `step`: delays within [`ROUNDING`] of a whole
    /// number of steps round down (a hop 0.6% over a step does not take two).
    pub(super) fn with_step(delays: &[(Time, Time)], step: u64) -> Ten {
        let step = step.max(1);
        let steps = |t: Time| {
            let exact = t.ps() as f64 / step as f64;
            ((exact - ROUNDING).ceil() as u32).max(1)
        };
        let span: Vec<u32> = delays.iter().map(|d| steps(d.1)).collect();
        let busy = delays
            .iter()
            .zip(&span)
            .map(|(d, &s)| steps(d.0).min(s))
            .collect();
        Ten {
            step: Time::from_ps(step),
            span,
            busy,
        }
    }

    /// Discretisations worth solving, coarsest first. The paper's: the fastest link's hop is a
    /// step, and a link is busy for whole hops (exact when latency is negligible). A finer one,
    /// when latency is not: a fraction of the fastest link's serialisation, fine enough that
    /// every link's serialisation and hop are within 10% of whole steps (at most
    /// [`MAX_SUBSTEPS`] per serialisation), so links start new chunks while earlier ones are in
    /// flight.
    pub(super) fn candidates(net: &Network, bytes: u64) -> Vec<Ten> {
        let delays: Vec<(Time, Time)> = (0..net.links.len() as u32)
            .map(|l| net.delays(l, bytes))
            .collect();
        let min = |f: fn(&(Time, Time)) -> Time| {
            delays
                .iter()
                .map(f)
                .filter(|t| *t > Time::ZERO)
                .min()
                .map_or(1, Time::ps)
        };
        let coarse = Ten::with_step(&delays, min(|d| d.1));
        let serialisation = min(|d| d.0);
        let close = |ten: &Ten| {
            let within = |steps: u32, t: Time| {
                t.ps() == 0 || (steps as u64 * ten.step.ps()) as f64 <= 1.1 * t.ps() as f64
            };
            delays
                .iter()
                .enumerate()
                .all(|(l, d)| within(ten.busy[l], d.0) && within(ten.span[l], d.1))
        };
        if close(&coarse) {
            return vec![coarse];
        }
        let fine = (1..=MAX_SUBSTEPS)
            .map(|j| Ten::with_step(&delays, serialisation / j as u64))
            .find(|ten| close(ten))
            .unwrap_or_else(|| Ten::with_step(&delays, serialisation / MAX_SUBSTEPS as u64));
        vec![coarse, fine]
    }
}

/// The finest discretisation divides the fastest serialisation into this many steps.
const MAX_SUBSTEPS: u32 = 4;

/// How far past a whole number of steps a delay may be and still round down.
const ROUNDING: f64 = 0.05;

/// Per chunk, per NPU: the step from which the NPU holds the chunk, if it does.
pub(super) type Holdings = Vec<Vec<Option<u32>>>;

/// Steps along the fastest path between every pair of NPUs (`u32::MAX`: unreachable), per group
/// of NPUs a chunk may visit (a communicator's chunks never leave it). The integer program is for
/// small networks, so full matrices are fine.
pub(super) struct Distances {
    pub(super) per_group: Vec<Vec<Vec<u32>>>,
}

impl Distances {
    pub(super) fn of(net: &Network, ten: &Ten, p: &Problem) -> Distances {
        let per_group = p
            .groups
            .iter()
            .map(|members| fastest_paths(net, ten, &|v| members.wants(v)))
            .collect();
        Distances { per_group }
    }

    /// The matrix of chunk `c`'s group.
    pub(super) fn chunk(&self, p: &Problem, c: usize) -> &[Vec<u32>] {
        let group = p.chunk_group.get(c).copied().unwrap_or(0) as usize;
        &self.per_group[group]
    }
}

/// All-pairs fastest paths in steps through the NPUs `inside` allows.
pub(super) fn fastest_paths(
    net: &Network,
    ten: &Ten,
    inside: &dyn Fn(u32) -> bool,
) -> Vec<Vec<u32>> {
    let n = net.npus() as usize;
    (0..n)
        .map(|from| {
            let mut dist = vec![u32::MAX; n];
            if !inside(from as u32) {
                return dist;
            }
            let mut heap = BinaryHeap::new();
            dist[from] = 0;
            heap.push(Reverse((0u32, from as u32)));
            while let Some(Reverse((d, u))) = heap.pop() {
                if d > dist[u as usize] {
                    continue;
                }
                for &l in net.out_links(u) {
                    let v = net.links[l as usize].dst;
                    let nd = d + ten.span[l as usize];
                    if inside(v) && nd < dist[v as usize] {
                        dist[v as usize] = nd;
                        heap.push(Reverse((nd, v)));
                    }
                }
            }
            dist
        })
        .collect()
}
