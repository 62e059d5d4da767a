//! Recursive halving-doubling: reduce-scatter by recursive halving, all-gather by recursive
//! doubling. Power-of-two rank counts directly; other counts (all-reduce) with MPICH's fold:
//! the first `2 * rem` ranks pair up, the even one of each pair hands its data to the odd one,
//! the remaining power of two run halving-doubling, and the result is copied back.

use super::builder::Builder;
use super::collectives::{rhd_all_gather, rhd_reduce_scatter};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::Error;

pub fn generate(c: &Collective) -> Result<Schedule, Error> {
    let n = c.ranks();
    let pow2 = 1u32 << (31 - n.leading_zeros());
    if !super::Algorithm::Rhd.supports(c.kind) {
        return Err(super::Algorithm::Rhd.refusal(c.kind));
    }
    if n != pow2 && c.kind != CollectiveKind::AllReduce {
        return Err(Error::input(format!(
            "rhd {} needs a power-of-two number of NPUs (got {n}); all-reduce works on any count",
            c.kind
        )));
    }
    let refined = Collective {
        chunks: c.chunks * if n == pow2 { 1 } else { pow2 },
        ..c.clone()
    };
    let whole = (0, refined.piece_count());
    let mut b = Builder::new(&refined)?;
    let all: Vec<u32> = (0..n).collect();
    match c.kind {
        CollectiveKind::AllReduce if n == pow2 => {
            rhd_reduce_scatter(&mut b, &all, whole);
            rhd_all_gather(&mut b, &all, whole);
        }
        CollectiveKind::AllReduce => {
            let rem = n - pow2;
            for even in (0..2 * rem).step_by(2) {
                b.send(even, even + 1, whole, Op::Reduce);
            }
            let active: Vec<u32> = (0..n).filter(|&r| r >= 2 * rem || r % 2 == 1).collect();
            rhd_reduce_scatter(&mut b, &active, whole);
            rhd_all_gather(&mut b, &active, whole);
            for odd in (1..2 * rem).step_by(2) {
                b.send(odd, odd - 1, whole, Op::Copy);
            }
        }
        CollectiveKind::ReduceScatter => rhd_reduce_scatter(&mut b, &all, whole),
        CollectiveKind::AllGather => rhd_all_gather(&mut b, &all, whole),
        _ => unreachable!("checked above"),
    }
    Ok(b.finish())
}
