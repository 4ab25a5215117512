#include "safetensors.hpp"

#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace gpt2 {

unsigned dtype_size(const std::string &dtype) {
    if (dtype == "F32" || dtype == "I32") return 4;
    if (dtype == "F16" || dtype == "BF16") return 2;
    if (dtype == "F64" || dtype == "I64") return 8;
    return 0;
}

uint64_t TensorInfo::elements() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
}

static std::runtime_error bad(const std::string &what) { return std::runtime_error("safetensors: " + what); }

SafeTensors SafeTensors::parse(const std::string &header, uint64_t data_size) {
    nlohmann::json doc = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) throw bad("the header is not a JSON object");
    SafeTensors st;
    st.data_size_ = data_size;
    for (auto &[name, entry] : doc.items()) {
        if (name == "__metadata__") continue;
        if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
            throw bad("tensor '" + name + "' lacks dtype, shape or data_offsets");
        const auto &dtype = entry["dtype"], &shape = entry["shape"], &offsets = entry["data_offsets"];
        if (!dtype.is_string() || !shape.is_array() || !offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
            !offsets[1].is_number_unsigned())
            throw bad("tensor '" + name + "' has a malformed dtype, shape or data_offsets");
        TensorInfo t;
        t.dtype = dtype.get<std::string>();
        uint64_t elements = 1;
        for (const auto &d : shape) {
            if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40)) throw bad("tensor '" + name + "' has a bad dimension");
            t.shape.push_back(d.get<int64_t>());
            elements *= d.get<uint64_t>();
            if (elements > (1ull << 40)) throw bad("tensor '" + name + "' is too large");
        }
        t.begin = offsets[0].get<uint64_t>();
        t.end = offsets[1].get<uint64_t>();
        unsigned size = dtype_size(t.dtype);
        if (size == 0) throw bad("tensor '" + name + "' has dtype " + t.dtype + ", which this reader does not know");
        if (t.begin > t.end || t.end > data_size) throw bad("tensor '" + name + "' lies outside the data section");
        if (t.end - t.begin != elements * size) throw bad("tensor '" + name + "' has " + std::to_string(t.end - t.begin) + " bytes for its shape's " +
                                                         std::to_string(elements * size));
        st.tensors_.emplace(name, std::move(t));
    }
    return st;
}

SafeTensors SafeTensors::open(const std::string &path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw bad("cannot open " + path);
    const uint64_t file_size = static_cast<uint64_t>(in.tellg());
    unsigned char size_bytes[8];
    in.seekg(0);
    if (file_size < 8 || !in.read(reinterpret_cast<char *>(size_bytes), 8)) throw bad(path + " is shorter than its header size");
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; i--) header_size = header_size << 8 | size_bytes[i];
    if (header_size > 100u << 20 || header_size > file_size - 8) throw bad(path + " has a header size of " + std::to_string(header_size) + " bytes");
    std::string header(header_size, '\0');
    if (!in.read(&header[0], static_cast<std::streamsize>(header_size))) throw bad("cannot read " + path + "'s header");
    SafeTensors st = parse(header, file_size - 8 - header_size);
    st.data_offset_ = 8 + header_size;
    return st;
}

const TensorInfo &SafeTensors::at(const std::string &name, const std::string &dtype, const std::vector<int64_t> &shape) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw bad("no tensor '" + name + "'");
    if (it->second.dtype != dtype || it->second.shape != shape) throw bad("tensor '" + name + "' is not " + dtype + " of the expected shape");
    return it->second;
}

} // namespace gpt2
