#include "model.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "kernels.hpp"

#ifndef GPT2_CUDA_INCLUDE
#define GPT2_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

namespace gpt2 {

namespace {
void check_cublas(cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

// A launch with programmatic dependent launch where `programmatic` (kernels.hpp's
// after_previous: the kernel may start while the one before it ends).
void launch(const gpurt::Kernel &k, dim3 grid, unsigned block, unsigned shared, const gpurt::Stream &s, std::vector<void *> args,
            bool programmatic = false) {
    gpurt_launch_config_t config = GPURT_LAUNCH_CONFIG_INIT;
    config.grid[0] = grid.x, config.grid[1] = grid.y, config.grid[2] = grid.z;
    config.block[0] = block, config.block[1] = config.block[2] = 1;
    config.shared_memory_bytes = shared;
    config.stream = s.get();
    config.programmatic_dependent_launch = programmatic;
    gpurt_status_t st = gpurt_launch_kernel_ex(k.get(), &config, args.data());
    if (st != GPURT_SUCCESS) throw gpurt::Error(st, gpurt_last_error_message());
}

unsigned blocks_for(size_t n) { return static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 4096)); }
} // namespace

struct Model::LtPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
    ~LtPlan() {
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (desc) cublasLtMatmulDescDestroy(desc);
    }
};

gpurt::Kernel Model::kernel(const std::string &name) const {
    static const char *options[] = {"-I" GPT2_CUDA_INCLUDE, "-std=c++17"};
    return gpurt::Kernel::compile(kernel_source(), name.c_str(), {options[0], options[1]});
}

Model::Model(const std::string &path, Precision precision, const gpurt::Stream &stream)
    : precision_(precision), stream_(stream), elem_(precision == Precision::F32 ? 4 : 2) {
    SafeTensors st = SafeTensors::open(path);
    struct Wanted {
        const TensorInfo *info;
        const void **to;
        bool transpose; // transformers' Conv1D [in][out]: stored [out][in] for the GEMMs
    };
    std::vector<Wanted> wanted;
    auto want = [&](const std::string &name, std::vector<int64_t> shape, const void **to, bool transpose = false) {
        wanted.push_back({&st.at(name, "F32", shape), to, transpose});
    };
    want("transformer.wte.weight", {kVocab, kEmbed}, &wte_);
    want("transformer.wpe.weight", {kPositions, kEmbed}, &wpe_);
    want("transformer.ln_f.weight", {kEmbed}, &lnf_g_);
    want("transformer.ln_f.bias", {kEmbed}, &lnf_b_);
    layers_.resize(kLayers);
    for (int l = 0; l < kLayers; l++) {
        std::string p = "transformer.h." + std::to_string(l) + ".";
        Layer &L = layers_[l];
        want(p + "ln_1.weight", {kEmbed}, &L.ln1_g);
        want(p + "ln_1.bias", {kEmbed}, &L.ln1_b);
        want(p + "attn.c_attn.weight", {kEmbed, 3 * kEmbed}, &L.attn_w, true);
        want(p + "attn.c_attn.bias", {3 * kEmbed}, &L.attn_b);
        want(p + "attn.c_proj.weight", {kEmbed, kEmbed}, &L.proj_w, true);
        want(p + "attn.c_proj.bias", {kEmbed}, &L.proj_b);
        want(p + "ln_2.weight", {kEmbed}, &L.ln2_g);
        want(p + "ln_2.bias", {kEmbed}, &L.ln2_b);
        want(p + "mlp.c_fc.weight", {kEmbed, 4 * kEmbed}, &L.fc_w, true);
        want(p + "mlp.c_fc.bias", {4 * kEmbed}, &L.fc_b);
        want(p + "mlp.c_proj.weight", {4 * kEmbed, kEmbed}, &L.fc_proj_w, true);
        want(p + "mlp.c_proj.bias", {kEmbed}, &L.fc_proj_b);
    }
    // Each tensor is read from the file straight into device memory (GPUDirect
    // Storage where the machine has it, gpurt's pinned staging otherwise), 16 MiB of
    // rows at a time into a scratch buffer, then laid out for the GEMMs in the
    // weights' type: beyond the weights, loading holds 16 MiB of device memory.
    size_t total = 0;
    for (const Wanted &w : wanted) total += w.info->elements();
    weights_ = gpurt::DeviceBuffer<char>(total * elem_, stream);
    const size_t scratch_bytes = 16u << 20;
    gpurt::DeviceBuffer<char> scratch(scratch_bytes, stream);
    gpurt_gds_file_t file = nullptr;
    gpurt_status_t status = gpurt_gds_file_open(path.c_str(), O_RDONLY, &file);
    if (status != GPURT_SUCCESS) throw gpurt::Error(status, gpurt_last_error_message());
    gpurt::Kernel prepare = kernel(std::string("prepare") + suffix());
    size_t offset = 0;
    for (const Wanted &w : wanted) {
        int rows = w.info->shape.size() == 2 ? static_cast<int>(w.info->shape[0]) : 1;
        int cols = static_cast<int>(w.info->elements() / rows), transpose = w.transpose;
        int chunk = static_cast<int>(std::max<size_t>(1, scratch_bytes / (sizeof(float) * cols)));
        const void *src = scratch.data();
        void *dst = weights_.data() + offset;
        for (int first = 0; first < rows && status == GPURT_SUCCESS; first += chunk) {
            int count = std::min(chunk, rows - first);
            stream.synchronize(); // the read is not stream-ordered: the last chunk's preparation is done
            status = gpurt_gds_read(file, scratch.data(), sizeof(float) * count * cols,
                                    static_cast<int64_t>(st.data_offset() + w.info->begin + sizeof(float) * first * cols), nullptr);
            if (status == GPURT_SUCCESS)
                launch(prepare, dim3(blocks_for(static_cast<size_t>(count) * cols)), 256, 0, stream, {&src, &dst, &rows, &cols, &first, &count, &transpose});
        }
        *w.to = dst;
        offset += w.info->elements() * elem_;
    }
    gpurt_gds_file_close(file);
    if (status != GPURT_SUCCESS) throw gpurt::Error(status, gpurt_last_error_message());
    embed_ = kernel(std::string("embed") + suffix());
    layer_norm_ = kernel(std::string("layer_norm") + suffix());
    bias_gelu_ = kernel(std::string("bias_gelu") + suffix());
    attend_ = kernel(std::string("attend") + suffix());
    fused_gemv_ = kernel(std::string("fused_gemv") + suffix());
    fused_gemv_attention_ = kernel(std::string("fused_gemv_attention") + suffix());
    argmax_ = kernel("argmax_rows");
    advance_ = kernel("advance");
    sample_top_k_ = kernel("sample_top_k");
    position_ = gpurt::DeviceBuffer<int>(1, stream);
}

