// Per-thread work rate with one thread alone vs two threads on two vCPUs.
// If the two vCPUs sometimes share one physical core (SMT siblings) on the
// host, the two-thread rate per thread drops by ~30-50 % in those rounds.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
struct arg{int cpu;double secs;uint64_t n;};
static void *work(void *p){struct arg *a=p;cpu_set_t s;CPU_ZERO(&s);CPU_SET(a->cpu,&s);
 pthread_setaffinity_np(pthread_self(),sizeof s,&s);
 volatile uint64_t x=1;uint64_t n=0;double end=now()+a->secs;
 while(1){for(int i=0;i<100000;i++){x=x*6364136223846793005ULL+1442695040888963407ULL;}n++;if(now()>end)break;}
 a->n=n;return 0;}
int main(int c,char**v){int rounds=c>1?atoi(v[1]):20;
 for(int r=0;r<rounds;r++){struct arg one={1,0.5,0};pthread_t t;pthread_create(&t,0,work,&one);pthread_join(t,0);
  struct arg a={0,0.5,0},b={1,0.5,0};pthread_t ta,tb;pthread_create(&ta,0,work,&a);pthread_create(&tb,0,work,&b);pthread_join(ta,0);pthread_join(tb,0);
  printf("%d alone=%lu pair0=%lu pair1=%lu ratio=%.2f\n",r,one.n,a.n,b.n,(double)(a.n+b.n)/2/one.n);fflush(stdout);}
 return 0;}
