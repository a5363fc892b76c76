/* kv_read_pattern.c — how fast two threads read a decode step's K/V (qwen3-0.6b at a 576-token
 * context: 28 layers × K and V of 576 positions × 2 KB) in the orders attention could use,
 * pure reads, no compute; a 256 MiB read between iterations makes them cold (helper-54,
 * session 8; not part of kiln). Modes (t = thread 0/1):
 *   0  heads split (the decode kernel's item split): t reads bytes [t·1 KB, +1 KB) of each
 *      2 KB row, position after position
 *   1  heads split, per 32-position block head after head (the kernel's order)
 *   2  positions split: t reads positions [t·288, +288) whole, K then V, in address order
 *   3  positions split, per block head after head (KILN_ATTN_SEG items' order)
 *   4  one thread reads everything in address order
 *   5  as 3, each block first touched in address order (one load per line)
 *   6  as 3, the next block prefetched (prefetcht1) in address order at each block's start
 *   7  as 6, the first block too
 *   8  heads split, K and V head-major per 16-position block ([block][head][16][hd]), per 32
 *      positions head after head (each head's 4 KB of K and of V contiguous; session 38)
 *   9  positions split, the same layout and order (a block's K and V: two address-order runs)
 *  10  heads split, K and V head-major over the whole layer ([head][position][hd]): per 32
 *      positions head after head, 8 sequential streams a thread
 *  11  heads split, each thread's heads in a region of their own ([head group][position][heads of
 *      the group][hd]): per 32 positions its K then its V, 2 sequential streams a thread
 * Usage: kv_read_pattern MODE HUGE(0|1) ITERS
 * gcc -O2 -mavx512f -o kv_read_pattern bench/cpu/kv_read_pattern.c -lpthread */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <stdatomic.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
enum {NPOS=576, ROW=2048, NL=28};
static char *K[NL],*V[NL]; static int mode, pfd; static atomic_int go, fin; static volatile float sinkv;
static float readrows(const char *p,int n){__m512 s=_mm512_setzero_ps();for(int o=0;o<n;o+=64)s=_mm512_add_ps(s,_mm512_loadu_ps((const float*)(p+o)));return _mm512_reduce_add_ps(s);}
static float run(int t,int L){ float s=0; char *k=K[L],*v=V[L];
  if(mode==0){ for(int p=0;p<NPOS;p++){ if(pfd){__builtin_prefetch(k+(size_t)(p+pfd)*ROW+t*1024,0,2);} s+=readrows(k+(size_t)p*ROW+t*1024,1024); s+=readrows(v+(size_t)p*ROW+t*1024,1024);} }
  else if(mode==1){ for(int b=0;b<NPOS;b+=32) for(int h=0;h<4;h++){ for(int j=0;j<32;j++) s+=readrows(k+(size_t)(b+j)*ROW+t*1024+h*256,256); for(int j=0;j<32;j++) s+=readrows(v+(size_t)(b+j)*ROW+t*1024+h*256,256);} }
  else if(mode==3){ int p0=t*NPOS/2,p1=(t+1)*NPOS/2; for(int b=p0;b<p1;b+=32) for(int h=0;h<8;h++){ for(int j=0;j<32&&b+j<p1;j++) s+=readrows(k+(size_t)(b+j)*ROW+h*256,256); for(int j=0;j<32&&b+j<p1;j++) s+=readrows(v+(size_t)(b+j)*ROW+h*256,256);} }
  else if(mode==4){ if(t==0) for(int p=0;p<NPOS;p++){ s+=readrows(k+(size_t)p*ROW,2048); s+=readrows(v+(size_t)p*ROW,2048);} }
  else if(mode==5||mode==6||mode==7){ int p0=t*NPOS/2,p1=(t+1)*NPOS/2; for(int b=p0;b<p1;b+=32){ int e=b+32<p1?b+32:p1;
      if(mode==5){ for(int j=b;j<e;j++) for(int o=0;o<ROW;o+=64){ s+=k[(size_t)j*ROW+o]; } for(int j=b;j<e;j++) for(int o=0;o<ROW;o+=64){ s+=v[(size_t)j*ROW+o]; } }
      else { int nb=b+32, ne=nb+32<p1?nb+32:p1; if(mode==7&&b==p0){nb=b;ne=e;} for(int j=nb;j<ne;j++) for(int o=0;o<ROW;o+=64){ __builtin_prefetch(k+(size_t)j*ROW+o,0,2);} for(int j=nb;j<ne;j++) for(int o=0;o<ROW;o+=64){ __builtin_prefetch(v+(size_t)j*ROW+o,0,2);} }
      for(int h=0;h<8;h++){ for(int j=b;j<e;j++) s+=readrows(k+(size_t)j*ROW+h*256,256); for(int j=b;j<e;j++) s+=readrows(v+(size_t)j*ROW+h*256,256);} } }
  else if(mode==8){ /* heads split, K and V head-major per 16-position block ([block][head][16 x 128]): t reads heads [4t, 4t+4), per 32 positions head after head */
      for(int b=0;b<NPOS;b+=32) for(int h=4*t;h<4*t+4;h++) for(int q=0;q<2;q++){ size_t o=(size_t)(b/16+q)*16*ROW+(size_t)h*16*256; s+=readrows(k+o,4096); s+=readrows(v+o,4096);} }
  else if(mode==9){ /* positions split, the same layout, per 32 positions head after head (K and V of a block: two address-order runs) */
      int p0=t*NPOS/2,p1=(t+1)*NPOS/2; for(int b=p0;b<p1;b+=32) for(int h=0;h<8;h++) for(int q=0;q<2&&b+16*q<p1;q++){ size_t o=(size_t)(b/16+q)*16*ROW+(size_t)h*16*256; s+=readrows(k+o,4096); s+=readrows(v+o,4096);} }
  else if(mode==10){ /* heads split, K and V head-major over the whole layer ([head][position][hd]): per 32 positions head after head, each head one sequential stream */
      for(int b=0;b<NPOS;b+=32) for(int h=4*t;h<4*t+4;h++){ size_t o=((size_t)h*NPOS+b)*256; s+=readrows(k+o,32*256); s+=readrows(v+o,32*256);} }
  else if(mode==11){ /* heads split, each thread's 4 heads in a region of their own ([head group][position][4 heads x hd]): per 32 positions K then V, two sequential streams a thread */
      size_t hg=(size_t)t*NPOS*1024; for(int b=0;b<NPOS;b+=32){ s+=readrows(k+hg+(size_t)b*1024,32*1024); s+=readrows(v+hg+(size_t)b*1024,32*1024);} }
  else { int p0=t*NPOS/2,p1=(t+1)*NPOS/2; s+=readrows(k+(size_t)p0*ROW,(p1-p0)*ROW); s+=readrows(v+(size_t)p0*ROW,(p1-p0)*ROW);} 
  return s;}
