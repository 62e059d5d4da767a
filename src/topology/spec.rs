//! Inline topology specs (`ring:8`, `mesh:8x8`, `torus:4x4x4`, ...) and the options every command
//! that takes `--topology` shares.

use std::path::Path;

use super::build::{dgx1, dragonfly, multi_dim, Dim, DimKind, MAX_NPUS};
use super::fabrics;
use super::{load_topology_file, GpuSystem, NodeId, SystemOverrides, Topology};
use crate::units::{parse_bandwidth, parse_list, parse_time, Bandwidth, Time};
use crate::Error;

/// Default link bandwidth when none is given.
pub const DEFAULT_BANDWIDTH: &str = "50GB/s";
/// Default link latency when none is given.
pub const DEFAULT_LATENCY: &str = "500ns";

/// The topology as named on a command line or in an experiment file.
#[derive(Clone, Debug, Default)]
pub struct TopologyOptions {
    /// A YAML file (collsim or ASTRA-sim form) or an inline spec.
    pub spec: String,
    /// One value, or one per dimension (comma-separated). Only for inline specs.
    pub bandwidth: Option<String>,
    /// One value, or one per dimension (comma-separated). Only for inline specs.
    pub latency: Option<String>,
    /// NPUs to remove, e.g. `7,9`.
    pub remove_npus: Option<String>,
    /// Links to remove: `a-b` removes both directions, `a>b` one.
    pub remove_links: Option<String>,
    /// Figures of a named GPU system replaced (its NICs, their kind, the CPU, SHARP).
    pub system: SystemOverrides,
}

impl TopologyOptions {
    pub fn new(spec: impl Into<String>) -> TopologyOptions {
        TopologyOptions {
            spec: spec.into(),
            ..TopologyOptions::default()
        }
    }

    pub fn with_links(mut self, bandwidth: &str, latency: &str) -> TopologyOptions {
        self.bandwidth = Some(bandwidth.into());
        self.latency = Some(latency.into());
        self
    }

    /// The GPU system the spec names, with the overrides applied; None when it names none
    /// (then overrides are refused: they have nothing to change).
    pub fn gpu_system(&self) -> Result<Option<GpuSystem>, Error> {
        match GpuSystem::parse(&self.spec)? {
            Some(mut system) => {
                system.apply(&self.system)?;
                Ok(Some(system))
            }
            None if !self.system.is_empty() => Err(Error::input(format!(
                "--nvlink/--nic/--nic-kind/--cpu/--nic-path/--sharp change a GPU system \
                 (dgx-a100:N, hgx-h100:N, ...); {} is none",
                self.spec
            ))),
            None => Ok(None),
        }
    }

    /// Loads the file or builds the inline shape, then applies faults.
    pub fn build(&self) -> Result<Topology, Error> {
        let path = Path::new(&self.spec);
        let looks_like_file =
            self.spec.ends_with(".yaml") || self.spec.ends_with(".yml") || path.exists();
        let system = self.gpu_system()?;
        let mut topology = if let Some(system) = system {
            if self.bandwidth.is_some() || self.latency.is_some() {
                return Err(Error::input(format!(
                    "--bandwidth/--latency apply to generic shapes; {} is a GPU system with its \
                     own links (override its NICs with --nic)",
                    self.spec
                )));
            }
            system.topology()?
        } else if looks_like_file {
            if self.bandwidth.is_some() || self.latency.is_some() {
                return Err(Error::input(format!(
                    "--bandwidth/--latency apply to inline topologies; {} sets its own links",
                    self.spec
                )));
            }
            load_topology_file(path)?
        } else {
            let bandwidths = parse_list(
                "--bandwidth",
                self.bandwidth.as_deref().unwrap_or(DEFAULT_BANDWIDTH),
                parse_bandwidth,
            )?;
            let latencies = parse_list(
                "--latency",
                self.latency.as_deref().unwrap_or(DEFAULT_LATENCY),
                parse_time,
            )?;
            parse_inline(&self.spec, &bandwidths, &latencies)?
        };
        let npus = match &self.remove_npus {
            Some(list) => parse_ids(list, "--remove-npus")?,
            None => Vec::new(),
        };
        let links = match &self.remove_links {
            Some(list) => parse_link_list(list)?,
            None => Vec::new(),
        };
        topology.remove(&npus, &links)?;
        Ok(topology)
    }
}

fn parse_ids(text: &str, flag: &str) -> Result<Vec<NodeId>, Error> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse::<NodeId>()
                .map_err(|_| Error::input(format!("{flag}: '{s}' is not an NPU id")))
        })
        .collect()
}

fn parse_link_list(text: &str) -> Result<Vec<(NodeId, NodeId)>, Error> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (a, b, both) = if let Some((a, b)) = item.split_once('-') {
            (a, b, true)
        } else if let Some((a, b)) = item.split_once('>') {
            (a, b, false)
        } else {
            return Err(Error::input(format!(
                "--remove-links: '{item}' should be 'a-b' (both directions) or 'a>b'"
            )));
        };
        let id = |s: &str| {
            s.trim().parse::<NodeId>().map_err(|_| {
                Error::input(format!("--remove-links: '{item}' does not name two nodes"))
            })
        };
        let (a, b) = (id(a)?, id(b)?);
        out.push((a, b));
        if both {
            out.push((b, a));
        }
    }
    Ok(out)
}

