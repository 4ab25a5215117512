// GPT-2 generation on gpurt: greedy or seeded top-k decoding with a KV cache for 1
// to 16 prompts of token ids, in fp32 or fp16 (fp32 accumulation). Prints tokens per second and
// the peak device memory; --tokens and --logits write what the reference script
// compares with PyTorch (gpu/gpt2_reference.py).
#include <gpurt.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "model.hpp"
#include "options.hpp"

int main(int argc, char **argv) try {
    const auto started = std::chrono::steady_clock::now();
    gpt2::Options opt = gpt2::parse_options(argc, argv);
    std::vector<std::vector<int>> prompts = gpt2::read_prompts(opt.prompts, gpt2::kVocab);
    // Tokens by position, the prompts' left-padded, then each step's pick, all on the device.
    const gpt2::PaddedPrompts padded = gpt2::left_pad(prompts, opt.new_tokens, gpt2::kPositions);
    const int rows = static_cast<int>(prompts.size()), prompt_len = padded.length;
    if (gpurt_init() != GPURT_SUCCESS || gpurt::Device::count() == 0) {
        std::printf("gpt2: no GPU (%s): nothing to run\n", gpurt_last_error_message());
        return 0;
    }
    gpurt::DeviceGuard on(gpurt::Device(0));
    if (!opt.snapshot.empty()) gpurt::memory::record_history(true); // every allocation from here on, for --snapshot
    gpurt::Stream stream;
    gpt2::Model model(opt.weights, opt.fp16 ? gpt2::Precision::F16 : gpt2::Precision::F32, stream);
    const int total = prompt_len + opt.new_tokens;
    gpurt::DeviceBuffer<int> tokens(padded.by_position.size(), stream);
    tokens.copy_from(padded.by_position, stream);
    model.reserve(rows, total, tokens.data(), padded.starts);
    model.set_sampling(opt.top_k, opt.seed);
    model.set_fused_gemv(opt.fused);
    model.set_programmatic_launch(opt.programmatic);
    if (opt.tunable) {
        // One eager step (at position 0, where reserve left it) tunes every GEMM shape
        // (a capture runs the choices but does not tune); what it leaves in the
        // activations and the cache is overwritten below.
        model.enable_tunable_gemm();
        model.step(false);
    }

    // A prompt step and a decode step, each captured once (they read the position
    // from device memory) and replayed per token.
    gpurt::GraphExec prompt_step, decode_step;
    if (opt.graphs) {
        for (bool pick : {false, true}) {
            gpurt::Graph::begin_capture(stream, GPURT_CAPTURE_MODE_THREAD_LOCAL);
            model.step(pick);
            gpurt::Graph graph = gpurt::Graph::end_capture(stream);
            (pick ? decode_step : prompt_step) = graph.instantiate();
        }
    }
    auto step = [&](int p, bool pick) {
        if (opt.graphs) {
            model.make_room(p); // the cache grows between replays, at the addresses captured
            (pick ? decode_step : prompt_step).launch(stream);
        } else {
            model.step(pick);
        }
    };
    std::ofstream logits_out;
    if (!opt.logits_out.empty()) logits_out.open(opt.logits_out, std::ios::binary);
    std::vector<float> logits(static_cast<size_t>(rows) * gpt2::kVocab);

    model.set_position(0);
    for (int p = 0; p < prompt_len - 1; p++) step(p, false);
    gpurt::Event start, stop;
    double first_token_ms = 0;
    start.record(stream);
    for (int p = prompt_len - 1; p < total - 1; p++) {
        step(p, true);
        if (logits_out.is_open()) {
            gpurt_status_t s = gpurt_memcpy(logits.data(), model.logits(), logits.size() * sizeof(float), stream.get());
            if (s != GPURT_SUCCESS) throw gpurt::Error(s, gpurt_last_error_message());
            logits_out.write(reinterpret_cast<const char *>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
        }
        if (p == prompt_len - 1) {
            stream.synchronize();
            first_token_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        }
    }
    stop.record(stream);
    std::vector<int> result = tokens.to_vector(stream);
    double ms = stop.elapsed_since(start);
    if (!opt.tokens_out.empty()) {
        std::ofstream out(opt.tokens_out);
        for (int r = 0; r < rows; r++) {
            for (int p = prompt_len; p < total; p++) out << result[static_cast<size_t>(p) * rows + r] << (p + 1 < total ? " " : "\n");
        }
    }
    if (opt.tunable) std::printf("%s", model.tunable_choices().c_str());
    if (!opt.snapshot.empty()) gpurt::memory::snapshot(opt.snapshot.c_str());
    gpurt_memory_stats_t st = gpurt::Device(0).memory_stats(); // before the probe below allocates
    const double floor_ms = model.weights_read_ms();
    const double mib = 1048576.0;
    std::printf("gpt2 %s%s: %d prompt(s) x %d tokens, %d new: %.1f tokens/s (%.3f ms a step), first token after %.0f ms, "
                "peak reserved %.1f MiB, KV cache mapped %.1f MiB of %.1f MiB at %d positions; floor %.3f ms a step (the weights, %.0f MiB, read at %.2f TB/s): %.2fx it\n",
                opt.fp16 ? "fp16" : "fp32", opt.graphs ? ", graphs" : "", rows, prompt_len, opt.new_tokens, rows * opt.new_tokens / (ms / 1e3), ms / opt.new_tokens,
                first_token_ms, st.reserved_bytes.all.peak / mib, model.cache_mapped_bytes() / mib, model.cache_max_bytes() / mib, gpt2::kPositions,
                floor_ms, model.weights_bytes() / mib, model.weights_bytes() / floor_ms / 1e9, ms / opt.new_tokens / floor_ms);
    return 0;
} catch (const std::exception &e) {
    std::fprintf(stderr, "gpt2: %s\n", e.what());
    return 1;
}
