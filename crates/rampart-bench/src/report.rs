//! Benchmark output shared by every `rampart bench ...`: the machine a run
//! happened on, CSV data, and PNG plots (plotters) that carry a title,
//! axis labels with units, and the machine in their caption.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::error::{Error, Result};

/// Font file used for plot text (Debian: fonts-dejavu-core).
pub const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Where and when a benchmark ran.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model name.
    pub cpu: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Memory in GiB.
    pub mem_gib: u64,
    /// Hypervisor hint, if any (from /sys/class/dmi or cpuinfo flags).
    pub virtualized: bool,
    /// UTC date and time of the run (RFC 3339).
    pub date: String,
}

impl Machine {
    /// Read the machine's description from /proc and uname.
    pub fn collect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split(':').nth(1))
            })
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let virtualized = cpuinfo
            .lines()
            .any(|l| l.starts_with("flags") && l.contains(" hypervisor"));
        let mem_kb: u64 = std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        Self {
            cpu,
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            kernel,
            mem_gib: (mem_kb + (1 << 19)) >> 20,
            virtualized,
            date: now_rfc3339(),
        }
    }

    /// One-line caption for plots.
    pub fn caption(&self) -> String {
        format!(
            "{} vCPU {}{}, {} GiB, Linux {}, {}",
            self.cpus,
            self.cpu,
            if self.virtualized { " (VM)" } else { "" },
            self.mem_gib,
            self.kernel,
            &self.date[..10.min(self.date.len())]
        )
    }
}

/// Current UTC time as RFC 3339, without a date crate.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Write rows as CSV (values are numbers or simple identifiers; quoted when they contain a comma).
///
/// # Errors
/// File write failure.
pub fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let q = |v: &str| {
        if v.contains(',') || v.contains('"') {
            format!("\"{}\"", v.replace('"', "\"\""))
        } else {
            v.to_string()
        }
    };
    let mut out = header.iter().map(|h| q(h)).collect::<Vec<_>>().join(",");
    out.push('\n');
    for r in rows {
        let _ = writeln!(
            out,
            "{}",
            r.iter().map(|v| q(v)).collect::<Vec<_>>().join(",")
        );
    }
    std::fs::write(path, out).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart.
#[derive(Debug, Clone)]
pub struct LineChart<'a> {
    /// Title (what is measured).
    pub title: &'a str,
    /// X axis label with unit.
    pub x_label: &'a str,
    /// Y axis label with unit.
    pub y_label: &'a str,
    /// Logarithmic x axis (e.g. number of sources).
    pub log_x: bool,
    /// Lines.
    pub series: &'a [Series],
}

fn register_font() -> Result<()> {
    static ONCE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let bytes = std::fs::read(FONT)
            .map_err(|e| format!("{FONT}: {e} (apt-get install fonts-dejavu-core)"))?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{FONT}: not a usable font"))
    })
    .clone()
    .map_err(Error::Failed)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> Error {
    Error::Failed(format!("drawing plot: {e:?}"))
}

/// Draw `chart` to a PNG at `path`, with the machine in the caption.
///
/// # Errors
/// Missing font or a drawing failure.
pub fn line_chart(path: &Path, chart: &LineChart<'_>, machine: &Machine) -> Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(610);
    bottom
        .draw(&Text::new(
            machine.caption(),
            (10, 12),
            ("sans-serif", 14).into_font().color(&BLACK.mix(0.7)),
        ))
        .map_err(plot_err)?;
    let xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let (mut x0, mut x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let y1 = ys.fold(0.0f64, f64::max) * 1.08 + f64::EPSILON;
    if x0 >= x1 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    let colors = [
        &BLUE,
        &RED,
        &GREEN,
        &MAGENTA,
        &CYAN,
        &BLACK,
        &RGBColor(255, 140, 0),
        &RGBColor(128, 0, 128),
        &RGBColor(0, 128, 128),
        &RGBColor(139, 69, 19),
    ];
    macro_rules! draw {
        ($cc:expr) => {{
            let mut cc = $cc;
            cc.configure_mesh()
                .x_desc(chart.x_label)
                .y_desc(chart.y_label)
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 16))
                .draw()
                .map_err(plot_err)?;
            for (i, s) in chart.series.iter().enumerate() {
                let c = colors[i % colors.len()];
                cc.draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                    .map_err(plot_err)?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                cc.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(plot_err)?;
            }
            cc.configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(plot_err)?;
        }};
    }
    let mut b = ChartBuilder::on(&top);
    b.caption(chart.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70);
    if chart.log_x {
        draw!(b
            .build_cartesian_2d((x0.max(1e-9)..x1).log_scale(), 0.0..y1)
            .map_err(plot_err)?);
    } else {
        draw!(b.build_cartesian_2d(x0..x1, 0.0..y1).map_err(plot_err)?);
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

/// A grouped bar chart: one group per category, one bar per series.
#[derive(Debug, Clone)]
pub struct BarChart<'a> {
    /// Title.
    pub title: &'a str,
    /// Y axis label with unit.
    pub y_label: &'a str,
    /// Category names (x axis).
    pub categories: &'a [String],
    /// (series name, one value per category).
    pub series: &'a [(String, Vec<f64>)],
}

