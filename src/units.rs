//! Typed physical units: byte counts, picosecond time and link bandwidth.
//!
//! Bandwidth and time are newtypes so that a GB/GiB or ns/us mix-up cannot compile silently; every
//! conversion names its unit. Parsing follows DESIGN.md "Units": `1KB` is 1e3 bytes, `1KiB` is 1024.

use std::fmt;

/// Simulated time, an integer count of picoseconds. Sums saturate at [`Time::MAX`] (about 213
/// days) instead of wrapping: whatever reports a time checks [`Time::fits`] and refuses the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

// SAFETY: all-zero bytes are a u64 of 0, time zero: per-transfer times start as fresh zeroed
// memory ([`crate::memory::zeroed_prefaulted`]) instead of being written zero one by one.
unsafe impl bytemuck::Zeroable for Time {}

impl Time {
    pub const ZERO: Time = Time(0);
    /// The largest time collsim represents; a sum that reaches it has overflowed.
    pub const MAX: Time = Time(u64::MAX);

    /// False for a time that reached [`Time::MAX`]: the run left the representable range.
    pub fn fits(self) -> bool {
        self < Time::MAX
    }

    pub fn from_ps(ps: u64) -> Time {
        Time(ps)
    }

    /// Whole nanoseconds (exact).
    pub fn from_ns(ns: u64) -> Time {
        Time(ns * 1_000)
    }

    pub fn ps(self) -> u64 {
        self.0
    }

    /// Nanoseconds as a float (for reports and bandwidth arithmetic).
    pub fn as_ns_f64(self) -> f64 {
        self.0 as f64 / 1e3
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e12
    }

    /// Nanoseconds with up to three decimals, trailing zeros trimmed (DESIGN.md "Outputs").
    pub fn ns_string(self) -> String {
        let whole = self.0 / 1_000;
        let frac = self.0 % 1_000;
        if frac == 0 {
            whole.to_string()
        } else {
            let s = format!("{whole}.{frac:03}");
            s.trim_end_matches('0').to_string()
        }
    }
}

impl std::ops::Add for Time {
    type Output = Time;
    fn add(self, rhs: Time) -> Time {
        Time(self.0.saturating_add(rhs.0))
    }
}

impl std::ops::Sub for Time {
    type Output = Time;
    fn sub(self, rhs: Time) -> Time {
        Time(self.0 - rhs.0)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ps = self.0 as f64;
        if ps >= 1e12 {
            write!(f, "{:.3} s", ps / 1e12)
        } else if ps >= 1e9 {
            write!(f, "{:.3} ms", ps / 1e9)
        } else if ps >= 1e6 {
            write!(f, "{:.3} us", ps / 1e6)
        } else {
            write!(f, "{:.3} ns", ps / 1e3)
        }
    }
}

/// Bandwidth of one direction of a link, stored in bytes per second.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Bandwidth(f64);

impl Bandwidth {
    /// Bytes per second; must be finite and positive (checked by the parsers and builders).
    pub fn bytes_per_sec(bps: f64) -> Bandwidth {
        Bandwidth(bps)
    }

    /// Decimal gigabytes per second (1e9 B/s).
    pub fn gb_per_sec(gbps: f64) -> Bandwidth {
        Bandwidth(gbps * 1e9)
    }

    /// Binary gigabytes per second (2^30 B/s), the unit ASTRA-sim and TACOS mean by "GB/s".
    pub fn gib_per_sec(gibps: f64) -> Bandwidth {
        Bandwidth(gibps * (1u64 << 30) as f64)
    }

    pub fn as_bytes_per_sec(self) -> f64 {
        self.0
    }

    pub fn as_gib_per_sec(self) -> f64 {
        self.0 / (1u64 << 30) as f64
    }

    /// Bytes per nanosecond, computed as ASTRA-sim does (`GiB/s * 2^30 / 1e9`).
    pub fn bytes_per_ns(self) -> f64 {
        self.0 / 1e9
    }