Model::~Model() {
    if (generator_) gpurt_generator_destroy(generator_);
    if (gemm_op_) gpurt_tunable_op_destroy(gemm_op_);
}

namespace {
// The TunableOp's candidates: a gpurt_status_t, never an exception across C.
template <void (Model::*Run)(const Model::GemmArgs &)>
int gemm_candidate(void *args, gpurt_stream_t, void *) {
    const auto &a = *static_cast<const Model::GemmArgs *>(args);
    try {
        (a.model->*Run)(a);
        return GPURT_SUCCESS;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "gpt2: a GEMM candidate failed: %s\n", e.what());
        return GPURT_ERROR_CUDA;
    }
}
} // namespace

void Model::enable_tunable_gemm() {
    if (gemm_op_) return;
    gpurt_status_t s = gpurt_tunable_op_create("gpt2_gemm", &gemm_op_);
    if (s == GPURT_SUCCESS) s = gpurt_tunable_op_add_callback(gemm_op_, "cublas", gemm_candidate<&Model::gemm_cublas>, nullptr);
    if (s == GPURT_SUCCESS) s = gpurt_tunable_op_add_callback(gemm_op_, "cublaslt", gemm_candidate<&Model::gemm_cublaslt>, nullptr);
    if (s != GPURT_SUCCESS) throw gpurt::Error(s, gpurt_last_error_message());
}

std::string Model::tunable_choices() const {
    std::string out;
    for (const std::string &signature : signatures_) {
        char name[64] = "";
        uint64_t tunings = 0;
        if (gpurt_tunable_op_choice(gemm_op_, 0, signature.c_str(), name, sizeof name, &tunings) == GPURT_SUCCESS)
            out += signature + ": " + (name[0] ? name : "(not tuned)") + "\n";
    }
    return out;
}

