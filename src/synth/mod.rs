//! The TACOS-style synthesizer: topology-aware collective schedules by greedy link-chunk matching
//! over a time-expanded network. A producer of the schedule IR like the baselines; what it
//! produces is validated and simulated like any other schedule.
//!
//! All-gather and broadcast spread chunks forward ([`greedy::run`]). Reduce-scatter and reduce
//! are the same spreading on the transposed network, run backwards in time with reductions.
//! All-reduce is reduce-scatter, then all-gather of each piece from the moment its reduction is
//! done. Several collectives at once are matched together, sharing the links.

mod greedy;
mod hierarchy;
mod ilp;
mod network;
mod rooted;
mod sketch;
mod symmetric;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::algorithms::builder::Builder;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{schedule_rows, CopyRows, Op, Schedule, ScheduleRows, Transfer, ROW_GROUP};
use crate::sim::{self, SimOptions};
use crate::topology::{LinkId, NodeId, Topology};
use crate::units::Time;
use crate::Error;
use greedy::{Holding, Members, Problem, Send, NONE};
use ilp::Deadline;
pub use ilp::{IlpOptions, IlpReport, IlpStatus};
use network::Network;
pub use network::Unwinding;
pub use sketch::Sketch;

/// Trials when the user gives no `--trials` and the plans are small (up to
/// [`KEEP_PLANS_UP_TO`] sends), at least (through switches, exactly): enough to reach the TACOS reference's quality on the
/// reference cases, few enough to stay within a second on a 32x32 mesh with two cores. Smaller
/// problems on point-to-point networks get more, up to [`MAX_DEFAULT_TRIALS`], while all trials together plan no more than
/// [`KEEP_PLANS_UP_TO`] sends (what four trials of the 32x32 mesh plan): on small networks with
/// mixed link latencies one matching differs from the next by a fraction of a chunk's time (an
/// 8x8 mesh of 0.5 us and 1 us lines: 13.75 ms at the first of four trials' best, 13.13 ms, the
/// bound, within sixteen), and more trials cost milliseconds. Larger problems get one trial: on
/// big regular networks the first trial already reaches the ingress bound.
pub const DEFAULT_TRIALS: u32 = 4;

/// The most trials the default gives a small problem ([`DEFAULT_TRIALS`]).
pub const MAX_DEFAULT_TRIALS: u32 = 32;

/// Trials when the user gives none, for a problem of `sends` sends on `net`
/// ([`DEFAULT_TRIALS`]). More than the least only on point-to-point networks, where the
/// estimate that picks the best trial is the simulated time; through unwound switches it only
/// approximates it, and each unwinding would pay for the trials again.
fn default_trials(net: &Network, sends: u64) -> u32 {
    if sends > KEEP_PLANS_UP_TO {
        return 1;
    }
    if !net.is_point_to_point() {
        return DEFAULT_TRIALS;
    }
    (KEEP_PLANS_UP_TO / sends.max(1)).clamp(DEFAULT_TRIALS as u64, MAX_DEFAULT_TRIALS as u64) as u32
}

/// How to synthesize.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    /// Seed of the random choices: the same seed gives the same schedule.
    pub seed: u64,
    /// Independent seeded trials; the fastest (by the synthesizer's estimate) is kept. `None`:
    /// [`DEFAULT_TRIALS`] on small problems, 1 on large ones.
    pub trials: Option<u32>,
    /// How switches are unwound. `None`: splitting and each of [`UNWIND_DEGREES`] are tried (those
    /// the network allows) and the schedule that simulates fastest is kept.
    pub unwinding: Option<Unwinding>,
    /// X-way chunking: every chunk is cut into this many sub-chunks before matching. `None`:
    /// chosen by the synthesizer (see [`synthesize`]).
    pub x_way: Option<u32>,
    /// Greedy matching, or an integer program.
    pub method: Method,
    /// Settings of the integer programs (ignored by greedy matching).
    pub ilp: IlpOptions,
    /// Where a large schedule's rows go while it is being synthesized (see [`ScheduleTap`]).
    pub tap: Option<Arc<dyn ScheduleTap>>,
    /// Where a long synthesis counts the sends it has written (a log's progress lines).
    pub progress: Option<Arc<crate::report::Steps>>,
    /// Simulate (and validate) the one schedule as its sends are planned instead of holding it,
    /// handing its rows and their simulated times to the tap, if any: see [`InOrderRun`].
    pub simulate_in_order: Option<InOrderRun>,
    /// A communication sketch: the links the schedule may use ([`Sketch`]).
    pub sketch: Option<Arc<Sketch>>,
    /// On switch hierarchies, plan one rank's chunk and translate it to every rank
    /// (`symmetric`); off, TACOS's matching over unwound switches runs as the paper has it.
    pub symmetry: bool,
}

/// Simulating a synthesized schedule send by send as the greedy plans it ([`sim::InOrder`]),
/// without holding it: what lets an all-gather past the memory's reach (a 200x200 mesh has 1.6
/// billion transfers, 38 GB held) run at all, and saves the whole-schedule simulation's time
/// elsewhere (it measures the same, a test checks). Taken for one forward collective on networks
/// whose synthesis links are topology links (meshes, tori), and where there is a [`ScheduleTap`],
/// when it takes the rows (as Parquet: it then writes the transfers' times too); elsewhere, or
/// where the simulation refuses the plan, the schedule is built and simulated whole as usual.
#[derive(Clone, Debug)]
pub struct InOrderRun {
    /// The simulation's options: busy intervals are kept where they ask, and each transfer's
    /// times go to the tap with its row.
    pub sim: SimOptions,
    /// Validate the schedule the same way ([`crate::schedule::InOrderCheck`]) against the
    /// collective it claims.
    pub validate: bool,
}

/// What the in-order simulation of a synthesized schedule measured ([`InOrderRun`]).
#[derive(Debug)]
pub struct InOrderSimulation {
    pub result: sim::SimResult,
    /// Transfers simulated: the schedule's length, though it was never held.
    pub transfers: usize,
}

/// Takes the rows of a schedule as the synthesizer writes them, so that a results file can be
/// written on the core the synthesis leaves idle instead of after it. Synthesis may try several
/// schedules and keep one: each begins its own stream, and [`Synthesis::streamed`] names the
/// stream of the schedule kept.
pub trait ScheduleTap: std::marker::Send + Sync + std::fmt::Debug {
    /// A schedule of `rows` transfers claiming `claim` begins: the id of its stream, or `None`
    /// when the tap does not want it. Ends any stream begun before.
    fn begin(&self, rows: usize, claim: &Collective) -> Option<u64>;
    /// The next rows of stream `stream`, in order, with their simulated times where the
    /// schedule is simulated as it is made ([`InOrderRun`]).
    fn rows(&self, stream: u64, rows: ScheduleRows, times: Option<sim::TransferTimes>);
    /// After synthesis: completes `kept`, the stream of the schedule kept, if it is the one in
    /// progress (true), or else abandons whatever was begun (false: the caller writes the
    /// schedule itself).
    fn finish(&self, kept: Option<u64>) -> Result<bool, Error>;
}

impl Default for SynthOptions {
    fn default() -> SynthOptions {
        SynthOptions {
            seed: 1,
            trials: None,
            unwinding: None,
            x_way: None,
            method: Method::Greedy,
            ilp: IlpOptions::default(),
            tap: None,
            progress: None,
            simulate_in_order: None,
            sketch: None,
            symmetry: true,
        }
    }
}

/// How the sends of a spreading problem are planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// TACOS-Greedy: randomised link-chunk matching, the best of several trials.
    Greedy,
    /// TACOS-ILP: the congestion-free optimal integer program over the time-expanded network.
    Ilp,
    /// The TACOS paper's proxy for TACCL: the same program with link congestion ignored while
    /// synthesizing (the simulator then meets it).
    TacclLike,
}

