//! One engine benchmark configuration (for profiling): full, 1-1-1-1-1, chained, batch 256.
fn main() {
    let chaining = std::env::args().nth(1).is_none_or(|a| a != "nochain");
    let c = rampart_bench::stream::engine::BenchConfig {
        pipeline: rampart_bench::stream::engine::BenchPipeline::Full,
        flows: 65_536,
        parallelism: vec![1, 1, 1, 1, 1],
        batch: 256,
        chaining,
        seconds: 3.0,
        tuple_bytes: 32,
    };
    let r = rampart_bench::stream::engine::run(&c).expect("run");
    println!("{}", serde_json::to_string(&r).unwrap());
}
