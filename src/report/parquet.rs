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
    let mut file = TransfersFile::create(path)?;
    for start in (0..schedule.len()).step_by(ROW_GROUP) {
        let rows = start as TransferIndex..(start + ROW_GROUP).min(schedule.len()) as TransferIndex;
        let leading = (0..LEADING_TRANSFER_COLUMNS)
            .into_par_iter()
            .map(|column| schedule_column(schedule, None, rows.clone(), column))
            .collect();
        let range = start..start + (rows.end - rows.start) as usize;
        file.write(
            leading,
            &result.issued[range.clone()],
            &result.completed[range],
            true,
        )?;
    }
    file.close()
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

    /// Appends rows: their [`LEADING_TRANSFER_COLUMNS`] columns as `schedule.parquet` has
    /// them, and when each was issued and completed; encoded on all cores when `parallel`.
    pub(crate) fn write(
        &mut self,
        leading: Vec<Column>,
        issued: &[Time],
        completed: &[Time],
        parallel: bool,
    ) -> Result<(), Error> {
        let leading = self.0.encode(leading, 0, parallel)?;
        self.write_encoded(leading, issued, completed, parallel)
    }

    /// [`TransfersFile::write`] with the leading columns encoded already, as `schedule.parquet`
    /// encoded them (the same columns: encoded once for both files).
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
