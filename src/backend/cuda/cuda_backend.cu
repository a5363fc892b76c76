/* cuda_backend.cu — the CUDA backend: device memory, host-array staging and the op vtable.
 *
 * Activations are f32 device buffers (alloc/upload/download). Weights are uploaded once in
 * their stored format by prepare_weight; w->device points at a small host struct holding
 * the device pointers (dweight_t). Integer arrays (positions, slots, block tables) and the
 * RoPE frequencies arrive as host pointers: they are copied into a pinned ring and sent
 * down on the op stream, so the copy is ordered with the kernels that read it. The ring
 * restarts after each download (which synchronizes), so a step never waits on it.
 * Trade-off: one stream. Small steps are captured into CUDA graphs launched in segments, so
 * the GPU runs the first layers while the host records the rest (docs/cuda.md, "CUDA
 * graphs"); the host still records and updates every step's graph, and the next step's host
 * work does not overlap the current step's tail. */
#include <string.h>
#include <time.h>
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/xprep.cuh"
#include "backend/cuda/widen_word.h" /* widen_target_bits: the policy */

void cuda_fail(cudaError_t err, const char *what, const char *file, int line) {
    const char *hint = "";
    if (err == cudaErrorMemoryAllocation) hint = " (hint: the model or KV cache does not fit; lower --kv-cache-gb or use a quantized checkpoint)";
    else if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction)
        hint = " (hint: this build targets sm_90a (H100/H200); rebuild with -gencode for your GPU)";
    else if (err == cudaErrorInsufficientDriver) hint = " (hint: the NVIDIA driver is older than the CUDA runtime kiln was built with)";
    else if (err == cudaErrorNoDevice) hint = " (hint: no GPU visible; check CUDA_VISIBLE_DEVICES)";
    fprintf(stderr, "kiln cuda: %s failed at %s:%d: %s%s\n", what, file, line, cudaGetErrorString(err), hint);
    abort();
}

void cublas_fail(cublasStatus_t st, const char *what, const char *file, int line) {
    const char *hint = st == CUBLAS_STATUS_NOT_SUPPORTED ? " (hint: no cuBLASLt algorithm for this shape/type combination)" : "";
    fprintf(stderr, "kiln cuda: %s failed at %s:%d: cuBLAS status %d%s\n", what, file, line, (int)st, hint);
    abort();
}

void *cuda_scratch(cuda_impl_t *c, void **buf, size_t *have, size_t need) {
    if (need <= *have) return *buf;
    cuda_sync(c); /* the old buffer may still be read */
    cudaCheck(cudaFree(*buf));
    size_t n = need + need / 4;
    cudaCheck(cudaMalloc(buf, n));
    *have = n;
    return *buf;
}

/* --- CUDA graphs --- */
/* Every graph launch and instantiation of the process (the tests check that a step ran as a graph) */
extern "C" long kiln_cuda_graph_launches, kiln_cuda_graph_instantiations;
long kiln_cuda_graph_launches, kiln_cuda_graph_instantiations;

void cuda_capture_flush(cuda_impl_t *c) {
    if (!c->capturing) return;
    cudaGraph_t g = NULL;
    c->capturing = 0;
    cudaCheck(cudaStreamEndCapture(c->stream, &g));
    size_t nodes = 0;
    cudaCheck(cudaGraphGetNodes(g, NULL, &nodes));
    if (nodes) {
        int slot = -1;
        for (int i = 0; i < c->n_gx; i++)
            if (c->gx[i].T == c->cap_T && c->gx[i].seg == c->seg && c->gx[i].nodes == nodes && (c->gx[i].sig == c->cap_sig || !c->graph_sig)) slot = i;
        if (slot >= 0) {
            cudaGraphExecUpdateResultInfo info;
            if (cudaGraphExecUpdate(c->gx[slot].exec, g, &info) != cudaSuccess) {
                cudaGetLastError();
                cudaCheck(cudaGraphExecDestroy(c->gx[slot].exec));
                cudaCheck(cudaGraphInstantiate(&c->gx[slot].exec, g, 0));
                c->graph_instantiations++;
                kiln_cuda_graph_instantiations++;
            }
        } else {
            const int cap = (int)(sizeof c->gx / sizeof c->gx[0]);
            if (c->n_gx < cap) slot = c->n_gx++;
            else {
                slot = c->next_gx;
                c->next_gx = (c->next_gx + 1) % cap;
                cudaCheck(cudaGraphExecDestroy(c->gx[slot].exec));
            }
            c->gx[slot].T = c->cap_T;
            c->gx[slot].seg = c->seg;
            c->gx[slot].nodes = nodes;
            c->gx[slot].sig = c->cap_sig;
            cudaCheck(cudaGraphInstantiate(&c->gx[slot].exec, g, 0));
            c->graph_instantiations++;
            kiln_cuda_graph_instantiations++;
        }
        cudaCheck(cudaGraphLaunch(c->gx[slot].exec, c->stream));
        c->graph_launches++;
        kiln_cuda_graph_launches++;
    }
    cudaCheck(cudaGraphDestroy(g));
}

