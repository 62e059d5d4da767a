//! Direct: every NPU exchanges with every other NPU at once.

use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule, Transfer};
use crate::Error;

/// Direct schedule for `collective`. All-to-all issues, for each source rank, for each destination
/// rank, for each chunk, one transfer (ASTRA-sim's issue order).
pub fn generate(c: &Collective) -> Result<Schedule, Error> {
    let n = c.ranks();
    match c.kind {
        CollectiveKind::AllToAll => {
            let mut s = Schedule::with_capacity(n as usize * (n as usize - 1) * c.chunks as usize);
            for src in 0..n {
                for dst in (0..n).filter(|&d| d != src) {
                    let (lo, _) = c.a2a_block(src, dst);
                    for k in lo..lo + c.chunks {
                        let t = Transfer {
                            src: c.npus[src as usize],
                            dst: c.npus[dst as usize],
                            bytes: c.piece_bytes(k, k + 1),
                        };
                        s.push_data(t, &[], (k, k + 1), Op::Copy);
                    }
                }
            }
            Ok(s)
        }
        other => Err(Error::input(format!(
            "direct {other} is not available yet in this build"
        ))),
    }
}
