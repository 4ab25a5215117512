// The engine's own kernels, compiled once at run time by gpurt's NVRTC (cached on
// disk with GPURT_RTC_CACHE_DIR): weight preparation, embedding, layer norm with the
// residual's pending bias, bias + GELU, the fused GEMV of one-row steps, attention over
// the KV cache, the greedy and top-k picks, and the bandwidth probe. Activations are
// fp32; T is the weights' and the GEMMs' type (float, or __half with fp32 accumulation).
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

// Programmatic dependent launch (compute capability 9.0; the model launches its step
// kernels with it): a kernel may start while the one before it in the stream ends. Each
// lets the next start at once, and waits for the one before it to finish before it
// touches activations; only the weights, which no step writes, are read before that
// (fused_gemv issues its weights' loads first). Launched without it, both are no-ops.
__device__ __forceinline__ void after_previous() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

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

// x[b] = wte[history[pos][b]] + wpe[pos - starts[b]] (row b's positions count from its
// first real token; its left padding takes position 0), one block per row. The position
// is read from device memory, so that one captured step serves every position.
template <class T>
__device__ void embed(const int *history, const int *position, const int *starts, const T *wte, const T *wpe, float *x) {
    int b = blockIdx.x, pos = *position;
    const T *w = wte + (size_t)history[(size_t)pos * gridDim.x + b] * E, *p = wpe + (size_t)max(pos - starts[b], 0) * E;
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

// The fused GEMV of a one-row step: y[j] = sum_i W[j][i] in[i] for j < out (W [out][in]
// in T, fp32 accumulation), where in is layer_norm(x) (x: fp32 [E], when g is set; each
// block normalises it itself, rounded to T as the library path's GEMM operand is),
// attention's output (when `attention` is set: its slices, which each block combines
// itself, see attend), or a T vector of n_in (E or 4 E). Then + bias (when set), GELU
// (when gelu), and y_f32 += (residual), y_f32 = (when y_f32 is set), or y_t = (as T).
// With `pick` (y_f32 set: the logits), also the greedy pick: each block leaves the
// largest of its outputs in pick[1 + 2 block], the last block to finish (pick[0], an
// unsigned counter, reset for the next step) writes the first index of the largest into
// history[position + 1] and advances the position.
// A step is latency-bound, so every warp takes E weights of one output row (a row of
// 4 E is 4 warps' of one block, summed in shared memory) and issues all their 16-byte
// loads at once, streamed past L1 (which keeps the input); a warp's first loads are in
// flight while its block prepares its input. This replaces, at one row, a library GEMV
// plus a layer norm, bias, GELU, attention's combining or greedy pick kernel.
#define GEMV_WARPS 4
#define SPLITS 8 // attention's slices per head (attend)
#define KV_BLOCK 32 // the KV cache's positions per block (model.hpp)

// The warp-wide largest (value, index) pair, ties to the lower index (torch.argmax's
// rule), in every lane.
__device__ void warp_argmax(float &best, int &index) {
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, index, o);
        if (ob > best || (ob == best && oi < index)) best = ob, index = oi;
    }
}

// The block-wide largest (value, index) pair, by warp_argmax's rule; the result is
// thread 0's. Synchronises.
__device__ void block_argmax(float &best, int &index) {
    __shared__ float bests[32];
    __shared__ int indices[32];
    warp_argmax(best, index);
    if ((threadIdx.x & 31) == 0) bests[threadIdx.x >> 5] = best, indices[threadIdx.x >> 5] = index;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (bests[w] > best || (bests[w] == best && indices[w] < index)) best = bests[w], index = indices[w];
    }
    __syncthreads();
}

