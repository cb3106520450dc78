//! The XDP chain on one interface, by BPF_PROG_RUN of its entry point:
//! the three applications' real stages (ddos filter + features, stream
//! tap, tenant dispatcher) loaded into one lab host's chain, every subset
//! of them installed in turn; each frame's verdict, and which stages saw
//! it (their own counters), follow the installed set.

use std::os::fd::AsRawFd;

use rampart_dataplane::chain::{
    Chain, CHAIN_SLOTS, CHAIN_SLOT_DDOS, CHAIN_SLOT_STREAM, CHAIN_SLOT_TENANT,
};
use rampart_dataplane::xdp::XdpMode;
use rampart_dataplane::{pin, testrun};
use rampart_ddos::filter::{BlockEntry, Filter, FilterConfig, Scope};
use rampart_lab::testing::{unique_prefix, TestLab};
use rampart_lab::topology::HOST_IF;
use rampart_stream::source::tap::{TapConfig, TapSource};
use rampart_tenant::config::{Config as TenantConfig, DefaultAction};
use rampart_tenant::host::HostAgent;
use rampart_testkit::frame::Frame;

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;

/// What each stage has counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    ddos: u64,
    features: u64,
    stream: u64,
    tenant: u64,
}

struct Stages {
    chain: Chain,
    filter: Filter,
    features: rampart_ddos::features::Features,
    tap: TapSource,
    tenant: HostAgent,
    progs: [u32; CHAIN_SLOTS as usize],
}

impl Stages {
    fn seen(&self) -> Seen {
        let f = self.filter.stats().unwrap();
        Seen {
            ddos: f.passed("clean") + f.dropped("blacklist"),
            features: self.features.stats().unwrap().recorded,
            // At ingress only: the tap's egress half also sees whatever
            // the lab host sends meanwhile (IPv6 neighbour discovery).
            stream: {
                let c = self.tap.counters().unwrap();
                c.frames - c.egress
            },
            tenant: self.tenant.stats(0).unwrap().packets,
        }
    }

    /// Install exactly the stages of bit mask `set` (bit = slot).
    fn install(&self, set: u32) {
        for slot in 0..CHAIN_SLOTS {
            if set & (1 << slot) != 0 {
                let fd = rampart_dataplane::xdp::prog_fd(self.progs[slot as usize]).unwrap();
                self.chain.set(slot, fd.as_raw_fd()).unwrap();
            } else {
                self.chain.clear(slot).unwrap();
            }
        }
    }

    fn run(&self, frame: &[u8]) -> u32 {
        let entry = pin::open_pinned(&self.chain.dir().join("entry")).unwrap();
        testrun::run_packet(entry.as_raw_fd(), frame, 0)
            .unwrap()
            .retval
    }
}

fn setup(lab: &TestLab) -> Stages {
    let ns = lab.host_ns();
    let chain = Chain::attach(Some(&ns), HOST_IF, XdpMode::Native).unwrap();
    let scope = Scope::new(Some(&ns), HOST_IF).unwrap();
    let filter = Filter::join(&scope, &FilterConfig::default(), &chain).unwrap();
    let features = rampart_ddos::features::Features::open(&scope.name()).unwrap();
    let tap = TapSource::open(TapConfig {
        netns: Some(ns.clone()),
        iface: HOST_IF.into(),
        chain: Some(chain.clone()),
        ..TapConfig::default()
    })
    .unwrap();
    let mut tcfg = TenantConfig::default();
    tcfg.infra.name = unique_prefix("chain");
    tcfg.infra.netns = Some(ns.clone());
    tcfg.infra.interfaces = vec![HOST_IF.into()];
    tcfg.infra.default_action = DefaultAction::Drop;
    tcfg.infra.chains = vec![chain.clone()];
    tcfg.validate().unwrap();
    let tenant = HostAgent::start(tcfg).unwrap();
    let mut progs = [0; CHAIN_SLOTS as usize];
    for (slot, id) in chain.stages().unwrap() {
        progs[slot as usize] = id;
    }
    assert!(
        progs.iter().all(|&p| p != 0),
        "every stage joined its slot: {progs:?}"
    );
    Stages {
        chain,
        filter,
        features,
        tap,
        tenant,
        progs,
    }
}

#[test]
fn every_subset_of_stages_runs_in_order_and_only_the_installed_ones_see_the_frame() {
    let lab = TestLab::up("chain", 0);
    // Whatever happens, the ddos stage's pins go (they outlive the
    // filter by design); on success the teardown below did it already.
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            if let Ok(s) = Scope::new(Some(&self.0), HOST_IF) {
                let _ = Filter::detach(&s.name());
            }
            let _ = Chain::remove(Some(&self.0), HOST_IF);
        }
    }
    let _cleanup = Cleanup(lab.host_ns());
    let mut st = setup(&lab);
    let frame = Frame::udp("198.51.100.7", "10.0.0.2", 4000, 53).build();
    for set in 0..(1u32 << CHAIN_SLOTS) {
        st.install(set);
        let before = st.seen();
        let verdict = st.run(&frame);
        let after = st.seen();
        let has = |slot: u32| set & (1 << slot) != 0;
        // The tenant stage (last) drops frames of no tenant: its verdict is final.
        let want = if has(CHAIN_SLOT_TENANT) {
            XDP_DROP
        } else {
            XDP_PASS
        };
        assert_eq!(verdict, want, "stages {set:03b}");
        let moved = |a: u64, b: u64| u64::from(b > a);
        assert_eq!(
            (
                moved(before.ddos, after.ddos),
                moved(before.features, after.features),
                moved(before.stream, after.stream),
                moved(before.tenant, after.tenant),
            ),
            (
                u64::from(has(CHAIN_SLOT_DDOS)),
                u64::from(has(CHAIN_SLOT_DDOS)),
                u64::from(has(CHAIN_SLOT_STREAM)),
                u64::from(has(CHAIN_SLOT_TENANT)),
            ),
            "stages {set:03b}: which stages saw the frame"
        );
    }

    // A blocked source stops at the ddos stage: no later stage sees it.
    st.install(0b111);
    st.filter
        .block(&[BlockEntry {
            prefix: "198.51.100.7".parse().unwrap(),
            ttl: None,
        }])
        .unwrap();
    let before = st.seen();
    assert_eq!(st.run(&frame), XDP_DROP);
    let after = st.seen();
    assert_eq!(after.ddos, before.ddos + 1);
    assert_eq!(
        (after.features, after.stream, after.tenant),
        (before.features, before.stream, before.tenant),
        "nothing after the ddos stage saw the blocked frame"
    );

    // Teardown: the tap and the tenant agent leave their slots; the ddos
    // stage stays until its filter is detached; the chain goes last.
    st.tenant.shutdown();
    drop(st.tap);
    let left: Vec<u32> = st.chain.stages().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(
        left,
        [CHAIN_SLOT_DDOS],
        "only the ddos stage outlives its owner"
    );
    let name = Scope::new(Some(&lab.host_ns()), HOST_IF).unwrap().name();
    drop(st.filter);
    drop(st.features);
    Filter::detach(&name).unwrap();
    assert!(
        st.chain.stages().unwrap().is_empty(),
        "detaching the filter empties its slot"
    );
    assert!(Chain::remove(Some(&lab.host_ns()), HOST_IF).unwrap());
}