static int iters; static double tt[2];
static void *thr(void*a){int t=(int)(long)a; for(int it=0;it<iters;it++){ while(atomic_load(&go)<=it); double t0=now(); float s=0; for(int L=0;L<NL;L++) s+=run(t,L); tt[t]+=now()-t0; sinkv+=s; atomic_fetch_add(&fin,1);} return 0;}
int main(int c,char**v){ mode=atoi(v[1]); int huge=atoi(v[2]); iters=atoi(v[3]); pfd=c>4?atoi(v[4]):0;
  size_t n=(size_t)NPOS*ROW; n=(n+(2<<20)-1)&~((size_t)(2<<20)-1);
  for(int L=0;L<NL;L++){K[L]=aligned_alloc(2<<20,n);V[L]=aligned_alloc(2<<20,n); if(huge){madvise(K[L],n,MADV_HUGEPAGE);madvise(V[L],n,MADV_HUGEPAGE);} memset(K[L],1,n);memset(V[L],1,n);}
  size_t cn=(size_t)256<<20; char*cb=malloc(cn); memset(cb,2,cn);
  pthread_t th; pthread_create(&th,0,thr,(void*)1L);
  for(int it=0;it<iters;it++){ float s=0; for(size_t i=0;i<cn;i+=64) s+=cb[i]; sinkv+=s; atomic_store(&go,it+1); double t0=now(); float s2=0; for(int L=0;L<NL;L++) s2+=run(0,L); tt[0]+=now()-t0; sinkv+=s2; while(atomic_load(&fin)<it+1); }
  pthread_join(th,0);
  double bytes=2.0*NPOS*ROW*NL; printf("mode %d huge %d pfd %d: t0 %.3f t1 %.3f ms per token (28 layers), %.1f GB/s\n",mode,huge,pfd,tt[0]/iters*1e3,tt[1]/iters*1e3,bytes/(tt[0]>tt[1]?tt[0]:tt[1])*iters/1e9);
}
