// Cost of `lock xadd` on an 8-byte counter that straddles two cache lines
// (a split lock) against an aligned one, and what it does to a second CPU
// doing ordinary memory work meanwhile.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static volatile int stop;
static char *buf;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static double other_rate;
static void *other(void *a){ // CPU1: walk a 4 MB buffer, count passes
  pin(1); size_t n=4<<20; char *m=malloc(n); memset(m,1,n); uint64_t it=0; double t0=now();
  while(!stop){ for(size_t i=0;i<n;i+=64) m[i]++; it++; }
  other_rate=it/(now()-t0); return 0;}
static double run(size_t off,int with_other){
  pthread_t t; stop=0; if(with_other) pthread_create(&t,0,other,0);
  pin(0); volatile uint64_t *p=(uint64_t*)(buf+off); uint64_t n=0; double t0=now();
  while(now()-t0<1.0){ for(int i=0;i<10000;i++) __sync_fetch_and_add(p,1); n+=10000; }
  double ns=(now()-t0)*1e9/n; stop=1; if(with_other) pthread_join(t,0); return ns;}
int main(void){
  buf=aligned_alloc(4096,4096);
  for(int r=0;r<3;r++){
    stop=0; pthread_t t; pthread_create(&t,0,other,0); double t0=now(); while(now()-t0<1.0); stop=1; pthread_join(t,0);
    double alone=other_rate;
    double a=run(56,1); double oa=other_rate;
    double s=run(60,1); double os=other_rate;
    printf("round %d: lock xadd aligned %.1f ns, split %.1f ns (%.0fx); other CPU's passes/s alone %.0f, beside aligned %.0f, beside split %.0f (%.2fx)\n",
      r,a,s,s/a,alone,oa,os,os/alone);
  }
}
