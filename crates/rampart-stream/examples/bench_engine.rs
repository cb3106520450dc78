//! Quick engine benchmark driver (the CLI is `rampart bench stream-engine`).
fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    for c in rampart_stream::bench::standard_configs(65_536, 256, secs, 32) {
        let r = rampart_stream::bench::run(&c).expect("run");
        println!("{}", serde_json::to_string(&r).unwrap());
    }
}
