// expect: refused: maps, more than the limit
/* Forty tiny maps: within the memory budget, but every map is a kernel
 * object with its own overhead; the number of maps is limited too. */
#include "rampart_tenant.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m0 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m1 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m2 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m3 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m4 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m5 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m6 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m7 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m8 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m9 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m10 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m11 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m12 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m13 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m14 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m15 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m16 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m17 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m18 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m19 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m20 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m21 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m22 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m23 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m24 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m25 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m26 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m27 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m28 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m29 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m30 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m31 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m32 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m33 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m34 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m35 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m36 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m37 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m38 SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} m39 SEC(".maps");

int tenant_main(struct xdp_md *ctx)
{
	__u32 k = 0;

	return ((bpf_map_lookup_elem(&m0, &k) != 0) +
		(bpf_map_lookup_elem(&m1, &k) != 0) +
		(bpf_map_lookup_elem(&m2, &k) != 0) +
		(bpf_map_lookup_elem(&m3, &k) != 0) +
		(bpf_map_lookup_elem(&m4, &k) != 0) +
		(bpf_map_lookup_elem(&m5, &k) != 0) +
		(bpf_map_lookup_elem(&m6, &k) != 0) +
		(bpf_map_lookup_elem(&m7, &k) != 0) +
		(bpf_map_lookup_elem(&m8, &k) != 0) +
		(bpf_map_lookup_elem(&m9, &k) != 0) +
		(bpf_map_lookup_elem(&m10, &k) != 0) +
		(bpf_map_lookup_elem(&m11, &k) != 0) +
		(bpf_map_lookup_elem(&m12, &k) != 0) +
		(bpf_map_lookup_elem(&m13, &k) != 0) +
		(bpf_map_lookup_elem(&m14, &k) != 0) +
		(bpf_map_lookup_elem(&m15, &k) != 0) +
		(bpf_map_lookup_elem(&m16, &k) != 0) +
		(bpf_map_lookup_elem(&m17, &k) != 0) +
		(bpf_map_lookup_elem(&m18, &k) != 0) +
		(bpf_map_lookup_elem(&m19, &k) != 0) +
		(bpf_map_lookup_elem(&m20, &k) != 0) +
		(bpf_map_lookup_elem(&m21, &k) != 0) +
		(bpf_map_lookup_elem(&m22, &k) != 0) +
		(bpf_map_lookup_elem(&m23, &k) != 0) +
		(bpf_map_lookup_elem(&m24, &k) != 0) +
		(bpf_map_lookup_elem(&m25, &k) != 0) +
		(bpf_map_lookup_elem(&m26, &k) != 0) +
		(bpf_map_lookup_elem(&m27, &k) != 0) +
		(bpf_map_lookup_elem(&m28, &k) != 0) +
		(bpf_map_lookup_elem(&m29, &k) != 0) +
		(bpf_map_lookup_elem(&m30, &k) != 0) +
		(bpf_map_lookup_elem(&m31, &k) != 0) +
		(bpf_map_lookup_elem(&m32, &k) != 0) +
		(bpf_map_lookup_elem(&m33, &k) != 0) +
		(bpf_map_lookup_elem(&m34, &k) != 0) +
		(bpf_map_lookup_elem(&m35, &k) != 0) +
		(bpf_map_lookup_elem(&m36, &k) != 0) +
		(bpf_map_lookup_elem(&m37, &k) != 0) +
		(bpf_map_lookup_elem(&m38, &k) != 0) +
		(bpf_map_lookup_elem(&m39, &k) != 0)) ? XDP_PASS : XDP_DROP;
}
