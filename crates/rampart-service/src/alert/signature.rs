//! The signature table: every kind of alert rampart raises, with the
//! Suricata-style rule id (`alert.signature_id`), text, classification and
//! severity SIEM rules key on. One table for every application; ranges:
//! ddos 9100000–9100999 (one per attack vector), stream 9200000–9299999,
//! tenant 9300000–9399999. docs/alerts.md shows it ([`markdown_table`];
//! a test keeps the two equal). Ids are never reused: a retired kind keeps
//! its number out of the table.

use super::App;

/// One kind of alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// Application raising it.
    pub app: App,
    /// What the application calls it: the attack vector (`syn_flood`,
    /// `udp_amplification/dns`, `carpet/syn_flood`), the detector or the
    /// finding (`portscan`).
    pub key: &'static str,
    /// `alert.signature_id`.
    pub id: u32,
    /// `alert.rev`: raised when the meaning of the rule changes.
    pub rev: u32,
    /// `alert.signature`.
    pub signature: &'static str,
    /// `alert.category` (Suricata's classification.config names).
    pub category: &'static str,
    /// `alert.severity`: 1 high, 2 medium, 3 low.
    pub severity: u8,
}

const DOS: &str = "Attempted Denial of Service";
const LEAK: &str = "Attempted Information Leak";
const POLICY: &str = "Potential Corporate Privacy Violation";
const ADMIN: &str = "Attempted Administrator Privilege Gain";
const NOT_SUSPICIOUS: &str = "Not Suspicious Traffic";
const MISC: &str = "Misc activity";

macro_rules! sig {
    ($app:ident, $key:literal, $id:literal, $sev:literal, $cat:expr, $text:literal) => {
        Signature {
            app: App::$app,
            key: $key,
            id: $id,
            rev: 1,
            signature: $text,
            category: $cat,
            severity: $sev,
        }
    };
}

/// Every signature. The first entry of each application is its generic
/// one, used for a key the table does not list.
pub static SIGNATURES: &[Signature] = &[
    sig!(
        Ddos,
        "attack",
        9100000,
        1,
        DOS,
        "RAMPART DDOS attack (vector not classified)"
    ),
    sig!(
        Ddos,
        "syn_flood",
        9100001,
        1,
        DOS,
        "RAMPART DDOS SYN flood (incomplete handshakes)"
    ),
    sig!(
        Ddos,
        "ack_flood",
        9100002,
        1,
        DOS,
        "RAMPART DDOS out-of-state TCP flood (ACK/RST/FIN)"
    ),
    sig!(Ddos, "udp_flood", 9100003, 1, DOS, "RAMPART DDOS UDP flood"),
    sig!(
        Ddos,
        "icmp_flood",
        9100004,
        1,
        DOS,
        "RAMPART DDOS ICMP flood"
    ),
    sig!(
        Ddos,
        "fragment_flood",
        9100005,
        1,
        DOS,
        "RAMPART DDOS IP fragment flood"
    ),
    sig!(
        Ddos,
        "port_scan",
        9100006,
        2,
        LEAK,
        "RAMPART DDOS port scan"
    ),
    sig!(
        Ddos,
        "udp_amplification",
        9100010,
        1,
        DOS,
        "RAMPART DDOS UDP amplification (reflection)"
    ),
    sig!(
        Ddos,
        "udp_amplification/dns",
        9100011,
        1,
        DOS,
        "RAMPART DDOS DNS amplification (source port 53)"
    ),
    sig!(
        Ddos,
        "udp_amplification/ntp",
        9100012,
        1,
        DOS,
        "RAMPART DDOS NTP amplification (source port 123)"
    ),
    sig!(
        Ddos,
        "udp_amplification/memcached",
        9100013,
        1,
        DOS,
        "RAMPART DDOS memcached amplification (source port 11211)"
    ),
    sig!(
        Ddos,
        "udp_amplification/ssdp",
        9100014,
        1,
        DOS,
        "RAMPART DDOS SSDP amplification (source port 1900)"
    ),
    sig!(
        Ddos,
        "udp_amplification/cldap",
        9100015,
        1,
        DOS,
        "RAMPART DDOS CLDAP amplification (source port 389)"
    ),
    sig!(
        Ddos,
        "udp_amplification/chargen",
        9100016,
        1,
        DOS,
        "RAMPART DDOS chargen amplification (source port 19)"
    ),
    sig!(
        Ddos,
        "udp_amplification/snmp",
        9100017,
        1,
        DOS,
        "RAMPART DDOS SNMP amplification (source port 161)"
    ),
    sig!(
        Ddos,
        "operator",
        9100090,
        3,
        POLICY,
        "RAMPART DDOS operator block"
    ),
    sig!(
        Ddos,
        "carpet",
        9100100,
        1,
        DOS,
        "RAMPART DDOS carpet bombing of a prefix"
    ),
    sig!(
        Ddos,
        "carpet/syn_flood",
        9100101,
        1,
        DOS,
        "RAMPART DDOS carpet SYN flood over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/ack_flood",
        9100102,
        1,
        DOS,
        "RAMPART DDOS carpet out-of-state TCP flood over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_flood",
        9100103,
        1,
        DOS,
        "RAMPART DDOS carpet UDP flood over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/icmp_flood",
        9100104,
        1,
        DOS,
        "RAMPART DDOS carpet ICMP flood over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/fragment_flood",
        9100105,
        1,
        DOS,
        "RAMPART DDOS carpet fragment flood over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_amplification",
        9100110,
        1,
        DOS,
        "RAMPART DDOS carpet UDP amplification over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_amplification/dns",
        9100111,
        1,
        DOS,
        "RAMPART DDOS carpet DNS amplification over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_amplification/ntp",
        9100112,
        1,
        DOS,
        "RAMPART DDOS carpet NTP amplification over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_amplification/memcached",
        9100113,
        1,
        DOS,
        "RAMPART DDOS carpet memcached amplification over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_amplification/ssdp",
        9100114,
        1,
        DOS,
        "RAMPART DDOS carpet SSDP amplification over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_amplification/cldap",
        9100115,
        1,
        DOS,
        "RAMPART DDOS carpet CLDAP amplification over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_amplification/chargen",
        9100116,
        1,
        DOS,
        "RAMPART DDOS carpet chargen amplification over a prefix"
    ),
    sig!(
        Ddos,
        "carpet/udp_amplification/snmp",
        9100117,
        1,
        DOS,
        "RAMPART DDOS carpet SNMP amplification over a prefix"
    ),
    sig!(
        Stream,
        "finding",
        9200000,
        3,
        MISC,
        "RAMPART STREAM finding"
    ),
    sig!(
        Stream,
        "portscan",
        9200001,
        2,
        LEAK,
        "RAMPART STREAM Threshold Random Walk scanner"
    ),
    sig!(
        Stream,
        "synflood",
        9200002,
        2,
        DOS,
        "RAMPART STREAM TCP SYN flood (incomplete handshakes over threshold)"
    ),
    sig!(Tenant, "tenant", 9300000, 3, MISC, "RAMPART TENANT event"),
    sig!(
        Tenant,
        "program_refused",
        9300001,
        2,
        ADMIN,
        "RAMPART TENANT program refused (confinement, compiler or verifier)"
    ),
    sig!(
        Tenant,
        "program_loaded",
        9300002,
        3,
        NOT_SUSPICIOUS,
        "RAMPART TENANT program loaded"
    ),
    sig!(
        Tenant,
        "program_removed",
        9300003,
        3,
        NOT_SUSPICIOUS,
        "RAMPART TENANT program removed"
    ),
    sig!(
        Tenant,
        "budget_exhausted",
        9300004,
        2,
        DOS,
        "RAMPART TENANT CPU budget exhausted (packets dropped for lack of tokens)"
    ),
];