    /// Time to push `bytes` through this bandwidth, rounded to the nearest picosecond (halves up);
    /// [`Time::MAX`] when it does not fit.
    pub fn transmit_time(self, bytes: u64) -> Time {
        let ps = bytes as f64 * 1e12 / self.0;
        // For 0 <= ps < 2^52, ps + 0.5 is exact, so truncating it rounds half up exactly like
        // `f64::round`, without the libm call that showed in the engine's profile. Above 2^64 the
        // cast saturates at Time::MAX.
        if ps < (1u64 << 52) as f64 {
            Time((ps + 0.5) as u64)
        } else {
            Time(ps.round() as u64)
        }
    }

    /// Split this bandwidth `ways` ways (for links shared by several logical channels).
    pub fn divided(self, ways: u32) -> Bandwidth {
        Bandwidth(self.0 / ways as f64)
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gib = self.as_gib_per_sec();
        if (gib - gib.round()).abs() < 1e-9 {
            write!(f, "{}GiB/s", gib.round())
        } else {
            write!(f, "{}GB/s", self.0 / 1e9)
        }
    }
}

/// Errors from parsing a quantity; the caller adds which field it came from.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("cannot read {kind} '{text}': {why}")]
pub struct UnitError {
    kind: &'static str,
    text: String,
    why: String,
}

fn unit_error(kind: &'static str, text: &str, why: impl Into<String>) -> UnitError {
    UnitError {
        kind,
        text: text.to_string(),
        why: why.into(),
    }
}

/// The largest bandwidth collsim takes (1 EB/s): beyond it transmission times round to nothing.
pub const MAX_BANDWIDTH_BPS: f64 = 1e18;
/// The smallest bandwidth collsim takes (1 B/s).
pub const MIN_BANDWIDTH_BPS: f64 = 1.0;

/// Splits `"12.5GiB/s"` into the number's text and the unit, `("12.5", "GiB/s")`.
fn split_digits(text: &str) -> (&str, &str) {
    let t = text.trim();
    let end = t
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || c == '.'
                || c == '_'
                || ((c == 'e' || c == 'E')
                    && t[i + 1..].starts_with(|d: char| d.is_ascii_digit() || d == '-'))
                || ((c == '-' || c == '+') && (i == 0 || t[..i].ends_with(['e', 'E']))))
        })
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    (&t[..end], t[end..].trim())
}

/// Splits `"12.5GiB/s"` into `(12.5, "GiB/s")`.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let (digits, unit) = split_digits(text);
    let number: f64 = digits.replace('_', "").parse().ok()?;
    Some((number, unit))
}

/// Parses a size as nccl-tests takes and prints it: a single-letter suffix `K`, `M`, `G`, `T`
/// multiplies by a power of 1024 (`-b 8K`, `-e 8G`); otherwise [`parse_bytes`] (`1KiB`, `1GB`).
pub fn parse_nccl_bytes(text: &str) -> Result<u64, UnitError> {
    let t = text.trim();
    if let Some((i, c)) = t.char_indices().last() {
        if let Some(power) = "KMGT".find(c.to_ascii_uppercase()) {
            let digits = &t[..i];
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                let too_large = || unit_error("size", text, "is too large");
                let value: u64 = digits.parse().map_err(|_| too_large())?;
                return value
                    .checked_mul(1 << (10 * (power + 1)))
                    .ok_or_else(too_large);
            }
        }
    }
    parse_bytes(t)
}