// Attention's output for the one-row step, from attend's slices (one per head and
// split: max, sum of exponentials, weighted sum of v), rounded to T as attend's own
// combining writes it, into `combined` [E]; its loads are issued at once. Synchronises.
template <class T>
__device__ void combine_attention(const float *partial, float *combined) {
    __shared__ float scale[HEADS * SPLITS];
    constexpr int EACH = E / (32 * GEMV_WARPS), SLICE = HEAD_DIM + 2;
    float sums[EACH][SPLITS];
#pragma unroll
    for (int k = 0; k < EACH; k++) {
        const int i = threadIdx.x + k * 32 * GEMV_WARPS, h = i / HEAD_DIM, d = i % HEAD_DIM;
#pragma unroll
        for (int s = 0; s < SPLITS; s++) sums[k][s] = partial[(h * SPLITS + s) * SLICE + 2 + d];
    }
    // Thread h * SPLITS + s weighs slice s of head h; a head's SPLITS threads share a warp.
    const bool weighs = threadIdx.x < HEADS * SPLITS;
    float m = weighs ? partial[threadIdx.x * SLICE] : NEG_INF, l = weighs ? partial[threadIdx.x * SLICE + 1] : 0.0f, big = m;
    for (int o = SPLITS / 2; o > 0; o >>= 1) big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, o));
    const float w = m == NEG_INF ? 0.0f : __expf(m - big); // an empty slice adds nothing
    float total = l * w;
    for (int o = SPLITS / 2; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    if (weighs) scale[threadIdx.x] = w / total;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < EACH; k++) {
        const int i = threadIdx.x + k * 32 * GEMV_WARPS, h = i / HEAD_DIM;
        float value = 0;
        for (int s = 0; s < SPLITS; s++) value += sums[k][s] * scale[h * SPLITS + s];
        T rounded;
        from_f(rounded, value);
        combined[i] = to_f(rounded);
    }
    __syncthreads();
}

// The greedy pick across a one-row grid's blocks (fused_gemv's `pick`): each block's
// largest (value, index) goes into pick[1 + 2 block]; the last block picks among them
// (ties to the lower index, torch.argmax's rule), writes history[position + 1] and
// advances the position. Every thread of the block calls it.
__device__ void pick_greedy(float best, int index, float *pick, int *position, int *history) {
    __shared__ bool last;
    block_argmax(best, index);
    unsigned *counter = reinterpret_cast<unsigned *>(pick);
    float *slots = pick + 1;
    if (threadIdx.x == 0) {
        slots[2 * blockIdx.x] = best;
        slots[2 * blockIdx.x + 1] = __int_as_float(index);
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    best = NEG_INF, index = 0x7fffffff;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x) {
        const float v = __ldcg(slots + 2 * b); // from L2, where the fences left them
        const int i = __float_as_int(__ldcg(slots + 2 * b + 1));
        if (v > best || (v == best && i < index)) best = v, index = i;
    }
    block_argmax(best, index);
    if (threadIdx.x == 0) {
        const int p = *position;
        history[p + 1] = index;
        *position = p + 1;
        *counter = 0;
    }
}

