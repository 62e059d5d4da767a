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
use crate::topology::{LinkId, NodeId, Router, Topology};
use crate::units::Time;
use crate::Error;

/// What the in-order simulation knows of one link, its tallies included: everything a transfer
/// touches on its link in two cache lines (fetched ahead, [`InOrder::prefetch`]), in this order.
#[derive(Clone, Debug, Default)]
#[repr(C, align(64))]
struct LinkClock {
    /// When the link finishes the last transfer put on it.
    free_at: Time,
    /// When the last transfer put on it became ready.
    last_ready: Time,
    /// The end of the last interval during which a transfer waited for it.
    queued_until: Time,
    /// (bytes, link-free delay, arrival delay) of the last size sent.
    cached: (u64, Time, Time),
    /// Bytes carried, the most transfers on it at once, time busy and time a transfer waited
    /// for it: the link's entries of the [`SimResult`], moved there by [`InOrder::finish`].
    bytes: u64,
    max_queue: u32,
    /// The second cache line from here.
    busy: Time,
    queued: Time,
    /// Link-free times of the transfers put on it that may still be on it (for its longest queue).
    held: VecDeque<Time>,
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
    /// Busy intervals are kept when `options` asks (their size is the links' gaps); per-transfer
    /// times are not (their size is the schedule's): [`InOrder::push`] returns them instead, for
    /// the caller to write as it goes.
    pub fn new(
        topology: &'t Topology,
        options: &SimOptions,
        expected: u64,
    ) -> Result<InOrder<'t>, Error> {
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
                let (free, arrive) = options.time_model.link_delays(l, 0);
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
                busy_intervals: match options.record_busy_intervals {
                    true => vec![Vec::new(); link_count],
                    false => Vec::new(),
                },
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
    /// `dep` (an index among those pushed before) has completed, or from time zero. Returns when
    /// it was issued (ready) and when it completed, as the engine records them.
    pub fn push(
        &mut self,
        src: NodeId,
        dst: NodeId,
        bytes: u64,
        dep: Option<u64>,
        op: Op,
    ) -> Result<(Time, Time), Error> {
        let link = self.link_of(self.count, src, dst)?;
        self.push_on(link, bytes, dep, op)
    }

    /// The link transfer `t` (`src` to the neighbouring `dst`) takes, as the engine routes it;
    /// refused unless that link reaches `dst`.
    pub fn link_of(&self, t: u64, src: NodeId, dst: NodeId) -> Result<LinkId, Error> {
        if src == dst {
            return Err(Error::input(format!(
                "transfer {t} is a local wait: the in-order simulation takes one-hop transfers only"
            )));
        }
        let link = self.router.next_link_of(t as u32, src, dst);
        if self.topology.link(link).dst != dst {
            return Err(Error::input(format!(
                "transfer {t} ({src} -> {dst}) crosses more than one link: the in-order \
                 simulation takes one-hop transfers only"
            )));
        }
        Ok(link)
    }

    /// True where the link a transfer takes between two neighbours depends on the transfer
    /// (ECMP hashes it); otherwise [`InOrder::link_of`] is the same for every transfer.
    pub fn routes_by_transfer(&self) -> bool {
        matches!(self.options.routing, crate::topology::Routing::Ecmp { .. })
    }

    /// Fetches the state [`InOrder::push_on`] reads first into the cache: `link`'s clock and
    /// `dep`'s completion time. Meant a few transfers ahead, then [`InOrder::prefetch_tail`]:
    /// the links of a large network and the window are scattered over memory, and waiting for
    /// them was most of the simulation's time.
    pub fn prefetch(&self, link: LinkId, dep: Option<u64>) {
        let clock = &self.links[link as usize];
        crate::memory::prefetch(clock);
        crate::memory::prefetch(&clock.busy);
        if let Some(d) = dep {
            self.completed.prefetch(d);
        }
    }

