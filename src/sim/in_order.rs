//! The simulator for schedules too large to hold: transfers are handed over one at a time, in
//! the order a synthesizer plans them, and simulated as they come, so that memory stays
//! proportional to the links (and a window of recent completion times) instead of the transfers.
//!
//! This is exact for the schedules it accepts, and it checks that it is: every transfer crosses
//! one link, has at most one dependency that came before it, and each link's transfers arrive
//! ready in time order (ties in list order). The engine serves a link's FIFO in the order its
//! transfers become ready, ties in list order, so with that order known the engine's start times
//! follow one transfer at a time: a transfer starts when it is ready or when the transfer before
//! it on its link frees the link, whichever is later. A schedule that breaks the order is refused
//! with an error naming the transfer; it must be simulated whole by [`super::simulate`].

use std::collections::VecDeque;

use super::{SimOptions, SimResult};
use crate::schedule::{Op, RecentTransfers};
use crate::topology::{NodeId, Router, Topology};
use crate::units::Time;
use crate::Error;

/// What the in-order simulation knows of one link.
#[derive(Clone, Debug, Default)]
struct LinkClock {
    /// When the link finishes the last transfer put on it.
    free_at: Time,
    /// When the last transfer put on it became ready.
    last_ready: Time,
    /// The end of the last interval during which a transfer waited for it.
    queued_until: Time,
    /// Link-free times of the transfers put on it that may still be on it (for its longest queue).
    held: VecDeque<Time>,
    /// (bytes, link-free delay, arrival delay) of the last size sent.
    cached: (u64, Time, Time),
}

/// A schedule's simulation, fed one transfer at a time (see the module's documentation).
pub struct InOrder<'t> {
    topology: &'t Topology,
    router: Router<'t>,
    options: SimOptions,
    links: Vec<LinkClock>,
    /// Completion times of the last transfers.
    completed: RecentTransfers<Time>,
    count: u64,
    result: SimResult,
}

impl<'t> InOrder<'t> {
    /// Bytes the simulation of `expected` transfers holds beyond the topology's links.
    pub fn bytes_for(expected: u64) -> u64 {
        RecentTransfers::<Time>::bytes_for(expected)
    }

