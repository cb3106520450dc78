//! Per-source traffic distributions and the generator's source schedule.
//!
//! A distribution gives each of N sources a share of the packets. The
//! generator walks a schedule of S slots (S a power of two, S ≥ N when
//! possible): source i owns round(share_i · S) slots (at least one, so all
//! N sources appear), shuffled with a seeded RNG so consecutive packets
//! come from random sources (what a blacklist lookup sees in a real flood).

use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;

use crate::error::{Error, Result};

/// How packets are spread over sources.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "dist", rename_all = "lowercase")]
pub enum Dist {
    /// Every source sends the same share.
    Uniform,
    /// Shares follow a bell curve over the source index, centred on N/2
    /// with standard deviation `sigma`·N (`sigma` default 0.15): a core of
    /// heavy sources and light tails.
    Gaussian {
        /// Width as a fraction of N.
        sigma: f64,
    },
    /// Share of the k-th source ∝ 1/k^s (`s` default 1.0): a few very heavy
    /// sources and a long tail.
    Zipf {
        /// Exponent.
        s: f64,
    },
}

impl Dist {
    /// Build from a name and optional parameter (CLI `--dist NAME --dist-param X`).
    ///
    /// # Errors
    /// Unknown name or a parameter out of range.
    pub fn parse(name: &str, param: Option<f64>) -> Result<Self> {
        let d = match name {
            "uniform" => {
                if param.is_some() {
                    return Err(Error::InvalidSpec(
                        "--dist-param has no meaning with --dist uniform".into(),
                    ));
                }
                Dist::Uniform
            }
            "gaussian" | "normal" => Dist::Gaussian {
                sigma: param.unwrap_or(0.15),
            },
            "zipf" => Dist::Zipf {
                s: param.unwrap_or(1.0),
            },
            other => {
                return Err(Error::InvalidSpec(format!(
                    "unknown distribution {other:?}: use uniform, gaussian or zipf"
                )))
            }
        };
        match d {
            Dist::Gaussian { sigma } if !(sigma > 0.0 && sigma <= 10.0) => {
                Err(Error::InvalidSpec(format!(
                "gaussian sigma {sigma} out of range: use 0 < sigma ≤ 10 (fraction of --sources)"
            )))
            }
            Dist::Zipf { s } if !(s > 0.0 && s <= 5.0) => Err(Error::InvalidSpec(format!(
                "zipf exponent {s} out of range: use 0 < s ≤ 5"
            ))),
            d => Ok(d),
        }
    }

    /// Normalised share of each of `n` sources (sums to 1).
    pub fn shares(&self, n: u32) -> Vec<f64> {
        let n_f = f64::from(n);
        let w: Vec<f64> = (0..n)
            .map(|i| match *self {
                Dist::Uniform => 1.0,
                Dist::Gaussian { sigma } => {
                    let z = (f64::from(i) + 0.5 - n_f / 2.0) / (sigma * n_f);
                    (-0.5 * z * z).exp()
                }
                Dist::Zipf { s } => 1.0 / (f64::from(i) + 1.0).powf(s),
            })
            .collect();
        let total: f64 = w.iter().sum();
        w.into_iter().map(|x| x / total).collect()
    }
}

/// Number of schedule slots for `n` sources: at least 65,536 and 32·n
/// (so even a Zipf tail source has about one slot of its own), rounded up
/// to a power of two, at most `max`.
pub fn slots_for(n: u32, max: usize) -> usize {
    (32 * n as usize).max(1 << 16).next_power_of_two().min(max)
}

