//! Minimal rtnetlink message building and parsing (what TC flower needs).
//!
//! netlink-packet-route covers qdiscs and some classifiers but not flower's
//! key/mask attributes and hardware flags, so the few messages rampart
//! sends are built here as plain TLVs (`struct nlmsghdr` + `struct tcmsg` +
//! `struct nlattr`s, 4-byte aligned, host byte order except where the
//! kernel says be16/be32), and unit-tested byte for byte.

/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_ACK`.
pub const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_EXCL`.
pub const NLM_F_EXCL: u16 = 0x200;
/// `NLM_F_CREATE`.
pub const NLM_F_CREATE: u16 = 0x400;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLA_F_NESTED`.
pub const NLA_F_NESTED: u16 = 0x8000;
/// `NLMSG_ERROR`.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A netlink message under construction.
#[derive(Debug, Clone)]
pub struct Msg {
    buf: Vec<u8>,
}

impl Msg {
    /// Start a message: `nlmsghdr` (length filled by [`Msg::finish`]).
    pub fn new(ty: u16, flags: u16, seq: u32) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel fills it
        Self { buf }
    }

    /// Append raw bytes (a fixed header such as `tcmsg`), padded to 4.
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    /// Append one attribute.
    pub fn attr(&mut self, ty: u16, payload: &[u8]) -> &mut Self {
        let len = 4 + payload.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    /// Open a nested attribute; close it with [`Msg::nest_end`].
    pub fn nest_start(&mut self, ty: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        at
    }

    /// Close the nested attribute opened at `at`.
    pub fn nest_end(&mut self, at: usize) -> &mut Self {
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    /// The finished bytes (length field set).
    pub fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

/// Iterate the attributes in `b`: (type without flags, payload).
pub fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        b = &b[align4(len).min(b.len())..];
        Some((ty, payload))
    })
}

/// Iterate the messages in one datagram: (type, flags, body after the 16-byte header).
pub fn messages(mut b: &[u8]) -> impl Iterator<Item = (u16, u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(b[0..4].try_into().ok()?) as usize;
        if len < 16 || len > b.len() {
            return None;
        }
        let ty = u16::from_ne_bytes([b[4], b[5]]);
        let flags = u16::from_ne_bytes([b[6], b[7]]);
        let body = &b[16..len];
        b = &b[align4(len).min(b.len())..];
        Some((ty, flags, body))
    })
}

/// A `NETLINK_ROUTE` socket.
#[derive(Debug)]
pub struct Socket {
    fd: std::os::fd::OwnedFd,
}

impl Socket {
    /// Open one in the calling thread's network namespace.
    ///
    /// # Errors
    /// socket(2) failure.
    pub fn route() -> std::io::Result<Self> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket(2) call; the fd is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh, valid descriptor nobody else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    /// Send one request and wait for its ack: `Ok(())` or the kernel's errno.
    ///
    /// # Errors
    /// I/O errors, or the kernel's error (as an `io::Error` from its errno).
    pub fn request(&self, msg: &[u8]) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: `msg` is a valid buffer of msg.len() bytes.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 65536];
        loop {
            // SAFETY: `buf` is writable for its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for (ty, _, body) in messages(&buf[..n as usize]) {
                if ty == NLMSG_ERROR && body.len() >= 4 {
                    let err = i32::from_ne_bytes(body[0..4].try_into().unwrap_or_default());
                    return if err == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::from_raw_os_error(-err))
                    };
                }
                if ty == NLMSG_DONE {
                    return Ok(());
                }
            }
        }
    }
}

impl Socket {
    /// Send a dump request and hand every reply message (type, body) to `each`
    /// until `NLMSG_DONE`.
    ///
    /// # Errors
    /// I/O errors, or the kernel's error.
    pub fn dump(&self, msg: &[u8], mut each: impl FnMut(u16, &[u8])) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: `msg` is a valid buffer of msg.len() bytes.
        if unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // SAFETY: `buf` is writable for its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            for (ty, _, body) in messages(&buf[..n as usize]) {
                match ty {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => {
                        let e = body
                            .get(0..4)
                            .and_then(|b| b.try_into().ok())
                            .map(i32::from_ne_bytes)
                            .unwrap_or(0);
                        if e == 0 {
                            return Ok(());
                        }
                        return Err(std::io::Error::from_raw_os_error(-e));
                    }
                    _ => each(ty, body),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_attributes_round_trip() {
        let mut m = Msg::new(44, NLM_F_REQUEST, 7);
        m.raw(&[1, 2, 3]);
        m.attr(1, b"flower\0");
        let n = m.nest_start(2);
        m.attr(8, &0x0800u16.to_be_bytes());
        m.nest_end(n);
        let b = m.finish();
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize,
            b.len()
        );
        assert_eq!(b.len() % 4, 0);
        let body = &b[16 + 4..];
        let v: Vec<_> = attrs(body).collect();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], (1, &b"flower\0"[..]));
        assert_eq!(v[1].0, 2);
        let inner: Vec<_> = attrs(v[1].1).collect();
        assert_eq!(inner, vec![(8, &[0x08u8, 0x00][..])]);
    }

    #[test]
    fn truncated_input_stops_cleanly() {
        assert_eq!(attrs(&[8, 0, 1, 0, 0]).count(), 0);
        assert_eq!(attrs(&[2, 0, 1, 0]).count(), 0);
        assert_eq!(messages(&[0; 10]).count(), 0);
    }
}
