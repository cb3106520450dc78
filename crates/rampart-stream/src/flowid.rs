//! FlowID: jhash of a flow key, exactly as `bpf/stream/tuple.h`
//! (`stream_flow_id`) computes it in XDP — checked against the BPF program
//! by `tests/prog_stream_tuple.rs`.

use rampart_bpf::abi::stream::{ST_KEY_BIDIR, ST_KEY_FIVE_TUPLE, ST_KEY_SYN_PAIR};

use crate::tuple::{
    proto, StreamTuple, ST_FLOWID_SEED, ST_F_IP_REV, ST_F_PORT_REV, ST_KEY_MODE_SHIFT,
};

/// Which flow key the FlowID hashes (`enum stream_key_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum KeyMode {
    /// ⟨saddr, daddr, sport, dport, proto⟩ (unidirectional flows).
    FiveTuple = ST_KEY_FIVE_TUPLE,
    /// ⟨src, dst, dport⟩, or ⟨dst, src, sport⟩ for a SYN-ACK: a SYN and
    /// its answer share a key.
    SynPair = ST_KEY_SYN_PAIR,
    /// Direction-independent: addresses and ports each ordered; the
    /// `ST_F_IP_REV` / `ST_F_PORT_REV` flags say which were swapped.
    Bidir = ST_KEY_BIDIR,
}

impl std::fmt::Display for KeyMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::FiveTuple => "five-tuple",
            Self::SynPair => "syn-pair",
            Self::Bidir => "bidir",
        })
    }
}

const JHASH_INITVAL: u32 = 0xdead_beef;

#[inline(always)]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

#[inline(always)]
fn final_(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

/// The kernel's `jhash2` (lookup3) over `k`.
#[inline]
pub fn jhash2(k: &[u32], initval: u32) -> u32 {
    let len = k.len() as u32;
    let mut a = JHASH_INITVAL.wrapping_add(len << 2).wrapping_add(initval);
    let mut b = a;
    let mut c = a;
    let mut k = k;
    while k.len() > 3 {
        a = a.wrapping_add(k[0]);
        b = b.wrapping_add(k[1]);
        c = c.wrapping_add(k[2]);
        mix(&mut a, &mut b, &mut c);
        k = &k[3..];
    }
    match k.len() {
        3 => {
            c = c.wrapping_add(k[2]);
            b = b.wrapping_add(k[1]);
            a = a.wrapping_add(k[0]);
            final_(&mut a, &mut b, &mut c);
        }
        2 => {
            b = b.wrapping_add(k[1]);
            a = a.wrapping_add(k[0]);
            final_(&mut a, &mut b, &mut c);
        }
        1 => {
            a = a.wrapping_add(k[0]);
            final_(&mut a, &mut b, &mut c);
        }
        _ => {}
    }
    c
}

fn addr_gt(a: &[u32; 4], b: &[u32; 4]) -> bool {
    for i in 0..4 {
        let (x, y) = (u32::from_be(a[i]), u32::from_be(b[i]));
        if x != y {
            return x > y;
        }
    }
    false
}

/// Compute `t.flow_id` for `mode`, setting the key mode and the
/// reversal flags in `t.flags` (as `stream_flow_id` in XDP).
#[inline]
pub fn set_flow_id(t: &mut StreamTuple, mode: KeyMode) {
    t.flags &= !(ST_F_IP_REV | ST_F_PORT_REV | (3 << ST_KEY_MODE_SHIFT));
    let (mut a, mut b) = (&t.saddr, &t.daddr);
    let ports: u32;
    let mut extra = 0u8;
    match mode {
        KeyMode::FiveTuple => ports = (u32::from(t.sport) << 16) | u32::from(t.dport),
        KeyMode::SynPair => {
            if t.proto == proto::TCP && t.tcp_flags & 0x12 == 0x12 {
                (a, b) = (&t.daddr, &t.saddr);
                ports = u32::from(t.sport);
            } else {
                ports = u32::from(t.dport);
            }
        }
        KeyMode::Bidir => {
            if addr_gt(&t.saddr, &t.daddr) {
                (a, b) = (&t.daddr, &t.saddr);
                extra |= ST_F_IP_REV;
            }
            if t.sport > t.dport {
                ports = (u32::from(t.dport) << 16) | u32::from(t.sport);
                extra |= ST_F_PORT_REV;
            } else {
                ports = (u32::from(t.sport) << 16) | u32::from(t.dport);
            }
        }
    }
    let k = [
        a[0],
        a[1],
        a[2],
        a[3],
        b[0],
        b[1],
        b[2],
        b[3],
        ports,
        u32::from(t.proto),
    ];
    t.flow_id = jhash2(&k, ST_FLOWID_SEED);
    t.flags |= extra | ((mode as u8) << ST_KEY_MODE_SHIFT);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuple::{tcp, TupleExt};

    #[test]
    fn jhash_known_values() {
        // Values of the kernel's jhash2 (lib/test_hash-style), computed
        // independently from the reference lookup3 hashword().
        assert_eq!(jhash2(&[], 0), 0xdeadbeef);
        assert_eq!(jhash2(&[1, 2, 3], 0), {
            // hashword of {1,2,3}, initval 0, as in lookup3.c
            let mut a = 0xdeadbeefu32.wrapping_add(12);
            let (mut b, mut c) = (a, a);
            c = c.wrapping_add(3);
            b = b.wrapping_add(2);
            a = a.wrapping_add(1);
            final_(&mut a, &mut b, &mut c);
            c
        });
    }

    #[test]
    fn syn_pair_and_bidir_keys_match_across_directions() {
        let a = "10.0.0.1".parse().unwrap();
        let b = "10.0.0.2".parse().unwrap();
        let mut syn = StreamTuple::new_l4(0, a, b, proto::TCP, 40000, 80, tcp::SYN, 60);
        let mut synack =
            StreamTuple::new_l4(0, b, a, proto::TCP, 80, 40000, tcp::SYN | tcp::ACK, 60);
        let mut ack = StreamTuple::new_l4(0, a, b, proto::TCP, 40001, 80, tcp::ACK, 52);
        set_flow_id(&mut syn, KeyMode::SynPair);
        set_flow_id(&mut synack, KeyMode::SynPair);
        set_flow_id(&mut ack, KeyMode::SynPair);
        assert_eq!(syn.flow_id, synack.flow_id);
        assert_eq!(
            syn.flow_id, ack.flow_id,
            "the client port is not part of the SYN key"
        );
        set_flow_id(&mut syn, KeyMode::Bidir);
        set_flow_id(&mut synack, KeyMode::Bidir);
        assert_eq!(syn.flow_id, synack.flow_id);
        assert_eq!(syn.flags & (ST_F_IP_REV | ST_F_PORT_REV), ST_F_PORT_REV);
        assert_eq!(synack.flags & (ST_F_IP_REV | ST_F_PORT_REV), ST_F_IP_REV);
        set_flow_id(&mut syn, KeyMode::FiveTuple);
        set_flow_id(&mut synack, KeyMode::FiveTuple);
        assert_ne!(syn.flow_id, synack.flow_id);
        assert_eq!(syn.key_mode(), 1);
    }
}