/// Parses a byte count: `4096`, `1KB` (1e3), `1KiB` (1024), `MB`/`MiB`, `GB`/`GiB`, `TB`/`TiB`.
/// Whole numbers are read exactly (every `u64` byte count); a count past `u64` is refused.
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    // Plain byte counts (every row of a schedule file) skip the unit parsing.
    if !text.is_empty() && text.len() < 20 && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map_err(|_| unit_error("size", text, "expected e.g. 4096, 1KiB, 1GB"));
    }
    let (digits, unit) = split_digits(text);
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KB" | "kB" => 1_000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        "TB" => 1_000_000_000_000,
        "TiB" => 1 << 40,
        "PB" => 1_000_000_000_000_000,
        "PiB" => 1 << 50,
        "EB" => 1_000_000_000_000_000_000,
        "EiB" => 1 << 60,
        _ => return Err(unit_error("size", text, format!("unknown unit '{unit}'"))),
    };
    let too_large = || {
        unit_error(
            "size",
            text,
            format!("is too large: at most {} B (16 EiB - 1 B)", u64::MAX),
        )
    };
    let plain = digits.replace('_', "");
    if !plain.is_empty() && plain.bytes().all(|b| b.is_ascii_digit()) {
        let whole: u128 = plain.parse().map_err(|_| too_large())?;
        return u64::try_from(whole * scale as u128).map_err(|_| too_large());
    }
    let (number, _) = split_number(text)
        .ok_or_else(|| unit_error("size", text, "expected e.g. 4096, 1KiB, 1GB"))?;
    let bytes = number * scale as f64;
    if bytes.is_nan() || bytes < 0.0 {
        return Err(unit_error(
            "size",
            text,
            "must be a non-negative number of bytes",
        ));
    }
    if bytes >= u64::MAX as f64 {
        return Err(too_large());
    }
    if (bytes - bytes.round()).abs() > 1e-6 * bytes.max(1.0) {
        return Err(unit_error("size", text, "is not a whole number of bytes"));
    }
    Ok(bytes.round() as u64)
}

/// Parses a duration into picoseconds: `500ns`, `0.5us`, `2ms`, `1s`, `250ps`. The unit is required.
pub fn parse_time(text: &str) -> Result<Time, UnitError> {
    let (number, unit) =
        split_number(text).ok_or_else(|| unit_error("time", text, "expected e.g. 500ns, 0.5us"))?;
    let ps_per_unit = match unit {
        "ps" => 1.0,
        "ns" => 1e3,
        "us" | "µs" => 1e6,
        "ms" => 1e9,
        "s" => 1e12,
        "" => {
            return Err(unit_error(
                "time",
                text,
                "needs a unit: ps, ns, us, ms or s",
            ))
        }
        _ => return Err(unit_error("time", text, format!("unknown unit '{unit}'"))),
    };
    let ps = number * ps_per_unit;
    if ps.is_nan() || ps < 0.0 {
        return Err(unit_error("time", text, "must be a non-negative duration"));
    }
    if ps >= u64::MAX as f64 {
        return Err(unit_error(
            "time",
            text,
            "is too large: at most 18446744 s (about 213 days, 2^64 ps)",
        ));
    }
    if ps > 0.0 && ps.round() == 0.0 {
        return Err(unit_error(
            "time",
            text,
            "rounds to 0 at collsim's resolution of 1 ps: give 0 or at least 0.5ps",
        ));
    }
    Ok(Time(ps.round() as u64))
}

