//! What every schedule format's reader shares: the collective a file claims, its transfer ids
//! mapped to list positions, and the assembly of rows into a schedule with the checks every
//! format's rows must pass.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Op, Schedule, Transfer, TransferIndex};
use crate::collective::{Collective, CollectiveKind};
use crate::units::Time;
use crate::Error;

/// The collective a schedule file says it implements.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Claim {
    kind: String,
    size: u64,
    chunks: u32,
    npus: Vec<u32>,
    #[serde(default)]
    root: Option<u32>,
}

impl Claim {
    pub fn of(c: &Collective) -> Claim {
        Claim {
            kind: c.kind.name().to_string(),
            size: c.size,
            chunks: c.chunks,
            npus: c.npus.clone(),
            root: c.kind.is_rooted().then(|| c.root()),
        }
    }

    pub(super) fn collective(self, file: &str) -> Result<Collective, Error> {
        let kind = CollectiveKind::parse(&self.kind)
            .map_err(|e| Error::input(format!("{file}: collective: {e}")))?;
        Collective::new(kind, self.npus, self.size, self.chunks, self.root)
            .map_err(|e| Error::input(format!("{file}: collective: {e}")))
    }

    /// The CSV form: `# collective: kind=... size=... chunks=... npus=a;b;c root=r`.
    pub(super) fn line(&self) -> String {
        let npus: Vec<String> = self.npus.iter().map(u32::to_string).collect();
        let root = self.root.map(|r| format!(" root={r}")).unwrap_or_default();
        format!(
            "# collective: kind={} size={} chunks={} npus={}{root}",
            self.kind,
            self.size,
            self.chunks,
            npus.join(";")
        )
    }

    pub(super) fn parse_line(file: &str, line: &str) -> Result<Claim, Error> {
        let bad = |why: &str| Error::input(format!("{file}: line 1 (# collective): {why}"));
        let mut claim = Claim {
            kind: String::new(),
            size: 0,
            chunks: 0,
            npus: Vec::new(),
            root: None,
        };
        let body = line.trim_start_matches('#').trim();
        let body = body
            .strip_prefix("collective:")
            .ok_or_else(|| bad("expected '# collective: kind=... size=...'"))?;
        for field in body.split_whitespace() {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| bad(&format!("'{field}' is not key=value")))?;
            let number = |v: &str| v.parse::<u64>().map_err(|_| bad(&format!("{key}={v}")));
            match key {
                "kind" => claim.kind = value.to_string(),
                "size" => claim.size = number(value)?,
                "chunks" => claim.chunks = number(value)? as u32,
                "root" => claim.root = Some(number(value)? as u32),
                "npus" => {
                    claim.npus = value
                        .split(';')
                        .map(|v| number(v).map(|n| n as u32))
                        .collect::<Result<_, _>>()?
                }
                other => return Err(bad(&format!("unknown key '{other}'"))),
            }
        }
        Ok(claim)
    }
}

/// How a file's transfer ids map to list positions: ids `0, 1, 2, ...` (what collsim writes)
/// are their positions; any others go through a map.
pub(super) struct TransferIds {
    count: u64,
    index_of: Option<HashMap<u64, TransferIndex>>,
}

impl TransferIds {
    /// The mapping for a file whose rows carry `ids` in order (`count` of them); an id given twice
    /// is refused.
    pub fn of(
        file: &str,
        ids: impl Iterator<Item = u64> + Clone,
        count: usize,
    ) -> Result<TransferIds, Error> {
        if count == 0 {
            return Err(Error::input(format!(
                "{file}: the schedule has no transfers"
            )));
        }
        let identity = ids.clone().enumerate().all(|(i, id)| id == i as u64);
        let mut index_of = None;
        if !identity {
            let map = index_of.insert(HashMap::with_capacity(count));
            for (i, id) in ids.enumerate() {
                if map.insert(id, i as TransferIndex).is_some() {
                    return Err(Error::input(format!(
                        "{file}: transfer id {id} appears twice"
                    )));
                }
            }
        }
        Ok(TransferIds {
            count: count as u64,
            index_of,
        })
    }

    fn index(&self, id: u64) -> Option<TransferIndex> {
        match &self.index_of {
            None => (id < self.count).then_some(id as TransferIndex),
            Some(map) => map.get(&id).copied(),
        }
    }
}

/// Builds a schedule from a file's rows in order, resolving dependency ids: one place for what
/// every format's rows must satisfy.
pub(super) struct Assembler<'a> {
    file: &'a str,
    ids: TransferIds,
    schedule: Schedule,
    deps: Vec<TransferIndex>,
}

impl<'a> Assembler<'a> {
    pub fn new(file: &'a str, ids: TransferIds, rows: usize) -> Assembler<'a> {
        Assembler {
            file,
            ids,
            schedule: Schedule::with_capacity(rows),
            deps: Vec::new(),
        }
    }

    /// Appends the next row.
    #[allow(clippy::too_many_arguments)]
    pub fn row(
        &mut self,
        id: u64,
        transfer: Transfer,
        deps: impl Iterator<Item = u64>,
        pieces: Option<(u32, u32)>,
        op: Op,
        route: &[u32],
        wait: Option<Time>,
    ) -> Result<(), Error> {
        self.deps.clear();
        for d in deps {
            let index = self.ids.index(d).ok_or_else(|| {
                Error::input(format!(
                    "{}: transfer {id} depends on unknown transfer id {d}",
                    self.file
                ))
            })?;
            self.deps.push(index);
        }
        let schedule = &mut self.schedule;
        let index = match wait {
            Some(duration) => {
                if transfer.src != transfer.dst || transfer.bytes != 0 {
                    return Err(Error::input(format!(
                        "{}: transfer {id}: a wait must have src = dst and 0 bytes",
                        self.file
                    )));
                }
                schedule.push_wait(transfer.src, duration, &self.deps)
            }
            None => schedule.push(transfer, &self.deps),
        };
        schedule.set_id(index, id);
        if let Some(p) = pieces {
            schedule.set_pieces(index, p);
        }
        schedule.set_op(index, op);
        if !route.is_empty() {
            schedule.set_route(index, route);
        }
        Ok(())
    }

    pub fn finish(self) -> Schedule {
        self.schedule
    }
}