template <class T, bool COMBINES> // COMBINES: attention's slices are the input (its own kernel: they take registers)
__device__ void fused_gemv(const T *w, const float *x, const T *g, const T *beta, const float *attention, const T *in, const T *bias, int gelu,
                           int residual, float *y_f32, T *y_t, int out, int n_in, float *pick, int *position, int *history) {
    __shared__ __align__(16) float normed[E];
    __shared__ float slice_sums[GEMV_WARPS];
    constexpr int VEC = 16 / sizeof(T), PER_LANE = E / VEC / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slices = n_in / E, per_block = GEMV_WARPS / slices, slice = warp % slices;
    int4 wv[PER_LANE];
    auto load = [&](int row) {
        const int4 *words = reinterpret_cast<const int4 *>(w + (size_t)row * n_in + slice * E);
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) wv[u] = __ldcs(words + u * 32 + lane);
    };
    int base = blockIdx.x * per_block;
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    if (base + warp / slices < out) load(base + warp / slices);
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    if (g) {
        // x, g and beta in registers, all loaded at once: one memory round trip.
        constexpr int EACH = E / (32 * GEMV_WARPS);
        float v[EACH], gv[EACH], bv[EACH], s = 0, d2 = 0;
#pragma unroll
        for (int k = 0; k < EACH; k++) {
            const int i = threadIdx.x + k * 32 * GEMV_WARPS;
            v[k] = x[i], gv[k] = to_f(g[i]), bv[k] = to_f(beta[i]);
        }
        for (int k = 0; k < EACH; k++) s += v[k];
        const float mean = block_sum(s) / E;
        for (int k = 0; k < EACH; k++) d2 += (v[k] - mean) * (v[k] - mean);
        const float inv = rsqrtf(block_sum(d2) / E + 1e-5f);
        for (int k = 0; k < EACH; k++) {
            T y;
            from_f(y, (v[k] - mean) * inv * gv[k] + bv[k]);
            normed[threadIdx.x + k * 32 * GEMV_WARPS] = to_f(y);
        }
        __syncthreads();
    }
    if (COMBINES) combine_attention<T>(attention, normed);
    float best = NEG_INF; // this thread's largest output so far (with pick)
    int best_index = 0x7fffffff;
    for (bool loaded = true; base < out; base += gridDim.x * per_block, loaded = false) { // block-uniform
        const int j = base + warp / slices;
        float acc = 0;
        if (j < out) {
            if (!loaded) load(j);
#pragma unroll
            for (int u = 0; u < PER_LANE; u++) {
                const int c = u * 32 + lane;
                const T *wt = reinterpret_cast<const T *>(&wv[u]);
                float xv[VEC];
                if (g || COMBINES) {
                    const float4 *src = reinterpret_cast<const float4 *>(normed + c * VEC);
                    for (int q = 0; q < VEC / 4; q++) {
                        float4 f = src[q];
                        xv[4 * q] = f.x, xv[4 * q + 1] = f.y, xv[4 * q + 2] = f.z, xv[4 * q + 3] = f.w;
                    }
                } else {
                    int4 raw = __ldg(reinterpret_cast<const int4 *>(in + slice * E) + c);
                    const T *xt = reinterpret_cast<const T *>(&raw);
                    for (int k = 0; k < VEC; k++) xv[k] = to_f(xt[k]);
                }
                for (int k = 0; k < VEC; k++) acc += to_f(wt[k]) * xv[k];
            }
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        }
        if (slices > 1) {
            if (lane == 0) slice_sums[warp] = acc;
            __syncthreads();
            if (slice == 0) for (int k = 1; k < slices; k++) acc += slice_sums[warp + k];
            __syncthreads();
        }
        if (j >= out || lane != 0 || slice != 0) continue;
        if (bias) acc += to_f(bias[j]);
        if (gelu) acc = 0.5f * acc * (1.0f + tanhf(0.7978845608028654f * (acc + 0.044715f * acc * acc * acc)));
        if (residual) y_f32[j] += acc;
        else if (y_f32) y_f32[j] = acc;
        else from_f(y_t[j], acc);
        if (acc > best) best = acc, best_index = j; // j rises: ties keep the first
    }
    if (pick) pick_greedy(best, best_index, pick, position, history);
}

