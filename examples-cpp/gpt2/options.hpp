// The engine's command line and prompts file, checked before any GPU work.
#pragma once

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
    int top_k = 0;        // 0: greedy; else seeded top-k sampling
    unsigned long long seed = 0;
};

inline Options parse_options(int argc, const char *const *argv) {
    const char *usage = "usage: gpt2 WEIGHTS.safetensors PROMPTS.txt NEW_TOKENS [--fp16] [--no-graphs] [--tunable] [--top-k K [--seed S]] [--tokens OUT.txt] [--logits OUT.f32] [--snapshot OUT.pickle]";
    Options o;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--fp16") {
            o.fp16 = true;
        } else if (a == "--no-graphs") {
            o.graphs = false;
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

/** Prompts as token ids, one prompt per line; all of one length (no padding here). */
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
    for (const auto &p : prompts)
        if (p.size() != prompts[0].size()) throw std::invalid_argument("every prompt must have the same number of tokens");
    return prompts;
}

} // namespace gpt2
