/*
 * lookup-latency.c — latency of dependent random 16-bit reads in a table of
 * 1, 2, 4, 8 and 16 MB, the access pattern of one lookup in the ddos
 * filter's exact table (same multiplicative hash, 16-bit slots).
 *
 * How it was used (2026-11-22/23, the Firecracker VM of docs/benchmarks.md,
 * while the machine was busy): the VM exposes no PMU, so `perf stat` and
 * `bpftool prog profile` could not count cycles or misses; this loop
 * measured the cost of one random miss from outside the BPF program, to
 * explain why `rampart bench filter` slows down at 1,048,576 sources and
 * to decide between the wide (8 MB) and narrow (4 MB) exact table.
 *
 *     gcc -O2 lookup-latency.c -o lk && ./lk 0 && ./lk 1
 *
 * The argument 1 asks for huge pages (MADV_HUGEPAGE), 0 forbids them; each
 * prints three passes over the five sizes. Results then: 31–75 ns in 1 MB,
 * 76–254 ns in 2 MB, 186–311 ns in 4 MB, 275–347 ns in 8 MB, 289–429 ns in
 * 16 MB, no visible difference with huge pages. The discussion is in
 * docs/data/history/ddos-filter.md ("Where the 1M time goes").
 *
 * The code below is unchanged from the copy that was embedded in
 * docs/benchmarks.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int huge=atoi(argv[1]);
  size_t sizes[]={1<<20,2<<20,4<<20,8<<20,16<<20};
  for(int rep=0;rep<3;rep++) for(int si=0;si<5;si++){
    size_t sz=sizes[si];
    uint8_t*m=mmap(0,sz+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
    m=(uint8_t*)(((uintptr_t)m+(2<<20)-1)&~((uintptr_t)(2<<20)-1));
    madvise(m,sz,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE);
    for(size_t i=0;i<sz;i++)m[i]=(uint8_t)(i*131);
    uint32_t mask=(sz/2)-1; /* 16-bit slots */
    uint32_t k=12345, acc=0; long n=20000000;
    double t0=now();
    for(long i=0;i<n;i++){
      uint32_t h=k*0x9e3779b1u; h^=h>>16; h*=0x85ebca6bu;
      uint16_t v=((uint16_t*)m)[(h>>8)&mask];
      acc+=v; k=k+1+(v&1);
    }
    double t=now()-t0;
    printf("huge=%d size=%zuMB ns/lookup=%.1f (%u)\n",huge,sz>>20,t/n*1e9,acc&1);
  }
}
