//! `trees`: ForestColl's optimal spanning trees of a collective, for inspection or export.

use std::time::Instant;

use clap::Args;
use serde::Serialize;

use super::{parse_ids, TopologyArgs};
use crate::algorithms::forestcoll;
use crate::collective::{Collective, CollectiveKind};
use crate::forest::{tree_height, Forest};
use crate::topology::Topology;
use crate::Error;

#[derive(Args, Debug)]
pub struct TreesArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// all-gather, reduce-scatter, all-reduce (both packings, or the reduce-then-broadcast trees
    /// where those are faster), broadcast, reduce
    #[arg(long, short = 'c', default_value = "all-gather")]
    pub collective: String,
    /// Participating NPUs, e.g. 0,2,4,6 [default: all]
    #[arg(long)]
    pub npus: Option<String>,
    /// Root NPU of broadcast and reduce [default: the first participant]
    #[arg(long)]
    pub root: Option<u32>,
    /// Trees per NPU (fixed-k mode: the best rate k trees allow) [default: the optimal number]
    #[arg(long)]
    pub trees: Option<u64>,
    /// text: a summary (and every tree with --show-trees); csv: one row per tree arc and path;
    /// json: everything
    #[arg(long, value_enum, default_value = "text")]
    pub format: TreesFormat,
    /// With the text format, print every tree after the summary (long on large fabrics)
    #[arg(long)]
    pub show_trees: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreesFormat {
    Text,
    Csv,
    Json,
}

pub(super) fn trees(args: TreesArgs) -> Result<(), Error> {
    let started = Instant::now();
    let topology = args.topology.build()?;
    let kind = CollectiveKind::parse(&args.collective)?;
    let npus = match &args.npus {
        Some(list) => parse_ids("--npus", list)?,
        None => topology.active_npus(),
    };
    if let Some(&bad) = npus.iter().find(|&&v| !topology.is_active_npu(v)) {
        return Err(Error::input(format!(
            "--npus: {bad} is not an active NPU of {}",
            topology.name()
        )));
    }
    // The trees do not depend on the size; any size that splits into the pieces will do.
    let c = Collective::new(
        kind,
        npus,
        u64::MAX / 2,
        1,
        args.root.filter(|_| kind.is_rooted()),
    )?;
    let heartbeat = crate::report::Heartbeat::start("packing trees");
    let forests = match forestcoll::reduce_broadcast_plan(&topology, &c, args.trees)? {
        Some(plan) => vec![plan],
        None => forestcoll::forests(&topology, &c, args.trees)?,
    };
    drop(heartbeat);
    let elapsed = started.elapsed();
    match args.format {
        TreesFormat::Text => print_text(&topology, &c, &forests, elapsed, args.show_trees),
        TreesFormat::Csv => print_csv(&c, &forests),
        TreesFormat::Json => print_json(&topology, &c, &forests)?,
    }
    Ok(())
}

/// What the packing's phase does: the collective whose trees these are.
fn phase(c: &Collective, f: &Forest) -> &'static str {
    if f.reduce_broadcast {
        return "reduce-broadcast";
    }
    match (c.kind.is_rooted(), f.reversed) {
        (true, false) => "broadcast",
        (true, true) => "reduce",
        (false, false) => "all-gather",
        (false, true) => "reduce-scatter",
    }
}

/// Algorithm bandwidth (size / time, bytes per second) the packings allow together.
pub fn algorithm_bandwidth(c: &Collective, forests: &[Forest]) -> f64 {
    // Seconds per byte of the user's size: each phase spreads size/n from every root (or the
    // whole size from one root, or reduces and broadcasts the whole size).
    let share = |f: &Forest| {
        if c.kind.is_rooted() || f.reduce_broadcast {
            1.0
        } else {
            1.0 / c.ranks() as f64
        }
    };
    1.0 / forests.iter().map(|f| share(f) / f.rate_bps()).sum::<f64>()
}

