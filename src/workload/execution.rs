//! Running per-rank programs ([`super::program`]) on the event engine, and where each rank's
//! iteration went.
//!
//! The breakdown follows each rank's compute stream: the time between one compute node's end and
//! the next one's start is exposed communication, charged to the communication among the node's
//! dependencies that finished last (its kind, and its data- or model-parallel group), or idle
//! when it waited for no communication.

use super::emitter;
use super::program::{Program, Task};
use super::{Breakdown, TrainOptions};
use crate::sim::{self, Observer, SimOptions};
use crate::topology::{NodeId, Topology};
use crate::units::Time;
use crate::Error;

/// Where one rank's iteration went.
#[derive(Clone, Debug, PartialEq)]
pub struct RankBreakdown {
    pub rank: u32,
    /// The rank's compute, exposed communication (data- and model-parallel) and total.
    pub breakdown: Breakdown,
    /// Exposed communication per kind (collective names, `send-recv`), in the order first seen.
    pub exposed_by_kind: Vec<(&'static str, Time)>,
    /// Exposed communication per group kind ([`super::CommGroup::name`]; point-to-point messages are
    /// `pipeline`), in the order first seen. Waits for a message its sender had not yet sent
    /// are not communication: they are the `bubble`.
    pub exposed_by_group: Vec<(&'static str, Time)>,
    /// Stalls of the compute stream waiting for a message that had not yet left its sender
    /// (in a pipeline, the bubble).
    pub bubble: Time,
    /// Stalls of the compute stream that waited for no communication.
    pub idle: Time,
}

/// A span of a rank's timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub rank: u32,
    pub name: String,
    pub compute: bool,
    pub start: Time,
    pub end: Time,
}

/// The result of running a program.
#[derive(Clone, Debug)]
pub struct Execution {
    /// The slowest rank's breakdown (ties to the lowest rank).
    pub breakdown: Breakdown,
    pub ranks: Vec<RankBreakdown>,
    /// Which of `ranks` is the slowest (the one `breakdown` is).
    pub slowest: usize,
    pub timeline: Vec<Span>,
    /// The serial communicators found alone on their links, whose collectives took the time
    /// they take alone ([`Program::serial_communicators`]), sorted.
    pub timed_alone: Vec<String>,
    /// Per link of the topology: bytes carried and time spent serialising them, the
    /// collectives timed alone included (as they ran alone).
    pub link_bytes: Vec<u64>,
    pub link_busy: Vec<Time>,
    /// Per link: the most messages it held at once, and the time messages waited for it (of
    /// the simulated traffic; collectives timed alone never wait).
    pub link_max_queue: Vec<u32>,
    pub link_queued: Vec<Time>,
}

/// Runs `program` on `topology`, rank `r` on NPU `npus[r]`.
pub fn execute(
    topology: &Topology,
    program: &Program,
    npus: &[NodeId],
    options: &TrainOptions,
    observer: &mut dyn Observer,
) -> Result<Execution, Error> {
    program.check_placement(npus)?;
    let emitted = emitter::emit(topology, program, npus, options)?;
    let sim_options = SimOptions {
        record_transfers: true,
        ..options.sim.clone()
    };
    let result = sim::simulate(topology, &emitted.schedule, &sim_options, observer)?;
    let completed = &result.completed;
    let mut ranks = Vec::with_capacity(program.ranks.len());
    let mut timeline = Vec::new();
    for (r, nodes) in program.ranks.iter().enumerate() {
        let ends = &emitted.end[r];
        let keep_spans = options
            .timeline_ranks
            .as_ref()
            .is_none_or(|list| list.contains(&(r as u32)));
        let mut row = RankBreakdown {
            rank: r as u32,
            breakdown: Breakdown {
                workload: program.name.clone(),
                algorithm: options.algorithm.name().to_string(),
                forward_compute: Time::ZERO,
                backward_compute: Time::ZERO,
                exposed_comm: Time::ZERO,
                exposed_data_parallel: Time::ZERO,
                exposed_model_parallel: Time::ZERO,
                total: Time::ZERO,
                notes: Vec::new(),
            },
            exposed_by_kind: Vec::new(),
            exposed_by_group: Vec::new(),
            bubble: Time::ZERO,
            idle: Time::ZERO,
        };
        let sum = &mut row.breakdown;
        let mut free = Time::ZERO;
        for &i in &emitted.compute_order[r] {
            let node = &nodes[i as usize];
            let Task::Compute { forward, .. } = node.task else {
                unreachable!("the compute order holds compute nodes")
            };
            let wait = ends[i as usize];
            let (started, done) = (
                result.issued(&emitted.schedule, wait),
                completed[wait as usize],
            );
            let stall = started - free.min(started);
            if stall > Time::ZERO {
                let from = free.min(started);
                let completion = |d: u32| completed[ends[d as usize] as usize];
                // The latest to finish of the communication among `deps`: any (`None`), or only
                // received messages (`Some(true)`) or only the rest (`Some(false)`).
                let latest_of = |deps: &[u32], recv: Option<bool>| {
                    deps.iter()
                        .copied()
                        .filter(|&d| {
                            let task = &nodes[d as usize].task;
                            task.is_communication()
                                && recv.is_none_or(|r| matches!(task, Task::Recv { .. }) == r)
                        })
                        .max_by_key(|&d| completion(d))
                };
                let latest = |recv: Option<bool>| latest_of(&node.deps, recv);
                // The stall is the rank's own communication's until that ends (its stream could
                // not have gone on before), then the latest message's: a pipeline stage busy with
                // its own collectives is not waiting for the stage before it.
                let segments = match (latest(Some(false)), latest(Some(true))) {
                    (Some(own), Some(message))
                        if completion(message) > completion(own) && completion(own) > from =>
                    {
                        let split = completion(own).min(started);
                        vec![(own, from, split), (message, split, started)]
                    }
                    _ => latest(None)
                        .map(|d| (d, from, started))
                        .into_iter()
                        .collect(),
                };
                if segments.is_empty() {
                    row.idle = row.idle + stall;
                }
                for (d, from, until) in segments {
                    charge_exposed(
                        sum,
                        &mut row.exposed_by_kind,
                        &nodes[d as usize].task,
                        until - from,
                    );
                    // By group: the segment is split along the chain of communication it
                    // waited for (each its part after the one before it ended), and the part of a
                    // wait for a message before the message left its sender is the sender's
                    // lateness (the bubble), not communication.
                    let mut until = until;
                    let mut link = Some(d);
                    while let Some(e) = link {
                        if until <= from {
                            break;
                        }
                        let node = &nodes[e as usize];
                        let before = latest_of(&node.deps, None);
                        let begun = match node.task {
                            Task::Recv { .. } => {
                                let left = emitted.start[r][e as usize]
                                    .map_or(Time::ZERO, |s| result.issued(&emitted.schedule, s));
                                let left = left.clamp(from, until);
                                row.bubble = row.bubble + (left - from);
                                link = None;
                                left
                            }
                            _ => match before {
                                Some(x) => {
                                    link = Some(x);
                                    completion(x).clamp(from, until)
                                }
                                None => {
                                    link = None;
                                    from
                                }
                            },
                        };
                        add_to(
                            &mut row.exposed_by_group,
                            node.task.group_name(),
                            until - begun,
                        );
                        until = begun;
                    }
                }
            }
            let spent = done - started;
            if forward {
                sum.forward_compute = sum.forward_compute + spent;
            } else {
                sum.backward_compute = sum.backward_compute + spent;
            }
            free = done;
            if keep_spans {
                timeline.push(Span {
                    rank: r as u32,
                    name: node.name.clone(),
                    compute: true,
                    start: started,
                    end: done,
                });
            }
        }
        for (i, node) in nodes.iter().enumerate() {
            let end = completed[ends[i] as usize];
            sum.total = sum.total.max(end);
            if keep_spans && node.task.is_communication() {
                let start =
                    emitted.start[r][i].map_or(Time::ZERO, |s| result.issued(&emitted.schedule, s));
                timeline.push(Span {
                    rank: r as u32,
                    name: node.name.clone(),
                    compute: false,
                    start: start.min(end),
                    end,
                });
            }
        }
        // Communication the stream ends with, after its last compute (a distributed
        // optimizer's gathers after its step), is exposed too: charged to the last to finish.
        if sum.total > free {
            let tail = sum.total - free;
            let last = (0..nodes.len())
                .filter(|&i| nodes[i].task.is_communication())
                .max_by_key(|&i| completed[ends[i] as usize]);
            match last.map(|i| &nodes[i].task) {
                Some(task) => {
                    charge_exposed(sum, &mut row.exposed_by_kind, task, tail);
                    add_to(&mut row.exposed_by_group, task.group_name(), tail);
                }
                None => row.idle = row.idle + tail,
            }
        }
        ranks.push(row);
    }
    let slowest = (0..ranks.len())
        .max_by_key(|&r| (ranks[r].breakdown.total, std::cmp::Reverse(r)))
        .expect("programs have ranks");
    let mut breakdown = ranks[slowest].breakdown.clone();
    breakdown.notes = emitted.notes;
    let (mut link_bytes, mut link_busy) = (result.link_bytes, result.link_busy);
    for (l, &b) in emitted.solo_link_bytes.iter().enumerate() {
        link_bytes[l] += b;
        link_busy[l] = link_busy[l] + emitted.solo_link_busy[l];
    }
    Ok(Execution {
        breakdown,
        ranks,
        slowest,
        timeline,
        timed_alone: emitted.timed_alone,
        link_bytes,
        link_busy,
        link_max_queue: result.link_max_queue,
        link_queued: result.link_queued,
    })
}

/// Charges `stall`, a wait of the compute stream for `task`, as exposed communication: to the
/// total, `task`'s kind and its data- or model-parallel side.
fn charge_exposed(
    sum: &mut Breakdown,
    by_kind: &mut Vec<(&'static str, Time)>,
    task: &Task,
    stall: Time,
) {
    sum.exposed_comm = sum.exposed_comm + stall;
    add_to(by_kind, task.kind_name(), stall);
    match task {
        Task::Collective { group, .. } if group.is_model_parallel() => {
            sum.exposed_model_parallel = sum.exposed_model_parallel + stall
        }
        _ => sum.exposed_data_parallel = sum.exposed_data_parallel + stall,
    }
}

/// Adds `time` to `key`'s entry of `list`, appending the key when first seen.
fn add_to(list: &mut Vec<(&'static str, Time)>, key: &'static str, time: Time) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, t)) => *t = *t + time,
        None => list.push((key, time)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::Algorithm;
    use crate::collective::CollectiveKind;
    use crate::topology::TopologyOptions;
    use crate::workload::{CommGroup, Node};

    fn options() -> TrainOptions {
        TrainOptions::new(Algorithm::Ring)
    }

    fn node(id: u64, task: Task, deps: Vec<u32>) -> Node {
        Node {
            id,
            name: format!("n{id}"),
            task,
            deps,
        }
    }

    /// A collective on a communicator of one rank takes no time; compute on each rank runs one
    /// node at a time even without dependencies between the nodes.
    #[test]
    fn lone_collectives_are_free_and_compute_is_serial() {
        let t = TopologyOptions::new("ring:2").build().unwrap();
        let compute = |us: u64| Task::Compute {
            duration: Time::from_ns(us * 1000),
            forward: true,
        };
        let rank = |r: u32| {
            vec![
                node(0, compute(3), vec![]),
                node(1, compute(4), vec![]),
                node(
                    2,
                    Task::Collective {
                        kind: CollectiveKind::AllReduce,
                        bytes: 1 << 20,
                        communicator: format!("solo{r}"),
                        group: CommGroup::Data,
                        times: 1,
                    },
                    vec![0, 1],
                ),
            ]
        };
        let program = Program {
            name: "p".into(),
            ranks: vec![rank(0), rank(1)],
            ..Program::default()
        };
        let run = execute(&t, &program, &[0, 1], &options(), &mut ()).unwrap();
        assert_eq!(run.breakdown.total, Time::from_ns(7000));
        assert_eq!(run.breakdown.exposed_comm, Time::ZERO);
    }

    /// A rank's time is its compute, exposed communication, bubble and idle time, also when it
    /// ends with communication after its last compute: a 2 MiB all-gather over a 1 GB/s ring of
    /// two (1 MiB each way, 1 us a hop) after 3 us of compute is exposed whole.
    #[test]
    fn communication_after_the_last_compute_is_exposed() {
        let t = TopologyOptions::new("ring:2")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap();
        let rank = vec![
            node(
                0,
                Task::Compute {
                    duration: Time::from_ns(3000),
                    forward: false,
                },
                vec![],
            ),
            node(
                1,
                Task::Collective {
                    kind: CollectiveKind::AllGather,
                    bytes: 1 << 21,
                    communicator: "dp".into(),
                    group: CommGroup::Data,
                    times: 1,
                },
                vec![0],
            ),
        ];
        let program = Program {
            name: "p".into(),
            ranks: vec![rank.clone(), rank],
            ..Program::default()
        };
        let run = execute(&t, &program, &[0, 1], &options(), &mut ()).unwrap();
        for r in &run.ranks {
            let b = &r.breakdown;
            let parts = b.forward_compute + b.backward_compute + b.exposed_comm + r.bubble + r.idle;
            assert_eq!(parts, b.total, "rank {}", r.rank);
            assert!(b.exposed_data_parallel > Time::from_ns(1_000_000));
            assert_eq!(r.exposed_by_group, vec![("data", b.exposed_comm)]);
        }
    }

    /// A pipeline stage busy with its own collective is not waiting for the stage before it:
    /// rank 1 all-gathers with rank 0 (2 MiB over a 1 GB/s ring of two: about 1.05 ms), then
    /// waits for rank 0's message, sent 2 ms of compute after the same gather and taking about
    /// 1.05 ms itself. Rank 1's wait is the gather's until it ends (data), the 2 ms before the
    /// message left (bubble), then the message's flight (pipeline).
    #[test]
    fn a_stage_waits_for_its_own_collective_before_the_message() {
        let t = TopologyOptions::new("ring:2")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap();
        let compute = |us: u64| Task::Compute {
            duration: Time::from_ns(us * 1000),
            forward: true,
        };
        let gather = Task::Collective {
            kind: CollectiveKind::AllGather,
            bytes: 1 << 21,
            communicator: "dp".into(),
            group: CommGroup::Data,
            times: 1,
        };
        let message = |send: bool| {
            if send {
                Task::Send {
                    peer: 1,
                    bytes: 1 << 20,
                    tag: 0,
                }
            } else {
                Task::Recv {
                    peer: 0,
                    bytes: 1 << 20,
                    tag: 0,
                }
            }
        };
        let sender = vec![
            node(0, compute(3), vec![]),
            node(1, gather.clone(), vec![0]),
            node(2, compute(2000), vec![1]),
            node(3, message(true), vec![2]),
        ];
        let receiver = vec![
            node(0, compute(3), vec![]),
            node(1, gather, vec![0]),
            node(2, message(false), vec![]),
            node(3, compute(1), vec![1, 2]),
        ];
        let program = Program {
            name: "p".into(),
            ranks: vec![sender, receiver],
            ..Program::default()
        };
        let run = execute(&t, &program, &[0, 1], &options(), &mut ()).unwrap();
        let r = &run.ranks[1];
        let group = |name: &str| {
            r.exposed_by_group
                .iter()
                .find(|(g, _)| *g == name)
                .map_or(0.0, |(_, t)| t.as_secs_f64() * 1e6)
        };
        let (data, pipeline, bubble) = (
            group("data"),
            group("pipeline"),
            r.bubble.as_secs_f64() * 1e6,
        );
        assert!((1040.0..1100.0).contains(&data), "{data} us");
        assert!((1990.0..2010.0).contains(&bubble), "{bubble} us");
        assert!((1040.0..1100.0).contains(&pipeline), "{pipeline} us");
        let b = &r.breakdown;
        assert_eq!(
            b.forward_compute + b.exposed_comm + r.idle,
            b.total,
            "every wait charged once"
        );
    }

    /// A collective that names no communicator runs on every rank: a rank without it is named.
    #[test]
    fn collectives_without_a_communicator_need_every_rank() {
        let t = TopologyOptions::new("ring:2").build().unwrap();
        let all_reduce = Task::Collective {
            kind: CollectiveKind::AllReduce,
            bytes: 64,
            communicator: String::new(),
            group: CommGroup::Data,
            times: 1,
        };
        let program = Program {
            name: "p".into(),
            ranks: vec![vec![node(0, all_reduce, vec![])], vec![]],
            ..Program::default()
        };
        let err = execute(&t, &program, &[0, 1], &options(), &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank 1 has none"), "{err}");
    }

    /// A receive whose send never comes, and a cycle through two ranks' messages, are named.
    #[test]
    fn unmatched_messages_are_refused() {
        let t = TopologyOptions::new("ring:2").build().unwrap();
        let recv = |peer| Task::Recv {
            peer,
            bytes: 8,
            tag: 0,
        };
        let send = |peer| Task::Send {
            peer,
            bytes: 8,
            tag: 0,
        };
        let lonely = Program {
            name: "p".into(),
            ranks: vec![vec![node(0, recv(1), vec![])], vec![]],
            ..Program::default()
        };
        let err = execute(&t, &lonely, &[0, 1], &options(), &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("receives"), "{err}");
        // Each rank receives before it sends: neither message can leave.
        let deadlock = Program {
            name: "p".into(),
            ranks: vec![
                vec![node(0, recv(1), vec![]), node(1, send(1), vec![0])],
                vec![node(0, recv(0), vec![]), node(1, send(0), vec![0])],
            ],
            ..Program::default()
        };
        let err = execute(&t, &deadlock, &[0, 1], &options(), &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("never runs"), "{err}");
    }
}
