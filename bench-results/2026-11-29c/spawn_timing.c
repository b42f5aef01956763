#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <spawn.h>
extern char **environ;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
int main(int argc,char**argv){
  int n=atoi(argv[1]); double tot=0,mn=1e9;
  for(int i=0;i<n;i++){
    pid_t p; double t=now();
    char *a[]={argv[2],NULL};
    posix_spawn(&p,argv[2],NULL,NULL,a,environ);
    int st; waitpid(p,&st,0);
    double d=now()-t; tot+=d; if(d<mn)mn=d;
  }
  printf("%s: mean %.3f ms, min %.3f ms per spawn+exit\n",argv[2],tot/n,mn);
}
