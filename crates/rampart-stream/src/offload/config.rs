//! What `xdp_stream` is told to do, and how that becomes its map entries
//! (`bpf/stream/abi.h`). Pure: unit-tested without a kernel.

use serde::Serialize;

use super::predicate::{Predicate, PrefixWords};
use crate::flowid::KeyMode;
use rampart_bpf::abi::stream::{
    StreamOffCfg, StreamOffPortRange, StreamOffPrefix, ST_FLT_DPORT, ST_FLT_DST, ST_FLT_PROTO,
    ST_FLT_SPORT, ST_FLT_SRC, ST_FLT_TCP_FLAGS, ST_OFF_CLAUSES, ST_OFF_DROP, ST_OFF_PASS,
    ST_OFF_RANGES, ST_OFF_XSKS, ST_TS_NONE, ST_TS_RX_META, ST_TS_SOFTWARE,
};

/// What happens to a frame that does not become a record (`enum stream_off_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Action {
    /// Dropped in XDP (counted).
    #[default]
    Drop = ST_OFF_DROP,
    /// Handed to the kernel stack.
    Pass = ST_OFF_PASS,
}

/// Where record timestamps come from (`enum stream_off_ts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Timestamps {
    /// `bpf_ktime_get_ns` + the realtime offset.
    Software = ST_TS_SOFTWARE,
    /// The driver's RX timestamp when it has one (device-bound program),
    /// software time otherwise; records say which (`ST_F_TS_HW`).
    #[default]
    RxMeta = ST_TS_RX_META,
    /// None in XDP (the nfp profile): the host stamps records on receive.
    None = ST_TS_NONE,
}

/// The offloaded operators and how records are delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OffloadConfig {
    /// FlowID key mode computed in XDP (also the steering key); `None`:
    /// no FlowID, every record to replica 0.
    pub key_mode: Option<KeyMode>,
    /// The offloaded Filter (`None` or empty: none).
    pub filter: Option<Predicate>,
    /// Frames the filter rejects.
    pub on_filtered: Action,
    /// Malformed IP frames (truncated, bad header, too deep).
    pub on_malformed: Action,
    /// Timestamps.
    pub timestamps: Timestamps,
    /// Source replicas (sockets per RX queue).
    pub replicas: u32,
}

impl Default for OffloadConfig {
    fn default() -> Self {
        Self {
            key_mode: Some(KeyMode::FiveTuple),
            filter: None,
            on_filtered: Action::Drop,
            on_malformed: Action::Drop,
            timestamps: Timestamps::Software,
            replicas: 1,
        }
    }
}

/// Every map entry of one configuration.
#[derive(Debug, Clone)]
pub struct MapValues {
    /// `stream_off_cfg[0]`.
    pub cfg: StreamOffCfg,
    /// `stream_off_protos[p]` for p in 0..256.
    pub protos: [u32; 256],
    /// `stream_off_ports` (source ranges, then destination ranges).
    pub ports: [StreamOffPortRange; 2 * ST_OFF_RANGES],
    /// `stream_off_prefixes` (source, then destination).
    pub prefixes: [StreamOffPrefix; 2 * ST_OFF_RANGES],
}

/// The replica that owns a FlowID among `replicas` (what `xdp_stream` computes).
#[inline]
pub fn owner(flow_id: u32, replicas: u32) -> u32 {
    ((u64::from(flow_id) * u64::from(replicas)) >> 32) as u32
}

impl OffloadConfig {
    /// Check the settings against the program's capacity.
    ///
    /// # Errors
    /// What is out of range, and the limit.
    pub fn validate(&self, queues: u32) -> crate::Result<()> {
        if self.replicas == 0 || queues == 0 || self.replicas * queues > ST_OFF_XSKS {
            return Err(crate::Error::Invalid(format!(
                "offload: {} replica(s) x {} RX queue(s) needs {} AF_XDP sockets, the XSKMAP holds {ST_OFF_XSKS}: use fewer source replicas or queues",
                self.replicas,
                queues,
                self.replicas * queues
            )));
        }
        if let Some(p) = &self.filter {
            p.fits(ST_OFF_CLAUSES, ST_OFF_RANGES).map_err(|e| {
                crate::Error::Invalid(format!("offload: the filter ({p}) does not fit: {e}"))
            })?;
        }
        Ok(())
    }

