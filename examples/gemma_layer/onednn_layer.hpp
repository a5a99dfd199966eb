// The same layer with oneDNN's matmul primitive (bf16 weights, pre-packed outside the timed call when oneDNN
// prefers another layout), the gate with oneDNN's post-ops: eltwise_gelu_tanh, then binary_mul by the up
// projection computed first. Where this oneDNN has no bf16 matmul for the CPU (2.x on AVX2 CPUs), the weights
// are widened to f32 once, outside the timed call, and oneDNN reads twice the bytes: the label says so.
// Built only when CMake finds oneDNN (GEMMA_LAYER_HAVE_ONEDNN).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layer.hpp"

namespace onednn {

class Layer {
 public:
  // Weight copies to rotate over, the activations to read and write, oneDNN's (OpenMP) thread count.
  Layer(const std::vector<const layer::Weights*>& copies, layer::Activations& acts, int threads);
  ~Layer();
  void run(int copy);
  const std::string& label() const;
  // oneDNN 2.x has no f32 x bf16 matmul: then the call rounds the activations to bf16 first.
  bool bf16_activations() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onednn
