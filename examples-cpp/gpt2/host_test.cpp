// What of the engine runs without a GPU: the safetensors reader on files this test
// writes (good ones, and each kind of damage), and the command line and prompts
// checks. The engine itself runs in the GPU suite (gpu/run.sh).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "options.hpp"
#include "safetensors.hpp"
#include "sampling.hpp"

static int checks = 0, failures = 0;
#define CHECK(cond)                                                        \
    do {                                                                   \
        ++checks;                                                          \
        if (!(cond)) {                                                     \
            ++failures;                                                    \
            std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
        }                                                                  \
    } while (0)

static std::string dir;

static std::string write_file(const std::string &name, const std::string &header, const std::vector<char> &data, long long claimed = -1) {
    std::string path = dir + "/" + name;
    std::ofstream out(path, std::ios::binary);
    unsigned long long n = claimed < 0 ? header.size() : static_cast<unsigned long long>(claimed);
    for (int i = 0; i < 8; i++) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header;
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    return path;
}

template <class F>
static bool throws_with(F f, const char *text) {
    try {
        f();
    } catch (const std::exception &e) {
        if (std::strstr(e.what(), text)) return true;
        std::printf("  threw '%s', expected '%s'\n", e.what(), text);
        return false;
    }
    std::printf("  no error, expected '%s'\n", text);
    return false;
}