void cuda_sync(cuda_impl_t *c) {
    cuda_capture_flush(c);
    cudaCheck(cudaStreamSynchronize(c->stream));
}

/* A step of T tokens starts: capture it when it is small (decode, up to 64 rows; cuBLASLt
 * calls are captured too unless KILN_CUDA_GRAPH_GEMM=0). */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cu_step_begin(backend_t *be, int n_tokens, int n_rows) {
    cuda_impl_t *c = cuda_impl(be);
    (void)n_rows;
    c->step_T = n_tokens;
    c->in_stat = c->stats_T > 0 && n_tokens == c->stats_T;
    if (c->in_stat) {
        c->st_begin = now_s();
        if (c->st_end > 0) c->st_outside += c->st_begin - c->st_end;
        c->st_n++;
    }
    c->st_end = 0;
    cuda_capture_flush(c);
    c->cap_T = 0;
    if (!c->graphs || n_tokens <= 0 || n_tokens > 64 || (n_tokens >= c->gemm_min_t_bf16 && !c->graph_gemm)) return;
    cudaCheck(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    c->capturing = 1;
    c->cap_sig = 0;
    c->cap_T = n_tokens;
    c->seg = 0;
    c->seg_ops = 0;
}

/* Segment boundary: what was captured runs now (asynchronously) while the host records the
 * rest. Trade-off: one graph launch and one exec update per segment instead of per step,
 * against a GPU that otherwise idles until the whole step is recorded. */
void cuda_capture_tick(cuda_impl_t *c) {
    if (!c->capturing || c->seg_len <= 0) return;
    int len = c->seg_len;
    if (c->seg_first > 0 && c->seg < 16 && ((long)c->seg_first << c->seg) < len) len = c->seg_first << c->seg;
    if (++c->seg_ops < len) return;
    cuda_capture_flush(c);
    cudaCheck(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    c->capturing = 1;
    c->cap_sig = 0;
    c->seg++;
    c->seg_ops = 0;
}

/* The step's ops are all issued: whatever is still captured runs now. */
static void cu_step_end(backend_t *be) { cuda_capture_flush(cuda_impl(be)); }

/* After a synchronization: the other ring becomes current (its last uploads were read by
 * work that has completed) and the current one keeps its bytes for the pointers already
 * handed out (see cuda_impl_t). */
static void ring_reset(cuda_impl_t *c) {
    char *p = c->pin, *d = c->dring;
    size_t cap = c->ring_cap;
    c->pin = c->pin_alt, c->dring = c->dring_alt, c->ring_cap = c->ring_cap_alt;
    c->pin_alt = p, c->dring_alt = d, c->ring_cap_alt = cap;
    c->ring_off = 0;
    c->n_recent = 0;
    c->next_recent = 0;
}

const void *cuda_host_to_dev(cuda_impl_t *c, const void *host, size_t bytes) {
    if (!bytes) return c->dring;
    for (int i = 0; i < c->n_recent; i++)
        if (c->recent[i].host == host && c->recent[i].bytes == bytes && !memcmp(c->pin + c->recent[i].off, host, bytes))
            return c->dring + c->recent[i].off;
    size_t need = (bytes + 255) & ~(size_t)255;
    if (c->ring_off + need > c->ring_cap) {
        /* everything sent so far must have landed before the other ring is reused; the
         * current one keeps this op's earlier uploads (once was: on growth the ring they
         * were in was freed, and a wrap could overwrite them, before their kernel ran) */
        cuda_sync(c);
        ring_reset(c);
        if (need > c->ring_cap) { /* the ring now current holds nothing still needed */
            cudaCheck(cudaFreeHost(c->pin));
            cudaCheck(cudaFree(c->dring));
            c->ring_cap = need * 2;
            cudaCheck(cudaMallocHost((void **)&c->pin, c->ring_cap));
            cudaCheck(cudaMalloc((void **)&c->dring, c->ring_cap));
        }
    }
    size_t off = c->ring_off;
    memcpy(c->pin + off, host, bytes);
    cudaCheck(cudaMemcpyAsync(c->dring + off, c->pin + off, bytes, cudaMemcpyHostToDevice, c->stream));
    c->ring_off += need;
    int slot = c->next_recent;
    c->recent[slot].host = host;
    c->recent[slot].bytes = bytes;
    c->recent[slot].off = off;
    c->next_recent = (slot + 1) % 16;
    if (c->n_recent < 16) c->n_recent++;
    return c->dring + off;
}

void *cuda_host_buf(cuda_impl_t *c, int which, size_t need) {
    if (need > c->host_scratch_bytes[which]) {
        free(c->host_scratch[which]);
        c->host_scratch_bytes[which] = need * 2;
        c->host_scratch[which] = (char *)malloc(c->host_scratch_bytes[which]);
        if (!c->host_scratch[which]) { fprintf(stderr, "kiln cuda: out of host memory (%zu bytes)\n", need * 2); abort(); }
    }
    return c->host_scratch[which];
}

/* row_start [n_rows+1] and the row pointers [n_rows] in one host buffer, one copy */
const char *cuda_rows_to_dev(cuda_impl_t *c, int n_rows, const int32_t *row_start, float *const *ptrs, size_t *ptr_off) {
    size_t rb = (sizeof(int32_t) * (size_t)(n_rows + 1) + 15) & ~(size_t)15, pb = sizeof(float *) * (size_t)n_rows;
    char *hb = (char *)cuda_host_buf(c, 1, rb + pb);
    memset(hb, 0, rb);
    memcpy(hb, row_start, sizeof(int32_t) * (n_rows + 1));
    memcpy(hb + rb, ptrs, pb);
    *ptr_off = rb;
    return (const char *)cuda_host_to_dev(c, hb, rb + pb);
}

/* bytes to allocate for n: whole 16-byte words (see dev_copy), 256 for none */
static size_t dev_bytes(size_t n) { return n ? (n + 15) & ~(size_t)15 : 256; }

static void *cu_alloc(backend_t *be, size_t n) {
    void *p = NULL;
    cuda_capture_flush(cuda_impl(be)); /* buffers (re)allocated mid-step end the capture */
    const size_t cap = dev_bytes(n);
    if (cudaMalloc(&p, cap) != cudaSuccess) { cudaGetLastError(); return NULL; }
    cudaCheck(cudaMemsetAsync(p, 0, cap, cuda_impl(be)->stream));
    return p;
}

static void cu_free(backend_t *be, void *p) {
    if (!p) return;
    cuda_sync(cuda_impl(be));
    cudaCheck(cudaFree(p));
}

static void *cu_upload(backend_t *be, const void *host, size_t n) {
    void *p = cu_alloc(be, n);
    if (p && n) cudaCheck(cudaMemcpyAsync(p, host, n, cudaMemcpyHostToDevice, cuda_impl(be)->stream));
    if (p) cuda_sync(cuda_impl(be)); /* host may be freed at once */
    return p;
}

static void cu_download(backend_t *be, void *host, const void *src, size_t n) {
    cuda_impl_t *c = cuda_impl(be);
    cuda_defer_flush(c);   /* a matmul's deferred split sums (matmul_wgmma.cu) land before anything is read */
    cuda_capture_flush(c); /* the step's graph runs first; the copy to the host is not captured */
    const double t0 = c->in_stat ? now_s() : 0;
    if (n) cudaCheck(cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, c->stream));
    cuda_sync(c);
    ring_reset(c);
    if (c->in_stat) { /* per download: a MoE step's router downloads count as waits too */
        const double t1 = now_s();
        c->st_issue += t0 - c->st_begin;
        c->st_wait += t1 - t0;
        c->st_begin = c->st_end = t1;
    }
}

/* A weight's bytes to new device memory, on the backend's stream. Not cudaMemcpy: from pageable
 * memory it returns once the bytes are staged, before the DMA has landed, and on the legacy
 * stream, which the backend's non-blocking stream does not wait for — a kernel could read the
 * weight before it arrived (seen as a rare wrong result under load, test_cuda_hybrid).
 * The allocation is rounded up to 16 bytes and the tail zeroed: kernels read a 16-bit scale or
 * bias through its aligned 32-bit word (matmul_qmma.cu's cp.async of 4 bytes, the GEMVs' word
 * loads), so a tensor with an odd count of them has its last word reach 2 bytes past its end —
 * never a fault (cudaMalloc hands out 256-byte granules), but outside the allocation: reported by
 * compute-sanitizer memcheck (session 48), and not a read the memory model allows. */
static void *dev_copy(cuda_impl_t *c, const void *host, size_t n, err_t *e, const char *what) {
    void *p = NULL;
    const size_t cap = dev_bytes(n);
    if (cudaMalloc(&p, cap) != cudaSuccess) {
        cudaGetLastError();
        err_set(e, "cuda: out of device memory uploading %s (%.1f MB)", what, n / 1e6);
        return NULL;
    }
    if (cap > n) cudaCheck(cudaMemsetAsync((char *)p + n, 0, cap - n, c->stream));
    cudaCheck(cudaMemcpyAsync(p, host, n, cudaMemcpyHostToDevice, c->stream));
    cudaCheck(cudaStreamSynchronize(c->stream));
    return p;
}

void cuda_widen_codes(cuda_impl_t *c, uint32_t *out, const uint32_t *in, int rows, int cols, int b, int nb);

/* The width a quantized weight's codes get on the device (widen.cu): 2/3 → 4 and 5/6 → 8 bits, so the 4/8-bit
 * kernels take them (session 51, H100: llama-3-8b batch-1 decode q3 69 → 358 tok/s, q6 70 → 248). KILN_CUDA_WIDEN,
 * read per weight: unset or 1 (the default) widens where the widened codes fit with an eighth of the card still free
 * after them, so a model picked at 2/3 bits to fit a small card keeps its stored width where it must; 2 whenever the
 * allocation succeeds; 0 never (the stored width and its slower kernels). */
static int widen_bits(cuda_impl_t *c, const weight_t *w) {
    const int b = weight_is_quantized(w) ? w->bits : 0;
    if (b == 0 || b == 4 || b == 8) return w->bits;
    const char *mode = getenv("KILN_CUDA_WIDEN");
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { cudaGetLastError(); return w->bits; }
    const int nb = widen_target_bits(b, mode, fr, tot, (size_t)w->rows, (size_t)w->cols);
    if (nb == b) { /* warned when memory decided it: with room without bound the policy would widen */
        if (widen_target_bits(b, mode, SIZE_MAX, tot, (size_t)w->rows, (size_t)w->cols) != b && !c->widen_kept_said++)
            log_warn("cuda: widening a %d-bit weight would leave under an eighth of the card free: it and later ones like it "
                     "keep their stored width and decode on a slower path (KILN_CUDA_WIDEN=2 widens them while they fit)", b);
        return b;
    }
    if (!c->widen_said++)
        log_info("cuda: %d-bit codes widened to %d-bit on the device at load (the same weights, more memory; the fast %d-bit "
                 "kernels take them; KILN_CUDA_WIDEN=0 keeps the stored width)", b, nb, nb);
    return nb;
}

extern "C" int cuda_weight_device_bits(const weight_t *w) {
    const dweight_t *d = (const dweight_t *)w->device;
    return d ? d->bits : 0;
}

static int cu_prepare_weight(backend_t *be, weight_t *w, err_t *e) {
    cuda_impl_t *c = cuda_impl(be);
    if (weight_is_quantized(w)) {
        if (w->bits < 2 || w->bits > 8 || w->bits == 7)
            return err_set(e, "cuda: %d-bit weights are not supported (2, 3, 4, 5, 6, 8)", w->bits);
        if (w->group % 32 || w->cols % 32)
            return err_set(e, "cuda: quantized weight [%d, %d] with group %d: columns and group must be multiples of 32",
                           w->rows, w->cols, w->group);
    }
    dweight_t *d = (dweight_t *)calloc(1, sizeof *d);
    d->rows = w->rows; d->cols = w->cols; d->dtype = w->dtype; d->bits = w->bits; d->hbits = w->bits; d->group = w->group; d->sb_dtype = w->sb_dtype;
    const int q = weight_is_quantized(w);
    const size_t hrow = q ? (size_t)w->cols / 32 * w->bits * 4 : (size_t)w->cols * dtype_size(w->dtype); /* host bytes a row */
    d->data_bytes = hrow * w->rows;
    d->sb_bytes = q ? (size_t)w->rows * (w->cols / w->group) * dtype_size(w->sb_dtype) : 0;
    d->h_data = w->data;
    d->h_scales = w->scales;
    d->h_biases = w->biases;
    /* rows of a weight already on the device (searched newest first: the parent was just
     * prepared): a view into its copy, no second upload — at the parent's device width */
    for (int i = c->n_weights - 1; i >= 0 && i >= c->n_weights - 4096; i--) {
        const dweight_t *p = c->weights[i];
        const char *hd = (const char *)w->data, *pd = (const char *)p->h_data;
        if (p->alias || !p->rows || p->dtype != d->dtype || p->cols != d->cols || p->hbits != d->hbits || p->group != d->group ||
            p->sb_dtype != d->sb_dtype)
            continue;
        const size_t phost = hrow * p->rows; /* the parent's host bytes */
        if (hd < pd || hd + d->data_bytes > pd + phost) continue;
        const size_t off = (size_t)(hd - pd);
        if (q) { /* whole rows of codes and their scales; the device copy may be wider (widen.cu) */
            const char *hs = (const char *)w->scales, *ps = (const char *)p->h_scales;
            const size_t soff = (size_t)(hs - ps), drow = p->data_bytes / p->rows;
            if (off % hrow || hs < ps || hs + d->sb_bytes > ps + p->sb_bytes || (const char *)w->biases - (const char *)p->h_biases != (ptrdiff_t)soff)
                continue;
            if (off / hrow * (d->sb_bytes / d->rows) != soff) continue; /* same rows of codes and scales */
            d->scales = (const char *)p->scales + soff;
            d->biases = (const char *)p->biases + soff;
            d->bits = p->bits;
            d->data_bytes = drow * d->rows;
            d->data = (const char *)p->data + off / hrow * drow;
        } else
            d->data = (const char *)p->data + off;
        d->alias = 1;
        w->device = d;
        goto keep;
    }
    if (q) {
        size_t codes = d->data_bytes, sb = d->sb_bytes;
        const int nb = widen_bits(c, w);
        if (!(d->data = dev_copy(c, w->data, codes, e, "quantized codes")) || !(d->scales = dev_copy(c, w->scales, sb, e, "scales")) ||
            !(d->biases = dev_copy(c, w->biases, sb, e, "biases"))) {
            cudaFree((void *)d->data); cudaFree((void *)d->scales); free(d);
            return -1;
        }
        if (nb != w->bits) { /* widen.cu: the codes at nb bits replace the stored ones (an allocation failure keeps those) */
            const size_t wide = (size_t)w->rows * w->cols / 8 * nb;
            void *p = NULL;
            if (cudaMalloc(&p, dev_bytes(wide)) == cudaSuccess) {
                if (dev_bytes(wide) > wide) cudaCheck(cudaMemsetAsync((char *)p + wide, 0, dev_bytes(wide) - wide, c->stream));
                cuda_widen_codes(c, (uint32_t *)p, (const uint32_t *)d->data, w->rows, w->cols, w->bits, nb);
                cudaCheck(cudaStreamSynchronize(c->stream));
                cudaFree((void *)d->data);
                d->data = p;
                d->bits = nb;
                d->data_bytes = wide;
            } else {
                cudaGetLastError();
                if (!c->widen_kept_said++)
                    log_warn("cuda: no room to widen a %d-bit weight: it and later ones that do not fit keep their stored width "
                             "and decode on a slower path", w->bits);
            }
        }
    } else if (!(d->data = dev_copy(c, w->data, d->data_bytes, e, "a dense weight"))) {
        free(d);
        return -1;
    }
keep:
    if (c->n_weights == c->cap_weights) {
        c->cap_weights = c->cap_weights ? 2 * c->cap_weights : 64;
        c->weights = (dweight_t **)realloc(c->weights, sizeof(dweight_t *) * c->cap_weights);
    }
    c->weights[c->n_weights++] = d;
    w->device = d;
    return 0;
}

static void cu_release_weight(backend_t *be, weight_t *w) {
    cuda_impl_t *c = cuda_impl(be);
    dweight_t *d = (dweight_t *)w->device;
    if (!d) return;
    for (int i = 0; i < c->n_weights; i++) {
        if (c->weights[i] != d) continue;
        /* the list stays in preparation order: prepare_weight searches it newest first */
        memmove(&c->weights[i], &c->weights[i + 1], sizeof(dweight_t *) * (size_t)(c->n_weights - i - 1));
        c->n_weights--;
        if (d->qd_wpart || d->qd_f16 || !d->alias) cuda_sync(c); /* a kernel still reading it */
        cudaFree(d->qd_wpart);
        if (d->qd_f16) c->qdc_used -= dweight_f16_bytes(d);
        cudaFree(d->qd_f16);
        if (!d->alias) {
            cudaFree((void *)d->data);
            cudaFree((void *)d->scales);
            cudaFree((void *)d->biases);
        }
        free(d);
        break;
    }
    w->device = NULL;
}

static int cu_mem_info(backend_t *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) { cudaGetLastError(); return -1; }
    return 0;
}