// One decode step of attention, split over positions (flash-decoding): block
// (b, h, split) of SPLITS takes a slice of positions 0..pos for row b and head h, so
// that a step keeps rows x HEADS x SPLITS blocks busy instead of rows x HEADS. Each
// slice leaves its max, its sum of exponentials and its weighted sum of v in
// `partial`; with `done`, the last block of (b, h) to finish (a counter, reset for the
// next step) combines them into out, else the next kernel does (fused_gemv). Split 0 appends this position's k and v (with their bias)
// to the cache; every block takes them for position pos from qkv itself, so no block
// waits for that write. A thread takes a position's score, its 64 dims' loads issued
// at once (a slice has at most 128 positions, so each is one memory round trip); the
// weighted sum splits the slice's positions over the block's 2 groups of 64 threads.
// Row b attends to positions starts[b]..pos (its left padding is masked; a padding
// position attends to itself alone, so that its output stays finite).
// qkv: [rows][3 E] in T, before its bias; out: [rows][E] in T; caches: blocks of
// KV_BLOCK positions, [rows][HEADS][KV_BLOCK][HEAD_DIM] floats each, blocks
// block_stride floats apart (the cache grows by blocks); partial: [rows][HEADS]
// [SPLITS][HEAD_DIM + 2] floats.
template <class T>
__device__ void attend(const T *qkv, const T *bias, float *k_cache, float *v_cache, const int *position, const int *starts, long long block_stride, T *out,
                       float *partial, unsigned *done) {
    __shared__ __align__(16) float q[HEAD_DIM], k_new[HEAD_DIM], v_new[HEAD_DIM];
    __shared__ float scores[(1024 + SPLITS - 1) / SPLITS];
    __shared__ float reduce[32];
    __shared__ float sums[128];
    __shared__ bool last;
    int b = blockIdx.x, h = blockIdx.y, split = blockIdx.z, pos = *position;
    const T *row = qkv + (size_t)b * 3 * E;
    size_t base = ((size_t)b * HEADS + h) * KV_BLOCK * HEAD_DIM;
    // Where position t's HEAD_DIM floats start, from base.
    auto at = [&](int t) { return (size_t)(t / KV_BLOCK) * block_stride + (size_t)(t % KV_BLOCK) * HEAD_DIM; };
    for (int d = threadIdx.x; d < HEAD_DIM; d += blockDim.x) {
        int qi = h * HEAD_DIM + d, ki = E + qi, vi = 2 * E + qi;
        q[d] = to_f(row[qi]) + to_f(bias[qi]);
        k_new[d] = to_f(row[ki]) + to_f(bias[ki]);
        v_new[d] = to_f(row[vi]) + to_f(bias[vi]);
        if (split == 0) {
            k_cache[base + at(pos) + d] = k_new[d];
            v_cache[base + at(pos) + d] = v_new[d];
        }
    }
    __syncthreads();
    int start = min(starts[b], pos), chunk = (pos - start + SPLITS) / SPLITS, first = start + split * chunk, end = min(pos + 1, first + chunk);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float local_max = NEG_INF;
    for (int t = first + (int)threadIdx.x; t < end; t += blockDim.x) {
        const float4 *k = reinterpret_cast<const float4 *>(t == pos ? k_new : k_cache + base + at(t));
        float4 kv[HEAD_DIM / 4];
#pragma unroll
        for (int i = 0; i < HEAD_DIM / 4; i++) kv[i] = k[i]; // all in flight at once
        float s = 0;
#pragma unroll
        for (int i = 0; i < HEAD_DIM / 4; i++) s += q[4 * i] * kv[i].x + q[4 * i + 1] * kv[i].y + q[4 * i + 2] * kv[i].z + q[4 * i + 3] * kv[i].w;
        s *= 0.125f; // 1 / sqrt(HEAD_DIM)
        scores[t - first] = s;
        local_max = fmaxf(local_max, s);
    }
    for (int o = 16; o > 0; o >>= 1) local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, o));
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
#pragma unroll 8
    for (int t = first + group; t < end; t += groups) acc += scores[t - first] * (t == pos ? v_new[d] : v_cache[base + at(t) + d]);
    sums[threadIdx.x] = acc;
    __syncthreads();
    float *mine = partial + (((size_t)b * HEADS + h) * SPLITS + split) * (HEAD_DIM + 2);
    if (group == 0) {
        for (int g = 1; g < groups; g++) acc += sums[g * HEAD_DIM + d];
        mine[2 + d] = acc;
        if (d == 0) mine[0] = m, mine[1] = l;
    }
    if (!done) return; // the next kernel combines the slices (fused_gemv's `attention`)
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