void Model::set_sampling(int top_k, unsigned long long seed) {
    if (top_k < 0 || top_k > 1024) throw std::invalid_argument("gpt2::Model::set_sampling: top_k must be 0..1024");
    if (generator_) gpurt_generator_destroy(generator_);
    generator_ = nullptr;
    top_k_ = top_k;
    if (top_k == 0) return;
    gpurt_status_t s = gpurt_generator_create(0, seed, &generator_);
    if (s != GPURT_SUCCESS) throw gpurt::Error(s, gpurt_last_error_message());
}

void Model::reserve(int rows, int max_len, int *history, const std::vector<int> &starts) {
    if (rows < 1 || max_len < 1 || max_len > kPositions) throw std::invalid_argument("gpt2::Model::reserve: rows >= 1 and 1 <= max_len <= 1024");
    if (!starts.empty() && (starts.size() != static_cast<size_t>(rows) || *std::min_element(starts.begin(), starts.end()) < 0 ||
                            *std::max_element(starts.begin(), starts.end()) >= max_len))
        throw std::invalid_argument("gpt2::Model::reserve: starts needs one position in 0..max_len-1 per row");
    starts_ = gpurt::DeviceBuffer<int>(static_cast<size_t>(rows), stream_);
    starts_.copy_from(starts.empty() ? std::vector<int>(static_cast<size_t>(rows), 0) : starts, stream_);
    rows_ = rows;
    max_len_ = max_len;
    history_ = history;
    // A new cache: the old one's work is done first (its destroy waits for the device).
    cache_ = gpurt::VBuffer();
    cache_block_bytes_ = static_cast<size_t>(kLayers) * 2 * rows * kEmbed * kCacheBlock * sizeof(float);
    cache_ = gpurt::VBuffer::create(cache_max_bytes(), stream_.device().ordinal()); // rounded up to the granularity
    cache_base_ = static_cast<float *>(cache_.data());
    cache_mapped_ = 0;
    x_ = gpurt::DeviceBuffer<float>(static_cast<size_t>(rows) * kEmbed, stream_);
    logits_ = gpurt::DeviceBuffer<float>(static_cast<size_t>(rows) * kVocab, stream_);
    xn_ = gpurt::DeviceBuffer<char>(static_cast<size_t>(rows) * kEmbed * elem_, stream_);
    qkv_ = gpurt::DeviceBuffer<char>(static_cast<size_t>(rows) * 3 * kEmbed * elem_, stream_);
    att_ = gpurt::DeviceBuffer<char>(static_cast<size_t>(rows) * kEmbed * elem_, stream_);
    h_ = gpurt::DeviceBuffer<char>(static_cast<size_t>(rows) * 4 * kEmbed * elem_, stream_);
    uniform_ = gpurt::DeviceBuffer<float>(static_cast<size_t>(rows), stream_);
    attention_partial_ = gpurt::DeviceBuffer<float>(static_cast<size_t>(rows) * kHeads * kAttentionSplits * (kEmbed / kHeads + 2), stream_);
    pick_values_ = gpurt::DeviceBuffer<float>(static_cast<size_t>(rows) * kPickParts, stream_);
    pick_indices_ = gpurt::DeviceBuffer<int>(static_cast<size_t>(rows) * kPickParts, stream_);
    // The last-block counters start at 0; the kernels leave them at 0 after each step.
    attention_done_ = gpurt::DeviceBuffer<unsigned>(static_cast<size_t>(rows) * kHeads, stream_);
    pick_done_ = gpurt::DeviceBuffer<unsigned>(static_cast<size_t>(rows), stream_);
    gemv_pick_ = gpurt::DeviceBuffer<float>(1 + 2 * kGemvBlocks, stream_);
    for (auto [counters, count] : {std::pair<void *, size_t>{attention_done_.data(), attention_done_.size()}, {pick_done_.data(), pick_done_.size()},
                                   {gemv_pick_.data(), 1}}) {
        gpurt_status_t zeroed = gpurt_memset_async(counters, 0, 4, count, stream_.get());
        if (zeroed != GPURT_SUCCESS) throw gpurt::Error(zeroed, gpurt_last_error_message());
    }
    set_position(0);
    make_room(0); // before a capture of the first step, where mapping is not allowed
}

