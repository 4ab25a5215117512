// The engine's own kernels, compiled once at run time by gpurt's NVRTC (cached on
// disk with GPURT_RTC_CACHE_DIR): weight preparation, embedding, layer norm with the
// residual's pending bias, bias + GELU, attention over the KV cache, and the greedy pick. Activations are fp32; T is the weights' and
// the GEMMs' type (float, or __half with fp32 accumulation in cuBLAS).
#pragma once

namespace gpt2 {

inline const char *kernel_source() {
    return R"CUDA(
#include <cuda_fp16.h>
#define E 768
#define HEADS 12
#define HEAD_DIM 64
#define NEG_INF __int_as_float(0xff800000)

__device__ inline float to_f(float x) { return x; }
__device__ inline float to_f(__half x) { return __half2float(x); }
__device__ inline void from_f(float &y, float x) { y = x; }
__device__ inline void from_f(__half &y, float x) { y = __float2half(x); }

// Block-wide sum over blockDim.x threads (a multiple of 32, at most 1024).
__device__ float block_sum(float v) {
    __shared__ float partial[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) total += partial[i];
    __syncthreads();
    return total;
}

// x[b] = wte[history[pos][b]] + wpe[pos], one block per row. The position is read
// from device memory, so that one captured step serves every position.
template <class T>
__device__ void embed(const int *history, const int *position, const T *wte, const T *wpe, float *x) {
    int b = blockIdx.x, pos = *position;
    const T *w = wte + (size_t)history[(size_t)pos * gridDim.x + b] * E, *p = wpe + (size_t)pos * E;
    for (int i = threadIdx.x; i < E; i += blockDim.x) x[(size_t)b * E + i] = to_f(w[i]) + to_f(p[i]);
}

// Adds the residual branch's pending bias to x[b] (when `bias` is set: the bias of the
// GEMM that last accumulated into x, folded in here), then y[b] = (x[b] - mean) /
// sqrt(var + 1e-5) * g + beta in T for the next GEMM; one block per row.
template <class T>
__device__ void layer_norm(float *x, const T *bias, const T *g, const T *beta, T *y) {
    // 256 threads, E / 256 = 3 elements each, held in registers: x is read once.
    float *row = x + (size_t)blockIdx.x * E;
    float v[E / 256], s = 0;
    for (int j = 0; j < E / 256; j++) {
        int i = threadIdx.x + j * 256;
        v[j] = row[i] + (bias ? to_f(bias[i]) : 0.0f);
        if (bias) row[i] = v[j];
        s += v[j];
    }
    float mean = block_sum(s) / E, d2 = 0;
    for (int j = 0; j < E / 256; j++) d2 += (v[j] - mean) * (v[j] - mean);
    float inv = rsqrtf(block_sum(d2) / E + 1e-5f);
    for (int j = 0; j < E / 256; j++) {
        int i = threadIdx.x + j * 256;
        from_f(y[(size_t)blockIdx.x * E + i], (v[j] - mean) * inv * to_f(g[i]) + to_f(beta[i]));
    }
}

// Rows [first, first + count) of a [rows][cols] fp32 tensor (src holds just those
// rows) into dst as T, transposed to [cols][rows] where `transpose` (transformers'
// Conv1D weights are [in][out]; the GEMMs read [out][in]).
template <class T>
__device__ void prepare(const float *src, T *dst, int rows, int cols, int first, int count, int transpose) {
    size_t n = (size_t)count * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = first + i / cols, c = i % cols;
        from_f(dst[transpose ? c * rows + r : r * cols + c], src[i]);
    }
}

// GPT-2's GELU (tanh form), in place, after the bias.
template <class T>
__device__ void bias_gelu(T *h, const T *bias, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = to_f(h[i]) + to_f(bias[i % cols]);
        from_f(h[i], 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))));
    }
}

