//! What the greedy runs on: through switches, each unwinding that may win (synthesized side
//! by side, the one that simulates fastest kept), and the X-way chunking, refined while the
//! simulated time improves and stays above the lower bound.

use rayon::prelude::*;

use super::ilp::{Deadline, IlpStatus};
use super::network::{self, Network, Unwinding};
use super::{synthesize_on, Method, SynthOptions, Synthesis, Unwound, KEEP_PLANS_UP_TO, MAX_X_WAY};
use crate::collective::Collective;
use crate::schedule::Schedule;
use crate::sim::{self, SimOptions};
use crate::topology::Topology;
use crate::units::Time;
use crate::Error;

/// The greedy's schedule on each unwinding that may win, synthesized side by side, and the one
/// that simulates fastest on `topology` (the first of equal times). Their rows are not streamed
/// to the tap, whose one stream would go to whichever finished last; the caller writes the kept
/// schedule.
pub(super) fn fastest_unwinding(
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
pub(super) fn with_skipped(
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
pub(super) fn with_chunking(
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
pub(super) fn judged(topology: &Topology, synthesis: &Synthesis) -> Result<Time, Error> {
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
