//! Topology files. Three forms, told apart by their keys:
//!
//! * ASTRA-sim network YAML: `topology: [Ring, Switch]`, `npus_count`, `bandwidth` (read as GiB/s, as
//!   ASTRA-sim's code does), `latency` (ns), one entry per dimension.
//! * collsim dimensional YAML: `dims: [{type: Ring, size: 4, bandwidth: 50GB/s, latency: 500ns}]`, or
//!   `topology: torus:4x4x4` with `bandwidth`/`latency` (one value or a list), plus optional
//!   `remove_npus` and `remove_links`.
//! * collsim explicit graph: `npus`, `switches`, `links: [{src, dst, bandwidth, latency,
//!   bidirectional}]`.

use std::path::Path;

use serde::Deserialize;
use serde_yaml::Value;

use super::build::{multi_dim, Dim, DimKind};
use super::spec::parse_inline;
use super::{Link, NodeId, Topology};
use crate::units::{parse_bandwidth, parse_time, Bandwidth, Time};
use crate::Error;

/// Reads a topology file in any of the supported forms.
pub fn load_topology_file(path: &Path) -> Result<Topology, Error> {
    if path.is_dir() {
        return Err(Error::input(format!(
            "{}: is a folder, not a topology file",
            path.display()
        )));
    }
    let text = crate::read_text(path, "cannot read topology file")?;
    let shown = path.display().to_string();
    let value: Value = crate::yaml::from_str(&shown, &text)?;
    let Value::Mapping(map) = &value else {
        return Err(Error::input(format!(
            "{shown}: expected a YAML mapping of topology fields"
        )));
    };
    let has = |k: &str| map.contains_key(Value::String(k.into()));
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| shown.clone());
    let parse = |what: &str| -> Result<Topology, Error> {
        let mut topology = match what {
            "astra" => from_astra(&shown, deserialize(&shown, value.clone())?)?,
            "dims" => from_dims(&shown, deserialize(&shown, value.clone())?)?,
            _ => from_graph(&shown, deserialize(&shown, value.clone())?)?,
        };
        topology.set_name(name.clone());
        Ok(topology)
    };
    if has("npus_count") {
        parse("astra")
    } else if has("dims") || has("topology") {
        parse("dims")
    } else if has("links") || has("npus") {
        parse("graph")
    } else {
        Err(Error::input(format!(
            "{shown}: not a topology file: expected ASTRA-sim keys (topology, npus_count, bandwidth, \
             latency), collsim 'dims' or 'topology', or an explicit graph (npus, links)"
        )))
    }
}

fn deserialize<T: serde::de::DeserializeOwned>(file: &str, value: Value) -> Result<T, Error> {
    serde_yaml::from_value(value).map_err(|e| Error::input(format!("{file}: {e}")))
}

#[derive(Deserialize)]
struct AstraNetwork {
    topology: Vec<String>,
    npus_count: Vec<u32>,
    bandwidth: Vec<f64>,
    latency: Vec<f64>,
}

fn from_astra(file: &str, net: AstraNetwork) -> Result<Topology, Error> {
    let dims = net.topology.len();
    for (field, len) in [
        ("npus_count", net.npus_count.len()),
        ("bandwidth", net.bandwidth.len()),
        ("latency", net.latency.len()),
    ] {
        if len != dims {
            return Err(Error::input(format!(
                "{file}: field '{field}' has {len} entries but 'topology' has {dims} dimension(s)"
            )));
        }
    }
    let mut out = Vec::with_capacity(dims);
    for d in 0..dims {
        let kind = match net.topology[d].as_str() {
            "Ring" => DimKind::Ring,
            "FullyConnected" => DimKind::FullyConnected,
            "Switch" => DimKind::Switch,
            other => {
                return Err(Error::input(format!(
                    "{file}: topology[{d}] '{other}' is not Ring, FullyConnected or Switch"
                )))
            }
        };
        if net.npus_count[d] == 0 {
            return Err(Error::input(format!(
                "{file}: npus_count[{d}] must be at least 1"
            )));
        }
        if !(net.bandwidth[d].is_finite() && net.bandwidth[d] > 0.0) {
            return Err(Error::input(format!(
                "{file}: bandwidth[{d}] must be positive"
            )));
        }
        if !(net.latency[d].is_finite() && net.latency[d] >= 0.0) {
            return Err(Error::input(format!(
                "{file}: latency[{d}] must be non-negative"
            )));
        }
        out.push(Dim::new(
            kind,
            net.npus_count[d],
            Bandwidth::gib_per_sec(net.bandwidth[d]),
            Time::from_ps((net.latency[d] * 1e3).round() as u64),
        ));
    }
    multi_dim(file, out)
}

