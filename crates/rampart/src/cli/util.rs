//! Small helpers shared by subcommands (the benchmarks' own output helpers).

pub use rampart_bench::out::si;

/// Print a value as one line of JSON on stdout.
pub fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    Ok(rampart_bench::out::print_json(v)?)
}