#define FOR_TYPE(T, S) \
extern "C" __global__ void embed_##S(const int *history, const int *pos, const int *starts, const T *wte, const T *wpe, float *x) { after_previous(); embed<T>(history, pos, starts, wte, wpe, x); } \
extern "C" __global__ void layer_norm_##S(float *x, const T *bias, const T *g, const T *b, T *y) { after_previous(); layer_norm<T>(x, bias, g, b, y); } \
extern "C" __global__ void prepare_##S(const float *src, T *dst, int rows, int cols, int first, int count, int transpose) { prepare<T>(src, dst, rows, cols, first, count, transpose); } \
extern "C" __global__ void bias_gelu_##S(T *h, const T *bias, int rows, int cols) { after_previous(); bias_gelu<T>(h, bias, rows, cols); } \
extern "C" __global__ void fused_gemv_##S(const T *w, const float *x, const T *g, const T *beta, const float *attention, const T *in, const T *bias, int gelu, int residual, float *y_f32, T *y_t, int out, int n_in, float *pick, int *position, int *history) { fused_gemv<T, false>(w, x, g, beta, attention, in, bias, gelu, residual, y_f32, y_t, out, n_in, pick, position, history); } \
extern "C" __global__ void fused_gemv_attention_##S(const T *w, const float *x, const T *g, const T *beta, const float *attention, const T *in, const T *bias, int gelu, int residual, float *y_f32, T *y_t, int out, int n_in, float *pick, int *position, int *history) { fused_gemv<T, true>(w, x, g, beta, attention, in, bias, gelu, residual, y_f32, y_t, out, n_in, pick, position, history); } \
extern "C" __global__ void attend_##S(const T *qkv, const T *bias, float *k, float *v, const int *pos, const int *starts, long long block_stride, T *out, float *partial, unsigned *done) { after_previous(); attend<T>(qkv, bias, k, v, pos, starts, block_stride, out, partial, done); }
FOR_TYPE(float, f32)
FOR_TYPE(__half, f16)
extern "C" __global__ void advance(int *pos) { after_previous(); *pos += 1; }

// history[pos + 1][b] = the first index of the largest logit of row b. Block (b, part)
// of PICK_PARTS takes a slice of the row and leaves its pair in `values`/`indices`; the
// last to finish (a counter per row, reset for the next step) picks among them.
#define PICK_PARTS 32
extern "C" __global__ void argmax_rows(const float *logits, int vocab, const int *position, int *history, float *values, int *indices,
                                       unsigned *done) {
    after_previous();
    __shared__ bool last;
    int b = blockIdx.x, part = blockIdx.y, chunk = (vocab + PICK_PARTS - 1) / PICK_PARTS;
    const float *row = logits + (size_t)b * vocab;
    float best = NEG_INF;
    int index = 0x7fffffff;
    for (int i = part * chunk + threadIdx.x; i < min(vocab, (part + 1) * chunk); i += blockDim.x)
        if (row[i] > best) best = row[i], index = i;
    block_argmax(best, index);
    if (threadIdx.x == 0) {
        values[b * PICK_PARTS + part] = best;
        indices[b * PICK_PARTS + part] = index;
        __threadfence();
        last = atomicAdd(done + b, 1u) == PICK_PARTS - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x >= 32) return;
    __threadfence();
    best = ((volatile float *)values)[b * PICK_PARTS + threadIdx.x];
    index = ((volatile int *)indices)[b * PICK_PARTS + threadIdx.x];
    warp_argmax(best, index);
    if (threadIdx.x == 0) {
        history[(size_t)(*position + 1) * gridDim.x + b] = index;
        done[b] = 0;
    }
}

// Sums `words` 16-byte words (never true in practice: the sink keeps the reads): one
// streaming read of the weights times the step's bandwidth floor.
extern "C" __global__ void read_all(const int4 *p, size_t words, int *sink) {
    int acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += (size_t)gridDim.x * blockDim.x) {
        int4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;
}


// history[pos + 1][b] = a top-k sample of row b's logits with uniform[b] (the host
// reference is sampling.hpp's sample_top_k, step for step). One block per row: k
// block-wide argmax passes, each over the logits ordered after the previous pick.
extern "C" __global__ void sample_top_k(const float *logits, int vocab, int k, const float *uniform, const int *position, int *history) {
    after_previous();
    __shared__ float values[1024];
    __shared__ int indices[1024];
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
        block_argmax(best, index);
        if (threadIdx.x == 0) values[pick] = best, indices[pick] = index;
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
