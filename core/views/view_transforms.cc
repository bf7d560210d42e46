#include "core/views/view_transforms.h"

#include <cstring>
#include <vector>

#include "core/views/quantize.h"

namespace tensorfs {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

void StoreFloats(std::span<const float> values, std::span<std::byte> out) {
  TENSORFS_CHECK(out.size() == values.size() * sizeof(float));
  std::memcpy(out.data(), values.data(), out.size());  // little endian, as the format
}

std::span<uint8_t> Bytes(std::span<std::byte> out) { return {reinterpret_cast<uint8_t*>(out.data()), out.size()}; }

// Codes (one part) and an F32 scale per unit (the other).
class ScaledTransform : public Transform {
 protected:
  using Transform::Transform;
  // Scales for `n` elements, in a per-thread buffer.
  std::span<float> Scales(uint64_t n) const {
    thread_local std::vector<float> scales;
    scales.resize(CeilDiv(n, unit()));
    return scales;
  }
  uint64_t ScaleBytes(uint64_t n) const { return CeilDiv(n, unit()) * sizeof(float); }
};

class Nf4Transform final : public ScaledTransform {
 public:
  Nf4Transform(TransformSource source, uint64_t blocksize, uint64_t segment_source_bytes)
      : ScaledTransform(std::move(source), 2, blocksize, segment_source_bytes, "nf4") {}

 private:
  uint64_t PartBytes(int part, uint64_t n) const override { return part == 0 ? (n + 1) / 2 : ScaleBytes(n); }
  void Emit(std::span<const float> x, std::span<const std::span<std::byte>> out) const override {
    std::span<float> scales = Scales(x.size());
    quant::QuantizeNf4(x, unit(), Bytes(out[0]), scales);
    StoreFloats(scales, out[1]);
  }
};

class Blockwise8Transform final : public ScaledTransform {
 public:
  Blockwise8Transform(TransformSource source, uint64_t blocksize, uint64_t segment_source_bytes)
      : ScaledTransform(std::move(source), 2, blocksize, segment_source_bytes, "blockwise8") {}

 private:
  uint64_t PartBytes(int part, uint64_t n) const override { return part == 0 ? n : ScaleBytes(n); }
  void Emit(std::span<const float> x, std::span<const std::span<std::byte>> out) const override {
    std::span<float> scales = Scales(x.size());
    quant::QuantizeBlockwise8(x, unit(), Bytes(out[0]), scales);
    StoreFloats(scales, out[1]);
  }
};

class Int8RowsTransform final : public ScaledTransform {
 public:
  Int8RowsTransform(TransformSource source, uint64_t row_elements, uint64_t segment_source_bytes)
      : ScaledTransform(std::move(source), 2, row_elements, segment_source_bytes, "int8rows") {}

 private:
  uint64_t PartBytes(int part, uint64_t n) const override { return part == 0 ? n : ScaleBytes(n); }
  void Emit(std::span<const float> x, std::span<const std::span<std::byte>> out) const override {
    std::span<float> scales = Scales(x.size());
    auto* codes = reinterpret_cast<int8_t*>(out[0].data());
    const uint64_t row = unit();
    for (uint64_t r = 0; r < scales.size(); ++r) {
      scales[r] = quant::QuantizeRowInt8(x.subspan(r * row, row), {codes + r * row, row});
    }
    StoreFloats(scales, out[1]);
  }
};

class CastTransform final : public Transform {
 public:
  CastTransform(TransformSource source, Dtype to, uint64_t segment_source_bytes)
      : Transform(std::move(source), 1, 1, segment_source_bytes, to == Dtype::BF16 ? "bf16" : "f16"), to_(to) {
    TENSORFS_CHECK(to == Dtype::BF16 || to == Dtype::F16);
  }

 private:
  uint64_t PartBytes(int, uint64_t n) const override { return 2 * n; }
  void Emit(std::span<const float> x, std::span<const std::span<std::byte>> out) const override {
    quant::EncodeHalf(to_, x, out[0]);
  }
  const Dtype to_;
};

}  // namespace

std::shared_ptr<const Transform> MakeNf4Transform(TransformSource source, uint64_t blocksize,
                                                  uint64_t segment_source_bytes) {
  return std::make_shared<Nf4Transform>(std::move(source), blocksize, segment_source_bytes);
}

std::shared_ptr<const Transform> MakeBlockwise8Transform(TransformSource source, uint64_t blocksize,
                                                         uint64_t segment_source_bytes) {
  return std::make_shared<Blockwise8Transform>(std::move(source), blocksize, segment_source_bytes);
}

std::shared_ptr<const Transform> MakeInt8RowsTransform(TransformSource source, uint64_t row_elements,
                                                       uint64_t segment_source_bytes) {
  return std::make_shared<Int8RowsTransform>(std::move(source), row_elements, segment_source_bytes);
}

std::shared_ptr<const Transform> MakeCastTransform(TransformSource source, Dtype to, uint64_t segment_source_bytes) {
  return std::make_shared<CastTransform>(std::move(source), to, segment_source_bytes);
}

}  // namespace tensorfs
