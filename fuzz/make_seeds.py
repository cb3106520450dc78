#!/usr/bin/env python3
"""Write the committed seed corpora under fuzz/seeds/ (run from the repo
root after a build: the BPF objects come from target/release). The seeds
are small on purpose: libFuzzer grows its own corpus from them."""
import glob, os, struct, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(ROOT, "fuzz", "seeds")


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def eth(proto, dst=b"\x02\0\0\0\0\x02", src=b"\x02\0\0\0\0\x01"):
    return dst + src + struct.pack("!H", proto)


def ip4(proto, payload, src=(192, 0, 2, 1), dst=(198, 51, 100, 7), frag=0, opts=b"", tot=None):
    ihl = 5 + len(opts) // 4
    tot = 4 * ihl + len(payload) if tot is None else tot
    h = struct.pack("!BBHHHBBH4B4B", 0x40 | ihl, 0, tot, 1, frag, 64, proto, 0, *src, *dst) + opts
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ip6(nh, payload, src=b"\x20\x01\x0d\xb8" + b"\0" * 11 + b"\x01", dst=b"\x20\x01\x0d\xb8" + b"\0" * 11 + b"\x02"):
    return struct.pack("!IHBB", 6 << 28, len(payload), nh, 64) + src + dst + payload


def udp(sport=1234, dport=53, payload=b"q" * 8):
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def tcp(sport=5555, dport=80, flags=0x02):
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 65535, 0, 0)


def icmp(t=8, c=0):
    return struct.pack("!BBHHH", t, c, 0, 1, 1) + b"ping"


def ext(nh, length_units=0):
    return struct.pack("!BB", nh, length_units) + b"\0" * (6 + 8 * length_units)


def frames():
    f = {}
    f["udp4"] = eth(0x0800) + ip4(17, udp())
    f["tcp4_syn"] = eth(0x0800) + ip4(6, tcp())
    f["icmp4"] = eth(0x0800) + ip4(1, icmp())
    f["ip4_opts"] = eth(0x0800) + ip4(17, udp(), opts=b"\x01\x01\x01\x00\x94\x04\x00\x00")
    f["ip4_padding"] = eth(0x0800) + ip4(17, udp(payload=b"")) + b"\0" * 18
    f["ip4_short_of_total"] = eth(0x0800) + ip4(17, udp(), tot=200)
    f["ip4_frag_later"] = eth(0x0800) + ip4(17, b"x" * 16, frag=0x0010)
    f["ip4_frag_first"] = eth(0x0800) + ip4(17, udp(), frag=0x2000)
    f["udp6"] = eth(0x86DD) + ip6(17, udp())
    f["icmp6"] = eth(0x86DD) + ip6(58, icmp(128))
    # Hop-by-hop, destination options, routing, fragment (first), UDP.
    chain = ext(60) + ext(43) + ext(44) + struct.pack("!BBHI", 17, 0, 0x0001, 7) + udp()
    f["ip6_chain"] = eth(0x86DD) + ip6(0, chain)
    f["ip6_frag_later"] = eth(0x86DD) + ip6(44, struct.pack("!BBHI", 17, 0, 0x0100, 7) + b"y" * 16)
    seven = b""
    nhs = [0, 60, 43, 60, 60, 60, 60]
    for i, h in enumerate(nhs):
        nxt = nhs[i + 1] if i + 1 < len(nhs) else 17
        seven += struct.pack("!BB", nxt, 0) + b"\0" * 6
    f["ip6_seven_ext"] = eth(0x86DD) + ip6(0, seven + udp())
    inner = ip4(17, udp())
    f["vlan1"] = eth(0x8100) + struct.pack("!HH", 100, 0x0800) + inner
    f["qinq"] = eth(0x88A8) + struct.pack("!HHHH", 100, 0x8100, 200, 0x0800) + inner
    f["vlan3"] = eth(0x88A8) + struct.pack("!HHHHHH", 100, 0x8100, 200, 0x8100, 300, 0x0800) + inner
    f["mpls_ip4"] = eth(0x8847) + struct.pack("!I", (16 << 12) | (1 << 8) | 64) + inner
    f["mpls2_ip6"] = eth(0x8847) + struct.pack("!II", (16 << 12) | 64, (17 << 12) | (1 << 8) | 64) + ip6(17, udp())
    f["pppoe_ip4"] = eth(0x8864) + struct.pack("!BBHHH", 0x11, 0, 1, len(inner) + 2, 0x0021) + inner
    f["pppoe_ip6"] = eth(0x8864) + struct.pack("!BBHHH", 0x11, 0, 1, len(ip6(17, udp())) + 2, 0x0057) + ip6(17, udp())
    f["gre_ip4"] = eth(0x0800) + ip4(47, struct.pack("!HH", 0, 0x0800) + inner, src=(203, 0, 113, 9))
    f["vxlan"] = eth(0x0800) + ip4(17, udp(40000, 4789, struct.pack("!II", 0x08000000, 42 << 8) + eth(0x0800) + inner))
    f["geneve"] = eth(0x0800) + ip4(17, udp(40000, 6081, struct.pack("!HHI", 0, 0x6558, 42 << 8) + eth(0x0800) + inner))
    f["ipip"] = eth(0x0800) + ip4(4, inner, src=(203, 0, 113, 9))
    f["arp"] = eth(0x0806) + b"\0\x01\x08\0\x06\x04\0\x01" + b"\0" * 20
    f["truncated_tcp"] = (eth(0x0800) + ip4(6, tcp()))[:40]
    return f


