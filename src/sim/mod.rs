//! The congestion-aware alpha-beta link simulator.
//!
//! Each directed link serves one message at a time from a FIFO queue. A message of `n` bytes that
//! starts on a free link at `t` frees the link at `t + n/B` and arrives at the link's far end at
//! `t + a + n/B`. Multi-hop messages are store-and-forward. A transfer is issued when all its
//! dependencies have completed; transfers that become ready together are issued in list order.
//! The engine knows nothing of algorithms: it consumes the schedule IR only.

mod engine;
mod in_order;
mod queue;
mod waiting;

pub use engine::{
    simulate, simulate_checked, simulate_with_queue, Event, EventKind, Observer, SimResult,
    MAX_LINKS,
};
pub use in_order::InOrder;
pub use queue::{BucketQueue, EventQueue, HeapQueue, LaneQueue, RadixQueue};

use crate::topology::Link;
use crate::units::{Bandwidth, Time};

/// How link delays are rounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeModel {
    /// Picoseconds; each delay rounded to the nearest ps.
    #[default]
    Exact,
    /// ASTRA-sim's analytical backend: whole ns, arrival `trunc(a + n/B)` and link-free `trunc(n/B)`
    /// truncated separately, B in bytes per ns.
    Astra,
}

impl TimeModel {
    pub fn parse(text: &str) -> Option<TimeModel> {
        match text {
            "exact" => Some(TimeModel::Exact),
            "astra" => Some(TimeModel::Astra),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TimeModel::Exact => "exact",
            TimeModel::Astra => "astra",
        }
    }

    /// (link-free delay, arrival delay) for `bytes` over a link of `bandwidth` and `latency`.
    pub fn delays(self, bytes: u64, bandwidth: Bandwidth, latency: Time) -> (Time, Time) {
        match self {
            TimeModel::Exact => {
                let serialization = bandwidth.transmit_time(bytes);
                (serialization, serialization + latency)
            }
            TimeModel::Astra => {
                let bytes_per_ns = bandwidth.bytes_per_ns();
                let latency_ns = latency.ps() as f64 / 1e3;
                let free = (bytes as f64 / bytes_per_ns) as u64;
                let arrive = (latency_ns + bytes as f64 / bytes_per_ns) as u64;
                (Time::from_ns(free), Time::from_ns(arrive))
            }
        }
    }

    /// (link-free delay, arrival delay) of a message of `bytes` over `link`: this model's for
    /// the bytes, plus the link's per-message hold on both.
    pub fn link_delays(self, link: &Link, bytes: u64) -> (Time, Time) {
        let (free, arrive) = self.delays(bytes, link.bandwidth, link.latency);
        (free + link.per_message, arrive + link.per_message)
    }
}

/// When each of a run of transfers was issued and completed: what `transfers.csv` and
/// `.parquet` report beside the schedule's rows, handed over a block at a time where the
/// schedule is simulated as it is made ([`InOrder`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferTimes {
    pub issued: Vec<Time>,
    pub completed: Vec<Time>,
}

/// Records that a link was busy from `start` for `duration` in its `intervals` (per link, in
/// time order), merged with the last one where they meet: what `record_busy_intervals` keeps,
/// the same whichever simulator runs.
#[inline]
fn record_busy(intervals: &mut Vec<(Time, Time)>, start: Time, duration: Time) {
    if duration == Time::ZERO {
        return;
    }
    match intervals.last_mut() {
        Some(last) if last.1 == start => last.1 = start + duration,
        _ => intervals.push((start, start + duration)),
    }
}

/// Optional costs and what to record.
#[derive(Clone, Debug, Default)]
pub struct SimOptions {
    pub time_model: TimeModel,
    /// Added to every transfer at its destination before it counts as complete.
    pub endpoint_delay: Time,
    /// Reductions take `bytes / reduce_bandwidth` at the destination before they count as complete.
    pub reduce_bandwidth: Option<Bandwidth>,
    /// A fixed cost added to every reduction at its destination (ASTRA-sim's
    /// `local-reduction-delay`).
    pub reduction_delay: Time,
    /// Keep per-transfer issue and completion times.
    pub record_transfers: bool,
    /// Keep per-link busy intervals (back-to-back intervals merged) for utilisation over time.
    pub record_busy_intervals: bool,
    /// How messages without a route of their own choose among equal shortest paths.
    pub routing: crate::topology::Routing,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn astra_delays_truncate_separately() {
        // 1 MiB at 50 GiB/s is 19531.25 ns: link free after 19531, arrival after 20031 (a = 500 ns).
        let (free, arrive) =
            TimeModel::Astra.delays(1 << 20, Bandwidth::gib_per_sec(50.0), Time::from_ns(500));
        assert_eq!((free, arrive), (Time::from_ns(19531), Time::from_ns(20031)));
    }

    #[test]
    fn exact_delays_round_to_picoseconds() {
        let (free, arrive) =
            TimeModel::Exact.delays(1 << 20, Bandwidth::gib_per_sec(50.0), Time::from_ns(500));
        assert_eq!((free, arrive), (Time(19_531_250), Time(20_031_250)));
    }
}
