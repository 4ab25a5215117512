// The engine's command line and prompts file, checked before any GPU work.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt2 {

struct Options {
    std::string weights, prompts, tokens_out, logits_out, snapshot;
    int new_tokens = 0;
    bool fp16 = false;
    bool graphs = true; // each step replayed from a CUDA graph captured once
    bool tunable = false; // TunableOp picks cuBLAS or cuBLASLt per GEMM shape
    bool fused = true;    // the engine's fused GEMV for one prompt (else the libraries' GEMV)
    bool programmatic = true; // programmatic dependent launch of the step's kernels
    int top_k = 0;        // 0: greedy; else seeded top-k sampling
    unsigned long long seed = 0;
};

inline Options parse_options(int argc, const char *const *argv) {
    const char *usage = "usage: gpt2 WEIGHTS.safetensors PROMPTS.txt NEW_TOKENS [--fp16] [--no-graphs] [--no-fused] [--no-pdl] [--tunable] [--top-k K [--seed S]] [--tokens OUT.txt] [--logits OUT.f32] [--snapshot OUT.pickle]";
    Options o;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--fp16") {
            o.fp16 = true;
        } else if (a == "--no-graphs") {
            o.graphs = false;
        } else if (a == "--no-fused") {
            o.fused = false;
        } else if (a == "--no-pdl") {
            o.programmatic = false;
        } else if (a == "--tunable") {
            o.tunable = true;
        } else if (a == "--top-k" || a == "--seed") {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a number; " + usage);
            char *end = nullptr;
            unsigned long long v = std::strtoull(argv[++i], &end, 10);
            if (*end != '\0' || argv[i][0] == '-' || (a == "--top-k" && (v < 1 || v > 1024)))
                throw std::invalid_argument(a + " " + argv[i] + " is not " + (a == "--top-k" ? "1..1024" : "a seed"));
            if (a == "--top-k") o.top_k = static_cast<int>(v);
            else o.seed = v;
        } else if (a == "--tokens" || a == "--logits" || a == "--snapshot") {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a file name; " + usage);
            (a == "--tokens" ? o.tokens_out : a == "--logits" ? o.logits_out : o.snapshot) = argv[++i];
        } else if (!a.empty() && a[0] == '-') {
            throw std::invalid_argument("unknown option " + a + "; " + usage);
        } else {
            positional.push_back(a);
        }
    }
    if (positional.size() != 3) throw std::invalid_argument(usage);
    o.weights = positional[0];
    o.prompts = positional[1];
    char *end = nullptr;
    long n = std::strtol(positional[2].c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > 1023) throw std::invalid_argument("NEW_TOKENS must be 1..1023, not " + positional[2]);
    o.new_tokens = static_cast<int>(n);
    return o;
}

/** Prompts as token ids, one prompt per line, of any lengths (left_pad aligns them). */
inline std::vector<std::vector<int>> read_prompts(const std::string &path, int vocab) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("cannot open the prompts file " + path);
    std::vector<std::vector<int>> prompts;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::vector<int> ids;
        long id;
        while (words >> id) {
            if (id < 0 || id >= vocab) throw std::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary");
            ids.push_back(static_cast<int>(id));
        }
        if (!words.eof()) throw std::invalid_argument("a prompt line holds something other than token ids: " + line);
        if (!ids.empty()) prompts.push_back(std::move(ids));
    }
    if (prompts.empty() || prompts.size() > 16) throw std::invalid_argument("1 to 16 prompts are needed, not " + std::to_string(prompts.size()));
    return prompts;
}

/** Prompts of unequal lengths, left-padded so that every prompt ends at position
 *  `length` - 1 and generation starts at one position for all (as transformers'
 *  generate does with left padding and an attention mask): the token ids by position
 *  (`total` positions x rows, position-major; padding and the positions to generate
 *  hold 0), and each row's first real position (its padding is masked out of
 *  attention, and its positions count from there). */
struct PaddedPrompts {
    int length = 0;
    std::vector<int> by_position, starts;
};

inline PaddedPrompts left_pad(const std::vector<std::vector<int>> &prompts, int new_tokens, int max_positions) {
    PaddedPrompts p;
    for (const auto &prompt : prompts) p.length = std::max(p.length, static_cast<int>(prompt.size()));
    if (p.length + new_tokens > max_positions)
        throw std::invalid_argument("the longest prompt (" + std::to_string(p.length) + ") and " + std::to_string(new_tokens) + " new tokens exceed " +
                                    std::to_string(max_positions) + " positions");
    const size_t rows = prompts.size();
    p.by_position.assign(static_cast<size_t>(p.length + new_tokens) * rows, 0);
    for (size_t r = 0; r < rows; r++) {
        const int start = p.length - static_cast<int>(prompts[r].size());
        p.starts.push_back(start);
        for (size_t i = 0; i < prompts[r].size(); i++) p.by_position[(start + i) * rows + r] = prompts[r][i];
    }
    return p;
}

} // namespace gpt2
