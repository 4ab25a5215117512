// GPT-2 (the 124M configuration) on gpurt: weights read from safetensors straight
// into device memory, a KV cache in a growable virtual buffer, GEMMs through
// gpurt's cuBLAS handle, the other kernels from kernels.hpp.
#pragma once

#include <gpurt.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "safetensors.hpp"

struct dim3; // CUDA's launch shape (vector_types.h)

namespace gpt2 {

constexpr int kLayers = 12, kEmbed = 768, kHeads = 12, kVocab = 50257, kPositions = 1024;
constexpr int kAttentionSplits = 8; // SPLITS in kernels.hpp
constexpr int kCacheBlock = 32;     // KV_BLOCK in kernels.hpp: the KV cache's positions per block
constexpr int kPickParts = 32;      // PICK_PARTS in kernels.hpp: blocks per row of the greedy pick
constexpr int kGemvBlocks = 2048;   // the fused GEMV's most blocks

enum class Precision { F32, F16 };

class Model {
public:
    /** Loads `path` (transformers' GPT2LMHeadModel names, F32) onto `stream`'s device. */
    Model(const std::string &path, Precision precision, const gpurt::Stream &stream);
    ~Model();
    Model(const Model &) = delete;
    Model &operator=(const Model &) = delete;

    /** Room for `rows` sequences of up to `max_len` positions, whose tokens are in
     *  `history` (device, max_len x rows ints, position-major), row r's from position
     *  starts[r] on (left padding, masked out of attention; empty: all from 0); position 0. */
    void reserve(int rows, int max_len, int *history, const std::vector<int> &starts = {});
    /** Picks by seeded top-k sampling from now on (a gpurt generator on the device;
     *  the same seed gives the same tokens); `top_k` 0 goes back to greedy. */
    void set_sampling(int top_k, unsigned long long seed);
    /** From now on every GEMM goes through a TunableOp ("gpt2_gemm") whose
     *  candidates are cuBLAS (GemmEx) and cuBLASLt (matmul with gpurt's workspace):
     *  each shape's first eager run times both, and the faster is kept (written to
     *  GPURT_TUNABLEOP_FILENAME). Run one eager step before capturing: a capture
     *  runs the kept choice but does not tune. */
    void enable_tunable_gemm();
    /** Whether one-row steps use the engine's fused GEMV (the default) or, like
     *  larger ones, the libraries' GEMMs. */
    void set_fused_gemv(bool on) { fused_gemv_allowed_ = on; }
    /** Whether the step's kernels are launched with programmatic dependent launch
     *  (the default: each may start while the one before it ends, on compute
     *  capability 9.0; kernels.hpp, after_previous). */
    void set_programmatic_launch(bool on) { programmatic_ = on; }
    /** The choice for each GEMM shape tuned so far, one "signature: candidate" a line. */
    std::string tunable_choices() const;
    /** Sets the position the next step reads (queued on the stream). */
    void set_position(int pos);
    /** Maps the KV cache's memory through position `pos` (at least), at the addresses
     *  it was reserved at: call before replaying a captured step at `pos` (an eager
     *  step calls it itself). */
    void make_room(int pos);
    /** One position for every row: the history's tokens at the current position go
     *  through the model, leaving the logits (device, rows x kVocab floats) in
     *  logits(); with `pick`, each row's pick (greedy, or sampled) goes into the
     *  history at the next position. Then the position advances. Every launch reads the position from
     *  device memory, so a step captured once replays at any position. */
    void step(bool pick);

