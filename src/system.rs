//! ASTRA-sim system configurations read for collsim's own multi-dimensional algorithms
//! (`--system FILE --algorithm hierarchical|themis`): the collective implementation of each
//! network dimension, how chunks share the dimensions, how many chunks a collective is cut into,
//! and endpoint costs. Without `--algorithm`, `--system` runs ASTRA-sim's system layer itself
//! ([`crate::astra`]). Reads ASTRA-sim 2.x JSON and the 1.x `key: value` text form (where
//! implementations are joined by `_`, e.g. `ring_direct`). `inter-dimension-scheduling` and
//! `intra-dimension-scheduling`, which ASTRA-sim 1.x honoured and 2.x silently ignores, are
//! honoured here.

use std::path::Path;

use serde_json::Value;

use crate::algorithms::{Algorithm, DimAlgorithm, IntraDimension, MultiDimOptions};
use crate::collective::CollectiveKind;
use crate::sim::{SimOptions, TimeModel};
use crate::units::Time;
use crate::Error;

/// What a system file sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SystemConfig {
    pub multi_dim: MultiDimOptions,
    /// Themis when `inter-dimension-scheduling` asks for it, hierarchical otherwise.
    pub algorithm: Option<Algorithm>,
    /// `preferred-dataset-splits`: chunks per collective.
    pub chunks: Option<u32>,
    /// `endpoint-delay` (cycles of 1 ns).
    pub endpoint_delay: Time,
    /// `local-reduction-delay` (cycles of 1 ns) per reduction.
    pub reduction_delay: Time,
    /// Lines for stderr: unknown keys, and keys collsim accepts but does not model.
    pub warnings: Vec<String>,
}

impl SystemConfig {
    /// Simulation settings with the file's endpoint and reduction delays.
    pub fn sim_options(&self, time_model: TimeModel) -> SimOptions {
        SimOptions {
            time_model,
            endpoint_delay: self.endpoint_delay,
            reduction_delay: self.reduction_delay,
            ..SimOptions::default()
        }
    }
}

/// Keys of ASTRA-sim system files that only ASTRA-sim's system layer gives meaning to (memory,
/// compute, tracing, several concurrent collectives' priority): collsim's algorithms have no use
/// for them, and a warning says so and how to run the system layer.
const WITHOUT_EFFECT: [&str; 15] = [
    "scheduling-policy",
    "collective-optimization",
    "local-mem-bw",
    "boost-mode",
    "roofline-enabled",
    "peak-perf",
    "trace-enabled",
    "replay-only",
    "track-local-mem",
    "local-mem-trace-filename",
    "model-shared-bus",
    "L",
    "o",
    "g",
    "G",
];

/// Reads an ASTRA-sim system file (JSON, or the 1.x text form).
pub fn load_system(path: &Path) -> Result<SystemConfig, Error> {
    let (value, shown) = read_system_file(path)?;
    parse_system(&value, &shown)
}

/// The parsed contents of a system file (JSON, or the 1.x `key: value` text form) and the name
/// errors give it.
pub(crate) fn read_system_file(path: &Path) -> Result<(Value, String), Error> {
    let shown = path.display().to_string();
    let text = crate::read_text(path, "cannot read system file")?;
    let value: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).map_err(|e| Error::input(format!("{shown}: {e}")))?
    } else {
        let yaml: serde_yaml::Value = crate::yaml::from_str(&shown, &text)?;
        serde_json::to_value(yaml).map_err(|e| Error::input(format!("{shown}: {e}")))?
    };
    Ok((value, shown))
}

