//! One forward collective (all-gather, broadcast) streamed rather than held: the best trial
//! re-run and written straight into its schedule, or, where the run asks for it and the
//! network allows, simulated (and validated) send by send in issue order.

use super::greedy::{self, Problem, Send, NONE};
use super::network::Network;
use super::{
    best_trial, stream, Choice, Direction, InOrderRun, InOrderSimulation, ScheduleTap,
    SynthOptions, Synthesis,
};
use crate::collective::Collective;
use crate::schedule::{schedule_rows, CopyRows, Op, Schedule, Transfer, ROW_GROUP};
use crate::sim;
use crate::topology::{LinkId, NodeId, Topology};
use crate::units::Time;
use crate::Error;

/// One forward collective, written straight into its schedule as the best trial is re-run: no
/// plan is held in memory, so the largest all-gathers fit (a 128x128 mesh has 268M transfers).
/// Or, where the run asks for it ([`InOrderRun`]) and the network allows, simulated (and
/// validated) send by send without being held at all.
pub(super) fn stream_forward(
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