size_t cuda_qdeq_cache_plan(cuda_impl_t *c, double gb); /* matmul_dequant.cu */
static size_t cu_weight_cache(backend_t *be, double gb) { return cuda_qdeq_cache_plan(cuda_impl(be), gb); }

static const backend_ops_t cuda_ops = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .prepare_weight = cu_prepare_weight,
    .release_weight = cu_release_weight,
    .matmul = cuda_matmul,
    .rms_norm = cuda_rms_norm,
    .rope = cuda_rope,
    .glu = cuda_glu,
    .add = cuda_add,
    .add_bias = cuda_add_bias,
    .gather_rows = cuda_gather_rows,
    .embed = cuda_embed,
    .kv_write = cuda_kv_write,
    .attention = cuda_attention,
    .conv1d_causal = cuda_conv1d_causal,
    .gated_delta = cuda_gated_delta,
    .sigmoid_mul = cuda_sigmoid_mul,
    .scale = cuda_scale,
    .add_rows_scaled = cuda_add_rows_scaled,
    .step_begin = cu_step_begin,
    .step_end = cu_step_end,
    .sample = cuda_sample,
    .add_rms_norm = cuda_add_rms_norm,
    .rope_kv_write = cuda_rope_kv_write,
    .norm_rope_kv_attention = cuda_norm_rope_kv_attention,
    .matmul_multi = cuda_matmul_multi,
    .moe_route = cuda_moe_route,
    .moe_experts = cuda_moe_experts,
    .matmul_glu = cuda_tc_matmul_glu,
    .matmul_add = cuda_tc_matmul_add,
    .rms_matmul_multi = cuda_tc_rms_matmul_multi,
    .rms_matmul_glu = cuda_tc_rms_matmul_glu,
    .rms_mlp = cuda_rms_mlp,
    .delta_decode = cuda_delta_decode,
    .post_norm_add = cuda_post_norm_add,
    .mem_info = cu_mem_info, /* kv_k_transposed (between them) stays NULL */
    .weight_cache = cu_weight_cache,
};


