//! The two-step tree broadcast of the NCCL note's PCIe example: first the root sends the data to
//! the participant farthest from it (most hops on its route), then root and that participant
//! each send it to the participants nearer to them. Sending the first copy far keeps the two
//! second-step sends in different subtrees, where copying to a near neighbour first would make
//! both second-step copies climb the same upper links at once. `--chunks` segments pipeline.

use super::builder::Builder;
use super::Algorithm;
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::topology::{Router, Topology};
use crate::Error;

/// The two-step tree broadcast of `c` from its root.
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    if c.kind != CollectiveKind::Broadcast {
        return Err(Algorithm::TwoStepTree.refusal(c.kind));
    }
    let router = Router::new(topology, c.npus.iter().copied())?;
    let hops = |a: u32, b: u32| router.hops(c.npus[a as usize], c.npus[b as usize]);
    let root = c.root_rank;
    let others: Vec<u32> = (0..c.ranks()).filter(|&r| r != root).collect();
    let mut b = Builder::new(c)?;
    // Farthest first; ties to the lowest rank.
    let Some(&far) = others
        .iter()
        .max_by_key(|&&r| (hops(root, r), std::cmp::Reverse(r)))
    else {
        return Ok(b.finish());
    };
    // Second step: each of the rest from the nearer of root and `far`, ties to the less loaded.
    let mut from_root = Vec::new();
    let mut from_far = Vec::new();
    for &r in others.iter().filter(|&&r| r != far) {
        let (near_root, near_far) = (hops(root, r), hops(far, r));
        if near_root < near_far || (near_root == near_far && from_root.len() <= from_far.len()) {
            from_root.push(r);
        } else {
            from_far.push(r);
        }
    }
    for s in 0..c.chunks {
        b.send(root, far, (s, s + 1), Op::Copy);
        for &r in &from_root {
            b.send(root, r, (s, s + 1), Op::Copy);
        }
        for &r in &from_far {
            b.send(far, r, (s, s + 1), Op::Copy);
        }
    }
    Ok(b.finish())
}