/// A synthesized schedule per collective and the synthesizer's own time estimate.
#[derive(Debug)]
pub struct Synthesis {
    /// One schedule per requested collective, each claiming its collective. Run together they
    /// share the network.
    pub schedules: Vec<Schedule>,
    /// Completion time by the synthesizer's link model. On point-to-point networks it equals the
    /// simulated time of a lone collective; unwound switches and concurrent collectives make the
    /// simulation the judge.
    pub estimate: Time,
    /// What the integer programs did, one report per spreading problem (reduce-scatter, then
    /// all-gather for an all-reduce); empty for greedy synthesis.
    pub ilp: Vec<IlpReport>,
    /// The [`ScheduleTap`] stream that received every row of the one schedule, if any.
    pub streamed: Option<u64>,
    /// The schedule's simulation, where it was simulated as it was synthesized (its
    /// `schedules` are then empty): see [`InOrderRun`].
    pub simulated: Option<InOrderSimulation>,
    /// What the search kept and left out, for the report.
    pub choice: Choice,
}

/// What a synthesis chose where it searched: the unwinding of the switches and the X-way
/// chunking kept, and the unwindings left unsynthesized because the latencies of their logical
/// links alone reach a time already judged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Choice {
    /// The unwinding the schedule was planned on (`None`: no switches to unwind).
    pub unwinding: Option<Unwinding>,
    /// Planned for one rank's chunk and translated to every rank (switch hierarchies).
    pub symmetric: bool,
    /// Planned port by port from the root (rooted collectives on switch hierarchies).
    pub from_root: bool,
    /// Sub-chunks per chunk the matching used.
    pub x_way: Option<u32>,
    /// Unwindings not synthesized, each with its latency floor.
    pub skipped: Vec<(Unwinding, Time)>,
    /// The kept schedule's judged time, which every skipped floor reaches.
    pub beaten_by: Option<Time>,
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.symmetric {
            parts.push("one rank's chunk planned, translated to every rank".to_string());
        }
        if self.from_root {
            parts.push("planned port by port from the root".to_string());
        }
        if let Some(u) = self.unwinding {
            parts.push(format!("{} unwinding", u.name()));
        }
        if let Some(x) = self.x_way {
            parts.push(format!("{x}-way sub-chunks"));
        }
        let mut text = parts.join(", ");
        if let (false, Some(time)) = (self.skipped.is_empty(), self.beaten_by) {
            let floors: Vec<String> = self
                .skipped
                .iter()
                .map(|(u, floor)| format!("{} {floor}", u.name()))
                .collect();
            text += &format!(
                "; not synthesized, their latency floors reaching the kept {time}: {}",
                floors.join(", ")
            );
        }
        f.write_str(&text)
    }
}

/// Which way a collective's chunks travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Spread from holders to everyone (all-gather, broadcast).
    Forward,
    /// Gathered with reductions: spreading on the transposed network, reversed.
    Reverse,
}

/// The chunks of one collective in a joint problem.
struct Part {
    collective: usize,
    first_chunk: u32,
    pieces: u32,
}

fn members(net: &Network, c: &Collective) -> Members {
    if c.npus.len() == net.nodes.len() {
        return Members::All;
    }
    let mut flags = vec![false; net.nodes.len()];
    for &v in &c.npus {
        flags[net.local[v as usize] as usize] = true;
    }
    Members::Some(flags)
}

/// The pieces of `c` and, for each, the rank that holds it before spreading in `direction` and
/// its one destination rank if it has one (scatter, gather, all-to-all forward their pieces);
/// `None`: the collective has no phase in that direction.
fn phase(c: &Collective, direction: Direction) -> Option<Vec<(u32, Option<u32>)>> {
    use CollectiveKind::*;
    let (n, k) = (c.ranks(), c.chunks);
    let piece = |f: &dyn Fn(u32) -> (u32, Option<u32>)| (0..c.piece_count()).map(f).collect();
    match (c.kind, direction) {
        (AllGather, Direction::Forward) | (ReduceScatter, Direction::Reverse) | (AllReduce, _) => {
            Some(piece(&|p| (p / k, None)))
        }
        (Broadcast, Direction::Forward) | (Reduce, Direction::Reverse) => {
            Some(piece(&|_| (c.root_rank, None)))
        }
        (Scatter, Direction::Forward) => Some(piece(&|p| (c.root_rank, Some(p / k)))),
        (Gather, Direction::Forward) => Some(piece(&|p| (p / k, Some(c.root_rank)))),
        (AllToAll, Direction::Forward) => Some(piece(&|p| (p / (n * k), Some((p / k) % n)))),
        _ => None,
    }
}

/// Builds the joint spreading problem of `direction`. `ready` gives, per collective, a time
/// from which each piece is available (all-reduce's all-gather waits for its reduce-scatter).
fn problem(
    net: &Network,
    collectives: &[Collective],
    direction: Direction,
    ready: &dyn Fn(usize, u32) -> Time,
) -> Result<(Problem, Vec<Part>), Error> {
    let mut p = Problem::default();
    let mut parts = Vec::new();
    for (i, c) in collectives.iter().enumerate() {
        let Some(owners) = phase(c, direction) else {
            continue;
        };
        let first_chunk = p.chunks();
        let group = p.groups.len() as u32;
        p.groups.push(members(net, c));
        for (piece, &(owner, dest)) in owners.iter().enumerate() {
            let piece = piece as u32;
            p.chunk_bytes.push(c.piece_bytes(piece, piece + 1));
            p.chunk_group.push(group);
            p.initial.push(Holding {
                npu: net.local[c.npus[owner as usize] as usize],
                chunk: first_chunk + piece,
                ready: ready(i, piece),
            });
            if let Some(d) = dest {
                p.dest.resize(first_chunk as usize + piece as usize, NONE);
                p.dest.push(net.local[c.npus[d as usize] as usize]);
            }
        }
        parts.push(Part {
            collective: i,
            first_chunk,
            pieces: owners.len() as u32,
        });
    }
    if !p.dest.is_empty() {
        p.dest.resize(p.chunks() as usize, NONE);
    }
    if p.pairs(net.npus()) > (1u64 << 40) {
        return Err(Error::input(format!(
            "{} chunks over {} NPUs is beyond what the synthesizer can track",
            p.chunks(),
            net.npus()
        )));
    }
    greedy::ensure_send_ids(net.npus(), &p)?;
    Ok((p, parts))
}

/// The random stream of trial `k` in `direction`.
fn stream(direction: Direction, k: u32) -> u64 {
    ((k as u64) << 1) | (direction == Direction::Reverse) as u64
}

/// Up to this many sends, every trial keeps its plan so the best one need not be re-run.
pub const KEEP_PLANS_UP_TO: u64 = 1 << 22;

/// The sends of one trial in issue order, and its completion time.
type Plan = (Vec<Send>, Time);

/// Runs one trial, collecting its sends.
fn run_trial(
    net: &Network,
    p: &Problem,
    options: &SynthOptions,
    direction: Direction,
    k: u32,
) -> Result<Plan, Error> {
    let mut sends = Vec::new();
    let mut rng = greedy::trial_rng(options.seed, stream(direction, k));
    let time = greedy::run(net, p, &mut rng, &mut |s| sends.extend_from_slice(s))?;
    Ok((sends, time))
}

