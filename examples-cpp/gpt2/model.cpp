#include "model.hpp"

#include <cublas_v2.h>
#include <fcntl.h>

#include <stdexcept>

#include "kernels.hpp"

#ifndef GPT2_CUDA_INCLUDE
#define GPT2_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

namespace gpt2 {

namespace {
void check_cublas(cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

void launch(const gpurt::Kernel &k, dim3 grid, unsigned block, unsigned shared, const gpurt::Stream &s, std::vector<void *> args) {
    gpurt_status_t st = gpurt_launch_kernel(k.get(), grid.x, grid.y, 1, block, 1, 1, shared, s.get(), args.data());
    if (st != GPURT_SUCCESS) throw gpurt::Error(st, gpurt_last_error_message());
}

unsigned blocks_for(size_t n) { return static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 4096)); }
} // namespace

gpurt::Kernel Model::kernel(const std::string &name) const {
    static const char *options[] = {"-I" GPT2_CUDA_INCLUDE, "-std=c++17"};
    return gpurt::Kernel::compile(kernel_source(), name.c_str(), {options[0], options[1]});
}

Model::Model(const std::string &path, Precision precision, const gpurt::Stream &stream)
    : precision_(precision), stream_(stream), elem_(precision == Precision::F32 ? 4 : 2), cache_pool_(gpurt::MemPool::create()) {
    SafeTensors st = SafeTensors::open(path);
    // The whole data section straight into device memory (GPUDirect Storage where
    // the machine has it, gpurt's pinned staging otherwise).
    gpurt::DeviceBuffer<char> f32(st.data_size(), stream);
    {
        gpurt_gds_file_t file = nullptr;
        gpurt_status_t s = gpurt_gds_file_open(path.c_str(), O_RDONLY, &file);
        if (s == GPURT_SUCCESS) {
            gpurt_stream_synchronize(stream.get()); // the buffer's allocation is stream-ordered; the read is not
            s = gpurt_gds_read(file, f32.data(), st.data_size(), static_cast<int64_t>(st.data_offset()), nullptr);
            gpurt_gds_file_close(file);
        }
        if (s != GPURT_SUCCESS) throw gpurt::Error(s, gpurt_last_error_message());
    }
    std::vector<std::pair<const TensorInfo *, const void **>> wanted;
    auto want = [&](const std::string &name, std::vector<int64_t> shape, const void **to) { wanted.push_back({&st.at(name, "F32", shape), to}); };
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
        want(p + "attn.c_attn.weight", {kEmbed, 3 * kEmbed}, &L.attn_w);
        want(p + "attn.c_attn.bias", {3 * kEmbed}, &L.attn_b);
        want(p + "attn.c_proj.weight", {kEmbed, kEmbed}, &L.proj_w);
        want(p + "attn.c_proj.bias", {kEmbed}, &L.proj_b);
        want(p + "ln_2.weight", {kEmbed}, &L.ln2_g);
        want(p + "ln_2.bias", {kEmbed}, &L.ln2_b);
        want(p + "mlp.c_fc.weight", {kEmbed, 4 * kEmbed}, &L.fc_w);
        want(p + "mlp.c_fc.bias", {4 * kEmbed}, &L.fc_b);
        want(p + "mlp.c_proj.weight", {4 * kEmbed, kEmbed}, &L.fc_proj_w);
        want(p + "mlp.c_proj.bias", {kEmbed}, &L.fc_proj_b);
    }
    if (precision_ == Precision::F32) {
        for (auto &[info, to] : wanted) *to = f32.data() + info->begin;
        weights_ = std::move(f32);
    } else {
        size_t total = 0;
        for (auto &w : wanted) total += w.first->elements();
        weights_ = gpurt::DeviceBuffer<char>(total * 2, stream);
        gpurt::Kernel to_half = kernel("to_half");
        size_t offset = 0;
        for (auto &[info, to] : wanted) {
            const void *src = f32.data() + info->begin;
            void *dst = weights_.data() + offset;
            size_t n = info->elements();
            launch(to_half, dim3(blocks_for(n)), 256, 0, stream, {&src, &dst, &n});
            *to = dst;
            offset += n * 2;
        }
        // f32 is freed on leaving this scope, in stream order: after the conversions.
    }
    embed_ = kernel(std::string("embed") + suffix());
    layer_norm_ = kernel(std::string("layer_norm") + suffix());
    add_bias_ = kernel(std::string("add_bias") + suffix());
    add_bias_t_ = kernel(std::string("add_bias_t") + suffix());
    bias_gelu_ = kernel(std::string("bias_gelu") + suffix());
    attend_ = kernel(std::string("attend") + suffix());
    argmax_ = kernel("argmax_rows");
}

