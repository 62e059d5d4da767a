//! Halving-doubling with rank mapping (HDRM, EFLOPS) on a BiGraph: recursive halving-doubling
//! all-reduce over the NPUs in an order under which no two messages of a step share a link.
//!
//! A BiGraph has `N = 2h` switches in two halves, every upper switch linked to every lower one,
//! and `M <= h` NPUs on each switch. Every step of halving-doubling pairs ranks that differ in
//! one bit. Rank `r = (t, u, v)` (`v` its low `log M` bits, `u` the next `log h`, `t` the top bit)
//! goes to the upper half when it has an even number of one bits and to the lower half when odd
//! (the paper's odd-parity swap), so every pair of every step crosses between the halves on the
//! one direct link of its two switches; upper ranks sit on switch `u` at slot `v`, lower ones on
//! switch `u xor v` at slot `v` (the paper's remapping of conflicting pairs by a shift), so the
//! `M` NPUs of a switch reach `M` different switches in every step. Each switch-to-switch link
//! then carries at most one message per step each way, and each NPU link one.

use std::collections::BTreeMap;

use crate::collective::{Collective, CollectiveKind};
use crate::schedule::Schedule;
use crate::topology::{NodeId, Topology};
use crate::Error;

/// The HDRM all-reduce of `c` on the BiGraph `topology`.
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    if c.kind != CollectiveKind::AllReduce {
        return Err(super::Algorithm::Hdrm.refusal(c.kind));
    }
    let order = rank_order(topology, c)?;
    let mapped = Collective {
        npus: order,
        root_rank: 0,
        ..c.clone()
    };
    super::rhd::generate(&mapped)
}

/// The NPUs in HDRM's rank order, or why `topology` is not a BiGraph for `c`.
fn rank_order(topology: &Topology, c: &Collective) -> Result<Vec<NodeId>, Error> {
    let refuse = |why: String| {
        Error::input(format!(
            "hdrm needs a BiGraph (NPUs each on one switch, two halves of switches all linked \
             across, M NPUs per switch with M and N/2 powers of two, M <= N/2) over all its NPUs: \
             {} {why}",
            topology.name()
        ))
    };
    if c.npus.len() != topology.active_npus().len() {
        return Err(refuse("has NPUs outside the collective".into()));
    }
    let mut hosts: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
    for &v in &c.npus {
        let outs = topology.out_links_of(v);
        let [only] = outs else {
            return Err(refuse(format!("has NPU {v} with {} links", outs.len())));
        };
        let switch = topology.link(*only).dst;
        if !topology.is_switch(switch) {
            return Err(refuse(format!("links NPU {v} to NPU {switch}")));
        }
        hosts.entry(switch).or_default().push(v);
    }
    let switches: Vec<NodeId> = hosts.keys().copied().collect();
    let m = hosts[&switches[0]].len();
    if hosts.values().any(|h| h.len() != m) {
        return Err(refuse("has switches with different numbers of NPUs".into()));
    }
    let upper: Vec<NodeId> = switches
        .iter()
        .copied()
        .filter(|&s| topology.link_between(switches[0], s).is_none())
        .collect();
    let lower: Vec<NodeId> = switches
        .iter()
        .copied()
        .filter(|&s| topology.link_between(switches[0], s).is_some())
        .collect();
    let h = upper.len();
    let complete = upper.iter().all(|&a| {
        lower.iter().all(|&b| topology.link_between(a, b).is_some())
            && upper.iter().all(|&b| topology.link_between(a, b).is_none())
    });
    if !complete || lower.len() != h {
        return Err(refuse(
            "does not link two equal halves of switches all across".into(),
        ));
    }
    if !m.is_power_of_two() || !h.is_power_of_two() || m > h {
        return Err(refuse(format!("has M = {m} and N/2 = {h}")));
    }
    let (v_bits, u_bits) = (m.trailing_zeros(), h.trailing_zeros());
    let ranks = 2 * h * m;
    Ok((0..ranks)
        .map(|r| {
            let v = r & (m - 1);
            let u = (r >> v_bits) & (h - 1);
            debug_assert!(r >> (v_bits + u_bits) <= 1);
            if r.count_ones() % 2 == 0 {
                hosts[&upper[u]][v]
            } else {
                hosts[&lower[u ^ v]][v]
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    /// Every step pairs an upper and a lower NPU, and no two pairs of a step share a switch pair.
    #[test]
    fn every_step_uses_each_link_between_halves_once() {
        for spec in ["bigraph:2x8", "bigraph:4x8", "bigraph:1x4", "bigraph:4x16"] {
            let t = TopologyOptions::new(spec).build().unwrap();
            let c = Collective::new(CollectiveKind::AllReduce, t.active_npus(), 1 << 20, 1, None)
                .unwrap();
            let order = rank_order(&t, &c).unwrap();
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, t.active_npus(), "{spec}: a permutation");
            let switch = |v: NodeId| t.link(t.out_links_of(v)[0]).dst;
            let n = order.len();
            let mut bit = 1;
            while bit < n {
                let mut used = std::collections::HashSet::new();
                for r in (0..n).filter(|r| r & bit == 0) {
                    let (a, b) = (switch(order[r]), switch(order[r ^ bit]));
                    assert!(
                        t.link_between(a, b).is_some(),
                        "{spec}: {a} and {b} not linked"
                    );
                    assert!(used.insert((a.min(b), a.max(b))), "{spec}: {a}-{b} twice");
                }
                bit <<= 1;
            }
        }
    }

    #[test]
    fn other_networks_are_refused_with_the_reason() {
        let t = TopologyOptions::new("spineleaf:4x2x4").build().unwrap();
        let c =
            Collective::new(CollectiveKind::AllReduce, t.active_npus(), 1 << 20, 1, None).unwrap();
        let err = generate(&t, &c).unwrap_err().to_string();
        assert!(
            err.contains("BiGraph") && err.contains("spineleaf"),
            "{err}"
        );
    }
}
