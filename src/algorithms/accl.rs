//! ACCL's hybrid all-reduce for boxes of GPUs: a ring reduce-scatter inside each box, recursive
//! halving-doubling across boxes among the GPUs of one local index (each on its own NIC, so all
//! of a box's NICs work at once), and a ring all-gather inside the box. The buffer runs as two
//! halves, the second one phase behind the first at every GPU, so one half crosses the boxes
//! while the other is inside them (ACCL's two concurrent processes).
//!
//! `--chunks` cuts every GPU's part into that many segments that pipeline through the phases.
//! Boxes are the groups of NPUs joined by the network's fastest links (NVSwitch, xGMI); they must
//! be equally large, and their number a power of two.

use super::boxes::equal_boxes;
use super::builder::{part, Builder};
use super::collectives::{rhd_all_gather, rhd_reduce_scatter, ring_exchange};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule};
use crate::topology::Topology;
use crate::Error;

/// The hybrid all-reduce of `c` on `topology`.
pub fn generate(topology: &Topology, c: &Collective) -> Result<Schedule, Error> {
    if c.kind != CollectiveKind::AllReduce {
        return Err(super::Algorithm::AcclHybrid.refusal(c.kind));
    }
    let members = boxes(topology, c)?;
    let refined = Collective {
        chunks: c.chunks * 2,
        ..c.clone()
    };
    let mut b = Builder::new(&refined)?;
    let g = members[0].len() as u32;
    let total = refined.piece_count();
    let halves = [(0, total / 2), (total / 2, total)];
    let bidirectional = topology.is_bidirectional();
    let segments = c.chunks;
    type Phase<'a> = &'a dyn Fn(&mut Builder, (u32, u32));
    let inside_rs = |b: &mut Builder, half: (u32, u32)| {
        for gpus in &members {
            ring_exchange(b, gpus, half, segments, bidirectional, Op::Reduce);
        }
    };
    let across = |b: &mut Builder, half: (u32, u32)| {
        for i in 0..g {
            let rail: Vec<u32> = members.iter().map(|gpus| gpus[i as usize]).collect();
            for s in 0..segments {
                let own = part(half.0, half.1, g, i, segments, s);
                rhd_reduce_scatter(b, &rail, own);
                rhd_all_gather(b, &rail, own);
            }
        }
    };
    let inside_ag = |b: &mut Builder, half: (u32, u32)| {
        for gpus in &members {
            ring_exchange(b, gpus, half, segments, bidirectional, Op::Copy);
        }
    };
    let phases: [Phase; 3] = [&inside_rs, &across, &inside_ag];
    for phase in phases {
        let start = b.len();
        phase(&mut b, halves[0]);
        b.set_gates(b.last_arrivals(start, c.ranks()));
        phase(&mut b, halves[1]);
        b.clear_gates();
    }
    Ok(b.finish())
}

/// The boxes, as ranks: a power of two of them, equally large, over every NPU of the network.
fn boxes(topology: &Topology, c: &Collective) -> Result<Vec<Vec<u32>>, Error> {
    let refuse = |why: String| {
        Error::input(format!(
            "accl-hybrid needs equal boxes of NPUs joined by the fastest links, a power of two of \
             them, over all NPUs: {} {why}",
            topology.name()
        ))
    };
    if c.npus.len() != topology.active_npus().len() {
        return Err(refuse("has NPUs outside the collective".into()));
    }
    let boxes = equal_boxes(topology, c, super::Algorithm::AcclHybrid)?;
    if !boxes.len().is_power_of_two() {
        return Err(refuse(format!("has {} boxes", boxes.len())));
    }
    Ok(boxes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::validate;
    use crate::topology::TopologyOptions;

    /// A 16 MiB all-reduce over every GPU of `spec` (NVSwitch 300 GB/s, NICs 25 GB/s).
    fn rail(spec: &str) -> (Topology, Collective) {
        let t = TopologyOptions::new(spec)
            .with_links("300GB/s,25GB/s", "1us")
            .build()
            .unwrap();
        let c =
            Collective::new(CollectiveKind::AllReduce, t.active_npus(), 1 << 24, 1, None).unwrap();
        (t, c)
    }

    /// The rail fabric's boxes are its NVSwitch groups, and the schedule is a valid all-reduce.
    #[test]
    fn rail_boxes_all_reduce_validly() {
        let (t, c) = rail("rail:4x8");
        let found = boxes(&t, &c).unwrap();
        assert_eq!(found.len(), 4);
        assert_eq!(found[1], (8..16).collect::<Vec<_>>());
        let s = generate(&t, &c).unwrap();
        validate(&s, s.collective.as_ref().unwrap(), 1).unwrap();
    }

    #[test]
    fn uneven_boxes_are_refused() {
        let (t, c) = rail("rail:3x4");
        let err = generate(&t, &c).unwrap_err().to_string();
        assert!(err.contains("3 boxes"), "{err}");
        let (t, _) = rail("rail:4x4");
        let c = Collective::new(
            CollectiveKind::AllReduce,
            (0..15).collect(),
            1 << 24,
            1,
            None,
        )
        .unwrap();
        let err = generate(&t, &c).unwrap_err().to_string();
        assert!(err.contains("outside"), "{err}");
    }
}
