// The safetensors format: an 8-byte little-endian header size N, N bytes of JSON
// naming each tensor's dtype, shape and [begin, end) byte range in the data that
// follows. The header is parsed with nlohmann/json and checked whole before any
// tensor is used: every range inside the data, every size equal to its shape's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpt2 {

struct TensorInfo {
    std::string dtype;           // "F32", "F16", ...
    std::vector<int64_t> shape;  // row-major
    uint64_t begin = 0, end = 0; // byte range in the data section
    uint64_t elements() const;
};

class SafeTensors {
public:
    /** Reads and checks `path`'s header; throws std::runtime_error saying what is wrong. */
    static SafeTensors open(const std::string &path);
    /** Parses a header (the JSON text) for a data section of `data_size` bytes. */
    static SafeTensors parse(const std::string &header, uint64_t data_size);

    /** The tensor `name`; throws if it is missing, or if `dtype` / `shape` differ from those given. */
    const TensorInfo &at(const std::string &name, const std::string &dtype, const std::vector<int64_t> &shape) const;
    const std::map<std::string, TensorInfo> &tensors() const { return tensors_; }
    /** Where the data section starts in the file. */
    uint64_t data_offset() const { return data_offset_; }
    uint64_t data_size() const { return data_size_; }

private:
    std::map<std::string, TensorInfo> tensors_;
    uint64_t data_offset_ = 0, data_size_ = 0;
};

/** Bytes per element of a safetensors dtype; 0 for one this engine does not read. */
unsigned dtype_size(const std::string &dtype);

} // namespace gpt2