/* --- KILN_CUDA_PROFILE=1: GPU time per op kind in batch-1 decode steps (events around every op, synchronizing;
 * graphs off), printed at destroy. For finding where a step's time goes, not for speed. --- */
enum { P_MATMUL, P_RMS, P_ROPE, P_GLU, P_ADD, P_BIAS, P_GATHER, P_EMBED, P_KVW, P_ATTN, P_CONV, P_DELTA, P_SIGMUL, P_N };
static const char *prof_names[P_N] = {"matmul", "rms_norm", "rope", "glu", "add", "add_bias", "gather_rows", "embed", "kv_write", "attention",
                                      "conv1d", "gated_delta", "sigmoid_mul"};
static double prof_ms[P_N];
static int prof_T = 1;
static long prof_n[P_N];
static cudaEvent_t prof_e0, prof_e1;
static void prof_begin(backend_t *be) {
    if (!prof_e0) { cudaCheck(cudaEventCreate(&prof_e0)); cudaCheck(cudaEventCreate(&prof_e1)); }
    cudaCheck(cudaEventRecord(prof_e0, cuda_impl(be)->stream));
}
static void prof_end(backend_t *be, int i) {
    float ms = 0;
    cudaCheck(cudaEventRecord(prof_e1, cuda_impl(be)->stream));
    cudaCheck(cudaEventSynchronize(prof_e1));
    cudaCheck(cudaEventElapsedTime(&ms, prof_e0, prof_e1));
    if (cuda_impl(be)->step_T != prof_T) return; /* steps of KILN_CUDA_PROFILE tokens only (1: batch-1 decode) */
    prof_ms[i] += ms;
    prof_n[i]++;
}
#define PROF(i, call) do { prof_begin(be); call; prof_end(be, i); } while (0)
static void p_matmul(backend_t *be, float *y, const float *x, int T, const weight_t *w) { PROF(P_MATMUL, cuda_matmul(be, y, x, T, w)); }
static void p_rms(backend_t *be, float *y, const float *x, const float *w, float o, int T, int n, float eps) { PROF(P_RMS, cuda_rms_norm(be, y, x, w, o, T, n, eps)); }
static void p_rope(backend_t *be, float *x, const int32_t *pos, int T, int nh, int hd, int rot, const float *inv, float ms) { PROF(P_ROPE, cuda_rope(be, x, pos, T, nh, hd, rot, inv, ms)); }
static void p_glu(backend_t *be, float *y, const float *g, const float *u, size_t n, act_t act) { PROF(P_GLU, cuda_glu(be, y, g, u, n, act)); }
static void p_add(backend_t *be, float *y, const float *x, size_t n) { PROF(P_ADD, cuda_add(be, y, x, n)); }
static void p_bias(backend_t *be, float *y, const float *b, int T, int n) { PROF(P_BIAS, cuda_add_bias(be, y, b, T, n)); }
static void p_gather(backend_t *be, float *y, const float *x, const int32_t *idx, int n, int w) { PROF(P_GATHER, cuda_gather_rows(be, y, x, idx, n, w)); }
static void p_embed(backend_t *be, float *y, const int32_t *ids, int T, const weight_t *w, float s) { PROF(P_EMBED, cuda_embed(be, y, ids, T, w, s)); }
static void p_kvw(backend_t *be, const kv_view_t *kv, const float *k, const float *v, const int32_t *sl, int T) { PROF(P_KVW, cuda_kv_write(be, kv, k, v, sl, T)); }
static void p_attn(backend_t *be, float *out, const float *q, int T, const attn_args_t *a) { PROF(P_ATTN, cuda_attention(be, out, q, T, a)); }
static void p_conv(backend_t *be, float *y, const float *x, int nr, const int32_t *rs, float *const *st, const float *w, int C, int K, act_t act) {
    PROF(P_CONV, cuda_conv1d_causal(be, y, x, nr, rs, st, w, C, K, act));
}
static void p_delta(backend_t *be, float *out, const float *qkv, const float *a, const float *b, int T, const struct delta_args *d) {
    PROF(P_DELTA, cuda_gated_delta(be, out, qkv, a, b, T, d));
}
static void p_sigmul(backend_t *be, float *y, const float *g, int T, int n, int gw) { PROF(P_SIGMUL, cuda_sigmoid_mul(be, y, g, T, n, gw)); }
static backend_ops_t cuda_prof_ops;