/// Reads the settings of a parsed system file; `file` names it in errors.
pub fn parse_system(value: &Value, file: &str) -> Result<SystemConfig, Error> {
    let Value::Object(map) = value else {
        return Err(Error::input(format!(
            "{file}: expected an object of ASTRA-sim system settings"
        )));
    };
    let bad = |key: &str, why: String| Error::input(format!("{file}: '{key}': {why}"));
    let mut config = SystemConfig::default();
    let mut unknown = Vec::new();
    let mut inert = Vec::new();
    for (key, v) in map {
        match key.as_str() {
            "endpoint-delay" => config.endpoint_delay = cycles(v).map_err(|e| bad(key, e))?,
            "local-reduction-delay" => {
                config.reduction_delay = cycles(v).map_err(|e| bad(key, e))?
            }
            "active-chunks-per-dimension" => {
                config.multi_dim.active_chunks = Some(positive(v).map_err(|e| bad(key, e))?)
            }
            "preferred-dataset-splits" => {
                config.chunks = Some(positive(v).map_err(|e| bad(key, e))?)
            }
            "all-reduce-implementation"
            | "all-gather-implementation"
            | "reduce-scatter-implementation"
            | "all-to-all-implementation" => {
                let kind = CollectiveKind::parse(key.trim_end_matches("-implementation"))
                    .expect("the four names above are collectives");
                let list = implementations(v).map_err(|e| bad(key, e))?;
                // All-to-all runs as collsim's direct all-to-all whatever the list says.
                if kind != CollectiveKind::AllToAll {
                    config.multi_dim.implementations.push((kind, list));
                }
            }
            "intra-dimension-scheduling" => {
                let name = text(v).map_err(|e| bad(key, e))?;
                config.multi_dim.intra_dimension =
                    Some(IntraDimension::named(name).map_err(|e| bad(key, e))?);
            }
            "inter-dimension-scheduling" => {
                let name = text(v).map_err(|e| bad(key, e))?;
                let themis = match name {
                    "ascending" | "baseline" => false,
                    "themis" | "offlineGreedy" | "offlineGreedyFlex" => true,
                    _ => {
                        return Err(bad(
                            key,
                            format!(
                                "'{name}' is not ascending, baseline, offlineGreedy, \
                                 offlineGreedyFlex or themis"
                            ),
                        ))
                    }
                };
                if name == "offlineGreedyFlex" {
                    config.warnings.push(format!(
                        "{file}: offlineGreedyFlex runs as offlineGreedy: collsim keeps chunks \
                         of equal size"
                    ));
                }
                config.multi_dim.themis_order = Some(themis);
                config.algorithm = Some(if themis {
                    Algorithm::Themis
                } else {
                    Algorithm::Hierarchical
                });
            }
            k if WITHOUT_EFFECT.contains(&k) => inert.push(k.to_string()),
            k => unknown.push(k.to_string()),
        }
    }
    if !unknown.is_empty() {
        config.warnings.push(format!(
            "{file}: unknown system key(s) ignored: {}",
            unknown.join(", ")
        ));
    }
    if !inert.is_empty() {
        config.warnings.push(format!(
            "{file}: key(s) that take effect only in ASTRA-sim's system layer, not in collsim's \
             algorithms (drop --algorithm to run the system layer): {}",
            inert.join(", ")
        ));
    }
    Ok(config)
}

/// A number as system files write them: a JSON number or a numeric string.
pub(crate) fn number(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| "not a number".to_string()),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("'{s}' is not a number")),
        other => Err(format!("expected a number, got {other}")),
    }
}

fn cycles(v: &Value) -> Result<Time, String> {
    let ns = number(v)?;
    if !(ns.is_finite() && ns >= 0.0) {
        return Err(format!("{ns} is not a non-negative number of cycles"));
    }
    Ok(Time((ns * 1e3).round() as u64))
}

fn positive(v: &Value) -> Result<u32, String> {
    let n = number(v)?;
    if n.fract() != 0.0 || n < 1.0 || n > u32::MAX as f64 {
        return Err(format!("{n} is not a whole number of at least 1"));
    }
    Ok(n as u32)
}

pub(crate) fn text(v: &Value) -> Result<&str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a string, got {v}"))
}

