//! The TACOS-style synthesizer: topology-aware collective schedules by greedy link-chunk matching
//! over a time-expanded network. A producer of the schedule IR like the baselines; what it
//! produces is validated and simulated like any other schedule.
//!
//! All-gather and broadcast spread chunks forward (`greedy::run`). Reduce-scatter and reduce
//! are the same spreading on the transposed network, run backwards in time with reductions.
//! All-reduce is reduce-scatter, then all-gather of each piece from the moment its reduction is
//! done. Several collectives at once are matched together, sharing the links.

mod greedy;
mod hierarchy;
mod ilp;
mod network;
mod rooted;
mod search;
mod sketch;
mod stream;
mod symmetric;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::algorithms::builder::Builder;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule, ScheduleRows};
use crate::sim::{self, SimOptions};
use crate::topology::Topology;
use crate::units::Time;
use crate::Error;
use greedy::{Holding, Members, Problem, Send, NONE};
use ilp::Deadline;
pub use ilp::{IlpOptions, IlpReport, IlpStatus};
use network::Network;
pub use network::Unwinding;
use search::{fastest_unwinding, judged, with_chunking, with_skipped};
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
/// `symmetric::SEARCHED_UP_TO` NPUs, and for the integer program, beside the search over
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
        return stream::stream_forward(topology, net, &forward, &collectives[0], options);
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
