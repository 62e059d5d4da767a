//! Workload files: collsim's YAML (with units and comments) and ASTRA-sim's text workloads,
//! read unchanged.
//!
//! collsim YAML:
//! ```yaml
//! name: resnet50
//! parallelism: data           # data, model, hybrid_data_model, hybrid_model_data, transformer, dlrm
//! model_parallel_npus: 8      # hybrids: NPUs per model-parallel group (the first NPUs)
//! last_bottom_layer: 2        # dlrm: the bottom MLP's last layer
//! layers:
//!   - name: conv1
//!     forward: {compute: 120us, comm: {collective: all-gather, size: 4MB}}
//!     input_grad: {compute: 240us}
//!     weight_grad: {compute: 240us, comm: {collective: all-reduce, size: 18.8KB}}
//!     update: 2us             # optional, after the layer's weight-gradient communication
//!   - {name: block, repeat: 24, forward: {compute: 1ms}}   # 24 identical layers
//! ```
//! A phase's `comm` may name its `group` (`data` or `model`); by default it is the one the
//! parallelism gives that phase, as ASTRA-sim assigns them.
//!
//! ASTRA-sim text: the parallelism on the first line (`DATA`, `MODEL`, `HYBRID_DATA_MODEL`,
//! `HYBRID_MODEL_DATA`, `HYBRID_TRANSFORMER model_parallel_NPU_group: N`,
//! `HYBRID_DLRM DLRM_LAST_BOTTOM_LAYER: N`), the layer count on the second, then 12 fields per
//! layer: name, -1, forward compute, type, bytes, input-gradient compute, type, bytes,
//! weight-gradient compute, type, bytes, update delay; compute in cycles of 1 ns; types ALLREDUCE,
//! ALLGATHER, REDUCESCATTER, ALLTOALL, NONE.

use std::path::Path;

use serde::Deserialize;
use serde_yaml::Value;

use super::{Comm, CommGroup, Layer, Parallelism, Phase, Workload};
use crate::collective::CollectiveKind;
use crate::units::{parse_bytes, parse_time, Time};
use crate::Error;

/// Reads a workload file: YAML by its extension (`.yaml`, `.yml`), ASTRA-sim text otherwise.
pub fn load_workload(path: &Path) -> Result<Workload, Error> {
    let shown = path.display().to_string();
    let text = crate::read_text(path, "cannot read workload file")?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| shown.clone());
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    if yaml {
        parse_yaml(&text, &shown, &name)
    } else {
        parse_astra(&text, &shown, &name)
    }
}

