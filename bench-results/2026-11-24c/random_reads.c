#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){
  size_t mb=atoi(v[1]); long n=atol(v[2]);
  size_t sz=mb<<20; unsigned char*p=malloc(sz);
  for(size_t i=0;i<sz;i+=8) *(uint64_t*)(p+i)=(i/4096)*2654435761u ^ (i&0xff0);
  double t0=now(); uint64_t s=0, x=88172645463325252ull;
  for(long i=0;i<n;i++){ x^=x<<13;x^=x>>7;x^=x<<17; size_t o=(x%(sz/4096))*4096+ (x>>40)%4096; s+=p[o]; }
  double t1=now();
  printf("sum %llu\n",(unsigned long long)s);
  fprintf(stderr,"rand %.3f s, %.1f us/access\n",t1-t0,(t1-t0)/n*1e6);
  return 0;}