// One decode step of attention, split over positions (flash-decoding): block
// (b, h, split) of SPLITS takes a slice of positions 0..pos for row b and head h, so
// that a step keeps rows x HEADS x SPLITS blocks busy instead of rows x HEADS. Each
// slice leaves its max, its sum of exponentials and its weighted sum of v in
// `partial`; the last block of (b, h) to finish (a counter, reset for the next step)
// combines them into out. Split 0 appends this position's k and v (with their bias)
// to the cache; every block takes them for position pos from qkv itself, so no block
// waits for that write. A warp takes a position's score (64 dims, coalesced); the
// weighted sum splits the slice's positions over the block's 2 groups of 64 threads.
// qkv: [rows][3 E] in T, before its bias; out: [rows][E] in T; caches: [rows][HEADS]
// [max_len][HEAD_DIM] floats; partial: [rows][HEADS][SPLITS][HEAD_DIM + 2] floats.
#define SPLITS 8
template <class T>
__device__ void attend(const T *qkv, const T *bias, float *k_cache, float *v_cache, const int *position, int max_len, T *out,
                       float *partial, unsigned *done) {
    __shared__ float q[HEAD_DIM], k_new[HEAD_DIM], v_new[HEAD_DIM];
    __shared__ float scores[(1024 + SPLITS - 1) / SPLITS];
    __shared__ float reduce[32];
    __shared__ float sums[128];
    __shared__ bool last;
    int b = blockIdx.x, h = blockIdx.y, split = blockIdx.z, pos = *position;
    const T *row = qkv + (size_t)b * 3 * E;
    size_t base = ((size_t)b * HEADS + h) * max_len * HEAD_DIM;
    for (int d = threadIdx.x; d < HEAD_DIM; d += blockDim.x) {
        int qi = h * HEAD_DIM + d, ki = E + qi, vi = 2 * E + qi;
        q[d] = to_f(row[qi]) + to_f(bias[qi]);
        k_new[d] = to_f(row[ki]) + to_f(bias[ki]);
        v_new[d] = to_f(row[vi]) + to_f(bias[vi]);
        if (split == 0) {
            k_cache[base + (size_t)pos * HEAD_DIM + d] = k_new[d];
            v_cache[base + (size_t)pos * HEAD_DIM + d] = v_new[d];
        }
    }
    __syncthreads();
    int chunk = (pos + SPLITS) / SPLITS, first = split * chunk, end = min(pos + 1, first + chunk);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float local_max = NEG_INF;
    for (int t = first + warp; t < end; t += warps) {
        const float *k = t == pos ? k_new : k_cache + base + (size_t)t * HEAD_DIM;
        float s = q[lane] * k[lane] + q[lane + 32] * k[lane + 32];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= 0.125f; // 1 / sqrt(HEAD_DIM)
        if (lane == 0) scores[t - first] = s;
        local_max = fmaxf(local_max, s);
    }
    if (lane == 0) reduce[warp] = local_max;
    __syncthreads();
    float m = NEG_INF;
    for (int i = 0; i < warps; i++) m = fmaxf(m, reduce[i]);
    float local_sum = 0;
    for (int t = first + (int)threadIdx.x; t < end; t += blockDim.x) {
        float e = __expf(scores[t - first] - m);
        scores[t - first] = e;
        local_sum += e;
    }
    float l = block_sum(local_sum); // synchronises: the exponentials are complete
    int d = threadIdx.x % HEAD_DIM, group = threadIdx.x / HEAD_DIM, groups = blockDim.x / HEAD_DIM;
    float acc = 0;
    for (int t = first + group; t < end; t += groups) acc += scores[t - first] * (t == pos ? v_new[d] : v_cache[base + (size_t)t * HEAD_DIM + d]);
    sums[threadIdx.x] = acc;
    __syncthreads();
    float *mine = partial + (((size_t)b * HEADS + h) * SPLITS + split) * (HEAD_DIM + 2);
    if (group == 0) {
        for (int g = 1; g < groups; g++) acc += sums[g * HEAD_DIM + d];
        mine[2 + d] = acc;
        if (d == 0) mine[0] = m, mine[1] = l;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *counter = done + (size_t)b * HEADS + h;
        last = atomicAdd(counter, 1u) == SPLITS - 1;
        if (last) *counter = 0; // ready for the next step's replay
    }
    __syncthreads();
    if (!last || threadIdx.x >= HEAD_DIM) return;
    __threadfence();
    const float *all = partial + ((size_t)b * HEADS + h) * SPLITS * (HEAD_DIM + 2);
    float big = NEG_INF;
    for (int s = 0; s < SPLITS; s++) big = fmaxf(big, ((volatile const float *)all)[s * (HEAD_DIM + 2)]);
    float total = 0, value = 0;
    for (int s = 0; s < SPLITS; s++) {
        const volatile float *p = all + s * (HEAD_DIM + 2);
        float w = p[0] == NEG_INF ? 0.0f : __expf(p[0] - big); // an empty slice adds nothing
        total += p[1] * w;
        value += p[2 + threadIdx.x] * w;
    }
    from_f(out[(size_t)b * E + h * HEAD_DIM + threadIdx.x], value / total);
}

