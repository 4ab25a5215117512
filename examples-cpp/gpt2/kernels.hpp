// The engine's own kernels, compiled once at run time by gpurt's NVRTC (cached on
// disk with GPURT_RTC_CACHE_DIR): embedding, layer norm, bias, GELU, attention over
// the KV cache, and the greedy pick. Activations are fp32; T is the weights' and
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

// x[b] = wte[token[b]] + wpe[pos], one block per row.
template <class T>
__device__ void embed(const int *tokens, int pos, const T *wte, const T *wpe, float *x) {
    int b = blockIdx.x;
    const T *w = wte + (size_t)tokens[b] * E, *p = wpe + (size_t)pos * E;
    for (int i = threadIdx.x; i < E; i += blockDim.x) x[(size_t)b * E + i] = to_f(w[i]) + to_f(p[i]);
}

// y[b] = (x[b] - mean) / sqrt(var + 1e-5) * g + beta, in T for the next GEMM; one block per row.
template <class T>
__device__ void layer_norm(const float *x, const T *g, const T *beta, T *y) {
    const float *row = x + (size_t)blockIdx.x * E;
    float s = 0;
    for (int i = threadIdx.x; i < E; i += blockDim.x) s += row[i];
    float mean = block_sum(s) / E;
    float v = 0;
    for (int i = threadIdx.x; i < E; i += blockDim.x) { float d = row[i] - mean; v += d * d; }
    float inv = rsqrtf(block_sum(v) / E + 1e-5f);
    for (int i = threadIdx.x; i < E; i += blockDim.x)
        from_f(y[(size_t)blockIdx.x * E + i], (row[i] - mean) * inv * to_f(g[i]) + to_f(beta[i]));
}

// y[b][j] += bias[j] over rows x cols (y: the residual stream or a GEMM's output).
template <class T, class Y>
__device__ void add_bias(Y *y, const T *bias, int rows, int cols) {
    size_t n = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        from_f(y[i], to_f(y[i]) + to_f(bias[i % cols]));
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

// One decode step of attention for row b and head h (block (b, h), 128 threads):
// appends this position's k and v to the cache, then softmax(q k^T / 8) v over
// positions 0..pos. qkv: [rows][3 E] in T (after its bias); out: [rows][E] in T.
// Cache: [rows][HEADS][max_len][HEAD_DIM] floats for k and for v.
template <class T>
__device__ void attend(const T *qkv, float *k_cache, float *v_cache, int pos, int max_len, T *out) {
    extern __shared__ float scores[]; // pos + 1 floats
    __shared__ float q[HEAD_DIM];
    int b = blockIdx.x, h = blockIdx.y;
    const T *row = qkv + (size_t)b * 3 * E;
    size_t base = ((size_t)b * HEADS + h) * max_len * HEAD_DIM;
    for (int d = threadIdx.x; d < HEAD_DIM; d += blockDim.x) {
        q[d] = to_f(row[h * HEAD_DIM + d]);
        k_cache[base + (size_t)pos * HEAD_DIM + d] = to_f(row[E + h * HEAD_DIM + d]);
        v_cache[base + (size_t)pos * HEAD_DIM + d] = to_f(row[2 * E + h * HEAD_DIM + d]);
    }
    __syncthreads();
    float local_max = NEG_INF;
    for (int t = threadIdx.x; t <= pos; t += blockDim.x) {
        const float *k = k_cache + base + (size_t)t * HEAD_DIM;
        float s = 0;
        for (int d = 0; d < HEAD_DIM; d++) s += q[d] * k[d];
        s *= 0.125f; // 1 / sqrt(HEAD_DIM)
        scores[t] = s;
        local_max = fmaxf(local_max, s);
    }
    __shared__ float reduce[32];
    for (int o = 16; o > 0; o >>= 1) local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, o));
    if ((threadIdx.x & 31) == 0) reduce[threadIdx.x >> 5] = local_max;
    __syncthreads();
    float m = NEG_INF;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) m = fmaxf(m, reduce[i]);
    __syncthreads();
    float local_sum = 0;
    for (int t = threadIdx.x; t <= pos; t += blockDim.x) {
        float e = __expf(scores[t] - m);
        scores[t] = e;
        local_sum += e;
    }
    float inv = 1.0f / block_sum(local_sum); // block_sum synchronises: scores are complete
    // Threads split as HEAD_DIM dimensions x (blockDim.x / HEAD_DIM) position groups.
    int d = threadIdx.x % HEAD_DIM, group = threadIdx.x / HEAD_DIM, groups = blockDim.x / HEAD_DIM;
    float acc = 0;
    for (int t = group; t <= pos; t += groups) acc += scores[t] * v_cache[base + (size_t)t * HEAD_DIM + d];
    __shared__ float partial[1024];
    partial[threadIdx.x] = acc;
    __syncthreads();
    if (group == 0) {
        for (int g = 1; g < groups; g++) acc += partial[g * HEAD_DIM + d];
        from_f(out[(size_t)b * E + h * HEAD_DIM + d], acc * inv);
    }
}

// next[b] = the first index of the largest logit of row b (torch.argmax's tie rule).
__device__ void argmax(const float *logits, int vocab, int *next) {
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
        next[blockIdx.x] = index;
    }
}

#define FOR_TYPE(T, S) \
extern "C" __global__ void embed_##S(const int *tokens, int pos, const T *wte, const T *wpe, float *x) { embed<T>(tokens, pos, wte, wpe, x); } \
extern "C" __global__ void layer_norm_##S(const float *x, const T *g, const T *b, T *y) { layer_norm<T>(x, g, b, y); } \
extern "C" __global__ void add_bias_##S(float *y, const T *bias, int rows, int cols) { add_bias<T, float>(y, bias, rows, cols); } \
extern "C" __global__ void add_bias_t_##S(T *y, const T *bias, int rows, int cols) { add_bias<T, T>(y, bias, rows, cols); } \
extern "C" __global__ void bias_gelu_##S(T *h, const T *bias, int rows, int cols) { bias_gelu<T>(h, bias, rows, cols); } \
extern "C" __global__ void attend_##S(const T *qkv, float *k, float *v, int pos, int max_len, T *out) { attend<T>(qkv, k, v, pos, max_len, out); }
FOR_TYPE(float, f32)
FOR_TYPE(__half, f16)
extern "C" __global__ void to_half(const float *x, __half *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) y[i] = __float2half(x[i]);
}
extern "C" __global__ void argmax_rows(const float *logits, int vocab, int *next) { argmax(logits, vocab, next); }
)CUDA";
}

} // namespace gpt2
