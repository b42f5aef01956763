#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>
#include <sched.h>
#include <time.h>
#include <sys/wait.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int same = argc>1;
  int a[2],b[2]; pipe(a); pipe(b);
  int n=20000; char c=0;
  pid_t p=fork();
  cpu_set_t s; CPU_ZERO(&s); CPU_SET(p==0?1:(same?1:0),&s); sched_setaffinity(0,sizeof s,&s);
  if(p==0){ for(int i=0;i<n;i++){read(a[0],&c,1);write(b[1],&c,1);} _exit(0);}
  double t=now();
  for(int i=0;i<n;i++){write(a[1],&c,1);read(b[0],&c,1);}
  double e=now()-t; wait(0);
  printf("%s vCPU round trip: %.1f us\n", same?"same":"cross", e/n*1e6);
  t=now(); for(int i=0;i<1000000;i++) getppid(); printf("syscall: %.3f us\n",(now()-t));
}