extern "C" backend_t *cuda_backend_create(const char *name, int n_threads, err_t *e) {
    int f32 = !strcmp(name, "cuda-f32");
    if (!f32 && strcmp(name, "cuda")) {
        err_set(e, "backend '%s' is not available (cpu, cpu-ref, cuda, cuda-f32)", name);
        return NULL;
    }
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        err_set(e, "cuda: no usable GPU (%s)", err != cudaSuccess ? cudaGetErrorString(err) : "no devices");
        return NULL;
    }
    backend_t *be = (backend_t *)calloc(1, sizeof *be);
    cuda_impl_t *c = (cuda_impl_t *)calloc(1, sizeof *c);
    be->ops = &cuda_ops;
    const char *penv = getenv("KILN_CUDA_PROFILE");
    const int profile = penv && strcmp(penv, "0");
    if (profile) {
        prof_T = atoi(penv) > 0 ? atoi(penv) : 1;
        cuda_prof_ops = cuda_ops;
        cuda_prof_ops.matmul = p_matmul; cuda_prof_ops.rms_norm = p_rms; cuda_prof_ops.rope = p_rope; cuda_prof_ops.glu = p_glu;
        cuda_prof_ops.add = p_add; cuda_prof_ops.add_bias = p_bias; cuda_prof_ops.gather_rows = p_gather; cuda_prof_ops.embed = p_embed;
        cuda_prof_ops.kv_write = p_kvw; cuda_prof_ops.attention = p_attn;
        cuda_prof_ops.conv1d_causal = p_conv; cuda_prof_ops.gated_delta = p_delta; cuda_prof_ops.sigmoid_mul = p_sigmul;
        cuda_prof_ops.add_rms_norm = NULL; cuda_prof_ops.rope_kv_write = NULL; cuda_prof_ops.norm_rope_kv_attention = NULL; /* timed as the separate ops */
        cuda_prof_ops.matmul_multi = NULL; cuda_prof_ops.matmul_glu = NULL;
        cuda_prof_ops.matmul_add = NULL; cuda_prof_ops.rms_matmul_multi = NULL; cuda_prof_ops.rms_matmul_glu = NULL; cuda_prof_ops.rms_mlp = NULL;
        cuda_prof_ops.delta_decode = NULL; cuda_prof_ops.post_norm_add = NULL;
        be->ops = &cuda_prof_ops;
    }
    const char *fenv = getenv("KILN_CUDA_FUSE"); /* =0: no fused ops (the models call the separate ones; A/B) */
    if (!profile && fenv && !strcmp(fenv, "0")) {
        static backend_ops_t nofuse;
        nofuse = cuda_ops;
        nofuse.add_rms_norm = NULL; nofuse.rope_kv_write = NULL; nofuse.matmul_glu = NULL; nofuse.norm_rope_kv_attention = NULL;
        nofuse.matmul_add = NULL; nofuse.rms_matmul_multi = NULL; nofuse.rms_matmul_glu = NULL; nofuse.rms_mlp = NULL;
        nofuse.delta_decode = NULL; nofuse.post_norm_add = NULL;
        be->ops = &nofuse;
    }
    be->impl = c;
    be->n_threads = 1;
    int dev = 0;
    cudaCheck(cudaSetDevice(dev));
    cudaCheck(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, dev));
    int optin = 0;
    cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    c->smem_optin = (size_t)optin;
    cudaCheck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    /* KILN_CUDA_CACHE_CONFIG=shared|l1|equal (diagnosis, default: the driver's choice per kernel): the device's
     * L1 / shared-memory split preference — kernels overlapped by PDL can share an SM only where its split holds both */
    const char *ccenv = getenv("KILN_CUDA_CACHE_CONFIG");
    if (ccenv && *ccenv) {
        const cudaFuncCache cc = !strcmp(ccenv, "shared") ? cudaFuncCachePreferShared : !strcmp(ccenv, "l1") ? cudaFuncCachePreferL1
                                 : !strcmp(ccenv, "equal")  ? cudaFuncCachePreferEqual : cudaFuncCachePreferNone;
        if (cudaDeviceSetCacheConfig(cc) != cudaSuccess) cudaGetLastError();
    }
    cublasCheck(cublasLtCreate(&c->lt));
    c->lt_workspace_bytes = 64u << 20;
    cudaCheck(cudaMalloc(&c->lt_workspace, c->lt_workspace_bytes));
    c->ring_cap = c->ring_cap_alt = 4u << 20;
    cudaCheck(cudaMallocHost((void **)&c->pin, c->ring_cap));
    cudaCheck(cudaMalloc((void **)&c->dring, c->ring_cap));
    cudaCheck(cudaMallocHost((void **)&c->pin_alt, c->ring_cap_alt));
    cudaCheck(cudaMalloc((void **)&c->dring_alt, c->ring_cap_alt));
    c->gemm_min_t = f32 ? 0x7fffffff : KILN_CUDA_GEMM_MIN_T_DEFAULT;
    const char *genv = getenv("KILN_CUDA_GRAPH");
    c->graphs = !(genv && !strcmp(genv, "0")) && !profile;
    const char *sgenv = getenv("KILN_CUDA_GRAPH_SIG"); /* =0: the graph key without cap_sig — session 32's crash, for the test that must catch it */
    c->graph_sig = !(sgenv && !strcmp(sgenv, "0"));
    const char *ggenv = getenv("KILN_CUDA_GRAPH_GEMM");
    c->graph_gemm = !(ggenv && !strcmp(ggenv, "0"));
    const char *senv = getenv("KILN_CUDA_GRAPH_SEG");
    c->seg_len = senv ? atoi(senv) : 16;
    const char *sfenv = getenv("KILN_CUDA_GRAPH_SEG_FIRST");
    c->seg_first = sfenv ? atoi(sfenv) : 2; /* 0: every segment seg_len long, as before session 14 */
    const char *stenv = getenv("KILN_CUDA_STEP_STATS");
    c->stats_T = stenv ? atoi(stenv) : 0;
    const char *aenv = getenv("KILN_CUDA_ATTN");
    c->attn_tiled = aenv && !strcmp(aenv, "tiled");
    const char *awenv = getenv("KILN_CUDA_ATTN_WANT");
    c->attn_want = awenv && atoi(awenv) > 0 ? atoi(awenv) : 2;
    const char *env = getenv("KILN_CUDA_GEMM_MIN_T");
    if (env && !f32) c->gemm_min_t = atoi(env) > 0 ? atoi(env) : 0x7fffffff;
    const char *benv = getenv("KILN_CUDA_GEMM_MIN_T_BF16");
    c->gemm_min_t_bf16 = f32 ? 0x7fffffff : benv ? (atoi(benv) > 0 ? atoi(benv) : 0x7fffffff) : KILN_CUDA_GEMM_MIN_T_BF16_DEFAULT;
    if (c->gemm_min_t_bf16 > c->gemm_min_t) c->gemm_min_t_bf16 = c->gemm_min_t;
    const char *actenv = getenv("KILN_CUDA_ACT");
    c->act_bf16 = actenv && !strcmp(actenv, "bf16") ? 1 : actenv && !strcmp(actenv, "split") ? 0 : -1;
    const char *dqenv = getenv("KILN_CUDA_QDEQ");
    c->deq_bf16 = dqenv && !strcmp(dqenv, "bf16") ? 1 : dqenv && !strcmp(dqenv, "f32") ? 0 : -1;
    const char *qenv = getenv("KILN_CUDA_QMMA");
    c->qmma = f32 ? 0 : qenv ? atoi(qenv) : KILN_CUDA_QMMA_MIN_T_DEFAULT; /* the fewest tokens that take it; 0: never */
    const char *mcenv = getenv("KILN_CUDA_MM_CONC"); /* matmul_multi's GEMMs side by side from this many tokens (matmul.cu) */
    c->mm_conc_min_t = f32 || !mcenv ? 0 : atoi(mcenv); /* opt-in: measured slower on qwen3-0.6b prefill (session 18) */
    const char *qmenv = getenv("KILN_CUDA_QMMA_MAX_T");
    c->qmma_max_t = qmenv && atoi(qmenv) > 0 ? atoi(qmenv) : 64;
    if (!f32) cuda_xp_init(be); /* x prepared by its producer for the q4/q8 GEMV (xprep.cu, KILN_CUDA_XPREP) */