/// Parses a bandwidth: `50GB/s` (1e9 B/s), `50GiB/s` (2^30 B/s), `400Gbps` (bits), `MB/s`, `TB/s`.
/// The unit is required: a bare number is exactly the GB-or-GiB ambiguity this type exists to prevent.
pub fn parse_bandwidth(text: &str) -> Result<Bandwidth, UnitError> {
    let (number, unit) = split_number(text)
        .ok_or_else(|| unit_error("bandwidth", text, "expected e.g. 50GB/s, 50GiB/s, 400Gbps"))?;
    let bytes_per_sec_per_unit = match unit {
        "GB/s" | "GBps" => 1e9,
        "GiB/s" => (1u64 << 30) as f64,
        "MB/s" => 1e6,
        "MiB/s" => (1u64 << 20) as f64,
        "TB/s" => 1e12,
        "TiB/s" => (1u64 << 40) as f64,
        "B/s" => 1.0,
        "Gbps" | "Gb/s" => 1e9 / 8.0,
        "Mbps" | "Mb/s" => 1e6 / 8.0,
        "Tbps" | "Tb/s" => 1e12 / 8.0,
        "" => {
            return Err(unit_error(
                "bandwidth",
                text,
                "needs a unit, e.g. GB/s, GiB/s or Gbps",
            ))
        }
        _ => {
            return Err(unit_error(
                "bandwidth",
                text,
                format!("unknown unit '{unit}'"),
            ))
        }
    };
    let bps = number * bytes_per_sec_per_unit;
    if bps.is_nan() || bps <= 0.0 {
        return Err(unit_error("bandwidth", text, "must be positive"));
    }
    if bps > MAX_BANDWIDTH_BPS {
        return Err(unit_error(
            "bandwidth",
            text,
            "is too large: at most 1e18 B/s (1 EB/s)",
        ));
    }
    if bps < MIN_BANDWIDTH_BPS {
        return Err(unit_error(
            "bandwidth",
            text,
            "is too small: at least 1 B/s",
        ));
    }
    Ok(Bandwidth(bps))
}

/// Human-readable byte count with binary prefixes where exact, decimal otherwise.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (scale, name) in UNITS {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{}{name}", bytes / scale);
        }
    }
    const DEC: [(u64, &str); 4] = [
        (1_000_000_000_000, "TB"),
        (1_000_000_000, "GB"),
        (1_000_000, "MB"),
        (1_000, "KB"),
    ];
    for (scale, name) in DEC {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{}{name}", bytes / scale);
        }
    }
    format!("{bytes}B")
}

/// One byte unit for every label of an axis or colour bar, so ticks never mix `GB` and `GiB`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ByteUnit {
    pub bytes: f64,
    pub name: &'static str,
}

impl ByteUnit {
    /// The largest unit not above `max`, binary (KiB, MiB, ...) when `max` is a whole number of
    /// KiB (data sized in binary units), decimal (KB, MB, ...) otherwise.
    pub fn for_max(max: f64) -> ByteUnit {
        const BINARY: [(f64, &str); 4] = [
            (1099511627776.0, "TiB"),
            (1073741824.0, "GiB"),
            (1048576.0, "MiB"),
            (1024.0, "KiB"),
        ];
        const DECIMAL: [(f64, &str); 4] = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")];
        let whole = max.round();
        let binary = whole >= 1024.0 && (max - whole).abs() < 1e-6 && whole % 1024.0 == 0.0;
        let family = if binary { BINARY } else { DECIMAL };
        family.iter().find(|(bytes, _)| max >= *bytes).map_or(
            ByteUnit {
                bytes: 1.0,
                name: "B",
            },
            |&(bytes, name)| ByteUnit { bytes, name },
        )
    }

    /// `bytes` in this unit, three significant digits at most (`2.5GiB`, `254GiB`, `0GiB`).
    pub fn format(&self, bytes: f64) -> String {
        format!("{}{}", significant(bytes / self.bytes, 3), self.name)
    }
}

