// Runs the PopART ops of popops_ext/poplar on the host graph: builds the
// op's graph once per attribute set and input shapes (cached), writes the
// inputs, runs, reads the outputs.
#pragma once

#include <poplar/Engine.hpp>
#include <poplar/Graph.hpp>
#include <poplar/Program.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace snn {
namespace hostgraph {

using Attributes = std::map<std::string, double>;

struct HostArray {
  poplar::Type type;
  std::vector<std::size_t> shape;
  std::vector<std::uint8_t> data;
};

// A forward op and its grad op's wiring (PopART's gradInputInfo and
// gradOutToNonGradIn).
struct GradInput {
  enum class Kind { GradOut, In, Out } kind; // a forward output's gradient, input or output
  unsigned index;                            // of the forward op
};
struct OpSignature {
  std::string op;
  std::vector<std::string> inputs, outputs;
  std::string gradOp;
  std::vector<GradInput> gradInputs;           // the grad op's inputs, in order
  std::vector<std::pair<unsigned, unsigned>> gradOutputs; // grad op output -> forward input
};
const std::vector<OpSignature> &opSignatures();

// The op's graph: inputs in, outputs out (the grow() of the op's Opx).
std::vector<poplar::Tensor> growOp(const std::string &op, poplar::Graph &graph,
                                   poplar::program::Sequence &prog, const Attributes &attributes,
                                   const std::vector<poplar::Tensor> &inputs,
                                   const std::string &name = "");

class OpRunner {
public:
  explicit OpRunner(bool checkOutputReads) : checkOutputReads_(checkOutputReads) {}
  std::vector<HostArray> run(const std::string &op, const Attributes &attributes,
                             const std::vector<HostArray> &inputs);

private:
  struct Built {
    std::unique_ptr<poplar::Graph> graph;
    std::unique_ptr<poplar::Engine> engine;
    std::vector<poplar::Tensor> outputs;
  };
  Built &built(const std::string &op, const Attributes &attributes,
               const std::vector<HostArray> &inputs);
  bool checkOutputReads_;
  std::map<std::string, Built> cache_;
  std::vector<std::string> order_; // least recently built first
};

} // namespace hostgraph
} // namespace snn
