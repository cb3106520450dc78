//! `bpf/common/abi.h`: parse statuses and limits of `bpf/common/parse.h`.

include!(concat!(env!("OUT_DIR"), "/abi_common.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_status_labels_follow_the_enum() {
        assert_eq!(PARSE_STATUS_LABELS.len() as u32, PARSE_STATUS_MAX);
        assert_eq!(PARSE_STATUS_LABELS[PARSE_OK as usize], "ok");
        assert_eq!(PARSE_STATUS_LABELS[PARSE_NOT_IP as usize], "not_ip");
        assert_eq!(PARSE_STATUS_LABELS[PARSE_TOO_DEEP as usize], "too_deep");
    }
}