/// The names of an `*-implementation` key: a JSON list, or the 1.x form `ring_direct`.
pub(crate) fn implementation_names(v: &Value) -> Result<Vec<&str>, String> {
    let names: Vec<&str> = match v {
        Value::Array(items) => items.iter().map(text).collect::<Result<_, _>>()?,
        Value::String(s) => s.split('_').collect(),
        other => return Err(format!("expected a list of implementations, got {other}")),
    };
    if names.is_empty() {
        return Err("the list is empty".into());
    }
    Ok(names)
}

fn implementations(v: &Value) -> Result<Vec<DimAlgorithm>, String> {
    implementation_names(v)?
        .into_iter()
        .map(|n| {
            DimAlgorithm::parse(n).ok_or_else(|| {
                format!(
                    "'{n}' is not ring, oneRing, direct, oneDirect, directN, halvingDoubling, \
                     oneHalvingDoubling or doubleBinaryTree"
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn astra_sim_json_and_text_forms_read_the_same() {
        let json: Value = serde_json::from_str(
            r#"{"scheduling-policy": "LIFO", "endpoint-delay": 10,
                "active-chunks-per-dimension": 1, "preferred-dataset-splits": 4,
                "all-reduce-implementation": ["ring", "direct"],
                "all-gather-implementation": ["ring", "direct"],
                "reduce-scatter-implementation": ["ring", "direct"],
                "all-to-all-implementation": ["ring", "direct"],
                "collective-optimization": "localBWAware", "local-mem-bw": 50,
                "boost-mode": 0, "inter-dimension-scheduling": "themis",
                "intra-dimension-scheduling": "SCF"}"#,
        )
        .unwrap();
        let a = parse_system(&json, "a.json").unwrap();
        assert_eq!(a.endpoint_delay, Time::from_ns(10));
        assert_eq!(a.chunks, Some(4));
        assert_eq!(a.multi_dim.active_chunks, Some(1));
        assert_eq!(a.algorithm, Some(Algorithm::Themis));
        assert_eq!(
            a.multi_dim.implementation(CollectiveKind::AllReduce),
            Some(&[DimAlgorithm::Ring, DimAlgorithm::Direct][..])
        );
        assert_eq!(
            a.multi_dim.intra_dimension,
            Some(IntraDimension::SmallestFirst)
        );
        assert!(a.warnings.iter().any(|w| w.contains("drop --algorithm")));
        let yaml: serde_yaml::Value = serde_yaml::from_str(
            "scheduling-policy: LIFO\nendpoint-delay: 10\nactive-chunks-per-dimension: 1\n\
             preferred-dataset-splits: 4\nall-reduce-implementation: ring_direct\n\
             all-gather-implementation: ring_direct\nreduce-scatter-implementation: ring_direct\n\
             all-to-all-implementation: ring_direct\ncollective-optimization: localBWAware\n\
             local-mem-bw: 50\nboost-mode: 0\ninter-dimension-scheduling: themis\n\
             intra-dimension-scheduling: SCF\n",
        )
        .unwrap();
        let b = parse_system(&serde_json::to_value(yaml).unwrap(), "a.json").unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn unknown_keys_warn_and_wrong_values_fail_naming_the_key() {
        let v: Value = serde_json::json!({"active-chunks-per-dimnesion": 1});
        let c = parse_system(&v, "s.json").unwrap();
        assert!(c.warnings[0].contains("active-chunks-per-dimnesion"));
        for (key, value) in [
            (
                "all-reduce-implementation",
                serde_json::json!(["ring", "warp"]),
            ),
            ("inter-dimension-scheduling", serde_json::json!("random")),
            ("active-chunks-per-dimension", serde_json::json!(0)),
            ("endpoint-delay", serde_json::json!("soon")),
        ] {
            let err = parse_system(&serde_json::json!({ key: value }), "s.json")
                .unwrap_err()
                .to_string();
            assert!(err.contains("s.json") && err.contains(key), "{err}");
        }
    }
}
