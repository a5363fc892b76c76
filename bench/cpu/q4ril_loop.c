/* q4ril_loop.c — the q4ril decode tile's inner loop (matmul_q4ril_avx512.c, q4r_tile1) alone, on data
 * in L1: how many cycles a 64-byte code word costs with no memory in the way (session 38; not part of
 * kiln). Variants: 0 as in kiln (six digit chains, one vpdpbusd with an m32{1to16} x operand each, a
 * prefetch a word); 1 the same without the prefetch; 2 two tiles sharing register broadcasts of x (12
 * chains); 3 two words a turn into twelve chains (fused broadcasts). Cycles assume 3.4 GHz (this VM's
 * FMA peak, kiln-probe, 434 GFLOP/s on 2 threads).
 * gcc -O2 -mavx512f -mavx512bw -mavx512vnni -o /tmp/q4k bench/cpu/q4ril_loop.c */
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
typedef int32_t i32a __attribute__((may_alias));
static inline __m512i dpb(__m512i acc, __m512i u, const int8_t *p){ __asm__("vpdpbusd %2%{1to16%}, %1, %0":"+v"(acc):"v"(u),"m"(*(const i32a*)p)); return acc; }
#define NW 64
static uint8_t codes[2][NW*64] __attribute__((aligned(64)));
static int8_t xd[NW*24] __attribute__((aligned(64)));
__attribute__((noinline)) __m512i runA(const uint8_t *c, const int8_t *xw, int pf){
  const __m512i m4=_mm512_set1_epi8(15);
  __m512i a0l=_mm512_setzero_si512(),a0h=a0l,a1l=a0l,a1h=a0l,a2l=a0l,a2h=a0l;
  for(int i=0;i<NW;i++,c+=64,xw+=24){
    if(pf) _mm_prefetch((const char*)c+8192,_MM_HINT_T0);
    __m512i v=_mm512_loadu_si512(c); __m512i lo=_mm512_and_si512(v,m4), hi=_mm512_and_si512(_mm512_srli_epi16(v,4),m4);
    a0l=dpb(a0l,lo,xw); a0h=dpb(a0h,hi,xw+4); a1l=dpb(a1l,lo,xw+8); a1h=dpb(a1h,hi,xw+12); a2l=dpb(a2l,lo,xw+16); a2h=dpb(a2h,hi,xw+20);
  }
  return _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0l,a0h),_mm512_add_epi32(a1l,a1h)),_mm512_add_epi32(a2l,a2h));
}
/* two tiles share register broadcasts */
__attribute__((noinline)) __m512i runC(const uint8_t *c, const uint8_t *c2, const int8_t *xw){
  const __m512i m4=_mm512_set1_epi8(15);
  __m512i a0l=_mm512_setzero_si512(),a0h=a0l,a1l=a0l,a1h=a0l,a2l=a0l,a2h=a0l, b0l=a0l,b0h=a0l,b1l=a0l,b1h=a0l,b2l=a0l,b2h=a0l;
  for(int i=0;i<NW;i++,c+=64,c2+=64,xw+=24){
    __m512i v=_mm512_loadu_si512(c), u=_mm512_loadu_si512(c2);
    __m512i lo=_mm512_and_si512(v,m4), hi=_mm512_and_si512(_mm512_srli_epi16(v,4),m4);
    __m512i lo2=_mm512_and_si512(u,m4), hi2=_mm512_and_si512(_mm512_srli_epi16(u,4),m4);
    __m512i x0=_mm512_set1_epi32(*(const i32a*)xw), x1=_mm512_set1_epi32(*(const i32a*)(xw+4)), x2=_mm512_set1_epi32(*(const i32a*)(xw+8));
    __m512i x3=_mm512_set1_epi32(*(const i32a*)(xw+12)), x4=_mm512_set1_epi32(*(const i32a*)(xw+16)), x5=_mm512_set1_epi32(*(const i32a*)(xw+20));
    a0l=_mm512_dpbusd_epi32(a0l,lo,x0); a0h=_mm512_dpbusd_epi32(a0h,hi,x1); a1l=_mm512_dpbusd_epi32(a1l,lo,x2); a1h=_mm512_dpbusd_epi32(a1h,hi,x3); a2l=_mm512_dpbusd_epi32(a2l,lo,x4); a2h=_mm512_dpbusd_epi32(a2h,hi,x5);
    b0l=_mm512_dpbusd_epi32(b0l,lo2,x0); b0h=_mm512_dpbusd_epi32(b0h,hi2,x1); b1l=_mm512_dpbusd_epi32(b1l,lo2,x2); b1h=_mm512_dpbusd_epi32(b1h,hi2,x3); b2l=_mm512_dpbusd_epi32(b2l,lo2,x4); b2h=_mm512_dpbusd_epi32(b2h,hi2,x5);
  }
  return _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0l,a0h),_mm512_add_epi32(a1l,a1h)),_mm512_add_epi32(_mm512_add_epi32(a2l,a2h),_mm512_add_epi32(_mm512_add_epi32(b0l,b0h),_mm512_add_epi32(_mm512_add_epi32(b1l,b1h),_mm512_add_epi32(b2l,b2h)))));
}
__attribute__((noinline)) __m512i runD(const uint8_t *c, const int8_t *xw){
  const __m512i m4=_mm512_set1_epi8(15);
  __m512i a0l=_mm512_setzero_si512(),a0h=a0l,a1l=a0l,a1h=a0l,a2l=a0l,a2h=a0l, b0l=a0l,b0h=a0l,b1l=a0l,b1h=a0l,b2l=a0l,b2h=a0l;
  for(int i=0;i<NW;i+=2,c+=128,xw+=48){
    __m512i v=_mm512_loadu_si512(c), u=_mm512_loadu_si512(c+64);
    __m512i lo=_mm512_and_si512(v,m4), hi=_mm512_and_si512(_mm512_srli_epi16(v,4),m4);
    __m512i lo2=_mm512_and_si512(u,m4), hi2=_mm512_and_si512(_mm512_srli_epi16(u,4),m4);
    a0l=dpb(a0l,lo,xw); a0h=dpb(a0h,hi,xw+4); a1l=dpb(a1l,lo,xw+8); a1h=dpb(a1h,hi,xw+12); a2l=dpb(a2l,lo,xw+16); a2h=dpb(a2h,hi,xw+20);
    b0l=dpb(b0l,lo2,xw+24); b0h=dpb(b0h,hi2,xw+28); b1l=dpb(b1l,lo2,xw+32); b1h=dpb(b1h,hi2,xw+36); b2l=dpb(b2l,lo2,xw+40); b2h=dpb(b2h,hi2,xw+44);
  }
  return _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0l,a0h),_mm512_add_epi32(a1l,a1h)),_mm512_add_epi32(_mm512_add_epi32(a2l,a2h),_mm512_add_epi32(_mm512_add_epi32(b0l,b0h),_mm512_add_epi32(_mm512_add_epi32(b1l,b1h),_mm512_add_epi32(b2l,b2h)))));
}
/* the floor: 6 vpdpbusd a word on registers, 12 chains (the asm keeps each chain's op in place) */
__attribute__((noinline)) __m512i runE(__m512i lo, __m512i hi, __m512i x0, __m512i x1){
  __m512i a[12]; for(int k=0;k<12;k++) a[k]=_mm512_setzero_si512();
  for(int i=0;i<NW;i+=2){
#pragma GCC unroll 12
    for(int k=0;k<12;k++){ __asm__ volatile("" :: "v"(a[k])); a[k]=_mm512_dpbusd_epi32(a[k],(k&1)?hi:lo,(k&2)?x1:x0); }
  }
  __m512i s=a[0]; for(int k=1;k<12;k++) s=_mm512_add_epi32(s,a[k]); return s;
}
/* the nibble planes alone */
__attribute__((noinline)) __m512i runH(const uint8_t *c){
  const __m512i m4=_mm512_set1_epi8(15); __m512i s=_mm512_setzero_si512(), t=s;
  for(int i=0;i<NW;i++,c+=64){ __m512i v=_mm512_loadu_si512(c); s=_mm512_xor_si512(s,_mm512_and_si512(v,m4)); t=_mm512_xor_si512(t,_mm512_and_si512(_mm512_srli_epi16(v,4),m4)); }
  return _mm512_add_epi32(s,t);
}
int main(){
  for(int i=0;i<NW*64;i++) codes[0][i]=i*7, codes[1][i]=i*13; for(int i=0;i<NW*24;i++) xd[i]=i*3;
  long R=2000000; __m512i s=_mm512_setzero_si512();
  for(int v=0;v<6;v++){ double t0=now();
    for(long r=0;r<R;r++){ if(v==0) s=_mm512_add_epi32(s,runA(codes[0],xd,1)); else if(v==1) s=_mm512_add_epi32(s,runA(codes[0],xd,0)); else if(v==2) s=_mm512_add_epi32(s,runC(codes[0],codes[1],xd)); else if(v==3) s=_mm512_add_epi32(s,runD(codes[0],xd));
      else if(v==4) s=_mm512_add_epi32(s,runE(s,_mm512_set1_epi32((int)r),_mm512_set1_epi32(0x01020304),_mm512_set1_epi32(0x05060708))); else s=_mm512_add_epi32(s,runH(codes[0])); }
    double dt=now()-t0; double words=(double)R*NW*(v==2?2:1);
    printf("variant %d: %.2f ns/word = %.2f cycles @3.4GHz, %.1f GB/s\n", v, dt/words*1e9, dt/words*3.4e9, words*64/dt/1e9);
  }
  printf("%d\n", _mm512_reduce_add_epi32(s)&1);
}