    /// The map entries, with `clock_offset_ns` = realtime − monotonic.
    ///
    /// # Errors
    /// As [`Self::validate`] (with one queue).
    pub fn map_values(&self, clock_offset_ns: u64) -> crate::Result<MapValues> {
        self.validate(1)?;
        let mut cfg = StreamOffCfg {
            clock_offset_ns,
            replicas: self.replicas,
            key_mode: self.key_mode.map_or(0, |m| m as u8),
            on_filtered: self.on_filtered as u8,
            on_malformed: self.on_malformed as u8,
            ts_source: self.timestamps as u8,
            ..StreamOffCfg::default()
        };
        let mut protos = [0u32; 256];
        let mut ports = [StreamOffPortRange::default(); 2 * ST_OFF_RANGES];
        let mut prefixes = [StreamOffPrefix::default(); 2 * ST_OFF_RANGES];
        if let Some(p) = self.filter.as_ref().filter(|p| !p.is_empty()) {
            if !p.protos.is_empty() {
                cfg.filters |= ST_FLT_PROTO;
                for x in &p.protos {
                    protos[usize::from(*x)] = 1;
                }
            }
            if !p.tcp_flags.is_empty() {
                cfg.filters |= ST_FLT_TCP_FLAGS;
                cfg.n_clauses = p.tcp_flags.len() as u8;
                for (i, c) in p.tcp_flags.iter().enumerate() {
                    cfg.clause_mask[i] = c.mask;
                    cfg.clause_value[i] = c.value;
                }
            }
            for (bit, n, base, list) in [
                (ST_FLT_SPORT, &mut cfg.n_sport, 0, &p.sport),
                (ST_FLT_DPORT, &mut cfg.n_dport, ST_OFF_RANGES, &p.dport),
            ] {
                if !list.is_empty() {
                    cfg.filters |= bit;
                    *n = list.len() as u8;
                    for (i, r) in list.iter().enumerate() {
                        ports[base + i] = StreamOffPortRange { lo: r.lo, hi: r.hi };
                    }
                }
            }
            for (bit, n, base, list) in [
                (ST_FLT_SRC, &mut cfg.n_src, 0, &p.src),
                (ST_FLT_DST, &mut cfg.n_dst, ST_OFF_RANGES, &p.dst),
            ] {
                if !list.is_empty() {
                    cfg.filters |= bit;
                    *n = list.len() as u8;
                    for (i, net) in list.iter().enumerate() {
                        let w = PrefixWords::of(net);
                        prefixes[base + i] = StreamOffPrefix {
                            addr: w.net,
                            mask: w.mask,
                            v6: u32::from(w.v6),
                        };
                    }
                }
            }
        }
        Ok(MapValues {
            cfg,
            protos,
            ports,
            prefixes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::predicate::{FlagClause, PortRange};
    use crate::tuple::{proto, tcp};

    #[test]
    fn owner_splits_the_hash_space_evenly() {
        assert_eq!(owner(0, 4), 0);
        assert_eq!(owner(u32::MAX, 4), 3);
        assert_eq!(owner(0x4000_0000, 4), 1);
        assert_eq!(owner(0x7fff_ffff, 2), 0);
        assert_eq!(owner(0x8000_0000, 2), 1);
        assert_eq!(owner(12345, 1), 0);
    }

    #[test]
    fn map_values_of_a_filter() {
        let c = OffloadConfig {
            key_mode: Some(KeyMode::SynPair),
            filter: Some(Predicate {
                protos: vec![proto::TCP, proto::UDP],
                tcp_flags: vec![FlagClause::all(tcp::SYN)],
                dport: vec![PortRange { lo: 1, hi: 1024 }],
                dst: vec!["10.10.0.0/24".parse().unwrap()],
                ..Predicate::default()
            }),
            on_filtered: Action::Pass,
            replicas: 2,
            ..OffloadConfig::default()
        };
        let m = c.map_values(7).unwrap();
        assert_eq!(m.cfg.clock_offset_ns, 7);
        assert_eq!(m.cfg.key_mode, 2);
        assert_eq!(m.cfg.replicas, 2);
        assert_eq!(m.cfg.on_filtered, 1);
        assert_eq!(
            m.cfg.filters,
            ST_FLT_PROTO | ST_FLT_TCP_FLAGS | ST_FLT_DPORT | ST_FLT_DST
        );
        assert_eq!((m.cfg.n_clauses, m.cfg.n_dport, m.cfg.n_dst), (1, 1, 1));
        assert_eq!((m.cfg.n_sport, m.cfg.n_src), (0, 0));
        assert_eq!(m.protos.iter().filter(|x| **x != 0).count(), 2);
        assert_eq!(m.protos[6], 1);
        assert_eq!(
            (m.ports[ST_OFF_RANGES].lo, m.ports[ST_OFF_RANGES].hi),
            (1, 1024)
        );
        let d = m.prefixes[ST_OFF_RANGES];
        assert_eq!(d.addr[0], u32::from_ne_bytes([10, 10, 0, 0]));
        assert_eq!(d.mask[0], u32::from_ne_bytes([255, 255, 255, 0]));
        assert_eq!(d.v6, 0);
    }

    #[test]
    fn too_big_is_refused_with_the_reason() {
        let c = OffloadConfig {
            filter: Some(Predicate {
                tcp_flags: vec![FlagClause::all(1); 5],
                ..Predicate::default()
            }),
            ..OffloadConfig::default()
        };
        let e = c.map_values(0).unwrap_err().to_string();
        assert!(
            e.contains("5 TCP flag clauses, the offload program holds 4"),
            "{e}"
        );
        let c = OffloadConfig {
            replicas: 33,
            ..OffloadConfig::default()
        };
        let e = c.validate(2).unwrap_err().to_string();
        assert!(e.contains("needs 66 AF_XDP sockets"), "{e}");
    }
}