/// Integer slot counts per source, summing to `slots`, every source at
/// least one slot (so all `n` sources are sent). Sources whose exact share
/// is below one slot get exactly one; the rest of the slots are shared by
/// the other sources in proportion to their shares (largest-remainder
/// rounding), so the relative shares of the sources that matter are exact.
///
/// # Errors
/// When `slots < n` (not every source could appear).
pub fn quotas(shares: &[f64], slots: usize) -> Result<Vec<u32>> {
    let n = shares.len();
    if n > slots {
        return Err(Error::InvalidSpec(format!(
            "{n} sources do not fit in {slots} schedule slots"
        )));
    }
    // Water-filling: find the set of sources pinned at one slot.
    let mut pinned = vec![false; n];
    loop {
        let free_slots = (slots - pinned.iter().filter(|&&p| p).count()) as f64;
        let free_share: f64 = shares
            .iter()
            .zip(&pinned)
            .filter(|(_, &p)| !p)
            .map(|(s, _)| s)
            .sum();
        let mut changed = false;
        for i in 0..n {
            if !pinned[i] && shares[i] / free_share * free_slots < 1.0 {
                pinned[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let free_slots = slots - pinned.iter().filter(|&&p| p).count();
    let free_share: f64 = shares
        .iter()
        .zip(&pinned)
        .filter(|(_, &p)| !p)
        .map(|(s, _)| s)
        .sum();
    let exact: Vec<f64> = (0..n)
        .map(|i| {
            if pinned[i] {
                1.0
            } else {
                shares[i] / free_share * free_slots as f64
            }
        })
        .collect();
    let mut q: Vec<u32> = exact.iter().map(|e| e.floor() as u32).collect();
    let left = slots - q.iter().map(|&x| x as usize).sum::<usize>();
    let mut order: Vec<usize> = (0..n).filter(|&i| !pinned[i]).collect();
    order.sort_by(|&a, &b| (exact[b] - f64::from(q[b])).total_cmp(&(exact[a] - f64::from(q[a]))));
    for &i in order.iter().cycle().take(left) {
        q[i] += 1;
    }
    Ok(q)
}

/// The shuffled schedule: `slots` source indices following `dist` over `n`.
///
/// # Errors
/// As [`quotas`].
pub fn schedule(dist: &Dist, n: u32, slots: usize, seed: u64) -> Result<Vec<u32>> {
    let q = quotas(&dist.shares(n), slots)?;
    let mut s = Vec::with_capacity(slots);
    for (i, &c) in q.iter().enumerate() {
        s.extend(std::iter::repeat_n(i as u32, c as usize));
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    s.shuffle(&mut rng);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn uniform_is_exact() {
        let s = schedule(&Dist::Uniform, 1024, 1 << 16, 1).unwrap();
        let mut c = vec![0u32; 1024];
        for i in s {
            c[i as usize] += 1;
        }
        assert!(c.iter().all(|&x| x == 64));
    }

    #[test]
    fn zipf_head_is_heavy_and_tail_present() {
        let n = 131_072;
        let slots = slots_for(n, 1 << 22);
        let q = quotas(&Dist::Zipf { s: 1.0 }.shares(n), slots).unwrap();
        assert!(q.iter().all(|&x| x >= 1));
        // share of source 0 ≈ 1/H_n ≈ 1/12.37
        let share0 = f64::from(q[0]) / slots as f64;
        assert!((share0 - 1.0 / 12.37).abs() < 0.002, "{share0}");
        assert!(q[0] > q[1] && q[1] > q[10]);
    }

    #[test]
    fn gaussian_peaks_in_the_middle() {
        let sh = Dist::Gaussian { sigma: 0.1 }.shares(1000);
        let peak = sh.iter().cloned().fold(0.0, f64::max);
        assert!((sh[499] - peak).abs() < 1e-12 || (sh[500] - peak).abs() < 1e-12);
        assert!(sh[0] < sh[250] && sh[250] < sh[499]);
    }

    #[test]
    fn bad_params_are_refused() {
        assert!(Dist::parse("pareto", None).is_err());
        assert!(Dist::parse("zipf", Some(0.0)).is_err());
        assert!(Dist::parse("gaussian", Some(-1.0)).is_err());
        assert!(Dist::parse("uniform", Some(2.0)).is_err());
    }

    proptest! {
        #[test]
        fn quotas_sum_to_slots_and_cover_all(n in 1u32..5000, s in 0.2f64..3.0, which in 0u8..3) {
            let d = match which { 0 => Dist::Uniform, 1 => Dist::Gaussian { sigma: s / 10.0 }, _ => Dist::Zipf { s } };
            let slots = slots_for(n, 1 << 22);
            let q = quotas(&d.shares(n), slots).unwrap();
            prop_assert_eq!(q.iter().map(|&x| x as usize).sum::<usize>(), slots);
            prop_assert!(q.iter().all(|&x| x >= 1));
        }
    }
}