    /// A simulation of at most `expected` transfers (the window is no larger) on `topology`.
    /// Transfer-level records and busy intervals are not kept: their size is the schedule's.
    pub fn new(
        topology: &'t Topology,
        options: &SimOptions,
        expected: u64,
    ) -> Result<InOrder<'t>, Error> {
        if options.record_transfers || options.record_busy_intervals {
            return Err(Error::Internal(
                "the in-order simulation keeps no per-transfer records".into(),
            ));
        }
        if !topology.uses_dimension_routing() {
            return Err(Error::Internal(
                "the in-order simulation routes by dimension order only".into(),
            ));
        }
        let link_count = topology.links().len();
        let links = topology
            .links()
            .iter()
            .map(|l| {
                let (free, arrive) = options.time_model.delays(0, l.bandwidth, l.latency);
                LinkClock {
                    cached: (0, free, arrive),
                    ..LinkClock::default()
                }
            })
            .collect();
        Ok(InOrder {
            topology,
            router: Router::with_routing(topology, [], options.routing)?,
            options: options.clone(),
            links,
            completed: RecentTransfers::new(expected, Time::ZERO),
            count: 0,
            result: SimResult {
                link_bytes: vec![0; link_count],
                link_busy: vec![Time::ZERO; link_count],
                link_max_queue: vec![0; link_count],
                link_queued: vec![Time::ZERO; link_count],
                ..SimResult::default()
            },
        })
    }

    /// Transfers simulated so far.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True before the first transfer.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Simulates the next transfer: `bytes` from `src` to the neighbouring `dst`, after transfer
    /// `dep` (an index among those pushed before) has completed, or from time zero.
    pub fn push(
        &mut self,
        src: NodeId,
        dst: NodeId,
        bytes: u64,
        dep: Option<u64>,
        op: Op,
    ) -> Result<(), Error> {
        let t = self.count;
        let ready = match dep {
            None => Time::ZERO,
            Some(d) => match self.completed.get(t, d) {
                Some(done) => done,
                None if d >= t => {
                    return Err(Error::input(format!(
                        "transfer {t} depends on transfer {d}, which comes after it: the \
                         in-order simulation needs every dependency first"
                    )))
                }
                None => {
                    return Err(Error::input(format!(
                        "transfer {t} depends on transfer {d}, further back than the {} \
                         completion times the in-order simulation keeps",
                        self.completed.reach()
                    )))
                }
            },
        };
        if src == dst {
            return Err(Error::input(format!(
                "transfer {t} is a local wait: the in-order simulation takes one-hop transfers only"
            )));
        }
        let link = self.router.next_link_of(t as u32, src, dst);
        let l = link as usize;
        let spec = self.topology.link(link);
        if spec.dst != dst {
            return Err(Error::input(format!(
                "transfer {t} ({src} -> {dst}) crosses more than one link: the in-order \
                 simulation takes one-hop transfers only"
            )));
        }
        let clock = &mut self.links[l];
        if ready < clock.last_ready {
            return Err(Error::input(format!(
                "transfer {t} becomes ready at {ready} on link {src} -> {dst}, before a transfer \
                 listed ahead of it there ({}): the in-order simulation needs each link's \
                 transfers in the order they become ready",
                clock.last_ready
            )));
        }
        if clock.cached.0 != bytes {
            let (free, arrive) =
                self.options
                    .time_model
                    .delays(bytes, spec.bandwidth, spec.latency);
            clock.cached = (bytes, free, arrive);
        }
        let (_, free, arrive) = clock.cached;
        let start = ready.max(clock.free_at);
        // Waiting transfers: the union of [ready, start) over the link's transfers, which come
        // in order of both.
        let waited_from = ready.max(clock.queued_until);
        if start > waited_from {
            self.result.link_queued[l] = self.result.link_queued[l] + (start - waited_from);
        }
        clock.queued_until = clock.queued_until.max(start);
        // Transfers on the link when this one joins: those that free it later, itself included.
        while clock.held.front().is_some_and(|&f| f <= ready) {
            clock.held.pop_front();
        }
        clock.held.push_back(start + free);
        let held = &mut self.result.link_max_queue[l];
        *held = (*held).max(clock.held.len() as u32);
        clock.last_ready = ready;
        clock.free_at = start + free;
        self.result.link_bytes[l] = self.result.link_bytes[l].saturating_add(bytes);
        self.result.link_busy[l] = self.result.link_busy[l] + free;
        let mut done = start + arrive + self.options.endpoint_delay;
        if op == Op::Reduce {
            done = done + self.options.reduction_delay;
            if let Some(bw) = self.options.reduce_bandwidth {
                done = done + bw.transmit_time(bytes);
            }
        }
        self.completed.set(t, done);
        self.result.finish = self.result.finish.max(done);
        self.result.hops += 1;
        self.count += 1;
        Ok(())
    }

    /// The simulation's result once every transfer has been pushed. It processed no events
    /// (`events` is 0); `hops` counts the transfers.
    pub fn finish(self) -> Result<SimResult, Error> {
        super::engine::check_range(self.topology, &self.result)?;
        Ok(self.result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    fn line() -> Topology {
        // 1 GB/s and 1 us: 1000 B take 1 us to send and arrive 1 us later.
        TopologyOptions::new("mesh:3")
            .with_links("1GB/s", "1us")
            .build()
            .unwrap()
    }

    #[test]
    fn a_link_serves_its_transfers_one_after_another() {
        let t = line();
        let mut sim = InOrder::new(&t, &SimOptions::default(), 4).unwrap();
        sim.push(0, 1, 1000, None, Op::Copy).unwrap();
        sim.push(0, 1, 1000, None, Op::Copy).unwrap();
        // Forwarded when the second arrives: at 2 us + 1 us.
        sim.push(1, 2, 1000, Some(1), Op::Copy).unwrap();
        let r = sim.finish().unwrap();
        assert_eq!(r.finish, Time::from_ns(5_000));
        let first = t.link_between(0, 1).unwrap() as usize;
        assert_eq!(r.link_busy[first], Time::from_ns(2_000));
        assert_eq!(r.link_bytes[first], 2000);
        // The second waited 1 us behind the first: two on the link at once.
        assert_eq!(r.link_queued[first], Time::from_ns(1_000));
        assert_eq!(r.link_max_queue[first], 2);
        assert_eq!(r.hops, 3);
    }

    #[test]
    fn schedules_it_cannot_follow_are_refused_naming_the_transfer() {
        let t = line();
        let mut sim = InOrder::new(&t, &SimOptions::default(), 4).unwrap();
        sim.push(0, 1, 1000, None, Op::Copy).unwrap();
        sim.push(1, 2, 1000, Some(0), Op::Copy).unwrap();
        // Ready at zero behind one ready at 2 us on link 1 -> 2.
        let err = sim
            .push(1, 2, 1000, None, Op::Copy)
            .unwrap_err()
            .to_string();
        assert!(err.contains("transfer 2 becomes ready"), "{err}");
        let mut sim = InOrder::new(&t, &SimOptions::default(), 4).unwrap();
        let err = sim
            .push(0, 2, 1000, None, Op::Copy)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("transfer 0") && err.contains("one-hop"),
            "{err}"
        );
        let err = sim
            .push(0, 1, 1000, Some(0), Op::Copy)
            .unwrap_err()
            .to_string();
        assert!(err.contains("comes after it"), "{err}");
    }

    #[test]
    fn dependencies_older_than_the_window_are_refused() {
        let t = line();
        let mut sim = InOrder::new(&t, &SimOptions::default(), 2).unwrap();
        sim.push(0, 1, 1000, None, Op::Copy).unwrap();
        sim.push(0, 1, 1000, None, Op::Copy).unwrap();
        sim.push(0, 1, 1000, None, Op::Copy).unwrap();
        let err = sim
            .push(1, 2, 1000, Some(0), Op::Copy)
            .unwrap_err()
            .to_string();
        assert!(err.contains("further back"), "{err}");
    }
}