def pcaps(frames):
    recs = list(frames.values())[:3]
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, r in enumerate(recs):
        out += struct.pack("<IIII", 1700000000 + i, 1000 * i, len(r), len(r)) + r
    put("pcap", "three.pcap", out)
    be = struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, r in enumerate(recs):
        be += struct.pack(">IIII", 1700000000 + i, 1000 * i, len(r), len(r)) + r
    put("pcap", "big_endian.pcap", be)
    ns = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)
    ns += struct.pack("<IIII", 1700000000, 999999999, len(recs[0]), len(recs[0])) + recs[0]
    put("pcap", "nanos.pcap", ns)

    def block(t, body):
        pad = (-len(body)) % 4
        n = 12 + len(body) + pad
        return struct.pack("<II", t, n) + body + b"\0" * pad + struct.pack("<I", n)

    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    tsresol = struct.pack("<HHB", 9, 1, 9) + b"\0\0\0" + struct.pack("<HH", 0, 0)
    idb = block(1, struct.pack("<HHI", 1, 0, 65535) + tsresol)
    ng = shb + idb
    for i, r in enumerate(recs):
        ts = 1700000000 * 10**9 + i
        ng += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(r), len(r)) + r)
    ng += block(3, struct.pack("<I", len(recs[0])) + recs[0])
    put("pcap", "two_blocks.pcapng", ng)


