//! One greedy run split between two workers, each matching the links into half of the NPUs.
//!
//! On the largest meshes the greedy alone bounds the whole synthesis, and its time is spent
//! waiting for scattered memory: a second core waits on as many reads again. Simulated time is
//! cut into windows no longer than the shortest arrival delay, so that a send made in one window
//! arrives in a later one. Between windows the workers swap the sends they made; each schedules
//! the arrivals of the other's sends at the NPUs whose outgoing links it matches (the border) at
//! their times, before it handles the window they fall in. So every link still sends each chunk
//! at the instant the chunk is at its source and the link is free, in the order the chunks came,
//! and the estimate stays the simulated time.
//!
//! Each worker reads and writes only its own state: the claims of its NPUs, the logs of its NPUs
//! and of the border, the links into its NPUs, its own random stream. The run is deterministic
//! and does not depend on the cores, but it is not the single worker's run: a chunk's holders
//! (rarest first) count the other worker's sends up to the window's start only, and the random
//! choices come from two streams. Sends are handed on window by window, the first worker's, then
//! the second's, and numbered in that order: each link's sends stay in start order and every send
//! comes after the one it depends on (made in an earlier window), which is what the simulation
//! of a streamed schedule needs (`sim::InOrder`).

use std::sync::mpsc;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{undeliverable, Event, Matching, Network, Problem, Send, State, NONE};
use crate::units::Time;
use crate::Error;

/// Runs with at most this many (NPU, chunk) pairs stay on one worker: the split's swaps and
/// border cost more than they save where the greedy's state fits the caches, and runs up to a
/// 64x64 mesh keep the plans of the single worker.
const SPLIT_FROM_PAIRS: u64 = 1 << 24;

/// A split is kept only when at most this fraction of the links cross between the halves (the
/// border's logs are kept by both workers).
const MOST_CROSSING: usize = 8;

/// Windows of sends the workers may hand on before the caller takes them.
const WINDOWS_AHEAD: usize = 4;

/// How a run is split: where, and how long its windows are.
pub(super) struct Split {
    /// The first NPU of the second worker's half (NPUs are numbered row by row on meshes and
    /// tori, so the halves meet along one row).
    middle: u32,
    /// The shortest arrival delay of any send: the longest window.
    window: Time,
    /// Per NPU: whether one of its outgoing links goes into the other half.
    border: Vec<bool>,
}

impl Split {
    /// The split of a run of `problem` on `net`, where one is worth it and keeps the run exact:
    /// every NPU wants every chunk, as in an all-gather (a chunk's use is its destination's
    /// claims bit alone), large, on links
    /// where every NPU's incoming links are equally fast (a slow link never leaves a chunk to
    /// a faster one, which would read another NPU's claims), with no clusters, and halves joined
    /// by few links.
    pub(super) fn plan(net: &Network, problem: &Problem) -> Option<Split> {
        Split::plan_above(net, problem, SPLIT_FROM_PAIRS)
    }

    /// [`Split::plan`] for runs of more than `least` (NPU, chunk) pairs.
    fn plan_above(net: &Network, problem: &Problem, least: u64) -> Option<Split> {
        let n = net.npus();
        if !problem.copies_to_all() || net.clusters > 1 || problem.pairs(n) <= least {
            return None;
        }
        let largest = problem.chunk_bytes.iter().copied().max()?;
        let smallest = problem.chunk_bytes.iter().copied().min()?;
        let arrival = |l: u32| net.delays(l, largest).1;
        let uneven = (0..n).any(|v| {
            let links = net.in_links(v);
            links.windows(2).any(|w| arrival(w[0]) != arrival(w[1]))
        });
        if uneven {
            return None;
        }
        let middle = n / 2;
        let mut border = vec![false; n as usize];
        let mut crossing = 0;
        for link in &net.links {
            if (link.src >= middle) != (link.dst >= middle) {
                border[link.src as usize] = true;
                crossing += 1;
            }
        }
        if crossing * MOST_CROSSING > net.links.len() {
            return None;
        }
        let window = (0..net.links.len() as u32)
            .map(|l| net.delays(l, smallest).1)
            .min()?;
        if window == Time::ZERO {
            return None;
        }
        Some(Split {
            middle,
            window,
            border,
        })
    }

    /// The worker that matches the links into `npu`.
    fn worker_of(&self, npu: u32) -> usize {
        usize::from(npu >= self.middle)
    }