    /// Fetches the ends of `link`'s queue and busy intervals, once its clock is in the cache.
    pub fn prefetch_tail(&self, link: LinkId) {
        if let Some(front) = self.links[link as usize].held.front() {
            crate::memory::prefetch(front);
        }
        if let Some(last) = self
            .result
            .busy_intervals
            .get(link as usize)
            .and_then(|i| i.last())
        {
            crate::memory::prefetch(last);
        }
    }

    /// [`InOrder::push`] of the next transfer, on `link` as [`InOrder::link_of`] gave it.
    pub fn push_on(
        &mut self,
        link: LinkId,
        bytes: u64,
        dep: Option<u64>,
        op: Op,
    ) -> Result<(Time, Time), Error> {
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
        let l = link as usize;
        let clock = &mut self.links[l];
        if ready < clock.last_ready {
            let spec = self.topology.link(link);
            let (src, dst) = (spec.src, spec.dst);
            return Err(Error::input(format!(
                "transfer {t} becomes ready at {ready} on link {src} -> {dst}, before a transfer \
                 listed ahead of it there ({}): the in-order simulation needs each link's \
                 transfers in the order they become ready",
                clock.last_ready
            )));
        }
        if clock.cached.0 != bytes {
            let (free, arrive) = self
                .options
                .time_model
                .link_delays(self.topology.link(link), bytes);
            clock.cached = (bytes, free, arrive);
        }
        let (_, free, arrive) = clock.cached;
        let start = ready.max(clock.free_at);
        // Waiting transfers: the union of [ready, start) over the link's transfers, which come
        // in order of both.
        let waited_from = ready.max(clock.queued_until);
        if start > waited_from {
            clock.queued = clock.queued + (start - waited_from);
        }
        clock.queued_until = clock.queued_until.max(start);
        // Transfers on the link when this one joins: those that free it later, itself included.
        while clock.held.front().is_some_and(|&f| f <= ready) {
            clock.held.pop_front();
        }
        clock.held.push_back(start + free);
        clock.max_queue = clock.max_queue.max(clock.held.len() as u32);
        clock.last_ready = ready;
        clock.free_at = start + free;
        clock.bytes = clock.bytes.saturating_add(bytes);
        clock.busy = clock.busy + free;
        if let Some(intervals) = self.result.busy_intervals.get_mut(l) {
            super::record_busy(intervals, start, free);
        }
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
        Ok((ready, done))
    }

    /// The simulation's result once every transfer has been pushed. It processed no events
    /// (`events` is 0); `hops` counts the transfers.
    pub fn finish(mut self) -> Result<SimResult, Error> {
        let r = &mut self.result;
        for (l, clock) in self.links.iter().enumerate() {
            r.link_bytes[l] = clock.bytes;
            r.link_busy[l] = clock.busy;
            r.link_queued[l] = clock.queued;
            r.link_max_queue[l] = clock.max_queue;
        }
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
    fn each_transfer_s_times_and_each_link_s_busy_intervals_come_back() {
        let t = line();
        let options = SimOptions {
            record_busy_intervals: true,
            ..SimOptions::default()
        };
        let mut sim = InOrder::new(&t, &options, 4).unwrap();
        let us = |n: u64| Time::from_ns(1_000 * n);
        // Issued at 0, sent 0-1 us and 1-2 us (back to back: one interval), arriving 1 us later.
        assert_eq!(
            sim.push(0, 1, 1000, None, Op::Copy).unwrap(),
            (us(0), us(2))
        );
        assert_eq!(
            sim.push(0, 1, 1000, None, Op::Copy).unwrap(),
            (us(0), us(3))
        );
        // Issued when the second arrives, then alone on its link.
        assert_eq!(
            sim.push(1, 2, 1000, Some(1), Op::Copy).unwrap(),
            (us(3), us(5))
        );
        let r = sim.finish().unwrap();
        let (first, second) = (t.link_between(0, 1).unwrap(), t.link_between(1, 2).unwrap());
        assert_eq!(r.busy_intervals[first as usize], vec![(us(0), us(2))]);
        assert_eq!(r.busy_intervals[second as usize], vec![(us(3), us(4))]);
        let used = r.busy_intervals.iter().filter(|i| !i.is_empty()).count();
        assert_eq!(used, 2, "no other link was busy");
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