void Model::make_room(int pos) {
    const size_t needed = (static_cast<size_t>(pos) / kCacheBlock + 1) * cache_block_bytes_;
    if (needed <= cache_mapped_) return;
    const size_t granularity = cache_.granularity();
    const size_t mapped = (needed + granularity - 1) / granularity * granularity;
    cache_.map(cache_mapped_, mapped - cache_mapped_);
    cache_mapped_ = mapped;
}

void Model::set_position(int pos) {
    if (pos < 0 || pos >= max_len_) throw std::invalid_argument("gpt2::Model::set_position: outside the reserved length");
    gpurt_status_t s = gpurt_memset_async(position_.data(), static_cast<unsigned>(pos), 4, 1, stream_.get());
    if (s != GPURT_SUCCESS) throw gpurt::Error(s, gpurt_last_error_message());
    position_now_ = pos;
}

// y (out x rows, column-major) = W x for W stored [out][in] (the embedding as it is,
// the Conv1D weights as prepared); fp32 accumulation either way. cuBLAS's transposed
// GEMV reads W at full bandwidth at batch 1 (its untransposed one reached a quarter).
void Model::gemm(const void *w, const void *x, void *y, int out, int in, float beta, bool y_fp32) {
    GemmArgs args{this, w, x, y, out, in, beta, y_fp32};
    if (!gemm_op_) return gemm_cublas(args);
    char signature[128];
    std::snprintf(signature, sizeof signature, "out=%d in=%d rows=%d beta=%g y=%s t=%s", out, in, rows_, beta, y_fp32 ? "f32" : "t",
                  precision_ == Precision::F32 ? "f32" : "f16");
    if (std::find(signatures_.begin(), signatures_.end(), signature) == signatures_.end()) signatures_.push_back(signature);
    gpurt_status_t s = gpurt_tunable_op_run(gemm_op_, signature, &args, stream_.get());
    if (s != GPURT_SUCCESS) throw gpurt::Error(s, gpurt_last_error_message());
}

void Model::gemm_cublas(const GemmArgs &a) {
    void *handle = gpurt::blas::handle(stream_);
    cudaDataType_t t = precision_ == Precision::F32 ? CUDA_R_32F : CUDA_R_16F;
    const float alpha = 1.0f;
    check_cublas(cublasGemmEx(static_cast<cublasHandle_t>(handle), CUBLAS_OP_T, CUBLAS_OP_N, a.out, rows_, a.in, &alpha, a.w, t, a.in, a.x, t, a.in,
                              &a.beta, a.y, a.y_fp32 ? CUDA_R_32F : t, a.out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

// The same product through cuBLASLt, with the workspace gpurt keeps for this
// stream; descriptors and the heuristic's algorithm are made once per shape.
void Model::gemm_cublaslt(const GemmArgs &a) {
    gpurt::blas::LtHandle lt = gpurt::blas::lt_handle(stream_);
    cudaDataType_t t = precision_ == Precision::F32 ? CUDA_R_32F : CUDA_R_16F;
    std::unique_ptr<LtPlan> &plan = lt_plans_[{a.out, a.in, rows_, a.beta != 0.0f, a.y_fp32}];
    if (!plan) {
        auto p = std::make_unique<LtPlan>();
        cublasOperation_t transpose = CUBLAS_OP_T;
        check_cublas(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
        check_cublas(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose), "cublasLtMatmulDescSetAttribute");
        check_cublas(cublasLtMatrixLayoutCreate(&p->a, t, a.in, a.out, a.in), "cublasLtMatrixLayoutCreate");
        check_cublas(cublasLtMatrixLayoutCreate(&p->b, t, a.in, rows_, a.in), "cublasLtMatrixLayoutCreate");
        check_cublas(cublasLtMatrixLayoutCreate(&p->c, a.y_fp32 ? CUDA_R_32F : t, a.out, rows_, a.out), "cublasLtMatrixLayoutCreate");
        cublasLtMatmulPreference_t preference = nullptr;
        check_cublas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt.workspace_size, sizeof lt.workspace_size);
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(lt.handle), p->desc, p->a, p->b, p->c, p->c, preference, 1,
                                                           &result, &found);
        cublasLtMatmulPreferenceDestroy(preference);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) throw std::runtime_error("cuBLASLt has no algorithm for this GEMM");
        p->algo = result.algo;
        plan = std::move(p);
    }
    const float alpha = 1.0f;
    check_cublas(cublasLtMatmul(static_cast<cublasLtHandle_t>(lt.handle), plan->desc, &alpha, a.w, plan->a, a.x, plan->b, &a.beta, a.y, plan->c, a.y,
                                plan->c, &plan->algo, lt.workspace, lt.workspace_size, static_cast<cudaStream_t>(stream_.native())),
                 "cublasLtMatmul");
}