// history[pos + 1][b] = the first index of the largest logit of row b (torch.argmax's tie rule).
__device__ void argmax(const float *logits, int vocab, const int *position, int *history) {
    const float *row = logits + (size_t)blockIdx.x * vocab;
    float best = NEG_INF;
    int index = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (row[i] > best) best = row[i], index = i;
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, index, o);
        if (ob > best || (ob == best && oi < index)) best = ob, index = oi;
    }
    __shared__ float bests[32];
    __shared__ int indices[32];
    if ((threadIdx.x & 31) == 0) bests[threadIdx.x >> 5] = best, indices[threadIdx.x >> 5] = index;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (bests[w] > best || (bests[w] == best && indices[w] < index)) best = bests[w], index = indices[w];
        history[(size_t)(*position + 1) * gridDim.x + blockIdx.x] = index;
    }
}

#define FOR_TYPE(T, S) \
extern "C" __global__ void embed_##S(const int *history, const int *pos, const T *wte, const T *wpe, float *x) { embed<T>(history, pos, wte, wpe, x); } \
extern "C" __global__ void layer_norm_##S(float *x, const T *bias, const T *g, const T *b, T *y) { layer_norm<T>(x, bias, g, b, y); } \
extern "C" __global__ void prepare_##S(const float *src, T *dst, int rows, int cols, int first, int count, int transpose) { prepare<T>(src, dst, rows, cols, first, count, transpose); } \
extern "C" __global__ void bias_gelu_##S(T *h, const T *bias, int rows, int cols) { bias_gelu<T>(h, bias, rows, cols); } \
extern "C" __global__ void attend_##S(const T *qkv, const T *bias, float *k, float *v, const int *pos, int max_len, T *out, float *partial, unsigned *done) { attend<T>(qkv, bias, k, v, pos, max_len, out, partial, done); }
FOR_TYPE(float, f32)
FOR_TYPE(__half, f16)
extern "C" __global__ void argmax_rows(const float *logits, int vocab, const int *pos, int *history) { argmax(logits, vocab, pos, history); }
extern "C" __global__ void advance(int *pos) { *pos += 1; }

// history[pos + 1][b] = a top-k sample of row b's logits with uniform[b] (the host
// reference is sampling.hpp's sample_top_k, step for step). One block per row: k
// block-wide argmax passes, each over the logits ordered after the previous pick.
extern "C" __global__ void sample_top_k(const float *logits, int vocab, int k, const float *uniform, const int *position, int *history) {
    __shared__ float values[1024];
    __shared__ int indices[1024];
    __shared__ float bests[32];
    __shared__ int best_indices[32];
    const float *row = logits + (size_t)blockIdx.x * vocab;
    float last = __int_as_float(0x7f800000); // +inf: everything is after it
    int last_index = -1;
    for (int pick = 0; pick < k; pick++) {
        float best = NEG_INF;
        int index = 0x7fffffff;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            float v = row[i];
            bool after = v < last || (v == last && i > last_index);
            if (after && (v > best || (v == best && i < index))) best = v, index = i;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, index, o);
            if (ob > best || (ob == best && oi < index)) best = ob, index = oi;
        }
        if ((threadIdx.x & 31) == 0) bests[threadIdx.x >> 5] = best, best_indices[threadIdx.x >> 5] = index;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < (int)(blockDim.x >> 5); w++)
                if (bests[w] > best || (bests[w] == best && best_indices[w] < index)) best = bests[w], index = best_indices[w];
            values[pick] = best;
            indices[pick] = index;
        }
        __syncthreads();
        last = values[pick];
        last_index = indices[pick];
    }
    if (threadIdx.x == 0) {
        float total = 0;
        for (int j = 0; j < k; j++) total += expf(values[j] - values[0]);
        float target = uniform[blockIdx.x] * total, running = 0;
        int chosen = indices[k - 1];
        for (int j = 0; j < k; j++) {
            running += expf(values[j] - values[0]);
            if (running >= target) { chosen = indices[j]; break; }
        }
        history[(size_t)(*position + 1) * gridDim.x + blockIdx.x] = chosen;
    }
}
)CUDA";
}

} // namespace gpt2