/// The best of the trials (the first among equal times): its index, and its plan when the plans
/// are small enough to keep.
fn best_trial(
    net: &Network,
    p: &Problem,
    options: &SynthOptions,
    direction: Direction,
) -> Result<(u32, Option<Plan>), Error> {
    let sends = p.pairs(net.npus());
    let small = sends <= KEEP_PLANS_UP_TO;
    let trials = options.trials.unwrap_or(default_trials(net, sends));
    if !small && trials == 1 {
        // Nothing to compare: the caller runs the one trial, streaming its sends.
        return Ok((0, None));
    }
    if small {
        let plans = (0..trials)
            .into_par_iter()
            .map(|k| run_trial(net, p, options, direction, k))
            .collect::<Result<Vec<_>, Error>>()?;
        let (k, plan) = plans
            .into_iter()
            .enumerate()
            .min_by_key(|(k, (_, time))| (*time, *k))
            .expect("at least one trial");
        return Ok((k as u32, Some(plan)));
    }
    let times = (0..trials)
        .into_par_iter()
        .map(|k| {
            let mut rng = greedy::trial_rng(options.seed, stream(direction, k));
            greedy::run(net, p, &mut rng, &mut |_| {})
        })
        .collect::<Result<Vec<Time>, Error>>()?;
    let best = (0..trials)
        .min_by_key(|&k| (times[k as usize], k))
        .expect("at least one trial");
    Ok((best, None))
}

/// The sends of the best trial (or of the integer program), in issue order, and its completion
/// time.
fn plan(
    net: &Network,
    p: &Problem,
    options: &SynthOptions,
    direction: Direction,
    deadline: Deadline,
    reports: &mut Vec<IlpReport>,
) -> Result<Plan, Error> {
    if options.method == Method::Greedy {
        return greedy_plan(net, p, options, direction);
    }
    // TACOS-ILP starts from the greedy's plan (its search can only improve on it); the
    // TACCL-like baseline must not see a congestion-aware plan.
    let congestion = options.method == Method::Ilp;
    let seed = match congestion {
        true => greedy_plan(net, p, options, direction)?.0,
        false => Vec::new(),
    };
    let (sends, time, report) = ilp::plan(net, p, &options.ilp, congestion, deadline, &seed)?;
    reports.push(report);
    Ok((sends, time))
}

/// The sends of the best greedy trial, in issue order, and its completion time.
fn greedy_plan(
    net: &Network,
    p: &Problem,
    options: &SynthOptions,
    direction: Direction,
) -> Result<Plan, Error> {
    match best_trial(net, p, options, direction)? {
        (_, Some(plan)) => Ok(plan),
        (k, None) => run_trial(net, p, options, direction, k),
    }
}

/// Unwinding degrees tried, beside splitting, when the user names none. Degree 1 (a ring through
/// the switch) wins when chunks are many and small; a few links per NPU win when chunks are few
/// and large; splitting wins on hierarchies of switches, and is the only way through switches
/// connected to switches.
pub const UNWIND_DEGREES: [u32; 3] = [1, 2, 4];

/// The largest X-way chunking tried: at most this many sub-chunks per chunk.
pub const MAX_X_WAY: u32 = 64;

/// Synthesizes schedules for `collectives`, all over NPUs of `topology`, run together.
///
/// Two choices go beyond the TACOS paper's fixed ones. X-way chunking: the matching runs with
/// every chunk cut into X sub-chunks, X = 1, 2, 4, ... while the synthesizer's own estimate
/// improves by at least 1%, or by a quarter of its gap to the lower bound when that gap is small
/// (stopping at 99% of the lower bound, and before the matching would
/// pass [`KEEP_PLANS_UP_TO`] sends): an NPU with more links than chunks, or a chunk that crosses
/// switches store-and-forward, leaves links idle that finer chunks keep busy. Unwinding: on
/// networks with switches, splitting and the degrees of [`UNWIND_DEGREES`] are each tried (with
/// their own X) and the simulator picks, since an unwound graph only approximates its switches.
pub fn synthesize(
    topology: &Topology,
    collectives: &[Collective],
    options: &SynthOptions,
) -> Result<Synthesis, Error> {
    let Some(sketch) = &options.sketch else {
        return synthesize_cached(topology, &mut Unwound::default(), collectives, options);
    };
    // Planned on the network the sketch leaves, each transfer pinned to a path inside it; the
    // schedule is held (not streamed, nor simulated as planned) until its routes are set.
    let restricted = sketch.restrict(topology)?;
    let inside = SynthOptions {
        sketch: None,
        tap: None,
        simulate_in_order: None,
        ..options.clone()
    };
    let mut synthesis =
        synthesize_unwound(&restricted, &mut Unwound::default(), collectives, &inside)?;
    for schedule in &mut synthesis.schedules {
        sketch::pin_routes(&restricted, schedule)?;
    }
    Ok(synthesis)
}

/// [`synthesize`] without a sketch, on networks already unwound from `topology`: planned on
/// switch hierarchies (by symmetry, or port by port from the root of a rooted collective; up to
/// [`symmetric::SEARCHED_UP_TO`] NPUs, and for the integer program, beside the search over
/// unwindings, the faster simulated schedule kept), else the search ([`synthesize_unwound`]).
pub fn synthesize_cached(
    topology: &Topology,
    unwound: &mut Unwound,
    collectives: &[Collective],
    options: &SynthOptions,
) -> Result<Synthesis, Error> {
    check_counts(options)?;
    let Some(h) = hierarchy::Hierarchy::of(topology, collectives, options) else {
        return synthesize_unwound(topology, unwound, collectives, options);
    };
    let c = &collectives[0];
    let planned = match c.kind.is_rooted() {
        true => rooted::synthesize(&h, c, options)?,
        false => symmetric::synthesize(&h, c, options)?,
    };
    if !symmetric::also_search(topology, options) {
        return Ok(planned);
    }
    let searched = synthesize_unwound(topology, unwound, collectives, options)?;
    let faster = judged(topology, &searched)? < judged(topology, &planned)?;
    Ok(if faster { searched } else { planned })
}

/// The point-to-point networks one topology unwinds to, each built once: a training iteration
/// synthesizes dozens of collectives on one topology, and splitting its switches is the costly
/// part (seconds on 256 NPUs behind switch hierarchies).
#[derive(Default)]
pub struct Unwound {
    built: Vec<(Unwinding, Result<Network, String>)>,
}

impl Unwound {
    fn get(&mut self, topology: &Topology, unwinding: Unwinding) -> Result<&Network, Error> {
        if !self.built.iter().any(|(u, _)| *u == unwinding) {
            let net = Network::from_topology(topology, unwinding).map_err(|e| e.to_string());
            self.built.push((unwinding, net));
        }
        self.built(unwinding).expect("built above")
    }

    /// The network `unwinding` gave, once [`Unwound::get`] has built it.
    fn built(&self, unwinding: Unwinding) -> Option<Result<&Network, Error>> {
        let (_, net) = self.built.iter().find(|(u, _)| *u == unwinding)?;
        Some(net.as_ref().map_err(|e| Error::input(e.clone())))
    }
}

/// Refuses the counts a user may give that cannot be zero (the planners and the search both
/// take them).
fn check_counts(options: &SynthOptions) -> Result<(), Error> {
    if options.trials == Some(0) {
        return Err(Error::input("--trials must be at least 1"));
    }
    if options.x_way == Some(0) {
        return Err(Error::input("--x-way must be at least 1"));
    }
    Ok(())
}

