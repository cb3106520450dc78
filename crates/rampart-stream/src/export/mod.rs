//! Standard outputs: JSON lines with Zeek notice / Suricata EVE field
//! names ([`json`]), and IPFIX (RFC 7011) over UDP ([`ipfix`]).

pub mod ipfix;
pub mod json;