/// Picks the value for dimension `d` from a one-or-per-dimension list.
fn per_dim<T: Copy>(
    values: &[T],
    dims: usize,
    d: usize,
    what: &str,
    spec: &str,
) -> Result<T, Error> {
    match values.len() {
        1 => Ok(values[0]),
        n if n == dims => Ok(values[d]),
        n => Err(Error::input(format!(
            "--{what}: {n} values given but topology {spec} has {dims} dimension(s)"
        ))),
    }
}

fn parse_shape(text: &str, spec: &str) -> Result<Vec<u32>, Error> {
    text.split('x')
        .map(|s| match s.trim().parse::<u64>() {
            Ok(n) if n > MAX_NPUS => Err(Error::input(format!(
                "topology '{spec}': dimension size {n} is too large: at most {MAX_NPUS}"
            ))),
            Ok(n) if n >= 1 => Ok(n as u32),
            _ => Err(Error::input(format!(
                "topology '{spec}': '{s}' is not a positive dimension size"
            ))),
        })
        .collect()
}

/// Builds an inline spec: `ring:8`, `uring:8`, `fc:8`, `switch:16`, `mesh:AxB[xC]`, `torus:AxB[xC]`,
/// `hypercube:D`, `dgx1`, `dragonfly:GxA` (local, global values), or an ASTRA-style hierarchy
/// `dims:ring4,fc8,switch16`.
pub fn parse_inline(
    spec: &str,
    bandwidths: &[Bandwidth],
    latencies: &[Time],
) -> Result<Topology, Error> {
    let (kind, arg) = spec.split_once(':').unwrap_or((spec, ""));
    let kinds: Vec<(DimKind, u32)> = match kind {
        "ring" | "uring" | "fc" | "switch" => {
            let n = match arg.parse::<u64>() {
                Ok(n) if n > MAX_NPUS => {
                    return Err(Error::input(format!(
                        "topology '{spec}': {n} NPUs is too large: at most {MAX_NPUS}"
                    )))
                }
                Ok(n) if n >= 1 => n as u32,
                _ => {
                    return Err(Error::input(format!(
                        "topology '{spec}': expected {kind}:N with N >= 1"
                    )))
                }
            };
            let dim_kind = match kind {
                "ring" => DimKind::Ring,
                "uring" => DimKind::UniRing,
                "fc" => DimKind::FullyConnected,
                _ => DimKind::Switch,
            };
            vec![(dim_kind, n)]
        }
        "mesh" | "torus" => {
            let shape = parse_shape(arg, spec)?;
            if !(1..=3).contains(&shape.len()) {
                return Err(Error::input(format!(
                    "topology '{spec}': {kind} takes 1 to 3 dimensions, e.g. {kind}:8x8"
                )));
            }
            let k = if kind == "mesh" { DimKind::Line } else { DimKind::Ring };
            shape.into_iter().map(|n| (k, n)).collect()
        }
        "hypercube" => {
            let d: u32 = arg.parse().ok().filter(|&d| (1..=24).contains(&d)).ok_or_else(|| {
                Error::input(format!("topology '{spec}': expected hypercube:D with 1 <= D <= 24"))
            })?;
            vec![(DimKind::Line, 2); d as usize]
        }
        "dims" => arg
            .split(',')
            .map(|item| {
                let item = item.trim();
                let split = item.find(|c: char| c.is_ascii_digit()).unwrap_or(item.len());
                let kind = DimKind::parse(&item[..split]);
                let n = item[split..].parse::<u64>().ok().filter(|&n| n >= 1);
                if let Some(n) = n.filter(|&n| n > MAX_NPUS) {
                    return Err(Error::input(format!(
                        "topology '{spec}': dimension size {n} is too large: at most {MAX_NPUS}"
                    )));
                }
                kind.zip(n.map(|n| n as u32)).ok_or_else(|| {
                    Error::input(format!(
                        "topology '{spec}': '{item}' should be a dimension like ring4, fc8, switch16"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        "dgx1" => {
            let bw = per_dim(bandwidths, 1, 0, "bandwidth", spec)?;
            let lat = per_dim(latencies, 1, 0, "latency", spec)?;
            return dgx1(bw, lat);
        }
        "dragonfly" => {
            let shape = parse_shape(arg, spec)?;
            if shape.len() != 2 {
                return Err(Error::input(format!(
                    "topology '{spec}': expected dragonfly:GROUPSxNPUS_PER_GROUP"
                )));
            }
            let local = (per_dim(bandwidths, 2, 0, "bandwidth", spec)?, per_dim(latencies, 2, 0, "latency", spec)?);
            let global = (per_dim(bandwidths, 2, 1, "bandwidth", spec)?, per_dim(latencies, 2, 1, "latency", spec)?);
            return dragonfly(shape[0], shape[1], local, global);
        }
        "spineleaf" | "fattree" | "rail" | "bigraph" => {
            return fabric(kind, arg, spec, bandwidths, latencies)
        }
        _ => {
            return Err(Error::input(format!(
                "unknown topology '{spec}': expected a YAML file or one of ring:N, uring:N, fc:N, \
                 switch:N, mesh:AxB[xC], torus:AxB[xC], hypercube:D, dims:ring4,fc8,..., dgx1, \
                 dragonfly:GxA, spineleaf:LxSxH[xG], fattree:K, rail:BxG, bigraph:MxN, \
                 dgx-a100:N, hgx-h100:N, hgx-h200:N, hgx-b200:N, hgx-a800:N, hgx-h800:N, \
                 mi300x:N, pcie:G"
            )))
        }
    };
    let count = kinds.len();
    let dims = kinds
        .into_iter()
        .enumerate()
        .map(|(d, (kind, n))| {
            Ok(Dim::new(
                kind,
                n,
                per_dim(bandwidths, count, d, "bandwidth", spec)?,
                per_dim(latencies, count, d, "latency", spec)?,
            ))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    multi_dim(spec, dims)
}

/// The datacenter fabrics ([`fabrics`]): their sizes, and one bandwidth and latency per tier.
fn fabric(
    kind: &str,
    arg: &str,
    spec: &str,
    bandwidths: &[Bandwidth],
    latencies: &[Time],
) -> Result<Topology, Error> {
    let (form, sizes) = match kind {
        "spineleaf" => ("spineleaf:LEAVESxSPINESxHOSTS[xGPUS]", 3),
        "fattree" => ("fattree:K", 1),
        "rail" => ("rail:BOXESxGPUS", 2),
        _ => ("bigraph:HOSTSxSWITCHES", 2),
    };
    let shape = if kind == "fattree" {
        vec![arg
            .trim()
            .parse::<u32>()
            .map_err(|_| Error::input(format!("topology '{spec}': expected {form}")))?]
    } else {
        parse_shape(arg, spec)?
    };
    // Leaf/spine takes a fourth size: hosts are then boxes of that many GPUs on an NVSwitch.
    let boxed = kind == "spineleaf" && shape.len() == 4;
    if shape.len() != sizes && !boxed {
        return Err(Error::input(format!("topology '{spec}': expected {form}")));
    }
    let tiers = if kind == "fattree" || boxed { 3 } else { 2 };
    let tier = |d: usize| -> Result<fabrics::Tier, Error> {
        Ok((
            per_dim(bandwidths, tiers, d, "bandwidth", spec)?,
            per_dim(latencies, tiers, d, "latency", spec)?,
        ))
    };
    match kind {
        "spineleaf" if boxed => fabrics::spine_leaf(
            [shape[0], shape[1], shape[2]],
            Some((shape[3], tier(0)?)),
            tier(1)?,
            tier(2)?,
        ),
        "spineleaf" => {
            fabrics::spine_leaf([shape[0], shape[1], shape[2]], None, tier(0)?, tier(1)?)
        }
        "fattree" => fabrics::fat_tree(shape[0], [tier(0)?, tier(1)?, tier(2)?]),
        "rail" => fabrics::rail(shape[0], shape[1], tier(0)?, tier(1)?),
        _ => fabrics::bigraph(shape[0], shape[1], tier(0)?, tier(1)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_specs_build_expected_sizes() {
        let build = |s: &str| TopologyOptions::new(s).build().unwrap();
        assert_eq!(build("ring:8").npus(), 8);
        assert_eq!(build("switch:16").nodes(), 17);
        assert_eq!(build("mesh:4x4x4").npus(), 64);
        assert_eq!(build("hypercube:6").npus(), 64);
        assert_eq!(build("hypercube:6").links().len(), 64 * 6);
        assert_eq!(build("dims:ring2,fc4,switch4").nodes(), 32 + 8);
        assert_eq!(build("dragonfly:4x3").npus(), 12);
    }

    #[test]
    fn per_dimension_bandwidth_lists_must_match_dimension_count() {
        let t = TopologyOptions::new("mesh:4x2")
            .with_links("50GB/s,25GB/s", "1us")
            .build()
            .unwrap();
        let y = t.links().iter().find(|l| l.dim == Some(1)).unwrap();
        assert_eq!(y.bandwidth.as_bytes_per_sec(), 25e9);
        let err = TopologyOptions::new("ring:4")
            .with_links("1GB/s,2GB/s", "1us")
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("--bandwidth"), "{err}");
    }

    #[test]
    fn bad_specs_are_named_in_errors() {
        for bad in ["ring:0", "ring:x", "blob:4", "mesh:4x0", "hypercube:40"] {
            let err = TopologyOptions::new(bad).build().unwrap_err().to_string();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }

    #[test]
    fn faults_remove_named_npus_and_links() {
        let mut o = TopologyOptions::new("mesh:4x4");
        o.remove_npus = Some("7,9".into());
        let t = o.build().unwrap();
        assert_eq!(t.active_npus().len(), 14);
        o.remove_npus = None;
        o.remove_links = Some("0-1".into());
        let t = o.build().unwrap();
        assert!(t.link_between(0, 1).is_none() && t.link_between(1, 0).is_none());
    }
}