/// Parses ASTRA-sim's text workload format; `file` names the source in errors.
pub fn parse_astra(text: &str, file: &str, name: &str) -> Result<Workload, Error> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let at = |line: usize, why: String| Error::input(format!("{file}: line {}: {why}", line + 1));
    let (n, head) = lines
        .next()
        .ok_or_else(|| Error::input(format!("{file}: empty workload file")))?;
    let words: Vec<&str> = head.split_whitespace().collect();
    let setting = |key: &str| -> Result<Option<u32>, Error> {
        match words.iter().position(|w| *w == key) {
            None => Ok(None),
            Some(i) => words
                .get(i + 1)
                .and_then(|v| v.parse::<u32>().ok())
                .filter(|&v| v >= 1)
                .map(Some)
                .ok_or_else(|| at(n, format!("'{key}' needs a positive number"))),
        }
    };
    let parallelism = match words[0] {
        "DATA" => Parallelism::Data,
        "MODEL" => Parallelism::Model,
        "HYBRID_DATA_MODEL" => Parallelism::HybridDataModel,
        "HYBRID_MODEL_DATA" => Parallelism::HybridModelData,
        "HYBRID_TRANSFORMER" | "HYBRID_TRANSFORMER_FWD_IN_BCKWD" => Parallelism::Transformer,
        "HYBRID_DLRM" | "HYBRID_DLRM_ENHANCED" => Parallelism::Dlrm,
        other => {
            return Err(at(
                n,
                format!(
                    "'{other}' is not DATA, MODEL, HYBRID_DATA_MODEL, HYBRID_MODEL_DATA, \
                     HYBRID_TRANSFORMER or HYBRID_DLRM"
                ),
            ))
        }
    };
    let model_parallel_npus = setting("model_parallel_NPU_group:")?;
    let last_bottom_layer = setting("DLRM_LAST_BOTTOM_LAYER:")?;
    let (n, count_line) = lines
        .next()
        .ok_or_else(|| Error::input(format!("{file}: the layer count (line 2) is missing")))?;
    let count: usize = count_line
        .trim()
        .parse()
        .map_err(|_| at(n, format!("'{}' is not a layer count", count_line.trim())))?;
    let mut layers = Vec::with_capacity(count);
    for (n, line) in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 12 {
            return Err(at(
                n,
                format!("a layer has 12 fields, this line has {}", f.len()),
            ));
        }
        let cycles = |i: usize, what: &str| -> Result<Time, Error> {
            f[i].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(|v| Time((v * 1e3).round() as u64))
                .ok_or_else(|| at(n, format!("{what} '{}' is not a number of cycles", f[i])))
        };
        let comm = |i: usize, what: &str| -> Result<Option<Comm>, Error> {
            let bytes = f[i + 1]
                .parse::<u64>()
                .map_err(|_| at(n, format!("{what} size '{}' is not a byte count", f[i + 1])))?;
            let collective = match f[i] {
                "NONE" => return Ok(None),
                "ALLREDUCE" => CollectiveKind::AllReduce,
                "ALLGATHER" => CollectiveKind::AllGather,
                "REDUCESCATTER" => CollectiveKind::ReduceScatter,
                "ALLTOALL" => CollectiveKind::AllToAll,
                other => {
                    return Err(at(
                        n,
                        format!(
                            "{what} type '{other}' is not ALLREDUCE, ALLGATHER, REDUCESCATTER, \
                             ALLTOALL or NONE"
                        ),
                    ))
                }
            };
            Ok((bytes > 0).then_some(Comm {
                collective,
                bytes,
                group: None,
            }))
        };
        layers.push(Layer {
            name: f[0].to_string(),
            forward: Phase {
                compute: cycles(2, "forward compute")?,
                comm: comm(3, "forward communication")?,
            },
            input_grad: Phase {
                compute: cycles(5, "input-gradient compute")?,
                comm: comm(6, "input-gradient communication")?,
            },
            weight_grad: Phase {
                compute: cycles(8, "weight-gradient compute")?,
                comm: comm(9, "weight-gradient communication")?,
            },
            update: cycles(11, "update delay")?,
        });
    }
    if layers.len() != count {
        return Err(Error::input(format!(
            "{file}: line 2 announces {count} layers but the file has {}",
            layers.len()
        )));
    }
    Workload::new(
        name.to_string(),
        parallelism,
        model_parallel_npus,
        last_bottom_layer,
        layers,
    )
    .map_err(|e| Error::input(format!("{file}: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    name: Option<String>,
    description: Option<String>,
    parallelism: String,
    model_parallel_npus: Option<u32>,
    last_bottom_layer: Option<u32>,
    layers: Vec<RawLayer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayer {
    name: String,
    /// The same layer this many times (named `name.0`, `name.1`, ...).
    repeat: Option<u32>,
    #[serde(default)]
    forward: RawPhase,
    #[serde(default)]
    input_grad: RawPhase,
    #[serde(default)]
    weight_grad: RawPhase,
    update: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    compute: Option<Value>,
    comm: Option<RawComm>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawComm {
    collective: String,
    size: Value,
    group: Option<String>,
}

/// Parses collsim's workload YAML; `file` names the source in errors.
pub fn parse_yaml(text: &str, file: &str, default_name: &str) -> Result<Workload, Error> {
    let raw: RawWorkload = crate::yaml::from_str(file, text)?;
    let _ = raw.description;
    let field = |what: String, why: String| Error::input(format!("{file}: {what}: {why}"));
    let parallelism = Parallelism::parse(&raw.parallelism).ok_or_else(|| {
        field(
            "parallelism".into(),
            format!(
                "'{}' is not data, model, hybrid_data_model, hybrid_model_data, transformer or dlrm",
                raw.parallelism
            ),
        )
    })?;
    let time = |v: &Option<Value>, what: String| -> Result<Time, Error> {
        match v {
            None => Ok(Time::ZERO),
            Some(Value::String(s)) => parse_time(s).map_err(|e| field(what, e.to_string())),
            Some(other) => Err(field(
                what,
                format!(
                    "{} needs a unit, e.g. 120us or 2ms",
                    crate::yaml_words(other)
                ),
            )),
        }
    };
    let mut layers = Vec::with_capacity(raw.layers.len());
    for (i, l) in raw.layers.iter().enumerate() {
        let at = |part: &str| format!("layers[{i}] ({}) {part}", l.name);
        let phase = |p: &RawPhase, part: &str| -> Result<Phase, Error> {
            let comm = match &p.comm {
                None => None,
                Some(c) => {
                    let collective = CollectiveKind::parse(&c.collective)
                        .map_err(|e| field(at(part), e.to_string()))?;
                    let bytes = match &c.size {
                        Value::Number(n) => n.as_u64().ok_or_else(|| {
                            field(at(part), "size must be a whole number of bytes".into())
                        })?,
                        Value::String(s) => {
                            parse_bytes(s).map_err(|e| field(at(part), e.to_string()))?
                        }
                        other => {
                            return Err(field(at(part), format!("size {other:?} is not a size")))
                        }
                    };
                    let group = match c.group.as_deref() {
                        None => None,
                        Some("data") => Some(CommGroup::Data),
                        Some("model") => Some(CommGroup::Model),
                        Some(other) => {
                            return Err(field(
                                at(part),
                                format!("group '{other}' is not data or model"),
                            ))
                        }
                    };
                    (bytes > 0).then_some(Comm {
                        collective,
                        bytes,
                        group,
                    })
                }
            };
            Ok(Phase {
                compute: time(&p.compute, at(part))?,
                comm,
            })
        };
        let layer = Layer {
            name: l.name.clone(),
            forward: phase(&l.forward, "forward")?,
            input_grad: phase(&l.input_grad, "input_grad")?,
            weight_grad: phase(&l.weight_grad, "weight_grad")?,
            update: time(&l.update, at("update"))?,
        };
        match l.repeat {
            None => layers.push(layer),
            Some(0) => return Err(field(at("repeat"), "must be at least 1".into())),
            Some(n) => layers.extend((0..n).map(|k| Layer {
                name: format!("{}.{k}", l.name),
                ..layer.clone()
            })),
        }
    }
    Workload::new(
        raw.name.unwrap_or_else(|| default_name.to_string()),
        parallelism,
        raw.model_parallel_npus,
        raw.last_bottom_layer,
        layers,
    )
    .map_err(|e| Error::input(format!("{file}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn astra_text_workloads_read_every_field() {
        let w = parse_astra(
            "HYBRID_TRANSFORMER model_parallel_NPU_group: 4\n2\n\
             l0 -1 1000 ALLREDUCE 2048 2000 ALLREDUCE 2048 3000 ALLREDUCE 4096 5\n\
             l1 -1 10 NONE 0 20 NONE 0 30 ALLGATHER 64 0\n",
            "t.txt",
            "t",
        )
        .unwrap();
        assert_eq!(w.parallelism, Parallelism::Transformer);
        assert_eq!(w.model_parallel_npus, Some(4));
        assert_eq!(w.layers.len(), 2);
        let l0 = &w.layers[0];
        assert_eq!(l0.forward.compute, Time::from_ns(1000));
        assert_eq!(l0.weight_grad.comm.as_ref().unwrap().bytes, 4096);
        assert_eq!(l0.update, Time::from_ns(5));
        assert!(w.layers[1].forward.comm.is_none());
        assert_eq!(
            w.layers[1].weight_grad.comm.as_ref().unwrap().collective,
            CollectiveKind::AllGather
        );
    }

    #[test]
    fn mistakes_name_the_file_line_and_field() {
        for (text, needle) in [
            (
                "DATA\n1\nl0 -1 10 ALLREDUCE 8 0 NONE 0 0 NONE 0\n",
                "12 fields",
            ),
            (
                "DATA\n2\nl0 -1 10 ALLREDUCE 8 0 NONE 0 0 NONE 0 0\n",
                "announces 2",
            ),
            (
                "DATA\n1\nl0 -1 10 BROADCAST 8 0 NONE 0 0 NONE 0 0\n",
                "line 3",
            ),
            ("PIPELINE\n1\n", "line 1"),
            (
                "DATA\n1\nl0 -1 ten NONE 0 0 NONE 0 0 NONE 0 0\n",
                "forward compute",
            ),
        ] {
            let err = parse_astra(text, "w.txt", "w").unwrap_err().to_string();
            assert!(err.contains("w.txt") && err.contains(needle), "{err}");
        }
        for (text, needle) in [
            ("parallelism: data\nlayers:\n - {name: a, forward: {compute: 5}}\n", "unit"),
            ("parallelism: pipes\nlayers: []\n", "parallelism"),
            (
                "parallelism: data\nlayers:\n - {name: a, weight_grad: {comm: {collective: all-mix, size: 1MB}}}\n",
                "layers[0] (a) weight_grad",
            ),
        ] {
            let err = parse_yaml(text, "w.yaml", "w").unwrap_err().to_string();
            assert!(err.contains("w.yaml") && err.contains(needle), "{err}");
        }
    }
}