void Model::launch_step(const gpurt::Kernel &k, const dim3 &grid, unsigned block, std::vector<void *> args) const {
    launch(k, grid, block, 0, stream_, std::move(args), programmatic_);
}

void Model::fused_gemv(const Gemv &op) {
    const void *w = op.w, *g = op.g, *beta = op.beta, *in = op.in, *bias = op.bias;
    const float *x = x_.data(), *attention = op.attention ? attention_partial_.data() : nullptr;
    float *y_f32 = op.residual ? x_.data() : op.y_f32, *pick = op.pick ? gemv_pick_.data() : nullptr;
    void *y_t = op.y_t;
    int *position = position_.data(), *history = history_;
    int gelu = op.gelu, residual = op.residual, out = op.out, in_features = op.in_features;
    const int warps = 4, rows_per_block = warps / (in_features / kEmbed); // GEMV_WARPS: a warp per kEmbed weights
    const unsigned blocks = static_cast<unsigned>(std::min(kGemvBlocks, (out + rows_per_block - 1) / rows_per_block));
    launch_step(op.attention ? fused_gemv_attention_ : fused_gemv_, dim3(blocks), 32 * warps,
                {&w, &x, &g, &beta, &attention, &in, &bias, &gelu, &residual, &y_f32, &y_t, &out, &in_features, &pick, &position, &history});
}

