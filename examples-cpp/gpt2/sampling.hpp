// Top-k sampling, the host reference of the engine's kernel (kernels.hpp,
// sample_top_k): the k largest logits in (value descending, index ascending)
// order, softmax over them, and the first whose running sum reaches u times the
// total, for one uniform u in [0, 1) per row from a seeded generator.
#pragma once

#include <cmath>
#include <vector>

namespace gpt2 {

inline int sample_top_k(const float *logits, int vocab, int k, float u) {
    std::vector<int> chosen;
    for (int pick = 0; pick < k && pick < vocab; pick++) {
        int best = -1;
        for (int i = 0; i < vocab; i++) {
            bool after = chosen.empty() || logits[i] < logits[chosen.back()] || (logits[i] == logits[chosen.back()] && i > chosen.back());
            if (after && (best < 0 || logits[i] > logits[best])) best = i;
        }
        chosen.push_back(best);
    }
    float top = logits[chosen[0]], total = 0;
    for (int i : chosen) total += std::exp(logits[i] - top);
    float target = u * total, running = 0;
    for (int i : chosen) {
        running += std::exp(logits[i] - top);
        if (running >= target) return i;
    }
    return chosen.back();
}

} // namespace gpt2