int main(int argc, char **argv) {
    dir = argc > 1 ? argv[1] : ".";
    std::vector<char> data(24 + 8);
    for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i * 7);
    const std::string good = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"F16","shape":[4],"data_offsets":[24,32]}})";
    gpt2::SafeTensors st = gpt2::SafeTensors::open(write_file("good.safetensors", good, data));
    CHECK(st.tensors().size() == 2 && st.data_offset() == 8 + good.size() && st.data_size() == 32);
    const gpt2::TensorInfo &a = st.at("a", "F32", {2, 3});
    CHECK(a.begin == 0 && a.end == 24 && a.elements() == 6);
    CHECK(st.at("b", "F16", {4}).begin == 24);
    CHECK(throws_with([&] { st.at("a", "F16", {2, 3}); }, "not F16"));
    CHECK(throws_with([&] { st.at("a", "F32", {3, 2}); }, "expected shape"));
    CHECK(throws_with([&] { st.at("c", "F32", {1}); }, "no tensor 'c'"));

    // Damage of each kind is refused with a message that says which.
    CHECK(throws_with([&] { gpt2::SafeTensors::open(dir + "/missing.safetensors"); }, "cannot open"));
    CHECK(throws_with([&] { gpt2::SafeTensors::open(write_file("huge.safetensors", good, data, 1ll << 40)); }, "header size"));
    CHECK(throws_with([&] { gpt2::SafeTensors::open(write_file("text.safetensors", "not json at all", data)); }, "not a JSON object"));
    CHECK(throws_with([&] { gpt2::SafeTensors::parse(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 16); }, "outside the data"));
    CHECK(throws_with([&] { gpt2::SafeTensors::parse(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,24]}})", 24); }, "bytes for its shape"));
    CHECK(throws_with([&] { gpt2::SafeTensors::parse(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,1]}})", 24); }, "does not know"));
    CHECK(throws_with([&] { gpt2::SafeTensors::parse(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 24); }, "bad dimension"));
    CHECK(throws_with([&] { gpt2::SafeTensors::parse(R"({"a":{"dtype":"F32","shape":[2]}})", 24); }, "lacks"));
    CHECK(throws_with([&] { gpt2::SafeTensors::parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 24); }, "outside the data"));

    // Top-k sampling's reference: the k largest in (value, then lower index) order,
    // chosen by where u falls in their softmax's running sum.
    {
        const float logits[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 3.0f};
        CHECK(gpt2::sample_top_k(logits, 6, 1, 0.99f) == 5);   // k = 1 is greedy
        CHECK(gpt2::sample_top_k(logits, 6, 3, 0.0f) == 5);    // u = 0: the largest
        // k = 3 keeps 5, 1, 3 (the tie 2.0 by index); weights e^0, e^-1, e^-1.
        float total = 1.0f + 2.0f * std::exp(-1.0f);
        CHECK(gpt2::sample_top_k(logits, 6, 3, 0.99f / total) == 5);
        CHECK(gpt2::sample_top_k(logits, 6, 3, 1.01f / total) == 1);
        CHECK(gpt2::sample_top_k(logits, 6, 3, (1.0f + std::exp(-1.0f) + 0.01f) / total) == 3);
        CHECK(gpt2::sample_top_k(logits, 6, 3, 0.999999f) == 3);
        CHECK(gpt2::sample_top_k(logits, 6, 99, 0.5f) >= 0);   // k past the vocabulary: all of it
        // Over many uniforms the picks follow the softmax of the kept logits.
        int counts[6] = {0};
        for (int i = 0; i < 100000; i++) counts[gpt2::sample_top_k(logits, 6, 2, (i + 0.5f) / 100000)]++;
        float want5 = 1.0f / (1.0f + std::exp(-1.0f));
        CHECK(std::fabs(counts[5] / 100000.0f - want5) < 1e-3f && counts[5] + counts[1] == 100000);
    }

    // The command line and the prompts file.
    const char *ok[] = {"gpt2", "w.safetensors", "p.txt", "128", "--fp16", "--logits", "l.f32", "--tunable", "--snapshot", "s.pickle"};
    gpt2::Options o = gpt2::parse_options(10, ok);
    CHECK(o.weights == "w.safetensors" && o.new_tokens == 128 && o.fp16 && o.graphs && o.logits_out == "l.f32" && o.tokens_out.empty());
    CHECK(o.tunable && o.snapshot == "s.pickle");
    CHECK(o.fused && o.programmatic);
    const char *eager[] = {"gpt2", "w", "p", "4", "--no-graphs", "--top-k", "40", "--seed", "7", "--no-fused", "--no-pdl"};
    gpt2::Options sampled = gpt2::parse_options(11, eager);
    CHECK(!sampled.graphs && sampled.top_k == 40 && sampled.seed == 7 && !sampled.fused && !sampled.programmatic);
    const char *bad_k[] = {"gpt2", "w", "p", "4", "--top-k", "0"}, *bad_seed[] = {"gpt2", "w", "p", "4", "--seed", "-3"};
    CHECK(throws_with([&] { gpt2::parse_options(6, bad_k); }, "1..1024"));
    CHECK(throws_with([&] { gpt2::parse_options(6, bad_seed); }, "not a seed"));
    const char *no_count[] = {"gpt2", "w", "p"}, *bad_count[] = {"gpt2", "w", "p", "12x"}, *unknown[] = {"gpt2", "w", "p", "4", "--fast"},
               *dangling[] = {"gpt2", "w", "p", "4", "--tokens"};
    CHECK(throws_with([&] { gpt2::parse_options(3, no_count); }, "usage"));
    CHECK(throws_with([&] { gpt2::parse_options(4, bad_count); }, "NEW_TOKENS"));
    CHECK(throws_with([&] { gpt2::parse_options(5, unknown); }, "unknown option --fast"));
    CHECK(throws_with([&] { gpt2::parse_options(5, dangling); }, "needs a file name"));
    {
        std::ofstream(dir + "/prompts.txt") << "464 2068 7586\n\n318 257 1332\n";
        auto prompts = gpt2::read_prompts(dir + "/prompts.txt", 50257);
        CHECK(prompts.size() == 2 && prompts[1][2] == 1332);
        // Unequal lengths are left-padded: each prompt ends at the same position.
        std::ofstream(dir + "/uneven.txt") << "1 2 3\n4 5\n6\n";
        auto uneven = gpt2::read_prompts(dir + "/uneven.txt", 50257);
        gpt2::PaddedPrompts padded = gpt2::left_pad(uneven, 2, 1024);
        CHECK(padded.length == 3 && padded.starts == std::vector<int>({0, 1, 2}));
        CHECK(padded.by_position == std::vector<int>({1, 0, 0, 2, 4, 0, 3, 5, 6, 0, 0, 0, 0, 0, 0}));
        CHECK(gpt2::left_pad(prompts, 1021, 1024).starts == std::vector<int>({0, 0}));
        CHECK(throws_with([&] { gpt2::left_pad(uneven, 1022, 1024); }, "exceed 1024 positions"));
        std::ofstream(dir + "/outside.txt") << "1 50257\n";
        CHECK(throws_with([&] { gpt2::read_prompts(dir + "/outside.txt", 50257); }, "outside the vocabulary"));
        std::ofstream(dir + "/words.txt") << "hello world\n";
        CHECK(throws_with([&] { gpt2::read_prompts(dir + "/words.txt", 50257); }, "other than token ids"));
    }
    std::printf("gpt2_host_test: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