def flow_seeds():
    """sFlow v5 datagrams and NetFlow v9 / IPFIX packets (flow input)."""
    fr = [eth(0x0800) + ip4(17, udp(53, 40000, b"r" * 64), dst=(10, 20, 0, 2)),
          eth(0x0800) + ip4(6, tcp(999, 80, 0x02), dst=(10, 20, 0, 2)),
          eth(0x86DD) + ip6(17, udp(123, 9))]

    def sample(expanded, rate, frame):
        hdr = frame[:128]
        body = struct.pack("!IIII", 1, len(frame) + 4, 4, len(hdr)) + hdr + b"\0" * (-len(hdr) % 4)
        rec = struct.pack("!II", 1, len(body)) + body
        if expanded:
            s = struct.pack("!IIIIIIIIIIII", 7, 0, 3, rate, 1000, 0, 0, 1, 0, 2, 1, 0)[:-4]
        else:
            s = struct.pack("!IIIIIIII", 7, 3, rate, 1000, 0, 1, 2, 1)
        s += rec
        return struct.pack("!II", 3 if expanded else 1, len(s)) + s

    def dgram(samples):
        return struct.pack("!II4BIIII", 5, 1, 192, 0, 2, 254, 0, 42, 1000, len(samples)) + b"".join(samples)

    counters = struct.pack("!II", 2, 12) + b"\0" * 12
    put("flow_sflow", "flow_and_counters", dgram([sample(False, 256, fr[0]), counters, sample(True, 512, fr[1])]))
    put("flow_sflow", "ipv6", dgram([sample(False, 1, fr[2])]))

    fields = [(8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (6, 1), (2, 4), (1, 8)]
    rec = bytes([192, 0, 2, 9, 10, 20, 0, 2]) + struct.pack("!HHBBIQ", 53, 40000, 17, 0, 30, 42000)

    def sets(ipfix):
        t = struct.pack("!HH", 256, len(fields)) + b"".join(struct.pack("!HH", *f) for f in fields)
        out = struct.pack("!HH", 2 if ipfix else 0, len(t) + 4) + t
        if ipfix:
            o = struct.pack("!HHHHHHH", 300, 2, 1, 149, 4, 34, 4)
            out += struct.pack("!HH", 3, len(o) + 4) + o
        else:
            o = struct.pack("!HHHHHHH", 300, 4, 4, 1, 4, 34, 4)
            out += struct.pack("!HH", 1, len(o) + 4) + o
        od = struct.pack("!II", 7, 100)
        out += struct.pack("!HH", 300, len(od) + 4) + od
        out += struct.pack("!HH", 256, len(rec) + 4) + rec
        return out

    b = sets(True)
    put("flow_netflow", "ipfix", struct.pack("!HHIII", 10, 16 + len(b), 1700000000, 1, 7) + b)
    b = sets(False)
    put("flow_netflow", "v9", struct.pack("!HHIIII", 9, 4, 1000, 1700000000, 1, 7) + b)


def main():
    flow_seeds()
    f = frames()
    for name, data in f.items():
        put("frame", name, data)
        put("frame_xdp", name, data)
    pcaps(f)
    put("config_ddos", "dist.toml", open(os.path.join(ROOT, "dist", "rampart-ddos.toml")).read())
    put("config_ddos", "empty.toml", "")
    put("config_run", "shipped.toml", open(os.path.join(ROOT, "dist", "rampart.toml")).read())
    put("config_run", "all_three.toml", '[[interface]]\nname = "eth0"\n[ddos]\n[stream]\napps = ["portscan"]\n[tenant.infra]\nname = "t"\n[[tenant.tenant]]\nname = "acme"\nselectors = ["prefix:10.0.0.0/24"]\n')
    put("config_ddos", "daemon.toml", '[daemon]\nmode = "xdp-host"\niface = "eth0"\ninterval_s = 0.5\n')
    put("config_tenant", "two_tenants.toml", '''[server]
listen = "127.0.0.1:9610"
[infra]
name = "default"
interfaces = ["host0"]
[fairness]
enabled = true
budget_cores = 0.8
[limits]
max_insns = 4096
[[tenant]]
name = "acme"
token = "secret-token-1"
weight = 2
selectors = ["prefix:10.20.1.0/24", "vlan:101", "vxlan:42"]
ports = ["t1"]
[[tenant]]
name = "beta"
token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
selectors = ["prefix:fd20:0:0:2::/64"]
''')
    put("api_bodies", "selectors", b"\x00" + b'["prefix:10.0.0.0/24", "vlan:101", "vxlan:7", "iface:t1"]')
    put("api_bodies", "map_value", b"\x01" + b'{"value": "2a00000000000000"}')
    put("api_bodies", "detect_elf", b"\x02\x7fELF\x02\x01\x01")
    put("api_bodies", "prefix_file", b"\x03# blocked\n192.0.2.7\n198.51.100.0/24\n2001:db8::/32\n\n")
    put("api_bodies", "prefix_args", b"\x04192.0.2.7 10.0.0.0/8 ::1")
    put("api_bodies", "block", b"\x05" + b'{"prefix": "192.0.2.7", "reason": "manual"}')
    put("api_bodies", "whitelist", b"\x06" + b'{"prefix": "2001:db8::/32"}')
    put("api_bodies", "config_dns", b"\x07" + b'{"per_source_qps": 10, "per_source_burst": 20, "mode": "truncate", "exempt": ["192.0.2.0/24"]}')
    put("api_bodies", "config_synproxy", b"\x08" + b'{"mss_v4": 1460, "wscale": 7, "ports": [80, 443]}')
    # Decision stream bodies as crowdsec 1.4.6's LAPI answers (recorded).
    put("crowdsec_stream", "startup.json", b"\x00" + b'{"deleted":null,"new":[{"duration":"59m58.86815448s","id":3,"origin":"cscli","scenario":"ssh","scope":"Ip","type":"ban","value":"2001:db8::9"},{"duration":"3h59m58.868152166s","id":2,"origin":"cscli","scenario":"manual","scope":"Range","type":"ban","value":"198.51.100.0/24"},{"duration":"3h59m58s","id":4,"origin":"cscli","scenario":"manual","scope":"Ip","type":"captcha","value":"192.0.2.8"}]}')
    put("crowdsec_stream", "delta.json", b"\x01" + b'{"deleted":[{"duration":"-130.172901ms","id":1,"origin":"cscli","scenario":"manual","scope":"Ip","type":"ban","value":"192.0.2.7"}],"new":[{"duration":"29m59.618264137s","id":6,"origin":"cscli","scenario":"manual","scope":"Ip","type":"ban","value":"203.0.113.5"}]}')
    put("crowdsec_stream", "duration", b"\x02" + b"3h59m58.5s")
    # The stock tenant programs are a corpus of their own (./run fuzz reads
    # bpf/tenant/api/programs/ directly): no copies here.
    progs = os.path.join(ROOT, "bpf", "tenant", "api", "programs")
    put("tenant_source", "tiny.c", '#include "rampart_tenant.h"\n#include <linux/if_ether.h>\n'
        '/* a comment */\nint tenant_main(struct xdp_md *ctx) { return XDP_PASS; }\n')
    put("tenant_source", "directives.c", '#define X(a) #a\n#if defined(X) && 1\n#pragma once\n#else\n#error no\n#endif\n'
        'const char *s = "#include </etc/passwd>"; // #include "x"\n')
    # Tenant objects: the stock programs compiled as the compiler agent does.
    inc = os.path.join(ROOT, "build-seeds-inc")
    os.makedirs(os.path.join(inc, "common"), exist_ok=True)
    for h in ["common.h", "parse.h", "csum.h", "abi.h"]:
        with open(os.path.join(inc, "common", h), "w") as o:
            o.write(open(os.path.join(ROOT, "bpf", "common", h)).read())
    with open(os.path.join(inc, "rampart_tenant.h"), "w") as o:
        o.write(open(os.path.join(ROOT, "bpf", "tenant", "api", "rampart_tenant.h")).read())
    for c in sorted(glob.glob(os.path.join(progs, "*.c"))) + ["tiny"]:
        out = "/tmp/rampart-seed.o"
        if c == "tiny":
            src = "/tmp/rampart-seed-tiny.c"
            open(src, "w").write('#include "rampart_tenant.h"\nstruct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 4);'
                                 ' __type(key, __u32); __type(value, __u64); } counts SEC(".maps");\n'
                                 'int tenant_main(struct xdp_md *ctx) { __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&counts, &k);'
                                 ' if (v) (*v)++; return XDP_PASS; }\n')
            c = src
        subprocess.check_call(["clang-14", "-O2", "-g", "-target", "bpf", "-I", inc,
                               "-I/usr/include/x86_64-linux-gnu", "-c", c, "-o", out])
        subprocess.check_call(["llvm-strip-14", "-g", out])
        put("tenant_object", os.path.basename(c).replace(".c", ".o"), open(out, "rb").read())
    subprocess.check_call(["rm", "-rf", inc])
    objs = sorted(glob.glob(os.path.join(ROOT, "target", "release", "build", "rampart-bpf-*", "out")), key=os.path.getmtime)
    if objs:
        for name in ["xdp_stream_rx.bpf.o", "xdp_drop.bpf.o"]:
            put("stream_object", name, open(os.path.join(objs[-1], name), "rb").read())


if __name__ == "__main__":
    main()