fn print_text(
    topology: &Topology,
    c: &Collective,
    forests: &[Forest],
    elapsed: std::time::Duration,
    show_trees: bool,
) {
    println!(
        "ForestColl trees for {} over {} NPUs of {}",
        c.kind,
        c.ranks(),
        topology.name()
    );
    println!(
        "  algorithm bandwidth  {:.3} GB/s",
        algorithm_bandwidth(c, forests) / 1e9
    );
    for f in forests {
        let optimal = f.optimal_rate.as_f64() * f.unit_bps;
        println!(
            "  {:<15}      {} trees {} (U = {}), {} classes, height up to {}; {:.3} GB/s per \
             root{}",
            phase(c, f),
            f.k,
            if f.reduce_broadcast {
                "in all"
            } else {
                "per root"
            },
            f.multiplier,
            f.classes(),
            f.height(),
            f.rate_bps() / 1e9,
            if (f.rate_bps() - optimal).abs() > 1e-9 * optimal {
                format!(" (optimal {:.3} GB/s)", optimal / 1e9)
            } else {
                " (optimal)".to_string()
            }
        );
        if f.rounded {
            println!("  note: bandwidth ratios were rounded to fit integer capacities");
        }
    }
    println!("  built in {:.1} ms", elapsed.as_secs_f64() * 1e3);
    if !show_trees {
        let trees: usize = forests.iter().map(|f| f.trees.len()).sum();
        let arcs: usize = forests
            .iter()
            .flat_map(|f| &f.trees)
            .map(|t| t.edges.len())
            .sum();
        println!(
            "  {trees} tree classes, {arcs} arcs: --show-trees prints them, --format csv or json writes \
             them as a table"
        );
        return;
    }
    for f in forests {
        let mut index = std::collections::HashMap::new();
        for tree in &f.trees {
            let i = index.entry(tree.root).or_insert(0u32);
            println!(
                "  {} tree {}.{} (weight {}/{}, height {}):",
                phase(c, f),
                tree.root,
                i,
                tree.weight,
                f.k,
                tree_height(tree)
            );
            *i += 1;
            for e in &tree.edges {
                let routes: Vec<String> = e
                    .routes
                    .iter()
                    .map(|(p, n)| {
                        let nodes: Vec<String> =
                            physical(f, p).iter().map(u32::to_string).collect();
                        format!("{} x{n}", nodes.join(">"))
                    })
                    .collect();
                let (from, to) = flow_ends(f, e.src, e.dst);
                println!("    {from} -> {to}: {}", routes.join(", "));
            }
        }
    }
}

/// The physical route of a packing path (reversed packings run backwards).
fn physical(f: &Forest, path: &[u32]) -> Vec<u32> {
    if f.reversed {
        path.iter().rev().copied().collect()
    } else {
        path.to_vec()
    }
}

/// Where data flows along a tree arc: down the tree, or up it for reversed packings.
fn flow_ends(f: &Forest, src: u32, dst: u32) -> (u32, u32) {
    if f.reversed {
        (dst, src)
    } else {
        (src, dst)
    }
}

fn print_csv(c: &Collective, forests: &[Forest]) {
    println!("phase,root,tree,weight,k,src,dst,route,route_trees");
    for f in forests {
        let mut index = std::collections::HashMap::new();
        for tree in &f.trees {
            let i = index.entry(tree.root).or_insert(0u32);
            for e in &tree.edges {
                let (from, to) = flow_ends(f, e.src, e.dst);
                for (path, n) in &e.routes {
                    let nodes: Vec<String> = physical(f, path).iter().map(u32::to_string).collect();
                    println!(
                        "{},{},{},{},{},{from},{to},{},{n}",
                        phase(c, f),
                        tree.root,
                        i,
                        tree.weight,
                        f.k,
                        nodes.join(";")
                    );
                }
            }
            *i += 1;
        }
    }
}

#[derive(Serialize)]
struct JsonTrees {
    topology: String,
    collective: String,
    npus: u32,
    algbw_gbps: f64,
    phases: Vec<JsonPhase>,
}

#[derive(Serialize)]
struct JsonPhase {
    phase: &'static str,
    trees_per_root: u64,
    multiplier: String,
    rate_gbps_per_root: f64,
    optimal_gbps_per_root: f64,
    trees: Vec<JsonTree>,
}

#[derive(Serialize)]
struct JsonTree {
    root: u32,
    index: u32,
    weight: u64,
    height: usize,
    edges: Vec<JsonEdge>,
}

#[derive(Serialize)]
struct JsonEdge {
    src: u32,
    dst: u32,
    routes: Vec<JsonRoute>,
}

#[derive(Serialize)]
struct JsonRoute {
    path: Vec<u32>,
    trees: u64,
}

fn print_json(topology: &Topology, c: &Collective, forests: &[Forest]) -> Result<(), Error> {
    let phases = forests
        .iter()
        .map(|f| {
            let mut index = std::collections::HashMap::new();
            JsonPhase {
                phase: phase(c, f),
                trees_per_root: f.k,
                multiplier: f.multiplier.to_string(),
                rate_gbps_per_root: f.rate_bps() / 1e9,
                optimal_gbps_per_root: f.optimal_rate.as_f64() * f.unit_bps / 1e9,
                trees: f
                    .trees
                    .iter()
                    .map(|tree| {
                        let i = index.entry(tree.root).or_insert(0u32);
                        *i += 1;
                        JsonTree {
                            root: tree.root,
                            index: *i - 1,
                            weight: tree.weight,
                            height: tree_height(tree),
                            edges: tree
                                .edges
                                .iter()
                                .map(|e| {
                                    let (src, dst) = flow_ends(f, e.src, e.dst);
                                    JsonEdge {
                                        src,
                                        dst,
                                        routes: e
                                            .routes
                                            .iter()
                                            .map(|(p, n)| JsonRoute {
                                                path: physical(f, p),
                                                trees: *n,
                                            })
                                            .collect(),
                                    }
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    let out = JsonTrees {
        topology: topology.name().to_string(),
        collective: c.kind.name().to_string(),
        npus: c.ranks(),
        algbw_gbps: algorithm_bandwidth(c, forests) / 1e9,
        phases,
    };
    let text = serde_json::to_string_pretty(&out)
        .map_err(|e| Error::input(format!("cannot write the trees as JSON: {e}")))?;
    println!("{text}");
    Ok(())
}
