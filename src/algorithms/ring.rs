//! Ring: the logical ring follows rank order; on networks whose links are all bidirectional, half
//! of every rank's data goes each way round (as the TACOS and Themis papers use it).

use super::builder::Builder;
use super::collectives::{ring_direction, ring_exchange};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::Error;

pub fn generate(c: &Collective, bidirectional: bool) -> Result<Schedule, Error> {
    let split = if bidirectional { 2 } else { 1 };
    let refined = Collective {
        chunks: c.chunks * split,
        ..c.clone()
    };
    let n = c.ranks();
    let all: Vec<u32> = (0..n).collect();
    let whole = (0, refined.piece_count());
    let segments = refined.chunks;
    let mut b = Builder::new(&refined)?;
    match c.kind {
        CollectiveKind::AllReduce => {
            ring_exchange(&mut b, &all, whole, segments, bidirectional, Op::Reduce);
            ring_exchange(&mut b, &all, whole, segments, bidirectional, Op::Copy);
        }
        CollectiveKind::ReduceScatter => {
            ring_exchange(&mut b, &all, whole, segments, bidirectional, Op::Reduce)
        }
        CollectiveKind::AllGather => {
            ring_exchange(&mut b, &all, whole, segments, bidirectional, Op::Copy)
        }
        CollectiveKind::Broadcast | CollectiveKind::Reduce => {
            // A pipelined chain around the ring from (broadcast) or to (reduce) the root; each
            // direction carries its half of the pieces.
            let root = c.root_rank as i64;
            for hop in 0..n as i64 - 1 {
                for p in 0..segments {
                    let d = ring_direction(bidirectional, segments, p);
                    let at = |k: i64| (root + d * k).rem_euclid(n as i64) as u32;
                    if c.kind == CollectiveKind::Broadcast {
                        b.send(at(hop), at(hop + 1), (p, p + 1), Op::Copy);
                    } else {
                        let far = n as i64 - 1 - hop;
                        b.send(at(far), at(far - 1), (p, p + 1), Op::Reduce);
                    }
                }
            }
        }
        other => return Err(super::Algorithm::Ring.refusal(other)),
    }
    Ok(b.finish())
}
