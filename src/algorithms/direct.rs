//! Direct: every NPU exchanges with every other NPU at once, addressing them in ascending order
//! (ASTRA-sim's; on a switch every NPU's first transfer then queues on NPU 0's downlink, which
//! holds all-to-all to half the bound) or staggered (NPU `i` to `i+1`, `i+2`, ...).

use super::builder::Builder;
use super::collectives::{destinations, direct_exchange};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule, Transfer};
use crate::Error;

/// Direct schedule for `collective`. All-to-all issues, for each source rank, for each destination
/// rank (ascending, or from the next rank round when `staggered`), for each chunk, one transfer.
pub fn generate(c: &Collective, staggered: bool) -> Result<Schedule, Error> {
    let n = c.ranks();
    let k = c.chunks;
    if c.kind == CollectiveKind::AllToAll {
        // Built without the data-flow builder: 67M transfers at 8192 NPUs, and no dependencies.
        let transfers = n as u64 * (n as u64 - 1) * k as u64;
        crate::memory::ensure(
            crate::memory::bytes(transfers, crate::memory::BYTES_PER_TRANSFER),
            &format!("a direct all-to-all of {transfers} transfers"),
            "try fewer NPUs or a smaller --chunks",
        )?;
        let mut s = Schedule::with_capacity(transfers as usize);
        for src in 0..n {
            for dst in destinations(src, n, staggered) {
                let (lo, _) = c.a2a_block(src, dst);
                for p in lo..lo + k {
                    let t = Transfer {
                        src: c.npus[src as usize],
                        dst: c.npus[dst as usize],
                        bytes: c.piece_bytes(p, p + 1),
                    };
                    s.push_data(t, &[], (p, p + 1), Op::Copy);
                }
            }
        }
        s.collective = Some(c.clone());
        return Ok(s);
    }
    let mut b = Builder::new(c)?;
    let all: Vec<u32> = (0..n).collect();
    let whole = (0, c.piece_count());
    let root = c.root_rank;
    match c.kind {
        CollectiveKind::AllReduce => {
            direct_exchange(&mut b, &all, whole, k, Op::Reduce, staggered);
            direct_exchange(&mut b, &all, whole, k, Op::Copy, staggered);
        }
        CollectiveKind::ReduceScatter => {
            direct_exchange(&mut b, &all, whole, k, Op::Reduce, staggered)
        }
        CollectiveKind::AllGather => direct_exchange(&mut b, &all, whole, k, Op::Copy, staggered),
        CollectiveKind::Broadcast | CollectiveKind::Reduce => {
            for p in 0..c.piece_count() {
                for r in (0..n).filter(|&r| r != root) {
                    if c.kind == CollectiveKind::Broadcast {
                        b.send(root, r, (p, p + 1), Op::Copy);
                    } else {
                        b.send(r, root, (p, p + 1), Op::Reduce);
                    }
                }
            }
        }
        CollectiveKind::Gather | CollectiveKind::Scatter => {
            for chunk in 0..k {
                for r in (0..n).filter(|&r| r != root) {
                    let p = r * k + chunk;
                    if c.kind == CollectiveKind::Gather {
                        b.send(r, root, (p, p + 1), Op::Copy);
                    } else {
                        b.send(root, r, (p, p + 1), Op::Copy);
                    }
                }
            }
        }
        CollectiveKind::AllToAll => unreachable!("handled above"),
    }
    Ok(b.finish())
}