/// `value` rounded to `digits` significant digits, without trailing zeros.
pub fn significant(value: f64, digits: i32) -> String {
    if value == 0.0 || !value.is_finite() {
        return "0".to_string();
    }
    let magnitude = value.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// Round tick values from 0 up to at most `max`: steps of 1, 2, 2.5 or 5 times a power of ten,
/// four to eight of them.
pub fn nice_ticks(max: f64) -> Vec<f64> {
    if max <= 0.0 || !max.is_finite() {
        return vec![0.0];
    }
    let raw = max / 6.0;
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * power);
    let count = (max / step * (1.0 + 1e-9)).floor() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

/// Byte count for axis labels: exact where a unit divides it (`10KB`, `4MiB`), else three
/// significant digits with binary prefixes (`1.88GiB`).
pub fn format_bytes_approx(bytes: f64) -> String {
    let whole = bytes.round();
    if (bytes - whole).abs() < 1e-6 && whole >= 1.0 {
        let exact = format_bytes(whole as u64);
        if exact.len() <= 6 {
            return exact;
        }
    }
    const UNITS: [(f64, &str); 5] = [
        (1099511627776.0, "TiB"),
        (1073741824.0, "GiB"),
        (1048576.0, "MiB"),
        (1024.0, "KiB"),
        (1.0, "B"),
    ];
    for (scale, name) in UNITS {
        if bytes >= scale {
            let v = bytes / scale;
            let digits = if v >= 100.0 {
                0
            } else if v >= 10.0 {
                1
            } else {
                2
            };
            let text = format!("{v:.digits$}");
            let text = if text.contains('.') {
                text.trim_end_matches('0').trim_end_matches('.').to_string()
            } else {
                text
            };
            return format!("{text}{name}");
        }
    }
    "0B".to_string()
}

/// Parses a comma-separated list item by item; errors name `flag` (the flag or field).
pub fn parse_list<T, E: fmt::Display>(
    flag: &str,
    text: &str,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<Vec<T>, crate::Error> {
    text.split(',')
        .map(|item| parse(item.trim()).map_err(|e| crate::Error::input(format!("{flag}: {e}"))))
        .collect()
}

/// Parses a list of sizes: `1KB,64KB,1GB`, or a geometric range `1KiB..1GiB` (doubling) or
/// `1KB..1GB:x10` (a factor per step).
pub fn parse_size_list(text: &str) -> Result<Vec<u64>, UnitError> {
    if let Some((lo, rest)) = text.split_once("..") {
        let (hi, factor) = match rest.split_once(":x") {
            Some((hi, f)) => (
                hi,
                f.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|&f| f >= 2)
                    .ok_or_else(|| unit_error("size range", text, "the step ':xF' needs F >= 2"))?,
            ),
            None => (rest, 2),
        };
        let (lo, hi) = (parse_bytes(lo.trim())?, parse_bytes(hi.trim())?);
        if lo == 0 || hi < lo {
            return Err(unit_error(
                "size range",
                text,
                "expected LOW..HIGH with 0 < LOW <= HIGH",
            ));
        }
        let mut sizes = Vec::new();
        let mut s = lo;
        while s <= hi {
            sizes.push(s);
            s = match s.checked_mul(factor) {
                Some(next) => next,
                None => break,
            };
        }
        return Ok(sizes);
    }
    text.split(',').map(|s| parse_bytes(s.trim())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_units_come_from_one_family() {
        assert_eq!(ByteUnit::for_max(254.0 * 1073741824.0).name, "GiB");
        assert_eq!(ByteUnit::for_max(1.96875e9).name, "GB");
        assert_eq!(ByteUnit::for_max(512.0).name, "B");
        let unit = ByteUnit::for_max(4.0 * 1073741824.0);
        assert_eq!(unit.format(2.5 * 1073741824.0), "2.5GiB");
        assert_eq!(ByteUnit::for_max(2.5e9).format(1.25e9), "1.25GB");
        assert_eq!(significant(253.96, 3), "254");
        assert_eq!(significant(0.01234, 3), "0.0123");
    }

    #[test]
    fn ticks_are_round_and_stay_within_the_maximum() {
        assert_eq!(
            nice_ticks(254.0),
            vec![0.0, 50.0, 100.0, 150.0, 200.0, 250.0]
        );
        assert_eq!(
            nice_ticks(1.0),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        assert_eq!(nice_ticks(12.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        for max in [0.37, 3.0, 7.9, 64.0, 999.0, 1.5e9] {
            let ticks = nice_ticks(max);
            assert!((4..=8).contains(&ticks.len()), "{max}: {ticks:?}");
            assert!(*ticks.last().unwrap() <= max * (1.0 + 1e-9));
        }
    }

    #[test]
    fn size_lists_and_ranges() {
        assert_eq!(parse_size_list("1KB, 2KiB").unwrap(), vec![1000, 2048]);
        assert_eq!(
            parse_size_list("1KiB..8KiB").unwrap(),
            vec![1024, 2048, 4096, 8192]
        );
        assert_eq!(
            parse_size_list("1KB..1MB:x10").unwrap(),
            vec![1000, 10_000, 100_000, 1_000_000]
        );
        assert!(parse_size_list("1MB..1KB").is_err());
        assert!(parse_size_list("1KB..1MB:x1").is_err());
        assert_eq!(format_bytes_approx(2013265920.0), "1.88GiB");
        assert_eq!(format_bytes_approx(10_000.0), "10KB");
        assert_eq!(format_bytes_approx(1024.0), "1KiB");
        assert_eq!(format_bytes_approx(0.0), "0B");
    }

    #[test]
    fn bytes_distinguish_decimal_and_binary_prefixes() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("1KB").unwrap(), 1000);
        assert_eq!(parse_bytes("1KiB").unwrap(), 1024);
        assert_eq!(parse_bytes("2MB").unwrap(), 2_000_000);
        assert_eq!(parse_bytes("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_bytes("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("0.5GiB").unwrap(), 1 << 29);
        assert!(parse_bytes("1.5").is_err());
        assert!(parse_bytes("-3").is_err());
        assert!(parse_bytes("1XB").is_err());
        assert!(parse_bytes("").is_err());
    }

    #[test]
    fn times_parse_to_picoseconds() {
        assert_eq!(parse_time("500ns").unwrap(), Time(500_000));
        assert_eq!(parse_time("0.5us").unwrap(), Time(500_000));
        assert_eq!(parse_time("2ms").unwrap(), Time(2_000_000_000));
        assert_eq!(parse_time("1s").unwrap(), Time(1_000_000_000_000));
        assert!(parse_time("30").is_err());
        assert!(parse_time("-1ns").is_err());
        assert!(parse_time("1h").is_err());
    }

    #[test]
    fn bandwidth_units_differ_as_documented() {
        assert_eq!(parse_bandwidth("50GB/s").unwrap().as_bytes_per_sec(), 50e9);
        assert_eq!(
            parse_bandwidth("50GiB/s").unwrap().as_bytes_per_sec(),
            50.0 * 1073741824.0
        );
        assert_eq!(parse_bandwidth("400Gbps").unwrap().as_bytes_per_sec(), 50e9);
        assert!(parse_bandwidth("0GB/s").is_err());
        assert!(parse_bandwidth("-5GB/s").is_err());
        assert!(parse_bandwidth("5 furlongs").is_err());
        assert!(parse_bandwidth("50").is_err());
    }

    #[test]
    fn transmit_time_rounds_to_nearest_picosecond() {
        let bw = Bandwidth::gib_per_sec(50.0);
        // 1 GiB / 8 at 50 GiB/s is exactly 2.5 ms.
        assert_eq!(bw.transmit_time(1 << 27), Time(2_500_000_000));
        // 1 byte at 3 B/ns: 333.33 ps rounds to 333 ps.
        assert_eq!(Bandwidth::gb_per_sec(3.0).transmit_time(1), Time(333));
    }

    #[test]
    fn astra_bytes_per_ns_matches_their_conversion() {
        // ASTRA-sim: bw * (1 << 30) / 1e9 in double precision.
        let theirs = 50.0 * (1u64 << 30) as f64 / 1e9;
        assert_eq!(Bandwidth::gib_per_sec(50.0).bytes_per_ns(), theirs);
    }

    #[test]
    fn ns_strings_trim_trailing_zeros() {
        assert_eq!(Time(1_500).ns_string(), "1.5");
        assert_eq!(Time(2_000).ns_string(), "2");
        assert_eq!(Time(2_001).ns_string(), "2.001");
    }
}