    /// The NPUs worker `worker` matches the links into.
    fn half(&self, worker: usize, n: u32) -> std::ops::Range<u32> {
        match worker {
            0 => 0..self.middle,
            _ => self.middle..n,
        }
    }
}

/// What a worker hands the other between windows.
struct Report {
    /// The sends it made in the window, in the order it made them.
    sends: Arc<Vec<Send>>,
    /// The places in `sends` of those that arrive at the border: the other schedules their
    /// arrivals.
    relayed: Vec<u32>,
    /// Its earliest pending event, or arrival at the other's border, if any: the next window
    /// starts at the earlier of the two workers'.
    next: Option<Time>,
}

/// What a worker leaves at the end.
struct Outcome {
    makespan: Time,
    /// The first of its (NPU, chunk) pairs that was wanted and not delivered.
    missing: Option<(u32, u32)>,
}

/// [`super::run`] on two workers as `plan` splits it; the random streams are drawn from `rng`.
pub(super) fn run(
    net: &Network,
    problem: &Problem,
    rng: &mut ChaCha8Rng,
    sink: &mut dyn FnMut(&[Send]),
    plan: &Split,
) -> Result<Time, Error> {
    let streams: [u64; 2] = [rng.random(), rng.random()];
    let (to_second, from_first) = mpsc::channel();
    let (to_first, from_second) = mpsc::channel();
    let (first_out, first_made) = mpsc::sync_channel(WINDOWS_AHEAD);
    let (second_out, second_made) = mpsc::sync_channel(WINDOWS_AHEAD);
    let peers = [
        Peer {
            to_other: to_second,
            from_other: from_second,
            out: first_out,
        },
        Peer {
            to_other: to_first,
            from_other: from_first,
            out: second_out,
        },
    ];
    let outcomes = std::thread::scope(|scope| {
        let workers: Vec<_> = peers
            .into_iter()
            .zip(streams)
            .enumerate()
            .map(|(me, (peer, stream))| {
                scope.spawn(move || work(me, net, problem, plan, stream, peer))
            })
            .collect();
        while let (Ok(a), Ok(b)) = (first_made.recv(), second_made.recv()) {
            sink(&a);
            sink(&b);
        }
        workers
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect::<Vec<_>>()
    });
    let mut makespan = Time::ZERO;
    for outcome in outcomes {
        let outcome = outcome?;
        if let Some((npu, chunk)) = outcome.missing {
            return Err(undeliverable(net, npu, chunk));
        }
        makespan = makespan.max(outcome.makespan);
    }
    Ok(makespan)
}

/// A worker's channels: to and from the other worker, and to the caller.
struct Peer {
    to_other: mpsc::Sender<Report>,
    from_other: mpsc::Receiver<Report>,
    out: mpsc::SyncSender<Arc<Vec<Send>>>,
}

/// The error for a worker whose partner stopped.
fn hung_up<T>(_: T) -> Error {
    Error::Internal("a synthesis worker stopped before the run ended".into())
}

/// Worker `me`'s part of the run: the links into its half of the NPUs.
fn work(
    me: usize,
    net: &Network,
    problem: &Problem,
    plan: &Split,
    stream: u64,
    peer: Peer,
) -> Result<Outcome, Error> {
    let other = 1 - me;
    let own = plan.half(me, net.npus());
    let mut matching = Matching::new(State::new(net, problem, own.clone()));
    // What the other half holds from the start, each pair once, counts among the holders.
    let mut held: Vec<(u32, u32)> = problem
        .initial
        .iter()
        .filter(|h| !own.contains(&h.npu))
        .map(|h| (h.npu, h.chunk))
        .collect();
    held.sort_unstable();
    held.dedup();
    for &(_, chunk) in &held {
        matching.state.holders[chunk as usize] += 1;
    }
    matching.hold_initial(|npu| own.contains(&npu) || plan.border[npu as usize]);
    let mut rng = ChaCha8Rng::seed_from_u64(stream);
    let mut ids = SendIds::default();
    let mut made: Vec<Send> = Vec::new();
    loop {
        let mine = Arc::new(std::mem::take(&mut made));
        let relayed: Vec<u32> = (0..mine.len() as u32)
            .filter(|&i| plan.border[net.links[mine[i as usize].link as usize].dst as usize])
            .collect();
        let next = relayed
            .iter()
            .map(|&i| mine[i as usize].arrive)
            .chain(matching.pending.next_time())
            .min();
        let report = Report {
            sends: Arc::clone(&mine),
            relayed,
            next,
        };
        peer.to_other.send(report).map_err(hung_up)?;
        peer.out.send(Arc::clone(&mine)).map_err(hung_up)?;
        let theirs = peer.from_other.recv().map_err(hung_up)?;
        let mut counts = [0; 2];
        counts[me] = mine.len() as u32;
        counts[other] = theirs.sends.len() as u32;
        let their_first = ids.counted[other];
        ids.record(counts);
        for s in theirs.sends.iter() {
            matching.state.holders[s.chunk as usize] += 1;
        }
        for &i in &theirs.relayed {
            let s = &theirs.sends[i as usize];
            let link = &net.links[s.link as usize];
            let arrival = Event::Arrive {
                npu: link.dst,
                chunk: s.chunk,
                send: their_first + i,
                from: link.src,
            };
            matching.pending.push_relayed(s.start, s.arrive, arrival);
        }
        let Some(start) = next.into_iter().chain(theirs.next).min() else {
            break;
        };
        let end = start + plan.window;
        let mut sink = |s: &[Send]| made.extend_from_slice(s);
        let mut via = |npu: u32, send: u32| ids.number(plan.worker_of(npu), send);
        while matching.pending.next_time().is_some_and(|t| t < end) {
            matching.step(&mut rng, &mut sink, &mut via);
        }
    }
    Ok(Outcome {
        makespan: matching.state.makespan,
        missing: matching.state.missing(),
    })
}

