//! NetFlow v9 (RFC 3954) and IPFIX (RFC 7011) export packets: flow records
//! become [`FlowSample`]s, their counts multiplied by the exporter's
//! sampling interval.
//!
//! The wire format, templates and options templates are netflow_parser's
//! (its `AutoScopedParser` keeps templates per exporter address and source
//! id / observation domain, as both RFCs scope them, and expires a template
//! its exporter stopped refreshing). What is ours: which information
//! elements make a sample, and the sampling interval — from the record
//! itself, else from the exporter's options data (samplingInterval,
//! samplerRandomInterval, samplingPacketInterval) for that scope, else 1,
//! and the configured override over all of them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use netflow_parser::scoped_parser::AutoScopedParser;
use netflow_parser::variable_versions::field_value::{DataNumber, FieldValue};
use netflow_parser::variable_versions::ipfix::lookup::{IANAIPFixField, IPFixField};
use netflow_parser::variable_versions::ipfix::FlowSetBody as IpfixBody;
use netflow_parser::variable_versions::v9::FlowSetBody as V9Body;
use netflow_parser::{NetflowError, NetflowPacket, NetflowParser, TtlConfig};

use super::{Decoded, FlowError, FlowSample};

/// Information elements read (the IANA numbers, the same in v9).
const OCTETS: u16 = 1;
const PACKETS: u16 = 2;
const PROTOCOL: u16 = 4;
const TCP_FLAGS: u16 = 6;
const SRC_PORT: u16 = 7;
const SRC_V4: u16 = 8;
const DST_PORT: u16 = 11;
const DST_V4: u16 = 12;
const SRC_V6: u16 = 27;
const DST_V6: u16 = 28;
const SAMPLING_INTERVAL: u16 = 34;
const SAMPLER_RANDOM_INTERVAL: u16 = 50;
const OCTETS_TOTAL: u16 = 85;
const PACKETS_TOTAL: u16 = 86;
const SAMPLING_PACKET_INTERVAL: u16 = 305;

/// The IANA number of an IPFIX field this decoder reads.
fn ipfix_ie(f: &IPFixField) -> Option<u16> {
    use IANAIPFixField as I;
    let IPFixField::IANA(f) = f else {
        return None;
    };
    Some(match f {
        I::OctetDeltaCount => OCTETS,
        I::PacketDeltaCount => PACKETS,
        I::ProtocolIdentifier => PROTOCOL,
        I::TcpControlBits => TCP_FLAGS,
        I::SourceTransportPort => SRC_PORT,
        I::SourceIpv4address => SRC_V4,
        I::DestinationTransportPort => DST_PORT,
        I::DestinationIpv4address => DST_V4,
        I::SourceIpv6address => SRC_V6,
        I::DestinationIpv6address => DST_V6,
        I::SamplingInterval => SAMPLING_INTERVAL,
        I::SamplerRandomInterval => SAMPLER_RANDOM_INTERVAL,
        I::OctetTotalCount => OCTETS_TOTAL,
        I::PacketTotalCount => PACKETS_TOTAL,
        I::SamplingPacketInterval => SAMPLING_PACKET_INTERVAL,
        _ => return None,
    })
}