/// The signature of `key` for `app`; a key the table does not list gets
/// the application's generic signature (never a wrong specific one).
pub fn lookup(app: App, key: &str) -> &'static Signature {
    SIGNATURES
        .iter()
        .find(|s| s.app == app && s.key == key)
        .or_else(|| SIGNATURES.iter().find(|s| s.app == app))
        .expect("every application has a generic signature")
}

/// The table as docs/alerts.md shows it.
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| signature_id | app | key | severity | category | signature |\n|---|---|---|---|---|---|\n",
    );
    for g in SIGNATURES {
        s.push_str(&format!(
            "| {} | {} | `{}` | {} | {} | {} |\n",
            g.id,
            g.app.name(),
            g.key,
            g.severity,
            g.category,
            g.signature
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_and_keys_are_unique_and_in_their_application_range() {
        let mut ids = HashSet::new();
        let mut keys = HashSet::new();
        for s in SIGNATURES {
            assert!(ids.insert(s.id), "id {} twice", s.id);
            assert!(keys.insert((s.app, s.key)), "{:?} {} twice", s.app, s.key);
            let range = match s.app {
                App::Ddos => 9_100_000..=9_100_999,
                App::Stream => 9_200_000..=9_299_999,
                App::Tenant => 9_300_000..=9_399_999,
            };
            assert!(
                range.contains(&s.id),
                "{} out of range for {:?}",
                s.id,
                s.app
            );
            assert!((1..=3).contains(&s.severity), "{}", s.key);
            assert!(s.signature.starts_with("RAMPART "), "{}", s.signature);
        }
    }

    #[test]
    fn every_carpet_vector_has_its_plain_vector() {
        for s in SIGNATURES.iter().filter(|s| s.key.starts_with("carpet/")) {
            let inner = &s.key["carpet/".len()..];
            let plain = lookup(App::Ddos, inner);
            assert_eq!(plain.key, inner, "carpet/{inner} without {inner}");
            assert_eq!(s.id, plain.id + 100, "{}", s.key);
        }
    }

    #[test]
    fn unknown_keys_get_the_generic_signature() {
        assert_eq!(lookup(App::Ddos, "syn_flood").id, 9_100_001);
        assert_eq!(lookup(App::Ddos, "martian").id, 9_100_000);
        assert_eq!(lookup(App::Stream, "martian").id, 9_200_000);
        assert_eq!(lookup(App::Tenant, "martian").id, 9_300_000);
    }

    /// docs/alerts.md carries the table; regenerate it from
    /// [`markdown_table`] when this fails.
    #[test]
    fn the_documented_table_is_this_table() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/alerts.md"))
                .expect("docs/alerts.md");
        let table = markdown_table();
        assert!(
            doc.contains(&table),
            "docs/alerts.md does not hold the current signature table; put this in it:\n{table}"
        );
    }
}