#ifdef KILN_CUDA_TIMELINE
    cuda_timeline_start(); /* KILN_CUDA_TIMELINE=FILE: every PDL kernel's block waits (timeline.cuh) */
#endif
    return be;
}

extern "C" void cuda_backend_destroy(backend_t *be) {
    if (!be) return;
    cuda_impl_t *c = cuda_impl(be);
    cuda_sync(c);
#ifdef KILN_CUDA_TIMELINE
    cuda_timeline_dump();
#endif
    for (int i = 0; i < c->n_weights; i++) {
        cudaFree(c->weights[i]->qd_wpart);
        cudaFree(c->weights[i]->qd_f16);
        if (c->weights[i]->alias) { free(c->weights[i]); continue; }
        cudaFree((void *)c->weights[i]->data);
        cudaFree((void *)c->weights[i]->scales);
        cudaFree((void *)c->weights[i]->biases);
        free(c->weights[i]);
    }
    for (int i = 0; i < c->n_gx; i++) cudaGraphExecDestroy(c->gx[i].exec);
    if (cuda_xp_base(be) == &cuda_prof_ops) {
        for (int i = 0; i < P_N; i++)
            if (prof_n[i]) fprintf(stderr, "kiln cuda profile: %-12s %8ld calls %10.3f ms  %7.2f us/call\n", prof_names[i], prof_n[i], prof_ms[i], 1e3 * prof_ms[i] / prof_n[i]);
        memset(prof_ms, 0, sizeof prof_ms);
        memset(prof_n, 0, sizeof prof_n);
    }
    if (c->st_n)
        fprintf(stderr, "kiln cuda: %ld steps of %d tokens: host issuing %.3f ms, waiting for the GPU + logits copy %.3f ms, between steps %.3f ms (means)\n",
                c->st_n, c->stats_T, 1e3 * c->st_issue / c->st_n, 1e3 * c->st_wait / c->st_n, 1e3 * c->st_outside / (c->st_n > 1 ? c->st_n - 1 : 1));
    if (getenv("KILN_CUDA_GRAPH_STATS"))
        fprintf(stderr, "kiln cuda: %ld graph launches, %ld instantiations\n", c->graph_launches, c->graph_instantiations);
    free(c->weights);
    cuda_moe_free(c);
    cuda_xp_free(c);
    for (int i = 0; i < c->n_side; i++) {
        cudaStreamDestroy(c->side[i]);
        cudaEventDestroy(c->ev_join[i]);
        cudaFree(c->side_ws[i]);
    }
    if (c->n_side) cudaEventDestroy(c->ev_fork);
    cudaFree(c->mlp_gu); cudaFree(c->mlp16); cudaFree(c->qdf); cudaFree(c->mlp_g); cudaFree(c->mlp_ctr);
    cudaFree(c->act16); cudaFree(c->ysplit); cudaFree(c->wdeq); cudaFree(c->part); cudaFree(c->qpart); cudaFree(c->delta); cudaFree(c->lt_workspace); cudaFree(c->dring);
    cudaFree(c->dring_alt);
    cudaFreeHost(c->pin);
    cudaFreeHost(c->pin_alt);
    free(c->host_scratch[0]);
    free(c->host_scratch[1]);
    cublasLtDestroy(c->lt);
    cudaStreamDestroy(c->stream);
    free(c);
    free(be);
}

extern "C" const char *cuda_backend_kernel_name(const backend_t *be) {
    const cuda_impl_t *c = (const cuda_impl_t *)be->impl;
    return c->gemm_min_t == 0x7fffffff ? "cuda-f32" : "cuda";
}
