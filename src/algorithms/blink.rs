//! Blink (Wang et al., MLSys'20), the tree baseline the TACOS paper discusses (Sec. VIII): all-reduce
//! over spanning trees packed from one root on the NPU-to-NPU links, each tree reducing its share
//! of the buffer up to the root and broadcasting it back down, pipelined over the chunks. Blink
//! packs its trees approximately (multiplicative weights); we pack them exactly with ForestColl's
//! rooted packing (Edmonds' arborescences, [`crate::forest`]), which reaches the best rate any
//! packing from that root can, so this is Blink at its best. The root is the collective's first
//! NPU (or `--root`). As Blink assumes, links run both ways: the reduction climbs each tree arc
//! in reverse.

use super::Algorithm;
use crate::collective::{Collective, CollectiveKind};
use crate::forest::{self, ForestRequest};
use crate::schedule::Schedule;
use crate::topology::Topology;
use crate::Error;

/// Blink's all-reduce of `c` on `topology`'s NPU-to-NPU links.
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    if c.kind != CollectiveKind::AllReduce {
        return Err(Algorithm::Blink.refusal(c.kind));
    }
    if topology.has_switches() {
        return Err(Error::input(format!(
            "blink packs its trees over links between NPUs (as on a DGX-1's NVLinks); {} has \
             switches (forestcoll packs trees through them)",
            topology.name()
        )));
    }
    let mut plan = forest::plan(
        topology,
        &ForestRequest {
            participants: c.npus.clone(),
            roots: Some(vec![c.root()]),
            reversed: false,
            trees: None,
            sinks: None,
        },
    )?;
    if let Some((a, b)) = plan.trees.iter().flat_map(|t| &t.edges).find_map(|e| {
        topology
            .link_between(e.dst, e.src)
            .is_none()
            .then_some((e.src, e.dst))
    }) {
        return Err(Error::input(format!(
            "blink reduces up its trees' links in reverse, and {} has a link {a} -> {b} without \
             one back",
            topology.name()
        )));
    }
    plan.reduce_broadcast = true;
    super::forestcoll::generate_reduce_broadcast(c, &plan, c.chunks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyOptions;

    /// On a DGX-1 cube-mesh every tree spans 8 GPUs over 7 links and carries its share of the
    /// buffer up and then down them: 14 S bytes over the 32 directed 25 GB/s links, which bounds
    /// the time from below; the trees of one root share links in both directions, and the
    /// pipelined all-reduce stays within 30% of that. It validates.
    #[test]
    fn all_reduce_stays_near_its_link_bytes_bound() {
        let (t, c) = crate::algorithms::testing::dgx1_all_reduce(16);
        let finish = crate::algorithms::testing::validated_ps(&t, &generate(&t, &c).unwrap());
        let all_links = 14.0 * (1u64 << 30) as f64 / (32.0 * 25e9) * 1e12;
        let ratio = finish / all_links;
        assert!((1.0..1.3).contains(&ratio), "{ratio}");
    }

    #[test]
    fn switches_and_other_collectives_are_refused() {
        let s = TopologyOptions::new("switch:8").build().unwrap();
        let c =
            Collective::new(CollectiveKind::AllReduce, s.active_npus(), 1 << 20, 1, None).unwrap();
        assert!(generate(&s, &c)
            .unwrap_err()
            .to_string()
            .contains("switches"));
        let r = TopologyOptions::new("ring:8").build().unwrap();
        let g =
            Collective::new(CollectiveKind::AllGather, r.active_npus(), 1 << 20, 1, None).unwrap();
        assert!(generate(&r, &g).is_err());
    }
}