/// A value with a unit; YAML numbers are refused so that GB/GiB is always explicit.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum OneOrMany {
    Many(Vec<Value>),
    One(Value),
}

fn quantity<T, E: std::fmt::Display>(
    file: &str,
    field: &str,
    value: &Value,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<T, Error> {
    match value {
        Value::String(s) => {
            parse(s).map_err(|e| Error::input(format!("{file}: field '{field}': {e}")))
        }
        other => Err(Error::input(format!(
            "{file}: field '{field}': {} needs a unit, e.g. '50GB/s', '50GiB/s' or '500ns'",
            crate::yaml_words(other)
        ))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DimEntry {
    #[serde(rename = "type")]
    kind: String,
    size: u32,
    bandwidth: Value,
    latency: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DimsFile {
    #[serde(default)]
    dims: Option<Vec<DimEntry>>,
    #[serde(default)]
    topology: Option<String>,
    #[serde(default)]
    bandwidth: Option<OneOrMany>,
    #[serde(default)]
    latency: Option<OneOrMany>,
    #[serde(default)]
    remove_npus: Vec<NodeId>,
    #[serde(default)]
    remove_links: Vec<(NodeId, NodeId)>,
}

fn from_dims(file: &str, f: DimsFile) -> Result<Topology, Error> {
    let mut topology = match (&f.dims, &f.topology) {
        (Some(dims), None) => {
            let mut out = Vec::new();
            for (d, entry) in dims.iter().enumerate() {
                let kind = DimKind::parse(&entry.kind).ok_or_else(|| {
                    Error::input(format!(
                        "{file}: dims[{d}].type '{}' is not Ring, UniRing, Line, FullyConnected or Switch",
                        entry.kind
                    ))
                })?;
                out.push(Dim::new(
                    kind,
                    entry.size,
                    quantity(
                        file,
                        &format!("dims[{d}].bandwidth"),
                        &entry.bandwidth,
                        parse_bandwidth,
                    )?,
                    quantity(
                        file,
                        &format!("dims[{d}].latency"),
                        &entry.latency,
                        parse_time,
                    )?,
                ));
            }
            multi_dim(file, out)?
        }
        (None, Some(spec)) => {
            let list = |field: &str, v: &Option<OneOrMany>| -> Vec<Value> {
                match v {
                    None => vec![Value::String(
                        if field == "bandwidth" {
                            super::spec::DEFAULT_BANDWIDTH
                        } else {
                            super::spec::DEFAULT_LATENCY
                        }
                        .into(),
                    )],
                    Some(OneOrMany::One(x)) => vec![x.clone()],
                    Some(OneOrMany::Many(xs)) => xs.clone(),
                }
            };
            let bws = list("bandwidth", &f.bandwidth)
                .iter()
                .map(|v| quantity(file, "bandwidth", v, parse_bandwidth))
                .collect::<Result<Vec<_>, _>>()?;
            let lats = list("latency", &f.latency)
                .iter()
                .map(|v| quantity(file, "latency", v, parse_time))
                .collect::<Result<Vec<_>, _>>()?;
            parse_inline(spec, &bws, &lats).map_err(|e| Error::input(format!("{file}: {e}")))?
        }
        _ => {
            return Err(Error::input(format!(
                "{file}: give either 'dims' or 'topology', not both"
            )))
        }
    };
    let links: Vec<_> = f
        .remove_links
        .iter()
        .flat_map(|&(a, b)| [(a, b), (b, a)])
        .collect();
    topology
        .remove(&f.remove_npus, &links)
        .map_err(|e| Error::input(format!("{file}: {e}")))?;
    Ok(topology)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphLink {
    src: NodeId,
    dst: NodeId,
    bandwidth: Value,
    latency: Value,
    #[serde(default = "yes")]
    bidirectional: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphFile {
    npus: u32,
    #[serde(default)]
    switches: u32,
    links: Vec<GraphLink>,
}

fn from_graph(file: &str, g: GraphFile) -> Result<Topology, Error> {
    let mut links = Vec::with_capacity(g.links.len() * 2);
    // Checked here, where the file's own list indices are known (links[3], not directed link 7).
    let nodes = g.npus as u64 + g.switches as u64;
    let mut first_of: std::collections::HashMap<(NodeId, NodeId), usize> =
        std::collections::HashMap::with_capacity(g.links.len() * 2);
    for (i, l) in g.links.iter().enumerate() {
        for (field, v) in [("src", l.src), ("dst", l.dst)] {
            if v as u64 >= nodes {
                return Err(Error::input(format!(
                    "{file}: links[{i}].{field} = {v} names no node (nodes are 0..{}: npus then \
                     switches)",
                    nodes.saturating_sub(1)
                )));
            }
        }
        if l.src == l.dst {
            return Err(Error::input(format!(
                "{file}: links[{i}] connects node {} to itself",
                l.src
            )));
        }
        let directions = [(l.src, l.dst), (l.dst, l.src)];
        for &(a, b) in &directions[..if l.bidirectional { 2 } else { 1 }] {
            if let Some(j) = first_of.insert((a, b), i) {
                return Err(Error::input(format!(
                    "{file}: links[{j}] and links[{i}] both connect {a} -> {b}; merge them into \
                     one link with the summed bandwidth"
                )));
            }
        }
    }
    for (i, l) in g.links.iter().enumerate() {
        let bandwidth = quantity(
            file,
            &format!("links[{i}].bandwidth"),
            &l.bandwidth,
            parse_bandwidth,
        )?;
        let latency = quantity(file, &format!("links[{i}].latency"), &l.latency, parse_time)?;
        let mut add = |src, dst| links.push(Link::one_way(src, dst, (bandwidth, latency)));
        add(l.src, l.dst);
        if l.bidirectional {
            add(l.dst, l.src);
        }
    }
    Topology::from_parts(
        file.to_string(),
        g.npus,
        g.switches,
        links,
        Vec::new(),
        Vec::new(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(name: &str, text: &str) -> Result<Topology, Error> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        load_topology_file(&path)
    }

    #[test]
    fn astra_numbers_are_gib_per_second_and_nanoseconds() {
        let t = load("a.yml", "topology: [Ring, Switch]\nnpus_count: [2, 4]\nbandwidth: [50, 25]\nlatency: [500, 700]\n")
            .unwrap();
        assert_eq!(t.npus(), 8);
        assert_eq!(t.nodes(), 8 + 2);
        let l = t.link(t.link_between(0, 1).unwrap());
        assert_eq!(l.bandwidth, Bandwidth::gib_per_sec(50.0));
        assert_eq!(l.latency, Time::from_ns(500));
    }

    #[test]
    fn per_dimension_lists_and_faults_in_collsim_form() {
        let t = load(
            "t.yml",
            "topology: mesh:4x4\nbandwidth: [50GB/s, 25GB/s]\nlatency: 1us\nremove_npus: [7, 9]\nremove_links: [[0, 1]]\n",
        )
        .unwrap();
        assert_eq!(t.active_npus().len(), 14);
        assert!(t.link_between(0, 1).is_none() && t.link_between(1, 0).is_none());
        let y = t.link(t.link_between(0, 4).unwrap());
        assert_eq!(y.bandwidth, Bandwidth::gb_per_sec(25.0));
    }

    #[test]
    fn explicit_graphs_read_units_and_directions() {
        let t = load(
            "g.yml",
            "npus: 3\nswitches: 1\nlinks:\n  - {src: 0, dst: 3, bandwidth: 100Gbps, latency: 1us}\n  - {src: 1, dst: 3, bandwidth: 10GB/s, latency: 1us}\n  - {src: 2, dst: 3, bandwidth: 10GB/s, latency: 1us}\n  - {src: 0, dst: 1, bandwidth: 1GB/s, latency: 2ns, bidirectional: false}\n",
        )
        .unwrap();
        assert_eq!(t.links().len(), 7);
        assert!(t.link_between(1, 0).is_none());
        assert_eq!(
            t.link(t.link_between(3, 0).unwrap()).bandwidth,
            Bandwidth::gb_per_sec(12.5)
        );
    }

    #[test]
    fn typos_and_missing_units_name_the_field() {
        let err = load(
            "x.yml",
            "npus: 2\nlinks:\n  - {src: 0, dst: 1, bandwith: 1GB/s, latency: 1us}\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("bandwith"), "{err}");
        let err = load(
            "y.yml",
            "dims:\n  - {type: Ring, size: 4, bandwidth: 50, latency: 1us}\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("dims[0].bandwidth"), "{err}");
    }
}