/// Draw `chart` to a PNG at `path`.
///
/// # Errors
/// Missing font or a drawing failure.
pub fn bar_chart(path: &Path, chart: &BarChart<'_>, machine: &Machine) -> Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(610);
    bottom
        .draw(&Text::new(
            machine.caption(),
            (10, 12),
            ("sans-serif", 14).into_font().color(&BLACK.mix(0.7)),
        ))
        .map_err(plot_err)?;
    let n_cat = chart.categories.len().max(1);
    let n_ser = chart.series.len().max(1);
    let y1 = chart
        .series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .fold(0.0f64, f64::max)
        * 1.12
        + f64::EPSILON;
    let mut cc = ChartBuilder::on(&top)
        .caption(chart.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n_cat as f64, 0.0..y1)
        .map_err(plot_err)?;
    let cats = chart.categories.to_vec();
    cc.configure_mesh()
        .disable_x_mesh()
        .x_labels(n_cat * 2 + 1)
        .x_label_formatter(&move |x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 1e-6 {
                cats.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(chart.y_label)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(plot_err)?;
    let colors = [
        &BLUE,
        &RED,
        &GREEN,
        &MAGENTA,
        &CYAN,
        &BLACK,
        &RGBColor(255, 140, 0),
        &RGBColor(128, 0, 128),
    ];
    let w = 0.8 / n_ser as f64;
    for (si, (name, vals)) in chart.series.iter().enumerate() {
        let c = colors[si % colors.len()];
        cc.draw_series(vals.iter().enumerate().map(|(ci, &v)| {
            let x0 = ci as f64 + 0.1 + si as f64 * w;
            Rectangle::new([(x0, 0.0), (x0 + w * 0.92, v)], c.filled())
        }))
        .map_err(plot_err)?
        .label(name.clone())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled()));
    }
    cc.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// Median of a sample (None when empty).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_date() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let d = now_rfc3339();
        assert_eq!(d.len(), 20);
        assert!(d.starts_with("20"));
    }

    #[test]
    fn charts_render_to_png() {
        let dir = std::env::temp_dir().join(format!("rampart-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = Machine::collect();
        let s = vec![
            Series {
                name: "a".into(),
                points: vec![(1.0, 2.0), (4.0, 3.0), (16.0, 2.5)],
            },
            Series {
                name: "b".into(),
                points: vec![(1.0, 1.0), (4.0, 1.5), (16.0, 0.5)],
            },
        ];
        let p = dir.join("line.png");
        line_chart(
            &p,
            &LineChart {
                title: "t",
                x_label: "x (sources)",
                y_label: "y (Mpps)",
                log_x: true,
                series: &s,
            },
            &m,
        )
        .unwrap();
        assert!(std::fs::read(&p).unwrap().starts_with(b"\x89PNG"));
        let p = dir.join("bar.png");
        let cats = vec!["one".to_string(), "two".to_string()];
        let ser = vec![
            ("s1".to_string(), vec![1.0, 2.0]),
            ("s2".to_string(), vec![0.5, 3.0]),
        ];
        bar_chart(
            &p,
            &BarChart {
                title: "t",
                y_label: "y (%)",
                categories: &cats,
                series: &ser,
            },
            &m,
        )
        .unwrap();
        assert!(std::fs::read(&p).unwrap().starts_with(b"\x89PNG"));
        let p = dir.join("d.csv");
        write_csv(&p, &["a", "b"], &[vec!["1".into(), "x,y".into()]]).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a,b\n1,\"x,y\"\n");
        if std::env::var_os("KEEP_PLOTS").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
