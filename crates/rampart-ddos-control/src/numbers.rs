//! Numbers of detection: the nearest-rank quantile of per-source levels,
//! and the formatting of rates in block reasons.

/// `x` with `decimals` decimals (`format!("{x:.N}")` for finite x), by
/// integer rounding: the float formatter's exact path (bignum) was ~20% of
/// an interval that blocks 150,000 sources, each with a reason.
pub(crate) fn fixed(x: f64, decimals: u32) -> String {
    if x.is_finite() {
        fixed_scaled(x, 1.0, decimals, "")
    } else {
        format!("{x}")
    }
}

fn fixed_scaled(x: f64, scale: f64, decimals: u32, suffix: &str) -> String {
    let m = 10i64.pow(decimals);
    let v = (x.abs() / scale * m as f64).round() as i64;
    let sign = if x < 0.0 && v != 0 { "-" } else { "" };
    if decimals == 0 {
        format!("{sign}{v}{suffix}")
    } else {
        format!(
            "{sign}{}.{:0w$}{suffix}",
            v / m,
            v % m,
            w = decimals as usize
        )
    }
}

/// A rate with a unit prefix, for reasons: `12.3k`, `4.56M`.
pub(crate) fn si(x: f64) -> String {
    let fixed = fixed_scaled;
    let a = x.abs();
    if !x.is_finite() {
        format!("{x}")
    } else if a >= 1e9 {
        fixed(x, 1e9, 3, "G")
    } else if a >= 1e6 {
        fixed(x, 1e6, 3, "M")
    } else if a >= 1e4 {
        fixed(x, 1e3, 1, "k")
    } else if a >= 100.0 {
        fixed(x, 1.0, 0, "")
    } else {
        fixed(x, 1.0, 2, "")
    }
}

/// The `q` quantile (0 < q <= 1, nearest rank) of `v`; 0 when empty.
/// Reorders `v`.
pub(crate) fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable_by(rank, f64::total_cmp);
    *x
}

#[cfg(test)]
mod tests {
    use super::{quantile, si};

    #[test]
    fn si_matches_fixed_point_formatting() {
        for (x, want) in [
            (0.0, "0.00"),
            (1.006, "1.01"),
            (99.994, "99.99"),
            (100.4, "100"),
            (9999.5, "10000"),
            (12_345.0, "12.3k"),
            (999_949.0, "999.9k"),
            (1_234_567.0, "1.235M"),
            (2.5e9, "2.500G"),
            (-1500.0, "-1500"),
            (-0.001, "0.00"),
        ] {
            assert_eq!(si(x), want, "{x}");
        }
        assert_eq!(si(f64::NAN), "NaN");
        assert_eq!(super::fixed(12.345, 1), "12.3");
        assert_eq!(super::fixed(0.0004, 3), "0.000");
        assert_eq!(super::fixed(99.96, 0), "100");
    }

    #[test]
    fn quantile_is_the_nearest_rank() {
        let mut v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(quantile(&mut v, 0.5), 3.0);
        assert_eq!(quantile(&mut v, 0.9), 5.0);
        assert_eq!(quantile(&mut v, 1.0), 5.0);
        assert_eq!(quantile(&mut v, 0.01), 1.0);
        assert_eq!(quantile(&mut [], 0.5), 0.0);
    }
}
