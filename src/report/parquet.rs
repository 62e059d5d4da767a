//! `transfers.parquet`: the per-transfer table of large runs as Parquet (zstd-compressed), which
//! pandas, polars and duckdb read directly, with the columns of `transfers.csv`. A million-row
//! CSV is tens of megabytes of decimal text that every reader parses again; Parquet stores the
//! integer columns delta-friendly and compressed, and readers load them typed.

use std::path::Path;

use rayon::prelude::*;

use crate::schedule::{
    schedule_column, Column, EncodedColumn, ParquetFile, Schedule, TransferIndex, ROW_GROUP,
};
use crate::sim::SimResult;
use crate::units::Time;
use crate::Error;

const SCHEMA: &str = "message transfers {
    REQUIRED INT64 id (INTEGER(64, false));
    REQUIRED INT32 src (INTEGER(32, false));
    REQUIRED INT32 dst (INTEGER(32, false));
    REQUIRED INT64 bytes (INTEGER(64, false));
    REQUIRED DOUBLE start_ns;
    REQUIRED DOUBLE end_ns;
}";

/// Writes `transfers.parquet` (`id,src,dst,bytes,start_ns,end_ns`, as `transfers.csv`).
pub fn write_transfers_parquet(
    schedule: &Schedule,
    result: &SimResult,
    path: &Path,
) -> Result<(), Error> {
    TransfersBegun::new(schedule, path, true)?.finish(schedule, result)
}

/// `transfers.parquet` with the columns that come from the schedule alone (id, src, dst, bytes)
/// encoded, before the simulation has the times: begun beside the simulation, which has one
/// core, and finished after it. Those four columns were two thirds of the writing (a
/// 67M-transfer all-to-all: ~4 s on two cores after a simulation of ~6 s); encoded they are a
/// few bytes a row or less, so they are held until the times come.
pub struct TransfersBegun {
    file: TransfersFile,
    /// Per row group, its leading columns encoded.
    leading: Vec<Vec<EncodedColumn>>,
}

impl TransfersBegun {
    /// Opens the file at `path` and encodes `schedule`'s leading columns, on all cores when
    /// `parallel`, else on the calling thread (beside the simulation).
    pub fn new(schedule: &Schedule, path: &Path, parallel: bool) -> Result<TransfersBegun, Error> {
        let file = TransfersFile::create(path)?;
        let leading = (0..schedule.len())
            .step_by(ROW_GROUP)
            .map(|start| {
                let rows = row_group(schedule, start);
                let column = |k| schedule_column(schedule, None, rows.clone(), k);
                let columns = match parallel {
                    true => (0..LEADING_TRANSFER_COLUMNS)
                        .into_par_iter()
                        .map(column)
                        .collect(),
                    false => (0..LEADING_TRANSFER_COLUMNS).map(column).collect(),
                };
                file.0.encode(columns, 0, parallel)
            })
            .collect::<Result<_, _>>()?;
        Ok(TransfersBegun { file, leading })
    }

    /// Adds when each transfer was issued and completed in `result`, the simulation of the
    /// `schedule` begun, and writes the footer.
    pub fn finish(mut self, schedule: &Schedule, result: &SimResult) -> Result<(), Error> {
        for (start, leading) in (0..schedule.len()).step_by(ROW_GROUP).zip(self.leading) {
            let rows = row_group(schedule, start);
            let issued: Vec<Time> = rows
                .clone()
                .into_par_iter()
                .map(|t| result.issued(schedule, t))
                .collect();
            let completed = &result.completed[start..start + issued.len()];
            self.file.write_encoded(leading, &issued, completed, true)?;
        }
        self.file.close()
    }
}

/// The transfers of the row group that begins at `start`.
fn row_group(schedule: &Schedule, start: usize) -> std::ops::Range<TransferIndex> {
    start as TransferIndex..(start + ROW_GROUP).min(schedule.len()) as TransferIndex
}

/// Columns `transfers.parquet` shares with `schedule.parquet`, which come first in both: id,
/// src, dst, bytes.
pub const LEADING_TRANSFER_COLUMNS: usize = 4;

/// `transfers.parquet` written a row group at a time, where the transfers are simulated as
/// they are made and never held (see `synth::InOrderRun`).
pub struct TransfersFile(ParquetFile);

impl TransfersFile {
    pub fn create(path: &Path) -> Result<TransfersFile, Error> {
        ParquetFile::create(path, SCHEMA, None).map(TransfersFile)
    }

    /// Appends rows: their [`LEADING_TRANSFER_COLUMNS`] columns encoded already (as
    /// `schedule.parquet` encoded them, where both are written: the same columns, encoded once),
    /// and when each was issued and completed, encoded on all cores when `parallel`.
    pub(crate) fn write_encoded(
        &mut self,
        mut leading: Vec<EncodedColumn>,
        issued: &[Time],
        completed: &[Time],
        parallel: bool,
    ) -> Result<(), Error> {
        let ns =
            |times: &[Time]| Column::Double(times.iter().map(|t| t.ps() as f64 / 1e3).collect());
        let times = vec![ns(issued), ns(completed)];
        leading.extend(self.0.encode(times, LEADING_TRANSFER_COLUMNS, parallel)?);
        self.0.append_row_group(leading)
    }

    /// Writes the footer.
    pub fn close(self) -> Result<(), Error> {
        self.0.close()
    }
}