/// The run's numbers of the workers' sends: window by window, the first worker's sends, then
/// the second's. A worker numbers its sends in its own count as it makes them; this maps that
/// count to the run's, once the window's counts of both are known.
#[derive(Default)]
struct SendIds {
    /// Per worker, per window in which it made sends: the first one's number in its count and
    /// in the run's.
    starts: [Vec<(u32, u32)>; 2],
    /// Per worker: its sends so far.
    counted: [u32; 2],
    /// The run's sends so far.
    numbered: u32,
    /// Per worker: the entry of `starts` its last lookup found (lookups mostly stay or move on
    /// by one).
    hint: [usize; 2],
}

impl SendIds {
    /// Numbers a window in which the workers made `counts` sends.
    fn record(&mut self, counts: [u32; 2]) {
        for (worker, &count) in counts.iter().enumerate() {
            if count > 0 {
                self.starts[worker].push((self.counted[worker], self.numbered));
                self.counted[worker] += count;
                self.numbered += count;
            }
        }
    }

    /// The run's number of `worker`'s send `local` (in its own count), from a window already
    /// recorded.
    fn number(&mut self, worker: usize, local: u32) -> u32 {
        debug_assert_ne!(local, NONE);
        let starts = &self.starts[worker];
        let holds =
            |k: usize| starts[k].0 <= local && starts.get(k + 1).is_none_or(|next| local < next.0);
        let hint = self.hint[worker];
        let k = if holds(hint) {
            hint
        } else if hint + 1 < starts.len() && holds(hint + 1) {
            hint + 1
        } else {
            starts.partition_point(|&(first, _)| first <= local) - 1
        };
        self.hint[worker] = k;
        starts[k].1 + (local - starts[k].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Op;
    use crate::sim::{InOrder, SimOptions};
    use crate::synth::network::Unwinding;
    use crate::topology::{Topology, TopologyOptions};

    fn network(spec: &str, bandwidth: &str, latency: &str) -> (Topology, Network) {
        let topology = TopologyOptions::new(spec)
            .with_links(bandwidth, latency)
            .build()
            .unwrap();
        let net = Network::from_topology(&topology, Unwinding::Degree(1)).unwrap();
        (topology, net)
    }

    /// An all-gather of chunks of two sizes a byte apart, as a size that does not divide
    /// evenly leaves them.
    fn all_gather(npus: u32, bytes: u64) -> Problem {
        let mut problem = Problem::all_gather(npus, bytes, npus);
        for (c, b) in problem.chunk_bytes.iter_mut().enumerate() {
            *b += c as u64 % 2;
        }
        problem
    }

    fn split_run(net: &Network, problem: &Problem, seed: u64) -> (Vec<Send>, Time) {
        let plan = Split::plan_above(net, problem, 0).expect("a mesh all-gather splits");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut sends = Vec::new();
        let mut sink = |s: &[Send]| sends.extend_from_slice(s);
        let time = run(net, problem, &mut rng, &mut sink, &plan).unwrap();
        (sends, time)
    }

    /// A split run is an all-gather: every NPU gets every chunk it did not hold exactly once,
    /// each send after the one that brought its chunk to the link's source (numbered by the
    /// order sends are handed on); and the simulation of the sends in that order completes each
    /// at the time the run planned (so links serve one send at a time, in the run's order, and
    /// the estimate is the simulated time). The same seed gives the same sends.
    #[test]
    fn a_split_run_delivers_every_chunk_once_at_its_simulated_time() {
        let cases = [
            ("mesh:16x11", "50GiB/s", "0.5us", 1 << 20),
            ("torus:12x12", "25GB/s", "2us", 3 << 18),
            ("mesh:10x10", "100GB/s", "0ns", 1 << 16),
        ];
        for (spec, bandwidth, latency, bytes) in cases {
            let (topology, net) = network(spec, bandwidth, latency);
            let n = net.npus();
            let problem = all_gather(n, bytes);
            let (sends, time) = split_run(&net, &problem, 7);
            assert_eq!(sends.len() as u64, n as u64 * (n as u64 - 1), "{spec}");
            let mut got = vec![false; (n * n) as usize];
            let mut simulation =
                InOrder::new(&topology, &SimOptions::default(), sends.len() as u64).unwrap();
            for (i, s) in sends.iter().enumerate() {
                let link = &net.links[s.link as usize];
                let pair = (link.dst * n + s.chunk) as usize;
                assert!(!got[pair] && s.chunk != link.dst, "{spec}: send {i} again");
                got[pair] = true;
                let dep = match s.via {
                    NONE => {
                        assert_eq!(s.chunk, link.src, "{spec}: send {i} from nowhere");
                        None
                    }
                    via => {
                        assert!((via as usize) < i, "{spec}: send {i} before its dependency");
                        let before = sends[via as usize];
                        let there = net.links[before.link as usize].dst;
                        assert_eq!((there, before.chunk), (link.src, s.chunk), "{spec}: {i}");
                        assert!(before.arrive <= s.start, "{spec}: send {i} too early");
                        Some(via as u64)
                    }
                };
                let (src, dst) = net.ends(s.link);
                let bytes = problem.chunk_bytes[s.chunk as usize];
                let (_, completed) = simulation.push(src, dst, bytes, dep, Op::Copy).unwrap();
                assert_eq!(completed, s.arrive, "{spec}: send {i}");
            }
            assert_eq!(simulation.finish().unwrap().finish, time, "{spec}");
            assert_eq!(
                split_run(&net, &problem, 7),
                (sends, time),
                "{spec}: reproducible"
            );
        }
    }

    /// Runs that would lose by a split, or whose matching reads across the halves, stay whole.
    #[test]
    fn small_uneven_and_non_all_gather_runs_stay_whole() {
        let (_, net) = network("mesh:6x6", "50GiB/s", "0.5us");
        let problem = all_gather(36, 1 << 20);
        assert!(Split::plan(&net, &problem).is_none(), "small");
        assert!(Split::plan_above(&net, &problem, 0).is_some());
        let (_, uneven) = network("mesh:6x6", "50GiB/s,100GiB/s", "0.5us");
        assert!(Split::plan_above(&uneven, &problem, 0).is_none(), "uneven");
        let mut unicast = problem.clone();
        unicast.dest = (0..36).collect();
        assert!(Split::plan_above(&net, &unicast, 0).is_none(), "unicast");
        let (_, ring) = network("fc:8", "50GiB/s", "0.5us");
        assert!(
            Split::plan_above(&ring, &all_gather(8, 1 << 20), 0).is_none(),
            "fc"
        );
    }

    /// Sends are numbered window by window, the first worker's before the second's, whatever
    /// order they are looked up in.
    #[test]
    fn sends_are_numbered_window_by_window_first_worker_first() {
        let mut ids = SendIds::default();
        // Window 0: 2 and 3 sends; window 1: none and 4; window 2: 1 and 0.
        for counts in [[2, 3], [0, 4], [1, 0]] {
            ids.record(counts);
        }
        let expected = [
            (0, 0, 0),
            (0, 1, 1),
            (1, 0, 2),
            (1, 2, 4),
            (1, 3, 5),
            (1, 6, 8),
            (0, 2, 9),
        ];
        for &(worker, local, run) in expected.iter().chain(expected.iter().rev()) {
            assert_eq!(
                ids.number(worker, local),
                run,
                "worker {worker} send {local}"
            );
        }
        assert_eq!(ids.numbered, 10);
    }
}
