// L3 residency: read A (a MB), stream N MB of B, re-read A; time of the re-read vs cold/warm.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static __m512i sink;
static void rd(const char *p,size_t n){__m512i s=_mm512_setzero_si512();for(size_t i=0;i<n;i+=256){s=_mm512_xor_si512(s,_mm512_load_si512(p+i));s=_mm512_xor_si512(s,_mm512_load_si512(p+i+64));s=_mm512_xor_si512(s,_mm512_load_si512(p+i+128));s=_mm512_xor_si512(s,_mm512_load_si512(p+i+192));}sink=_mm512_xor_si512(sink,s);}
int main(){size_t A=(size_t)2304<<10,BB=(size_t)1<<30;char*a=aligned_alloc(4096,A),*b=aligned_alloc(4096,BB);memset(a,1,A);memset(b,2,BB);
 size_t off=0;int Ns[]={0,1,2,4,8,12,16,24,32,64};
 for(int k=0;k<10;k++){double best=1e9,sum=0;int R=30;for(int r=0;r<R;r++){rd(a,A);size_t n=(size_t)Ns[k]<<20;if(off+n>BB)off=0;rd(b+off,n);off+=n;double t=now();rd(a,A);t=now()-t;sum+=t;if(t<best)best=t;}
  printf("stream %3d MB between: re-read 2.25 MB best %.1f us (%.1f GB/s) mean %.1f us\n",Ns[k],best*1e6,A/best/1e9,sum/R*1e6);}
 // cold reference
 double sum=0;for(int r=0;r<30;r++){if(off+(size_t)(300<<20)>BB)off=0;char*p=b+off;off+=300<<20;double t=now();rd(p,A);sum+=now()-t;}printf("cold (untouched 2.25 MB): mean %.1f us\n",sum/30*1e6);
 return 0;}
