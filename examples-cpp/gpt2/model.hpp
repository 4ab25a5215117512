// GPT-2 (the 124M configuration) on gpurt: weights read from safetensors straight
// into device memory, a KV cache from a memory pool of its own, GEMMs through
// gpurt's cuBLAS handle, the other kernels from kernels.hpp.
#pragma once

#include <gpurt.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "safetensors.hpp"

namespace gpt2 {

constexpr int kLayers = 12, kEmbed = 768, kHeads = 12, kVocab = 50257, kPositions = 1024;

enum class Precision { F32, F16 };

class Model {
public:
    /** Loads `path` (transformers' GPT2LMHeadModel names, F32) onto `stream`'s device. */
    Model(const std::string &path, Precision precision, const gpurt::Stream &stream);

    /** Room for `rows` sequences of up to `max_len` positions; clears the cache. */
    void reserve(int rows, int max_len);
    /** One position for every row: `tokens` (device, `rows` ints) at position `pos`;
     *  leaves the logits (device, rows x kVocab floats) in logits(). */
    void step(const int *tokens, int pos);
    /** The greedy pick of each row's logits into `next` (device, rows ints). */
    void argmax(int *next);

    const float *logits() const { return logits_.data(); }
    int rows() const { return rows_; }
    Precision precision() const { return precision_; }
    const gpurt::Stream &stream() const { return stream_; }

private:
    struct Layer {
        const void *ln1_g, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b, *ln2_g, *ln2_b, *fc_w, *fc_b, *fc_proj_w, *fc_proj_b;
    };
    void gemm(const void *w, const void *x, void *y, int out, int in, float beta, bool y_fp32, bool transpose_w = false);
    const char *suffix() const { return precision_ == Precision::F32 ? "_f32" : "_f16"; }
    gpurt::Kernel kernel(const std::string &name) const;

    Precision precision_;
    const gpurt::Stream &stream_;
    size_t elem_;                     // bytes per weight / GEMM operand
    gpurt::DeviceBuffer<char> weights_;
    const void *wte_ = nullptr, *wpe_ = nullptr, *lnf_g_ = nullptr, *lnf_b_ = nullptr;
    std::vector<Layer> layers_;
    gpurt::MemPool cache_pool_;       // the KV cache's own pool: its peak and reuse apart
    gpurt::DeviceBuffer<float> k_cache_, v_cache_;
    gpurt::DeviceBuffer<float> x_, logits_;
    gpurt::DeviceBuffer<char> xn_, qkv_, att_, h_;
    int rows_ = 0, max_len_ = 0;
    gpurt::Kernel embed_, layer_norm_, add_bias_, add_bias_t_, bias_gelu_, attend_, argmax_;
};

} // namespace gpt2