/// An unsigned number of any width (a reduced-size encoding included).
fn number(v: &FieldValue) -> Option<u64> {
    match v {
        FieldValue::DataNumber(d) => match d {
            DataNumber::U8(x) => Some(u64::from(*x)),
            DataNumber::U16(x) => Some(u64::from(*x)),
            DataNumber::U24(x) | DataNumber::U32(x) => Some(u64::from(*x)),
            DataNumber::U64(x) => Some(*x),
            DataNumber::U128(x) => Some(u64::try_from(*x).unwrap_or(u64::MAX)),
            DataNumber::Vec(b) if b.len() <= 8 => {
                Some(b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
            }
            _ => None,
        },
        FieldValue::Vec(b) if b.len() <= 8 => {
            Some(b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
        }
        FieldValue::ProtocolType(p) => Some(u64::from(u8::from(*p))),
        FieldValue::TcpControlBits(t, _) => Some(u64::from(u16::from(*t))),
        _ => None,
    }
}

fn addr(v: &FieldValue) -> Option<IpAddr> {
    match v {
        FieldValue::Ip4Addr(a) => Some(IpAddr::V4(*a)),
        FieldValue::Ip6Addr(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// The fields of one record that make a sample.
#[derive(Default)]
struct Rec {
    src: Option<IpAddr>,
    dst: Option<IpAddr>,
    proto: Option<u64>,
    sport: Option<u64>,
    dport: Option<u64>,
    flags: u64,
    packets: Option<u64>,
    octets: Option<u64>,
    rate: Option<u64>,
    /// A field detection reads had a value it cannot be.
    bad: bool,
}

impl Rec {
    fn set(&mut self, ie: u16, v: &FieldValue) {
        let n = || number(v);
        let mut bad_if_none = |x: Option<u64>, slot: &mut Option<u64>| match x {
            Some(x) => *slot = Some(x),
            None => self.bad = true,
        };
        match ie {
            SRC_V4 | SRC_V6 => match addr(v) {
                Some(a) => self.src = Some(a),
                None => self.bad = true,
            },
            DST_V4 | DST_V6 => match addr(v) {
                Some(a) => self.dst = Some(a),
                None => self.bad = true,
            },
            PROTOCOL => {
                let mut s = self.proto;
                bad_if_none(n(), &mut s);
                self.proto = s;
            }
            SRC_PORT => {
                let mut s = self.sport;
                bad_if_none(n(), &mut s);
                self.sport = s;
            }
            DST_PORT => {
                let mut s = self.dport;
                bad_if_none(n(), &mut s);
                self.dport = s;
            }
            TCP_FLAGS => match n() {
                Some(f) => self.flags |= f,
                None => self.bad = true,
            },
            PACKETS => self.packets = n().or(self.packets),
            OCTETS => self.octets = n().or(self.octets),
            // Total counts only when the delta is not there.
            PACKETS_TOTAL if self.packets.is_none() => self.packets = n(),
            OCTETS_TOTAL if self.octets.is_none() => self.octets = n(),
            SAMPLING_INTERVAL | SAMPLER_RANDOM_INTERVAL | SAMPLING_PACKET_INTERVAL => {
                if let Some(r) = n().filter(|&r| r > 0) {
                    self.rate = Some(r);
                }
            }
            _ => {}
        }
    }

    /// The sample, or None when the record lacks an address pair or a
    /// packet count (not a traffic record detection can use), or an error
    /// when a field holds a value it cannot.
    fn sample(&self, rate: u64) -> Result<Option<FlowSample>, FlowError> {
        if self.bad {
            return Err(FlowError::Malformed(
                "flow record field of the wrong type".into(),
            ));
        }
        let (Some(src), Some(dst), Some(packets)) = (self.src, self.dst, self.packets) else {
            return Ok(None);
        };
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(FlowError::Malformed(
                "flow record mixes IPv4 and IPv6".into(),
            ));
        }
        let proto = self.proto.unwrap_or(0);
        let (sport, dport) = (self.sport.unwrap_or(0), self.dport.unwrap_or(0));
        if proto > 255 || sport > 65535 || dport > 65535 {
            return Err(FlowError::Malformed(format!(
                "flow record: protocol {proto}, ports {sport}/{dport}"
            )));
        }
        let rate = self.rate.unwrap_or(rate).max(1);
        Ok(Some(FlowSample {
            src,
            dst,
            proto: proto as u8,
            src_port: sport as u16,
            dst_port: dport as u16,
            tcp_flags: (self.flags & 0xff) as u8,
            packets: packets.saturating_mul(rate),
            bytes: self.octets.unwrap_or(0).saturating_mul(rate),
            rate,
            fragment: false,
        }))
    }
}

/// The sampling interval an options record announces, if any.
fn options_rate<'a>(fields: impl Iterator<Item = (Option<u16>, &'a FieldValue)>) -> Option<u64> {
    fields
        .filter(|(ie, _)| {
            matches!(
                ie,
                Some(SAMPLING_INTERVAL | SAMPLER_RANDOM_INTERVAL | SAMPLING_PACKET_INTERVAL)
            )
        })
        .filter_map(|(_, v)| number(v))
        .find(|&r| r > 0)
}

/// NetFlow v9 and IPFIX decoder: templates and sampling intervals per
/// exporter and scope.
pub struct NetflowDecoder {
    parser: AutoScopedParser,
    /// Sampling interval from options data, per (exporter, source id /
    /// observation domain).
    rates: HashMap<(SocketAddr, u32), u64>,
    rate_override: Option<u64>,
}

impl std::fmt::Debug for NetflowDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetflowDecoder")
            .field("sources", &self.parser.source_count())
            .field("rates", &self.rates)
            .field("rate_override", &self.rate_override)
            .finish()
    }
}