double Model::weights_read_ms() {
    gpurt::Kernel read_all = kernel("read_all");
    const void *words = weights_.data();
    size_t count = weights_.size() / 16;
    gpurt::DeviceBuffer<int> sink(1, stream_);
    int *sink_ptr = sink.data();
    std::vector<double> times;
    for (int i = 0; i < 7; i++) {
        gpurt::Event start, stop;
        start.record(stream_);
        launch(read_all, dim3(2048), 512, 0, stream_, {&words, &count, &sink_ptr});
        stop.record(stream_);
        stop.synchronize();
        times.push_back(stop.elapsed_since(start));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

void Model::step(bool pick) {
    if (position_now_ + (pick ? 1 : 0) >= max_len_) throw std::invalid_argument("gpt2::Model::step: past the reserved length");
    make_room(position_now_);
    position_now_++;
    const gpurt::Stream &s = stream_;
    float *x = x_.data();
    void *xn = xn_.data(), *qkv = qkv_.data(), *att = att_.data(), *h = h_.data();
    int *pos = position_.data(), *history = history_, *starts = starts_.data();
    float *partial = attention_partial_.data();
    unsigned *done = attention_done_.data();
    int rows = rows_, e = kEmbed, e3 = 3 * kEmbed, e4 = 4 * kEmbed;
    long long block_stride = static_cast<long long>(cache_block_bytes_ / sizeof(float)); // the cache's floats from one block to the next
    launch_step(embed_, dim3(rows), 256, {&history, &pos, &starts, &wte_, &wpe_, &x});
    // The residual stream's biases wait in x's next layer norm (`pending`), which adds
    // them before normalising: one kernel fewer per GEMM that accumulates into x.
    const void *pending = nullptr;
    static const std::vector<std::string> layer_names = [] {
        std::vector<std::string> names;
        for (int l = 0; l < kLayers; l++) names.push_back("gpt2 layer " + std::to_string(l));
        return names;
    }();
    // At one row the GEMVs are the engine's (layer norm, bias, GELU and the residual
    // fused in); beyond, or with the TunableOp, cuBLAS/cuBLASLt's GEMMs.
    const bool fused = fused_gemv_allowed_ && rows_ == 1 && !gemm_op_;
    for (int l = 0; l < kLayers; l++) {
        gpurt::nvtx::Range range(layer_names[l].c_str()); // seen by Nsight when the step runs eagerly or is captured
        const Layer &L = layers_[l];
        float *kc = cache_base_ + static_cast<size_t>(l) * 2 * rows * e * kCacheBlock, *vc = kc + static_cast<size_t>(rows) * e * kCacheBlock;
        const void *ln1_g = L.ln1_g, *ln1_b = L.ln1_b, *ln2_g = L.ln2_g, *ln2_b = L.ln2_b, *attn_b = L.attn_b, *fc_b = L.fc_b;
        if (fused) {
            Gemv to_qkv, proj, fc, fc_proj;
            to_qkv.w = L.attn_w, to_qkv.out = e3, to_qkv.g = L.ln1_g, to_qkv.beta = L.ln1_b, to_qkv.y_t = qkv;
            fused_gemv(to_qkv);
            // No counter: the projection combines attention's slices itself.
            unsigned *no_done = nullptr;
            launch_step(attend_, dim3(rows, kHeads, kAttentionSplits), 128, {&qkv, &attn_b, &kc, &vc, &pos, &starts, &block_stride, &att, &partial, &no_done});
            proj.w = L.proj_w, proj.out = e, proj.attention = true, proj.bias = L.proj_b, proj.residual = true;
            fused_gemv(proj);
            fc.w = L.fc_w, fc.out = e4, fc.g = L.ln2_g, fc.beta = L.ln2_b, fc.bias = L.fc_b, fc.gelu = true, fc.y_t = h;
            fused_gemv(fc);
            fc_proj.w = L.fc_proj_w, fc_proj.out = e, fc_proj.in = h, fc_proj.in_features = e4, fc_proj.bias = L.fc_proj_b, fc_proj.residual = true;
            fused_gemv(fc_proj);
            continue;
        }
        launch_step(layer_norm_, dim3(rows), 256, {&x, &pending, &ln1_g, &ln1_b, &xn});
        gemm(L.attn_w, xn, qkv, e3, e, 0.0f, false);
        launch_step(attend_, dim3(rows, kHeads, kAttentionSplits), 128, {&qkv, &attn_b, &kc, &vc, &pos, &starts, &block_stride, &att, &partial, &done});
        gemm(L.proj_w, att, x, e, e, 1.0f, true);
        pending = L.proj_b;
        launch_step(layer_norm_, dim3(rows), 256, {&x, &pending, &ln2_g, &ln2_b, &xn});
        gemm(L.fc_w, xn, h, e4, e, 0.0f, false);
        launch_step(bias_gelu_, dim3(blocks_for(static_cast<size_t>(rows) * e4)), 256, {&h, &fc_b, &rows, &e4});
        gemm(L.fc_proj_w, h, x, e, e4, 1.0f, true);
        pending = L.fc_proj_b;
    }
    // The fused greedy pick advances the position itself.
    const bool pick_in_gemv = fused && pick && top_k_ == 0;
    if (fused) {
        Gemv lm_head;
        lm_head.w = wte_, lm_head.out = kVocab, lm_head.g = lnf_g_, lm_head.beta = lnf_b_, lm_head.y_f32 = logits_.data(), lm_head.pick = pick_in_gemv;
        fused_gemv(lm_head);
        if (pick_in_gemv) return;
    } else {
        launch_step(layer_norm_, dim3(rows), 256, {&x, &pending, &lnf_g_, &lnf_b_, &xn});
        gemm(wte_, xn, logits_.data(), kVocab, e, 0.0f, true);
    }
    if (pick) {
        float *logits = logits_.data(), *uniform = uniform_.data();
        int vocab = kVocab, k = top_k_;
        if (k == 0) {
            float *values = pick_values_.data();
            int *indices = pick_indices_.data();
            unsigned *pick_done = pick_done_.data();
            launch_step(argmax_, dim3(rows, kPickParts), 256, {&logits, &vocab, &pos, &history, &values, &indices, &pick_done});
        } else {
            // Captured in a graph, the fill draws fresh numbers at every replay (gpurt
            // advances the generator's offset per replay).
            gpurt_status_t st = gpurt_random_uniform(generator_, uniform, static_cast<size_t>(rows), GPURT_DTYPE_F32, s.get());
            if (st != GPURT_SUCCESS) throw gpurt::Error(st, gpurt_last_error_message());
            launch_step(sample_top_k_, dim3(rows), 1024, {&logits, &vocab, &k, &uniform, &pos, &history});
        }
    }
    launch_step(advance_, dim3(1), 1, {&pos});
}

} // namespace gpt2