    const float *logits() const { return logits_.data(); }
    int rows() const { return rows_; }
    Precision precision() const { return precision_; }
    const gpurt::Stream &stream() const { return stream_; }
    /** The median time of one streaming read of all the weights (ms): the step's
     *  bandwidth floor, since a step reads every weight once. */
    double weights_read_ms();
    size_t weights_bytes() const { return weights_.size(); }
    /** The KV cache's mapped bytes: they grow with the context, never shrink. */
    size_t cache_mapped_bytes() const { return cache_mapped_; }
    /** The KV cache's bytes at the model's longest context (kPositions): its reserved addresses. */
    size_t cache_max_bytes() const { return cache_block_bytes_ * ((kPositions + kCacheBlock - 1) / kCacheBlock); }

private:
    struct Layer {
        const void *ln1_g, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b, *ln2_g, *ln2_b, *fc_w, *fc_b, *fc_proj_w, *fc_proj_b;
    };
    void gemm(const void *w, const void *x, void *y, int out, int in, float beta, bool y_fp32);
    // One fused GEMV of a one-row step (kernels.hpp, fused_gemv): y (out) = W input,
    // where the input is layer_norm(x) with g and beta, attention's slices combined, or
    // `in` (a T vector of in_features); + bias, GELU; added to x (residual), written to
    // y_f32 or y_t; with `pick`, y_f32's greedy pick goes into the history and the
    // position advances.
    struct Gemv {
        const void *w = nullptr;
        int out = 0;
        const void *g = nullptr, *beta = nullptr;
        bool attention = false;
        const void *in = nullptr;
        int in_features = kEmbed;
        const void *bias = nullptr;
        bool gelu = false, residual = false;
        float *y_f32 = nullptr;
        void *y_t = nullptr;
        bool pick = false;
    };
    void fused_gemv(const Gemv &op);
    // A step kernel's launch on the model's stream, programmatic where set.
    void launch_step(const gpurt::Kernel &k, const dim3 &grid, unsigned block, std::vector<void *> args) const;
public:
    /** One GEMM's operands, as the TunableOp's candidates take them. */
    struct GemmArgs {
        Model *model;
        const void *w, *x;
        void *y;
        int out, in;
        float beta;
        bool y_fp32;
    };
    void gemm_cublas(const GemmArgs &a);
    void gemm_cublaslt(const GemmArgs &a);

private:
    struct LtPlan; // a cuBLASLt matmul's descriptors and algorithm, per GEMM shape
    std::map<std::tuple<int, int, int, bool, bool>, std::unique_ptr<LtPlan>> lt_plans_;
    gpurt_tunable_op_t gemm_op_ = nullptr;
    std::vector<std::string> signatures_;
    const char *suffix() const { return precision_ == Precision::F32 ? "_f32" : "_f16"; }
    gpurt::Kernel kernel(const std::string &name) const;

    Precision precision_;
    const gpurt::Stream &stream_;
    size_t elem_;                     // bytes per weight / GEMM operand
    gpurt::DeviceBuffer<char> weights_;
    const void *wte_ = nullptr, *wpe_ = nullptr, *lnf_g_ = nullptr, *lnf_b_ = nullptr;
    std::vector<Layer> layers_;
    // The KV cache in blocks of kCacheBlock positions, [block][layer][k, v][rows][HEADS]
    // [kCacheBlock][HEAD_DIM] floats, so that it grows at its end while a head's
    // positions stay together (a layout by position alone was 10 % slower at 16 rows):
    // addresses for kPositions positions, mapped block by block as the context grows.
    gpurt::VBuffer cache_;
    float *cache_base_ = nullptr;
    size_t cache_block_bytes_ = 0, cache_mapped_ = 0;
    gpurt::DeviceBuffer<float> x_, logits_;
    gpurt::DeviceBuffer<int> position_;
    gpurt::DeviceBuffer<int> starts_; // each row's first real position
    gpurt::DeviceBuffer<float> attention_partial_; // attention's slices (kernels.hpp, attend)
    gpurt::DeviceBuffer<unsigned> attention_done_;
    gpurt::DeviceBuffer<float> pick_values_; // the greedy pick's slices (kernels.hpp, argmax_rows)
    gpurt::DeviceBuffer<int> pick_indices_;
    gpurt::DeviceBuffer<unsigned> pick_done_;
    gpurt::DeviceBuffer<float> gemv_pick_; // the fused GEMV's greedy pick: a counter, then its blocks' pairs
    int *history_ = nullptr;
    gpurt::DeviceBuffer<char> xn_, qkv_, att_, h_;
    int rows_ = 0, max_len_ = 0;
    int position_now_ = 0; // the host's count, for step()'s bounds (a replayed graph's are the caller's)
    gpurt::Kernel embed_, layer_norm_, bias_gelu_, fused_gemv_, fused_gemv_attention_, attend_, argmax_, advance_, sample_top_k_;
    int top_k_ = 0;
    bool fused_gemv_allowed_ = true;
    bool programmatic_ = true;
    gpurt_generator_t generator_ = nullptr; // destroyed with the model
    gpurt::DeviceBuffer<float> uniform_;    // one uniform per row and step
};

} // namespace gpt2