/// [`synthesize`] on networks already unwound from `topology` (all from that one topology).
pub fn synthesize_unwound(
    topology: &Topology,
    unwound: &mut Unwound,
    collectives: &[Collective],
    options: &SynthOptions,
) -> Result<Synthesis, Error> {
    check_counts(options)?;
    let unwindings: Vec<Unwinding> = match options.unwinding {
        Some(u) => vec![u],
        None if !topology.has_switches() => vec![Unwinding::Degree(1)],
        None => std::iter::once(Unwinding::Split)
            .chain(UNWIND_DEGREES.into_iter().map(Unwinding::Degree))
            .collect(),
    };
    let judge = unwindings.len() > 1;
    if judge && options.method == Method::Greedy {
        return fastest_unwinding(topology, unwound, &unwindings, collectives, options);
    }
    let mut best: Option<(Time, Synthesis)> = None;
    let mut refusal = None;
    let mut skipped = Vec::new();
    // The programs get 90% of the time limit; the rest is for what surrounds them (the greedy
    // plans that seed them, building the schedules, simulating each unwinding's).
    let deadline = Deadline(
        options
            .ilp
            .time_limit
            .map(|limit| Instant::now() + limit.mul_f64(0.9)),
    );
    let tries = unwindings.len() as u32;
    for (tried, u) in unwindings.into_iter().enumerate() {
        // Each unwinding left gets an equal share of what remains of the time limit.
        let deadline = deadline.share(tries - tried as u32);
        let net = match unwound.get(topology, u) {
            Ok(net) => net,
            Err(e) if judge => {
                // Degree unwinding refuses switches wired to switches; splitting handles them.
                refusal.get_or_insert(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        if let Some((time, _)) = &best {
            // Its logical links' latencies alone reach the best time: it cannot win.
            let floor = net.latency_floor(topology, collectives);
            if floor >= *time {
                skipped.push((u, floor));
                continue;
            }
        }
        // Unwindings are tried only through switches, where the judged time is simulated.
        let (mut synthesis, time) = with_chunking(topology, net, collectives, options, deadline)?;
        if topology.has_switches() {
            synthesis.choice.unwinding = Some(u);
        }
        if !judge {
            return Ok(synthesis);
        }
        if best.as_ref().is_none_or(|(t, _)| time < *t) {
            best = Some((time, synthesis));
        }
    }
    match best {
        Some((time, synthesis)) => Ok(with_skipped(synthesis, skipped, time)),
        None => Err(refusal.expect("every unwinding failed with an error")),
    }
}

/// The greedy's schedule on each unwinding that may win, synthesized side by side, and the one
/// that simulates fastest on `topology` (the first of equal times). Their rows are not streamed
/// to the tap, whose one stream would go to whichever finished last; the caller writes the kept
/// schedule.
fn fastest_unwinding(
    topology: &Topology,
    unwound: &mut Unwound,
    unwindings: &[Unwinding],
    collectives: &[Collective],
    options: &SynthOptions,
) -> Result<Synthesis, Error> {
    for &u in unwindings {
        // Errors are kept with the network and read below.
        let _ = unwound.get(topology, u);
    }
    let unwound = &*unwound;
    // The syntheses side by side would each restart the one send counter: the log counts
    // unwindings instead.
    let quiet = SynthOptions {
        tap: None,
        simulate_in_order: None,
        progress: None,
        ..options.clone()
    };
    // Degree unwinding refuses switches wired to switches; splitting handles them.
    let mut refusal = None;
    let mut nets = Vec::new();
    let mut kinds = Vec::new();
    for &u in unwindings {
        match unwound.built(u).expect("built above") {
            Ok(net) => {
                nets.push(net);
                kinds.push(u);
            }
            Err(e) => {
                refusal.get_or_insert(e);
            }
        }
    }
    let progress = options.progress.as_deref();
    if let Some(steps) = progress {
        steps.begin(
            "unwindings synthesized (each searching its X-way chunking)",
            nets.len() as u64,
        );
    }
    let step = || {
        if let Some(steps) = progress {
            steps.step();
        }
    };
    // (index, judged time, synthesis) of an unwinding.
    type Judged = (usize, Time, Synthesis);
    let run = |(i, net): (usize, &Network)| -> Result<Judged, Error> {
        // Through switches the judged time is simulated.
        let (mut synthesis, time) =
            with_chunking(topology, net, collectives, &quiet, Deadline(None))?;
        synthesis.choice.unwinding = Some(kinds[i]);
        step();
        Ok((i, time, synthesis))
    };
    // An unwinding cannot win where its logical links' latencies alone reach a time another
    // was judged at (ties go to the first). Those whose floor is under the collective's lower
    // bound surely may win and run beside the first (splitting); the others wait for their times.
    let bound = lower_bound(topology, collectives);
    let mut floors = vec![Time::ZERO];
    floors.extend(network::latency_floors(
        nets.get(1..).unwrap_or_default(),
        topology,
        collectives,
    ));
    let (now, later): (Vec<_>, Vec<_>) = nets
        .iter()
        .copied()
        .enumerate()
        .partition(|&(i, _)| floors[i] < bound);
    let mut results = now
        .into_par_iter()
        .map(run)
        .collect::<Result<Vec<Judged>, Error>>()?;
    let mut skipped = Vec::new();
    let later: Vec<(usize, &Network)> = later
        .into_iter()
        .filter(|&(i, _)| {
            let beaten = results
                .iter()
                .any(|&(j, time, _)| time < floors[i] || (time == floors[i] && j < i));
            if beaten {
                skipped.push((kinds[i], floors[i]));
                step();
            }
            !beaten
        })
        .collect();
    results.extend(
        later
            .into_par_iter()
            .map(run)
            .collect::<Result<Vec<Judged>, Error>>()?,
    );
    if let Some(steps) = progress {
        steps.end();
    }
    results.sort_by_key(|&(i, ..)| i);
    let mut best: Option<(Time, Synthesis)> = None;
    for (_, time, synthesis) in results {
        if best.as_ref().is_none_or(|(t, _)| time < *t) {
            best = Some((time, synthesis));
        }
    }
    match best {
        Some((time, synthesis)) => Ok(with_skipped(synthesis, skipped, time)),
        None => Err(refusal.expect("every unwinding failed with an error")),
    }
}

/// `synthesis`, kept at its judged `time`, noting the unwindings left unsynthesized with their
/// latency floors (each at least that time).
fn with_skipped(
    mut synthesis: Synthesis,
    skipped: Vec<(Unwinding, Time)>,
    time: Time,
) -> Synthesis {
    if !skipped.is_empty() {
        synthesis.choice.skipped = skipped;
        synthesis.choice.beaten_by = Some(time);
    }
    synthesis
}

/// The lower bound of `collectives` run together on `topology`: the largest of theirs.
fn lower_bound(topology: &Topology, collectives: &[Collective]) -> Time {
    collectives
        .iter()
        .map(|c| crate::bound::bounds(topology, c, Some(crate::bound::CUT_BOUND_BUDGET)).total())
        .max()
        .unwrap_or(Time::ZERO)
}

/// Synthesis on `net` with the X-way chunking of `options`, or the best by [`judged`] time;
/// clustered or not, whichever is judged faster; with its judged time.
fn with_chunking(
    topology: &Topology,
    net: &Network,
    collectives: &[Collective],
    options: &SynthOptions,
    deadline: Deadline,
) -> Result<(Synthesis, Time), Error> {
    let cut = |x: u32| -> Option<Vec<Collective>> {
        collectives
            .iter()
            .map(|c| {
                let refined = Collective {
                    chunks: c.chunks.checked_mul(x)?,
                    ..c.clone()
                };
                let sends = refined.piece_count() as u64 * net.npus() as u64;
                let fits = refined.piece_count() as u64 <= c.size && sends <= KEEP_PLANS_UP_TO;
                (x == 1 || fits).then_some(refined)
            })
            .collect()
    };
    // The integer program's size grows with the chunks: it runs on the user's chunking (no
    // search over X) and plans its own timing (no clusters needed).
    let x_way = match options.method {
        Method::Greedy => options.x_way,
        Method::Ilp | Method::TacclLike => Some(options.x_way.unwrap_or(1)),
    };
    let fixed = match x_way {
        Some(x) => Some(cut(x).ok_or_else(|| {
            Error::input(format!("--x-way {x}: the chunks cannot be cut that finely"))
        })?),
        None => None,
    };
    let bound = match fixed {
        Some(_) => Time::ZERO,
        None => lower_bound(topology, collectives),
    };
    let search = |net: &Network| -> Result<(Synthesis, Time), Error> {
        match &fixed {
            Some(refined) => {
                let mut synthesis = synthesize_on(topology, net, refined, options, deadline)?;
                synthesis.choice.x_way = x_way;
                let time = judged(topology, &synthesis)?;
                Ok((synthesis, time))
            }
            None => refine_chunking(topology, net, bound, &cut, options),
        }
    };
    // Clusters keep chunks from entering a group twice; where a group spreads poorly inside (a
    // line of a mesh) that costs more than it saves. Which wins can turn with X (2 x 16 MI250
    // all-gather: unclustered leads at X = 1, clustered leads by 10% at X = 32), so each gets
    // its own search and the judged times pick.
    let (clustered, clustered_time) = search(net)?;
    if options.method == Method::Ilp && options.x_way.is_none() {
        let program = (clustered, clustered_time);
        return keep_the_faster_greedy(topology, net, collectives, options, deadline, program);
    }
    if net.clusters == 1 || options.method != Method::Greedy {
        return Ok((clustered, clustered_time));
    }
    let (unclustered, unclustered_time) = search(&net.unclustered())?;
    if unclustered_time < clustered_time {
        return Ok((unclustered, unclustered_time));
    }
    match stream_lost(&clustered, unclustered.streamed) {
        // The same seeds plan it again.
        true => search(net),
        false => Ok((clustered, clustered_time)),
    }
}

/// The integer program plans at the user's chunking; greedy matching also searches finer
/// sub-chunks (X-way) and can win there. Its plan, made with the same seeds, replaces the
/// program's when it is faster by the same link model, and the reports say so: `tacos-ilp` is
/// never slower than `tacos`. The kept synthesis comes with its judged time (`program_time`
/// is the program's).
fn keep_the_faster_greedy(
    topology: &Topology,
    net: &Network,
    collectives: &[Collective],
    options: &SynthOptions,
    deadline: Deadline,
    (program, program_time): (Synthesis, Time),
) -> Result<(Synthesis, Time), Error> {
    let greedy_options = SynthOptions {
        method: Method::Greedy,
        tap: None,
        simulate_in_order: None,
        ..options.clone()
    };
    let (greedy, greedy_time) =
        with_chunking(topology, net, collectives, &greedy_options, deadline)?;
    if greedy.estimate >= program.estimate {
        return Ok((program, program_time));
    }
    let mut reports = program.ilp;
    for report in &mut reports {
        report.status = IlpStatus::Outplanned {
            greedy: greedy.estimate,
            program: program.estimate,
            proven: report.status == IlpStatus::Optimal,
        };
    }
    let kept = Synthesis {
        ilp: reports,
        ..greedy
    };
    Ok((kept, greedy_time))
}

/// Whether `best`, simulated as it was planned, lost its results file to a later synthesis
/// (streamed as `last`): the tap keeps one stream, the last begun, and such a run holds no
/// schedule to write the file from afterwards.
fn stream_lost(best: &Synthesis, last: Option<u64>) -> bool {
    best.simulated.is_some() && best.streamed.is_some() && best.streamed != last
}

/// The completion time a synthesis is judged by: the synthesizer's estimate where it is exact
/// (point-to-point networks), else the schedule's simulation (through unwound switches the
/// estimate only approximates it, by a few percent either way).
fn judged(topology: &Topology, synthesis: &Synthesis) -> Result<Time, Error> {
    if !topology.has_switches() || synthesis.schedules.is_empty() {
        return Ok(synthesis.estimate);
    }
    let schedule = Schedule::concat(&synthesis.schedules);
    Ok(sim::simulate(topology, &schedule, &SimOptions::default(), &mut ())?.finish)
}

/// Synthesis on `net` with X = 1, 2, 4, ... while its [`judged`] time improves enough and stays
/// above 99% of `bound`, stopping where `cut` says the chunks cannot be cut finer; the synthesis
/// and its judged time. Enough is 1%, or a quarter of the gap to `bound` when that is less: near
/// the bound each halving of the sub-chunks still halves the fill and drain time (a 4x4 mesh
/// with 50 and 200 GiB/s lines gains 0.8% from X = 16 to 32, half its gap).
fn refine_chunking(
    topology: &Topology,
    net: &Network,
    bound: Time,
    cut: &dyn Fn(u32) -> Option<Vec<Collective>>,
    options: &SynthOptions,
) -> Result<(Synthesis, Time), Error> {
    let whole = cut(1).expect("one way always fits");
    let mut best = synthesize_on(topology, net, &whole, options, Deadline(None))?;
    let mut best_time = judged(topology, &best)?;
    let (mut best_x, mut last_streamed) = (1, best.streamed);
    let mut x = 2;
    while x <= MAX_X_WAY && (bound.ps() as f64) < 0.99 * best_time.ps() as f64 {
        let Some(refined) = cut(x) else { break };
        let finer = synthesize_on(topology, net, &refined, options, Deadline(None))?;
        last_streamed = finer.streamed;
        let finer_time = judged(topology, &finer)?;
        let (now, before) = (finer_time.ps() as f64, best_time.ps() as f64);
        let enough = (0.01 * before).min((before - bound.ps() as f64) / 4.0);
        if before - now < enough {
            break;
        }
        (best, best_time, best_x) = (finer, finer_time, x);
        x *= 2;
    }
    if stream_lost(&best, last_streamed) {
        // The same seed plans it again, streamed last.
        let again = cut(best_x).expect("it was cut before");
        best = synthesize_on(topology, net, &again, options, Deadline(None))?;
    }
    best.choice.x_way = Some(best_x);
    Ok((best, best_time))
}

fn synthesize_on(
    topology: &Topology,
    net: &Network,
    collectives: &[Collective],
    options: &SynthOptions,
    deadline: Deadline,
) -> Result<Synthesis, Error> {
    let zero = |_: usize, _: u32| Time::ZERO;
    let (reverse, reverse_parts) = problem(net, collectives, Direction::Reverse, &zero)?;
    let greedy = options.method == Method::Greedy;
    let mut reports = Vec::new();
    if greedy && reverse_parts.is_empty() && collectives.len() == 1 {
        let (forward, _) = problem(net, collectives, Direction::Forward, &zero)?;
        return stream_forward(topology, net, &forward, &collectives[0], options);
    }
    let transposed = net.transposed();
    let (reverse_sends, reverse_time) = if reverse_parts.is_empty() {
        (Vec::new(), Time::ZERO)
    } else {
        // The reduce-scatter gets half the time left when an all-gather follows.
        let share = if collectives
            .iter()
            .any(|c| phase(c, Direction::Forward).is_some())
        {
            2
        } else {
            1
        };
        plan(
            &transposed,
            &reverse,
            options,
            Direction::Reverse,
            deadline.share(share),
            &mut reports,
        )?
    };
    // Reversed, a send that left a chunk's first holder at `start` is a reduction into it, done
    // at `reverse_time - start`; the last of them (from the earliest send) completes the piece:
    // from then on all-reduce can spread it.
    let mut reduced_at = vec![Time::ZERO; reverse.chunks() as usize];
    for s in reverse_sends.iter().filter(|s| s.via == NONE) {
        let t = &mut reduced_at[s.chunk as usize];
        *t = (*t).max(reverse_time - s.start);
    }
    let ready = |i: usize, piece: u32| match collectives[i].kind {
        CollectiveKind::AllReduce => {
            let part = reverse_parts
                .iter()
                .find(|p| p.collective == i)
                .expect("all-reduce has a reduce-scatter part");
            reduced_at[(part.first_chunk + piece) as usize]
        }
        _ => Time::ZERO,
    };
    let (forward, forward_parts) = problem(net, collectives, Direction::Forward, &ready)?;
    let (forward_sends, forward_time) = if forward_parts.is_empty() {
        (Vec::new(), Time::ZERO)
    } else {
        plan(
            net,
            &forward,
            options,
            Direction::Forward,
            deadline,
            &mut reports,
        )?
    };

    // The integer programs plan in time steps: on point-to-point networks, where the link model
    // is the simulator's, each send is time-triggered at its planned start (the Ten's schedule),
    // so the FIFO links serve them in the planned order and a send whose chunk arrives early
    // cannot take a link from one planned before it. Through switches a logical link only
    // approximates the shared ports (a chunk crosses an uplink at its full speed, not at the
    // unwound share), so sends go as soon as their data is there, as greedy plans do.
    let timed = !greedy && net.is_point_to_point();
    let mut builders: Vec<Builder> = collectives
        .iter()
        .map(Builder::new)
        .collect::<Result<_, _>>()?;
    let ranks: Vec<Vec<u32>> = collectives
        .iter()
        .map(|c| {
            let mut rank = vec![u32::MAX; net.nodes.len()];
            for (r, &v) in c.npus.iter().enumerate() {
                rank[net.local[v as usize] as usize] = r as u32;
            }
            rank
        })
        .collect();
    let owner_of = |parts: &[Part], chunk: u32| -> (usize, u32) {
        let part = parts
            .iter()
            .find(|p| (p.first_chunk..p.first_chunk + p.pieces).contains(&chunk))
            .expect("every chunk belongs to a part");
        (part.collective, chunk - part.first_chunk)
    };
    // Reverse sends run backwards: latest arrival first; on the original network each one goes
    // from the transposed link's destination to its source, reducing.
    let mut order: Vec<u32> = (0..reverse_sends.len() as u32).collect();
    order.sort_by_key(|&i| {
        let s = &reverse_sends[i as usize];
        (Reverse(s.arrive), Reverse(i))
    });
    // A reversed send with no reduction to wait for (a leaf of its piece's tree) would be issued
    // at once and sit in its link's queue ahead of sends planned before it. Each reversed send
    // therefore also waits for the last transfer planned to reach its source before it starts:
    // the simulated queues then fill in the planned order.
    let nodes = net.nodes.len();
    let mut arrivals: BinaryHeap<Reverse<(Time, u32, usize, u32)>> = BinaryHeap::new();
    let mut last_arrival: Vec<Option<(Time, u32)>> = vec![None; collectives.len() * nodes];
    for i in order {
        let s = reverse_sends[i as usize];
        let link = transposed.links[s.link as usize];
        let (c, piece) = owner_of(&reverse_parts, s.chunk);
        let (from, to) = (link.dst, link.src);
        let start = reverse_time - s.arrive;
        while let Some(&Reverse((at, node, coll, index))) = arrivals.peek() {
            if at > start {
                break;
            }
            arrivals.pop();
            let last = &mut last_arrival[coll * nodes + node as usize];
            if last.is_none_or(|(t, _)| t <= at) {
                *last = Some((at, index));
            }
        }
        let mut pacing: Vec<u32> = last_arrival[c * nodes + from as usize]
            .map(|(_, index)| index)
            .into_iter()
            .collect();
        if timed {
            pacing.push(builders[c].timer(ranks[c][from as usize], start));
        }
        let index = match transposed.route(s.link) {
            Some(route) => builders[c].send_routed(
                ranks[c][from as usize],
                ranks[c][to as usize],
                (piece, piece + 1),
                Op::Reduce,
                route,
                &pacing,
            ),
            None => builders[c].send_after(
                ranks[c][from as usize],
                ranks[c][to as usize],
                (piece, piece + 1),
                Op::Reduce,
                &pacing,
            ),
        };
        arrivals.push(Reverse((reverse_time - s.start, to, c, index)));
    }
    for s in &forward_sends {
        let link = net.links[s.link as usize];
        let (c, piece) = owner_of(&forward_parts, s.chunk);
        let (src, dst) = (ranks[c][link.src as usize], ranks[c][link.dst as usize]);
        let pacing: Vec<u32> = match timed {
            true => vec![builders[c].timer(src, s.start)],
            false => Vec::new(),
        };
        match net.route(s.link) {
            Some(route) => {
                builders[c].send_routed(src, dst, (piece, piece + 1), Op::Copy, route, &pacing)
            }
            None => builders[c].send_after(src, dst, (piece, piece + 1), Op::Copy, &pacing),
        };
    }
    Ok(Synthesis {
        schedules: builders.into_iter().map(Builder::finish).collect(),
        estimate: reverse_time.max(forward_time),
        ilp: reports,
        streamed: None,
        simulated: None,
        choice: Choice::default(),
    })
}

/// One forward collective, written straight into its schedule as the best trial is re-run: no
/// plan is held in memory, so the largest all-gathers fit (a 128x128 mesh has 268M transfers).
/// Or, where the run asks for it ([`InOrderRun`]) and the network allows, simulated (and
/// validated) send by send without being held at all.
fn stream_forward(
    topology: &Topology,
    net: &Network,
    p: &Problem,
    c: &Collective,
    options: &SynthOptions,
) -> Result<Synthesis, Error> {
    // Every NPU but the first holder receives every chunk once; each send but the first hops
    // depends on one earlier send.
    let expected = p.chunks() as usize * (c.ranks() as usize - 1);
    let needed = crate::memory::bytes(expected as u64, crate::memory::BYTES_PER_TRANSFER);
    let what = format!("a synthesized schedule of {expected} transfers");
    let in_order = in_order_applies(topology, net);
    // A collective the in-order validation does not take (all-to-all) is held and validated
    // whole where validation is asked for.
    let run_in_order = options
        .simulate_in_order
        .as_ref()
        .filter(|run| in_order && (!run.validate || crate::schedule::InOrderCheck::takes(c)));
    if let Some(run) = run_in_order {
        let mut held = greedy::bytes_for(net, p) + sim::InOrder::bytes_for(expected as u64);
        if run.validate {
            held += crate::schedule::InOrderCheck::bytes_for(c, expected as u64);
        }
        crate::memory::ensure(held, &what, "try fewer NPUs")?;
        // A tap that declines the rows (a schedule small enough for JSON) needs it held.
        let tapping = match options.tap.as_deref() {
            None => Some(None),
            Some(tap) => tap.begin(expected, c).map(|id| Some((tap, id))),
        };
        if let Some(tapping) = tapping {
            match simulate_forward(topology, net, p, c, options, run, expected, tapping)? {
                Ok(synthesis) => return Ok(synthesis),
                // A plan the in-order simulation cannot follow is built and simulated whole,
                // where it fits: the same seed plans it again.
                Err(refusal) if crate::memory::ensure(needed, &what, "").is_err() => {
                    return Err(refusal)
                }
                Err(_) => {}
            }
        }
    }
    let advice = match in_order {
        true => {
            "try fewer NPUs, or run without --msccl, --routing pinned and --table-format csv: \
             the schedule is then simulated and validated as it is synthesized, never held"
        }
        false => "try fewer NPUs",
    };
    crate::memory::ensure(needed, &what, advice)?;
    let mut schedule = Schedule::with_capacity_for_data(expected);
    // The tap and the id of this schedule's stream, when the tap takes it.
    let tapping = options
        .tap
        .as_deref()
        .and_then(|tap| Some((tap, tap.begin(expected, c)?)));
    // Rows [tapped, len) are written but not yet given to the tap.
    let mut tapped = 0;
    let progress = options.progress.as_deref();
    if let Some(steps) = progress {
        steps.begin("sends", expected as u64);
    }
    let mut hold = |s: &Send| {
        let (src, dst) = net.ends(s.link);
        let transfer = Transfer {
            src,
            dst,
            bytes: p.chunk_bytes[s.chunk as usize],
        };
        let deps: &[u32] = if s.via == NONE { &[] } else { &[s.via] };
        let index = schedule.push_data(transfer, deps, (s.chunk, s.chunk + 1), Op::Copy);
        if let Some(route) = net.route(s.link) {
            schedule.set_route(index, route);
        }
        if let Some(steps) = progress.filter(|_| index.is_multiple_of(1 << 16)) {
            steps.set(index as u64);
        }
        if let Some((tap, id)) = tapping {
            if schedule.len() - tapped == ROW_GROUP {
                tap.rows(id, schedule_rows(&schedule, tapped..schedule.len()), None);
                tapped = schedule.len();
            }
        }
    };
    let mut emit = |sends: &[Send]| {
        for s in sends {
            hold(s);
        }
    };
    let estimate = replay_best(net, p, options, &mut emit)?;
    if let Some((tap, id)) = tapping {
        if schedule.len() > tapped {
            tap.rows(id, schedule_rows(&schedule, tapped..schedule.len()), None);
        }
    }
    if let Some(steps) = progress {
        steps.end();
    }
    schedule.collective = Some(c.clone());
    Ok(Synthesis {
        schedules: vec![schedule],
        estimate,
        ilp: Vec::new(),
        streamed: tapping.map(|(_, id)| id),
        simulated: None,
        choice: Choice::default(),
    })
}

/// Runs the best forward trial again (or replays its kept plan), handing `emit` every send in
/// issue order. Returns the trial's completion time.
fn replay_best(
    net: &Network,
    p: &Problem,
    options: &SynthOptions,
    emit: &mut dyn FnMut(&[Send]),
) -> Result<Time, Error> {
    Ok(match best_trial(net, p, options, Direction::Forward)? {
        (_, Some((sends, time))) => {
            emit(&sends);
            time
        }
        (k, None) => {
            let mut rng = greedy::trial_rng(options.seed, stream(Direction::Forward, k));
            greedy::run(net, p, &mut rng, emit)?
        }
    })
}

/// Sends handed to the in-order simulation at once, and blocks that may wait for it: enough to
/// make the handover's cost per send small, few enough to hold (24 B a send).
const IN_ORDER_BLOCK: usize = 1 << 16;
const IN_ORDER_BLOCKS_AHEAD: usize = 8;
/// How many transfers ahead of its simulation a transfer's state is fetched (twice that for the
/// first of two dependent fetches).
const IN_ORDER_AHEAD: usize = 8;

/// Whether the in-order simulation can take this network's sends: each crosses one topology link
/// (no unwound switches, no split paths) chosen by dimension order as the simulator would.
fn in_order_applies(topology: &Topology, net: &Network) -> bool {
    topology.uses_dimension_routing()
        && net.links.iter().all(|l| {
            l.path.is_none()
                && l.relay.is_none()
                && topology
                    .link_between(net.nodes[l.src as usize], net.nodes[l.dst as usize])
                    .is_some()
        })
}

/// [`stream_forward`]'s schedule simulated send by send as the greedy plans it, never held, its
/// rows and their times handed to `tapping`'s stream if any; the inner error is the
/// simulation's refusal of a plan it cannot follow.
#[allow(clippy::too_many_arguments)]
fn simulate_forward(
    topology: &Topology,
    net: &Network,
    p: &Problem,
    c: &Collective,
    options: &SynthOptions,
    run: &InOrderRun,
    expected: usize,
    tapping: Option<(&dyn ScheduleTap, u64)>,
) -> Result<Result<Synthesis, Error>, Error> {
    let mut simulation = sim::InOrder::new(topology, &run.sim, expected as u64)?;
    let mut check = match run.validate {
        true => Some(crate::schedule::InOrderCheck::new(c, expected as u64)?),
        false => None,
    };
    let progress = options.progress.as_deref();
    if let Some(steps) = progress {
        let what = match run.validate {
            true => "sends, simulated and validated as planned",
            false => "sends, simulated as planned",
        };
        steps.begin(what, expected as u64);
    }
    // The greedy runs on one core (or two, [`greedy::run`]): the simulation and the validation
    // take its sends in blocks, each on a thread of its own behind it, so that when the greedy
    // waits for them both cores work.
    let (blocks, received) = std::sync::mpsc::sync_channel::<Block>(IN_ORDER_BLOCKS_AHEAD);
    let (to_check, to_be_checked) = match check.is_some() {
        true => {
            let (sender, receiver) = std::sync::mpsc::sync_channel::<Block>(IN_ORDER_BLOCKS_AHEAD);
            (Some(sender), Some(receiver))
        }
        false => (None, None),
    };
    let (estimate, simulated, checked) = std::thread::scope(|scope| {
        let pass = InOrderPass::new(net, p, &mut simulation, tapping);
        let consumer = scope.spawn(move || -> Result<(), Error> {
            crate::priority::run_behind();
            let mut pass = pass?;
            for block in received {
                pass.block(&block)?;
            }
            pass.finish();
            Ok(())
        });
        let checker = check.as_mut().zip(to_be_checked).map(|(check, blocks)| {
            scope.spawn(move || -> Result<(), Error> {
                crate::priority::run_behind();
                for block in blocks {
                    check_block(net, p, check, &block)?;
                }
                Ok(())
            })
        });
        let mut planned = 0u64;
        let mut block = Vec::with_capacity(IN_ORDER_BLOCK);
        let hand_over = |block: Vec<Send>| {
            let block = std::sync::Arc::new(block);
            // A refused plan closes the channels; the greedy still finishes its trial.
            if let Some(to_check) = &to_check {
                let _ = to_check.send(std::sync::Arc::clone(&block));
            }
            let _ = blocks.send(block);
        };
        let mut emit = |mut sends: &[Send]| {
            while !sends.is_empty() {
                let (now, later) = sends.split_at(sends.len().min(IN_ORDER_BLOCK - block.len()));
                block.extend_from_slice(now);
                planned += now.len() as u64;
                sends = later;
                if block.len() < IN_ORDER_BLOCK {
                    continue;
                }
                hand_over(std::mem::replace(
                    &mut block,
                    Vec::with_capacity(IN_ORDER_BLOCK),
                ));
                if let Some(steps) = progress {
                    steps.set(planned);
                }
            }
        };
        let estimate = replay_best(net, p, options, &mut emit);
        hand_over(block);
        drop((blocks, to_check));
        let simulated = consumer
            .join()
            .expect("the in-order simulation does not panic");
        let checked = checker.map(|checker| {
            checker
                .join()
                .expect("the in-order validation does not panic")
        });
        (estimate, simulated, checked)
    });
    let estimate = estimate?;
    if let Some(steps) = progress {
        steps.end();
    }
    if let Some(Err(refusal)) = checked {
        return Ok(Err(refusal));
    }
    if let Err(refusal) = simulated {
        return Ok(Err(refusal));
    }
    if let Some(check) = &check {
        check.finish()?;
    }
    let transfers = simulation.len() as usize;
    Ok(Ok(Synthesis {
        schedules: Vec::new(),
        estimate,
        ilp: Vec::new(),
        streamed: tapping.map(|(_, id)| id),
        simulated: Some(InOrderSimulation {
            result: simulation.finish()?,
            transfers,
        }),
        choice: Choice::default(),
    }))
}

/// The greedy's sends handed from [`simulate_forward`] to the threads behind it, a block at a
/// time, shared by the simulation and the validation.
type Block = std::sync::Arc<Vec<Send>>;

/// Validates the next sends of [`simulate_forward`]'s plan; an error is a refusal of the plan.
fn check_block(
    net: &Network,
    p: &Problem,
    check: &mut crate::schedule::InOrderCheck,
    block: &[Send],
) -> Result<(), Error> {
    let dep_of = |s: &Send| (s.via != NONE).then_some(s.via as u64);
    for (i, s) in block.iter().enumerate() {
        if let Some(ahead) = block.get(i + 2 * IN_ORDER_AHEAD) {
            let (src, dst) = net.ends(ahead.link);
            check.prefetch(src, dst, ahead.chunk, dep_of(ahead));
        }
        let (src, dst) = net.ends(s.link);
        let bytes = p.chunk_bytes[s.chunk as usize];
        check.push(src, dst, s.chunk, bytes, dep_of(s))?;
    }
    Ok(())
}

/// The simulation's side of [`simulate_forward`]: the greedy's sends simulated and handed to
/// the tap a block at a time.
struct InOrderPass<'a, 't> {
    net: &'a Network,
    p: &'a Problem,
    simulation: &'a mut sim::InOrder<'t>,
    tapping: Option<(&'a dyn ScheduleTap, u64)>,
    rows: Option<TappedRows>,
    /// The topology link and ends of each synthesis link, where every transfer between two
    /// neighbours takes the same link (routing that does not hash transfers).
    fixed: Option<Vec<(LinkId, NodeId, NodeId)>>,
    /// The current block's links and ends.
    links: Vec<(LinkId, NodeId, NodeId)>,
}

impl<'a, 't> InOrderPass<'a, 't> {
    fn new(
        net: &'a Network,
        p: &'a Problem,
        simulation: &'a mut sim::InOrder<'t>,
        tapping: Option<(&'a dyn ScheduleTap, u64)>,
    ) -> Result<InOrderPass<'a, 't>, Error> {
        let fixed = match simulation.routes_by_transfer() {
            true => None,
            false => Some(
                (0..net.links.len() as u32)
                    .map(|l| {
                        let (src, dst) = net.ends(l);
                        Ok((simulation.link_of(0, src, dst)?, src, dst))
                    })
                    .collect::<Result<Vec<_>, Error>>()?,
            ),
        };
        Ok(InOrderPass {
            net,
            p,
            simulation,
            tapping,
            rows: tapping.map(|_| TappedRows::new(0)),
            fixed,
            links: Vec::with_capacity(IN_ORDER_BLOCK),
        })
    }

    /// Simulates the next sends; an error is a refusal of the plan.
    fn block(&mut self, block: &[Send]) -> Result<(), Error> {
        // The links first (no memory waits), so that the state of each transfer can be fetched
        // a few transfers ahead of its turn.
        let first = self.simulation.len();
        self.links.clear();
        for (i, s) in block.iter().enumerate() {
            self.links.push(match &self.fixed {
                Some(fixed) => fixed[s.link as usize],
                None => {
                    let (src, dst) = self.net.ends(s.link);
                    let link = self.simulation.link_of(first + i as u64, src, dst)?;
                    (link, src, dst)
                }
            });
        }
        let dep_of = |s: &Send| (s.via != NONE).then_some(s.via as u64);
        for (i, s) in block.iter().enumerate() {
            if let Some(ahead) = block.get(i + 2 * IN_ORDER_AHEAD) {
                let (link, _, _) = self.links[i + 2 * IN_ORDER_AHEAD];
                self.simulation.prefetch(link, dep_of(ahead));
            }
            if let Some(&(link, _, _)) = self.links.get(i + IN_ORDER_AHEAD) {
                self.simulation.prefetch_tail(link);
            }
            let (link, src, dst) = self.links[i];
            let bytes = self.p.chunk_bytes[s.chunk as usize];
            let dep = dep_of(s);
            let times = self.simulation.push_on(link, bytes, dep, Op::Copy)?;
            if let (Some(rows), Some((tap, id))) = (&mut self.rows, self.tapping) {
                rows.push(Transfer { src, dst, bytes }, s, times);
                if rows.times.issued.len() == ROW_GROUP {
                    rows.hand_over(tap, id);
                }
            }
        }
        Ok(())
    }

    /// Hands the last rows to the tap.
    fn finish(mut self) {
        if let (Some(rows), Some((tap, id))) = (&mut self.rows, self.tapping) {
            rows.hand_over(tap, id);
        }
    }
}

/// Rows simulated in order and not yet handed to the tap, with their times: a row group at most.
struct TappedRows {
    rows: CopyRows,
    times: sim::TransferTimes,
}

impl TappedRows {
    fn new(first: u64) -> TappedRows {
        TappedRows {
            rows: CopyRows::new(first, ROW_GROUP),
            times: sim::TransferTimes {
                issued: Vec::with_capacity(ROW_GROUP),
                completed: Vec::with_capacity(ROW_GROUP),
            },
        }
    }

    fn push(&mut self, transfer: Transfer, s: &Send, (issued, completed): (Time, Time)) {
        let dep = (s.via != NONE).then_some(s.via as u64);
        let Transfer { src, dst, bytes } = transfer;
        self.rows.push(src, dst, bytes, dep, s.chunk);
        self.times.issued.push(issued);
        self.times.completed.push(completed);
    }

    /// Gives the rows held to `tap`'s stream `id`, if there are any.
    fn hand_over(&mut self, tap: &dyn ScheduleTap, id: u64) {
        if self.rows.is_empty() {
            return;
        }
        let full = std::mem::replace(self, TappedRows::new(self.rows.next()));
        tap.rows(id, full.rows.into_rows(), Some(full.times));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::parse_inline;
    use crate::units::Bandwidth;

    /// Every degree unwinding's latency floor lies under the simulated time of the schedule
    /// synthesized on it, and the default search, which skips the unwindings whose floor reaches
    /// the first one's time, keeps the fastest of them all; at 1 KB the floors do skip some.
    #[test]
    fn unwindings_skipped_by_their_latency_floor_could_not_win() {
        let topology = parse_inline(
            "dims:switch4,switch4",
            &[Bandwidth::gb_per_sec(200.0), Bandwidth::gb_per_sec(50.0)],
            &[Time::from_ns(700), Time::from_ns(1700)],
        )
        .unwrap();
        let npus = topology.active_npus();
        let unwindings = [
            Unwinding::Split,
            Unwinding::Degree(1),
            Unwinding::Degree(2),
            Unwinding::Degree(3),
        ];
        let mut skipped = 0;
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::Broadcast,
        ] {
            for size in [1_000, 64_000_000] {
                let root = (kind == CollectiveKind::Broadcast).then_some(npus[5]);
                let c = Collective::new(kind, npus.clone(), size, 1, root).unwrap();
                let collectives = [c];
                let judged_on = |unwinding: Option<Unwinding>| {
                    let options = SynthOptions {
                        unwinding,
                        ..SynthOptions::default()
                    };
                    // The search itself, not the symmetric plan `synthesize` would take here.
                    let synthesis = synthesize_unwound(
                        &topology,
                        &mut Unwound::default(),
                        &collectives,
                        &options,
                    )
                    .unwrap();
                    (judged(&topology, &synthesis).unwrap(), synthesis.choice)
                };
                let times: Vec<Time> = unwindings.iter().map(|&u| judged_on(Some(u)).0).collect();
                for (u, time) in unwindings.iter().zip(&times).skip(1) {
                    let net = Network::from_topology(&topology, *u).unwrap();
                    let floor = net.latency_floor(&topology, &collectives);
                    assert!(floor <= *time, "{kind} {size} B, {}", u.name());
                }
                let fastest = *times.iter().min().unwrap();
                let (time, choice) = judged_on(None);
                assert_eq!(time, fastest, "{kind} {size} B");
                // The report names the kept unwinding and each skipped one with its floor.
                let kept = choice.unwinding.unwrap();
                assert_eq!(
                    times[unwindings.iter().position(|&u| u == kept).unwrap()],
                    time
                );
                for &(u, floor) in &choice.skipped {
                    assert!(u != kept && floor >= time, "{kind} {size} B, {}", u.name());
                }
                skipped += choice.skipped.len();
            }
        }
        assert!(skipped > 0);
    }
}