void Model::reserve(int rows, int max_len) {
    if (rows < 1 || max_len < 1 || max_len > kPositions) throw std::invalid_argument("gpt2::Model::reserve: rows >= 1 and 1 <= max_len <= 1024");
    rows_ = rows;
    max_len_ = max_len;
    size_t cache = static_cast<size_t>(kLayers) * rows * kHeads * max_len * (kEmbed / kHeads);
    auto from_pool = [&](size_t n) {
        void *p = nullptr;
        gpurt_status_t s = gpurt_mem_pool_malloc(cache_pool_.get(), n * sizeof(float), stream_.get(), &p);
        if (s != GPURT_SUCCESS) throw gpurt::Error(s, gpurt_last_error_message());
        return gpurt::DeviceBuffer<float>::adopt(static_cast<float *>(p), n);
    };
    k_cache_ = gpurt::DeviceBuffer<float>();
    v_cache_ = gpurt::DeviceBuffer<float>();
    k_cache_ = from_pool(cache);
    v_cache_ = from_pool(cache);
    x_ = gpurt::DeviceBuffer<float>(static_cast<size_t>(rows) * kEmbed, stream_);
    logits_ = gpurt::DeviceBuffer<float>(static_cast<size_t>(rows) * kVocab, stream_);
    xn_ = gpurt::DeviceBuffer<char>(static_cast<size_t>(rows) * kEmbed * elem_, stream_);
    qkv_ = gpurt::DeviceBuffer<char>(static_cast<size_t>(rows) * 3 * kEmbed * elem_, stream_);
    att_ = gpurt::DeviceBuffer<char>(static_cast<size_t>(rows) * kEmbed * elem_, stream_);
    h_ = gpurt::DeviceBuffer<char>(static_cast<size_t>(rows) * 4 * kEmbed * elem_, stream_);
}

// y (out x rows, column-major) = W^T x: W is transformers' Conv1D weight [in][out]
// (or, transposed, the embedding [out][in]); fp32 accumulation either way.
void Model::gemm(const void *w, const void *x, void *y, int out, int in, float beta, bool y_fp32, bool transpose_w) {
    void *handle = gpurt::blas::handle(stream_);
    cudaDataType_t t = precision_ == Precision::F32 ? CUDA_R_32F : CUDA_R_16F;
    const float alpha = 1.0f;
    check_cublas(cublasGemmEx(static_cast<cublasHandle_t>(handle), transpose_w ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, out, rows_, in, &alpha, w, t,
                              transpose_w ? in : out, x, t, in, &beta, y, y_fp32 ? CUDA_R_32F : t, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

void Model::step(const int *tokens, int pos) {
    if (pos < 0 || pos >= max_len_) throw std::invalid_argument("gpt2::Model::step: position outside the reserved length");
    const gpurt::Stream &s = stream_;
    float *x = x_.data();
    void *xn = xn_.data(), *qkv = qkv_.data(), *att = att_.data(), *h = h_.data();
    int rows = rows_, e = kEmbed, e3 = 3 * kEmbed, e4 = 4 * kEmbed, max_len = max_len_;
    size_t per_layer = static_cast<size_t>(rows) * kHeads * max_len * (kEmbed / kHeads);
    launch(embed_, dim3(rows), 256, 0, s, {&tokens, &pos, &wte_, &wpe_, &x});
    for (int l = 0; l < kLayers; l++) {
        const Layer &L = layers_[l];
        float *kc = k_cache_.data() + l * per_layer, *vc = v_cache_.data() + l * per_layer;
        launch(layer_norm_, dim3(rows), 256, 0, s, {&x, const_cast<const void **>(&L.ln1_g), const_cast<const void **>(&L.ln1_b), &xn});
        gemm(L.attn_w, xn, qkv, e3, e, 0.0f, false);
        launch(add_bias_t_, dim3(blocks_for(static_cast<size_t>(rows) * e3)), 256, 0, s, {&qkv, const_cast<const void **>(&L.attn_b), &rows, &e3});
        launch(attend_, dim3(rows, kHeads), 128, static_cast<unsigned>((pos + 1) * sizeof(float)), s, {&qkv, &kc, &vc, &pos, &max_len, &att});
        launch(add_bias_, dim3(blocks_for(static_cast<size_t>(rows) * e)), 256, 0, s, {&x, const_cast<const void **>(&L.proj_b), &rows, &e});
        gemm(L.proj_w, att, x, e, e, 1.0f, true);
        launch(layer_norm_, dim3(rows), 256, 0, s, {&x, const_cast<const void **>(&L.ln2_g), const_cast<const void **>(&L.ln2_b), &xn});
        gemm(L.fc_w, xn, h, e4, e, 0.0f, false);
        launch(bias_gelu_, dim3(blocks_for(static_cast<size_t>(rows) * e4)), 256, 0, s, {&h, const_cast<const void **>(&L.fc_b), &rows, &e4});
        launch(add_bias_, dim3(blocks_for(static_cast<size_t>(rows) * e)), 256, 0, s, {&x, const_cast<const void **>(&L.fc_proj_b), &rows, &e});
        gemm(L.fc_proj_w, h, x, e, e4, 1.0f, true);
    }
    launch(layer_norm_, dim3(rows), 256, 0, s, {&x, &lnf_g_, &lnf_b_, &xn});
    gemm(wte_, xn, logits_.data(), kVocab, e, 0.0f, true, /*transpose_w=*/true);
}

void Model::argmax(int *next) {
    const float *logits = logits_.data();
    int vocab = kVocab;
    launch(argmax_, dim3(rows_), 1024, 0, stream_, {&logits, &vocab, &next});
}

} // namespace gpt2