/// One line of a netflow_parser error (its messages can carry a hex dump).
fn one_line(e: &NetflowError) -> FlowError {
    match e {
        NetflowError::Incomplete { .. } => FlowError::Truncated("netflow/ipfix message"),
        NetflowError::UnsupportedVersion { version, .. }
        | NetflowError::FilteredVersion { version } => FlowError::Version(u32::from(*version)),
        other => {
            let s = other.to_string();
            let line: String = s
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .filter(|c| !c.is_control())
                .take(160)
                .collect();
            FlowError::Malformed(line)
        }
    }
}

impl NetflowDecoder {
    /// A decoder whose templates expire `template_ttl` after their
    /// exporter last sent them (zero: never), with `rate_override`
    /// replacing every sampling interval when set.
    pub fn new(template_ttl: Duration, rate_override: Option<u64>) -> Self {
        let mut b = NetflowParser::builder().with_allowed_versions(&[9, 10]);
        if !template_ttl.is_zero() {
            b = b.with_ttl(TtlConfig::new(template_ttl));
        }
        let parser = AutoScopedParser::try_with_builder(b).unwrap_or_default();
        NetflowDecoder {
            parser,
            rates: HashMap::new(),
            rate_override: rate_override.map(|r| r.max(1)),
        }
    }

    /// Decode one export packet from `exporter` into `out` (appended only
    /// when the whole packet decodes).
    pub fn decode(
        &mut self,
        exporter: SocketAddr,
        data: &[u8],
        out: &mut Vec<FlowSample>,
    ) -> Result<Decoded, FlowError> {
        let version = match data.first_chunk::<2>() {
            Some(v) => u16::from_be_bytes(*v),
            None => return Err(FlowError::Truncated("netflow/ipfix header")),
        };
        if version != 9 && version != 10 {
            return Err(FlowError::Version(u32::from(version)));
        }
        let r = self.parser.parse_from_source(exporter, data);
        if let Some(e) = &r.error {
            return Err(one_line(e));
        }
        let mut d = Decoded::default();
        let mut got = Vec::new();
        for p in &r.packets {
            match p {
                NetflowPacket::V9(v9) => {
                    let scope = (exporter, v9.header.source_id);
                    // Options first: a packet that announces the interval
                    // and carries records uses it for them.
                    for fs in &v9.flowsets {
                        if let V9Body::OptionsData(o) = &fs.body {
                            for rec in &o.fields {
                                let f = rec
                                    .options_fields
                                    .iter()
                                    .map(|(k, v)| (Some(u16::from(*k)), v));
                                if let Some(rate) = options_rate(f) {
                                    self.rates.insert(scope, rate);
                                }
                            }
                        }
                    }
                    let rate = self.rate(scope);
                    for fs in &v9.flowsets {
                        match &fs.body {
                            V9Body::Data(data) => {
                                for rec in &data.fields {
                                    let mut x = Rec::default();
                                    for (k, v) in rec {
                                        x.set(u16::from(*k), v);
                                    }
                                    self.push(x, rate, &mut got, &mut d)?;
                                }
                            }
                            V9Body::NoTemplate(_) => d.no_template += 1,
                            V9Body::Template(t) => d.skipped += t.templates.len() as u64,
                            V9Body::OptionsTemplate(t) => d.skipped += t.templates.len() as u64,
                            V9Body::OptionsData(o) => d.skipped += o.fields.len() as u64,
                            V9Body::Empty => {}
                        }
                    }
                }
                NetflowPacket::IPFix(ipfix) => {
                    let scope = (exporter, ipfix.header.observation_domain_id);
                    for fs in &ipfix.flowsets {
                        match &fs.body {
                            IpfixBody::OptionsData(o) => {
                                for rec in &o.fields {
                                    let f = rec.iter().map(|(k, v)| (ipfix_ie(k), v));
                                    if let Some(rate) = options_rate(f) {
                                        self.rates.insert(scope, rate);
                                    }
                                }
                            }
                            IpfixBody::V9OptionsData(o) => {
                                for rec in &o.fields {
                                    let f = rec
                                        .options_fields
                                        .iter()
                                        .map(|(k, v)| (Some(u16::from(*k)), v));
                                    if let Some(rate) = options_rate(f) {
                                        self.rates.insert(scope, rate);
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                    let rate = self.rate(scope);
                    for fs in &ipfix.flowsets {
                        match &fs.body {
                            IpfixBody::Data(data) => {
                                for rec in &data.fields {
                                    let mut x = Rec::default();
                                    for (k, v) in rec {
                                        if let Some(ie) = ipfix_ie(k) {
                                            x.set(ie, v);
                                        }
                                    }
                                    self.push(x, rate, &mut got, &mut d)?;
                                }
                            }
                            IpfixBody::V9Data(data) => {
                                for rec in &data.fields {
                                    let mut x = Rec::default();
                                    for (k, v) in rec {
                                        x.set(u16::from(*k), v);
                                    }
                                    self.push(x, rate, &mut got, &mut d)?;
                                }
                            }
                            IpfixBody::NoTemplate(_) => d.no_template += 1,
                            IpfixBody::Templates(t) => d.skipped += t.len() as u64,
                            IpfixBody::V9Templates(t) => d.skipped += t.len() as u64,
                            IpfixBody::OptionsTemplates(t) => d.skipped += t.len() as u64,
                            IpfixBody::V9OptionsTemplates(t) => d.skipped += t.len() as u64,
                            IpfixBody::OptionsData(o) => d.skipped += o.fields.len() as u64,
                            IpfixBody::V9OptionsData(o) => d.skipped += o.fields.len() as u64,
                            _ => d.skipped += 1,
                        }
                    }
                }
                // Refused by the allowed versions above; nothing else
                // comes back.
                _ => {
                    return Err(FlowError::Version(u32::from(version)));
                }
            }
        }
        out.extend(got);
        Ok(d)
    }

    /// The sampling interval for a scope: the override, else what its
    /// options data said, else 1.
    fn rate(&self, scope: (SocketAddr, u32)) -> u64 {
        self.rate_override
            .or_else(|| self.rates.get(&scope).copied())
            .unwrap_or(1)
    }

    fn push(
        &self,
        x: Rec,
        rate: u64,
        got: &mut Vec<FlowSample>,
        d: &mut Decoded,
    ) -> Result<(), FlowError> {
        let mut x = x;
        if self.rate_override.is_some() {
            x.rate = None;
        }
        match x.sample(rate)? {
            Some(s) => {
                got.push(s);
                d.records += 1;
            }
            None => d.skipped += 1,
        }
        Ok(())
    }

    /// Exporter scopes whose templates are cached.
    pub fn sources(&self) -> usize {
        self.parser.source_count()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::flow::{TCP_ACK, TCP_SYN};

    /// Builders of NetFlow v9 and IPFIX packets for tests (and fuzz seeds).
    pub(crate) struct Nf {
        pub(crate) ipfix: bool,
        pub(crate) domain: u32,
        sets: Vec<u8>,
        count: u16,
    }

    fn be16(v: &mut Vec<u8>, x: u16) {
        v.extend(x.to_be_bytes());
    }

    fn be32(v: &mut Vec<u8>, x: u32) {
        v.extend(x.to_be_bytes());
    }

    /// The template of [`Nf::record4`]: src, dst, sport, dport, proto,
    /// flags, packets, octets.
    pub(crate) const FIELDS4: [(u16, u16); 8] = [
        (8, 4),
        (12, 4),
        (7, 2),
        (11, 2),
        (4, 1),
        (6, 1),
        (2, 4),
        (1, 8),
    ];

    impl Nf {
        pub(crate) fn new(ipfix: bool, domain: u32) -> Self {
            Nf {
                ipfix,
                domain,
                sets: Vec::new(),
                count: 0,
            }
        }

        fn set(&mut self, id: u16, body: &[u8]) {
            let mut b = body.to_vec();
            while !b.len().is_multiple_of(4) {
                b.push(0);
            }
            be16(&mut self.sets, id);
            be16(&mut self.sets, b.len() as u16 + 4);
            self.sets.extend(b);
        }

        pub(crate) fn template(mut self, id: u16, fields: &[(u16, u16)]) -> Self {
            let mut b = Vec::new();
            be16(&mut b, id);
            be16(&mut b, fields.len() as u16);
            for &(t, l) in fields {
                be16(&mut b, t);
                be16(&mut b, l);
            }
            let set_id = if self.ipfix { 2 } else { 0 };
            // Template records carry no padding in v9; keep the body as is.
            be16(&mut self.sets, set_id);
            be16(&mut self.sets, b.len() as u16 + 4);
            self.sets.extend(b);
            self.count += 1;
            self
        }

        /// An options template: scope "system"/observationDomainId (4 bytes),
        /// one option samplingInterval (4 bytes).
        pub(crate) fn options_template(mut self, id: u16) -> Self {
            let mut b = Vec::new();
            be16(&mut b, id);
            if self.ipfix {
                be16(&mut b, 2); // field count
                be16(&mut b, 1); // scope field count
                be16(&mut b, 149); // observationDomainId
                be16(&mut b, 4);
                be16(&mut b, 34);
                be16(&mut b, 4);
                be16(&mut self.sets, 3);
            } else {
                be16(&mut b, 4); // scope length (bytes)
                be16(&mut b, 4); // options length (bytes)
                be16(&mut b, 1); // scope: system
                be16(&mut b, 4);
                be16(&mut b, 34);
                be16(&mut b, 4);
                be16(&mut self.sets, 1);
            }
            be16(&mut self.sets, b.len() as u16 + 4);
            self.sets.extend(b);
            self.count += 1;
            self
        }

        pub(crate) fn options_data(mut self, id: u16, interval: u32) -> Self {
            let mut b = Vec::new();
            be32(&mut b, self.domain);
            be32(&mut b, interval);
            self.set(id, &b);
            self.count += 1;
            self
        }

        /// Data records of template [`FIELDS4`].
        #[allow(clippy::type_complexity)]
        pub(crate) fn records4(
            mut self,
            id: u16,
            recs: &[([u8; 4], [u8; 4], u16, u16, u8, u8, u32, u64)],
        ) -> Self {
            let mut b = Vec::new();
            for r in recs {
                b.extend(r.0);
                b.extend(r.1);
                be16(&mut b, r.2);
                be16(&mut b, r.3);
                b.push(r.4);
                b.push(r.5);
                be32(&mut b, r.6);
                b.extend(r.7.to_be_bytes());
            }
            self.set(id, &b);
            self.count += recs.len() as u16;
            self
        }

        pub(crate) fn bytes(&self) -> Vec<u8> {
            let mut v = Vec::new();
            if self.ipfix {
                be16(&mut v, 10);
                be16(&mut v, 16 + self.sets.len() as u16);
                be32(&mut v, 1_700_000_000);
                be32(&mut v, 1);
                be32(&mut v, self.domain);
            } else {
                be16(&mut v, 9);
                be16(&mut v, self.count);
                be32(&mut v, 1000);
                be32(&mut v, 1_700_000_000);
                be32(&mut v, 1);
                be32(&mut v, self.domain);
            }
            v.extend(&self.sets);
            v
        }
    }

    fn exporter(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    const DNS: ([u8; 4], [u8; 4], u16, u16, u8, u8, u32, u64) =
        ([192, 0, 2, 9], [10, 20, 0, 2], 53, 40000, 17, 0, 30, 42_000);
    const SYN: ([u8; 4], [u8; 4], u16, u16, u8, u8, u32, u64) = (
        [198, 51, 100, 1],
        [10, 20, 0, 2],
        999,
        80,
        6,
        TCP_SYN,
        1,
        60,
    );

    #[test]
    fn records_become_samples_in_both_versions() {
        for ipfix in [false, true] {
            let mut dec = NetflowDecoder::new(Duration::from_secs(60), None);
            let p = Nf::new(ipfix, 7)
                .template(256, &FIELDS4)
                .records4(256, &[DNS, SYN])
                .bytes();
            let mut out = Vec::new();
            let d = dec.decode(exporter(1), &p, &mut out).unwrap();
            assert_eq!((d.records, d.no_template), (2, 0), "ipfix {ipfix}");
            assert_eq!(out.len(), 2);
            let a = &out[0];
            assert_eq!(a.src.to_string(), "192.0.2.9");
            assert_eq!(
                (a.proto, a.src_port, a.dst_port, a.packets, a.bytes, a.rate),
                (17, 53, 40000, 30, 42_000, 1)
            );
            let b = &out[1];
            assert_eq!(
                (b.proto, b.tcp_flags & (TCP_SYN | TCP_ACK), b.packets),
                (6, TCP_SYN, 1)
            );
            // Data alone: the cached template of this exporter and scope.
            out.clear();
            let data = Nf::new(ipfix, 7).records4(256, &[DNS]).bytes();
            assert_eq!(dec.decode(exporter(1), &data, &mut out).unwrap().records, 1);
            // Another scope (observation domain / source id) or exporter
            // has not sent that template: nothing decoded, counted.
            out.clear();
            let other = Nf::new(ipfix, 8).records4(256, &[DNS]).bytes();
            let d = dec.decode(exporter(1), &other, &mut out).unwrap();
            assert_eq!((d.records, d.no_template), (0, 1));
            let d = dec.decode(exporter(2), &data, &mut out).unwrap();
            assert_eq!((d.records, d.no_template), (0, 1));
            assert!(out.is_empty());
        }
    }

    #[test]
    fn the_sampling_interval_comes_from_options_data_or_the_override() {
        for ipfix in [false, true] {
            let mut dec = NetflowDecoder::new(Duration::from_secs(60), None);
            let p = Nf::new(ipfix, 3)
                .template(256, &FIELDS4)
                .options_template(300)
                .options_data(300, 100)
                .records4(256, &[DNS])
                .bytes();
            let mut out = Vec::new();
            let d = dec.decode(exporter(1), &p, &mut out).unwrap();
            assert_eq!(d.records, 1, "ipfix {ipfix}: {d:?}");
            assert_eq!(
                (out[0].packets, out[0].bytes, out[0].rate),
                (3000, 4_200_000, 100),
                "ipfix {ipfix}"
            );
            // Later packets of the scope keep the interval.
            out.clear();
            let data = Nf::new(ipfix, 3).records4(256, &[DNS]).bytes();
            dec.decode(exporter(1), &data, &mut out).unwrap();
            assert_eq!(out[0].rate, 100);

            let mut dec = NetflowDecoder::new(Duration::from_secs(60), Some(10));
            out.clear();
            dec.decode(exporter(1), &p, &mut out).unwrap();
            assert_eq!((out[0].packets, out[0].rate), (300, 10));
        }
    }

    #[test]
    fn records_without_addresses_are_skipped_and_garbage_is_an_error() {
        let mut dec = NetflowDecoder::new(Duration::from_secs(60), None);
        let mut out = Vec::new();
        // A template without addresses: records skipped, not counted.
        let p = Nf::new(true, 1).template(256, &[(2, 4), (1, 8)]).bytes();
        dec.decode(exporter(1), &p, &mut out).unwrap();
        let mut b = Vec::new();
        b.extend(5u32.to_be_bytes());
        b.extend(500u64.to_be_bytes());
        let mut nf = Nf::new(true, 1);
        nf.set(256, &b);
        let d = dec.decode(exporter(1), &nf.bytes(), &mut out).unwrap();
        assert_eq!((d.records, d.skipped), (0, 1));
        assert!(out.is_empty());

        // Wrong versions, short headers, cut packets: errors, nothing out.
        assert_eq!(
            dec.decode(exporter(1), &[], &mut out),
            Err(FlowError::Truncated("netflow/ipfix header"))
        );
        assert_eq!(
            dec.decode(exporter(1), &[0, 5, 0, 0], &mut out),
            Err(FlowError::Version(5))
        );
        let good = Nf::new(true, 1)
            .template(256, &FIELDS4)
            .records4(256, &[DNS, SYN])
            .bytes();
        for n in 0..good.len() {
            let r = dec.decode(exporter(9), &good[..n], &mut out);
            assert!(r.is_err(), "cut at {n}: {r:?}");
        }
        let good9 = Nf::new(false, 1)
            .template(256, &FIELDS4)
            .records4(256, &[DNS, SYN])
            .bytes();
        for n in 0..20 {
            assert!(
                dec.decode(exporter(9), &good9[..n], &mut out).is_err(),
                "cut at {n}"
            );
        }
        assert!(out.is_empty());
        // An IPFIX length field past the end.
        let mut long = good.clone();
        long[3] = 0xff;
        let e = dec.decode(exporter(9), &long, &mut out).unwrap_err();
        assert!(!e.to_string().contains('\n'), "{e}");
        assert!(out.is_empty());
    }
}
